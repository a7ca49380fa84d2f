"""kinfer-sidecar's policies end to end over real HTTP: rate limits, priority admission with
deadlines, the circuit breaker with fallback and recovery, the response cache, retries, and the
signals (/metrics passes promtool, /stats)."""
import concurrent.futures as cf
import http.client
import json
import shutil
import signal
import subprocess
import time

import pytest
import requests

from sidecar_harness import FakeUpstream, Sidecar, chat_body, post_chat, wait_for


@pytest.fixture
def make_sidecar(upstream):
    started = []

    def make(config=None, url=None):
        sc = Sidecar(url or upstream.url, config)
        started.append(sc)
        return sc

    yield make
    for sc in started:
        sc.stop()


def assert_overload_reply(r, status):
    assert r.status_code == status, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["message"]
    assert r.headers.get("x-request-id"), r.headers  # every answer names its request


def test_rate_limit_per_tenant_gives_429_with_retry_after(fake, make_sidecar):
    sc = make_sidecar({
        "api_keys": {"sk-a": {"tenant": "team-a"}, "sk-b": {"tenant": "team-b"}},
        "rate_limits": {"default": {"requests_per_second": 1, "request_burst": 2}},
    })
    a = {"Authorization": "Bearer sk-a"}
    codes = [post_chat(sc.url, headers=a).status_code for _ in range(3)]
    assert codes[:2] == [200, 200]
    r = post_chat(sc.url, headers=a)
    assert_overload_reply(r, 429)
    assert "team-a" in r.json()["error"]["message"]
    # Another tenant has its own bucket.
    assert post_chat(sc.url, headers={"x-api-key": "sk-b"}).status_code == 200
    assert sc.metric("kinfer_sidecar_rejected_total", **{"class": "standard",
                                                         "reason": "rate_limited_requests"}) >= 1


