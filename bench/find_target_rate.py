#!/usr/bin/env python3
"""find_target_rate: measure one pod's request rate at the TTFT SLO and recommend the
InferenceService's `spec.autoscaling.targetRequestsPerSecondPerReplica` (docs/autoscaling.md,
"Setting the target").

  python3 bench/find_target_rate.py --base-url http://POD:8080 --slo-ttft 2
      [--attainment 0.99] [--draws 3] [--num-prompts 200] [--fraction 1.1]
      [--trace FILE [--length-scale L] | --input-len N --output-len N]
      [--start-rate 1] [--precision 0.05] [--max-rate 10000] [--json out.json]
      [any kinfer-bench flag after --, e.g. -- --endpoint /v1/completions --header K:V]

Point it at ONE pod (its sidecar, or the runtime itself), not at a Service: the rate of one pod
is what the autoscaler multiplies by the replica count.

What it does, as kinfer-sim calibrates a simulated replica (docs/simulator.md):
  * A probe sends --num-prompts requests at Poisson arrivals of a given rate with kinfer-bench
    (open loop, streaming, each prompt salted so that the prefix cache serves none of them) and
    passes when at least --attainment of them (the first 10% left out as warm-up) got their
    first token within --slo-ttft; a failed request counts as a miss.
  * A draw brackets the highest passing rate by doubling or halving from --start-rate, then
    bisects until the bracket is within --precision of it. Each draw uses its own arrival and
    prompt-length seed.
  * Over --draws draws it reports the mean rate and its standard error, and recommends
    --fraction x (mean - 2 x standard error, but not below the lowest draw), rounded down to 3
    significant digits: the low end of the measurement, since a target set too high costs SLO attainment and one set too low
    only replica-hours (docs/benchmarks.md, "The goal over 80 seeds").

A probe takes about num-prompts / rate seconds, and the server must be otherwise idle. Exit
status: 0 with a recommendation, 1 when the server cannot be reached or no rate down to
--min-rate meets the SLO, 2 on bad arguments.
"""
import argparse
import asyncio
import datetime
import json
import math
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.serving import kinfer_bench  # noqa: E402

WARMUP_FRACTION = 0.1


def attainment(records, slo_s, warmup_fraction=WARMUP_FRACTION):
    """Share of the requests after the warm-up whose first token came within slo_s. Records are
    kinfer-bench's (ordered by index; a failed or unfinished request counts as a miss)."""
    rest = [r for r in records if r["index"] >= int(len(records) * warmup_fraction)]
    if not rest:
        return 0.0
    met = sum(1 for r in rest if r["ok"] and r["ttft"] is not None and r["ttft"] <= slo_s)
    return met / len(rest)


