"""kinfer-bench: an open-loop load generator for any OpenAI-compatible server (issue 3, item 10).

  bench/kinfer-bench --base-url http://127.0.0.1:8080 [--model NAME]
      [--endpoint /v1/chat/completions | /v1/completions]
      [--request-rate R] [--burstiness B] [--arrival poisson|fixed] [--seed S]
      [--trace FILE [--time-scale S] [--length-scale L] [--trace-start N]]
      [--input-len N --output-len N] [--max-input-len N] [--max-output-len N]
      [--num-prompts N] [--duration S] [--max-concurrency C]
      [--goodput ttft:2000 tpot:200 [e2el:MS]] [--multi-turn]
      [--json out.json] [--plot out.png] [--header K:V ...] [--extra-body JSON]

Requests stream (SSE) and carry `max_tokens` = the output length and, unless --no-ignore-eos,
`ignore_eos: true` (kinfer-runtime, llama.cpp's server and vLLM honour it; a server that ignores
unknown fields stops at its end-of-sequence token instead). Metrics follow vLLM's
benchmark_serving (see metrics.py). Prompt text is MT-Bench cut to length (see workload.py).

--multi-turn: each of --num-prompts MT-Bench conversations sends turn 1 (max_tokens =
--output-len), then turn 2 with the whole conversation (turn 1, the reply, turn 2); the report
gives the TTFT of each turn separately: the second turn's is what prefix caching shortens.

Exit status: 0 when the run finished (even with failed requests: they are counted), 2 on bad
arguments, 1 when the server cannot be reached at all.
"""
import argparse
import asyncio
import datetime
import json
import math
import os
import pathlib
import sys
import time

from . import http_client, metrics, plot, workload


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="kinfer-bench", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080")
    ap.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    ap.add_argument("--endpoint", default="/v1/chat/completions",
                    choices=["/v1/chat/completions", "/v1/completions"])
    ap.add_argument("--request-rate", type=float, default=math.inf,
                    help="requests per second (default inf: all at once)")
    ap.add_argument("--burstiness", type=float, default=1.0,
                    help="Gamma shape of the gaps; 1 = Poisson (default)")
    ap.add_argument("--arrival", choices=["poisson", "fixed"], default="poisson",
                    help="poisson: Gamma(burstiness) gaps; fixed: one every 1/rate s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", help="replay a trace: AzureLLMInferenceTrace_*.csv or a JSONL "
                    "with timestamp (ms), input_length, output_length")
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="multiply the trace's arrival times (10 = ten times slower)")
    ap.add_argument("--length-scale", type=float, default=1.0,
                    help="multiply the trace's input and output lengths")
    ap.add_argument("--trace-start", type=int, default=0, help="skip the trace's first N rows")
    ap.add_argument("--input-len", type=int, default=128, help="prompt tokens (without a trace)")
    ap.add_argument("--output-len", type=int, default=64, help="max_tokens (without a trace)")
    ap.add_argument("--max-input-len", type=int, help="cap on input lengths (after scaling)")
    ap.add_argument("--max-output-len", type=int, help="cap on output lengths (after scaling)")
    ap.add_argument("--num-prompts", type=int, help="number of requests (or conversations)")
    ap.add_argument("--duration", type=float,
                    help="stop sending new requests after this many seconds")
    ap.add_argument("--drain-timeout", type=float, default=120.0,
                    help="after the last send, wait at most this long for replies; the rest are "
                    "cancelled and counted as 'unfinished'")
    ap.add_argument("--request-timeout", type=float, default=600.0)
    ap.add_argument("--max-concurrency", type=int, help="at most this many requests in flight")
    ap.add_argument("--goodput", nargs="*", default=[], metavar="KEY:MS",
                    help="SLOs for goodput: ttft, tpot, e2el, itl in ms, e.g. ttft:2000 tpot:200")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    ap.add_argument("--no-server-tokenize", dest="server_tokenize", action="store_false",
                    help="estimate token counts instead of calling /tokenize")
    ap.add_argument("--prompt-salt", default="",
                    help="start every prompt with '<salt> <n>: ' so that no two requests of this "
                    "run, nor of runs with other salts, share a prefix beyond the chat template "
                    "(adds a few tokens to each prompt)")
    ap.add_argument("--multi-turn", action="store_true")
    ap.add_argument("--first-question", type=int, default=0,
                    help="MT-Bench question that request (or conversation) 0 starts from; runs "
                    "that must not share prompts (a server's prefix cache) use disjoint ranges")
    ap.add_argument("--header", action="append", default=[], metavar="K:V",
                    help="extra request header (repeatable)")
    ap.add_argument("--extra-body", default="{}", help="JSON object merged into each request")
    ap.add_argument("--label", default="", help="a name for this run in the JSON and the plot")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--plot", help="write a PNG here")
    ap.add_argument("--save-text", action="store_true", help="keep generated text in the JSON")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.num_prompts is None and args.duration is None and not args.trace:
        ap.error("give --num-prompts and/or --duration (or a --trace)")
    if args.duration is not None and args.request_rate == math.inf and not args.trace:
        if args.num_prompts is None:
            ap.error("--duration needs a finite --request-rate (or --num-prompts)")
    if args.burstiness <= 0:
        ap.error("--burstiness must be > 0")
    if args.multi_turn and args.endpoint != "/v1/chat/completions":
        ap.error("--multi-turn needs the chat endpoint")
    try:
        args.slos = metrics.parse_goodput(args.goodput)
        args.extra = json.loads(args.extra_body)
        assert isinstance(args.extra, dict)
    except (ValueError, AssertionError) as e:
        ap.error(f"bad --goodput or --extra-body: {e}")
    args.headers = {}
    for h in args.header:
        k, sep, v = h.partition(":")
        if not sep:
            ap.error(f"bad --header {h!r}: use K:V")
        args.headers[k.strip()] = v.strip()
    return args