def test_required_api_keys_refuse_others_with_401(fake, make_sidecar):
    # With require_api_key, a random key can neither pass nor take a rate-limit bucket of its
    # own, and a key cannot claim a class above its own.
    sc = make_sidecar({
        "api_keys": {"sk-a": {"tenant": "team-a", "class": "batch"}},
        "require_api_key": True,
    })
    for headers in ({}, {"Authorization": "Bearer sk-random"}, {"x-api-key": "nope"}):
        r = post_chat(sc.url, headers=headers)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert "sk-random" not in r.text
    assert fake.stats()["requests"] == 0
    r = post_chat(sc.url, headers={"Authorization": "Bearer sk-a", "x-kinfer-priority": "critical"})
    assert r.status_code == 200, r.text
    assert fake.stats()["last_request"]["headers"]["x-kinfer-priority"] == "2"
    # The sidecar checked the key: it goes no further upstream.
    sent = {k.lower() for k in fake.stats()["last_request"]["headers"]}
    assert "authorization" not in sent and "x-api-key" not in sent, sent
    assert sc.metric("kinfer_sidecar_requests_total", **{"class": "standard", "code": "401"}) == 3
    # Every proxied path, not only generation: the tokenizer and the model list too.
    before = fake.stats()["requests"]
    for method, path in (("GET", "/v1/models"), ("POST", "/tokenize"), ("POST", "/detokenize")):
        r = requests.request(method, sc.url + path, json={"content": "hi", "tokens": [1]},
                             headers={"x-api-key": "nope"}, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", r.text
    assert requests.get(sc.url + "/v1/models", headers={"x-api-key": "sk-a"},
                        timeout=10).status_code == 200
    # Its own endpoints stay open: probes and scrapes carry no key.
    assert requests.get(sc.url + "/health", timeout=10).status_code == 200
    assert requests.get(sc.url + "/metrics", timeout=10).status_code == 200
    assert fake.stats()["requests"] == before + 1


def test_token_rate_limit(fake, make_sidecar):
    sc = make_sidecar({"rate_limits": {"default": {"tokens_per_second": 100, "token_burst": 400}}})
    assert post_chat(sc.url, chat_body(max_tokens=300)).status_code == 200
    assert_overload_reply(post_chat(sc.url, chat_body(max_tokens=300)), 429)
    # More than the burst can never pass: 429 without Retry-After.
    r = post_chat(sc.url, chat_body(max_tokens=5000))
    assert r.status_code == 429 and "retry-after" not in r.headers


def test_no_way_of_writing_a_request_passes_the_policies(fake, make_sidecar):
    # The runtime serves a path with a trailing slash or %XX escapes as the path itself, and
    # generates to max_completion_tokens over max_tokens (a Responses body: max_output_tokens
    # only). The sidecar must judge what the runtime will run: here, more tokens than the burst.
    sc = make_sidecar({"rate_limits": {"default": {"tokens_per_second": 100, "token_burst": 400}}})
    big = json.dumps(chat_body(max_tokens=5000))
    for path in ["/v1/chat/completions", "/v1/chat/completions/", "/v1/chat/completions//",
                 "/v1/chat/%63ompletions", "/v1/chat/completions%2F", "/v1/completions/"]:
        r = requests.post(sc.url + path, data=big, headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 429, (path, r.status_code, r.text)
    conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=30)  # requests would re-quote "%6"
    conn.request("POST", "/v1/chat/%6", body=big, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 400 and json.loads(r.read())["error"]["message"]
    conn.close()
    assert post_chat(sc.url, chat_body(max_tokens=1, max_completion_tokens=5000)).status_code == 429
    # /v1/responses reads max_output_tokens whatever else its body holds (the runtime routes it by
    # path): `messages` or `prompt` beside `input` does not make it a chat body to the policies.
    for extra in [{"max_tokens": 1}, {"messages": []}, {"prompt": []}, {"prompt": None}]:
        r = requests.post(sc.url + "/v1/responses", json={"model": "primary", "input": "hello",
                                                          "max_output_tokens": 5000, **extra},
                          timeout=30)
        assert r.status_code == 429, (extra, r.text)
    assert fake.stats()["requests"] == 0


def test_queue_full_and_deadline_give_503(fake, make_sidecar):
    sc = make_sidecar({"admission": {"max_concurrency": 1, "reserved_for_top": 0, "max_queue": 3,
                                     "max_queue_per_class": 3}})
    fake.control(latency_ms=500)
    with cf.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(post_chat, sc.url) for _ in range(3)]  # 1 running, 2 queued
        assert wait_for(lambda: sc.stats()["queue_depth"] == 2)
        # A request that cannot start within 100 ms is turned away early, not served late.
        early = post_chat(sc.url, headers={"x-kinfer-timeout": "100ms"})
        futures += [pool.submit(post_chat, sc.url) for _ in range(2)]  # 1 more fits, 1 does not
        replies = [f.result() for f in futures]
    assert_overload_reply(early, 503)
    assert early.json()["error"]["code"] == "deadline_unreachable"
    codes = sorted(r.status_code for r in replies)
    assert codes == [200, 200, 200, 200, 503]
    full = next(r for r in replies if r.status_code == 503)
    assert_overload_reply(full, 503)
    assert full.json()["error"]["code"] == "queue_full"
    assert sc.metric("kinfer_sidecar_rejected_total", **{"class": "standard",
                                                         "reason": "queue_full"}) == 1


def test_top_class_keeps_capacity_while_lower_classes_are_shed(fake, make_sidecar):
    sc = make_sidecar({"admission": {"max_concurrency": 2, "reserved_for_top": 1, "max_queue": 4,
                                     "max_queue_per_class": 4}})
    fake.control(latency_ms=300)
    with cf.ThreadPoolExecutor(16) as pool:
        batch = [pool.submit(post_chat, sc.url, headers={"x-kinfer-priority": "batch"})
                 for _ in range(8)]
        time.sleep(0.1)
        t0 = time.monotonic()
        top = post_chat(sc.url, headers={"x-kinfer-priority": "critical"})
        top_latency = time.monotonic() - t0
        batch_codes = [f.result().status_code for f in batch]
    assert top.status_code == 200
    # The reserved slot serves the top class at once: one service time, no queueing behind batch.
    assert top_latency < 0.55, top_latency
    assert 503 in batch_codes  # the lower class was shed explicitly


def test_breaker_opens_falls_back_then_recovers(upstream, make_sidecar):
    upstream.reset()
    fallback = FakeUpstream(models=("small",))
    try:
        sc = make_sidecar({
            "circuit_breaker": {"window_type": "count", "window_size": 4, "minimum_calls": 4,
                                "failure_rate_threshold": 50, "open_duration": "1s",
                                "half_open_permitted_calls": 1},
            "degrade": {"fallback_model": "small", "fallback_upstream": fallback.url},
            "retries": {"enabled": False},
        })
        upstream.control(status=500)
        for _ in range(4):
            assert post_chat(sc.url).status_code == 500
        assert sc.stats()["breaker"] == "OPEN"
        # The fallback serves meanwhile, so the pod stays in its Service (ready).
        assert requests.get(sc.url + "/ready", timeout=5).status_code == 200
        # Open: traffic goes to the small model on the fallback upstream, marked degraded.
        r = post_chat(sc.url, chat_body(max_tokens=9))
        assert r.status_code == 200, r.text
        assert r.headers["x-kinfer-degraded"] == "breaker_open"
        assert r.json()["model"] == "small"
        assert fallback.stats()["last_request"]["body"]["model"] == "small"
        assert sc.metric("kinfer_sidecar_degraded_total",
                         **{"class": "standard", "reason": "breaker_open"}) == 1
        # The primary comes back; after open_duration a probe closes the breaker.
        upstream.reset()
        time.sleep(1.1)
        r = post_chat(sc.url)
        assert r.status_code == 200 and "x-kinfer-degraded" not in r.headers
        assert sc.stats()["breaker"] == "CLOSED"
        assert requests.get(sc.url + "/ready", timeout=5).status_code == 200
    finally:
        fallback.stop()


def test_upstream_killed_mid_stream_then_restarted(make_sidecar):
    """The issue's fault sequence with a real process kill: the client gets a clean error event,
    the breaker opens on the failures, traffic goes to the fallback, and when the upstream comes
    back on its address the breaker goes half-open and closes."""
    primary = FakeUpstream(models=("primary",))
    fallback = FakeUpstream(models=("small",))
    try:
        sc = make_sidecar({
            "circuit_breaker": {"window_type": "count", "window_size": 3, "minimum_calls": 3,
                                "open_duration": "1s", "half_open_permitted_calls": 1},
            "degrade": {"fallback_model": "small", "fallback_upstream": fallback.url},
            "connect_timeout": "300ms",
        }, url=primary.url)
        primary.control(chunks=100, chunk_interval_ms=20)
        with post_chat(sc.url, chat_body(stream=True), stream=True) as r:
            assert r.status_code == 200
            it = r.iter_lines()
            assert next(it).startswith(b"data: ")
            primary.proc.send_signal(signal.SIGKILL)
            lines = [line for line in it if line.startswith(b"data: ")]
        # Until the killed process is reaped its listening socket may still complete a handshake
        # (then reset: 502); once it is gone connections are refused (503 upstream_connect).
        primary.proc.wait(5)
        error = json.loads(lines[-1][6:])["error"]
        assert error["code"] == "upstream_reset"
        # Connections refused (503 upstream_connect) until the failures open the breaker: the
        # broken stream and two refused connections fill the window of 3.
        for _ in range(2):
            r = post_chat(sc.url)
            assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_connect"
        assert sc.stats()["breaker"] == "OPEN"
        r = post_chat(sc.url)
        assert r.status_code == 200 and r.headers["x-kinfer-degraded"] == "breaker_open"
        assert r.json()["model"] == "small"
        # The upstream comes back on the same port: after open_duration, a probe closes it.
        primary.stop()
        primary = FakeUpstream(models=("primary",), port=primary.port)
        time.sleep(1.1)
        r = post_chat(sc.url)
        assert r.status_code == 200 and "x-kinfer-degraded" not in r.headers
        assert sc.stats()["breaker"] == "CLOSED"
    finally:
        primary.stop()
        fallback.stop()


def test_breaker_open_without_fallback_rejects_with_503(fake, make_sidecar):
    sc = make_sidecar({
        "circuit_breaker": {"window_type": "count", "window_size": 2, "minimum_calls": 2,
                            "open_duration": "30s", "half_open_permitted_calls": 1},
        "retries": {"enabled": False},
    })
    fake.control(status=500)
    for _ in range(2):
        post_chat(sc.url)
    before = fake.stats()["requests"]
    r = post_chat(sc.url)
    assert_overload_reply(r, 503)
    assert int(r.headers["retry-after"]) >= 25  # the rest of open_duration
    assert fake.stats()["requests"] == before  # not sent upstream


def test_upstream_shedding_neither_opens_the_breaker_nor_counts_as_a_first_token(fake, make_sidecar):
    # kinfer-runtime's full queue answers 503 + Retry-After: load shed on purpose, from a healthy
    # upstream. The sidecar once read the header after the answer had gone to the client, so an
    # overload burst opened the breaker (and /ready went 503), and every error answer was observed
    # as a ~1 ms time to first token, pulling the P99 the autoscaler reads down.
    sc = make_sidecar({
        "circuit_breaker": {"window_type": "count", "window_size": 4, "minimum_calls": 4,
                            "open_duration": "30s", "half_open_permitted_calls": 1},
        "retries": {"enabled": False},
    })
    ttft_count = lambda: sc.metric("kinfer_sidecar_time_to_first_token_seconds_count",
                                   **{"class": "standard"})
    fake.control(status=503)  # with Retry-After: 1
    for _ in range(6):
        r = post_chat(sc.url)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    for stream in (False, True):
        fake.control(status=404)
        assert post_chat(sc.url, chat_body(stream=stream)).status_code == 404
    assert sc.stats()["breaker"] == "CLOSED"
    assert requests.get(sc.url + "/ready", timeout=5).status_code == 200
    assert sc.metric("kinfer_sidecar_upstream_errors_total", kind="status_5xx") == 0
    assert sc.metric("kinfer_sidecar_retries_total", result="denied") == 0  # retries are off
    assert ttft_count() == 0 and sc.stats()["ttft_seconds"]["count"] == 0
    fake.reset()
    assert post_chat(sc.url).status_code == 200
    assert ttft_count() == 1
    # A 5xx without Retry-After is a failure: half of the last four calls open the breaker.
    fake.control(status=500)
    for _ in range(2):
        assert post_chat(sc.url).status_code == 500
    assert sc.stats()["breaker"] == "OPEN"
    assert sc.metric("kinfer_sidecar_upstream_errors_total", kind="status_5xx") == 2
    assert ttft_count() == 1


def test_slo_breach_degrades_lower_classes_only(fake, make_sidecar):
    sc = make_sidecar({"degrade": {"fallback_model": "small", "slo_ttft_p99": "100ms"}})
    fake.control(latency_ms=150)
    for _ in range(20):
        assert post_chat(sc.url, headers={"x-kinfer-priority": "critical"}).status_code == 200
    fake.reset()
    r = post_chat(sc.url, chat_body(max_tokens=1000), headers={"x-kinfer-priority": "batch"})
    assert r.headers.get("x-kinfer-degraded") == "slo"
    sent = fake.stats()["last_request"]["body"]
    assert sent["model"] == "small" and sent["max_tokens"] == 256  # batch's cap
    r = post_chat(sc.url, headers={"x-kinfer-priority": "critical"})
    assert "x-kinfer-degraded" not in r.headers  # the top class only degrades when primary is down


def test_cache_serves_deterministic_requests(fake, make_sidecar):
    sc = make_sidecar()
    body = chat_body(temperature=0, max_tokens=5)
    first = post_chat(sc.url, body)
    assert first.headers["x-kinfer-cache"] == "miss"
    # Key order does not split the cache.
    reordered = dict(reversed(list(body.items())))
    second = post_chat(sc.url, reordered, headers={"x-request-id": "hit-1"})
    assert second.headers["x-kinfer-cache"] == "hit"
    assert second.headers["x-request-id"] == "hit-1" and first.headers["x-request-id"]
    # The same answer under a response id of its own.
    a, b = first.json(), second.json()
    assert a["id"] != b["id"] and b["id"].startswith(a["id"].split("-")[0] + "-")
    assert {k: v for k, v in a.items() if k not in ("id", "created")} == \
        {k: v for k, v in b.items() if k not in ("id", "created")}
    assert fake.stats()["requests"] == 1
    # no-cache bypasses; a sampled request is never cached; errors are never cached.
    post_chat(sc.url, body, headers={"Cache-Control": "no-cache"})
    assert fake.stats()["requests"] == 2
    sampled = chat_body(temperature=0.8)
    post_chat(sc.url, sampled)
    post_chat(sc.url, sampled)
    assert fake.stats()["requests"] == 4
    fake.control(status=500)
    err_body = chat_body(temperature=0, max_tokens=6)
    post_chat(sc.url, err_body)
    fake.reset()
    assert post_chat(sc.url, err_body).status_code == 200
    assert sc.metric("kinfer_sidecar_cache_lookups_total", result="hit") == 1


class _ScriptedUpstream:
    """A tiny upstream whose answers a test scripts: each POST gets the next (headers, body)."""

    def __init__(self, answers):
        import http.server
        import threading
        self.answers = list(answers)
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers, body = outer.answers[min(outer.requests, len(outer.answers) - 1)]
                outer.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


_ANSWER = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                      "model": "primary", "choices": []}).encode()


