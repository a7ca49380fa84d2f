"""kinfer-bench (bench/kinfer-bench, bench/serving/): the serving load generator of issue 3 item 10.

Its metric math is checked against kinfer-fake-upstream, whose stream timing is set exactly (a
fixed pause between chunks must come out as TPOT and ITL); arrivals and trace replay are checked
as data; errors come from the fake's 503/429 knobs; a short run against the real kinfer-runtime
checks server-side token counting, ignore_eos and the multi-turn mode.
"""
import json
import math
import pathlib
import statistics
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.serving import kinfer_bench, metrics, workload  # noqa: E402

# Cuts of the shared traces kept in the repository (tests/fixtures/traces/README.md), so the tests
# run on a clean clone without ../shared.
FIXTURES = ROOT / "tests" / "fixtures"
AZURE = FIXTURES / "traces" / "azure_conv_first10min.csv"
MOONCAKE = FIXTURES / "traces" / "mooncake_synthetic_first200.jsonl"


def bench(tmp_path, *args):
    out = tmp_path / "run.json"
    rc = kinfer_bench.main([*map(str, args), "--json", str(out), "--quiet"])
    assert rc == 0
    return json.loads(out.read_text())


# ---- arrivals and traces (no server) ------------------------------------------------------------

def test_poisson_arrivals_have_the_asked_rate_and_exponential_gaps():
    t = workload.arrival_times(4000, 20.0, "poisson", 1.0, seed=7)
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert t[0] == 0.0 and all(g >= 0 for g in gaps)
    assert statistics.mean(gaps) == pytest.approx(1 / 20.0, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.07)
    assert workload.arrival_times(50, 20.0, seed=7) == t[:50]  # a seed fixes the schedule


def test_gamma_burstiness_and_fixed_rate():
    t = workload.arrival_times(4000, 10.0, "poisson", 0.25, seed=3)
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.08)
    # Gamma(k) gaps have a coefficient of variation of 1/sqrt(k) = 2
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(2.0, rel=0.12)
    assert workload.arrival_times(4, 4.0, "fixed") == [0.0, 0.25, 0.5, 0.75]
    assert workload.arrival_times(3, math.inf) == [0.0, 0.0, 0.0]


def test_azure_trace_replay_keeps_order_and_scales_time_and_lengths():
    rows = workload.load_trace(AZURE, limit=200)
    assert len(rows) == 200 and rows[0][0] == 0.0
    assert all(a[0] <= b[0] for a, b in zip(rows, rows[1:]))
    # first rows of the file, read independently
    lines = AZURE.read_text().splitlines()[1:4]
    assert [(r[1], r[2]) for r in rows[:3]] == [
        (int(ln.split(",")[1]), int(ln.split(",")[2])) for ln in lines]
    scaled = workload.scale_trace(rows, time_scale=4.0, length_scale=0.1, max_input=300,
                                  max_output=50)
    for (t, i, o), (t2, i2, o2) in zip(rows, scaled):
        assert t2 == pytest.approx(4.0 * t)
        assert i2 == min(300, max(1, round(i * 0.1)))
        assert o2 == min(50, max(1, round(o * 0.1)))
    skipped = workload.load_trace(AZURE, limit=5, start=10)
    assert [(i, o) for _, i, o in skipped] == [(i, o) for _, i, o in rows[10:15]]


def test_jsonl_trace_and_duration_cut():
    rows = workload.load_trace(MOONCAKE, limit=100)
    first = [json.loads(ln) for ln in MOONCAKE.read_text().splitlines()[:100]]
    assert [r[0] for r in rows] == pytest.approx(
        [(f["timestamp"] - first[0]["timestamp"]) / 1000.0 for f in first])
    assert [(r[1], r[2]) for r in rows] == [(f["input_length"], f["output_length"]) for f in first]
    args = kinfer_bench.parse_args(["--base-url", "http://x", "--trace", str(MOONCAKE),
                                    "--num-prompts", "100", "--time-scale", "0.5",
                                    "--duration", "5"])
    plan = kinfer_bench.plan(args)
    assert plan and all(t < 5 for t, _, _ in plan)
    assert len(plan) == sum(1 for r in rows if r[0] * 0.5 < 5)


