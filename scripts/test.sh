#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh) and runs every test: the C++ suites (ctest, all labels,
# slow ones included), the Python end-to-end tests (pytest, real openai client against a real
# kinfer-runtime), and a bounded libFuzzer run over the GGUF reader. Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/setup.sh || { echo "setup failed"; exit 1; }

mkdir -p build/test-results
rc=0
echo "== ctest (C++ unit, integration and model tests) =="
# Fast tests two at a time; the CUDA emulation's tests two at a time too (the emulator runs on one
# thread: two in parallel took 29 s where they took 15 + 29 s one after the other); tests that run
# the model one at a time, since each already uses both cores (its thread pool spins between jobs
# and must not share a core).
ctest --test-dir build --output-on-failure -j2 --timeout 900 -L unit \
  --output-junit "$ROOT/build/test-results/ctest-unit.xml" || rc=1
ctest --test-dir build --output-on-failure -j2 --timeout 1800 -L cudaemu -LE unit \
  --output-junit "$ROOT/build/test-results/ctest-cudaemu.xml" || rc=1
ctest --test-dir build --output-on-failure -j1 --timeout 1800 -LE 'unit|cudaemu' \
  --output-junit "$ROOT/build/test-results/ctest-model.xml" || rc=1

echo "== pytest (end to end: kinfer-runtime + openai client, curl-level HTTP, promtool) =="
KINFER_BIN_DIR="$ROOT/build/bin" KINFER_HELM="$ROOT/.tools/helm/helm" .venv/bin/python -m pytest tests/python -q \
  --junitxml="$ROOT/build/test-results/pytest.xml" || rc=1

echo "== fuzz (GGUF reader ${KINFER_FUZZ_SECONDS:-60} s, JSON Schema grammar ${KINFER_SCHEMA_FUZZ_SECONDS:-30} s, OpenAI protocol ${KINFER_OPENAI_FUZZ_SECONDS:-30} s) =="
if [ -x scripts/run-fuzz.sh ] || [ -f scripts/run-fuzz.sh ]; then
  bash scripts/run-fuzz.sh "${KINFER_FUZZ_SECONDS:-60}" || rc=1
fi

# One closing line over every runner's results.
.venv/bin/python scripts/summarize_junit.py build/test-results/*.xml || rc=1
exit $rc