@pytest.mark.parametrize("headers", [{"Cache-Control": "no-store"},
                                     {"Cache-Control": "private, max-age=60"},
                                     {"Content-Encoding": "br"}],
                         ids=["no-store", "private", "content-coded"])
def test_cache_does_not_store_what_the_upstream_forbids_or_encodes(make_sidecar, headers):
    """An answer the upstream marks no-store or private (RFC 9111) is not stored, and neither is a
    content-coded body (a hit would send it without its Content-Encoding); a plain one is."""
    up = _ScriptedUpstream([(headers, _ANSWER), (headers, _ANSWER), ({}, _ANSWER), ({}, _ANSWER)])
    try:
        sc = make_sidecar(url=up.url)
        body = chat_body(temperature=0, max_tokens=5)
        assert post_chat(sc.url, body).headers["x-kinfer-cache"] == "miss"
        second = post_chat(sc.url, body)
        assert second.headers.get("x-kinfer-cache") != "hit" and up.requests == 2
        plain = chat_body(temperature=0, max_tokens=6)
        post_chat(sc.url, plain)
        assert post_chat(sc.url, plain).headers["x-kinfer-cache"] == "hit" and up.requests == 3
    finally:
        up.stop()


def test_a_cached_answer_with_odd_field_types_is_served_not_a_crash(make_sidecar):
    """A stored 2xx body whose `object` is null (any upstream's quirk) is served at the next hit
    with an id of its own; reading it as a string used to abort the whole sidecar."""
    odd = json.dumps({"id": "chatcmpl-1", "object": None, "created": 1, "choices": []}).encode()
    up = _ScriptedUpstream([({}, odd)])
    try:
        sc = make_sidecar(url=up.url)
        body = chat_body(temperature=0, max_tokens=5)
        assert post_chat(sc.url, body).status_code == 200
        hit = post_chat(sc.url, body)
        assert hit.status_code == 200 and hit.headers["x-kinfer-cache"] == "hit"
        assert hit.json()["object"] is None and hit.json()["id"] != "chatcmpl-1"
        assert sc.proc.poll() is None
    finally:
        up.stop()


