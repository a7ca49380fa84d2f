"""/metrics: content, counters moving with traffic, and `promtool check metrics`."""
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import metric_value, start_runtime, stop_runtime

NAMES = [
    "kinfer_runtime_requests_total", "kinfer_runtime_prompt_tokens_total",
    "kinfer_runtime_generation_tokens_total", "kinfer_runtime_num_requests_running",
    "kinfer_runtime_num_requests_waiting", "kinfer_runtime_kv_cache_usage_ratio",
    "kinfer_runtime_time_to_first_token_seconds", "kinfer_runtime_inter_token_latency_seconds",
    "kinfer_runtime_e2e_request_latency_seconds", "kinfer_runtime_request_queue_time_seconds",
]


def scrape(server) -> str:
    r = requests.get(server.url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return r.text


def test_metrics_move_with_a_request(server):
    before = scrape(server)
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "Hello", "max_tokens": 5, "temperature": 0,
                            "ignore_eos": True})
    assert r.status_code == 200
    usage = r.json()["usage"]
    after = scrape(server)
    for name in NAMES:
        assert f"# TYPE {name} " in after
    ok = 'status="ok"'
    assert metric_value(after, "kinfer_runtime_requests_total", ok) == \
        metric_value(before, "kinfer_runtime_requests_total", ok) + 1
    assert metric_value(after, "kinfer_runtime_generation_tokens_total") - \
        metric_value(before, "kinfer_runtime_generation_tokens_total") == usage["completion_tokens"]
    assert metric_value(after, "kinfer_runtime_prompt_tokens_total") - \
        metric_value(before, "kinfer_runtime_prompt_tokens_total") == usage["prompt_tokens"]
    ttft = "kinfer_runtime_time_to_first_token_seconds_count"
    assert metric_value(after, ttft) == metric_value(before, ttft) + 1
    # 5 tokens: 4 inter-token gaps.
    itl = "kinfer_runtime_inter_token_latency_seconds_count"
    assert metric_value(after, itl) - metric_value(before, itl) == usage["completion_tokens"] - 1
    assert metric_value(after, "kinfer_runtime_model_loaded") == 1
    assert metric_value(after, "kinfer_runtime_num_requests_running") == 0


def test_invalid_requests_are_counted(server):
    before = metric_value(scrape(server), "kinfer_runtime_requests_total", 'status="invalid"')
    requests.post(server.url + "/v1/chat/completions", json={"messages": []})
    after = metric_value(scrape(server), "kinfer_runtime_requests_total", 'status="invalid"')
    assert after == before + 1


def test_answers_the_connection_gives_itself_are_counted(server):
    # A body over the limit is refused before any route sees it (413): that route's answer, and
    # on a generation path an invalid request. A GET on a POST route is that route's 405 (no
    # generation request, so not in requests_total).
    http = lambda code, route="completions": metric_value(
        scrape(server), "kinfer_runtime_http_requests_total", f'route="{route}",code="{code}"')
    invalid = lambda: metric_value(scrape(server), "kinfer_runtime_requests_total",
                                   'status="invalid"')
    before_413, before_405, before_invalid = http(413), http(405), invalid()
    big = {"prompt": "x" * (1 << 20), "max_tokens": 1}
    assert requests.post(server.url + "/v1/completions", json=big).status_code == 413
    assert requests.get(server.url + "/v1/completions").status_code == 405
    assert http(413) == before_413 + 1
    assert http(405) == before_405 + 1
    assert invalid() == before_invalid + 1


def test_a_score_only_request_generates_no_tokens(server):
    # max_tokens 0 with echo scores the prompt: the one token computed is not the client's.
    before = scrape(server)
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "Hello there", "max_tokens": 0, "echo": True, "logprobs": 1})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 0
    after = scrape(server)
    for name in ("kinfer_runtime_generation_tokens_total",
                 "kinfer_runtime_time_to_first_token_seconds_count"):
        assert metric_value(after, name) == metric_value(before, name), name
    assert metric_value(after, "kinfer_runtime_requests_total", 'status="ok"') == \
        metric_value(before, "kinfer_runtime_requests_total", 'status="ok"') + 1


