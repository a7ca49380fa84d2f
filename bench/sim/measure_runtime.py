#!/usr/bin/env python3
"""Measure kinfer-runtime's own service curve for kinfer-sim (issue 6, item 4).

Starts kinfer-runtime on the bundled model and, for each (prompt tokens P, batch B) of the grid,
sends B requests of P prompt tokens and O output tokens at once with kinfer-bench
(/v1/completions, greedy, ignore_eos, cache_prompt false and a salt per point, so no prompt hits
the prefix cache). From the replies:

  prompt_time (ms) = the slowest of the B TTFTs: the time to prefill all B prompts together (the
                     engine cuts them into --max-batch-tokens chunks; the first requests' first
                     decode steps share those steps)
  token_time (ms)  = the median gap between tokens over all B streams: one decode step of a
                     batch of B (the gaps while prompts are still being prefilled are fewer than
                     half when O >= 2 x the prefill steps)

Each point is measured --repeats times and its row keeps the best (the lowest prompt_time and
the lowest token_time of the repeats, each on its own; e2e_time is their mean): on a machine
shared with other work, other processes only ever make a step slower, so the best of a few is
the closest to what the engine itself takes (kinfer-forward-bench reports the best of its repeats
for the same reason). Every repeat is listed in the comments. The rows are written in
splitwise-sim's perf_model.csv format (model, hardware, prompt_size, batch_size, token_size,
peak_power, average_power, prompt_time, token_time, e2e_time, tensor_parallel; the power columns
are 0: not measured), preceded by '#' comment lines that say how, where and when, so that
kinfer-sim loads it with --perf-model FILE --model NAME --hardware NAME --tp 1.

  python3 bench/sim/measure_runtime.py [--runtime build-sim/bin/kinfer-runtime] [--model GGUF]
      [--out bench/sim/perf_kinfer_runtime_cpu.csv] [--threads 2] [--repeats 2]
      [--prefill 32,128,256,512,1024] [--batch 1,2,4,8,16] [--batch-prompt 128]
      [--output-len 48] [--hardware NAME]

Benchmarks on a shared machine are noisy: the load average before and after each point is
written beside it in the comments.
"""
import argparse
import datetime
import json
import os
import pathlib
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "kinfer-bench"
MODEL = ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"
HEADER = ("model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,"
          "token_time,e2e_time,tensor_parallel")
sys.path.insert(0, str(ROOT))
from bench.run_single_stream import cpu_model  # noqa: E402


def loadavg():
    try:
        return " / ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_runtime(given):
    if given:
        return pathlib.Path(given)
    for d in ("build-sim", "build", "build-main"):
        p = ROOT / d / "bin" / "kinfer-runtime"
        if p.exists():
            return p
    sys.exit("kinfer-runtime not found: build it (cmake --build build-sim --target kinfer-runtime) "
             "or pass --runtime")


def wait_ready(port, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"kinfer-runtime exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("kinfer-runtime not ready in time")


def one_point(port, prompt, batch, output, salt):
    """Returns (prompt_time_ms, token_time_ms, e2e_ms) for B requests of P tokens sent at once."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, str(BENCH), "--base-url", f"http://127.0.0.1:{port}",
           "--endpoint", "/v1/completions", "--input-len", str(prompt), "--output-len", str(output),
           "--num-prompts", str(batch), "--max-concurrency", str(batch), "--prompt-salt", salt,
           "--extra-body", json.dumps({"cache_prompt": False}), "--request-timeout", "600",
           "--json", out, "--quiet"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    res = json.loads(pathlib.Path(out).read_text())
    os.unlink(out)
    recs = res["requests"]
    bad = [r for r in recs if not r["ok"]]
    if bad:
        sys.exit(f"P={prompt} B={batch}: {len(bad)} requests failed: {bad[0].get('error')}")
    ttft = max(r["ttft"] for r in recs) * 1e3
    gaps = [g for r in recs for g in r["itl"]]
    itl = statistics.median(gaps) * 1e3
    e2e = statistics.mean(r["e2el"] for r in recs) * 1e3
    return ttft, itl, e2e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", help="kinfer-runtime binary (default: build*/bin/kinfer-runtime)")
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--out", default=str(ROOT / "bench" / "sim" / "perf_kinfer_runtime_cpu.csv"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefill", default="32,128,256,512,1024",
                    help="prompt lengths measured at batch 1 (the prefill curve)")
    ap.add_argument("--batch", default="1,2,4,8,16",
                    help="batch sizes measured at --batch-prompt tokens (the decode curve)")
    ap.add_argument("--batch-prompt", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=48)
    ap.add_argument("--model-name", default="smollm2-135m-q4_1",
                    help="the rows' model column (kinfer-sim --model)")
    ap.add_argument("--hardware", default="cpu-2t", help="the rows' hardware column (--hardware)")
    ap.add_argument("--runtime-flag", action="append", default=[],
                    help="more kinfer-runtime flags (repeat), e.g. --runtime-flag=--batch-invariant=false")
    args = ap.parse_args()

    rt = find_runtime(args.runtime)
    port = free_port()
    rt_cmd = [str(rt), "--model", args.model, "--port", str(port), "--threads", str(args.threads),
              "--ctx-size", "2048", "--kv-cache-tokens", "65536", "--log-level", "warn"] + args.runtime_flag
    grid = [(p, 1) for p in map(int, args.prefill.split(","))]
    grid += [(args.batch_prompt, b) for b in map(int, args.batch.split(",")) if b > 1]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    start = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    comments = [
        f"kinfer-runtime's measured service curve for kinfer-sim (bench/sim/measure_runtime.py).",
        f"Measured {start} on {cpu_model()}, {os.cpu_count()} CPUs (shared with other work: load",
        f"averages 1/5/15 min per point below), repo HEAD {head}.",
        "Server: " + " ".join("PORT" if c == str(port) else shlex.quote(
            os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c) for c in rt_cmd),
        f"Each row: B requests of P prompt tokens sent at once (kinfer-bench, /v1/completions,",
        f"{args.output_len} output tokens, ignore_eos, cache_prompt false); prompt_time = the slowest",
        f"TTFT (ms), token_time = the median gap between tokens (ms), each the best of {args.repeats}",
        f"repeats (listed below); e2e_time = the repeats' mean request time (ms).",
        f"Load it: kinfer-sim --perf-model THIS --model {args.model_name} --hardware {args.hardware} --tp 1",
    ]
    rows, notes = [], []
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(rt_cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(port, proc)
            one_point(port, 64, 2, 8, "warmup")  # first-touch of weights and buffers
            for p, b in grid:
                got = []
                for r in range(args.repeats):
                    before = loadavg()
                    got.append(one_point(port, p, b, args.output_len, f"cal-{p}-{b}-{r}"))
                    after = loadavg()
                    notes.append(f"P={p} B={b} repeat {r}: prompt {got[-1][0]:.1f} ms, step "
                                 f"{got[-1][1]:.2f} ms; load {before} -> {after}")
                    print(notes[-1], flush=True)
                ttft = min(g[0] for g in got)
                itl = min(g[1] for g in got)
                e2e = statistics.mean(g[2] for g in got)
                rows.append(f"{args.model_name},{args.hardware},{p},{b},{args.output_len},0,0,"
                            f"{ttft:.2f},{itl:.2f},{e2e:.1f},1")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    text = "".join(f"# {c}\n" for c in comments + notes) + HEADER + "\n" + "\n".join(rows) + "\n"
    pathlib.Path(args.out).write_text(text)
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