# ---- metric math (no server) --------------------------------------------------------------------

def rec(ttft, e2el, n, itl=(), ok=True, error=None):
    return {"ok": ok, "error": error, "ttft": ttft, "e2el": e2el, "output_tokens": n,
            "input_tokens": 10, "itl": list(itl), "output_token_source": "usage"}


def test_summary_percentiles_tpot_and_goodput():
    import numpy as np
    vals = [0.013, 0.5, 0.07, 1.9, 0.33, 0.2, 0.05]
    for p in (50, 90, 99):
        assert metrics.percentile(vals, p) == pytest.approx(float(np.percentile(vals, p)))
    records = [
        rec(0.5, 0.5 + 9 * 0.1, 10, [0.1] * 9),    # TPOT 100 ms: good
        rec(2.5, 2.5 + 9 * 0.1, 10, [0.1] * 9),    # TTFT too slow
        rec(0.2, 0.2 + 9 * 0.3, 10, [0.3] * 9),    # TPOT 300 ms: too slow
        rec(0.1, 0.1, 1),                          # one token: no TPOT, good
        rec(None, None, 0, ok=False, error="503"),
        rec(None, None, 0, ok=False, error="503"),
        rec(None, None, 0, ok=False, error="timeout"),
    ]
    s = metrics.summarize(records, 10.0, metrics.parse_goodput(["ttft:2000", "tpot:200"]))
    assert s["completed"] == 4 and s["failed"] == 3
    assert s["errors"] == {"503": 2, "timeout": 1}
    assert s["good_requests"] == 2 and s["goodput"] == pytest.approx(0.2)
    assert s["slo_attainment"] == pytest.approx(2 / 7)
    assert s["request_throughput"] == pytest.approx(0.4)
    assert s["output_throughput"] == pytest.approx(3.1)
    assert s["tpot_ms"]["count"] == 3
    assert s["tpot_ms"]["mean"] == pytest.approx((100 + 100 + 300) / 3)
    assert s["itl_ms"]["count"] == 27 and s["itl_ms"]["median"] == pytest.approx(100)
    with pytest.raises(ValueError):
        metrics.parse_goodput(["latency:3"])


# ---- against kinfer-fake-upstream ---------------------------------------------------------------

def test_fixed_chunk_pause_gives_tpot_and_itl(fake, tmp_path):
    res = bench(tmp_path, "--base-url", fake.url, "--num-prompts", 6, "--request-rate", 30,
                "--seed", 1, "--header", "x-fake-chunks:8", "--header",
                "x-fake-chunk-interval-ms:40", "--header", "x-fake-latency-ms:120",
                "--goodput", "ttft:1000", "tpot:100", "--plot", tmp_path / "p.png")
    s = res["summary"]
    assert s["completed"] == 6 and s["errors"] == {}
    assert s["output_token_source"] == ["chunks"] and s["total_output_tokens"] == 48
    assert res["token_counts"].startswith("estimate")  # the fake has no /tokenize
    assert s["ttft_ms"]["median"] == pytest.approx(120, abs=25)
    assert s["tpot_ms"]["mean"] == pytest.approx(40, abs=6)
    assert s["itl_ms"]["count"] == 6 * 7 and s["itl_ms"]["median"] == pytest.approx(40, abs=6)
    assert s["e2el_ms"]["median"] == pytest.approx(120 + 7 * 40, abs=40)
    assert s["good_requests"] == 6
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # open loop: each request left at its scheduled time, not after the previous reply
    for r in res["requests"]:
        assert r["sent_s"] - r["scheduled_s"] < 0.05
    body = fake.stats()["last_request"]["body"]
    assert body["stream"] is True and body["ignore_eos"] is True and body["max_tokens"] == 64


