"""The operator's autoscaler reading a real Prometheus server (issue 6): a real kinfer-sidecar in
front of a slow fake upstream builds a queue; a real Prometheus scrapes the sidecar every second
(labelled as pod `pq-0` of namespace `default`, as a Kubernetes service discovery would label it);
kinfer-operator, pointed at the test API server, asks that Prometheus (metricsSource prometheus)
and scales the InferenceService's Deployment up, writing the queue it saw into status.

Needs the `prometheus` server (Debian package `prometheus`); skipped when it is not installed.
"""
import concurrent.futures as cf

import pytest

from sidecar_harness import FakeUpstream, Sidecar, chat_body, post_chat
from test_apiserver import ApiServerProcess, isvc, wait_until
from test_operator import APIS, DEPLOYMENTS, Operator, kubeconfig
from test_sidecar_prometheus import Prometheus, prometheus_binary

PODS = "/api/v1/namespaces/default/pods"


def test_the_autoscaler_scales_on_a_real_prometheus(tmp_path):
    prometheus_binary()  # skips without the server
    fake = FakeUpstream()
    sidecar = Sidecar(fake.url, {"admission": {"max_concurrency": 1, "reserved_for_top": 0, "max_queue": 64,
                                               "max_queue_per_class": 64}})
    prom = Prometheus(f"127.0.0.1:{sidecar.port}", tmp_path,
                      labels={"namespace": "default", "pod": "pq-0"})
    api = ApiServerProcess("--deployment-controller", "--bookmark-interval", "0.5")
    op = Operator(kubeconfig(tmp_path, api.url))
    pool = cf.ThreadPoolExecutor(16)
    try:
        op.wait_ready()
        api.ok(api.post(APIS, isvc("pq", autoscaling={
            "minReplicas": 1, "maxReplicas": 4, "targetQueueDepthPerReplica": 2,
            "metricsSource": {"type": "prometheus", "prometheus": {"url": prom.url}}})))
        wait_until(lambda: api.get(f"{DEPLOYMENTS}/pq").status_code == 200, 10, "Deployment")
        api.ok(api.post(PODS, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "pq-0",
                                            "labels": {"serving.kinfer.dev/inferenceservice": "pq"}},
                               "spec": {"containers": [{"name": "sidecar", "image": "x"}]}}))
        api.ok(api.patch(f"{PODS}/pq-0/status", {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))
        # 10 requests of 2 s each through one upstream slot: 9 wait in the sidecar's queue.
        fake.control(latency_ms=2000)
        futures = [pool.submit(post_chat, sidecar.url, chat_body(),
                               headers={"x-kinfer-timeout": "60s"}, timeout=60)
                   for _ in range(10)]
        # Prometheus sees the queue, the operator asks it: load 10 on one pod with a target of 2
        # is a panic; the Deployment goes to the maximum.
        wait_until(lambda: (prom.scalar('sum(kinfer_sidecar_queue_depth{pod="pq-0"})') or 0) >= 6,
                   15, "Prometheus to see the queue")
        wait_until(lambda: api.ok(api.get(f"{DEPLOYMENTS}/pq"))["spec"]["replicas"] == 4, 20,
                   "scaled to 4")
        # The reconcile patches the Deployment first and writes status after it.
        status = wait_until(lambda: (lambda st: st if st.get("desiredReplicas") == 4 else None)(
            api.ok(api.get(f"{APIS}/pq")).get("status", {})), 10, "status desiredReplicas 4")
        assert status["observedQueueDepth"] >= 8, status
        assert op.metric("kinfer_operator_autoscaler_decisions_total") > 0
        assert op.metric("kinfer_operator_autoscaler_scrape_errors_total") == 0
        fake.control(latency_ms=0)
        codes = [f.result().status_code for f in futures]
        assert codes == [200] * len(codes), [f.result().text for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        op.stop()
        api.stop()
        prom.stop()
        sidecar.stop()
        fake.stop()
