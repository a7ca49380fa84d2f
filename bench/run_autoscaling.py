#!/usr/bin/env python3
"""Autoscaling simulation (issue 6): runs kinfer-sim on the Azure LLM conversation trace against
the H100 llama2-70b TP4 service model for every policy (kinfer's decision core, static for the
peak, HPA, Knative KPA, the oracle) and writes

  bench/results/autoscaling.json            kinfer-sim's document (settings + one object a policy)
  bench/results/autoscaling_timeline.csv    load, replicas and P99 TTFT per policy every 10 s
  bench/results/autoscaling.md              the table, the goal check and the command
  bench/results/autoscaling_<policy>.png    load, replicas and P99 TTFT over time, per policy

  python3 bench/run_autoscaling.py [--sim build/bin/kinfer-sim] [--slo-ttft 2] [--cold-start 60]
                                   [--seed 1] [--seeds 1,2,3] [-- extra kinfer-sim flags]

With --seeds (a list, ranges allowed: 1-40) the run is repeated per seed (outputs
<name>_s<seed>.*) and <name>.md gets one line per seed (attainment, requests over the SLO and
replica-hours vs the oracle of every policy, and the goal's checks) and a summary: on how many
seeds the goal is met, and each policy's misses and cost over all of them; plots are written for
the first seed only.

Plots use matplotlib when it is importable, else a small built-in PNG writer (zlib + struct).
"""
import argparse
import csv
import datetime
import json
import os
import pathlib
import shlex
import subprocess
import sys

from run_single_stream import cpu_model  # noqa: E402 (bench/ is the script's folder)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
GOAL = {"attainment": 0.99, "vs_oracle": 1.15}


def find_sim(given):
    if given:
        return pathlib.Path(given)
    for d in ("build", "build-sim", "build-main"):
        p = ROOT / d / "bin" / "kinfer-sim"
        if p.exists():
            return p
    sys.exit("kinfer-sim not found: build it (cmake --build build --target kinfer-sim) or pass --sim")


# ---- the goal -----------------------------------------------------------------------------------

def better(a, b):
    """a strictly better than b: higher attainment at no more replica-hours, or fewer replica-hours
    at no lower attainment."""
    return ((a["slo_attainment"] > b["slo_attainment"] and a["replica_hours"] <= b["replica_hours"])
            or (a["replica_hours"] < b["replica_hours"]
                and a["slo_attainment"] >= b["slo_attainment"]))


def goal_checks(by):
    k = by.get("kinfer")
    if not k:
        return []
    checks = [(f"attainment >= {GOAL['attainment']:.0%}", k["slo_attainment"] >= GOAL["attainment"]),
              (f"replica-hours <= {GOAL['vs_oracle']}x oracle",
               k.get("replica_hours_vs_oracle") is not None
               and k["replica_hours_vs_oracle"] <= GOAL["vs_oracle"])]
    for base in ("hpa", "kpa"):
        if base in by:
            checks.append((f"strictly better than {base.upper()}", better(k, by[base])))
    return checks


# ---- a small PNG writer -------------------------------------------------------------------------

# The built-in PNG writer (used when matplotlib is absent) is bench/serving/plot.py's.
from serving.plot import Canvas  # noqa: E402 (bench/ is the script's folder)


