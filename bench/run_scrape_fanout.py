#!/usr/bin/env python3
"""The operator's metrics scrape fan-out at scale: autoscale::ScrapeAll (the call the autoscale
loop makes every tick for every pod) against N real HTTP listeners that serve a real
kinfer-sidecar /metrics page, and a real Prometheus server scraping the same N targets as the peer.

1. The page: a real kinfer-sidecar in front of kinfer-fake-upstream answers a mix of requests
   (three classes, streamed and not, 5-400 ms upstream latency, some upstream 500s), then its
   /metrics page is saved (bench/results/scrape_page.txt).
2. For each N: `kinfer-scrape-bench --mode serve` (one process, one thread, N listeners on
   127.0.0.1 ports) serves that page.
   a. `kinfer-scrape-bench --mode scrape`: a warm-up round, then ScrapeAll over all N every
      --interval for --rounds rounds (timeout 1 s, the operator's default): per-round wall time,
      failed and timed-out scrapes, the process CPU per round, threads, descriptors, peak RSS.
   b. Prometheus (`prometheus` on PATH, Debian package `prometheus`) with the N targets at the
      same interval and a 1 s scrape timeout: after every target has been scraped once and a
      settling wait, a window of --rounds intervals; then every scrape_duration_seconds and up
      sample of the window, its CPU over the window (/proc), its peak RSS and threads.
   The server's CPU is read in both phases. The two scrapers run one after the other, never at
   once: the machine has 2 cores.

Writes bench/results/scrape_fanout.json and scrape_fanout.md.

  .venv/bin/python bench/run_scrape_fanout.py [--bin-dir build/bin] [--ns 100,1000,2000]
      [--rounds 20] [--interval 2] [--timeout-ms 1000] [--nofile N] [--no-prometheus]
      [--out bench/results/scrape_fanout]
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import os
import pathlib
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from run_operator import cpu_seconds, rss_kib as proc_status  # noqa: E402
from run_single_stream import cpu_model  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def stop(proc, timeout=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pct(values, q):
    """Nearest rank."""
    values = sorted(values)
    if not values:
        return None
    rank = max(1, -(-len(values) * q // 100))
    return values[int(rank) - 1]


# ---- 1. a real kinfer-sidecar page -----------------------------------------------------------

def sidecar_page(bin_dir, workdir):
    up = subprocess.Popen([str(bin_dir / "kinfer-fake-upstream"), "--host", "127.0.0.1",
                           "--port", "0", "--model", "primary"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    sidecar = None
    try:
        line = up.stdout.readline()
        if not line.startswith("LISTENING "):
            raise RuntimeError(f"kinfer-fake-upstream did not start: {line!r}")
        up_port = int(line.split()[1])
        port = free_port()
        config = workdir / "sidecar.yaml"
        config.write_text(f"listen: 127.0.0.1:{port}\nupstream: http://127.0.0.1:{up_port}\n")
        sidecar = subprocess.Popen([str(bin_dir / "kinfer-sidecar"), "--config", str(config),
                                    "--log-level", "warn"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 20
        while True:
            try:
                get(base + "/health", timeout=1)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.time() > deadline or sidecar.poll() is not None:
                    raise RuntimeError("kinfer-sidecar did not become healthy")
                time.sleep(0.05)

        rng = random.Random(1)

        def one(i):
            stream = i % 2 == 0
            body = json.dumps({"model": "primary", "stream": stream, "max_tokens": 4,
                               "messages": [{"role": "user", "content": "hello"}]}).encode()
            headers = {"Content-Type": "application/json",
                       "x-kinfer-priority": ("critical", "standard", "batch")[i % 3],
                       "x-fake-latency-ms": str(rng.randint(5, 400))}
            if i % 20 == 7:
                headers["x-fake-status"] = "500"
            req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                         headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
            except urllib.error.HTTPError:
                pass

        with cf.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(120)))
        return get(base + "/metrics")
    finally:
        if sidecar:
            stop(sidecar)
        stop(up)


# ---- 2. the servers and the two scrapers ------------------------------------------------------

class PageServers:
    def __init__(self, bin_dir, page_file, n, workdir):
        self.ports_file = workdir / f"ports-{n}.txt"
        self.proc = subprocess.Popen(
            [str(bin_dir / "kinfer-scrape-bench"), "--mode", "serve", "--listeners", str(n),
             "--page", str(page_file), "--ports-out", str(self.ports_file)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("LISTENING "):
            stop(self.proc)
            raise RuntimeError(f"kinfer-scrape-bench --mode serve did not start: {line!r}")
        self.targets = [f"127.0.0.1:{p}" for p in self.ports_file.read_text().split()]
        assert len(self.targets) == n

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def close(self):
        stop(self.proc)
        return json.loads(self.proc.stdout.readline() or "{}")


def run_scrape_all(bin_dir, servers, page_bytes, args, workdir):
    targets = workdir / f"targets-{len(servers.targets)}.txt"
    targets.write_text("\n".join(servers.targets) + "\n")
    out = workdir / f"scrape-{len(servers.targets)}.json"
    cmd = [str(bin_dir / "kinfer-scrape-bench"), "--mode", "scrape", "--targets", str(targets),
           "--rounds", str(args.rounds), "--warmup", "1",
           "--interval-ms", str(int(args.interval * 1000)), "--timeout-ms", str(args.timeout_ms),
           "--expect-bytes", str(page_bytes), "--json", str(out)]
    if args.nofile:
        cmd += ["--nofile", str(args.nofile)]
    cpu0 = servers.cpu()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server_cpu = servers.cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"kinfer-scrape-bench --mode scrape failed:\n{proc.stderr}")
    result = json.loads(out.read_text())
    # The server's CPU over all rounds (the warm-up too), per round.
    result["server_cpu_s_per_round"] = server_cpu / (args.rounds + 1)
    result["command"] = " ".join(cmd)
    return result


class Prometheus:
    def __init__(self, binary, targets, interval, timeout_s, workdir):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="prom-", dir=workdir))
        config = self.dir / "prometheus.yml"
        lines = ["global:", f"  scrape_interval: {round(interval * 1000)}ms",
                 f"  scrape_timeout: {round(timeout_s * 1000)}ms",
                 "scrape_configs:", "  - job_name: sidecars", "    metrics_path: /metrics",
                 "    static_configs:", "      - targets:"]
        lines += [f"          - '{t}'" for t in targets]
        config.write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            try:
                get(self.url + "/-/ready", timeout=1)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.time() > deadline or self.proc.poll() is not None:
                    self.log.flush()
                    tail = (self.dir / "prometheus.log").read_text()[-3000:]
                    raise RuntimeError(f"prometheus did not become ready:\n{tail}")
                time.sleep(0.2)

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        body = json.loads(get(self.url + "/api/v1/query?" + urllib.parse.urlencode(params),
                              timeout=60))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def scalar(self, expr, at=None):
        r = self.query(expr, at)
        return float(r[0]["value"][1]) if r else None

    def close(self):
        stop(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_prometheus(binary, servers, args, workdir):
    n = len(servers.targets)
    prom = Prometheus(binary, servers.targets, args.interval, args.timeout_ms / 1000, workdir)
    try:
        # Every target scraped once, then a settling wait (the first scrapes of a new target
        # are spread over one interval).
        deadline = time.time() + 120
        while (prom.scalar('count(up{job="sidecars"})') or 0) < n:
            if time.time() > deadline:
                raise RuntimeError("prometheus did not scrape every target within 120 s")
            time.sleep(0.5)
        time.sleep(3 * args.interval)
        window = args.rounds * args.interval
        threads = []
        done = threading.Event()

        def sample_threads():
            while not done.wait(0.5):
                threads.append(proc_status(prom.proc.pid, "Threads"))

        sampler = threading.Thread(target=sample_threads, daemon=True)
        t0 = time.time()
        cpu0, scpu0 = cpu_seconds(prom.proc.pid), servers.cpu()
        sampler.start()
        time.sleep(window)
        t1 = time.time()
        cpu1, scpu1 = cpu_seconds(prom.proc.pid), servers.cpu()
        done.set()
        sampler.join()
        # The window's samples, queried once the last scrapes have been appended.
        time.sleep(args.interval + 1)
        rng = f"[{int(window * 1000)}ms]"
        durations = []
        for series in prom.query(f'scrape_duration_seconds{{job="sidecars"}}{rng}', at=t1):
            durations += [float(v) for _, v in series["values"]]
        scrapes = prom.scalar(f'sum(count_over_time(up{{job="sidecars"}}{rng}))', at=t1) or 0
        ups = prom.scalar(f'sum(sum_over_time(up{{job="sidecars"}}{rng}))', at=t1) or 0
        samples = prom.scalar('max(scrape_samples_scraped{job="sidecars"})', at=t1)
        # How far the actual intervals strayed (Prometheus' own page: it does not scrape itself).
        interval_p99 = None
        for line in get(prom.url + "/metrics").decode().splitlines():
            if (line.startswith("prometheus_target_interval_length_seconds{") and
                    'quantile="0.99"' in line):
                interval_p99 = float(line.rsplit(" ", 1)[1])
        return {
            "endpoints": n,
            "window_s": t1 - t0,
            "scrapes": int(scrapes),
            "failed": int(scrapes - ups),
            "scrape_duration_s": {"p50": pct(durations, 50), "p99": pct(durations, 99),
                                  "max": max(durations) if durations else None,
                                  "mean": sum(durations) / len(durations) if durations else None},
            "samples_per_page": samples,
            "interval_length_p99_s": interval_p99,
            "cpu_s_per_interval": (cpu1 - cpu0) / ((t1 - t0) / args.interval),
            "server_cpu_s_per_interval": (scpu1 - scpu0) / ((t1 - t0) / args.interval),
            "peak_rss_kib": proc_status(prom.proc.pid, "VmHWM"),
            "max_threads": max(threads) if threads else None,
        }
    finally:
        prom.close()


# ---- 3. the report ----------------------------------------------------------------------------

def ms(x):
    return "-" if x is None else f"{x * 1e3:.1f}"


def markdown(doc):
    out = [f"Scrape fan-out, {doc['date']}, {doc['machine']}, timeout {doc['timeout_ms']} ms, "
           f"interval {doc['interval_s']:g} s, {doc['rounds']} rounds, page "
           f"{doc['page_bytes']} bytes ({doc['page_samples']} samples).", "",
           "| N | scraper | round wall p50 / p99 / max ms | per-scrape p50 / p99 / max ms | "
           "failed / timed out (of scrapes) | CPU s per round | server CPU s per round | "
           "peak RSS MiB | threads | fds |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in doc["runs"]:
        s = row["scrape_all"]["summary"]
        fails = s["unavailable"] + s["other_errors"] + s["wrong_body"]
        out.append(
            f"| {row['n']} | ScrapeAll | {ms(s['wall_s']['p50'])} / {ms(s['wall_s']['p99'])} / "
            f"{ms(s['wall_s']['max'])} | - | {fails} / {s['deadline_exceeded']} "
            f"(of {s['scrapes']}) | {s['cpu_s']['mean']:.3f} (+{s['sample_cpu_s']['mean']:.3f} "
            f"PodSampler) | {row['scrape_all']['server_cpu_s_per_round']:.3f} | "
            f"{s['peak_rss_kib'] / 1024:.1f} | {s['max_threads']} | {s['max_fds']} |")
        p = row.get("prometheus")
        if p:
            d = p["scrape_duration_s"]
            out.append(
                f"| {row['n']} | Prometheus | - | {ms(d['p50'])} / {ms(d['p99'])} / "
                f"{ms(d['max'])} | {p['failed']} (of {p['scrapes']}) | "
                f"{p['cpu_s_per_interval']:.3f} | {p['server_cpu_s_per_interval']:.3f} | "
                f"{p['peak_rss_kib'] / 1024:.1f} | {p['max_threads']} | - |")
    out += ["", "CPU s per round: the scraper process's user + system CPU in ScrapeAll (and then "
            "PodSampler over the pages); for Prometheus its whole CPU per interval (scrapes, "
            "parsing, TSDB appends). Prometheus spreads its scrapes over the interval, so it has "
            "no round time.", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=str(ROOT / "build" / "bin"))
    ap.add_argument("--ns", default="100,1000,2000")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--interval", type=float, default=2.0, help="seconds")
    ap.add_argument("--timeout-ms", type=int, default=1000)
    ap.add_argument("--nofile", type=int, default=0,
                    help="soft RLIMIT_NOFILE of the ScrapeAll process (default: the hard limit)")
    ap.add_argument("--no-prometheus", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scrape_fanout"))
    args = ap.parse_args()
    bin_dir = pathlib.Path(args.bin_dir)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prometheus = None if args.no_prometheus else (shutil.which("prometheus") or
                                                  ("/usr/bin/prometheus"
                                                   if os.path.exists("/usr/bin/prometheus")
                                                   else None))
    if not args.no_prometheus and not prometheus:
        print("prometheus not found (Debian package `prometheus`): the peer is skipped",
              file=sys.stderr)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="scrape-fanout-"))
    try:
        page = sidecar_page(bin_dir, workdir)
        page_file = out.parent / "scrape_page.txt"
        page_file.write_bytes(page)
        page_samples = sum(1 for line in page.decode().splitlines()
                           if line and not line.startswith("#"))
        doc = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}",
               "load_average_start": os.getloadavg(),
               "rounds": args.rounds, "interval_s": args.interval, "timeout_ms": args.timeout_ms,
               "page_bytes": len(page), "page_samples": page_samples,
               "command": " ".join([os.path.relpath(sys.executable, ROOT)
                                    if sys.executable.startswith(str(ROOT)) else sys.executable,
                                    "bench/run_scrape_fanout.py"] + sys.argv[1:]),
               "runs": []}
        for n in [int(x) for x in args.ns.split(",")]:
            servers = PageServers(bin_dir, page_file, n, workdir)
            try:
                print(f"N={n}: ScrapeAll, {args.rounds} rounds", file=sys.stderr)
                row = {"n": n, "scrape_all": run_scrape_all(bin_dir, servers, len(page), args,
                                                            workdir)}
                s = row["scrape_all"]["summary"]
                print(f"  wall p50 {ms(s['wall_s']['p50'])} ms p99 {ms(s['wall_s']['p99'])} ms, "
                      f"failed {s['unavailable'] + s['other_errors'] + s['wrong_body']}, "
                      f"timed out {s['deadline_exceeded']}, cpu {s['cpu_s']['mean']:.3f} s",
                      file=sys.stderr)
                if prometheus:
                    print(f"N={n}: Prometheus, {args.rounds} intervals", file=sys.stderr)
                    row["prometheus"] = run_prometheus(prometheus, servers, args, workdir)
                    p = row["prometheus"]
                    print(f"  scrape p50 {ms(p['scrape_duration_s']['p50'])} ms p99 "
                          f"{ms(p['scrape_duration_s']['p99'])} ms, failed {p['failed']} of "
                          f"{p['scrapes']}, cpu {p['cpu_s_per_interval']:.3f} s per interval",
                          file=sys.stderr)
            finally:
                row_server = servers.close()
            row["server"] = row_server
            doc["runs"].append(row)
        doc["load_average_end"] = os.getloadavg()
        pathlib.Path(str(out) + ".json").write_text(json.dumps(doc, indent=1) + "\n")
        md = markdown(doc)
        pathlib.Path(str(out) + ".md").write_text(md)
        print(md)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
