"""The test Kubernetes API server (tests/kube/apiserver, issue 5): each behaviour the operator
relies on, pinned against a live instance on 127.0.0.1.

One server serves the module (state reset before every test through POST /_test/reset); the
restart tests start their own. Watches are read with http.client, which tells a stream that ended
cleanly (the terminating chunk) from one that broke.
Run: .venv/bin/python -m pytest -q tests/python/test_apiserver.py
"""
from __future__ import annotations

import copy
import http.client
import json
import pathlib
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "kube" / "apiserver" / "kinfer_test_apiserver.py"

ISVC = "/apis/serving.kinfer.dev/v1alpha1"
APPS = "/apis/apps/v1"
CORE = "/api/v1"
MODEL = {"name": "smollm2-135m-instruct", "uri": "pvc://models/smollm2.gguf"}


# ==== harness =====================================================================================


class ApiServerProcess:
    def __init__(self, *args, port=0):
        self.args = [sys.executable, str(SERVER), "--port", str(port), *args]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("LISTENING "):
            self.proc.kill()
            raise RuntimeError(f"apiserver did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = requests.Session()
        deadline = time.time() + 10
        while self.http.get(self.url + "/readyz", timeout=2).text != "ok":
            assert time.time() < deadline
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.http.close()
        return self.proc.returncode

    # requests helpers: return the response, checked by the caller
    def get(self, path, **kw):
        return self.http.get(self.url + path, timeout=10, **kw)

    def post(self, path, body=None, **kw):
        return self.http.post(self.url + path, json=body, timeout=10, **kw)

    def put(self, path, body, **kw):
        return self.http.put(self.url + path, json=body, timeout=10, **kw)

    def patch(self, path, body, ctype="application/merge-patch+json", **kw):
        return self.http.patch(self.url + path, data=json.dumps(body),
                               headers={"Content-Type": ctype}, timeout=10, **kw)

    def delete(self, path, body=None, **kw):
        return self.http.delete(self.url + path, json=body, timeout=10, **kw)

    def ok(self, resp, code=None):
        assert resp.status_code < 300 if code is None else resp.status_code == code, resp.text
        return resp.json()

    def watch(self, path, **kw) -> "WatchStream":
        return WatchStream(self.port, path, **kw)

    def stats(self):
        return self.ok(self.get("/_test/stats"))


class WatchStream:
    """A watch read on a thread into a queue; `end` says how the stream ended."""

    def __init__(self, port, path, timeout=15):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", path)
        self.sock = self.conn.sock
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = dict(self.resp.getheaders())
        self.q: queue.Queue = queue.Queue()
        self.end = None  # "eof" (terminating chunk) or the exception that broke the stream
        self.done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        # read1 (not readline) so that a stream cut before its terminating chunk raises
        # IncompleteRead instead of looking like a clean end
        buf = b""
        try:
            while True:
                data = self.resp.read1(65536)
                if not data:
                    self.end = "eof"
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self.q.put(json.loads(line))
        except Exception as e:  # noqa: BLE001
            self.end = type(e).__name__
        finally:
            self.done.set()
            self.q.put(None)

    def next(self, timeout=5, bookmarks=False):
        deadline = time.time() + timeout
        while True:
            ev = self.q.get(timeout=max(0.01, deadline - time.time()))
            if ev is None:
                self.q.put(None)
                return None
            if bookmarks or ev["type"] != "BOOKMARK":
                return ev

    def take(self, n, timeout=5):
        out = []
        for _ in range(n):
            ev = self.next(timeout)
            assert ev is not None, f"stream ended ({self.end}) after {out}"
            out.append(ev)
        return out

    def wait_end(self, timeout=5):
        assert self.done.wait(timeout), "the watch did not end"
        return self.end

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader blocked in recv
        except OSError:
            pass
        self.done.wait(5)
        self.conn.close()


def wait_until(cond, timeout=5.0, what="condition"):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def apiserver():
    srv = ApiServerProcess()
    yield srv
    srv.stop()


@pytest.fixture
def api(apiserver):
    """The module's server, emptied: objects, faults, stats and config as at start."""
    apiserver.ok(apiserver.post("/_test/reset"))
    return apiserver


def isvc(name, ns="default", **spec):
    return {"apiVersion": "serving.kinfer.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"model": dict(MODEL), **spec}}


def deployment(name, ns="default", labels=None, replicas=1, owner=None):
    labels = labels or {"app": name}
    d = {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
         "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)},
                  "template": {"metadata": {"labels": dict(labels)},
                               "spec": {"containers": [{"name": "runtime",
                                                        "image": "kinfer/runtime:0.1.0",
                                                        "ports": [{"containerPort": 8081}]}]}}}}
    if owner:
        d["metadata"]["ownerReferences"] = [owner_ref(owner)]
    return d


def service(name, ns="default", labels=None, owner=None):
    s = {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": name, "namespace": ns, "labels": labels or {"app": name}},
         "spec": {"selector": {"app": name}, "ports": [{"port": 8080}]}}
    if owner:
        s["metadata"]["ownerReferences"] = [owner_ref(owner)]
    return s


def owner_ref(obj, controller=True):
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": controller, "blockOwnerDeletion": True}


def status_of(resp):
    st = resp.json()
    assert st["kind"] == "Status" and st["apiVersion"] == "v1" and st["status"] == "Failure"
    assert st["code"] == resp.status_code
    return st


# ==== basics ======================================================================================


def test_health_version_and_discovery(api):
    assert api.get("/healthz").text == "ok" and api.get("/readyz").text == "ok"
    assert api.ok(api.get("/version"))["major"] == "1"
    assert api.ok(api.get("/api"))["versions"] == ["v1"]
    groups = {g["name"]: g for g in api.ok(api.get("/apis"))["groups"]}
    assert {"apps", "policy", "coordination.k8s.io", "serving.kinfer.dev"} <= set(groups)
    assert groups["serving.kinfer.dev"]["preferredVersion"]["version"] == "v1alpha1"
    res = {r["name"]: r for r in api.ok(api.get(ISVC))["resources"]}
    assert res["inferenceservices"]["shortNames"] == ["kisvc"]
    assert res["inferenceservices"]["namespaced"] is True
    assert res["inferenceservices/scale"]["kind"] == "Scale"
    assert "inferenceservices/status" in res
    core = {r["name"] for r in api.ok(api.get(CORE))["resources"]}
    assert {"namespaces", "services", "pods", "events", "pods/status"} <= core
    # The CRD itself is readable (an operator may check it is established) but not writable.
    crd = api.ok(api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                         "inferenceservices.serving.kinfer.dev"))
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds["Established"] == "True"
    assert api.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                      "inferenceservices.serving.kinfer.dev").status_code == 405
    r = api.get("/apis/apps/v1/namespaces/default/replicasets")
    assert r.status_code == 404 and status_of(r)["reason"] == "NotFound"


@pytest.mark.parametrize("kind", ["services", "pods", "events", "deployments",
                                  "poddisruptionbudgets", "leases", "inferenceservices"])
