"""Starts real kinfer-sidecar and kinfer-fake-upstream processes for the sidecar tests.

Binaries come from $KINFER_BIN_DIR (scripts/test.sh sets it) or build/bin. Every process listens
on a free 127.0.0.1 port and is stopped (SIGTERM, then SIGKILL) when its context exits; its log is
printed when a test fails to start it.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import requests
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary(name: str) -> pathlib.Path:
    bin_dir = os.environ.get("KINFER_BIN_DIR")
    path = pathlib.Path(bin_dir) / name if bin_dir else ROOT / "build" / "bin" / name
    if not path.exists():
        pytest.fail(f"{name} not found at {path}: build it (scripts/setup.sh) or set KINFER_BIN_DIR")
    return path


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, and never one this test process handed out before: the
    kernel can return a just-closed port again, and two processes started back to back were
    then given the same one ('bind: Address already in use' in a clean-clone CI run)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class Process:
    """A child process with a log file; stop() is idempotent."""

    def __init__(self, args, name):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def log_tail(self, n: int = 40) -> str:
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


class FakeUpstream(Process):
    """kinfer-fake-upstream: a controllable OpenAI-shaped upstream (tests/sidecar/fake_upstream)."""

    def __init__(self, models=("primary",), capacity=0, port=0):
        args = [str(binary("kinfer-fake-upstream")), "--host", "127.0.0.1", "--port", str(port)]
        for m in models:
            args += ["--model", m]
        if capacity:
            args += ["--capacity", str(capacity)]
        super().__init__(args, "fake-upstream")
        line = self.proc.stdout.readline()
        if not line.startswith("LISTENING "):
            self.stop()
            pytest.fail(f"fake upstream did not start: {line!r}\n{self.log_tail()}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def control(self, **settings):
        r = requests.post(self.url + "/control", json=settings, timeout=5)
        r.raise_for_status()

    def reset(self):
        requests.post(self.url + "/control/reset", timeout=5).raise_for_status()

    def stats(self) -> dict:
        return requests.get(self.url + "/control/stats", timeout=5).json()


class Sidecar(Process):
    """kinfer-sidecar with a YAML config written from `config` (a dict merged over listen/upstream)."""

    def __init__(self, upstream_url: str, config: dict | None = None, wait_ready=True,
                 port: int | None = None):
        """`port`: the port `config`'s own `listen` names, when it names one."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = {"listen": f"127.0.0.1:{self.port}", "upstream": upstream_url}
        cfg.update(config or {})
        self.config_file = tempfile.NamedTemporaryFile("w", prefix="sidecar-", suffix=".yaml",
                                                       delete=False)
        self.write_config(cfg)
        super().__init__([str(binary("kinfer-sidecar")), "--config", self.config_file.name,
                          "--log-level", "info"], "kinfer-sidecar")
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"kinfer-sidecar exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.time() > deadline:
                self.stop()
                pytest.fail(f"kinfer-sidecar not healthy after 20 s:\n{self.log_tail()}")
            time.sleep(0.05)

    def write_config(self, cfg: dict):
        self.config = cfg
        with open(self.config_file.name, "w") as f:
            yaml.safe_dump(cfg, f)

    def metrics(self) -> str:
        return requests.get(self.url + "/metrics", timeout=5).text

    def metric(self, name: str, **labels) -> float:
        """The value of one sample of /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if "{" in key:
                metric, _, rest = key.partition("{")
                got = ",".join(sorted(rest.rstrip("}").split(",")))
            else:
                metric, got = key, ""
            if metric == name and got == want:
                return float(value)
        return 0.0

    def stats(self) -> dict:
        return requests.get(self.url + "/stats", timeout=5).json()


def chat_body(model="primary", stream=False, **extra) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream}
    body.update(extra)
    return body


def post_chat(url: str, body: dict | None = None, headers: dict | None = None, timeout=30,
              session=None, **kw):
    return (session or requests).post(
        url + "/v1/chat/completions", data=json.dumps(body or chat_body()),
        headers={"Content-Type": "application/json", **(headers or {})}, timeout=timeout, **kw)


def wait_for(predicate, timeout=5.0):
    """Polls predicate() every 20 ms until it is true or `timeout` seconds pass; its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def read_http_message(recv, buf: bytes = b""):
    """Reads one HTTP/1.1 message framed by Content-Length (or without a body) with `recv()`
    (returns b"" at the end), starting from the already-read `buf`. Returns (head, body, rest),
    or None when the peer closed before a whole message."""
    while b"\r\n\r\n" not in buf:
        data = recv()
        if not data:
            return None
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buf) < length:
        data = recv()
        if not data:
            return None
        buf += data
    return head, buf[:length], buf[length:]
