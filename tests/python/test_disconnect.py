"""A client that goes away mid-stream stops its generation."""
import json
import socket
import time

import requests

from conftest import metric_value


def scrape(server) -> str:
    return requests.get(server.url + "/metrics", timeout=10).text


def test_disconnect_cancels_streaming_generation(server):
    before = scrape(server)
    cancelled0 = metric_value(before, "kinfer_runtime_requests_total", 'status="cancelled"')
    gen0 = metric_value(before, "kinfer_runtime_generation_tokens_total")

    max_tokens = 1000  # at ~50-100 tokens/s on 2 cores this would run for 10-20 s
    body = json.dumps({"prompt": "Write a very long story about a dragon.", "max_tokens": max_tokens,
                       "ignore_eos": True, "temperature": 0, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    received = b""
    while received.count(b"data: ") < 2:
        chunk = sock.recv(65536)
        assert chunk, "server closed the stream early"
        received += chunk
    assert b"200 OK" in received.split(b"\r\n", 1)[0]
    assert b"text/event-stream" in received
    sock.close()
    closed_at = time.time()

    # The engine notices at its next write and cancels: the cancelled count moves and the engine
    # goes idle long before max_tokens could have been generated.
    deadline = closed_at + 10
    while True:
        text = scrape(server)
        if metric_value(text, "kinfer_runtime_requests_total", 'status="cancelled"') > cancelled0:
            break
        assert time.time() < deadline, "generation was not cancelled after the client went away"
        time.sleep(0.05)
    assert time.time() - closed_at < 5
    while metric_value(text, "kinfer_runtime_num_requests_running") != 0:
        assert time.time() < deadline, "the engine is still running the abandoned request"
        time.sleep(0.05)
        text = scrape(server)
    generated = metric_value(text, "kinfer_runtime_generation_tokens_total") - gen0
    assert generated < max_tokens / 2, f"{generated} tokens generated after an early disconnect"

    # The next request starts at once (the engine is not busy with the abandoned one).
    t0 = time.time()
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "Hi", "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200
    assert time.time() - t0 < 3


def send_long_completion(port: int, max_tokens: int, n: int = 1) -> socket.socket:
    """Opens a connection and sends a non-streaming completion (of `n` choices) that would run
    for a long time."""
    body = json.dumps({"prompt": "Write a very long story about a dragon.", "max_tokens": max_tokens,
                       "ignore_eos": True, "temperature": 0, "n": n}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return sock


def close_once_running_and_wait_cancelled(server, sock: socket.socket, cancelled0: float) -> str:
    """Waits until the runtime runs a request, closes `sock`, and waits (10 s at most) until the
    runtime is idle with one more cancelled request. Returns the last /metrics page."""
    deadline = time.time() + 30
    while metric_value(scrape(server), "kinfer_runtime_num_requests_running") < 1:
        assert time.time() < deadline, "the request never reached the runtime"
        time.sleep(0.05)
    sock.close()
    closed_at = time.time()
    while True:
        text = scrape(server)
        if (metric_value(text, "kinfer_runtime_num_requests_running") == 0 and
                metric_value(text, "kinfer_runtime_requests_total", 'status="cancelled"')
                > cancelled0):
            return text
        assert time.time() - closed_at < 10, "the runtime kept generating for a gone client"
        time.sleep(0.05)


def test_disconnect_cancels_whole_response_generation(server):
    # No request id, no proxy: the runtime watches the connection of a non-streaming request while
    # it generates, and a client that closes it cancels the generation.
    before = scrape(server)
    cancelled0 = metric_value(before, "kinfer_runtime_requests_total", 'status="cancelled"')
    gen0 = metric_value(before, "kinfer_runtime_generation_tokens_total")
    max_tokens = 1500
    sock = send_long_completion(server.port, max_tokens)
    text = close_once_running_and_wait_cancelled(server, sock, cancelled0)
    generated = metric_value(text, "kinfer_runtime_generation_tokens_total") - gen0
    assert generated < max_tokens / 2, f"{generated} tokens generated after an early disconnect"


def test_disconnect_cancels_every_choice(server):
    # n = 3: three engine requests behind one connection; closing it ends all three (the runtime
    # is idle again), long before any of them could have generated its tokens.
    before = scrape(server)
    cancelled0 = metric_value(before, "kinfer_runtime_requests_total", 'status="cancelled"')
    gen0 = metric_value(before, "kinfer_runtime_generation_tokens_total")
    max_tokens = 1500
    sock = send_long_completion(server.port, max_tokens, n=3)
    text = close_once_running_and_wait_cancelled(server, sock, cancelled0)
    # One HTTP request, counted once.
    assert metric_value(text, "kinfer_runtime_requests_total", 'status="cancelled"') == cancelled0 + 1
    generated = metric_value(text, "kinfer_runtime_generation_tokens_total") - gen0
    assert generated < max_tokens / 2, f"{generated} tokens generated after an early disconnect"


def test_disconnect_is_seen_behind_many_pipelined_bytes(server):
    # The connection's watch kept pipelined bytes up to 64 KiB and then stopped reading: a client
    # that had sent more and left was never seen, and its generation ran to max_tokens.
    before = scrape(server)
    cancelled0 = metric_value(before, "kinfer_runtime_requests_total", 'status="cancelled"')
    gen0 = metric_value(before, "kinfer_runtime_generation_tokens_total")
    max_tokens = 1500
    sock = send_long_completion(server.port, max_tokens)
    sock.sendall(b"x" * 100_000)  # past the pipelining bound (more than the next request)
    text = close_once_running_and_wait_cancelled(server, sock, cancelled0)
    generated = metric_value(text, "kinfer_runtime_generation_tokens_total") - gen0
    assert generated < max_tokens / 2, f"{generated} tokens generated after an early disconnect"


def test_post_cancel_stops_a_whole_response_generation(server):
    # A caller (kinfer-sidecar, for one) names a generation with x-kinfer-request-id and cancels
    # it while its client is still connected.
    import threading
    out = {}

    def run():
        t = time.time()
        r = requests.post(server.url + "/v1/completions",
                          json={"prompt": "Write a very long story about a dragon.",
                                "max_tokens": 1500, "ignore_eos": True, "temperature": 0},
                          headers={"x-kinfer-request-id": "test-cancel-1"}, timeout=120)
        out["status"], out["body"], out["seconds"] = r.status_code, r.json(), time.time() - t

    th = threading.Thread(target=run)
    th.start()
    deadline = time.time() + 30
    while metric_value(scrape(server), "kinfer_runtime_num_requests_running") < 1:
        assert time.time() < deadline, "the request never started"
        time.sleep(0.05)
    time.sleep(0.5)
    r = requests.post(server.url + "/cancel", json={"request_id": "test-cancel-1"}, timeout=10)
    assert r.status_code == 200 and r.json() == {"request_id": "test-cancel-1", "cancelled": 1}
    th.join(30)
    assert out["status"] == 499, out
    assert "cancelled" in out["body"]["error"]["message"]
    assert out["seconds"] < 15  # 1500 tokens would take far longer on this machine
    # Unknown or finished ids cancel nothing; a bad body is a 400.
    r = requests.post(server.url + "/cancel", json={"request_id": "test-cancel-1"}, timeout=10)
    assert r.json()["cancelled"] == 0
    assert requests.post(server.url + "/cancel", json={}, timeout=10).status_code == 400


def test_sidecar_cancels_a_whole_response_when_its_client_goes_away(server):
    # Through kinfer-sidecar: the client of a non-streaming request closes its socket; the sidecar
    # closes its upstream connection and POSTs /cancel for the request it named
    # (x-kinfer-request-id); either stops the runtime generating for nobody.
    from sidecar_harness import Sidecar
    sc = Sidecar(server.url, {"cache": {"enabled": False}})
    try:
        before = scrape(server)
        cancelled0 = metric_value(before, "kinfer_runtime_requests_total", 'status="cancelled"')
        sock = send_long_completion(sc.port, 1500)
        close_once_running_and_wait_cancelled(server, sock, cancelled0)
    finally:
        sc.stop()
