#!/usr/bin/env python3
"""kinfer-operator against the test API server (issue 5): time from an InferenceService created to
its Deployment and Service present (p50/p99 over 100, one at a time), API writes per minute in a
steady state with 1000 InferenceServices (goal: 0), and the operator's RSS with them (goal: at most
64 MB).

The API server is tests/kube/apiserver (Python, one process); its latency is part of every figure.
Timestamps come from watch streams on Deployments and Services (no polling), so the latency is
"POST answered" -> "last of the two ADDED events read by this script".

Writes bench/results/operator.json and bench/results/operator.md.

  .venv/bin/python bench/run_operator.py [--bin-dir build/bin] [--creates 100] [--services 1000]
                                         [--window 60]
"""
import argparse
import datetime
import json
import pathlib
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from run_single_stream import cpu_model

ROOT = pathlib.Path(__file__).resolve().parents[1]
APISERVER = ROOT / "tests" / "kube" / "apiserver" / "kinfer_test_apiserver.py"
ISVCS = "/apis/serving.kinfer.dev/v1alpha1/namespaces/default/inferenceservices"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def isvc(name):
    return {"apiVersion": "serving.kinfer.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"model": {"name": "smollm2-135m-instruct",
                               "uri": "pvc://models/smollm2-135m-instruct-q4_1.gguf"}}}


class Watcher(threading.Thread):
    """Records when each object's first ADDED event arrives on a watch stream."""

    def __init__(self, base, path):
        super().__init__(daemon=True)
        self.url = (f"{base}{path}?watch=1&labelSelector=serving.kinfer.dev/inferenceservice"
                    "&resourceVersion=0&allowWatchBookmarks=false")
        self.seen = {}
        self.cv = threading.Condition()

    def run(self):
        with urllib.request.urlopen(self.url, timeout=3600) as r:
            for line in r:
                t = time.perf_counter()
                ev = json.loads(line)
                if ev.get("type") == "ADDED":
                    with self.cv:
                        self.seen.setdefault(ev["object"]["metadata"]["name"], t)
                        self.cv.notify_all()

    def wait(self, name, timeout=30):
        with self.cv:
            self.cv.wait_for(lambda: name in self.seen, timeout)
            return self.seen.get(name)


