"""kinfer-sidecar as a proxy: pass-through, SSE relayed chunk by chunk, bad input, client
disconnects, upstream faults mid-stream, health/ready, SIGTERM drain and SIGHUP reload.
Real processes over real HTTP: the sidecar in front of kinfer-fake-upstream."""
import json
import signal
import socket
import threading
import time

import pytest
import requests

from sidecar_harness import (FakeUpstream, Sidecar, chat_body, free_port, post_chat,
                             read_http_message, wait_for)


@pytest.fixture(scope="module")
def sidecar(upstream):
    sc = Sidecar(upstream.url, {"cache": {"enabled": False}})
    yield sc
    sc.stop()


def sse_events(resp):
    """Yields (arrival_time, data) for each SSE event of a streamed response."""
    buf = b""
    for piece in resp.iter_content(chunk_size=None):
        buf += piece
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    yield time.monotonic(), line[6:].decode()


def test_non_streaming_request_passes_through(fake, sidecar):
    r = post_chat(sidecar.url, chat_body(max_tokens=7), headers={"x-request-id": "abc"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "primary"
    last = fake.stats()["last_request"]
    assert last["path"] == "/v1/chat/completions"
    assert last["body"]["max_tokens"] == 7
    assert last["headers"]["x-request-id"] == "abc"
    assert "x-kinfer-degraded" not in r.headers


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_listen_on_a_port_alone_serves_ipv4_and_ipv6(fake):
    """`listen: ":PORT"` (what the operator renders) is every interface of both families: on an
    IPv6 single-stack cluster the kubelet probes and the Service reach the pod at an IPv6
    address, which a 0.0.0.0 listener never answered."""
    port = free_port()
    sc = Sidecar(fake.url, {"listen": f":{port}"}, port=port)
    try:
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        if not _ipv6_loopback():
            pytest.skip("this machine has no IPv6 loopback (::1) to connect from")
        assert requests.get(f"http://[::1]:{port}/health", timeout=5).status_code == 200
        r = post_chat(f"http://[::1]:{port}")
        assert r.status_code == 200, r.text
    finally:
        sc.stop()


def test_headers_named_by_connection_are_not_forwarded(fake, sidecar):
    # RFC 9110 7.6.1: a header the Connection field names is hop-by-hop.
    r = post_chat(sidecar.url, chat_body(),
                  headers={"Connection": "keep-alive, x-fake-status", "x-fake-status": "500"})
    assert r.status_code == 200, r.text
    assert "x-fake-status" not in fake.stats()["last_request"]["headers"]


def test_request_id_and_forwarded_headers(fake, sidecar):
    # As Envoy: an x-request-id made when the client sent none, passed upstream, and (kinfer's
    # own) returned on the answer; X-Forwarded-For gains the client, X-Forwarded-Proto is set.
    r = post_chat(sidecar.url, chat_body())
    assert r.status_code == 200, r.text
    rid = r.headers["x-request-id"]
    up = fake.stats()["last_request"]["headers"]
    assert up["x-request-id"] == rid
    assert up["x-forwarded-for"] == "127.0.0.1" and up["x-forwarded-proto"] == "http"
    r = post_chat(sidecar.url, chat_body(), headers={
        "x-request-id": "abc", "X-Forwarded-For": "10.0.0.1", "X-Forwarded-Proto": "https"})
    assert r.headers["x-request-id"] == "abc"
    up = fake.stats()["last_request"]["headers"]
    assert up["x-request-id"] == "abc"
    assert up["x-forwarded-for"] == "10.0.0.1, 127.0.0.1" and up["x-forwarded-proto"] == "https"
    # Errors carry it too: the sidecar's own 400, an upstream's error, a 413 before the body.
    for kw in ({"headers": {"x-kinfer-priority": "vip"}},
               {"headers": {"x-fake-status": "500"}},
               {"body": {"model": "primary", "messages": [], "pad": "x" * (2 << 20)}}):
        r = post_chat(sidecar.url, kw.get("body"), headers=kw.get("headers"))
        assert r.status_code >= 400 and r.headers.get("x-request-id"), (kw.get("headers"), r.headers)
    r = post_chat(sidecar.url, headers={"x-request-id": "e1", "x-kinfer-priority": "vip"})
    assert r.status_code == 400 and r.headers["x-request-id"] == "e1"
    stream_rid = None
    with post_chat(sidecar.url, chat_body(stream=True), stream=True) as r:
        stream_rid = r.headers.get("x-request-id")
        list(r.iter_content(chunk_size=None))
    assert stream_rid


def test_absolute_form_target_is_routed_by_its_path(fake, sidecar):
    # RFC 9112 3.2.2: a server must accept absolute-form; the upstream gets origin-form.
    body = json.dumps(chat_body()).encode()
    s = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    s.sendall(b"POST http://127.0.0.1:%d/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
              % (sidecar.port, len(body)) + body)
    data = _read_until_closed(s)
    s.close()
    assert data.startswith(b"HTTP/1.1 200"), data
    assert fake.stats()["last_request"]["path"] == "/v1/chat/completions"


def test_unknown_transfer_coding_is_501(fake, sidecar):
    # RFC 9112 6.1: only chunked is known; gzip is not silently read as plain bytes.
    s = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    data = _read_until_closed(s)
    s.close()
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 501"), data
    assert "gzip" in json.loads(body)["error"]["message"]
    assert fake.stats()["requests"] == 0


def test_stream_is_relayed_chunk_by_chunk(fake, sidecar):
    fake.control(chunks=5, chunk_interval_ms=150)
    with post_chat(sidecar.url, chat_body(stream=True), stream=True) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(r))
    assert events[-1][1] == "[DONE]"
    tokens = [e for e in events if e[1] != "[DONE]"]
    assert len(tokens) >= 5
    # Buffered relaying would deliver everything at once: the chunks must arrive spread out.
    assert events[-1][0] - tokens[0][0] >= 0.4


def test_passthrough_endpoints(fake, sidecar):
    r = requests.get(sidecar.url + "/v1/models", timeout=5)
    assert r.status_code == 200
    assert {m["id"] for m in r.json()["data"]} >= {"primary", "small"}


@pytest.mark.parametrize("body,status,needle,param", [
    (b"{not json", 400, "not valid JSON", None),
    (b"[1, 2]", 400, "JSON object", None),
    (b'{"model": 3, "messages": []}', 400, "model", "model"),
    (b'{"model": "primary", "messages": [], "max_tokens": "x"}', 400, "max_tokens", "max_tokens"),
])
def test_bad_bodies_get_openai_errors(fake, sidecar, body, status, needle, param):
    r = requests.post(sidecar.url + "/v1/chat/completions", data=body,
                      headers={"Content-Type": "application/json"}, timeout=5)
    assert r.status_code == status
    err = r.json()["error"]
    assert needle in err["message"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param  # the field at fault, as the runtime names it
    assert fake.stats()["requests"] == 0  # never reached the upstream


def test_bad_headers_get_400(fake, sidecar):
    r = post_chat(sidecar.url, headers={"x-kinfer-priority": "vip"})
    assert r.status_code == 400 and "critical" in r.json()["error"]["message"]
    r = post_chat(sidecar.url, headers={"x-kinfer-timeout": "soon"})
    assert r.status_code == 400 and "x-kinfer-timeout" in r.json()["error"]["message"]


def test_oversized_body_gets_413(fake, sidecar):
    counted = sidecar.metric("kinfer_sidecar_requests_total", **{"class": "standard", "code": "413"})
    big = {"model": "primary", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    r = post_chat(sidecar.url, big)
    assert r.status_code == 413
    assert "limit" in r.json()["error"]["message"]
    assert fake.stats()["requests"] == 0
    # Answered before the body is read, still a policy path's answer: under the default class.
    assert sidecar.metric("kinfer_sidecar_requests_total",
                          **{"class": "standard", "code": "413"}) == counted + 1
    assert requests.get(sidecar.url + "/health", timeout=5).status_code == 200


def test_unknown_route_and_method(sidecar):
    r = requests.get(sidecar.url + "/nope", timeout=5)
    assert r.status_code == 404 and "error" in r.json()
    counted = sidecar.metric("kinfer_sidecar_requests_total", **{"class": "standard", "code": "405"})
    r = requests.get(sidecar.url + "/v1/chat/completions", timeout=5,
                     headers={"x-request-id": "wrong-method"})
    assert r.status_code == 405 and r.headers["Allow"] == "POST" and "error" in r.json()
    # A policy path's answer like any other: it names its request and is counted.
    assert r.headers["x-request-id"] == "wrong-method"
    assert sidecar.metric("kinfer_sidecar_requests_total",
                          **{"class": "standard", "code": "405"}) == counted + 1
    for method in ("PUT", "DELETE", "POST"):
        r = requests.request(method, sidecar.url + "/health", timeout=5)
        assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD", (method, r.status_code)
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert requests.get(sidecar.url + "/health", timeout=5).status_code == 200


def _read_until_closed(s):
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_head_is_answered_like_get_without_a_body(sidecar):
    # RFC 9110 9.3.2: HEAD wherever GET; no body on the wire (an error answer's neither), and the
    # connection stays usable.
    s = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    s.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
              b"HEAD /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = _read_until_closed(s)
    s.close()
    head1, rest = data.split(b"\r\n\r\n", 1)
    assert head1.startswith(b"HTTP/1.1 200"), data
    assert b"content-length: 0" not in head1.lower()
    head2, rest = rest.split(b"\r\n\r\n", 1)
    assert head2.startswith(b"HTTP/1.1 405") and b"Allow: POST" in head2, data
    head3, body3 = rest.split(b"\r\n\r\n", 1)
    assert head3.startswith(b"HTTP/1.1 200") and body3 == b'{"status":"ok"}', data


def test_a_stream_to_an_http10_client_is_not_chunked(fake, sidecar):
    # RFC 9112 7.1: no chunked coding to HTTP/1.0; the body ends when the connection closes.
    fake.control(chunks=3, chunk_interval_ms=10)
    body = json.dumps(chat_body(stream=True)).encode()
    s = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = _read_until_closed(s)
    s.close()
    head, rest = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), data
    assert b"transfer-encoding" not in head.lower(), head
    assert rest.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]"), rest


def _raw_request(port, body: dict, headers=""):
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + headers.encode() + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def test_client_disconnect_cancels_upstream_request(fake, sidecar):
    fake.control(hang=True)
    s = _raw_request(sidecar.port, chat_body())
    assert wait_for(lambda: fake.stats()["in_flight"] == 1)
    s.close()
    assert wait_for(lambda: fake.stats()["cancelled"] == 1), fake.stats()
    assert wait_for(lambda: sidecar.stats()["in_flight"] == 0)


def test_client_disconnect_mid_stream_cancels_upstream(fake, sidecar):
    ok = lambda: sidecar.metric("kinfer_sidecar_requests_total", **{"class": "standard", "code": "200"})
    counted = ok()
    fake.control(chunks=200, chunk_interval_ms=20)
    s = _raw_request(sidecar.port, chat_body(stream=True))
    assert s.recv(4096)  # headers and the first chunks
    s.close()
    assert wait_for(lambda: fake.stats()["cancelled"] == 1), fake.stats()
    # The client got a 200 and left: counted as the 200 it was (as kinfer-runtime counts it).
    assert wait_for(lambda: sidecar.stats()["in_flight"] == 0)
    assert ok() == counted + 1


def test_upstream_killed_mid_stream_ends_with_error_event(fake, sidecar):
    fake.control(chunks=10, disconnect_after_chunks=2)
    with post_chat(sidecar.url, chat_body(stream=True), stream=True) as r:
        assert r.status_code == 200
        events = [data for _, data in sse_events(r)]  # ends: the chunked body is terminated
    assert "[DONE]" not in events
    error = json.loads(events[-1])["error"]
    assert "mid-stream" in error["message"]
    assert sidecar.metric("kinfer_sidecar_upstream_errors_total", kind="reset") >= 1


def test_upstream_errors_map_to_gateway_statuses(fake, sidecar):
    fake.control(reset=True)
    r = post_chat(sidecar.url)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_reset"
    fake.reset()
    fake.control(status=500)
    r = post_chat(sidecar.url)
    assert r.status_code == 500  # the upstream's own error passes through


def test_a_request_the_upstream_read_is_never_sent_twice(fake):
    # The upstream reads the request and then drops a reused keep-alive connection without an
    # answer. It may have acted on the POST, so the sidecar must not replay it (Go's net/http
    # and Envoy without retry_on: reset do not); with retries off, exactly one upstream request.
    sc = Sidecar(fake.url, {"cache": {"enabled": False}, "retries": {"enabled": False}})
    try:
        with requests.Session() as session:  # one client connection: the sidecar pools its own
            assert session.post(sc.url + "/v1/chat/completions", json=chat_body(),
                                timeout=10).status_code == 200
            fake.reset()
            r = session.post(sc.url + "/v1/chat/completions", json=chat_body(),
                             headers={"x-fake-reset": "1"}, timeout=10)
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_reset"
        stats = fake.stats()
        assert stats["requests"] == 1 and stats["aborted"] == 1, stats
        fake.reset()
        r = post_chat(sc.url)
        assert r.status_code == 200, r.text
    finally:
        sc.stop()


def test_health_and_ready(fake, sidecar):
    assert requests.get(sidecar.url + "/health", timeout=5).json() == {"status": "ok"}
    assert requests.get(sidecar.url + "/ready", timeout=5).status_code == 200


def test_ready_is_503_when_upstream_is_down():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    sc = Sidecar(f"http://127.0.0.1:{dead}", {"connect_timeout": "200ms"})
    try:
        assert requests.get(sc.url + "/health", timeout=5).status_code == 200
        r = requests.get(sc.url + "/ready", timeout=5)
        assert r.status_code == 503
        r = post_chat(sc.url)
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "upstream_connect"
    finally:
        sc.stop()


def test_sigterm_drains_in_flight_requests_then_exits(upstream):
    upstream.reset()
    sc = Sidecar(upstream.url, {"drain_timeout": "10s"})
    upstream.control(latency_ms=1000)
    result = {}

    def slow():
        result["r"] = post_chat(sc.url, timeout=10)

    t = threading.Thread(target=slow)
    t.start()
    assert wait_for(lambda: upstream.stats()["in_flight"] == 1)
    sc.signal(signal.SIGTERM)
    time.sleep(0.2)
    # Draining: not ready, and new connections are refused (the listener is closed).
    with pytest.raises(requests.ConnectionError):
        requests.get(sc.url + "/health", timeout=2)
    t.join(10)
    assert result["r"].status_code == 200  # the in-flight request finished
    assert sc.proc.wait(10) == 0


def test_sighup_reloads_config_without_dropping_connections(upstream):
    upstream.reset()
    sc = Sidecar(upstream.url)
    try:
        session = requests.Session()  # one keep-alive connection across the reload
        for _ in range(3):
            assert post_chat(sc.url, session=session).status_code == 200
        cfg = dict(sc.config)
        cfg["rate_limits"] = {"default": {"requests_per_second": 0.5, "request_burst": 1}}
        sc.write_config(cfg)
        sc.signal(signal.SIGHUP)
        assert wait_for(lambda: sc.metric("kinfer_sidecar_config_reloads_total", result="ok") == 1)
        codes = [post_chat(sc.url, session=session).status_code for _ in range(3)]
        assert codes[0] == 200 and 429 in codes[1:]
        # A bad file is refused and the running config stays.
        with open(sc.config_file.name, "w") as f:
            f.write("admission: {max_concurrency: -1}\n")
        sc.signal(signal.SIGHUP)
        assert wait_for(lambda: sc.metric("kinfer_sidecar_config_reloads_total", result="failed") == 1)
        assert sc.proc.poll() is None
        session.close()
    finally:
        sc.stop()


def test_a_client_that_stops_reading_is_closed_and_its_slot_freed(upstream):
    # A stream far larger than the socket buffers, to a client that never reads: once a write
    # has stalled for client_write_timeout the sidecar closes the connection, cancels the upstream
    # request and frees the admission slot (max_concurrency 1: the next request gets through).
    upstream.reset()
    sc = Sidecar(upstream.url, {"cache": {"enabled": False}, "client_write_timeout": "1s",
                                "admission": {"max_concurrency": 1, "reserved_for_top": 0}})
    try:
        upstream.control(chunks=1_000_000)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect(("127.0.0.1", sc.port))
        body = json.dumps(chat_body(stream=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert wait_for(lambda: sc.stats()["in_flight"] == 1)
        started = time.monotonic()
        assert wait_for(lambda: upstream.stats()["cancelled"] == 1, timeout=20), upstream.stats()
        assert wait_for(lambda: sc.stats()["in_flight"] == 0)
        assert time.monotonic() - started < 15
        upstream.control(chunks=4)
        r = post_chat(sc.url, chat_body())
        assert r.status_code == 200, r.text
        s.close()
    finally:
        sc.stop()


def _read_responses(s, n, timeout=10):
    """Reads n whole HTTP/1.1 responses (Content-Length bodies) from socket s; their statuses."""
    s.settimeout(timeout)
    buf, statuses = b"", []
    while len(statuses) < n:
        message = read_http_message(lambda: s.recv(65536), buf)
        assert message is not None, f"connection closed after {len(statuses)} responses"
        head, _, buf = message
        statuses.append(int(head.split(b" ")[1]))
    return statuses


@pytest.mark.parametrize("kind", ["models", "chat"])
def test_pipelined_requests_are_answered_in_order(fake, sidecar, kind):
    # HTTP/1.1 pipelining: requests sent back to back on one connection before any answer.
    if kind == "models":
        one = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    else:
        body = json.dumps(chat_body()).encode()
        one = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
               b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    s.sendall(one * 3)
    assert _read_responses(s, 3) == [200, 200, 200]
    s.close()


def test_a_malformed_chunked_body_gets_a_400(sidecar):
    s = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    assert data.startswith(b"HTTP/1.1 400"), data
    s.close()