def find_max_rate(probe, start=1.0, precision=0.05, min_rate=1e-3, max_rate=1e4):
    """The highest rate at which probe(rate) is True, to within `precision` (relative), or 0 when
    none down to min_rate is. probe is taken to be monotone (True below some rate, False
    above). Returns (rate, [(rate, passed)] in probing order)."""
    probes = []

    def check(r):
        ok = bool(probe(r))
        probes.append((r, ok))
        return ok

    lo, hi = 0.0, None
    if check(start):
        lo = start
        r = start * 2
        while r <= max_rate:
            if not check(r):
                hi = r
                break
            lo = r
            r *= 2
        if hi is None:  # passes everywhere it was allowed to look
            return lo, probes
    else:
        hi = start
        r = start / 2
        while r >= min_rate:
            if check(r):
                lo = r
                break
            hi = r
            r /= 2
        if lo == 0:
            return 0.0, probes
    while hi - lo > precision * lo:
        mid = (lo + hi) / 2
        if check(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


def round_down(x, digits=3):
    """x rounded down to `digits` significant digits (0 stays 0)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (digits - 1 - math.floor(math.log10(x)))
    return math.floor(x * scale + 1e-9) / scale


def recommend(rates, fraction=1.1):
    """{mean, stderr, low, target} from each draw's highest passing rate: stderr = the sample
    standard deviation / sqrt(draws) (0 with one draw), low = mean - 2 x stderr but not below
    the lowest draw (a few scattered draws make a poor standard error, and no draw measured
    less), target = fraction x low, rounded down to 3 significant digits."""
    n = len(rates)
    mean = sum(rates) / n
    stderr = (math.sqrt(sum((r - mean) ** 2 for r in rates) / (n - 1)) / math.sqrt(n)
              if n > 1 else 0.0)
    low = max(min(rates), mean - 2 * stderr)
    return {"mean": mean, "stderr": stderr, "low": low, "target": round_down(fraction * low)}


def bench_args(args, rate, seed):
    """kinfer-bench's arguments for one probe."""
    argv = ["--base-url", args.base_url, "--request-rate", repr(rate), "--seed", str(seed),
            "--num-prompts", str(args.num_prompts), "--quiet",
            "--goodput", f"ttft:{args.slo_ttft * 1000:g}",
            "--drain-timeout", str(args.drain_timeout)]
    if args.trace:
        # The trace's lengths in its order from a seed-dependent row (wrapping around a short
        # trace); arrivals are Poisson.
        start = (seed * args.num_prompts) % max(1, args.trace_rows - args.num_prompts + 1)
        argv += ["--trace", args.trace, "--length-scale", repr(args.length_scale),
                 "--trace-start", str(start)]
    else:
        argv += ["--input-len", str(args.input_len), "--output-len", str(args.output_len)]
    if args.model:
        argv += ["--model", args.model]
    if "--prompt-salt" not in args.bench:
        # No probe's prompts share a prefix with another's: the runtime's prefix cache would
        # otherwise serve repeated MT-Bench text and overstate the rate.
        argv += ["--prompt-salt", f"ftr-{seed}-{rate:.6g}"]
    return kinfer_bench.parse_args(argv + args.bench)


def poissonize(bench, rate, seed):
    """A trace run keeps the trace's lengths but sends them at Poisson arrivals of `rate`."""
    specs = kinfer_bench.plan(bench)
    if bench.trace:
        times = kinfer_bench.workload.arrival_times(len(specs), rate, "poisson", 1.0, seed)
        specs = [(t, il, ol) for t, (_, il, ol) in zip(times, specs)]
    return specs


async def run_probe(args, rate, seed, prompts, model):
    bench = bench_args(args, rate, seed)
    specs = poissonize(bench, rate, seed)
    if len(specs) < 10:
        raise ValueError(f"a probe needs at least 10 requests, the workload gave {len(specs)}")
    runner = kinfer_bench.Runner(bench, model, prompts)
    records, _ = await runner.run(specs)
    ttfts = [r["ttft"] for r in records if r["ok"] and r["ttft"] is not None]
    return {"attainment": attainment(records, args.slo_ttft),
            "failed": sum(1 for r in records if not r["ok"]),
            "ttft_p50_s": kinfer_bench.metrics.percentile(ttfts, 50),
            "ttft_p99_s": kinfer_bench.metrics.percentile(ttfts, 99)}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="find_target_rate", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--base-url", required=True, help="one pod: its sidecar or runtime")
    ap.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    ap.add_argument("--slo-ttft", type=float, required=True, help="TTFT SLO in seconds")
    ap.add_argument("--attainment", type=float, default=0.99,
                    help="share of requests within the SLO a probe needs (default 0.99)")
    ap.add_argument("--draws", type=int, default=3, help="independent measurements (default 3)")
    ap.add_argument("--num-prompts", type=int, default=200, help="requests a probe (default 200)")
    ap.add_argument("--fraction", type=float, default=1.1,
                    help="target = this x the low end of the measured rate (default 1.1, as "
                    "kinfer-sim)")
    ap.add_argument("--trace", help="request lengths from a trace (kinfer-bench's formats)")
    ap.add_argument("--length-scale", type=float, default=1.0)
    ap.add_argument("--input-len", type=int, default=128, help="prompt tokens (without a trace)")
    ap.add_argument("--output-len", type=int, default=64, help="max_tokens (without a trace)")
    ap.add_argument("--start-rate", type=float, default=1.0)
    ap.add_argument("--precision", type=float, default=0.05,
                    help="stop bisecting when the bracket is within this share (default 0.05)")
    ap.add_argument("--min-rate", type=float, default=0.01)
    ap.add_argument("--max-rate", type=float, default=1e4)
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=0, help="draw k uses seed + k")
    ap.add_argument("--json", help="write every probe and the recommendation here")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("bench", nargs="*", help="more kinfer-bench flags, after --")
    args = ap.parse_args(argv)
    if not args.slo_ttft > 0:
        ap.error("--slo-ttft must be > 0")
    if not 0 < args.attainment <= 1:
        ap.error("--attainment must be in (0, 1]")
    if args.draws < 1 or args.num_prompts < 10:
        ap.error("need --draws >= 1 and --num-prompts >= 10")
    if not (0 < args.min_rate <= args.start_rate <= args.max_rate):
        ap.error("need 0 < --min-rate <= --start-rate <= --max-rate")
    if not 0 < args.precision < 1 or not args.fraction > 0:
        ap.error("need 0 < --precision < 1 and --fraction > 0")
    args.trace_rows = 0
    if args.trace:
        try:
            args.trace_rows = len(kinfer_bench.workload.load_trace(args.trace))
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"cannot read --trace {args.trace}: {e}")
        if args.trace_rows < args.num_prompts:
            ap.error(f"--trace has {args.trace_rows} requests, fewer than --num-prompts")
    try:  # the passed-through flags must make sense to kinfer-bench
        bench_args(args, args.start_rate, args.seed)
    except SystemExit:
        ap.error("the kinfer-bench flags after -- were refused (see above)")
    return args