def fmt(v):
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def plot_builtin(path, title, t, panels):
    """panels: [(label, [(values, color)], hline or None)] stacked, sharing the time axis t (s)."""
    W, H, left, right, top, gap = 900, 180 * len(panels) + 60, 70, 20, 40, 20
    ph = (H - top - 30) // len(panels) - gap
    cv = Canvas(W, H)
    cv.text(left, 10, title, scale=3)
    tmax = max(t) if t else 1
    for i, (label, series, hline) in enumerate(panels):
        y0 = top + i * (ph + gap)
        vals = [v for s, _ in series for v in s if v is not None]
        top_value = max(vals + ([hline] if hline else []) + [1e-9])
        vmax = top_value * 1.1
        for x in range(left, W - right):  # frame
            cv.dot(x, y0, (160, 160, 160))
            cv.dot(x, y0 + ph, (0, 0, 0))
        for y in range(y0, y0 + ph + 1):
            cv.dot(left, y, (0, 0, 0))
        cv.text(left + 8, y0 + 6, label)
        cv.text(4, xy_top := y0 + ph - int(ph * top_value / vmax) - 5, fmt(top_value))
        cv.line(left - 4, xy_top + 5, left, xy_top + 5, (0, 0, 0))
        cv.text(4, y0 + ph - 10, "0")

        def xy(tt, v):
            return (left + int((W - left - right - 1) * tt / tmax), y0 + ph - int(ph * v / vmax))
        if hline:
            for x in range(left, W - right, 6):
                cv.line(x, xy(0, hline)[1], x + 2, xy(0, hline)[1], (200, 0, 0))
        for values, color in series:
            prev = None
            for tt, v in zip(t, values):
                if v is None:
                    prev = None
                    continue
                p = xy(tt, v)
                if prev:
                    cv.line(prev[0], prev[1], p[0], p[1], color, width=2)
                prev = p
    cv.text(left, H - 22, f"0 - {fmt(tmax / 60)} MIN")
    path.write_bytes(cv.png())


def missed(p):
    return round(p["requests"] * (1 - p["slo_attainment"]))


