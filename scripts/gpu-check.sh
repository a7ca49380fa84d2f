#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine: build (CUDA, sm_90), the gpu tests, the benchmark.
#
#   scripts/gpu-check.sh --prepare          here (no GPU needed): fill the ignored .gpu/ folder
#                                            with what the device machine lacks (see below)
#   scripts/gpu-check.sh OUTDIR             on the GPU machine: build, test, bench; logs and JSON
#                                            into OUTDIR (at most 8 files); within ~8 minutes
#   scripts/gpu-check.sh OUTDIR --stash     on the GPU machine, first of two calls: keep the
#                                            carried second half of the model in /tmp and build
#
# Why .gpu/: the device tool sends the git working tree plus at most 64 MiB of carried ignored
# paths, and the bundled model (93.8 MiB) is ignored and too big. --prepare splits it
# (bench/gpu/gguf_pieces.py): .gpu/model/ holds its first 54 MB (header, tokenizer, embedding,
# 9 whole layers) and its 2 KB tail (output_norm); .gpu/rest/ the remaining 44 MB. It also packs
# GoogleTest's source (.gpu/googletest.tar.gz), in case the machine has no GTest.
#
#   one call:   carry [".gpu/model", ".gpu/googletest.tar.gz"], command: scripts/gpu-check.sh $OUT
#               -> tests on a 9-layer model of the real weights and tokenizer; benchmark on a
#                  30-layer model of the same shapes and types, its layers cycled from those 9
#   two calls:  1) carry [".gpu/rest", ".gpu/googletest.tar.gz"]: scripts/gpu-check.sh $OUT --stash
#               2) at once (the machine stays warm 30 s): carry [".gpu/model", ".gpu/googletest.tar.gz"]:
#                  scripts/gpu-check.sh $OUT    -> the whole bundled model, sha256-checked
#   A models/smollm2-135m-instruct-q4_1.gguf already there is used as is.
#
# Needs on the machine: bash, python3, cmake >= 3.22, g++, nvcc and cuBLAS (CUDA 13), ninja or
# make. Nothing else (no cpprest, yaml, spdlog: runtime/backend/cuda/standalone builds without).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
MODEL_NAME=smollm2-135m-instruct-q4_1.gguf
STASH=/tmp/kinfer-gpu