def test_crud_per_kind(api, kind):
    base, body = {
        "services": (CORE, service("web")),
        "pods": (CORE, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}),
        "events": (CORE, {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web"},
                          "involvedObject": {"kind": "InferenceService", "name": "x",
                                             "namespace": "default"},
                          "reason": "Scaled", "message": "m", "type": "Normal"}),
        "deployments": (APPS, deployment("web")),
        "poddisruptionbudgets": ("/apis/policy/v1", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        "leases": ("/apis/coordination.k8s.io/v1", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "web"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        "inferenceservices": (ISVC, isvc("web")),
    }[kind]
    coll = f"{base}/namespaces/default/{kind}"
    created = api.ok(api.post(coll, body), 201)
    md = created["metadata"]
    assert md["name"] == "web" and md["namespace"] == "default"
    assert md["uid"] and md["creationTimestamp"].endswith("Z") and int(md["resourceVersion"]) > 0
    assert created["apiVersion"] == body["apiVersion"] and created["kind"] == body["kind"]
    assert api.ok(api.get(f"{coll}/web")) == created
    lst = api.ok(api.get(coll))
    assert lst["kind"] == body["kind"] + "List" and [i["metadata"]["name"] for i in
                                                      lst["items"]] == ["web"]
    assert int(lst["metadata"]["resourceVersion"]) >= int(md["resourceVersion"])
    # update (PUT) with the current resourceVersion, then a merge patch
    upd = copy.deepcopy(created)
    upd["metadata"].setdefault("labels", {})["tier"] = "gold"
    updated = api.ok(api.put(f"{coll}/web", upd))
    assert updated["metadata"]["labels"]["tier"] == "gold"
    assert int(updated["metadata"]["resourceVersion"]) > int(md["resourceVersion"])
    patched = api.ok(api.patch(f"{coll}/web", {"metadata": {"annotations": {"a": "b"}}}))
    assert patched["metadata"]["annotations"] == {"a": "b"}
    assert patched["metadata"]["labels"]["tier"] == "gold"
    api.ok(api.delete(f"{coll}/web"))
    r = api.get(f"{coll}/web")
    assert r.status_code == 404
    st = status_of(r)
    assert st["reason"] == "NotFound" and st["details"]["name"] == "web"
    group = body["apiVersion"].split("/")[0] if "/" in body["apiVersion"] else ""
    assert st["message"] == f'{kind}{"." + group if group else ""} "web" not found'


def test_namespaces_are_required_and_deleting_one_empties_it(api):
    coll = f"{APPS}/namespaces/team-a/deployments"
    r = api.post(coll, deployment("web", ns="team-a"))
    assert r.status_code == 404 and status_of(r)["message"] == 'namespaces "team-a" not found'
    assert api.ok(api.get(coll))["items"] == []  # a list in a missing namespace is empty
    ns = api.ok(api.post(f"{CORE}/namespaces", {"metadata": {"name": "team-a"}}), 201)
    assert ns["status"]["phase"] == "Active"
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    api.ok(api.post(coll, deployment("web", ns="team-a")), 201)
    fin = deployment("held", ns="team-a")
    fin["metadata"]["finalizers"] = ["example.com/hold"]
    held = api.ok(api.post(coll, fin), 201)
    # the namespace in the body must agree with the path
    r = api.post(coll, deployment("other", ns="default"))
    assert r.status_code == 400 and status_of(r)["reason"] == "BadRequest"
    # the default namespaces exist from the start
    names = {n["metadata"]["name"] for n in api.ok(api.get(f"{CORE}/namespaces"))["items"]}
    assert {"default", "kube-system", "team-a"} <= names
    gone = api.ok(api.delete(f"{CORE}/namespaces/team-a"))
    assert gone["status"]["phase"] == "Terminating" and gone["metadata"]["deletionTimestamp"]
    wait_until(lambda: api.get(f"{coll}/web").status_code == 404, what="contents deleted")
    r = api.post(coll, deployment("late", ns="team-a"))
    assert r.status_code == 403 and status_of(r)["reason"] == "Forbidden"
    # the namespace stays Terminating while an object with a finalizer remains
    time.sleep(0.1)
    assert api.ok(api.get(f"{CORE}/namespaces/team-a"))["status"]["phase"] == "Terminating"
    held = api.ok(api.get(f"{coll}/held"))
    assert held["metadata"]["deletionTimestamp"]
    api.ok(api.patch(f"{coll}/held", {"metadata": {"finalizers": None}}))
    wait_until(lambda: api.get(f"{CORE}/namespaces/team-a").status_code == 404,
               what="namespace finalized")


def test_create_conflicts_names_and_generate_name(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    api.ok(api.post(coll, isvc("a")), 201)
    r = api.post(coll, isvc("a"))
    st = status_of(r)
    assert r.status_code == 409 and st["reason"] == "AlreadyExists"
    assert st["message"] == 'inferenceservices.serving.kinfer.dev "a" already exists'
    body = isvc("")
    body["metadata"] = {"generateName": "gen-"}
    g = api.ok(api.post(coll, body), 201)
    assert g["metadata"]["name"].startswith("gen-") and len(g["metadata"]["name"]) == 9
    body = isvc("x")
    del body["metadata"]["name"]
    r = api.post(coll, body)
    assert r.status_code == 422 and status_of(r)["details"]["causes"][0]["field"] == \
        "metadata.name"
    r = api.post(f"{APPS}/namespaces/default/deployments", deployment("Bad_Name"))
    assert r.status_code == 422 and "RFC 1123" in status_of(r)["message"]
    body = isvc("withrv")
    body["metadata"]["resourceVersion"] = "5"
    r = api.post(coll, body)  # a resourceVersion on a create: the real server's 500
    assert r.status_code == 500
    assert status_of(r)["message"] == "resourceVersion should not be set on objects to be created"
    r = api.post(coll, {**isvc("k"), "kind": "Deployment"})
    assert r.status_code == 400


def test_label_and_field_selectors(api):
    coll = f"{APPS}/namespaces/default/deployments"
    for name, labels in [("a", {"app": "x", "tier": "gold"}), ("b", {"app": "x", "tier": "iron"}),
                         ("c", {"app": "y"}), ("d", {"app": "z", "canary": "true"})]:
        api.ok(api.post(coll, deployment(name, labels=labels)), 201)

    def names(**params):
        return [i["metadata"]["name"] for i in api.ok(api.get(coll, params=params))["items"]]

    assert names() == ["a", "b", "c", "d"]
    assert names(labelSelector="app=x") == ["a", "b"]
    assert names(labelSelector="app==x,tier=gold") == ["a"]
    assert names(labelSelector="app!=x") == ["c", "d"]
    assert names(labelSelector="tier!=gold") == ["b", "c", "d"]  # != matches a missing label
    assert names(labelSelector="app in (y, z)") == ["c", "d"]
    assert names(labelSelector="app notin (x),!canary") == ["c"]
    assert names(labelSelector="tier") == ["a", "b"]
    assert names(labelSelector="app in (x,y),tier notin (iron)") == ["a", "c"]
    assert names(fieldSelector="metadata.name=b") == ["b"]
    assert names(fieldSelector="metadata.name!=b,metadata.namespace=default") == ["a", "c", "d"]
    r = api.get(coll, params={"labelSelector": "app in (x"})
    assert r.status_code == 400 and status_of(r)["reason"] == "BadRequest"
    r = api.get(coll, params={"fieldSelector": "spec.replicas=1"})
    assert r.status_code == 400 and "field label not supported" in status_of(r)["message"]
    # cluster-wide list of a namespaced kind
    api.ok(api.post(f"{CORE}/namespaces", {"metadata": {"name": "other"}}), 201)
    api.ok(api.post(f"{APPS}/namespaces/other/deployments", deployment("a", ns="other")), 201)
    everything = api.ok(api.get(f"{APPS}/deployments"))["items"]
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everything] == [
        ("default", "a"), ("default", "b"), ("default", "c"), ("default", "d"), ("other", "a")]
    assert len(api.ok(api.get(f"{APPS}/deployments",
                              params={"fieldSelector": "metadata.namespace=other"}))["items"]) == 1
    # events select on involvedObject
    ev = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "InferenceService", "name": "m"},
          "reason": "Scaled", "type": "Normal"}
    api.ok(api.post(f"{CORE}/namespaces/default/events", ev), 201)
    got = api.ok(api.get(f"{CORE}/namespaces/default/events", params={
        "fieldSelector": "involvedObject.kind=InferenceService,involvedObject.name=m"}))
    assert [e["metadata"]["name"] for e in got["items"]] == ["e1"]
    # delete a collection by selector
    gone = api.ok(api.delete(coll, params={"labelSelector": "app=x"}))
    assert gone["kind"] == "DeploymentList" and len(gone["items"]) == 2
    assert names() == ["c", "d"]