def test_retry_on_upstream_503_within_budget(fake, make_sidecar):
    sc = make_sidecar({"retries": {"max_retries": 1, "backoff": "10ms"}})
    fake.control(fail_first=1)
    r = post_chat(sc.url)
    assert r.status_code == 200
    assert fake.stats()["requests"] == 2
    assert sc.metric("kinfer_sidecar_retries_total", result="allowed") == 1
    # Retries are bounded: a persistent 503 is returned after max_retries.
    fake.reset()
    fake.control(status=503)
    r = post_chat(sc.url)
    assert r.status_code == 503 and fake.stats()["requests"] == 2


def test_retry_never_after_bytes_reached_the_client(fake, make_sidecar):
    sc = make_sidecar()
    fake.control(chunks=5, disconnect_after_chunks=1)
    with post_chat(sc.url, chat_body(stream=True), stream=True) as r:
        r.content  # noqa: B018 - drain it
    assert fake.stats()["requests"] == 1


def test_metrics_pass_promtool_and_stats_report_queue_and_ttft(fake, make_sidecar):
    sc = make_sidecar({"degrade": {"slo_ttft_p99": "300ms"}})
    for _ in range(5):
        with post_chat(sc.url, chat_body(stream=True), stream=True) as r:
            r.content  # noqa: B018
    text = sc.metrics()
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/setup.sh installs the prometheus package)")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    for series in ("kinfer_sidecar_queue_depth", "kinfer_sidecar_in_flight",
                   "kinfer_sidecar_time_to_first_token_seconds_bucket",
                   "kinfer_sidecar_request_duration_seconds_bucket",
                   "kinfer_sidecar_breaker_state"):
        assert series in text
    assert 'le="0.3"' in text  # the SLO is a bucket edge
    stats = sc.stats()
    assert stats["queue_depth"] == 0 and stats["in_flight"] == 0
    assert stats["ttft_seconds"]["count"] == 5
    assert 0 < stats["ttft_seconds"]["p50"] <= stats["ttft_seconds"]["p99"] < 1
    assert json.loads(json.dumps(stats)) == stats
