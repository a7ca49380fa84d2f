"""A minimal asyncio HTTP/1.1 client for the load generator (standard library only).

One TCP connection per request (`Connection: close`), TCP_NODELAY, the body read as it arrives
(chunked, Content-Length or until close), so that every piece of a server-sent-event stream is
timestamped when it reaches the client. Timing uses time.perf_counter().
"""
import asyncio
import json
import socket
import time
import urllib.parse


class HttpError(Exception):
    """A transport failure: connection refused or reset, a malformed response."""


class Response:
    def __init__(self, status, headers, reader, writer):
        self.status = status
        self.headers = headers
        self._reader = reader
        self._writer = writer

    async def iter_body(self):
        """Yields (perf_counter time, bytes) for each piece of the body as it arrives."""
        r = self._reader
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            while True:
                line = await r.readline()
                if not line:
                    raise HttpError("connection closed inside a chunked body")
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await r.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                data = await r.readexactly(size)
                await r.readline()  # CRLF after the chunk
                yield time.perf_counter(), data
        elif "content-length" in self.headers:
            left = int(self.headers["content-length"])
            while left > 0:
                data = await r.read(min(left, 65536))
                if not data:
                    raise HttpError("connection closed before Content-Length bytes")
                left -= len(data)
                yield time.perf_counter(), data
        else:
            while True:
                data = await r.read(65536)
                if not data:
                    return
                yield time.perf_counter(), data

    async def read(self):
        return b"".join([d async for _, d in self.iter_body()])

    def close(self):
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - closing a broken socket
            pass


def split_url(url):
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http":
        raise ValueError(f"only http:// URLs are supported: {url}")
    return u.hostname, u.port or 80, (u.path or "/") + (("?" + u.query) if u.query else "")


async def request(method, url, body=None, headers=None):
    """Sends one request; returns a Response once the status line and headers are in."""
    host, port, path = split_url(url)
    try:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    except OSError as e:
        raise HttpError(f"connect {host}:{port}: {e}") from e
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = b""
    hdrs = {"Host": f"{host}:{port}", "Connection": "close", "Accept": "*/*"}
    if body is not None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
        hdrs["Content-Length"] = str(len(payload))
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    try:
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise HttpError("connection closed before the status line")
        parts = status_line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HttpError(f"bad status line {status_line!r}")
        status = int(parts[1])
        resp_headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise HttpError("connection closed inside the headers")
            k, _, v = line.decode("latin-1").partition(":")
            resp_headers[k.strip().lower()] = v.strip()
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        writer.close()
        raise HttpError(str(e) or type(e).__name__) from e
    return Response(status, resp_headers, reader, writer)


async def get_json(url, body=None, method=None, timeout=10.0):
    """A small JSON call (tokenize, models); returns (status, parsed body or None)."""
    async def go():
        resp = await request(method or ("POST" if body is not None else "GET"), url, body)
        try:
            data = await resp.read()
        finally:
            resp.close()
        try:
            return resp.status, json.loads(data)
        except ValueError:
            return resp.status, None
    return await asyncio.wait_for(go(), timeout)


class SSEParser:
    """Splits a text/event-stream into the `data:` payloads of its events."""

    def __init__(self):
        self._buf = b""

    def feed(self, data):
        self._buf += data.replace(b"\r\n", b"\n")
        out = []
        while True:
            i = self._buf.find(b"\n\n")
            if i < 0:
                return out
            event, self._buf = self._buf[:i], self._buf[i + 2:]
            lines = [ln[5:].lstrip(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(lines).decode("utf-8", "replace"))
