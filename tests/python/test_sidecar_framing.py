"""kinfer-sidecar relays what an upstream sends as HTTP says a proxy must, against a raw-socket
upstream scripted byte by byte: interim 1xx answers are not the response, unknown status codes and
repeated header lines pass as they are, a non-event-stream body cut short reaches the client
incomplete, and 204 carries no Content-Length."""
import json
import socket
import threading
import time

import pytest

from sidecar_harness import Sidecar, read_http_message


class RawUpstream:
    """Answers each request on each connection by calling `answer(request_bytes, sock)`."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        with conn:
            while True:
                message = read_http_message(lambda: conn.recv(65536), buf)
                if message is None:
                    return
                head, body, buf = message
                request = head + b"\r\n\r\n" + body
                self.requests.append(request)
                if self.answer(request, conn) is False:
                    return

    def stop(self):
        self.sock.close()


def raw_request(port, request: bytes, timeout=3.0) -> bytes:
    """Sends `request`, returns everything read until the server closes or `timeout` passes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            out += data
        return out


def chat_request(key: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"model": "primary", "temperature": 0.5,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + key.encode() + b"\r\n" + extra +
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.fixture
def relay():
    made = []

    def make(answer, config=None):
        up = RawUpstream(answer)
        sc = Sidecar(up.url, {"cache": {"enabled": False}, **(config or {})})
        made.append((up, sc))
        return up, sc

    yield make
    for up, sc in made:
        sc.stop()
        up.stop()


def test_an_interim_1xx_is_not_the_answer_and_never_reaches_another_client(relay):
    """An upstream's 100 Continue before its 200: the client gets its own 200. Taken as final, the
    real 200 stayed on the pooled connection and the next client got it (another's answer)."""
    def answer(request, conn):
        who = b"alice" if b"sk-alice" in request else b"bob"
        body = b'{"answer for":"' + who + b'"}'
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        time.sleep(0.3)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)

    _, sc = relay(answer)
    got = {}

    def ask(key):
        got[key] = raw_request(sc.port, chat_request(key))

    first = threading.Thread(target=ask, args=("sk-alice",))
    first.start()
    time.sleep(0.1)
    ask("sk-bob")
    first.join()
    for key, who in (("sk-alice", b"alice"), ("sk-bob", b"bob")):
        assert got[key].startswith(b"HTTP/1.1 200 "), got[key][:200]
        assert got[key].endswith(b'{"answer for":"' + who + b'"}'), got[key][-200:]


def test_unknown_status_codes_and_repeated_header_lines_pass_as_sent(relay):
    def answer(request, conn):
        conn.sendall(b"HTTP/1.1 418 I'm a teapot\r\nContent-Type: application/json\r\n"
                     b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\n\r\n{}")

    up, sc = relay(answer)
    out = raw_request(sc.port, chat_request("sk-x", b"X-Custom: one\r\nX-Custom: two\r\n"))
    head = out.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 418 I'm a teapot", head
    assert [h for h in head if h.lower().startswith(b"set-cookie:")] == \
        [b"Set-Cookie: a=1", b"Set-Cookie: b=2"], head
    sent = up.requests[0].split(b"\r\n\r\n")[0].split(b"\r\n")
    assert [h for h in sent if h.lower().startswith(b"x-custom:")] == \
        [b"X-Custom: one", b"X-Custom: two"], sent


def test_a_chunked_json_body_cut_short_reaches_the_client_incomplete(relay):
    """No terminating chunk and no appended SSE error line: the client must see the body is cut."""
    def answer(request, conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n")
        time.sleep(0.2)
        return False  # closes the connection mid-body

    _, sc = relay(answer)
    out = raw_request(sc.port, chat_request("sk-x"))
    assert out.startswith(b"HTTP/1.1 200 "), out[:200]
    body = out.split(b"\r\n\r\n", 1)[1]
    assert body == b'5\r\n{"a":\r\n', body
    assert b"data:" not in body


def test_a_204_carries_no_content_length(relay):
    def answer(request, conn):
        conn.sendall(b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n")

    _, sc = relay(answer)
    out = raw_request(sc.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = out.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 204"), out[:200]
    assert b"content-length" not in head and b"x-a: 1" in head, head


def test_an_http10_client_that_asks_for_keep_alive_is_told_it_is_kept(relay):
    """HTTP/1.0 keeps a connection only when the answer says `Connection: keep-alive`; without it
    the client waits for a close that comes only at the idle timeout (RFC 9112 9.3)."""
    _, sc = relay(lambda request, conn: conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    with socket.create_connection(("127.0.0.1", sc.port), timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        message = read_http_message(lambda: s.recv(65536))
        assert message is not None
        assert b"connection: keep-alive" in message[0].lower(), message[0]
        s.sendall(b"GET /health HTTP/1.0\r\n\r\n")  # no keep-alive asked: closed after it
        message = read_http_message(lambda: s.recv(65536), message[2])
        assert message is not None and b"connection: close" in message[0].lower(), message[0]