def test_list_pagination_with_limit_and_continue(api):
    coll = f"{CORE}/namespaces/default/services"
    for i in range(5):
        api.ok(api.post(coll, service(f"s{i}")), 201)
    page1 = api.ok(api.get(coll, params={"limit": 2}))
    assert [i["metadata"]["name"] for i in page1["items"]] == ["s0", "s1"]
    assert page1["metadata"]["remainingItemCount"] == 3
    page2 = api.ok(api.get(coll, params={"limit": 2, "continue": page1["metadata"]["continue"]}))
    assert [i["metadata"]["name"] for i in page2["items"]] == ["s2", "s3"]
    assert page2["metadata"]["resourceVersion"] == page1["metadata"]["resourceVersion"]
    page3 = api.ok(api.get(coll, params={"limit": 2, "continue": page2["metadata"]["continue"]}))
    assert [i["metadata"]["name"] for i in page3["items"]] == ["s4"]
    assert "continue" not in page3["metadata"]
    api.ok(api.post("/_test/compact"))
    api.ok(api.post(coll, service("s5")), 201)
    api.ok(api.post("/_test/compact"))
    r = api.get(coll, params={"limit": 2, "continue": page1["metadata"]["continue"]})
    assert r.status_code == 410 and status_of(r)["reason"] == "Expired"


# ==== optimistic concurrency and generation =======================================================