def test_a_full_waiting_queue_counts_as_rejected_not_as_an_engine_error():
    # One running and one waiting request at most: of eight sent at once, the engine refuses
    # the rest once queued (503, "too many waiting requests"), which is load shedding.
    srv = start_runtime(["--max-running", "1", "--max-queued", "1"])
    try:
        before = scrape(srv)
        body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda _: requests.post(srv.url + "/v1/completions", json=body, timeout=120), range(8)))
        refused = [a for a in answers if a.status_code == 503]
        assert refused, [a.status_code for a in answers]
        assert all(a.status_code in (200, 503) for a in answers), [a.status_code for a in answers]
        for a in refused:
            assert a.headers.get("Retry-After")
            assert a.json()["error"]["type"] == "overloaded_error"
        after = scrape(srv)
        name = "kinfer_runtime_requests_total"
        assert metric_value(after, name, 'status="rejected"') - \
            metric_value(before, name, 'status="rejected"') == len(refused)
        assert metric_value(after, name, 'status="ok"') - \
            metric_value(before, name, 'status="ok"') == len(answers) - len(refused)
        assert metric_value(after, name, 'status="error"') == metric_value(before, name, 'status="error"')
    finally:
        stop_runtime(srv)


def test_promtool_check_metrics(server):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (Debian package 'prometheus'); lint not run")
    text = scrape(server)
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout + p.stderr == ""


def test_a_deadline_that_passes_in_the_queue_is_a_timeout_not_an_error():
    # The client's own x-kinfer-timeout ran out while its request waited behind a busy one: a
    # 504 counted as `timeout` (not `error`, which alerts fire on), and no queue time recorded
    # for a request the engine never started.
    srv = start_runtime(["--ctx-size", "512", "--max-running", "1"])
    try:
        before = scrape(srv)
        busy = ThreadPoolExecutor(1).submit(
            requests.post, srv.url + "/v1/completions",
            json={"prompt": "Busy " + "cats " * 40, "max_tokens": 400, "ignore_eos": True,
                  "temperature": 0}, timeout=300)
        deadline = time.time() + 30
        while metric_value(scrape(srv), "kinfer_runtime_num_requests_running") < 1:
            assert time.time() < deadline, "the busy request never started"
            time.sleep(0.02)
        for i in range(2):
            r = requests.post(srv.url + "/v1/completions",
                              json={"prompt": f"Queued {i}", "max_tokens": 8},
                              headers={"x-kinfer-timeout": "300ms"}, timeout=60)
            assert r.status_code == 504, r.text
        assert busy.result().status_code == 200
        after = scrape(srv)
        name = "kinfer_runtime_requests_total"

        def delta(metric, labels=""):
            return metric_value(after, metric, labels) - metric_value(before, metric, labels)

        assert delta(name, 'status="timeout"') == 2
        assert delta(name, 'status="error"') == 0
        assert delta(name, 'status="ok"') == 1
        assert delta("kinfer_runtime_request_queue_time_seconds_count") == 1
    finally:
        stop_runtime(srv)


def test_choices_that_could_never_wait_together_are_a_400():
    # Each of n choices waits with the whole prompt; 64 x 128 = 8192 prompt tokens may wait.
    # 120 tokens x 70 can never be queued at once: a 400 naming n (a 503 would be retried in
    # vain, and a stream got a 200 and then an error event); 60 fit and are served.
    srv = start_runtime(["--ctx-size", "128"])
    try:
        ids = requests.post(srv.url + "/tokenize", json={
            "content": "The history of the city and its long river and bridges " * 20},
            timeout=30).json()["tokens"][:120]
        body = {"prompt": ids, "max_tokens": 4, "n": 70, "temperature": 0.7, "seed": 1}
        for stream in (False, True):
            r = requests.post(srv.url + "/v1/completions", json={**body, "stream": stream},
                              timeout=120)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "n"
            assert "8400" in r.json()["error"]["message"]
        r = requests.post(srv.url + "/v1/completions", json={**body, "n": 60}, timeout=300)
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"]) == 60
    finally:
        stop_runtime(srv)
