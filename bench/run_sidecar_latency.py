#!/usr/bin/env python3
"""Latency the sidecar adds (issue 4): kinfer-loadgen against a fast fake upstream, directly and
through kinfer-sidecar, in the same run, at several open-loop rates, non-streaming and streaming.
Also the time to answer a rejection (429 from the rate limiter), which the issue wants within 5 ms.

Writes bench/results/sidecar_latency.json and bench/results/sidecar_latency.md.

  .venv/bin/python bench/run_sidecar_latency.py [--bin-dir build/bin] [--rates 200,500,1000]
                                                [--duration 10] [--warmup 2]
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

from run_single_stream import cpu_model

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def start_fake(bin_dir):
    p = subprocess.Popen([str(bin_dir / "kinfer-fake-upstream"), "--host", "127.0.0.1", "--port",
                          "0", "--model", "primary"], stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline().split()[1])
    return p, f"http://127.0.0.1:{port}"


def start_sidecar(bin_dir, upstream, extra_yaml=""):
    port = free_port()
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write(f'listen: "127.0.0.1:{port}"\nupstream: "{upstream}"\n'
              # Capacity is not what is measured: enough concurrency that nothing queues.
              "admission: {max_concurrency: 256, max_queue: 1024, max_queue_per_class: 1024}\n"
              + extra_yaml)
    cfg.close()
    p = subprocess.Popen([str(bin_dir / "kinfer-sidecar"), "--config", cfg.name, "--log-level",
                          "warn"])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health")
    return p, url


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()


def loadgen(bin_dir, url, rate, duration, warmup, stream, label):
    body = {"model": "primary", "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 16, "stream": stream}
    out = subprocess.run(
        [str(bin_dir / "kinfer-loadgen"), "--url", url + "/v1/chat/completions", "--rate",
         str(rate), "--duration", str(duration), "--warmup", str(warmup), "--body-json",
         json.dumps(body), "--label", label] + (["--stream"] if stream else []),
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=str(ROOT / "build" / "bin"))
    ap.add_argument("--rates", default="200,500,1000")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    bin_dir = pathlib.Path(args.bin_dir)
    rates = [int(r) for r in args.rates.split(",")]

    fake, fake_url = start_fake(bin_dir)
    sidecar, sidecar_url = start_sidecar(bin_dir, fake_url)
    rows = []
    try:
        for stream in (False, True):
            fake_cfg = {"chunks": 4} if stream else {}
            req = urllib.request.Request(fake_url + "/control", data=json.dumps(fake_cfg).encode(),
                                         method="POST")
            urllib.request.urlopen(req, timeout=5).read()
            for rate in rates:
                mode = "stream" if stream else "non-stream"
                direct = loadgen(bin_dir, fake_url, rate, args.duration, args.warmup, stream,
                                 f"direct {mode} {rate}")
                via = loadgen(bin_dir, sidecar_url, rate, args.duration, args.warmup, stream,
                              f"sidecar {mode} {rate}")
                rows.append({"rate": rate, "mode": mode, "direct": direct, "sidecar": via})
                print(f"{mode:10s} {rate:5d} rps: direct p50 {direct['latency_ms']['total']['p50']:.3f}"
                      f" p99 {direct['latency_ms']['total']['p99']:.3f} | sidecar p50 "
                      f"{via['latency_ms']['total']['p50']:.3f} p99 "
                      f"{via['latency_ms']['total']['p99']:.3f} ms", flush=True)
    finally:
        stop(sidecar)

    # Rejections: a rate limit of 1 request/s turns nearly everything into a 429.
    limited, limited_url = start_sidecar(
        bin_dir, fake_url, "rate_limits: {default: {requests_per_second: 1, request_burst: 1}}\n")
    try:
        reject = loadgen(bin_dir, limited_url, 500, args.duration, args.warmup, False,
                         "rejections 500")
    finally:
        stop(limited)
        stop(fake)

    result = {
        "benchmark": "sidecar_added_latency",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release()},
        "duration_s": args.duration, "warmup_s": args.warmup,
        "rows": rows, "rejections": reject,
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sidecar_latency.json").write_text(json.dumps(result, indent=2) + "\n")

    def ms(x):
        return f"{x:.3f}"

    lines = [f"Sidecar added latency, {result['date']}, {result['machine']['cpu']} "
             f"({result['machine']['cores']} cores); open loop, {args.duration:g} s per cell; ms.",
             "",
             "| mode | rate/s | direct p50 | direct p99 | sidecar p50 | sidecar p99 | added p50 | "
             "added p99 | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, s = r["direct"]["latency_ms"]["total"], r["sidecar"]["latency_ms"]["total"]
        errors = r["direct"]["errors"] + r["sidecar"]["errors"]
        lines.append(f"| {r['mode']} | {r['rate']} | {ms(d['p50'])} | {ms(d['p99'])} | "
                     f"{ms(s['p50'])} | {ms(s['p99'])} | {ms(s['p50'] - d['p50'])} | "
                     f"{ms(s['p99'] - d['p99'])} | {errors} |")
    rt = reject["latency_ms"]["total"]
    lines += ["", f"Rejections (429 from the rate limiter) at 500/s: statuses {reject['status']}, "
              f"p50 {ms(rt['p50'])} ms, p99 {ms(rt['p99'])} ms, max {ms(rt['max'])} ms."]
    (out / "sidecar_latency.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