async def setup(args):
    """(model, prompt maker) for the server, or None when it cannot be reached."""
    base = args.base_url.rstrip("/")
    try:
        model = args.model or await kinfer_bench.discover_model(base)
    except (kinfer_bench.http_client.HttpError, asyncio.TimeoutError, OSError) as e:
        print(f"find_target_rate: cannot reach {base}: {e}", file=sys.stderr)
        return None
    prompts = kinfer_bench.workload.PromptMaker(kinfer_bench.workload.mt_bench_questions())
    bench = bench_args(args, args.start_rate, args.seed)
    await prompts.setup(base, use_server=bench.server_tokenize)
    return model, prompts


def measure(args):
    """Every draw's probes and the recommendation, as the JSON document; None when the server
    cannot be reached."""
    ready = asyncio.run(setup(args))
    if ready is None:
        return None
    model, prompts = ready
    draws = []
    for k in range(args.draws):
        seed = args.seed + k
        log = []

        def probe(rate):
            got = asyncio.run(run_probe(args, rate, seed, prompts, model))
            passed = got["attainment"] >= args.attainment
            log.append({"rate": rate, **got, "passed": passed})
            if not args.quiet:
                p50, p99 = (f"{v:.3g}" if v is not None else "-"
                            for v in (got["ttft_p50_s"], got["ttft_p99_s"]))
                print(f"draw {k + 1}/{args.draws}: {rate:.4g} req/s -> "
                      f"{100 * got['attainment']:.2f}% within {args.slo_ttft:g} s "
                      f"({'pass' if passed else 'fail'}; TTFT p50 {p50} s, p99 {p99} s, "
                      f"{got['failed']} failed)", flush=True)
            return passed

        rate, _ = find_max_rate(probe, args.start_rate, args.precision, args.min_rate,
                                args.max_rate)
        draws.append({"seed": seed, "max_rate": rate, "probes": log})
    rates = [d["max_rate"] for d in draws]
    res = {"tool": "find_target_rate",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "server": {"base_url": args.base_url.rstrip("/"), "model": model},
           "slo_ttft_s": args.slo_ttft, "attainment": args.attainment,
           "num_prompts": args.num_prompts, "token_counts": prompts.mode,
           "draws": draws, "recommendation": None}
    if min(rates) > 0:
        res["recommendation"] = {**recommend(rates, args.fraction), "fraction": args.fraction}
    return res


def main(argv=None):
    args = parse_args(argv)
    res = measure(args)
    if res is None:
        return 1
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    rec = res["recommendation"]
    rates = ", ".join(f"{d['max_rate']:.4g}" for d in res["draws"])
    if rec is None:
        print(f"find_target_rate: no rate down to {args.min_rate:g} req/s kept "
              f"{100 * args.attainment:g}% of first tokens within {args.slo_ttft:g} s "
              f"(draws: {rates})", file=sys.stderr)
        return 1
    print(f"highest rate within the SLO per draw: {rates} req/s; mean {rec['mean']:.4g} "
          f"+- {rec['stderr']:.2g} (standard error)")
    print(f"targetRequestsPerSecondPerReplica: {rec['target']:g}  "
          f"(= {args.fraction:g} x {rec['low']:.4g}: the mean less 2 standard errors, not below the "
          f"lowest draw; rounded down)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