def plan(args):
    """[(send time s, input_len, output_len)] for every request (or conversation)."""
    if args.trace:
        rows = workload.load_trace(args.trace, limit=args.num_prompts, start=args.trace_start)
        rows = workload.scale_trace(rows, args.time_scale, args.length_scale,
                                    args.max_input_len, args.max_output_len)
        if args.duration is not None:
            rows = [r for r in rows if r[0] < args.duration]
        return rows
    n = args.num_prompts
    if n is None:  # duration-bound: enough arrivals to cover it, then cut
        n = int(args.request_rate * args.duration * 2 + 50)
    times = workload.arrival_times(n, args.request_rate, args.arrival, args.burstiness, args.seed)
    if args.duration is not None:
        times = [t for t in times if t < args.duration]
    il = min(args.input_len, args.max_input_len or args.input_len)
    ol = min(args.output_len, args.max_output_len or args.output_len)
    return [(t, il, ol) for t in times]


class Runner:
    def __init__(self, args, model, prompts):
        self.args = args
        self.model = model
        self.prompts = prompts
        self.url = args.base_url.rstrip("/") + args.endpoint
        self.chat = args.endpoint.endswith("chat/completions")
        self.t0 = None

    def body(self, prompt_or_messages, max_tokens):
        a = self.args
        b = {"model": self.model, "max_tokens": max_tokens, "stream": True,
             "stream_options": {"include_usage": True}, "temperature": a.temperature}
        if a.ignore_eos:
            b["ignore_eos"] = True
        if self.chat:
            msgs = prompt_or_messages
            if isinstance(msgs, str):
                msgs = [{"role": "user", "content": msgs}]
            b["messages"] = msgs
        else:
            b["prompt"] = prompt_or_messages
        b.update(a.extra)
        return b

    async def send(self, body, rec):
        """Streams one request and fills rec (times in seconds)."""
        parser = http_client.SSEParser()
        text, chunks, usage = [], 0, None
        st = time.perf_counter()
        rec["sent_s"] = st - self.t0
        last = None
        resp = None
        try:
            resp = await http_client.request("POST", self.url, body, self.args.headers)
            if resp.status != 200:
                rec["error"] = str(resp.status)
                try:  # read the error body so that the server sees a clean close
                    await asyncio.wait_for(resp.read(), 5)
                except (http_client.HttpError, asyncio.TimeoutError):
                    pass
                return
            done = False
            async for ts, data in resp.iter_body():
                for payload in parser.feed(data):
                    if payload.strip() == "[DONE]":
                        done = True
                        continue
                    try:
                        obj = json.loads(payload)
                    except ValueError:
                        rec["error"] = "bad_event"
                        return
                    if obj.get("error"):
                        rec["error"] = "stream_error"
                        return
                    if obj.get("usage"):
                        usage = obj["usage"]
                    choices = obj.get("choices") or []
                    piece = None
                    if choices:
                        c = choices[0]
                        piece = (c.get("delta") or {}).get("content") if self.chat else c.get("text")
                    if piece:
                        chunks += 1
                        text.append(piece)
                        if rec["ttft"] is None:
                            rec["ttft"] = ts - st
                        else:
                            rec["itl"].append(ts - last)
                        last = ts
                if done:
                    break
            end = time.perf_counter()
            if not done:
                rec["error"] = "incomplete_stream"
                return
            rec["e2el"] = end - st
            if usage and isinstance(usage.get("completion_tokens"), int):
                rec["output_tokens"] = usage["completion_tokens"]
                rec["output_token_source"] = "usage"
            else:
                rec["output_tokens"] = chunks
                rec["output_token_source"] = "chunks"
            if usage and isinstance(usage.get("prompt_tokens"), int):
                rec["prompt_tokens_server"] = usage["prompt_tokens"]
                if rec["input_tokens"] is None:  # multi-turn: no target length
                    rec["input_tokens"] = usage["prompt_tokens"]
            rec["text"] = "".join(text)
            if rec["ttft"] is None:
                rec["error"] = "no_output"
                return
            rec["ok"] = True
        except http_client.HttpError as e:
            rec["error"] = "connect_error" if resp is None else "incomplete_stream"
            rec["detail"] = str(e)[:200]
        except asyncio.TimeoutError:
            rec["error"] = "timeout"
        finally:
            if resp is not None:
                resp.close()

    def new_record(self, i, scheduled, in_len, out_len, turn=None):
        r = {"index": i, "scheduled_s": scheduled, "sent_s": None, "input_tokens": in_len,
             "max_tokens": out_len, "ok": False, "error": "unfinished", "ttft": None, "itl": [],
             "e2el": None, "output_tokens": 0, "output_token_source": None}
        if turn is not None:
            r["turn"] = turn
        return r

    async def one(self, i, spec, sem, records):
        t, in_len, out_len = spec
        delay = self.t0 + t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if sem:
            await sem.acquire()
        try:
            if not self.args.multi_turn:
                rec = self.new_record(i, t, in_len, out_len)
                records.append(rec)
                prompt = self._prompts[i]
                await asyncio.wait_for(self.send(self.body(prompt, out_len), rec),
                                       self.args.request_timeout)
                return
            q = self.prompts.questions[(self.args.first_question + i) % len(self.prompts.questions)]
            r1 = self.new_record(i, t, None, out_len, turn=1)
            records.append(r1)
            msgs = [{"role": "user", "content": q["turns"][0]}]
            await asyncio.wait_for(self.send(self.body(msgs, out_len), r1),
                                   self.args.request_timeout)
            if not r1["ok"]:
                return
            r2 = self.new_record(i, time.perf_counter() - self.t0, None, out_len, turn=2)
            records.append(r2)
            msgs = msgs + [{"role": "assistant", "content": r1["text"]},
                           {"role": "user", "content": q["turns"][1]}]
            await asyncio.wait_for(self.send(self.body(msgs, out_len), r2),
                                   self.args.request_timeout)
        except asyncio.TimeoutError:
            for r in records:
                if r["index"] == i and not r["ok"] and r["error"] == "unfinished":
                    r["error"] = "timeout"
        finally:
            if sem:
                sem.release()

    async def run(self, specs):
        a = self.args
        if not a.multi_turn:  # all prompt text made before the clock starts
            self._prompts = [await self.prompts.prompt(a.first_question + i, s[1])
                             for i, s in enumerate(specs)]
            if a.prompt_salt:
                self._prompts = [f"{a.prompt_salt} {i}: {p}" for i, p in enumerate(self._prompts)]
        sem = asyncio.Semaphore(a.max_concurrency) if a.max_concurrency else None
        records = []
        self.t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(self.one(i, s, sem, records)) for i, s in enumerate(specs)]
        last_send = specs[-1][0] if specs else 0.0
        if a.duration is not None:
            last_send = min(last_send, a.duration)
        deadline = self.t0 + last_send + a.drain_timeout
        pending = set(tasks)
        while pending:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            _, pending = await asyncio.wait(pending, timeout=left)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        ends = [r["sent_s"] + r["e2el"] for r in records if r["ok"]]
        duration = max(ends) if ends else time.perf_counter() - self.t0
        if pending:
            duration = time.perf_counter() - self.t0
        # requests never sent (cancelled before their time) still count as unfinished
        sent = {(r["index"], r.get("turn")) for r in records}
        for i, s in enumerate(specs):
            if (i, 1 if a.multi_turn else None) not in sent:
                records.append(self.new_record(i, s[0], s[1], s[2],
                                               turn=1 if a.multi_turn else None))
        records.sort(key=lambda r: (r["index"], r.get("turn") or 0))
        return records, duration


