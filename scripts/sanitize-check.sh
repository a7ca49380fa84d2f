#!/usr/bin/env bash
# Sanitizer check of the HTTP servers (not part of scripts/test.sh: on 2 cores the build takes
# about 4 minutes for `thread` and 15 for `address`). Builds kinfer-runtime, kinfer-sidecar, kinfer-fake-upstream and the
# runtime's HTTP server test with ThreadSanitizer (`thread`, the default) or AddressSanitizer +
# UndefinedBehaviorSanitizer (`address`) into build-tsan/ or build-asan/, runs that test and the
# end-to-end tests that drive the servers (streaming, disconnects, shutdown, bad input, the
# sidecar in front of the runtime), and fails if a sanitizer reported anything.
#   scripts/sanitize-check.sh [thread|address]      after scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-thread}
case "$MODE" in
  thread) BUILD=$ROOT/build-tsan; FLAGS="-fsanitize=thread" ;;
  address) BUILD=$ROOT/build-asan; FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  *) echo "usage: $0 [thread|address]" >&2; exit 2 ;;
esac
LOGS=$BUILD/sanitizer-logs
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKINFER_ENABLE_CUDA=OFF \
  -DKINFER_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" >/dev/null
cmake --build "$BUILD" -j"${KINFER_BUILD_JOBS:-2}" \
  --target kinfer_http_server_test kinfer_choice_streams_test kinfer-runtime kinfer-sidecar \
  kinfer-fake-upstream
rm -rf "$LOGS" && mkdir -p "$LOGS"
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 log_path=$LOGS/report"
# Leaks are not judged: the servers exit from signal handlers with threads still holding memory.
export ASAN_OPTIONS="halt_on_error=0 detect_leaks=0 log_path=$LOGS/report"
export UBSAN_OPTIONS="halt_on_error=0 print_stacktrace=1 log_path=$LOGS/report"
rc=0
"$BUILD/bin/kinfer_http_server_test" || rc=1
"$BUILD/bin/kinfer_choice_streams_test" || rc=1
KINFER_BIN_DIR="$BUILD/bin" .venv/bin/python -m pytest -q \
  tests/python/test_openai_client.py tests/python/test_disconnect.py \
  tests/python/test_runtime_shutdown.py tests/python/test_http_errors.py \
  tests/python/test_sidecar_runtime.py tests/python/test_sidecar_proxy.py \
  tests/python/test_tools.py tests/python/test_responses_api.py || rc=1
if compgen -G "$LOGS/report*" >/dev/null; then
  echo "sanitize-check ($MODE): reports in $LOGS:" >&2
  grep -h -E "^(WARNING|ERROR|SUMMARY)|runtime error" "$LOGS"/report* | sort | uniq -c >&2
  rc=1
else
  echo "sanitize-check ($MODE): no sanitizer reports"
fi
exit $rc
