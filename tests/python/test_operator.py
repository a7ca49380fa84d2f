"""kinfer-operator, the binary (issue 5): probes and /metrics, InferenceServices reconciled end to
end against the test API server (tests/kube/apiserver), leader election between two replicas with
a hand-over on SIGTERM, and clear failures for bad flags and configuration.

The controller's behaviour in depth (conflicts, faults, watch drops, restarts, adoption, 1000
services) is pinned by tests/operator/controller/controller_test.cc; this file checks the program
a user runs.
"""
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

from sidecar_harness import Process, binary, free_port
from test_apiserver import ApiServerProcess, isvc, wait_until

APIS = "/apis/serving.kinfer.dev/v1alpha1/namespaces/default/inferenceservices"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def kubeconfig(tmp_path, server_url):
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server_url}
users:
- name: test
  user: {{}}
contexts:
- name: test
  context: {{cluster: test, user: test, namespace: default}}
current-context: test
""")
    return path


class Operator(Process):
    def __init__(self, kubeconfig_path, *extra, env=None):
        self.metrics_port = free_port()
        self.probe_port = free_port()
        args = [str(binary("kinfer-operator")), "--kubeconfig", str(kubeconfig_path),
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
                "--autoscale-interval-ms", "500", *extra]
        super().__init__(args, "kinfer-operator")

    def get(self, path, port=None):
        return requests.get(f"http://127.0.0.1:{port or self.probe_port}{path}", timeout=5)

    def metrics(self) -> str:
        return requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def metric(self, name, labels="") -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name + (("{" + labels) if labels else "")) and (
                    labels or line.startswith(name + " ") or line.startswith(name + "{")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_ready(self, timeout=15):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                return self.get("/readyz").status_code == 200
            except requests.ConnectionError:
                return False
        wait_until(ready, timeout, "operator /readyz")


@pytest.fixture
def api():
    srv = ApiServerProcess("--deployment-controller", "--bookmark-interval", "0.5")
    yield srv
    srv.stop()


def ready_condition(api, name):
    r = api.get(f"{APIS}/{name}")
    if r.status_code != 200:
        return None
    for c in r.json().get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c["status"]
    return None


def test_reconciles_an_inference_service_and_serves_probes_and_metrics(api, tmp_path):
    op = Operator(kubeconfig(tmp_path, api.url))
    try:
        op.wait_ready()
        assert op.get("/healthz").text == "ok\n"
        # Pipelined requests on one connection are answered in order; a POST is a 405.
        with socket.create_connection(("127.0.0.1", op.probe_port), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", got)
        assert statuses == [b"200", b"200", b"405"], got
        assert op.get("/nope").status_code == 404
        api.ok(api.post(APIS, isvc("chat")))
        wait_until(lambda: ready_condition(api, "chat") == "True", 15, "chat Ready")
        dep = api.ok(api.get(f"{DEPLOYMENTS}/chat"))
        assert dep["metadata"]["ownerReferences"][0]["name"] == "chat"
        events = api.ok(api.get("/api/v1/namespaces/default/events",
                                params={"fieldSelector": "involvedObject.name=chat"}))["items"]
        assert any(e["reason"] == "Created" and e["source"]["component"] == "kinfer-operator"
                   for e in events)

        # /scale on the InferenceService (kubectl scale) reaches the Deployment.
        api.ok(api.patch(f"{APIS}/chat", {"spec": {"autoscaling": {"enabled": False},
                                                  "replicas": 1}}))
        api.ok(api.patch(f"{APIS}/chat/scale", {"spec": {"replicas": 3}}))
        wait_until(lambda: api.ok(api.get(f"{DEPLOYMENTS}/chat"))["spec"]["replicas"] == 3, 10,
                   "replicas 3")

        text = op.metrics()
        for series in ("kinfer_operator_reconcile_total", "kinfer_operator_reconcile_time_seconds",
                       "kinfer_operator_workqueue_depth", "kinfer_operator_api_writes_total",
                       "kinfer_operator_leader 1", "kinfer_operator_inferenceservices 1",
                       'kinfer_operator_watch_synced{resource="inferenceservices"} 1'):
            assert series in text, series
        assert op.metric("kinfer_operator_api_writes_total", 'verb="create"') >= 4
        promtool = shutil.which("promtool")
        if promtool:  # the Debian package `prometheus` ships it; scripts/setup.sh installs it
            p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                               text=True)
            assert p.returncode == 0 and p.stdout + p.stderr == "", p.stdout + p.stderr

        # A steady state: the operator makes no writes.
        time.sleep(1.5)
        before = api.stats()["writes"]["byUserAgent"].get("kinfer-operator", 0)
        time.sleep(2.0)
        assert api.stats()["writes"]["byUserAgent"].get("kinfer-operator", 0) == before
    finally:
        assert op.stop() == 0, op.log_tail()


def test_a_relabelled_pod_counts_for_its_new_service_only(tmp_path):
    """A pod whose inferenceservice label moves from a to b (a MODIFIED event: it still matches
    the watch's selector) leaves a's count and joins b's; a is reconciled too. Without a
    deployment controller, the counts come from the pods alone. It used to count for both."""
    label = "serving.kinfer.dev/inferenceservice"
    pods = "/api/v1/namespaces/default/pods"
    api = ApiServerProcess("--bookmark-interval", "0.5")
    op = Operator(kubeconfig(tmp_path, api.url))
    try:
        op.wait_ready()
        for name in ("a", "b"):
            api.ok(api.post(APIS, isvc(name, autoscaling={"enabled": False}, replicas=1)))
        api.ok(api.post(pods, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "p", "namespace": "default",
                                            "labels": {label: "a"}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}}))
        api.ok(api.patch(f"{pods}/p/status", {"status": {
            "phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]}}))

        def ready(name):
            return api.ok(api.get(f"{APIS}/{name}")).get("status", {}).get("readyReplicas")
        wait_until(lambda: ready("a") == 1, 15, "a counts its pod")
        assert ready("b") in (0, None)
        api.ok(api.patch(f"{pods}/p", {"metadata": {"labels": {label: "b"}}}))
        wait_until(lambda: ready("b") == 1, 15, "b counts the relabelled pod")
        wait_until(lambda: ready("a") in (0, None), 15, "a no longer counts it")
    finally:
        assert op.stop() == 0, op.log_tail()
        api.stop()


def lease_holder(api, name):
    r = api.get(f"{LEASES}/{name}")
    return r.json()["spec"].get("holderIdentity", "") if r.status_code == 200 else None


def test_two_replicas_elect_one_leader_and_hand_over_on_sigterm(api, tmp_path):
    kc = kubeconfig(tmp_path, api.url)
    flags = ("--leader-elect", "--leader-election-namespace", "default",
             "--leader-election-id", "kinfer-test-leader")
    a = Operator(kc, *flags, env=None)
    b = Operator(kc, *flags, env=None)
    try:
        a.wait_ready()
        b.wait_ready()  # a standby is ready: warm caches, no writes
        wait_until(lambda: a.metric("kinfer_operator_leader") + b.metric("kinfer_operator_leader")
                   == 1, 15, "one leader")
        leader, standby = (a, b) if a.metric("kinfer_operator_leader") == 1 else (b, a)
        holder = lease_holder(api, "kinfer-test-leader")
        assert holder

        api.ok(api.post(APIS, isvc("one")))
        wait_until(lambda: ready_condition(api, "one") == "True", 15, "one Ready")
        assert standby.metric("kinfer_operator_api_writes_total") == 0

        t0 = time.time()
        assert leader.stop() == 0, leader.log_tail()
        # The Lease was released: the standby takes over at its next try, not after 15 s.
        wait_until(lambda: standby.metric("kinfer_operator_leader") == 1, 10, "hand-over")
        assert time.time() - t0 < 8
        assert lease_holder(api, "kinfer-test-leader") not in ("", holder)
        api.ok(api.post(APIS, isvc("two")))
        wait_until(lambda: ready_condition(api, "two") == "True", 15, "two Ready")
    finally:
        a.stop()
        b.stop()


def test_losing_the_lease_exits_1_at_once_naming_the_lease(api, tmp_path):
    kc = kubeconfig(tmp_path, api.url)
    a = Operator(kc, "--leader-elect", "--leader-election-namespace", "default",
                 "--leader-election-id", "kinfer-test-lost")
    try:
        a.wait_ready()
        wait_until(lambda: a.metric("kinfer_operator_leader") == 1, 15, "leader")
        # Another holder takes the Lease: the next renewal reads it and gives up.
        far = "2099-01-01T00:00:00.000000Z"
        api.ok(api.patch(f"{LEASES}/kinfer-test-lost",
                         {"spec": {"holderIdentity": "thief", "renewTime": far,
                                   "acquireTime": far, "leaseDurationSeconds": 3600}}))
        assert a.proc.wait(15) == 1, a.log_tail()
        # The message names the Lease (it once read a dangling copy and printed "/").
        assert "lost the leader Lease default/kinfer-test-lost" in a.log_tail(), a.log_tail()
    finally:
        a.stop()


def slow_writes_leader(api, kc, name, *extra):
    """A leader whose workers are stuck in slow writes (5 s each; the Lease's own are not slow)."""
    op = Operator(kc, "--leader-elect", "--leader-election-namespace", "default",
                  "--leader-election-id", name, *extra)
    op.wait_ready()
    wait_until(lambda: op.metric("kinfer_operator_leader") == 1, 15, "leader")
    api.ok(api.post("/_test/faults", {
        "latencyMs": 5000, "verbs": ["create", "update", "patch"],
        "resources": ["configmaps", "services", "deployments", "poddisruptionbudgets", "events",
                      "inferenceservices"]}))
    api.ok(api.post("/_test/objects", {"items": [isvc("x1"), isvc("x2")]}))
    time.sleep(1.5)
    return op


def test_shutdown_is_bounded_by_the_shutdown_timeout(api, tmp_path):
    kc = kubeconfig(tmp_path, api.url)
    a = slow_writes_leader(api, kc, "kinfer-test-slow", "--shutdown-timeout", "3")
    try:
        t0 = time.time()
        a.signal(signal.SIGTERM)
        assert a.proc.wait(15) == 1, a.log_tail()
        assert time.time() - t0 < 6, a.log_tail()
        assert "shutdown took longer than 3 s" in a.log_tail(), a.log_tail()
    finally:
        api.post("/_test/faults", {"clear": True})
        a.stop()


def test_losing_the_lease_during_a_shutdown_exits_1_at_once(api, tmp_path):
    kc = kubeconfig(tmp_path, api.url)
    a = slow_writes_leader(api, kc, "kinfer-test-lost2", "--shutdown-timeout", "60")
    try:
        a.signal(signal.SIGTERM)
        time.sleep(0.5)
        assert a.proc.poll() is None  # still waiting on its workers
        far = "2099-01-01T00:00:00.000000Z"
        t0 = time.time()
        r = api.get(f"{LEASES}/kinfer-test-lost2").json()
        r["spec"].update({"holderIdentity": "thief", "renewTime": far, "acquireTime": far,
                          "leaseDurationSeconds": 3600})
        api.ok(api.put(f"{LEASES}/kinfer-test-lost2", r))
        assert a.proc.wait(15) == 1, a.log_tail()
        assert time.time() - t0 < 8, a.log_tail()
    finally:
        api.post("/_test/faults", {"clear": True})
        a.stop()


def test_bad_flags_exit_2_with_a_message(tmp_path):
    exe = str(binary("kinfer-operator"))
    for args, needle in ((["--metrics-source", "carrier-pigeon"], "pods or prometheus"),
                         (["--metrics-source", "prometheus"], "--prometheus-url"),
                         (["--workers", "0"], "--workers"),
                         (["--leader-elect=maybe"], "true or false"),
                         (["--frobnicate"], "unknown flag")):
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr, (args, p.stderr)
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "--leader-elect" in p.stdout


def test_missing_kubeconfig_exits_1_and_an_unreachable_server_is_not_ready(tmp_path):
    exe = str(binary("kinfer-operator"))
    p = subprocess.run([exe, "--kubeconfig", str(tmp_path / "nope.yaml")], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 1 and "nope.yaml" in p.stderr, p.stderr

    # An API server that is not there: alive (/healthz 200) but not ready (/readyz 500), and a
    # clean exit on SIGTERM.
    op = Operator(kubeconfig(tmp_path, f"http://127.0.0.1:{free_port()}"))
    try:
        wait_until(lambda: _get_or_none(op, "/healthz") == 200, 10, "healthz")
        assert op.get("/readyz").status_code == 500
    finally:
        assert op.stop() == 0, op.log_tail()


def _get_or_none(op, path):
    try:
        return op.get(path).status_code
    except requests.ConnectionError:
        return None