def parse_seeds(text):
    """'1,2,5-8' -> ['1', '2', '5', '6', '7', '8']."""
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad seed range '{part}'")
            seeds += [str(s) for s in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            seeds.append(part)
        else:
            raise ValueError(f"bad seed '{part}'")
    if not seeds:
        raise ValueError("no seed given")
    return seeds


def pooled(docs):
    """Every policy over all seeds as one run: requests and requests over the SLO added up (so
    slo_attainment is the pooled share) and replica-hours added up, with the ratio to the
    oracle's sum."""
    out = {}
    for _, doc in docs:
        for p in doc["policies"]:
            d = out.setdefault(p["policy"], {"policy": p["policy"], "requests": 0, "missed": 0,
                                             "replica_hours": 0.0})
            d["requests"] += p["requests"]
            d["missed"] += missed(p)
            d["replica_hours"] += p["replica_hours"]
    for d in out.values():
        d["slo_attainment"] = 1 - d["missed"] / d["requests"] if d["requests"] else 0.0
    oracle = out.get("oracle", {}).get("replica_hours")
    for d in out.values():
        d["replica_hours_vs_oracle"] = d["replica_hours"] / oracle if oracle else None
    return out


def seeds_summary(docs):
    """The goal over every seed: on how many it is met, each policy's requests over the SLO (in
    all and on the worst seed) and replica-hours vs the oracle (mean and highest), and the goal's
    checks on the seeds pooled into one run. Returns (seeds met, pooled checks, lines)."""
    met = 0
    per = {}
    for _, doc in docs:
        by = {p["policy"]: p for p in doc["policies"]}
        checks = goal_checks(by)
        met += bool(checks) and all(ok for _, ok in checks)
        for name, p in by.items():
            d = per.setdefault(name, {"missed": [], "vs": []})
            d["missed"].append(missed(p))
            if p["replica_hours_vs_oracle"] is not None:
                d["vs"].append(p["replica_hours_vs_oracle"])
    pool = pooled(docs)
    lines = [f"Goal met on {met} of {len(docs)} seeds.", "",
             "| policy | requests over the SLO, all seeds | worst seed | pooled attainment | "
             "vs oracle, mean | highest | pooled |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, d in per.items():
        vs, pv = d["vs"], pool[name]["replica_hours_vs_oracle"]
        lines.append(f"| {name} | {sum(d['missed'])} | {max(d['missed'])} | "
                     f"{100 * pool[name]['slo_attainment']:.4f}% | "
                     + (f"{sum(vs) / len(vs):.3f}x | {max(vs):.3f}x | " if vs else " | | ")
                     + ("" if pv is None else f"{pv:.3f}x") + " |")
    checks = goal_checks(pool)
    if checks:
        lines += ["", f"Goal checks on the {len(docs)} seeds pooled into one run: " + "; ".join(
            f"{name}: {'yes' if ok else 'NO'}" for name, ok in checks) + "."]
    return met, checks, lines


def seeds_table(docs):
    """docs: [(seed, kinfer-sim document)] -> markdown lines, one row per seed."""
    names = [p["policy"] for p in docs[0][1]["policies"]]
    lines = ["| seed | " + " | ".join(names) + " | goal |", "|---" * (len(names) + 2) + "|"]
    for seed, doc in docs:
        by = {p["policy"]: p for p in doc["policies"]}
        cells = []
        for n in names:
            p, vs = by[n], by[n]["replica_hours_vs_oracle"]
            cells.append(f"{100 * p['slo_attainment']:.3f}% ({missed(p)}) / "
                         f"{'' if vs is None else f'{vs:.3f}x'}")
        checks = goal_checks(by)
        goal = "met" if checks and all(ok for _, ok in checks) else "not met: " + ", ".join(
            name for name, ok in checks if not ok)
        lines.append(f"| {seed} | " + " | ".join(cells) + f" | {goal} |")
    return lines


def plot(path, policy, rows, slo):
    t = [float(r["t_s"]) for r in rows]
    load = [float(r["arrival_rps"]) for r in rows]
    ready = [int(r["ready"]) for r in rows]
    pods = [int(r["pods"]) for r in rows]
    p99 = [float(r["p99_ttft_s"]) if r["p99_ttft_s"] else None for r in rows]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(3, 1, figsize=(10, 7), sharex=True)
        m = [x / 60 for x in t]
        ax[0].plot(m, load)
        ax[0].set_ylabel("arrivals req/s")
        ax[1].step(m, pods, label="pods (incl. starting, draining)")
        ax[1].step(m, ready, label="ready")
        ax[1].set_ylabel("replicas")
        ax[1].legend()
        ax[2].plot(m, [v if v is not None else float("nan") for v in p99])
        ax[2].axhline(slo, color="r", ls="--")
        ax[2].set_ylabel("P99 TTFT s")
        ax[2].set_yscale("log")
        ax[2].set_xlabel("minutes")
        fig.suptitle(f"{policy}: load, replicas, P99 TTFT (10 s periods)")
        fig.savefig(path, dpi=80)
        plt.close(fig)
    except ImportError:
        plot_builtin(path, f"{policy}: load, replicas, P99 TTFT", t, [
            ("ARRIVALS REQ/S", [(load, (30, 90, 200))], None),
            ("REPLICAS: PODS (GREY), READY", [(pods, (150, 150, 150)), (ready, (0, 140, 60))], None),
            (f"P99 TTFT S (SLO {fmt(slo)})", [(p99, (200, 100, 0))], slo),
        ])


# ---- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", help="kinfer-sim binary (default: build*/bin/kinfer-sim)")
    ap.add_argument("--trace", default=str(DATA / "AzureLLMInferenceTrace_conv.csv"))
    ap.add_argument("--perf-model", default=str(DATA / "perf_model.csv"))
    ap.add_argument("--slo-ttft", default="2")
    ap.add_argument("--cold-start", default="60")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--seeds", help="seeds, comma-separated, ranges allowed (1-40): one run each, "
                    "a table of them and how many meet the goal")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--name", default="autoscaling", help="output file stem")
    ap.add_argument("extra", nargs="*", help="more kinfer-sim flags, after --")
    args = ap.parse_args()

    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sim = find_sim(args.sim)
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
    except ValueError as e:
        ap.error(str(e))
    runs = []
    for seed in seeds:
        stem = f"{args.name}_s{seed}" if args.seeds else args.name
        js, tl = out / f"{stem}.json", out / f"{stem}_timeline.csv"
        cmd = [str(sim), "--trace", args.trace, "--perf-model", args.perf_model, "--slo-ttft",
               args.slo_ttft, "--cold-start", args.cold_start, "--seed", seed,
               "--json", str(js), "--timeline", str(tl)] + args.extra
        print("$", " ".join(shlex.quote(c) for c in cmd), flush=True)
        subprocess.run(cmd, check=True)
        runs.append((seed, cmd, js, tl))
    seed, cmd, js, tl = runs[0]

    doc = json.loads(js.read_text())
    by = {p["policy"]: p for p in doc["policies"]}
    rows = list(csv.DictReader(tl.open()))
    slo = float(doc["slo_ttft_s"])
    pngs = []
    for policy in by:
        png = out / f"{args.name}_{policy}.png"
        plot(png, policy, [r for r in rows if r["policy"] == policy], slo)
        pngs.append(png.name)

    shown = " ".join(shlex.quote(os.path.relpath(c, ROOT) if c.startswith(str(ROOT.parent)) else c)
                     for c in cmd)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Autoscaling simulation ({now})", "",
             f"Machine: {cpu_model()}, {os.cpu_count()} CPUs. Command:", "", "```sh", shown, "```", "",
             f"Trace `{pathlib.Path(doc['trace']).name}`: {doc['requests']} requests over "
             f"{doc['span_s'] / 60:.1f} min; service model {doc['service_model']}; TTFT SLO "
             f"{doc['slo_ttft_s']} s; cold start {doc['cold_start_s']} s; seed {doc['seed']}.",
             f"Replica capacity (calibrated): {doc['calibration']['max_rps_per_replica']} req/s at "
             f"{doc['calibration']['concurrency_at_max_rps']} concurrent; targets: kinfer "
             f"{doc['targets']['kinfer_target_load_per_replica']} load/replica and "
             f"{doc['targets'].get('kinfer_target_requests_per_second_per_replica', 0)} req/s/replica "
             f"(scale-down delay {doc['targets']['kinfer_scale_down_delay_s']:g} s), HPA "
             f"{doc['targets']['hpa_target_utilization']:.0%} of {doc['targets']['hpa_capacity_per_pod']} "
             f"in flight, KPA {doc['targets']['kpa_target_concurrency']} concurrent. Oracle peak "
             f"{doc['oracle_plan']['peak_count']} replicas.", "",
             "| policy | SLO attainment | over SLO | P99 TTFT (s) | replica-hours | vs oracle | "
             "mean replicas | scale events | shed |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in doc["policies"]:
        vs = p["replica_hours_vs_oracle"]
        lines.append(f"| {p['policy']} | {100 * p['slo_attainment']:.3f}% | {missed(p)} | {p['p99_ttft_s']:.3f} | "
                     f"{p['replica_hours']:.3f} | {'' if vs is None else f'{vs:.3f}x'} | "
                     f"{p['mean_replicas']:.2f} | {p['scale_events']} | {p['shed_requests']} |")
    checks = goal_checks(by)
    if checks:
        lines += ["", "Goal checks (issue 6's criteria, stated for Azure on H100 TP4): " + "; ".join(f"{name}: {'yes' if ok else 'NO'}"
                                                     for name, ok in checks) + "."]
    if args.seeds:
        lines += ["", f"Every seed ({', '.join(seeds)}; the same command with --seed N): "
                  "attainment (requests over the SLO) / replica-hours vs the oracle.", ""]
        docs = [(s, json.loads(j.read_text())) for s, _, j, _ in runs]
        lines += seeds_table(docs)
        lines += [""] + seeds_summary(docs)[2]
    lines += ["", f"Plots (seed {seed}): " + ", ".join(f"`{p}`" for p in pngs) + ".", ""]
    (out / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