async def discover_model(base_url):
    st, body = await http_client.get_json(base_url.rstrip("/") + "/v1/models")
    if st != 200 or not body or not body.get("data"):
        raise http_client.HttpError(f"GET /v1/models answered {st}; pass --model")
    return body["data"][0]["id"]


def report_lines(res):
    s = res["summary"]
    out = [f"kinfer-bench {res['label'] or ''} {res['server']['base_url']} model={res['server']['model']}",
           f"  token counts: {res['token_counts']}; output tokens from: "
           f"{', '.join(s['output_token_source']) or '-'}",
           f"  requests {s['requests']}  completed {s['completed']}  failed {s['failed']}  "
           f"errors {s['errors'] or '{}'}",
           f"  duration {s['duration_s']:.2f} s  request throughput {s['request_throughput']:.3f}/s  "
           f"output {s['output_throughput']:.1f} tok/s  total {s['total_token_throughput']:.1f} tok/s"]
    if "goodput" in s:
        out.append(f"  goodput {s['goodput']:.3f} req/s under {s['slo_ms']} "
                   f"({s['good_requests']} good, attainment {s['slo_attainment']:.1%})")

    def row(name, d):
        if not d["count"]:
            return f"  {name:5s} -"
        return (f"  {name:5s} mean {d['mean']:9.1f}  median {d['median']:9.1f}  p90 {d['p90']:9.1f}"
                f"  p99 {d['p99']:9.1f} ms  (n={d['count']})")
    for k in ("ttft", "tpot", "itl", "e2el"):
        out.append(row(k.upper(), s[f"{k}_ms"]))
    for turn, ts in res.get("turns", {}).items():
        out.append(row(f"T{turn}", ts["ttft_ms"]).replace("  T", "  TTFT turn ", 1))
    return out


