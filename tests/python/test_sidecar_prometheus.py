"""A real Prometheus server scrapes kinfer-sidecar's /metrics (issue 4).

Traffic whose time-to-first-token spreads over several buckets (the fake upstream's latency varied
per request from 5 to 400 ms, streamed and not, in all three classes) goes through the sidecar;
once Prometheus has scraped the final counts, histogram_quantile over the scraped TTFT buckets must
agree with the sidecar's own /stats quantiles to within one bucket of the configured edges, the
target must be up, and the scraped request counters must sum to the requests sent.

Needs the `prometheus` server (Debian package `prometheus`); skipped when it is not installed.
"""
import bisect
import concurrent.futures as cf
import math
import os
import pathlib
import random
import shutil
import signal
import subprocess
import time

import pytest
import requests

from sidecar_harness import FakeUpstream, Sidecar, chat_body, free_port, post_chat

TTFT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
REQUESTS = 150
MIN_LATENCY_MS, MAX_LATENCY_MS = 5, 400
JOB = "kinfer-sidecar"


def prometheus_binary() -> str:
    path = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(path):
        pytest.skip("prometheus server not installed (Debian package `prometheus`)")
    return path


class Prometheus:
    """A Prometheus server on a free 127.0.0.1 port scraping one target every second."""

    def __init__(self, target: str, workdir: pathlib.Path, labels: dict | None = None):
        self.port = free_port()
        extra = "".join(f"          {k}: '{v}'\n" for k, v in (labels or {}).items())
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            f"  - job_name: {JOB}\n"
            "    metrics_path: /metrics\n"
            "    static_configs:\n"
            f"      - targets: ['{target}']\n"
            + ("        labels:\n" + extra if extra else ""))
        self.log = open(workdir / "prometheus.log", "w+")
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={config}",
             f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.time() > deadline:
                self.stop()
                pytest.fail(f"prometheus not ready after 30 s:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, n: int = 30) -> str:
        self.log.flush()
        self.log.seek(0)
        return "".join(self.log.readlines()[-n:])

    def query(self, expr: str) -> list:
        r = requests.get(self.url + "/api/v1/query", params={"query": expr}, timeout=5)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        """The value of a query that yields one sample (None when it yields none)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr: str, want: float, timeout: float = 15.0) -> float | None:
        deadline = time.time() + timeout
        while True:
            got = self.scalar(expr)
            if got == want or time.time() > deadline:
                return got
            time.sleep(0.25)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def bucket_index(seconds: float) -> int:
    """The index of the histogram bucket holding `seconds`: bucket i is (edge[i-1], edge[i]]
    (bucket 0 starts at 0), and len(edges) is the +Inf bucket."""
    return bisect.bisect_left(TTFT_BUCKETS, seconds)


def bucket_name(i: int) -> str:
    lo = 0 if i == 0 else TTFT_BUCKETS[i - 1]
    hi = TTFT_BUCKETS[i] if i < len(TTFT_BUCKETS) else math.inf
    return f"({lo}, {hi}]"


def one_request(url: str, latency_ms: int, stream: bool, klass: str) -> int:
    headers = {"x-fake-latency-ms": str(latency_ms), "x-kinfer-priority": klass}
    with post_chat(url, chat_body(stream=stream, max_tokens=8), headers=headers,
                   stream=stream) as r:
        r.content  # noqa: B018 - read the whole answer (the SSE stream to [DONE])
        return r.status_code


def test_prometheus_scrapes_sidecar_and_agrees_with_stats(tmp_path):
    prometheus_binary()  # skip early when absent
    upstream = FakeUpstream()
    sc = prom = None
    try:
        sc = Sidecar(upstream.url, {"metrics": {"ttft_buckets": TTFT_BUCKETS}})
        prom = Prometheus(f"127.0.0.1:{sc.port}", tmp_path)
        up = f'up{{job="{JOB}"}}'
        assert prom.wait_for(up, 1.0) == 1.0, prom.log_tail()

        # Latencies spread log-uniformly from 5 to 400 ms (every bucket from (0.005, 0.01] to
        # (0.25, 0.5] gets samples), in a shuffled order, half of them streamed.
        ratio = MAX_LATENCY_MS / MIN_LATENCY_MS
        latencies = [round(MIN_LATENCY_MS * ratio ** (i / (REQUESTS - 1)))
                     for i in range(REQUESTS)]
        random.Random(4).shuffle(latencies)
        classes = ("critical", "standard", "batch")
        # 6 at a time: under the default max_concurrency (8), so nothing queues in the sidecar.
        with cf.ThreadPoolExecutor(6) as pool:
            codes = list(pool.map(lambda i: one_request(sc.url, latencies[i], i % 2 == 1,
                                                        classes[i % 3]), range(REQUESTS)))
        assert codes == [200] * REQUESTS

        stats = sc.stats()["ttft_seconds"]
        assert stats["count"] == REQUESTS, stats

        # Wait for a scrape taken after the traffic ended.
        count = prom.wait_for("sum(kinfer_sidecar_time_to_first_token_seconds_count)", REQUESTS)
        assert count == REQUESTS, prom.log_tail()
        assert prom.scalar(up) == 1.0
        assert prom.scalar("sum(kinfer_sidecar_requests_total)") == REQUESTS
        assert prom.scalar('sum(kinfer_sidecar_requests_total{code="200"})') == REQUESTS
        # Every class was scraped as its own series.
        by_class = prom.query("sum by (class) (kinfer_sidecar_time_to_first_token_seconds_count)")
        assert {s["metric"]["class"]: float(s["value"][1]) for s in by_class} == {
            "critical": 50.0, "standard": 50.0, "batch": 50.0}
        # The TTFT really spreads over several buckets.
        buckets = prom.query("sum by (le) (kinfer_sidecar_time_to_first_token_seconds_bucket)")
        cumulative = sorted((float(s["metric"]["le"]), float(s["value"][1])) for s in buckets)
        per_bucket = [c - p for (_, c), (_, p) in zip(cumulative, [(0, 0.0)] + cumulative)]
        assert sum(n > 0 for n in per_bucket) >= 5, cumulative

        # histogram_quantile over the scraped buckets vs the sidecar's own sliding-window
        # quantiles: the same bucket of TTFT_BUCKETS, or an adjacent one.
        report = {}
        for q, key in ((0.99, "p99"), (0.5, "p50")):
            scraped = prom.scalar(
                f"histogram_quantile({q}, sum by (le) "
                f"(kinfer_sidecar_time_to_first_token_seconds_bucket))")
            own = stats[key]
            assert scraped is not None and not math.isnan(scraped), (q, scraped)
            assert own is not None, stats
            i, j = bucket_index(scraped), bucket_index(own)
            report[key] = (scraped, own, bucket_name(i), bucket_name(j))
            assert abs(i - j) <= 1, (
                f"{key}: Prometheus {scraped:.4f} s in {bucket_name(i)}, /stats {own:.4f} s "
                f"in {bucket_name(j)}: more than one bucket apart")
        print("ttft quantiles (prometheus, /stats, buckets):", report)

        # Prometheus stops cleanly (SIGTERM: exit status 0).
        rc = prom.stop()
        assert rc == 0, f"prometheus exited with {rc}:\n{prom.log_tail()}"
    finally:
        if prom is not None:
            prom.stop()
            prom.log.close()
        if sc is not None:
            sc.stop()
        upstream.stop()