def test_resource_version_conflicts(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    v1 = api.ok(api.post(coll, isvc("m")), 201)
    a, b = copy.deepcopy(v1), copy.deepcopy(v1)
    a["spec"]["slo"] = {"ttftP99Seconds": 1.0}
    v2 = api.ok(api.put(f"{coll}/m", a))
    b["spec"]["slo"] = {"ttftP99Seconds": 2.0}
    r = api.put(f"{coll}/m", b)  # stale
    st = status_of(r)
    assert r.status_code == 409 and st["reason"] == "Conflict"
    assert "the object has been modified" in st["message"]
    assert api.ok(api.get(f"{coll}/m"))["spec"]["slo"]["ttftP99Seconds"] == 1.0
    # a custom resource update needs a resourceVersion ...
    c = copy.deepcopy(v2)
    del c["metadata"]["resourceVersion"]
    r = api.put(f"{coll}/m", c)
    assert r.status_code == 422 and status_of(r)["details"]["causes"][0]["field"] == \
        "metadata.resourceVersion"
    # ... a Deployment may be updated unconditionally, as in Kubernetes
    dep = api.ok(api.post(f"{APPS}/namespaces/default/deployments", deployment("d")), 201)
    dep["spec"]["replicas"] = 3
    stale = copy.deepcopy(dep)
    del dep["metadata"]["resourceVersion"]
    assert api.ok(api.put(f"{APPS}/namespaces/default/deployments/d", dep))["spec"]["replicas"] == 3
    assert api.put(f"{APPS}/namespaces/default/deployments/d", stale).status_code == 409
    # a patch is unconditional unless it names a resourceVersion
    r = api.patch(f"{coll}/m", {"metadata": {"resourceVersion": v1["metadata"]["resourceVersion"]},
                                "spec": {"slo": {"ttftP99Seconds": 3.0}}})
    assert r.status_code == 409
    ok = api.ok(api.patch(f"{coll}/m", {"spec": {"slo": {"ttftP99Seconds": 3.0}}}))
    assert ok["spec"]["slo"]["ttftP99Seconds"] == 3.0
    # the name and uid in the body must be the object's
    wrong = copy.deepcopy(ok)
    wrong["metadata"]["uid"] = "not-the-uid"
    assert api.put(f"{coll}/m", wrong).status_code == 409
    wrong = copy.deepcopy(ok)
    wrong["metadata"]["name"] = "other"
    assert api.put(f"{coll}/m", wrong).status_code == 400
    assert api.put(f"{coll}/absent", isvc("absent")).status_code == 404
    # a delete precondition on a stale resourceVersion is a conflict too
    r = api.delete(f"{coll}/m", {"preconditions": {"resourceVersion": v1["metadata"][
        "resourceVersion"]}})
    assert r.status_code == 409


def test_concurrent_read_modify_write_loses_no_update(api):
    # 4 clients increment one annotation with GET + PUT, retrying on 409: none is lost
    coll = f"{APPS}/namespaces/default/deployments"
    api.ok(api.post(coll, deployment("counter")), 201)
    conflicts = []

    def worker():
        http = requests.Session()
        for _ in range(25):
            while True:
                obj = http.get(f"{api.url}{coll}/counter", timeout=10).json()
                ann = obj["metadata"].setdefault("annotations", {})
                ann["n"] = str(int(ann.get("n", "0")) + 1)
                r = http.put(f"{api.url}{coll}/counter", json=obj, timeout=10)
                if r.status_code == 200:
                    break
                assert r.status_code == 409, r.text
                conflicts.append(1)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    final = api.ok(api.get(f"{coll}/counter"))
    assert final["metadata"]["annotations"]["n"] == "100"
    assert final["metadata"]["generation"] == 101  # annotations bump a Deployment's generation
    assert api.stats()["writes"]["byVerb"]["update"] == 100 + len(conflicts)


def test_generation_bumps_on_spec_changes_only(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    obj = api.ok(api.post(coll, isvc("m")), 201)
    assert obj["metadata"]["generation"] == 1
    obj = api.ok(api.patch(f"{coll}/m", {"metadata": {"labels": {"x": "y"}}}))
    assert obj["metadata"]["generation"] == 1
    obj = api.ok(api.patch(f"{coll}/m/status", {"status": {"replicas": 2}}))
    assert obj["metadata"]["generation"] == 1
    obj = api.ok(api.patch(f"{coll}/m", {"spec": {"slo": {"ttftP99Seconds": 0.5}}}))
    assert obj["metadata"]["generation"] == 2
    # a no-op write stores nothing: same resourceVersion, same generation, no watch event
    rv = obj["metadata"]["resourceVersion"]
    same = api.ok(api.put(f"{coll}/m", obj))
    assert same["metadata"]["resourceVersion"] == rv and same["metadata"]["generation"] == 2
    assert api.stats()["writes"]["noop"] == 1
    # Deployments: spec and annotation changes bump it (the real apps/v1 rule); labels do not
    dcoll = f"{APPS}/namespaces/default/deployments"
    d = api.ok(api.post(dcoll, deployment("d")), 201)
    assert d["metadata"]["generation"] == 1
    d = api.ok(api.patch(f"{dcoll}/d", {"metadata": {"labels": {"l": "1"}}}))
    assert d["metadata"]["generation"] == 1
    d = api.ok(api.patch(f"{dcoll}/d", {"metadata": {"annotations": {"a": "1"}}}))
    assert d["metadata"]["generation"] == 2
    d = api.ok(api.patch(f"{dcoll}/d", {"spec": {"replicas": 4}}))
    assert d["metadata"]["generation"] == 3
    d = api.ok(api.patch(f"{dcoll}/d/status", {"status": {"replicas": 4, "readyReplicas": 4}}))
    assert d["metadata"]["generation"] == 3 and d["status"]["readyReplicas"] == 4
    # kinds without generation have none
    s = api.ok(api.post(f"{CORE}/namespaces/default/services", service("s")), 201)
    assert "generation" not in s["metadata"]


def test_built_in_defaults_are_filled_like_the_real_server(api):
    d = api.ok(api.post(f"{APPS}/namespaces/default/deployments", deployment("d")), 201)
    assert d["spec"]["strategy"] == {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert (d["spec"]["revisionHistoryLimit"], d["spec"]["progressDeadlineSeconds"]) == (10, 600)
    pod = d["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Always" and pod["terminationGracePeriodSeconds"] == 30
    assert pod["dnsPolicy"] == "ClusterFirst" and pod["schedulerName"] == "default-scheduler"
    c = pod["containers"][0]
    assert c["imagePullPolicy"] == "IfNotPresent" and c["ports"][0]["protocol"] == "TCP"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    s = api.ok(api.post(f"{CORE}/namespaces/default/services", service("s")), 201)
    ip = s["spec"]["clusterIP"]
    assert ip.startswith("10.") and s["spec"]["clusterIPs"] == [ip]
    assert s["spec"]["ports"] == [{"port": 8080, "protocol": "TCP", "targetPort": 8080}]
    # an update that leaves the allocated clusterIP out keeps it; changing it is refused
    again = service("s")
    again["metadata"]["resourceVersion"] = s["metadata"]["resourceVersion"]
    assert api.ok(api.put(f"{CORE}/namespaces/default/services/s", again))["spec"][
        "clusterIP"] == ip
    r = api.patch(f"{CORE}/namespaces/default/services/s", {"spec": {"clusterIP": "10.0.0.1"}})
    assert r.status_code == 422 and "immutable" in status_of(r)["message"]
    # a Deployment's selector must match its template and cannot change
    bad = deployment("bad")
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    r = api.post(f"{APPS}/namespaces/default/deployments", bad)
    assert r.status_code == 422 and "does not match template" in status_of(r)["message"]
    r = api.patch(f"{APPS}/namespaces/default/deployments/d",
                  {"spec": {"selector": {"matchLabels": {"app": "d", "x": "y"}},
                            "template": {"metadata": {"labels": {"app": "d", "x": "y"}}}}})
    assert r.status_code == 422 and "field is immutable" in status_of(r)["message"]


# ==== status and scale subresources ===============================================================


def test_status_subresource(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    body = isvc("m")
    body["status"] = {"replicas": 9}
    obj = api.ok(api.post(coll, body), 201)
    assert "status" not in obj  # status is dropped on create
    st = copy.deepcopy(obj)
    st["status"] = {"replicas": 2, "selector": "app=m"}
    st["spec"]["slo"] = {"ttftP99Seconds": 9.0}  # ignored by a status update
    obj = api.ok(api.put(f"{coll}/m/status", st))
    assert obj["status"] == {"replicas": 2, "selector": "app=m"} and "slo" not in obj["spec"]
    main = copy.deepcopy(obj)
    main["status"] = {"replicas": 7}  # ignored by a main-resource update
    main["spec"]["slo"] = {"ttftP99Seconds": 1.0}
    obj = api.ok(api.put(f"{coll}/m", main))
    assert obj["status"]["replicas"] == 2 and obj["spec"]["slo"]["ttftP99Seconds"] == 1.0
    assert api.ok(api.get(f"{coll}/m/status")) == obj
    # status is validated and pruned against the schema too
    r = api.patch(f"{coll}/m/status", {"status": {"replicas": -1}})
    assert r.status_code == 422 and status_of(r)["details"]["causes"][0]["field"] == \
        "status.replicas"
    r = api.patch(f"{coll}/m/status", {"status": {"notInSchema": 1, "url": "http://m"}})
    assert r.status_code == 200 and "notInSchema" not in r.json()["status"]
    assert 'unknown field \\"status.notInSchema\\"' in r.headers["Warning"]
    # the status of a stale object conflicts like any update
    r = api.put(f"{coll}/m/status", st)
    assert r.status_code == 409


def test_scale_subresource_of_an_inferenceservice(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    api.ok(api.post(coll, isvc("manual", autoscaling={"enabled": False}, replicas=2)), 201)
    api.ok(api.patch(f"{coll}/manual/status",
                     {"status": {"replicas": 1, "selector": "kinfer.dev/service=manual"}}))
    scale = api.ok(api.get(f"{coll}/manual/scale"))
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": "kinfer.dev/service=manual"}
    scale["spec"]["replicas"] = 5
    out = api.ok(api.put(f"{coll}/manual/scale", scale))
    assert out["spec"]["replicas"] == 5
    obj = api.ok(api.get(f"{coll}/manual"))
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["generation"] == 2
    assert out["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    r = api.put(f"{coll}/manual/scale", scale)  # stale resourceVersion
    assert r.status_code == 409
    assert api.delete(f"{coll}/manual/scale").status_code == 405
    out = api.ok(api.patch(f"{coll}/manual/scale", {"spec": {"replicas": 0}}))
    assert out["spec"]["replicas"] == 0
    r = api.patch(f"{coll}/manual/scale", {"spec": {"replicas": -1}})
    assert r.status_code == 422
    # the CRD's CEL rules still apply: spec.replicas is refused while autoscaling is on
    api.ok(api.post(coll, isvc("auto")), 201)
    auto = api.ok(api.get(f"{coll}/auto/scale"))
    assert auto["spec"] == {"replicas": 0} and auto["status"] == {"replicas": 0}
    r = api.patch(f"{coll}/auto/scale", {"spec": {"replicas": 3}})
    assert r.status_code == 422 and "spec.replicas may be set" in status_of(r)["message"]


def test_scale_subresource_of_a_deployment(api):
    coll = f"{APPS}/namespaces/default/deployments"
    api.ok(api.post(coll, deployment("d", labels={"app": "d", "tier": "x"}, replicas=2)), 201)
    scale = api.ok(api.get(f"{coll}/d/scale"))
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 0, "selector": "app=d,tier=x"}
    out = api.ok(api.patch(f"{coll}/d/scale", {"spec": {"replicas": 6}}))
    assert out["spec"]["replicas"] == 6
    d = api.ok(api.get(f"{coll}/d"))
    assert d["spec"]["replicas"] == 6 and d["metadata"]["generation"] == 2


# ==== list + watch ================================================================================


def test_list_then_watch_with_bookmarks(api):
    api.ok(api.post("/_test/config", {"bookmarkInterval": 0.2}))
    coll = f"{APPS}/namespaces/default/deployments"
    api.ok(api.post(coll, deployment("before")), 201)
    lst = api.ok(api.get(coll))
    rv = lst["metadata"]["resourceVersion"]
    w = api.watch(f"{coll}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true")
    assert w.status == 200 and w.headers["Transfer-Encoding"] == "chunked"
    d = api.ok(api.post(coll, deployment("web")), 201)
    api.ok(api.patch(f"{coll}/web", {"spec": {"replicas": 2}}))
    api.ok(api.delete(f"{coll}/web"))
    api.ok(api.post(f"{CORE}/namespaces/default/services", service("other")), 201)  # not watched
    evs = w.take(3)
    assert [e["type"] for e in evs] == ["ADDED", "MODIFIED", "DELETED"]
    assert all(e["object"]["metadata"]["name"] == "web" for e in evs)
    assert evs[0]["object"]["metadata"]["uid"] == d["metadata"]["uid"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    # bookmarks come with the kind and bring the watcher up to the latest resourceVersion (past
    # the Service write it does not see); they never go backwards
    latest = int(api.stats()["resourceVersion"])
    seen = []
    while not seen or seen[-1] < latest:
        bm = w.next(timeout=3, bookmarks=True)
        assert bm["type"] == "BOOKMARK", bm
        assert bm["object"]["kind"] == "Deployment" and bm["object"]["apiVersion"] == "apps/v1"
        seen.append(int(bm["object"]["metadata"]["resourceVersion"]))
    assert seen == sorted(seen) and seen[-1] == latest
    w.close()
    # without allowWatchBookmarks there are none; timeoutSeconds ends the stream cleanly
    t0 = time.time()
    w2 = api.watch(f"{coll}?watch=true&resourceVersion={latest}&timeoutSeconds=1")
    assert w2.next(timeout=3, bookmarks=True) is None and w2.end == "eof"
    assert 0.9 < time.time() - t0 < 2.5
    assert api.stats()["watches"]["timedOut"] >= 1


def test_watch_without_resource_version_starts_with_the_current_state(api):
    coll = f"{CORE}/namespaces/default/services"
    for name in ("a", "b"):
        api.ok(api.post(coll, service(name)), 201)
    w = api.watch(f"{coll}?watch=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in w.take(2)] == [
        ("ADDED", "a"), ("ADDED", "b")]
    api.ok(api.post(coll, service("c")), 201)
    assert w.next()["object"]["metadata"]["name"] == "c"
    w.close()
    # sendInitialEvents ends the initial state with an annotated bookmark (streaming list)
    w = api.watch(f"{coll}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                  f"&resourceVersionMatch=NotOlderThan")
    evs = [w.next(bookmarks=True) for _ in range(4)]
    assert [e["type"] for e in evs] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    assert evs[3]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    w.close()


def test_watch_with_a_label_selector_sees_objects_enter_and_leave(api):
    coll = f"{APPS}/namespaces/default/deployments"
    d = api.ok(api.post(coll, deployment("d")), 201)
    rv = d["metadata"]["resourceVersion"]
    w = api.watch(f"{coll}?watch=1&resourceVersion={rv}&labelSelector=serving%3Dyes")
    api.ok(api.patch(f"{coll}/d", {"metadata": {"labels": {"serving": "yes"}}}))
    api.ok(api.patch(f"{coll}/d", {"spec": {"replicas": 3}}))
    api.ok(api.patch(f"{coll}/d", {"metadata": {"labels": {"serving": "no"}}}))
    api.ok(api.patch(f"{coll}/d", {"spec": {"replicas": 4}}))  # not seen: does not match
    api.ok(api.patch(f"{coll}/d", {"metadata": {"labels": {"serving": "yes"}}}))
    assert [e["type"] for e in w.take(4)] == ["ADDED", "MODIFIED", "DELETED", "ADDED"]
    w.close()
    # a watch of one object by name
    w = api.watch(f"{coll}?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dd")
    api.ok(api.post(coll, deployment("e")), 201)
    api.ok(api.patch(f"{coll}/d", {"spec": {"replicas": 5}}))
    evs = w.take(5)
    assert {e["object"]["metadata"]["name"] for e in evs} == {"d"}
    w.close()
    w = api.watch(f"/apis/apps/v1/watch/namespaces/default/deployments/d?resourceVersion={rv}")
    assert len(w.take(5)) == 5
    w.close()


def test_watch_from_a_compacted_resource_version_gets_410_expired(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    first = api.ok(api.post(coll, isvc("a")), 201)
    old_rv = first["metadata"]["resourceVersion"]
    for i in range(3):
        api.ok(api.patch(f"{coll}/a", {"metadata": {"labels": {"n": str(i)}}}))
    # within history: replayed
    w = api.watch(f"{coll}?watch=1&resourceVersion={old_rv}")
    assert [e["type"] for e in w.take(3)] == ["MODIFIED"] * 3
    w.close()
    compacted = api.ok(api.post("/_test/compact"))["compacted"]
    w = api.watch(f"{coll}?watch=1&resourceVersion={old_rv}")
    assert w.status == 200  # the error comes in the stream, as from the real API server
    ev = w.next()
    assert ev["type"] == "ERROR"
    st = ev["object"]
    assert (st["kind"], st["status"], st["code"], st["reason"]) == ("Status", "Failure", 410,
                                                                     "Expired")
    assert st["message"] == f"too old resource version: {old_rv} ({int(compacted) + 1})"
    assert w.wait_end() == "eof"
    # from the compaction point on, watching works again
    w = api.watch(f"{coll}?watch=1&resourceVersion={compacted}")
    api.ok(api.patch(f"{coll}/a", {"spec": {"slo": {"ttftP99Seconds": 1.0}}}))
    assert w.next()["type"] == "MODIFIED"
    w.close()
    # a short history compacts on its own, and a watcher that falls behind is expired too
    api.ok(api.post("/_test/config", {"history": 2}))
    rv = api.ok(api.get(f"{coll}/a"))["metadata"]["resourceVersion"]
    for i in range(3):
        api.ok(api.patch(f"{coll}/a", {"metadata": {"labels": {"m": str(i)}}}))
    ev = api.watch(f"{coll}?watch=1&resourceVersion={rv}").next()
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410
    assert api.stats()["watches"]["expired"] == 2


def test_watch_from_a_future_resource_version_times_out_with_504(api):
    api.ok(api.post("/_test/config", {"tooLargeWait": 0.2}))
    future = int(api.stats()["resourceVersion"]) + 1000
    w = api.watch(f"{APPS}/namespaces/default/deployments?watch=1&resourceVersion={future}")
    ev = w.next()
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 504
    assert ev["object"]["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    r = api.get(f"{APPS}/namespaces/default/deployments", params={"resourceVersion": future})
    assert r.status_code == 504 and status_of(r)["reason"] == "Timeout"


# ==== owner references, finalizers ================================================================


def test_owner_reference_garbage_collection(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    dcoll, scoll = f"{APPS}/namespaces/default/deployments", f"{CORE}/namespaces/default/services"
    owner = api.ok(api.post(coll, isvc("m")), 201)
    other = api.ok(api.post(coll, isvc("n")), 201)
    api.ok(api.post(dcoll, deployment("m", owner=owner)), 201)
    shared = service("m", owner=owner)
    shared["metadata"]["ownerReferences"].append(owner_ref(other, controller=False))
    api.ok(api.post(scoll, shared), 201)
    # background (the default): the dependent goes after its owner; one with another living
    # owner only loses the reference
    api.ok(api.delete(f"{coll}/m"))
    wait_until(lambda: api.get(f"{dcoll}/m").status_code == 404, what="GC of the Deployment")
    svc = wait_until(lambda: (lambda s: s if len(s["metadata"]["ownerReferences"]) == 1 else None)(
        api.ok(api.get(f"{scoll}/m"))), what="the dead owner's reference removed")
    assert svc["metadata"]["ownerReferences"][0]["uid"] == other["metadata"]["uid"]
    # orphan: the dependent stays, without the reference
    api.ok(api.post(dcoll, deployment("n", owner=other)), 201)
    api.ok(api.delete(f"{coll}/n", {"propagationPolicy": "Orphan"}))
    wait_until(lambda: api.get(f"{coll}/n").status_code == 404, what="orphaning owner deleted")
    dep = api.ok(api.get(f"{dcoll}/n"))
    assert "ownerReferences" not in dep["metadata"]
    assert "ownerReferences" not in api.ok(api.get(f"{scoll}/m"))["metadata"]
    # foreground: the owner stays (deletionTimestamp, foregroundDeletion) until its dependents
    # are gone; a dependent with a finalizer holds it
    fg = api.ok(api.post(coll, isvc("fg")), 201)
    held = deployment("fg", owner=fg)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    api.ok(api.post(dcoll, held), 201)
    out = api.ok(api.delete(f"{coll}/fg?propagationPolicy=Foreground"))
    assert out["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in out["metadata"]["finalizers"]
    wait_until(lambda: api.ok(api.get(f"{dcoll}/fg"))["metadata"].get("deletionTimestamp"),
               what="the dependent marked for deletion")
    time.sleep(0.1)
    assert api.get(f"{coll}/fg").status_code == 200
    api.ok(api.patch(f"{dcoll}/fg", {"metadata": {"finalizers": None}}))
    wait_until(lambda: api.get(f"{coll}/fg").status_code == 404, what="foreground owner deleted")
    # a dependent whose owner does not exist is collected
    ghost = {"apiVersion": "serving.kinfer.dev/v1alpha1", "kind": "InferenceService",
             "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}}
    api.ok(api.post(dcoll, deployment("orphaned", owner=ghost)), 201)
    wait_until(lambda: api.get(f"{dcoll}/orphaned").status_code == 404, what="dangling ref GC")


def test_finalizers_and_deletion_timestamp(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    body = isvc("m")
    body["metadata"]["finalizers"] = ["serving.kinfer.dev/cleanup"]
    obj = api.ok(api.post(coll, body), 201)
    rv = obj["metadata"]["resourceVersion"]
    w = api.watch(f"{coll}?watch=1&resourceVersion={rv}")
    out = api.ok(api.delete(f"{coll}/m"))
    assert out["metadata"]["deletionTimestamp"] and out["metadata"]["generation"] == 2
    got = api.ok(api.get(f"{coll}/m"))
    assert got["metadata"]["deletionTimestamp"] == out["metadata"]["deletionTimestamp"]
    # deleting again changes nothing; new finalizers cannot be added; other updates can
    again = api.ok(api.delete(f"{coll}/m"))
    assert again["metadata"]["resourceVersion"] == got["metadata"]["resourceVersion"]
    r = api.patch(f"{coll}/m", {"metadata": {"finalizers": ["serving.kinfer.dev/cleanup",
                                                            "x.dev/more"]}})
    assert r.status_code == 422 and status_of(r)["details"]["causes"][0]["reason"] == \
        "FieldValueForbidden"
    api.ok(api.patch(f"{coll}/m/status", {"status": {"replicas": 0}}))
    # removing the last finalizer deletes it
    last = api.ok(api.patch(f"{coll}/m", [{"op": "remove", "path": "/metadata/finalizers"}],
                            ctype="application/json-patch+json"))
    assert last["metadata"]["deletionTimestamp"]
    assert api.get(f"{coll}/m").status_code == 404
    assert [e["type"] for e in w.take(3)] == ["MODIFIED", "MODIFIED", "DELETED"]
    w.close()
    # without finalizers a custom resource goes at once and the answer is a Status
    api.ok(api.post(coll, isvc("quick")), 201)
    st = api.ok(api.delete(f"{coll}/quick"))
    assert st["kind"] == "Status" and st["status"] == "Success"
    assert st["details"]["name"] == "quick"


# ==== validation ==================================================================================


def test_inferenceservice_schema_validation(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"

    def causes(body):
        r = api.post(coll, body)
        st = status_of(r)
        assert r.status_code == 422 and st["reason"] == "Invalid", r.text
        assert st["details"]["kind"] == "InferenceService"
        assert st["message"].startswith('InferenceService.serving.kinfer.dev "')
        return {(c["field"], c["reason"]) for c in st["details"]["causes"]}, st["message"]

    body = isvc("m")
    del body["spec"]["model"]
    assert ("spec.model", "FieldValueRequired") in causes(body)[0]
    no_spec = isvc("m")
    del no_spec["spec"]
    assert causes(no_spec)[0] == {("spec", "FieldValueRequired")}
    c, msg = causes(isvc("m", model={**MODEL, "format": "safetensors"}))
    assert c == {("spec.model.format", "FieldValueNotSupported")} and '"gguf"' in msg
    c, msg = causes(isvc("m", runtime={"kvCacheFraction": 1.5}))
    assert c == {("spec.runtime.kvCacheFraction", "FieldValueInvalid")}
    assert "less than or equal to 1" in msg
    c, msg = causes(isvc("m", runtime={"maxBatchTokens": 8}))
    assert "greater than or equal to 64" in msg
    c, _ = causes(isvc("m", autoscaling={"minReplicas": 0}))
    assert c == {("spec.autoscaling.minReplicas", "FieldValueInvalid")}
    c, msg = causes(isvc("m", model={**MODEL, "sha256": "ABC"}))
    assert c == {("spec.model.sha256", "FieldValueInvalid")} and "should match" in msg
    c, _ = causes(isvc("m", autoscaling={"enabled": False}, replicas="3"))
    assert ("spec.replicas", "FieldValueTypeInvalid") in c
    # CEL rules (x-kubernetes-validations) are enforced
    _, msg = causes(isvc("m", autoscaling={"minReplicas": 5, "maxReplicas": 2}))
    assert "minReplicas must be at most maxReplicas" in msg
    _, msg = causes(isvc("m", autoscaling={"enabled": False}))
    assert "spec.replicas is required" in msg
    _, msg = causes(isvc("Upper-Case"))
    assert "metadata.name" in msg
    # updates are validated too
    ok = api.ok(api.post(coll, isvc("m")), 201)
    ok["spec"]["runtime"]["maxRunningRequests"] = 0
    r = api.put(f"{coll}/m", ok)
    assert r.status_code == 422
    r = api.patch(f"{coll}/m", {"spec": {"model": {"uri": "s3://bucket/x.gguf"}}})
    assert r.status_code == 422


def test_inferenceservice_defaults_and_unknown_fields(api):
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    body = isvc("m")
    body["spec"]["modle"] = {"typo": True}
    r = api.post(coll, body)
    assert r.status_code == 201
    spec = r.json()["spec"]
    assert "modle" not in spec  # pruned, with a warning, as the API server does by default
    assert r.headers["Warning"] == '299 - "unknown field \\"spec.modle\\""'
    assert spec["model"]["format"] == "gguf"
    assert spec["runtime"] == {"maxBatchTokens": 2048, "maxRunningRequests": 64,
                               "kvCacheFraction": 0.9, "contextSize": 0}
    assert spec["resources"] == {"gpus": 1, "gpuResourceName": "nvidia.com/gpu"}
    a = spec["autoscaling"]
    assert (a["enabled"], a["minReplicas"], a["maxReplicas"]) == (True, 1, 10)
    assert a["metricsSource"] == {"type": "pods"}
    assert "replicas" not in spec and "sidecar" not in spec
    # fieldValidation=Strict refuses unknown fields instead
    body["metadata"]["name"] = "strict"
    r = api.post(coll + "?fieldValidation=Strict", body)
    assert r.status_code == 400 and 'unknown field "spec.modle"' in status_of(r)["message"]
    assert api.get(f"{coll}/strict").status_code == 404
    # dryRun=All admits without storing
    r = api.post(coll + "?dryRun=All", isvc("dry"))
    assert r.status_code == 201 and r.json()["spec"]["model"]["format"] == "gguf"
    assert api.get(f"{coll}/dry").status_code == 404


# ==== patches =====================================================================================


def test_patch_types(api):
    dcoll = f"{APPS}/namespaces/default/deployments"
    api.ok(api.post(dcoll, deployment("d")), 201)
    out = api.ok(api.patch(f"{dcoll}/d", [
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 2},
        {"op": "add", "path": "/metadata/labels/x", "value": "y"}],
        ctype="application/json-patch+json"))
    assert out["spec"]["replicas"] == 2 and out["metadata"]["labels"]["x"] == "y"
    r = api.patch(f"{dcoll}/d", [{"op": "test", "path": "/spec/replicas", "value": 9}],
                  ctype="application/json-patch+json")
    assert r.status_code == 422
    # strategic merge: containers merge by name, env by name; $patch: delete removes one
    smp = {"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "kinfer/sidecar:0.1.0"},
        {"name": "runtime", "env": [{"name": "A", "value": "1"}]}]}}}}
    out = api.ok(api.patch(f"{dcoll}/d", smp, ctype="application/strategic-merge-patch+json"))
    cs = {c["name"]: c for c in out["spec"]["template"]["spec"]["containers"]}
    assert set(cs) == {"runtime", "sidecar"}
    assert cs["runtime"]["image"] == "kinfer/runtime:0.1.0" and cs["runtime"]["env"] == [
        {"name": "A", "value": "1"}]
    out = api.ok(api.patch(f"{dcoll}/d", {"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "$patch": "delete"}]}}}},
        ctype="application/strategic-merge-patch+json"))
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["runtime"]
    # merge patch replaces lists; null deletes
    out = api.ok(api.patch(f"{dcoll}/d", {"metadata": {"labels": {"x": None}}}))
    assert "x" not in out["metadata"]["labels"]
    # custom resources take no strategic merge patch; server-side apply is not modelled
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    api.ok(api.post(coll, isvc("m")), 201)
    r = api.patch(f"{coll}/m", {"spec": {}}, ctype="application/strategic-merge-patch+json")
    assert r.status_code == 415 and status_of(r)["reason"] == "UnsupportedMediaType"
    r = api.patch(f"{coll}/m", {"spec": {}}, ctype="application/apply-patch+yaml")
    assert r.status_code == 415
    assert api.patch(f"{coll}/absent", {"spec": {}}).status_code == 404


# ==== controllers =================================================================================


def test_optional_deployment_controller_writes_status(api):
    api.ok(api.post("/_test/config", {"deploymentController": True}))
    dcoll = f"{APPS}/namespaces/default/deployments"
    api.ok(api.post(dcoll, deployment("d", replicas=3)), 201)

    def synced():
        d = api.ok(api.get(f"{dcoll}/d"))
        return d if d["status"].get("observedGeneration") == d["metadata"]["generation"] else None
    d = wait_until(synced, what="deployment status")
    assert d["status"]["readyReplicas"] == 3 and d["status"]["availableReplicas"] == 3
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert d["metadata"]["generation"] == 1
    api.ok(api.patch(f"{dcoll}/d", {"spec": {"template": {"metadata": {
        "annotations": {"roll": "1"}}}}}))
    d = wait_until(lambda: (lambda d: d if d and d["metadata"]["annotations"][
        "deployment.kubernetes.io/revision"] == "2" else None)(synced()), what="rollout")
    assert d["status"]["observedGeneration"] == 2


# ==== fault injection =============================================================================


def test_fault_next_errors_500_and_429_with_retry_after(api):
    coll = f"{APPS}/namespaces/default/deployments"
    api.ok(api.post("/_test/faults", {"nextErrors": 2, "nextErrorCode": 500,
                                      "verbs": ["create"], "resources": ["deployments"]}))
    assert api.get(coll).status_code == 200  # not a create: untouched
    for _ in range(2):
        r = api.post(coll, deployment("d"))
        assert r.status_code == 500 and status_of(r)["reason"] == "InternalError"
    api.ok(api.post(coll, deployment("d")), 201)
    api.ok(api.post("/_test/faults", {"clear": True, "nextErrors": 1, "nextErrorCode": 429,
                                      "retryAfterSeconds": 3}))
    r = api.get(coll)
    st = status_of(r)
    assert r.status_code == 429 and r.headers["Retry-After"] == "3"
    assert st["reason"] == "TooManyRequests" and st["details"]["retryAfterSeconds"] == 3
    assert api.get(coll).status_code == 200
    # a random error rate, seeded
    api.ok(api.post("/_test/faults", {"clear": True, "errorRate": 0.5, "errorCode": 503,
                                      "seed": 7}))
    codes = [api.get(coll).status_code for _ in range(40)]
    assert {200, 503} == set(codes) and 8 < codes.count(503) < 32
    api.ok(api.delete("/_test/faults"))
    assert all(api.get(coll).status_code == 200 for _ in range(5))
    assert api.stats()["faults"]["injected"] == 3 + codes.count(503)


def test_fault_latency(api):
    api.ok(api.post("/_test/faults", {"latencyMs": 150}))
    t0 = time.time()
    api.ok(api.get(f"{CORE}/namespaces"))
    assert time.time() - t0 >= 0.15
    t0 = time.time()
    api.ok(api.get("/_test/stats"))  # control endpoints are never delayed
    assert time.time() - t0 < 0.15


@pytest.mark.parametrize("mode,end", [("close", "IncompleteRead"), ("end", "eof"),
                                      ("reset", "ConnectionResetError")])
def test_fault_drop_open_watches(api, mode, end):
    coll = f"{CORE}/namespaces/default/pods"
    w1 = api.watch(f"{coll}?watch=1&resourceVersion=0")
    w2 = api.watch(f"{APPS}/deployments?watch=1")
    wait_until(lambda: len(api.ok(api.get("/_test/watches"))["watches"]) == 2, what="2 watches")
    out = api.ok(api.post("/_test/faults", {"dropWatches": True, "dropMode": mode}))
    assert out["droppedWatches"] == 2
    assert w1.wait_end() == end and w2.wait_end() == end
    st = api.stats()["watches"]
    assert st["dropped"] == 2 and st["active"] == 0 and st["opened"] == 2
    # the server is fine afterwards: a new watch works
    w3 = api.watch(f"{coll}?watch=1")
    api.ok(api.post(coll, {"metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "c", "image": "x:1"}]}}), 201)
    assert w3.next()["type"] == "ADDED"
    w3.close()


def test_fault_watches_drop_after_n_events(api):
    coll = f"{CORE}/namespaces/default/services"
    api.ok(api.post("/_test/faults", {"watchDropAfterEvents": 2}))
    rv = api.stats()["resourceVersion"]
    w = api.watch(f"{coll}?watch=1&resourceVersion={rv}")
    for i in range(3):
        api.ok(api.post(coll, service(f"s{i}")), 201)
    assert [e["object"]["metadata"]["name"] for e in w.take(2)] == ["s0", "s1"]
    assert w.next() is None and w.end == "IncompleteRead"
    # a client resumes from the last resourceVersion it saw and misses nothing
    api.ok(api.post("/_test/faults", {"watchDropAfterEvents": 0}))
    w2 = api.watch(f"{coll}?watch=1&resourceVersion="
                   f"{api.ok(api.get(coll + '/s1'))['metadata']['resourceVersion']}")
    assert w2.next()["object"]["metadata"]["name"] == "s2"
    w2.close()


def test_stats_count_requests_writes_and_watches(api):
    api.ok(api.post("/_test/stats/reset"))
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    obj = api.ok(api.post(coll, isvc("m"), headers={"User-Agent": "kinfer-operator/0.1"}), 201)
    api.ok(api.put(f"{coll}/m", obj))  # no-op
    api.ok(api.patch(f"{coll}/m/status", {"status": {"replicas": 1}}))
    api.ok(api.get(f"{coll}/m"))
    api.ok(api.get(coll))
    api.ok(api.delete(f"{coll}/m"))
    s = api.stats()
    assert s["writes"]["byVerb"] == {"create": 1, "update": 1, "patch": 1, "delete": 1}
    assert s["writes"]["total"] == 4 and s["writes"]["noop"] == 1 and s["writes"]["effective"] == 3
    assert s["writes"]["byResource"]["inferenceservices/status"] == {"patch": 1}
    assert s["writes"]["byUserAgent"]["kinfer-operator/0.1"] == 1
    assert s["requests"]["byVerb"]["get"] == 1 and s["requests"]["byVerb"]["list"] == 1
    assert s["requests"]["byResource"]["inferenceservices"]["create"] == 1
    assert s["objects"]["inferenceservices"] == 0 and s["objects"]["namespaces"] == 4


# ==== restart =====================================================================================


def test_restart_with_empty_state_breaks_watches(tmp_path):
    a = ApiServerProcess("--too-large-wait", "0.2")
    try:
        created = a.ok(a.post(f"{APPS}/namespaces/default/deployments", deployment("d")), 201)
        rv = created["metadata"]["resourceVersion"]
        w = a.watch(f"{APPS}/namespaces/default/deployments?watch=1&resourceVersion={rv}")
        a.ok(a.patch(f"{APPS}/namespaces/default/deployments/d", {"spec": {"replicas": 2}}))
        assert w.next()["type"] == "MODIFIED"
        assert a.stop() == 0
        assert w.wait_end() not in (None, "eof")  # broken, not ended cleanly
        b = ApiServerProcess("--too-large-wait", "0.2", port=a.port)
        try:
            assert b.get(f"{APPS}/namespaces/default/deployments/d").status_code == 404
            assert b.ok(b.get(f"{CORE}/namespaces/default"))["metadata"]["name"] == "default"
            # the client's resourceVersion is from the old server's future: 504, then relist
            ev = b.watch(f"{APPS}/namespaces/default/deployments?watch=1&resourceVersion=100"
                         ).next()
            assert ev["type"] == "ERROR" and ev["object"]["code"] == 504
            lst = b.ok(b.get(f"{APPS}/namespaces/default/deployments"))
            assert lst["items"] == []
        finally:
            b.stop()
    finally:
        a.stop()


def test_restart_with_a_state_file_keeps_objects(tmp_path):
    state = tmp_path / "state.json"
    a = ApiServerProcess("--state-file", str(state))
    coll = f"{ISVC}/namespaces/default/inferenceservices"
    try:
        a.ok(a.post(f"{CORE}/namespaces", {"metadata": {"name": "ml"}}), 201)
        m = a.ok(a.post(f"{ISVC}/namespaces/ml/inferenceservices", isvc("m", ns="ml")), 201)
        a.ok(a.post(coll, isvc("x")), 201)
        last = a.ok(a.patch(f"{coll}/x", {"metadata": {"labels": {"v": "2"}}}))
        w = a.watch(f"{coll}?watch=1&resourceVersion={last['metadata']['resourceVersion']}")
    finally:
        a.stop()
    assert w.wait_end() != "eof"
    assert json.loads(state.read_text())["resourceVersion"] == last["metadata"]["resourceVersion"]
    b = ApiServerProcess("--state-file", str(state), port=a.port)
    try:
        got = b.ok(b.get(f"{ISVC}/namespaces/ml/inferenceservices/m"))
        assert got == m
        rv = int(last["metadata"]["resourceVersion"])
        # a watch from the last resourceVersion resumes; an older one is expired (the restarted
        # server keeps no event history)
        w = b.watch(f"{coll}?watch=1&resourceVersion={rv}")
        nxt = b.ok(b.patch(f"{coll}/x", {"metadata": {"labels": {"v": "3"}}}))
        assert int(nxt["metadata"]["resourceVersion"]) == rv + 1
        assert w.next()["object"]["metadata"]["labels"] == {"v": "3"}
        w.close()
        ev = b.watch(f"{coll}?watch=1&resourceVersion={rv - 1}").next()
        assert ev["type"] == "ERROR" and ev["object"]["code"] == 410
    finally:
        b.stop()


# ==== scale =======================================================================================


def test_a_thousand_inferenceservices_with_deployments_and_services(api):
    n = 1000
    items = []
    api.ok(api.post(f"{CORE}/namespaces", {"metadata": {"name": "load"}}), 201)
    for i in range(n):
        name = f"svc-{i:04d}"
        labels = {"app.kubernetes.io/name": name, "shard": str(i % 10)}
        obj = isvc(name, ns="load")
        obj["metadata"]["labels"] = labels
        items.append(obj)
        items.append(deployment(name, ns="load", labels=labels))
        items.append(service(name, ns="load", labels=labels))
    t0 = time.time()
    out = api.ok(api.post("/_test/objects", {"items": items}))
    load_s = time.time() - t0
    assert out["created"] == 3 * n and out["errors"] == []
    slowest = 0.0
    for path, count in [(f"{ISVC}/inferenceservices", n),
                        (f"{ISVC}/namespaces/load/inferenceservices", n),
                        (f"{APPS}/namespaces/load/deployments", n),
                        (f"{CORE}/namespaces/load/services", n)]:
        t0 = time.time()
        lst = api.ok(api.get(path))
        took = time.time() - t0
        slowest = max(slowest, took)
        assert len(lst["items"]) == count
        assert took < 0.5, f"listing {count} objects at {path} took {took:.3f}s"
    t0 = time.time()
    sel = api.ok(api.get(f"{APPS}/namespaces/load/deployments", params={"labelSelector":
                                                                        "shard=3"}))
    assert len(sel["items"]) == n // 10 and time.time() - t0 < 0.5
    # HTTP writes at a useful rate
    t0 = time.time()
    for i in range(100):
        api.ok(api.patch(f"{ISVC}/namespaces/load/inferenceservices/svc-{i:04d}/status",
                         {"status": {"replicas": 1}}))
    per_write = (time.time() - t0) / 100
    assert per_write < 0.02, f"{per_write * 1000:.1f} ms per status patch"
    print(f"\nbulk load of {3 * n} objects {load_s:.2f}s; slowest list of {n} "
          f"{slowest * 1000:.0f} ms; status patch {per_write * 1000:.1f} ms")