def write_plot(path, res):
    recs = [r for r in res["requests"] if r["ok"]]
    title = f"kinfer-bench {res['label']} {res['server']['model']}".strip()
    if res["config"]["multi_turn"]:
        series = []
        for turn in (1, 2):
            rr = [r for r in recs if r.get("turn") == turn]
            series.append({"label": f"turn {turn}", "x": [r["index"] for r in rr],
                           "y": [r["ttft"] * 1000 for r in rr], "dots": True})
        panels = [{"ylabel": "TTFT ms", "xlabel": "conversation", "series": series}]
    else:
        x = [r["sent_s"] for r in recs]
        panels = [
            {"ylabel": "TTFT ms", "xlabel": "send time s", "log_y": True,
             "hline": res["config"]["slos"].get("ttft"),
             "series": [{"label": "TTFT", "x": x, "y": [r["ttft"] * 1000 for r in recs],
                         "dots": True}]},
            {"ylabel": "TPOT ms", "xlabel": "send time s",
             "hline": res["config"]["slos"].get("tpot"),
             "series": [{"label": "TPOT", "x": x,
                         "y": [(metrics.tpot_of(r) or math.nan) * 1000 for r in recs],
                         "dots": True}]},
            {"ylabel": "E2E ms", "xlabel": "send time s", "log_y": True,
             "series": [{"label": "E2E", "x": x, "y": [r["e2el"] * 1000 for r in recs],
                         "dots": True}]},
        ]
    return plot.chart(path, title, panels)


async def amain(args):
    base = args.base_url.rstrip("/")
    try:
        model = args.model or await discover_model(base)
    except (http_client.HttpError, asyncio.TimeoutError, OSError) as e:
        print(f"kinfer-bench: cannot reach {base}: {e}", file=sys.stderr)
        return None
    prompts = workload.PromptMaker(workload.mt_bench_questions())
    if args.multi_turn:
        prompts.mode = "none needed (MT-Bench turns sent as they are)"
    else:
        await prompts.setup(base, use_server=args.server_tokenize)
    specs = plan(args)
    runner = Runner(args, model, prompts)
    records, duration = await runner.run(specs)
    cfg = {k: v for k, v in vars(args).items() if k not in ("extra_body",)}
    cfg["request_rate"] = None if args.request_rate == math.inf else args.request_rate
    res = {
        "tool": "kinfer-bench",
        "label": args.label,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "server": {"base_url": base, "model": model, "endpoint": args.endpoint},
        "token_counts": prompts.mode,
        "config": cfg,
        "summary": metrics.summarize(records, duration, args.slos),
    }
    if args.multi_turn:
        res["turns"] = {}
        for turn in (1, 2):
            rr = [r for r in records if r.get("turn") == turn]
            ts = metrics.summarize(rr, duration, args.slos)
            ts["prompt_tokens_server_mean"] = (
                sum(r.get("prompt_tokens_server", 0) for r in rr if r["ok"])
                / max(1, sum(1 for r in rr if r["ok"])))
            res["turns"][str(turn)] = ts
    for r in records:
        if not args.save_text:
            r.pop("text", None)
    res["requests"] = records
    return res


def main(argv=None):
    args = parse_args(argv)
    res = asyncio.run(amain(args))
    if res is None:
        return 1
    if args.plot:
        pathlib.Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        res["plot"] = {"path": args.plot, "renderer": write_plot(args.plot, res)}
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    if not args.quiet:
        print("\n".join(report_lines(res)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
