"""/metrics: content, counters moving with traffic, and `promtool check metrics`."""
import shutil
import subprocess

import pytest
import requests

from conftest import metric_value

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


def test_promtool_check_metrics(server):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (Debian package 'prometheus'); lint not run")
    text = scrape(server)
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout + p.stderr == ""
