#!/usr/bin/env bash
# The main job on the embedded default: sets up the machine (scripts/setup.sh: packages, model,
# build) and serves the bundled SmolLM2-135M-Instruct with kinfer-runtime on 127.0.0.1:8081.
#   KINFER_PORT=8081 KINFER_THREADS=2 scripts/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PORT=${KINFER_PORT:-8081}
MODEL=models/smollm2-135m-instruct-q4_1.gguf
cat <<MSG

kinfer-runtime is starting on http://127.0.0.1:${PORT} (Ctrl-C stops it). Try:

  curl -s http://127.0.0.1:${PORT}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"smollm2-135m-instruct-q4_1","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":32,"temperature":0}'

MSG
exec build/bin/kinfer-runtime --model "$MODEL" --host 127.0.0.1 --port "$PORT" \
  --threads "${KINFER_THREADS:-2}"
