#!/usr/bin/env python3
"""Issue 7's goals against a kinfer-gpu-bench JSON document.

  python3 bench/gpu/goals.py bench.json [--json OUT]

Prints one line a goal (measured, goal, met) and, where the bench timed both decode attention
kernels, the shared-K/V kernel's speed-up over the per-head one; --json writes the same as an
object (scripts/gpu-check.sh embeds it in summary.json). Exit status 0 whether or not the goals
are met; 1 when the document cannot be read.
"""
import argparse
import json
import sys

# (key, bench result name, batch, goal in tokens/s), from issue 7 (H200, SmolLM2-135M-Instruct).
# The decode goals twice: each step waiting for the one before on the host, and chained (the
# engine's way on CUDA: each step launched behind the one before).
GOALS = [
    ("single_stream_decode", "single_stream", 1, 1500.0),
    ("single_stream_decode_chained", "single_stream_chained", 1, 1500.0),
    ("decode_batch_256", "decode_batch", 256, 200000.0),
    ("decode_batch_256_chained", "decode_batch_chained", 256, 200000.0),
    ("prefill_2048", "prefill_2048", 1, 1000000.0),
    # Prefill with the tensor-core attention (off by default until a GPU run has checked it): the
    # default FMA attention alone needs 145 GFLOP a 2,048-token prompt on SmolLM2, 2.2 ms at the
    # H200's 67 TFLOP/s of FP32, more than the goal's 2.05 ms a prompt.
    ("prefill_2048_tc_attention", "prefill_2048_tc_attention", 1, 1000000.0),
]

# (key, shared-K/V result, per-head result, batch).
ATTENTION_PAIRS = [
    ("single_stream", "single_stream", "single_stream_per_head_attn", 1),
    ("single_stream_ctx2000", "single_stream_ctx2000", "single_stream_ctx2000_per_head_attn", 1),
    ("decode_batch_256", "decode_batch", "decode_batch_per_head_attn", 256),
]


def find(results, name, batch):
    for r in results:
        if r.get("name") == name and r.get("batch") == batch:
            return r
    return None


def evaluate(doc):
    results = doc.get("results", [])
    device = doc.get("device") or ""
    out = {"device": doc.get("device"), "goals": {}, "decode_attention_speedup": {},
           # The issue states its goals for an H200; on another card they are read all the same,
           # and this says whose figures they are.
           "goals_stated_for": "NVIDIA H200", "device_is_goals_device": "H200" in device}
    for key, name, batch, goal in GOALS:
        r = find(results, name, batch)
        measured = r.get("tokens_per_s") if r else None
        out["goals"][key] = {
            "goal_tokens_per_s": goal,
            "measured_tokens_per_s": measured,
            "met": measured is not None and measured >= goal,
            "tflops_per_s": r.get("tflops_per_s") if r else None,
            "gb_per_s": r.get("gb_per_s") if r else None,
        }
    for key, new, old, batch in ATTENTION_PAIRS:
        a, b = find(results, new, batch), find(results, old, batch)
        if a and b and b.get("tokens_per_s"):
            out["decode_attention_speedup"][key] = a["tokens_per_s"] / b["tokens_per_s"]
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json")
    ap.add_argument("--json", help="write the evaluation here")
    args = ap.parse_args(argv)
    try:
        with open(args.bench_json) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"goals: cannot read {args.bench_json}: {e}", file=sys.stderr)
        return 1
    ev = evaluate(doc)
    if not ev["device_is_goals_device"]:
        print(f"note: the goals are stated for an H200; these figures are from "
              f"{ev['device'] or 'an unnamed device'}")
    for key, g in ev["goals"].items():
        m = g["measured_tokens_per_s"]
        shown = "not measured" if m is None else f"{m:,.0f} tok/s"
        print(f"{key:26s} {shown:>18s}  goal {g['goal_tokens_per_s']:>11,.0f}  "
              f"{'met' if g['met'] else 'NOT met'}")
    for key, s in ev["decode_attention_speedup"].items():
        print(f"decode attention, shared K/V vs per head, {key}: {s:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(ev, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
