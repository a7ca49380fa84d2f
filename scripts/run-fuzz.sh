#!/usr/bin/env bash
# Builds the fuzzers with clang (libFuzzer + ASan + UBSan) in build-fuzz and runs each on a
# scratch copy of its seed corpus: the GGUF reader for SECONDS (default 60) on fuzz/corpus/gguf,
# then the JSON Schema compiler and grammar recognizer for SCHEMA_SECONDS (default 30; env
# KINFER_SCHEMA_FUZZ_SECONDS) on fuzz/corpus/json_schema, where an input that takes over 10 s is
# a failure too (a hang), then the OpenAI protocol's translations (Responses API bodies, tool
# answers, chat bodies and stream events) for OPENAI_SECONDS (default 30; env
# KINFER_OPENAI_FUZZ_SECONDS) on fuzz/corpus/openai. Exits non-zero on a crash; the input is left
# in build-fuzz/artifacts/.
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
cmake --build "${BUILD}" --target gguf_fuzzer json_schema_fuzzer openai_fuzzer -j "${JOBS}"
SCHEMA_SECONDS="${KINFER_SCHEMA_FUZZ_SECONDS:-30}"
OPENAI_SECONDS="${KINFER_OPENAI_FUZZ_SECONDS:-30}"

ARTIFACTS="${BUILD}/artifacts"
mkdir -p "${ARTIFACTS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"

# run_fuzzer NAME CORPUS SECONDS [libFuzzer flags...]: NAME on a scratch copy of
# fuzz/corpus/CORPUS; exits the script with the fuzzer's status on a finding.
run_fuzzer() {
  local name="$1" corpus="$2" seconds="$3"
  shift 3
  local work="${BUILD}/corpus-work-${corpus}"
  rm -rf "${work}"
  mkdir -p "${work}"
  cp "${ROOT}/fuzz/corpus/${corpus}"/* "${work}/"
  set +e
  "${BUILD}/bin/${name}" "${work}" -max_total_time="${seconds}" -rss_limit_mb=2048 \
    -artifact_prefix="${ARTIFACTS}/${corpus}-" -print_final_stats=1 "$@"
  local rc=$?
  set -e
  if [[ ${rc} -ne 0 ]]; then
    echo "run-fuzz: ${name} failed (exit ${rc}); inputs in ${ARTIFACTS}/" >&2
    exit "${rc}"
  fi
  echo "run-fuzz: ${name}: no finding in ${seconds}s; corpus grew to $(ls "${work}" | wc -l) files"
}

run_fuzzer gguf_fuzzer gguf "${SECONDS_TO_RUN}" -max_len=4096 "$@"
run_fuzzer json_schema_fuzzer json_schema "${SCHEMA_SECONDS}" -max_len=2048 -timeout=10
run_fuzzer openai_fuzzer openai "${OPENAI_SECONDS}" -max_len=4096 -timeout=10
