"""Connection caps, on the real binaries: past the cap a new connection is answered 503 with
Retry-After and a JSON body, then closed, instead of waiting in the listen backlog with no answer;
the open-file limit starts raised to its hard limit and sets the default cap; the sidecar's idle
client connections close after client_idle_timeout. The runtime and the sidecar share this code
(common/http/server_session.h)."""
import os
import re
import resource
import select
import socket
import subprocess
import tempfile
import time

import requests
import yaml

from conftest import metric_value, start_runtime, stop_runtime
from sidecar_harness import Process, Sidecar, binary, free_port, post_chat, wait_for


def idle_connections(port: int, n: int) -> list[socket.socket]:
    """n connections the server holds open. A connection the server refused (it is answered and
    closed at once: a connection of an earlier request, its close not yet seen by the server,
    still took a place) is closed and opened again, so that exactly n are held when this returns."""
    held: list[socket.socket] = []
    deadline = time.time() + 20
    while len(held) < n:
        assert time.time() < deadline, f"the server held {len(held)} of {n} connections"
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        readable, _, _ = select.select([s], [], [], 0.3)
        if readable:  # answered (503) or closed: not held
            s.close()
            time.sleep(0.05)
            continue
        held.append(s)
    return held


def check_refusal(r: requests.Response, cap: int):
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "1"
    assert r.headers["Connection"].lower() == "close"
    err = r.json()["error"]
    assert f"at most {cap} open connections" in err["message"]
    assert err["type"] == "overloaded_error"


def test_runtime_answers_a_connection_past_its_cap_with_503_and_serves_once_one_closes():
    srv = start_runtime(["--max-connections", "3"])
    try:
        idle = idle_connections(srv.port, 3)
        check_refusal(requests.get(srv.url + "/health", timeout=10), 3)
        # A refused connection holds no slot, and neither does a closed one.
        check_refusal(requests.get(srv.url + "/v1/models", timeout=10), 3)
        idle.pop().close()
        assert wait_for(lambda: requests.get(srv.url + "/health", timeout=10).status_code == 200)

        def page():
            return requests.get(srv.url + "/metrics", timeout=10).text
        # Two idle connections and the scrape's own.
        assert wait_for(lambda: metric_value(page(), "kinfer_runtime_http_connections") == 3)
        assert metric_value(page(), "kinfer_runtime_http_connections_rejected_total") >= 2
        for s in idle:
            s.close()
    finally:
        stop_runtime(srv)


def test_sidecar_answers_a_connection_past_max_connections_with_503(fake):
    sc = Sidecar(fake.url, {"max_connections": 2})
    try:
        idle = idle_connections(sc.port, 2)
        check_refusal(post_chat(sc.url), 2)
        assert fake.stats()["requests"] == 0  # refused before anything went upstream
        idle.pop().close()
        assert wait_for(lambda: post_chat(sc.url).status_code == 200)
        assert wait_for(lambda: sc.metric("kinfer_sidecar_connections") == 2)
        assert sc.metric("kinfer_sidecar_connections_rejected_total") >= 1
        idle[0].close()
    finally:
        sc.stop()


def test_sidecar_closes_an_idle_client_connection_after_client_idle_timeout(fake):
    sc = Sidecar(fake.url, {"client_idle_timeout": "1s"})
    try:
        s = socket.create_connection(("127.0.0.1", sc.port), timeout=20)
        assert s.recv(1) == b""  # closed by the sidecar (75 s by default; 1 s here)
        s.close()
    finally:
        sc.stop()


def test_sidecar_config_refuses_bad_connection_settings(fake, tmp_path):
    for cfg, needle in [({"client_idle_timeout": "0s"}, "client_idle_timeout: must be > 0"),
                        ({"max_connections": 2000000}, "max_connections: must be at most"),
                        ({"max_connections": -1}, "max_connections")]:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({"upstream": fake.url, **cfg}))
        out = subprocess.run([str(binary("kinfer-sidecar")), "--config", str(path), "--check-config"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode != 0
        assert needle in out.stderr, out.stderr


def _start_sidecar_under(limit_cmd: str, upstream_url: str) -> tuple[Process, int]:
    port = free_port()
    cfg = tempfile.NamedTemporaryFile("w", prefix="sidecar-", suffix=".yaml", delete=False)
    yaml.safe_dump({"listen": f"127.0.0.1:{port}", "upstream": upstream_url}, cfg)
    cfg.close()
    proc = Process(["sh", "-c", limit_cmd + ' && exec "$0" "$@"', str(binary("kinfer-sidecar")),
                    "--config", cfg.name], "kinfer-sidecar")
    url = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            return requests.get(url + "/health", timeout=1).status_code == 200
        except requests.ConnectionError:
            return False
    assert wait_for(healthy, timeout=20), proc.log_tail()
    os.unlink(cfg.name)
    return proc, port


def _soft_files(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(re.split(r"\s{2,}", line.strip())[1])
    raise AssertionError("no 'Max open files' in /proc/PID/limits")


def test_the_soft_open_file_limit_starts_raised_to_the_hard_one(fake):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    proc, _ = _start_sidecar_under("ulimit -S -n 256", fake.url)
    try:
        want = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
        assert _soft_files(proc.proc.pid) == want
    finally:
        proc.stop()


def test_without_max_connections_the_cap_comes_from_the_open_file_limit(fake):
    # 200 files, hard as well as soft: (200 - 128) / 2 = 36 connections.
    proc, port = _start_sidecar_under("ulimit -n 200", fake.url)
    try:
        idle = idle_connections(port, 36)
        check_refusal(requests.get(f"http://127.0.0.1:{port}/health", timeout=10), 36)
        idle.pop().close()
        assert wait_for(lambda: requests.get(f"http://127.0.0.1:{port}/health",
                                             timeout=10).status_code == 200)
        for s in idle:
            s.close()
    finally:
        proc.stop()
