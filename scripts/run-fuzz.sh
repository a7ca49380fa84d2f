#!/usr/bin/env bash
# Builds the fuzzers with clang (libFuzzer + ASan + UBSan) in build-fuzz and runs each on a
# scratch copy of its seed corpus: the GGUF reader for SECONDS (default 60) on fuzz/corpus/gguf,
# then the JSON Schema compiler and grammar recognizer for SCHEMA_SECONDS (default 30; env
# KINFER_SCHEMA_FUZZ_SECONDS) on fuzz/corpus/json_schema, where an input that takes over 10 s is
# a failure too (a hang). Exits non-zero on a crash; the input is left in build-fuzz/artifacts/.
#
#   scripts/run-fuzz.sh [SECONDS] [extra libFuzzer flags for the GGUF fuzzer...]
set -euo pipefail

SECONDS_TO_RUN="${1:-60}"
shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ROOT}/build-fuzz"
JOBS="${JOBS:-2}"

SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
CC=clang CXX=clang++ cmake -S "${ROOT}" -B "${BUILD}" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKINFER_ONLY_GGUF=ON \
  -DCMAKE_C_FLAGS="${SAN}" \
  -DCMAKE_CXX_FLAGS="${SAN}" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
# fuzz/CMakeLists.txt adds -fsanitize=fuzzer to the fuzzer's own link (a global -fsanitize=fuzzer
# would give CMake's compiler checks a second main()).
cmake --build "${BUILD}" --target gguf_fuzzer json_schema_fuzzer -j "${JOBS}"
SCHEMA_SECONDS="${KINFER_SCHEMA_FUZZ_SECONDS:-30}"

WORK="${BUILD}/corpus-work"
ARTIFACTS="${BUILD}/artifacts"
rm -rf "${WORK}"
mkdir -p "${WORK}" "${ARTIFACTS}"
cp "${ROOT}"/fuzz/corpus/gguf/* "${WORK}/"

export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
set +e
"${BUILD}/bin/gguf_fuzzer" "${WORK}" \
  -max_total_time="${SECONDS_TO_RUN}" \
  -max_len=4096 \
  -rss_limit_mb=2048 \
  -artifact_prefix="${ARTIFACTS}/" \
  -print_final_stats=1 \
  "$@"
rc=$?
set -e
if [[ ${rc} -ne 0 ]]; then
  echo "run-fuzz: gguf_fuzzer failed (exit ${rc}); inputs in ${ARTIFACTS}/" >&2
  exit "${rc}"
fi
echo "run-fuzz: gguf_fuzzer: no crash in ${SECONDS_TO_RUN}s; corpus grew to $(ls "${WORK}" | wc -l) files"

SWORK="${BUILD}/corpus-work-json-schema"
rm -rf "${SWORK}"
mkdir -p "${SWORK}"
cp "${ROOT}"/fuzz/corpus/json_schema/* "${SWORK}/"
set +e
"${BUILD}/bin/json_schema_fuzzer" "${SWORK}" \
  -max_total_time="${SCHEMA_SECONDS}" \
  -max_len=2048 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -artifact_prefix="${ARTIFACTS}/schema-" \
  -print_final_stats=1
rc=$?
set -e
if [[ ${rc} -ne 0 ]]; then
  echo "run-fuzz: json_schema_fuzzer failed (exit ${rc}); inputs in ${ARTIFACTS}/" >&2
  exit "${rc}"
fi
echo "run-fuzz: json_schema_fuzzer: no crash or hang in ${SCHEMA_SECONDS}s; corpus grew to $(ls "${SWORK}" | wc -l) files"
