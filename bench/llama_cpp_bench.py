#!/usr/bin/env python3
"""llama.cpp's side of the single-stream benchmark (llama-cpp-python, same GGUF as kinfer).

Measures, on the CPU with --threads threads (both n_threads and n_threads_batch):
  * prefill: a 512-token prompt (MT-Bench question text, cut to exactly 512 tokens) evaluated in one
    eval() call (n_batch = n_ubatch = 512) from an empty KV cache; best of --repeats after a warm-up;
  * decode: 128 tokens after a short prompt, greedy (argmax of the last logits), one token per eval()
    call; best of --repeats after a warm-up.
The clock (time.perf_counter) is around the eval() calls only, so the argmax and the loop's Python are
not counted; llama.cpp's own counters (llama_perf_context) for the best runs are reported too.

Prints one JSON object on stdout; progress goes to stderr.
Usage: python3 bench/llama_cpp_bench.py --model PATH [--threads 2] [--repeats 3]
"""
import argparse
import json
import os
import pathlib
import platform
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
PREFILL_TOKENS = 512
DECODE_TOKENS = 128
QUESTIONS = pathlib.Path("/work/shared/data/mt_bench/question.jsonl")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def prompt_text():
    """Real text: MT-Bench questions, both turns, joined until long enough."""
    parts = []
    if QUESTIONS.exists():
        for line in QUESTIONS.read_text().splitlines():
            if line.strip():
                parts.extend(json.loads(line)["turns"])
    if not parts:  # the data folder is optional; fall back to this file's own prose
        parts = [pathlib.Path(__file__).read_text()] * 8
    return "\n\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import llama_cpp

    llm = llama_cpp.Llama(model_path=args.model, n_ctx=1024, n_batch=PREFILL_TOKENS,
                          n_ubatch=PREFILL_TOKENS, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, verbose=False)
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()

    tokens = llm.tokenize(prompt_text().encode("utf-8"), add_bos=False, special=False)
    if len(tokens) < PREFILL_TOKENS:
        sys.exit(f"prompt text gives only {len(tokens)} tokens")
    prefill_prompt = tokens[:PREFILL_TOKENS]
    short_prompt = tokens[:16]

    def perf():
        p = llama_cpp.llama_perf_context(ctx)
        return {"t_p_eval_ms": p.t_p_eval_ms, "n_p_eval": p.n_p_eval, "t_eval_ms": p.t_eval_ms,
                "n_eval": p.n_eval}

    def fresh():
        llm.reset()  # n_tokens = 0: the next eval() removes every cached position first
        llm._ctx.kv_cache_clear()
        llama_cpp.llama_perf_context_reset(ctx)

    def prefill_once():
        fresh()
        t0 = time.perf_counter()
        llm.eval(prefill_prompt)
        llama_cpp.llama_synchronize(ctx)  # also where llama.cpp books its perf counters
        return time.perf_counter() - t0, perf()

    def decode_once():
        fresh()
        llm.eval(short_prompt)
        llama_cpp.llama_perf_context_reset(ctx)  # count the decode steps only
        in_eval = 0.0
        for _ in range(DECODE_TOKENS):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            tok = int(np.argmax(logits))
            t0 = time.perf_counter()
            llm.eval([tok])
            llama_cpp.llama_synchronize(ctx)
            in_eval += time.perf_counter() - t0
        return in_eval, perf()

    load_before = os.getloadavg()[0]
    prefill_once()  # warm-up: page in the weights, size the buffers
    prefill = [prefill_once() for _ in range(args.repeats)]
    for s, _ in prefill:
        log(f"prefill {PREFILL_TOKENS} tokens: {s * 1e3:.1f} ms = {PREFILL_TOKENS / s:.1f} tok/s")
    decode_once()
    decode = [decode_once() for _ in range(args.repeats)]
    for s, _ in decode:
        log(f"decode {DECODE_TOKENS} tokens: {s * 1e3:.1f} ms = {DECODE_TOKENS / s:.1f} tok/s")

    best_p = min(prefill, key=lambda r: r[0])
    best_d = min(decode, key=lambda r: r[0])
    pp, dp = best_p[1], best_d[1]
    result = {
        "engine": "llama.cpp",
        "version": f"llama-cpp-python {llama_cpp.__version__}",
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "repeats": args.repeats,
        "prefill_tokens": PREFILL_TOKENS,
        "prefill_tok_s": round(PREFILL_TOKENS / best_p[0], 2),
        "prefill_runs_ms": [round(s * 1e3, 2) for s, _ in prefill],
        "decode_tokens": DECODE_TOKENS,
        "decode_tok_s": round(DECODE_TOKENS / best_d[0], 2),
        "decode_runs_ms": [round(s * 1e3, 2) for s, _ in decode],
        # llama.cpp's own timers for the best runs (no Python at all inside them).
        "llama_perf": {
            "prefill_tok_s": round(pp["n_p_eval"] / (pp["t_p_eval_ms"] / 1e3), 2)
            if pp["t_p_eval_ms"] > 0 else None,
            "decode_tok_s": round(dp["n_eval"] / (dp["t_eval_ms"] / 1e3), 2)
            if dp["t_eval_ms"] > 0 else None,
            "prefill": pp,
            "decode": dp,
        },
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_1m_before": round(load_before, 2),
                    "loadavg_1m_after": round(os.getloadavg()[0], 2)},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
