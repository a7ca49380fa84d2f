"""The operator's metrics collector against real sidecars (issue 6, item 2).

Two real kinfer-sidecar processes in front of one kinfer-fake-upstream; kinfer-metrics-probe (the
MetricsCollector and PodSampler of operator/autoscale behind a tiny CLI) scrapes both. Requests
with a known upstream latency go through each sidecar, streamed and not; the TTFT histogram deltas
must count exactly the requests sent, in buckets at or above their latency, and nothing on the next
scrape without traffic. Slow requests held behind max_concurrency 1 show as in-flight and queue
depth; a stopped sidecar shows as has_metrics=false while the other keeps reporting.
"""
import concurrent.futures as cf
import json
import subprocess
import time

import pytest

from sidecar_harness import FakeUpstream, Sidecar, binary, chat_body, post_chat

CONFIG = {"admission": {"max_concurrency": 1, "reserved_for_top": 0}}


class Probe:
    """kinfer-metrics-probe: one JSON line of PodSamples per line written to its stdin."""

    def __init__(self, pods: dict):
        args = [str(binary("kinfer-metrics-probe")), "--timeout-ms", "1000"]
        args += [f"{name}={url.removeprefix('http://')}" for name, url in pods.items()]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def collect(self) -> dict:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"kinfer-metrics-probe exited with {self.proc.poll()}"
        return {s["pod"]: s for s in json.loads(line)}

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(10) == 0


def send(url: str, latency_ms: int, stream: bool):
    headers = {"x-fake-latency-ms": str(latency_ms)}
    with post_chat(url, chat_body(stream=stream, max_tokens=4), headers=headers,
                   stream=stream) as r:
        assert r.status_code == 200, r.text
        r.content  # noqa: B018 - read the whole answer (a stream to [DONE])


def observations(sample: dict) -> int:
    return sum(sample["ttft_counts"])


def below(sample: dict, seconds: float) -> int:
    """Observations in buckets whose upper edge is below `seconds` (faster than possible)."""
    return sum(c for edge, c in zip(sample["ttft_upper_bounds"], sample["ttft_counts"])
               if edge < seconds)


@pytest.fixture()
def fleet():
    upstream = FakeUpstream()
    sidecars = []
    probe = None
    try:
        sidecars = [Sidecar(upstream.url, CONFIG), Sidecar(upstream.url, CONFIG)]
        probe = Probe({"a": sidecars[0].url, "b": sidecars[1].url})
        yield sidecars, probe
    finally:
        if probe:
            probe.close()
        for sc in sidecars:
            sc.stop()
        upstream.stop()


def test_collector_reports_gauges_and_exact_ttft_deltas(fleet):
    (a, b), probe = fleet
    first = probe.collect()
    for pod in ("a", "b"):
        assert first[pod]["has_metrics"] and first[pod]["ready"]
        assert first[pod]["queue_depth"] == 0 and first[pod]["in_flight"] == 0
        assert first[pod]["ttft_counts"] == []  # the first scrape is the baseline

    # a: 3 plain + 2 streamed at 200 ms; b: 1 plain at 600 ms + 1 streamed at 0 ms.
    with cf.ThreadPoolExecutor(2) as pool:
        done_a = pool.submit(lambda: [send(a.url, 200, s) for s in (False, True, False, True, False)])
        done_b = pool.submit(lambda: [send(b.url, 600, False), send(b.url, 0, True)])
        done_a.result()
        done_b.result()
    second = probe.collect()
    assert observations(second["a"]) == 5
    assert below(second["a"], 0.2) == 0
    assert observations(second["b"]) == 2
    assert below(second["b"], 0.6) == 1  # only the 0 ms one is faster than 600 ms
    assert len(second["a"]["ttft_counts"]) == len(second["a"]["ttft_upper_bounds"]) + 1

    third = probe.collect()  # no traffic since
    assert observations(third["a"]) == 0 and observations(third["b"]) == 0
    assert third["a"]["has_metrics"] and third["b"]["has_metrics"]

    # Three 700 ms requests at once to a (max_concurrency 1): one in flight, two queued.
    with cf.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(send, a.url, 700, False) for _ in range(3)]
        deadline = time.time() + 5
        while True:
            busy = probe.collect()
            if busy["a"]["in_flight"] == 1 and busy["a"]["queue_depth"] == 2:
                break
            assert time.time() < deadline, busy
            time.sleep(0.05)
        assert busy["b"]["in_flight"] == 0 and busy["b"]["queue_depth"] == 0
        for f in futures:
            f.result()
    after = probe.collect()
    # The ones answered before `busy` was taken were counted then; together they are 3.
    assert observations(busy["a"]) + observations(after["a"]) == 3
    assert below(after["a"], 0.7) == 0 and below(busy["a"], 0.7) == 0
    assert after["a"]["in_flight"] == 0 and after["a"]["queue_depth"] == 0

    # A sidecar that is gone: no metrics for it, the other one still reports.
    b.stop()
    gone = probe.collect()
    assert not gone["b"]["has_metrics"]
    assert gone["a"]["has_metrics"]
