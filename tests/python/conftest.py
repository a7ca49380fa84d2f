"""Starts one real kinfer-runtime for the whole session and hands its base URL to the tests.

The binary comes from $KINFER_BIN_DIR (scripts/test.sh sets it) or build/bin; the model from
$KINFER_MODEL or models/smollm2-135m-instruct-q4_1.gguf. The server listens on a free
127.0.0.1 port; the fixture waits for /ready and stops the server (SIGTERM) after the session.
"""
import os
import pathlib
import signal
import subprocess
import tempfile
import time

import pytest
import requests

from sidecar_harness import FakeUpstream, binary, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_NAME = "smollm2-135m-instruct-q4_1"
CTX_SIZE = 2048


def _binary() -> pathlib.Path:
    return binary("kinfer-runtime")


def _model() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("KINFER_MODEL", ROOT / "models" / f"{MODEL_NAME}.gguf"))
    if not path.exists():
        pytest.fail(f"model not found at {path}: run scripts/setup.sh or set KINFER_MODEL")
    return path


class Server:
    def __init__(self, url: str, port: int, proc: subprocess.Popen, log_path: str):
        self.url = url
        self.port = port
        self.proc = proc
        self.log_path = log_path
        self.model = MODEL_NAME
        self.ctx_size = CTX_SIZE

    def log_tail(self, n: int = 40) -> str:
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])


def start_runtime(extra_args=()) -> Server:
    """A kinfer-runtime on a free port serving the bundled model, once /ready answers 200."""
    binary, model = _binary(), _model()
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="kinfer-runtime-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--threads", os.environ.get("KINFER_THREADS", "2"), "--ctx-size", str(CTX_SIZE),
         "--log-level", "info", *extra_args],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    srv = Server(f"http://127.0.0.1:{port}", port, proc, log.name)
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"kinfer-runtime exited with {proc.returncode}:\n{srv.log_tail()}")
        try:
            if requests.get(srv.url + "/ready", timeout=1).status_code == 200:
                return srv
        except requests.ConnectionError:
            pass
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"kinfer-runtime not ready after 120 s:\n{srv.log_tail()}")
        time.sleep(0.1)


def stop_runtime(srv: Server, timeout: float = 15):
    """SIGTERM, then SIGKILL after `timeout`; prints the log when the exit was not clean."""
    srv.proc.send_signal(signal.SIGTERM)
    try:
        rc = srv.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait()
        rc = None
    if rc not in (0, None):
        print(f"kinfer-runtime exited with {rc}:\n{srv.log_tail()}")
    os.unlink(srv.log_path)
    return rc


@pytest.fixture(scope="session")
def server():
    srv = start_runtime()
    try:
        yield srv
    finally:
        stop_runtime(srv)


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def metric_value(text: str, name: str, labels: str = "") -> float:
    """The value of one sample line `name{labels} value` in a Prometheus text page (0 if absent)."""
    want = name + ("{" + labels + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split(" ")[-1])
    return 0.0


# The fake upstream of the sidecar tests: one per module, its knobs and counters reset per test.
@pytest.fixture(scope="module")
def upstream():
    up = FakeUpstream(models=("primary", "small"))
    yield up
    up.stop()


@pytest.fixture
def fake(upstream):
    upstream.reset()
    return upstream