def test_goodput_counts_only_requests_within_the_slo(fake, tmp_path):
    res = bench(tmp_path, "--base-url", fake.url, "--num-prompts", 4, "--header",
                "x-fake-latency-ms:150", "--header", "x-fake-chunks:3", "--goodput", "ttft:60")
    assert res["summary"]["completed"] == 4 and res["summary"]["good_requests"] == 0
    assert res["summary"]["goodput"] == 0


def test_errors_are_counted_by_status(fake, tmp_path):
    fake.control(fail_first=3)
    res = bench(tmp_path, "--base-url", fake.url, "--num-prompts", 8, "--max-concurrency", 1,
                "--endpoint", "/v1/completions")
    s = res["summary"]
    assert s["errors"] == {"503": 3} and s["completed"] == 5 and s["failed"] == 3
    res = bench(tmp_path, "--base-url", fake.url, "--num-prompts", 3,
                "--header", "x-fake-status:429")
    assert res["summary"]["errors"] == {"429": 3}
    res = bench(tmp_path, "--base-url", fake.url, "--num-prompts", 2, "--header",
                "x-fake-chunks:5", "--header", "x-fake-disconnect-after-chunks:2")
    assert res["summary"]["errors"] == {"incomplete_stream": 2}


def test_max_concurrency_bounds_requests_in_flight(fake, tmp_path):
    res = bench(tmp_path, "--base-url", fake.url, "--num-prompts", 6, "--max-concurrency", 2,
                "--header", "x-fake-latency-ms:80", "--header", "x-fake-chunks:2")
    assert res["summary"]["completed"] == 6
    assert fake.stats()["max_in_flight"] == 2


def test_trace_replay_sends_the_trace_lengths_in_order(fake, tmp_path):
    res = bench(tmp_path, "--base-url", fake.url, "--trace", AZURE, "--num-prompts", 6,
                "--time-scale", 0.01, "--length-scale", 0.05, "--max-output-len", 20,
                "--header", "x-fake-chunks:2")
    want = workload.scale_trace(workload.load_trace(AZURE, limit=6), 0.01, 0.05, None, 20)
    got = sorted(res["requests"], key=lambda r: r["sent_s"])
    assert [(r["input_tokens"], r["max_tokens"]) for r in got] == [(i, o) for _, i, o in want]
    assert [r["scheduled_s"] for r in got] == pytest.approx([t for t, _, _ in want])


def test_unreachable_server_exits_1():
    assert subprocess.run([sys.executable, str(ROOT / "bench" / "kinfer-bench"), "--base-url",
                           "http://127.0.0.1:9", "--num-prompts", "1", "--quiet"],
                          capture_output=True, timeout=30).returncode == 1


# ---- against the real kinfer-runtime ------------------------------------------------------------

def test_real_runtime_counts_tokens_on_the_server(server, tmp_path):
    res = bench(tmp_path, "--base-url", server.url, "--num-prompts", 2, "--input-len", 40,
                "--output-len", 6, "--goodput", "ttft:60000")
    s = res["summary"]
    assert res["token_counts"] == "server /tokenize"
    assert s["completed"] == 2, s["errors"]
    assert s["output_token_source"] == ["usage"]
    assert s["total_output_tokens"] == 12  # ignore_eos: exactly max_tokens each
    for r in res["requests"]:
        # the prompt text is cut to 40 tokens; the chat template adds its own around it
        assert 40 <= r["prompt_tokens_server"] <= 40 + 48
        assert r["ttft"] > 0 and r["e2el"] >= r["ttft"] and len(r["itl"]) >= 1


def test_real_runtime_multi_turn_reports_second_turn_ttft(server, tmp_path):
    res = bench(tmp_path, "--base-url", server.url, "--multi-turn", "--num-prompts", 1,
                "--output-len", 8, "--max-concurrency", 1)
    t1, t2 = res["turns"]["1"], res["turns"]["2"]
    assert t1["completed"] == 1 and t2["completed"] == 1
    assert t2["ttft_ms"]["count"] == 1
    # turn 2 carries turn 1, its reply and the second question
    assert t2["prompt_tokens_server_mean"] > t1["prompt_tokens_server_mean"] + 8
