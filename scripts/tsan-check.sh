#!/usr/bin/env bash
# ThreadSanitizer check of the HTTP servers (not part of scripts/test.sh: about 4 minutes of build
# on 2 cores). Builds kinfer-runtime, kinfer-sidecar, kinfer-fake-upstream and the runtime's HTTP
# server test with -fsanitize=thread into build-tsan/, runs that test and the end-to-end tests
# that drive the servers' threads (streaming, disconnects, shutdown, the sidecar in front of the
# runtime), and fails if ThreadSanitizer reported anything.
#   scripts/tsan-check.sh            after scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build-tsan
LOGS=$BUILD/tsan-logs
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKINFER_ENABLE_CUDA=OFF \
  -DKINFER_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build "$BUILD" -j"${KINFER_BUILD_JOBS:-2}" \
  --target kinfer_http_server_test kinfer-runtime kinfer-sidecar kinfer-fake-upstream
rm -rf "$LOGS" && mkdir -p "$LOGS"
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 log_path=$LOGS/report"
rc=0
"$BUILD/bin/kinfer_http_server_test" || rc=1
KINFER_BIN_DIR="$BUILD/bin" .venv/bin/python -m pytest -q \
  tests/python/test_openai_client.py tests/python/test_disconnect.py \
  tests/python/test_runtime_shutdown.py tests/python/test_http_errors.py \
  tests/python/test_sidecar_runtime.py tests/python/test_sidecar_proxy.py || rc=1
if compgen -G "$LOGS/report*" >/dev/null; then
  echo "tsan-check: ThreadSanitizer reports in $LOGS:" >&2
  grep -h "WARNING: ThreadSanitizer" "$LOGS"/report* | sort | uniq -c >&2
  rc=1
else
  echo "tsan-check: no ThreadSanitizer reports"
fi
exit $rc
