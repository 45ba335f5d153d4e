#!/usr/bin/python3
"""ZeRO stage 3 with and without overlap-schedule, measured in one run.

Stage 3 moves 3 Psi (N-1)/N bytes per step per rank and, synchronously,
waits for every gather and reduce-scatter. This program compiles one
communication-heavy model (large layers, small per-rank batch) at
`--dp N --zero-stage 3` several ways:

  sync           --overlap=false: every collective blocks where it is issued
  overlap        --overlap with the default schedule: gathers prefetched one
                 use ahead, gradients in 1 MiB buckets (larger ones alone)
                 reduced during the backward pass, releases after last use
  depth 2        --prefetch-depth 2: two gathers in flight ahead of use
  25MiB buckets  --bucket-bytes 25 MiB (PyTorch DDP's default)
  bounded        --max-live-bytes = 1.5 x the largest gathered layer: the
                 rate limiter binds (the unbounded schedule holds two large
                 layers at once), so a large layer is not prefetched while
                 another is in use

and runs each with `ztrain-run --np N` (Open MPI over shared memory), every
rank with one compute thread (--threads 1; the runtime's communication
thread is the second). Reported per configuration, max over ranks:

  step ms       median over the steps after the warm-up of the slowest
                rank's step time (the report's time_ms)
  vs sync       step ms / step ms of sync (< 1: faster)
  comm ms       time the communication thread spent in collectives per step
  exposed ms    time the step thread spent blocked on communication per
                step (waits and synchronous collectives)
  hidden        1 - exposed / comm: the fraction of communication time
                that overlapped compute (0 for sync by construction)
  gathered MiB  measured peak of gathered parameters (the runtime's
                gathered_parameters category)

Then it writes a Chrome trace of the overlapped run (one file per rank,
open in https://ui.perfetto.dev) and prints a summary of one step of rank
0: busy time per track and how much of the communication track ran while
the compute track was busy.

The machine may be shared: like bench/zero_stages.py this waits for an idle
CPU before each run and repeats runs that others disturbed (>= 10% of the
cores). On 2 cores, N = 4 oversubscribes: 4 compute threads and 4
communication threads share 2 cores, which limits how much can overlap.

Run (after building):  /usr/bin/python3 bench/overlap.py [--np 4] [--steps 12]
  [--warmup 3] [--rounds 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zero_stages as zs  # noqa: E402  (shared: environment, noise guard)

from ztrain import models, parity, safetensors  # noqa: E402

MODEL = ("mlp 1024-2048-2048-2048-10 b8/rank",
         lambda b: models.mlp(batch=b, in_features=1024, hidden=[2048, 2048, 2048],
                              classes=10))
MICRO = 8
OPT = parity.OptimizerConfig("adamw", lr=1e-4)
MiB = float(1 << 20)


def configs(largest):
    return [
        ("sync", ["--overlap=false"]),
        ("overlap", ["--overlap"]),
        ("depth 2", ["--overlap", "--prefetch-depth", "2"]),
        ("25MiB buckets", ["--overlap", "--bucket-bytes", str(25 << 20)]),
        ("bounded", ["--overlap", "--max-live-bytes", str(largest * 3 // 2)]),
    ]


def run(work, name, flags, n, steps, trace=None):
    mlir = os.path.join(work, "model.mlir")
    exe = parity.compile_model(mlir, os.path.join(work, name.replace("+", "_")), OPT,
                               ["--dp", str(n), "--zero-stage", "3"] + flags)
    report = os.path.join(work, f"{name}.json")
    cmd = [parity.tool("ztrain-run"), "--np", str(n), "--mpi-arg=--bind-to", "--mpi-arg=none",
           exe, "--steps", str(steps), "--threads", "1", "--report", report,
           "--data", os.path.join(work, "data.safetensors"),
           "--init", os.path.join(work, "init.safetensors")]
    if trace:
        cmd += ["--trace", trace]
    with zs.ForeignCpu() as foreign:
        p = subprocess.run(cmd, env=zs.pinned_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    rep = parity.read_report(report)
    return rep, foreign.share


def summarize(rep, steps, warmup):
    ranks = rep["ranks"]
    per_step = [max(r["time_ms"][i] for r in ranks) for i in range(steps)]
    return {
        "ms": statistics.median(per_step[warmup:]),
        "comm": max(r["overlap"]["comm_ms"] for r in ranks) / steps,
        "exposed": max(r["overlap"]["exposed_ms"] for r in ranks) / steps,
        "hidden": min(r["overlap"]["hidden_fraction"] for r in ranks),
        "gathered": max(r["memory"]["peak_by_category"]["gathered_parameters"]
                        for r in ranks),
        "loss": rep["steps"][-1]["loss"],
    }


def trace_summary(path):
    """Busy time per track in rank 0's last step and the communication time
    that ran while compute was busy."""
    with open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith("step ")]
    last = max(steps, key=lambda e: e["ts"])
    lo, hi = last["ts"], last["ts"] + last["dur"]

    def inside(e):
        return lo <= e["ts"] and e["ts"] + e["dur"] <= hi + 1

    # Compute: kernels; not the step itself, waits, or synchronous
    # collectives (they carry a handle).
    compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                     if e.get("tid") == 1 and inside(e) and not e["name"].startswith("step ")
                     and "handle" not in e.get("args", {}))
    comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("tid") == 2 and inside(e))

    def union(iv):
        out = []
        for a, b in iv:
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out

    cu, mu = union(compute), union(comm)
    both = 0.0
    for a, b in mu:
        for c, d in cu:
            both += max(0.0, min(b, d) - max(a, c))
    busy = lambda iv: sum(b - a for a, b in iv)  # noqa: E731
    return {"step_us": last["dur"], "compute_us": busy(cu), "comm_us": busy(mu),
            "comm_during_compute_us": both, "events": len(events)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quiet-wait", type=float, default=120.0)
    args = ap.parse_args()
    n = args.np

    label, build = MODEL
    work = tempfile.mkdtemp(prefix="ztrain-bench-overlap-")
    spec = build(MICRO)
    with open(os.path.join(work, "model.mlir"), "w") as fh:
        fh.write(spec.to_mlir())
    init = parity.make_init(spec, seed=0)
    safetensors.save(os.path.join(work, "init.safetensors"), init)
    safetensors.save(os.path.join(work, "data.safetensors"),
                     parity.make_data(spec, samples=n * MICRO * 4, seed=1))
    largest = max(-(-a.size // n) * n * 4 for a in init.values())
    psi = sum(a.size * 4 for a in init.values())

    print(f"model: {label}, {psi / MiB:.1f} MiB of f32 parameters; ZeRO stage 3 at N={n}; "
          f"{args.steps} steps ({args.warmup} warm-up), best of {args.rounds} rounds")
    print(f"machine: {os.cpu_count()} cores, load {zs.uptime()}")
    results = {}
    for rnd in range(args.rounds):
        order = configs(largest) if rnd % 2 == 0 else list(reversed(configs(largest)))
        for name, flags in order:
            for attempt in range(3):
                zs.wait_quiet(args.quiet_wait)
                rep, foreign = run(work, name, flags, n, args.steps)
                if foreign < zs.NOISY:
                    break
            s = summarize(rep, args.steps, args.warmup)
            s["foreign"] = foreign
            results.setdefault(name, []).append(s)

    best = {k: min(v, key=lambda s: s["ms"]) for k, v in results.items()}
    base = best["sync"]["ms"]
    print()
    print(f"{'schedule':<14}{'step ms':>10}{'spread':>9}{'vs sync':>9}{'comm ms':>9}"
          f"{'exposed ms':>12}{'hidden':>8}{'gathered MiB':>14}{'other':>7}")
    for name, _ in configs(largest):
        s = best[name]
        spread = max(r["ms"] for r in results[name]) / s["ms"] - 1
        print(f"{name:<14}{s['ms']:>10.1f}{spread:>8.0%} {s['ms'] / base:>8.2f}"
              f"{s['comm']:>9.1f}{s['exposed']:>12.1f}{s['hidden']:>8.0%}"
              f"{s['gathered'] / MiB:>14.2f}{s['foreign']:>7.0%}")
    losses = {round(best[k]["loss"], 6) for k in best}
    print(f"final losses equal across schedules: {len(losses) == 1} ({sorted(losses)})")

    trace = os.path.join(work, "trace.json")
    zs.wait_quiet(args.quiet_wait)
    run(work, "overlap", ["--overlap"], n, 4, trace=trace)
    t = trace_summary(os.path.join(work, "trace.rank0.json"))
    print()
    print(f"trace (overlap, rank 0, last of 4 steps; files {work}/trace.rank*.json):")
    print(f"  step {t['step_us'] / 1e3:.1f} ms: compute busy {t['compute_us'] / 1e3:.1f} ms, "
          f"communication busy {t['comm_us'] / 1e3:.1f} ms, of which "
          f"{t['comm_during_compute_us'] / 1e3:.1f} ms while compute ran "
          f"({t['comm_during_compute_us'] / max(t['comm_us'], 1):.0%}); {t['events']} events")


if __name__ == "__main__":
    main()