def rss_kib(pid, key="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based) of the whole line; here 12 and 13.
    return (int(fields[11]) + int(fields[12])) / __import__("os").sysconf("SC_CLK_TCK")


def operator_writes(base):
    return http("GET", base + "/_test/stats")["writes"]["byUserAgent"].get("kinfer-operator", 0)


def metric(url, name):
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=str(ROOT / "build" / "bin"))
    ap.add_argument("--creates", type=int, default=100)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--window", type=float, default=60.0, help="steady-state window, seconds")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "operator"))
    args = ap.parse_args()

    api = subprocess.Popen([sys.executable, str(APISERVER), "--port", "0",
                            "--bookmark-interval", "1"], stdout=subprocess.PIPE, text=True)
    port = int(api.stdout.readline().split()[1])
    base = f"http://127.0.0.1:{port}"
    kc = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    kc.write(f"apiVersion: v1\nkind: Config\nclusters: [{{name: t, cluster: {{server: '{base}'}}}}]\n"
             "users: [{name: u, user: {}}]\n"
             "contexts: [{name: c, context: {cluster: t, user: u}}]\ncurrent-context: c\n")
    kc.close()
    mport = free_port()
    # A resync well inside the window: every InferenceService is reconciled again while the
    # writes are counted.
    resync = max(5, int(args.window / 3))
    op = subprocess.Popen([str(pathlib.Path(args.bin_dir) / "kinfer-operator"),
                           "--kubeconfig", kc.name, f"--metrics-bind-address=127.0.0.1:{mport}",
                           f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                           "--resync-period", str(resync), "--log-level", "warn"])
    metrics_url = f"http://127.0.0.1:{mport}/metrics"
    result = {"machine": {"cpu": cpu_model(), "cores": __import__("os").cpu_count(),
                          "platform": platform.platform()},
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "api_server": "tests/kube/apiserver (Python, in-memory, same machine)"}
    try:
        deadline = time.time() + 20
        while True:
            try:
                if metric(metrics_url, "kinfer_operator_leader") == 1:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "operator did not start"
            time.sleep(0.1)
        result["rss_idle_kib"] = rss_kib(op.pid)

        # 1. create -> Deployment and Service present, one at a time.
        deps = Watcher(base, "/apis/apps/v1/namespaces/default/deployments")
        svcs = Watcher(base, "/api/v1/namespaces/default/services")
        deps.start()
        svcs.start()
        time.sleep(0.5)
        lat = []
        for i in range(args.creates):
            name = f"lat-{i}"
            t0 = time.perf_counter()
            http("POST", base + ISVCS, isvc(name))
            t1 = time.perf_counter()
            td, ts = deps.wait(name), svcs.wait(name)
            assert td and ts, f"{name}: no Deployment or Service within 30 s"
            lat.append(max(td, ts) - t1)
            del t0
        result["create_to_present_ms"] = {
            "n": len(lat), "p50": round(pct(lat, 50) * 1e3, 2), "p99": round(pct(lat, 99) * 1e3, 2),
            "mean": round(statistics.mean(lat) * 1e3, 2), "max": round(max(lat) * 1e3, 2)}
        print(f"create -> Deployment+Service: p50 {result['create_to_present_ms']['p50']} ms, "
              f"p99 {result['create_to_present_ms']['p99']} ms over {len(lat)}", flush=True)

        # 2. 1000 InferenceServices (seeded in bulk), converge, then count writes in a window.
        n_more = args.services - args.creates
        items = [isvc(f"svc-{i}") for i in range(n_more)]
        t0 = time.time()
        for k in range(0, len(items), 250):
            http("POST", base + "/_test/objects", {"items": items[k:k + 250]}, timeout=120)
        while True:
            total = len(deps.seen)
            depth = metric(metrics_url, "kinfer_operator_workqueue_depth")
            if total >= args.services and depth == 0:
                break
            assert time.time() - t0 < 600, f"not converged: {total} Deployments"
            time.sleep(0.5)
        converge_s = time.time() - t0
        print(f"{args.services} InferenceServices converged in {converge_s:.1f} s", flush=True)
        time.sleep(5)  # the status writes that follow the last creates
        w0, r0 = operator_writes(base), metric(metrics_url, "kinfer_operator_reconcile_total")
        rss = []
        cpu0 = cpu_seconds(op.pid)
        t_start = time.time()
        while time.time() - t_start < args.window:
            rss.append(rss_kib(op.pid))
            time.sleep(1)
        elapsed = time.time() - t_start
        cpu = cpu_seconds(op.pid) - cpu0
        w1 = operator_writes(base)
        reconciles = sum(float(l.rsplit(" ", 1)[1]) for l in urllib.request.urlopen(metrics_url)
                         .read().decode().splitlines()
                         if l.startswith("kinfer_operator_reconcile_total{"))
        result["steady_state"] = {
            "services": args.services, "converge_seconds": round(converge_s, 1),
            "window_seconds": round(elapsed, 1), "resync_period_seconds": resync,
            "writes": w1 - w0, "writes_per_minute": round((w1 - w0) * 60 / elapsed, 2),
            "reconciles_total_at_end": reconciles,
            "cpu_seconds": round(cpu, 2), "cpu_share_of_one_core": round(cpu / elapsed, 4),
            "rss_kib_max": max(rss), "rss_kib_mean": round(statistics.mean(rss)),
            "rss_hwm_kib": rss_kib(op.pid, "VmHWM")}
        del r0
    finally:
        op.terminate()
        op.wait(30)
        api.terminate()
        api.wait(10)

    s = result["steady_state"]
    c = result["create_to_present_ms"]
    table = (
        "| metric | value | goal |\n|---|---|---|\n"
        f"| create -> Deployment + Service, p50 (n={c['n']}) | {c['p50']} ms | |\n"
        f"| create -> Deployment + Service, p99 (n={c['n']}) | {c['p99']} ms | |\n"
        f"| writes per minute, steady state, {s['services']} InferenceServices "
        f"({s['window_seconds']} s window, resync every {s['resync_period_seconds']} s) | "
        f"{s['writes_per_minute']} | 0 |\n"
        f"| operator RSS with {s['services']} InferenceServices (max in window) | "
        f"{s['rss_kib_max'] / 1024:.1f} MiB | <= 64 MB |\n"
        f"| operator RSS peak (VmHWM, includes the bulk create) | "
        f"{s['rss_hwm_kib'] / 1024:.1f} MiB | |\n"
        f"| operator RSS idle (0 InferenceServices) | {result['rss_idle_kib'] / 1024:.1f} MiB | |\n"
        f"| operator CPU in the window (share of one core) | {100 * s['cpu_share_of_one_core']:.1f}% | |\n"
        f"| time for {s['services']} InferenceServices to converge | {s['converge_seconds']} s | |\n")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(
        f"# kinfer-operator against the test API server\n\n{result['machine']['cpu']}, "
        f"{result['machine']['cores']} cores, {result['date']}\n\n" + table)
    print(table)


if __name__ == "__main__":
    main()
