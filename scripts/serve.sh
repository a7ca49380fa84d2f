#!/usr/bin/env bash
# The main job on the embedded default: one pod's stack on this machine. Sets up the machine
# (scripts/setup.sh: packages, model, build), starts kinfer-runtime serving the bundled
# SmolLM2-135M-Instruct on 127.0.0.1:8081, then kinfer-sidecar in front of it on 127.0.0.1:8080.
#   KINFER_PORT=8080 KINFER_RUNTIME_PORT=8081 KINFER_THREADS=2 KINFER_MAX_RUNNING=16 scripts/serve.sh
# KINFER_SIDECAR_CONFIG=FILE gives the sidecar a config (default: its built-in defaults, except
# admission.max_concurrency = KINFER_MAX_RUNNING, the runtime's batch, as docs/sidecar.md asks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PORT=${KINFER_PORT:-8080}
RUNTIME_PORT=${KINFER_RUNTIME_PORT:-8081}
MAX_RUNNING=${KINFER_MAX_RUNNING:-16}
MODEL=models/smollm2-135m-instruct-q4_1.gguf

build/bin/kinfer-runtime --model "$MODEL" --host 127.0.0.1 --port "$RUNTIME_PORT" \
  --threads "${KINFER_THREADS:-2}" --max-running "$MAX_RUNNING" &
RUNTIME_PID=$!
SIDECAR_PID=""
GENERATED_CONFIG=""
stop() {
  [ -n "$SIDECAR_PID" ] && kill -TERM "$SIDECAR_PID" 2>/dev/null && wait "$SIDECAR_PID" 2>/dev/null
  kill -TERM "$RUNTIME_PID" 2>/dev/null && wait "$RUNTIME_PID" 2>/dev/null
  if [ -n "$GENERATED_CONFIG" ]; then rm -f "$GENERATED_CONFIG"; fi
  exit 0
}
trap stop INT TERM

for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:${RUNTIME_PORT}/ready" >/dev/null && break
  kill -0 "$RUNTIME_PID" 2>/dev/null || { echo "kinfer-runtime exited" >&2; exit 1; }
  sleep 0.1
done

SIDECAR_ARGS=(--listen "127.0.0.1:${PORT}" --upstream "http://127.0.0.1:${RUNTIME_PORT}")
SIDECAR_CONFIG=${KINFER_SIDECAR_CONFIG:-}
if [ -z "$SIDECAR_CONFIG" ]; then
  # The sidecar lets through as many requests as the runtime batches; below that it would queue
  # (and shed) work the runtime has room for.
  SIDECAR_CONFIG=$(mktemp "${TMPDIR:-/tmp}/kinfer-sidecar-XXXXXX.yaml")
  GENERATED_CONFIG=$SIDECAR_CONFIG
  printf 'admission:\n  max_concurrency: %s\n' "$MAX_RUNNING" >"$SIDECAR_CONFIG"
fi
SIDECAR_ARGS+=(--config "$SIDECAR_CONFIG")
build/bin/kinfer-sidecar "${SIDECAR_ARGS[@]}" &
SIDECAR_PID=$!

cat <<MSG

kinfer is serving: kinfer-sidecar on http://127.0.0.1:${PORT} in front of kinfer-runtime on
http://127.0.0.1:${RUNTIME_PORT} (Ctrl-C stops both). Try:

  curl -s http://127.0.0.1:${PORT}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"smollm2-135m-instruct-q4_1","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":32,"temperature":0}'

Queue and latency signals: curl -s http://127.0.0.1:${PORT}/stats   Metrics: /metrics

MSG
wait "$SIDECAR_PID"
kill -TERM "$RUNTIME_PID" 2>/dev/null && wait "$RUNTIME_PID" 2>/dev/null
if [ -n "$GENERATED_CONFIG" ]; then rm -f "$GENERATED_CONFIG"; fi
