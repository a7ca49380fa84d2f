"""bench/find_target_rate.py: the search for one pod's rate at the TTFT SLO (a threshold probe
checks the bracketing and the bisection), the recommendation's arithmetic, and real runs of
kinfer-bench against kinfer-fake-upstream serving 2 requests at a time in 50 ms each (so at most
40 req/s): the measured rate must sit between what it surely serves and what it cannot, one
serving slot must measure lower than two, and an SLO under the service time finds no rate."""
import json
import pathlib
import subprocess
import sys

import pytest

from sidecar_harness import FakeUpstream

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import find_target_rate as ftr  # noqa: E402

TOOL = ROOT / "bench" / "find_target_rate.py"


def test_the_search_brackets_then_bisects_to_the_precision():
    for threshold in (0.3, 1.0, 3.7, 250.0):
        rate, probes = ftr.find_max_rate(lambda r: r <= threshold, start=1.0, precision=0.02)
        assert threshold / 1.02 <= rate <= threshold
        assert all(ok == (r <= threshold) for r, ok in probes)
    # Nothing passes down to min_rate: 0, after halving there.
    rate, probes = ftr.find_max_rate(lambda r: False, start=1.0, min_rate=0.1)
    assert rate == 0 and [r for r, _ in probes] == [1.0, 0.5, 0.25, 0.125]
    # Everything passes up to max_rate: the highest rate tried.
    rate, _ = ftr.find_max_rate(lambda r: True, start=1.0, max_rate=100)
    assert rate == 64


def test_the_recommendation_is_the_low_end_times_the_fraction_rounded_down():
    draws = [3.0] * 4 + [3.1] * 3 + [2.9] * 3
    r = ftr.recommend(draws, fraction=1.1)
    sd = (6 * 0.01 / 9) ** 0.5
    assert r["mean"] == pytest.approx(3.0)
    assert r["stderr"] == pytest.approx(sd / 10 ** 0.5)
    assert r["low"] == pytest.approx(3.0 - 2 * sd / 10 ** 0.5)  # 2.948, above the lowest draw
    assert r["target"] == ftr.round_down(1.1 * r["low"]) == 3.24  # 3.2432... rounded down
    # Three draws: the mean less 2 standard errors (2.77) is under the lowest draw (2.8).
    assert ftr.recommend([3.0, 3.2, 2.8])["low"] == 2.8
    one = ftr.recommend([5.0])
    assert one["stderr"] == 0 and one["target"] == 5.5
    assert ftr.round_down(0.012345) == 0.0123 and ftr.round_down(1234.5) == 1230
    # Two scattered draws: the mean less 2 standard errors is negative; the lowest draw holds.
    assert ftr.recommend([0.1, 10.0])["low"] == 0.1
    assert ftr.recommend([0.1, 10.0])["target"] == 0.11


def test_attainment_leaves_out_the_warm_up_and_counts_failures_as_misses():
    recs = [{"index": i, "ok": True, "ttft": 5.0 if i == 0 else 0.1} for i in range(10)]
    assert ftr.attainment(recs, 1.0) == 1.0  # request 0 is the warm-up
    recs[5] = {"index": 5, "ok": False, "ttft": None}
    recs[6]["ttft"] = 1.5
    assert ftr.attainment(recs, 1.0) == pytest.approx(7 / 9)


def run_tool(url, *flags, timeout=240):
    return subprocess.run([sys.executable, str(TOOL), "--base-url", url, *flags],
                          capture_output=True, text=True, timeout=timeout)


def measured(tmp_path, url, name):
    out = tmp_path / f"{name}.json"
    p = run_tool(url, "--slo-ttft", "0.2", "--draws", "1", "--num-prompts", "40",
                 "--start-rate", "10", "--precision", "0.2", "--json", str(out), "--quiet",
                 "--", "--no-server-tokenize")
    assert p.returncode == 0, p.stderr
    assert "targetRequestsPerSecondPerReplica:" in p.stdout
    return json.loads(out.read_text())


