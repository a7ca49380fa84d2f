"""Serving metrics with vLLM benchmark_serving's definitions (see shared/design/anchors.md).

Per request (times from perf_counter; the clock starts when the request is sent, i.e. after any
`--max-concurrency` wait, as vLLM does):
- TTFT: send -> first streamed chunk that carries text.
- ITL: every gap between two consecutive text-bearing chunks (all requests' gaps pooled).
- E2E: send -> end of the stream.
- TPOT: (E2E - TTFT) / (output tokens - 1), for requests with more than one output token.
- output tokens: the server's `usage.completion_tokens` when it reports it, else the number of
  text-bearing chunks (the report says which).
Aggregates: mean, median, p90, p99 (linear interpolation between order statistics, numpy's
default), std; request throughput = completed / duration and output throughput = output tokens /
duration, duration = first send to last completion; goodput = completed requests meeting every
given SLO (ttft, tpot, e2el in ms, each per request) / duration.
"""
import math

PERCENTILES = (50, 90, 99)
SLO_KEYS = ("ttft", "tpot", "e2el", "itl")


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def describe(values_s):
    """Stats of a list of seconds, reported in milliseconds."""
    v = [x * 1000.0 for x in values_s]
    if not v:
        return {"count": 0, "mean": None, "median": None, "p90": None, "p99": None, "std": None,
                "min": None, "max": None}
    mean = sum(v) / len(v)
    return {"count": len(v), "mean": mean, "median": percentile(v, 50), "p90": percentile(v, 90),
            "p99": percentile(v, 99), "std": math.sqrt(sum((x - mean) ** 2 for x in v) / len(v)),
            "min": min(v), "max": max(v)}


def parse_goodput(items):
    """["ttft:2000", "tpot:200"] -> {"ttft": 2000.0, "tpot": 200.0} (milliseconds)."""
    slos = {}
    for item in items or []:
        for part in item.replace(",", " ").split():
            k, sep, v = part.partition(":")
            if not sep or k not in SLO_KEYS:
                raise ValueError(f"bad SLO {part!r}: use KEY:MS with KEY in {', '.join(SLO_KEYS)}")
            slos[k] = float(v)
    return slos


def tpot_of(r):
    if r["output_tokens"] > 1 and r["ttft"] is not None:
        return (r["e2el"] - r["ttft"]) / (r["output_tokens"] - 1)
    return None


def meets(r, slos):
    """Whether a completed request meets every SLO (ms). ITL: its largest gap."""
    checks = {"ttft": r["ttft"], "tpot": tpot_of(r), "e2el": r["e2el"],
              "itl": max(r["itl"]) if r["itl"] else None}
    for k, limit in slos.items():
        v = checks[k]
        if v is None:
            if k in ("tpot", "itl"):
                continue  # one-token replies have no TPOT or ITL
            return False
        if v * 1000.0 > limit:
            return False
    return True


def summarize(records, duration_s, slos=None):
    """Aggregates of a run. records: the per-request dicts made by the runner."""
    ok = [r for r in records if r["ok"]]
    errors = {}
    for r in records:
        if not r["ok"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    out_tokens = sum(r["output_tokens"] for r in ok)
    in_tokens = sum(r["input_tokens"] or 0 for r in ok)
    dur = max(duration_s, 1e-9)
    tpots = [t for t in (tpot_of(r) for r in ok) if t is not None]
    s = {
        "requests": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": dict(sorted(errors.items())),
        "duration_s": duration_s,
        "request_throughput": len(ok) / dur,
        "output_throughput": out_tokens / dur,
        "total_token_throughput": (out_tokens + in_tokens) / dur,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "ttft_ms": describe([r["ttft"] for r in ok if r["ttft"] is not None]),
        "tpot_ms": describe(tpots),
        "itl_ms": describe([g for r in ok for g in r["itl"]]),
        "e2el_ms": describe([r["e2el"] for r in ok]),
        "output_token_source": sorted({r["output_token_source"] for r in ok}),
    }
    if slos:
        good = sum(1 for r in ok if meets(r, slos))
        s["slo_ms"] = dict(slos)
        s["good_requests"] = good
        s["goodput"] = good / dur
        s["slo_attainment"] = good / len(records) if records else None
    return s
