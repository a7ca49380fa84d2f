"""SIGTERM to kinfer-runtime while it generates: running generations are cancelled at once (not
run on until the grace period ends), a stream ends with an error event and [DONE], a whole
response is a 503 with a JSON body, and the process exits 0 well inside its 10 s grace."""
import json
import socket
import threading
import time

import requests

from conftest import metric_value, start_runtime, stop_runtime


def _long_body(stream: bool) -> bytes:
    return json.dumps({"prompt": "Write a very long story about a dragon.", "max_tokens": 1500,
                       "ignore_eos": True, "temperature": 0, "stream": stream}).encode()


def test_sigterm_cancels_running_generations_and_answers_them():
    srv = start_runtime()
    try:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        body = _long_body(stream=True)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        received = b""
        while received.count(b"data: ") < 2:
            chunk = sock.recv(65536)
            assert chunk, "the stream ended early"
            received += chunk

        whole = {}

        def post_whole():
            try:
                r = requests.post(srv.url + "/v1/completions", data=_long_body(stream=False),
                                  headers={"Content-Type": "application/json"}, timeout=60)
                whole["status"], whole["body"] = r.status_code, r.text
            except requests.RequestException as e:
                whole["error"] = repr(e)

        t = threading.Thread(target=post_whole)
        t.start()
        deadline = time.time() + 30
        while metric_value(requests.get(srv.url + "/metrics", timeout=5).text,
                           "kinfer_runtime_num_requests_running") < 2:
            assert time.time() < deadline, "the second request never started"
            time.sleep(0.05)

        term_at = time.time()
        srv.proc.send_signal(15)
        while not received.endswith(b"0\r\n\r\n"):  # the chunked body's end
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        sock.close()
        t.join(30)
        rc = srv.proc.wait(timeout=30)
        took = time.time() - term_at

        text = received.decode(errors="replace")
        events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        assert events[-1].strip() == "[DONE]", events[-3:]
        err = json.loads(events[-2])
        assert "shutting down" in err["error"]["message"], err
        assert whole.get("status") == 503, whole
        assert json.loads(whole["body"])["error"]["type"] == "overloaded_error", whole
        assert rc == 0
        assert took < 8, f"shutdown took {took:.1f} s: generations ran on into the grace period"
    finally:
        stop_runtime(srv)