def test_a_real_pod_is_measured_and_one_slot_serves_less_than_two(tmp_path):
    up = FakeUpstream(capacity=2)
    try:
        up.control(latency_ms=50)
        two = measured(tmp_path, up.url, "two")
        up.control(capacity=1)
        one = measured(tmp_path, up.url, "one")
    finally:
        up.stop()
    r2, r1 = two["draws"][0]["max_rate"], one["draws"][0]["max_rate"]
    # Two slots of 50 ms: at 10 req/s nothing queues; far past 40 req/s the queue grows ~0.5 s
    # over a probe. One slot: half of that.
    assert 10 <= r2 <= 64, two
    assert r1 < r2, (r1, r2)
    rec = two["recommendation"]
    assert rec["target"] == ftr.round_down(1.1 * rec["low"]) and rec["low"] == r2
    assert two["server"]["model"] == "primary"
    probes = two["draws"][0]["probes"]
    assert probes[0]["rate"] == 10 and probes[0]["passed"] and probes[0]["failed"] == 0
    assert 0.05 <= probes[0]["ttft_p50_s"] <= probes[0]["ttft_p99_s"] < 0.2
    assert any(not p["passed"] for p in probes)  # the search found where it stops passing


def test_an_slo_under_the_service_time_finds_no_rate(tmp_path):
    up = FakeUpstream(capacity=2)
    try:
        up.control(latency_ms=50)
        p = run_tool(up.url, "--slo-ttft", "0.03", "--draws", "1", "--num-prompts", "10",
                     "--start-rate", "16", "--min-rate", "4", "--quiet", "--",
                     "--no-server-tokenize")
    finally:
        up.stop()
    assert p.returncode == 1
    assert "no rate down to 4 req/s" in p.stderr


def test_bad_arguments_and_an_unreachable_server():
    p = run_tool("http://127.0.0.1:9", "--slo-ttft", "0")
    assert p.returncode == 2 and "--slo-ttft must be > 0" in p.stderr
    p = run_tool("http://127.0.0.1:9", "--slo-ttft", "1", "--", "--arrival", "sideways")
    assert p.returncode == 2
    p = run_tool("http://127.0.0.1:9", "--slo-ttft", "1", "--num-prompts", "10")
    assert p.returncode == 1 and "cannot reach" in p.stderr
    short = ROOT / "tests" / "fixtures" / "traces" / "azure_conv_first10min.csv"
    p = run_tool("http://127.0.0.1:9", "--slo-ttft", "1", "--trace", str(short),
                 "--num-prompts", "100000")
    assert p.returncode == 2 and "fewer than --num-prompts" in p.stderr


def test_trace_draws_start_at_seed_dependent_rows_and_wrap(tmp_path):
    trace = ROOT / "tests" / "fixtures" / "traces" / "azure_conv_first10min.csv"
    args = ftr.parse_args(["--base-url", "http://x", "--slo-ttft", "1", "--trace", str(trace),
                           "--num-prompts", "1000"])
    rows = args.trace_rows
    assert rows > 1000
    starts = [ftr.bench_args(args, 1.0, seed).trace_start for seed in range(12)]
    assert starts[0] == 0 and starts[1] == 1000
    assert all(0 <= s <= rows - 1000 for s in starts)
    # Each draw gets its own lengths, and Poisson arrivals at the probe's rate.
    # Every probe salts its prompts differently, unless told otherwise.
    salts = {ftr.bench_args(args, r, seed).prompt_salt for r in (1.0, 2.0) for seed in (0, 1)}
    assert len(salts) == 4 and all(salts)
    args.bench = ["--prompt-salt", "mine"]
    assert ftr.bench_args(args, 1.0, 0).prompt_salt == "mine"
    args.bench = []
    specs = ftr.poissonize(ftr.bench_args(args, 5.0, 3), 5.0, 3)
    assert len(specs) == 1000
    assert 150 < specs[-1][0] < 250  # 1000 arrivals at 5/s: about 200 s