if [ "${1:-}" = "--prepare" ]; then
  src=models/$MODEL_NAME
  [ -f "$src" ] || { echo "gpu-check --prepare: $src not found (run scripts/setup.sh)"; exit 1; }
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >> .git/info/exclude; }
  rm -rf .gpu && mkdir -p .gpu/model .gpu/rest
  python3 bench/gpu/gguf_pieces.py split "$src" .gpu/model --head-bytes 54000000 || exit 1
  mv .gpu/model/model.rest .gpu/rest/model.rest
  cp .gpu/model/manifest.json .gpu/rest/manifest.json
  if [ -d /usr/src/googletest ]; then
    tar -C /usr/src -czf .gpu/googletest.tar.gz googletest || exit 1
  fi
  du -sh .gpu/* ; echo "tree that travels: $(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1)"
  exit 0
fi

OUT=${1:?usage: scripts/gpu-check.sh OUTDIR [--stash] | --prepare}
MODE=${2:-run}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=$ROOT/build-gpu
LOG_BUILD=$OUT/build.log
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
# The whole run fits GPU_CHECK_BUDGET seconds (default 560, inside the device call's 600 s): each
# step's timeout is its own limit or what is left less 20 s, and a step with under 15 s left is
# skipped, so that summary.json is always written and comes back.
BUDGET=${GPU_CHECK_BUDGET:-560}
step_timeout() {
  local left=$(( BUDGET - $(elapsed) - 20 ))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
say() { echo "[gpu-check +$(elapsed)s] $*" | tee -a "$LOG_BUILD"; }
: > "$LOG_BUILD"

# ---- the machine ------------------------------------------------------------------------------
say "machine: $(uname -m), $(nproc) cores"
{ nvidia-smi 2>&1 | head -20; command -v nvcc || ls /usr/local/cuda/bin/nvcc; } >> "$LOG_BUILD" 2>&1
export PATH=$PATH:/usr/local/cuda/bin
NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || { say "no nvcc on this machine"; exit 1; }
{ "$NVCC" --version | tail -2; cmake --version | head -1; g++ --version | head -1
  echo "cuBLAS: $(find -H /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu -maxdepth 1 -name 'libcublas*.so*' 2>/dev/null | head -4 | tr '\n' ' ')"
  command -v compute-sanitizer || true; } >> "$LOG_BUILD" 2>&1
GEN="Unix Makefiles"
command -v ninja >/dev/null 2>&1 && GEN=Ninja
JOBS=$(nproc)

# ---- the model --------------------------------------------------------------------------------
mkdir -p "$STASH"
if [ -f .gpu/rest/model.rest ]; then
  cp .gpu/rest/model.rest .gpu/rest/manifest.json "$STASH/" && say "stashed the model's second half in $STASH"
fi
if [ -f .gpu/googletest.tar.gz ] && [ ! -d "$STASH/googletest" ]; then
  tar -C "$STASH" -xzf .gpu/googletest.tar.gz
fi
GTEST_ARG=()
[ -d "$STASH/googletest" ] && GTEST_ARG=(-DKINFER_GTEST_SRC="$STASH/googletest")

MODEL=""
BENCH_MODEL=""
MODEL_NOTE=""
if [ "$MODE" != "--stash" ]; then
  # GPU_CHECK_IGNORE_MODELS=1 exercises the upload path on a machine that has models/.
  if [ -f "models/$MODEL_NAME" ] && [ -z "${GPU_CHECK_IGNORE_MODELS:-}" ]; then
    MODEL=$ROOT/models/$MODEL_NAME
    MODEL_NOTE="the bundled model"
  elif [ -f .gpu/model/model.head ] && [ -f "$STASH/model.rest" ]; then
    python3 bench/gpu/gguf_pieces.py join .gpu/model "$STASH/model.rest" "$STASH/$MODEL_NAME" >> "$LOG_BUILD" 2>&1 \
      && MODEL=$STASH/$MODEL_NAME && MODEL_NOTE="the bundled model (joined from two uploads, sha256 checked)"
  fi
  if [ -z "$MODEL" ] && [ -f .gpu/model/model.head ]; then
    python3 bench/gpu/gguf_pieces.py trim .gpu/model "$STASH/trimmed.gguf" >> "$LOG_BUILD" 2>&1 || exit 1
    python3 bench/gpu/gguf_pieces.py cycle "$STASH/trimmed.gguf" "$STASH/cycled.gguf" --layers 30 >> "$LOG_BUILD" 2>&1 || exit 1
    MODEL=$STASH/trimmed.gguf
    BENCH_MODEL=$STASH/cycled.gguf
    MODEL_NOTE="tests: the bundled model's first upload half (real weights, 9 of 30 layers); bench: 30 layers cycled from them (same shapes and types)"
  fi
  [ -n "$MODEL" ] || say "no model: the tests that need one will skip"
  [ -n "$BENCH_MODEL" ] || BENCH_MODEL=$MODEL
  say "model: ${MODEL:-none} ($MODEL_NOTE)"
fi

# ---- build ------------------------------------------------------------------------------------
say "configure ($GEN)"
cmake -S runtime/backend/cuda/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$NVCC" "${GTEST_ARG[@]}" >> "$LOG_BUILD" 2>&1 || { say "configure failed"; exit 1; }
say "build"
cmake --build "$BUILD" -j"$JOBS" --target cuda_kernels_test cuda_backend_test cpu_backend_test \
  backend_factory_test kinfer-gpu-bench kinfer-engine-overhead >> "$LOG_BUILD" 2>&1 || { say "build failed"; tail -40 "$LOG_BUILD"; exit 1; }
say "built"
if [ "$MODE" = "--stash" ]; then
  say "stash + build done; now the second call"
  exit 0
fi

# ---- tests and bench --------------------------------------------------------------------------
export KINFER_MODEL=${MODEL:-/nonexistent}
RC_TESTS=0
RC_BENCH=0
RC_ENGINE=0
RC_PDL=null  # the backend tests again with KINFER_CUDA_PDL=1: null when not run
SKIPPED_STEPS=""
# summary.json is written on any exit from here on (a step that fails or runs out of time too):
# the exit codes, the steps skipped for time, and the engine and goals JSON found so far.
write_summary() {
  local engine_null engine_cuda engine_nochain engine_interval4 engine_noahead engine_serial goals
  engine_null=$(cat "$STASH/engine_null.json" 2>/dev/null || echo null)
  engine_cuda=$(cat "$STASH/engine_cuda.json" 2>/dev/null || echo null)
  engine_nochain=$(cat "$STASH/engine_cuda_nochain.json" 2>/dev/null || echo null)
  engine_interval4=$(cat "$STASH/engine_cuda_interval4.json" 2>/dev/null || echo null)
  engine_noahead=$(cat "$STASH/engine_cuda_noahead.json" 2>/dev/null || echo null)
  engine_serial=$(cat "$STASH/engine_cuda_serial.json" 2>/dev/null || echo null)
  goals=$(cat "$STASH/goals.json" 2>/dev/null || echo null)
  cat > "$OUT/summary.json" <<JSON
{"tests_rc": $RC_TESTS, "bench_rc": $RC_BENCH, "engine_rc": $RC_ENGINE, "pdl_tests_rc": $RC_PDL, "seconds": $(elapsed), "budget": $BUDGET, "skipped_for_time": "${SKIPPED_STEPS# }", "model": "${MODEL}", "bench_model": "${BENCH_MODEL}", "note": "${MODEL_NOTE}", "git": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "engine_null": ${engine_null},
 "engine_cuda": ${engine_cuda},
 "engine_cuda_nochain": ${engine_nochain},
 "engine_cuda_interval4": ${engine_interval4},
 "engine_cuda_noahead": ${engine_noahead},
 "engine_cuda_serial": ${engine_serial},
 "goals": ${goals}}
JSON
}
rm -f "$STASH"/engine_*.json "$STASH/goals.json"
trap write_summary EXIT
# run_step NAME MAX_SECONDS CMD...: CMD under the budget's timeout, or skipped (rc 1) when too
# little is left.
run_step() {
  local name=$1 t
  t=$(step_timeout "$2")
  shift 2
  if [ "$t" -lt 15 ]; then
    say "skip $name: out of time (${BUDGET}s budget)"
    SKIPPED_STEPS="$SKIPPED_STEPS $name"
    return 1
  fi
  timeout "$t" "$@"
}

: > "$OUT/tests.log"
for t in cuda_kernels_test cuda_backend_test backend_factory_test; do
  say "test $t"
  run_step "$t" 180 "$BUILD/bin/$t" --gtest_output="json:$OUT/$t.json" >> "$OUT/tests.log" 2>&1 || RC_TESTS=1
done
grep -E '^\[  (PASSED  \] [0-9]+ test|SKIPPED \] [0-9]+ test|FAILED  \])' "$OUT/tests.log" | tee -a "$LOG_BUILD"
say "bench"
run_step kinfer-gpu-bench 150 "$BUILD/bin/kinfer-gpu-bench" --model "$BENCH_MODEL" --json "$OUT/bench.json" \
  --note "$MODEL_NOTE" > "$OUT/bench.log" 2>&1 || RC_BENCH=1
tee -a "$LOG_BUILD" < "$OUT/bench.log"
# The issue's three goals and the decode attention kernels' ratio, into bench.log and summary.json.
if [ -s "$OUT/bench.json" ]; then
  python3 bench/gpu/goals.py "$OUT/bench.json" --json "$STASH/goals.json" 2>&1 | tee -a "$OUT/bench.log" "$LOG_BUILD"
fi
# The engine over this machine's host alone (null) and over the GPU (cuda): its tables go to
# bench.log and its JSON into summary.json (8 files at most come back).
# cuda is the default engine: each step planned while the one before is computed and launched
# behind it (chained), its events pushed by the pump. cuda_nochain launches each step once the
# tokens of the one before are back (EngineOptions::chain_steps off): chaining's gain.
# cuda_noahead plans each step after the one before (EngineOptions::plan_ahead off): planning
# ahead's gain. cuda_serial pushes the events on the engine thread too (overlap_streaming off):
# the pump's gain. cuda_interval4 hands each stream its tokens 4 at a time
# (EngineOptions::stream_interval): fewer events and reader wake-ups a step. cuda_json has one
# request in 8 in JSON mode (device_json_mix): their masks added once the tokens are back, the
# grammar walked for real (the device draws within the mask).
for run in "null" "cuda" "cuda_nochain --chain off --modes device_greedy,device_sampled" \
  "cuda_interval4 --stream-interval 4 --modes device_greedy,device_sampled" \
  "cuda_noahead --plan-ahead off --modes device_greedy,device_sampled" \
  "cuda_serial --plan-ahead off --overlap off --modes device_greedy,device_sampled" \
  "cuda_json --modes device_sampled,device_json_mix"; do
  read -r name extra <<< "$run"
  b=${name%%_*}
  say "engine overhead: $name"
  echo "== kinfer-engine-overhead --backend $b $extra" >> "$OUT/bench.log"
  # shellcheck disable=SC2086  # $extra is words
  run_step "engine_$name" 60 "$BUILD/bin/kinfer-engine-overhead" --model "$BENCH_MODEL" --backend "$b" $extra \
    --batch 1,64,256 --tokens 128 --json "$STASH/engine_$name.json" >> "$OUT/bench.log" 2>&1 || RC_ENGINE=1
done
# With time to spare: the decode and prefill attention kernels under compute-sanitizer's race
# and barrier checkers (their split merge and shared-memory barriers), into tests.log. Not part
# of tests_rc: a finding is read from the log.
if command -v compute-sanitizer >/dev/null 2>&1 && [ "$(step_timeout 1000)" -ge 90 ]; then
  for tool in racecheck synccheck; do
    say "compute-sanitizer --tool $tool"
    echo "== compute-sanitizer --tool $tool cuda_kernels_test (attention)" >> "$OUT/tests.log"
    run_step "sanitizer_$tool" 60 compute-sanitizer --tool "$tool" --print-limit 20 \
      "$BUILD/bin/cuda_kernels_test" --gtest_filter='*Attention*:*Decode*' >> "$OUT/tests.log" 2>&1 \
      || echo "compute-sanitizer $tool: rc $?" >> "$OUT/tests.log"
  done
fi
# With time to spare: every backend test again with programmatic dependent launch on (off by
# default until hardware has checked it; docs/cuda.md), into tests.log and pdl_tests_rc.
if [ "$(step_timeout 1000)" -ge 60 ]; then
  say "test cuda_backend_test with KINFER_CUDA_PDL=1"
  echo "== KINFER_CUDA_PDL=1 cuda_backend_test" >> "$OUT/tests.log"
  RC_PDL=0
  KINFER_CUDA_PDL=1 run_step "cuda_backend_test_pdl" 120 "$BUILD/bin/cuda_backend_test" >> "$OUT/tests.log" 2>&1 \
    || RC_PDL=1
fi
say "done: tests rc $RC_TESTS, bench rc $RC_BENCH, engine rc $RC_ENGINE, pdl tests rc $RC_PDL"
[ $RC_TESTS -eq 0 ] && [ $RC_BENCH -eq 0 ]
