#!/usr/bin/env bash
# Builds the GGUF fuzzer with clang (libFuzzer + ASan + UBSan) in build-fuzz and runs it for
# SECONDS (default 60) on a scratch copy of fuzz/corpus/gguf. Exits non-zero on a crash; the
# crashing input is left in build-fuzz/artifacts/.
#
#   scripts/run-fuzz.sh [SECONDS] [extra libFuzzer flags...]
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
cmake --build "${BUILD}" --target gguf_fuzzer -j "${JOBS}"

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
echo "run-fuzz: no crash in ${SECONDS_TO_RUN}s; corpus grew to $(ls "${WORK}" | wc -l) files"
