#!/usr/bin/python3
"""Fused attention (train.attention, attention="fused") against the composed
form (matmul, scale, causal softmax, matmul), the peer, measured in the same
run: the same model (GPT, and a grouped-query Llama whose composed form
repeats the shared key / value heads while the fused op reads them in
place), weights, data and thread count, compiled twice.

Prints, per model: the step time inside the executable (the report's
time_ms: the smallest, over --rounds interleaved rounds of composed then
fused, of a run's median after a warm-up; this VM's speed drifts by up to
1.5x between runs minutes apart, which one round per kind does not see
through), the activation bytes and the peak the executable
allocated (equal to zero-report's prediction: checked here too), and the
fused / composed ratios. Both runs' final weights are compared: in f32 on the
cpu backend they are bitwise equal (docs/design.md, "Fused attention").

OpenBLAS and OpenMP get --threads T (OPENBLAS_NUM_THREADS = OMP_NUM_THREADS
= T in each child's environment).

Run (after building):  /usr/bin/python3 bench/attention.py [--threads 2] [--steps 6]
                         [--only SUBSTRING]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ.setdefault("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))

from ztrain import models, parity, safetensors  # noqa: E402

CONFIGS = [
    ("gpt L2 C64 H4 T64 b8 (demo)", "gpt",
     dict(batch=8, seq=64, vocab=256, layers=2, width=64, heads=4)),
    ("gpt L4 C256 H8 T256 b8", "gpt",
     dict(batch=8, seq=256, vocab=256, layers=4, width=256, heads=8)),
    ("gpt L4 C256 H8 T1024 b4", "gpt",
     dict(batch=4, seq=1024, vocab=256, layers=4, width=256, heads=8)),
    ("llama L4 C256 H8 KV2 T1024 b4", "llama",
     dict(batch=4, seq=1024, vocab=256, layers=4, width=256, heads=8, kv_heads=2)),
]
OPT = parity.OptimizerConfig("adamw", lr=1e-4)


def predicted(mlir, workdir):
    opt = os.path.join(os.environ["ZTRAIN_BIN_DIR"], "ztrain-opt")
    p = subprocess.run([opt, mlir, "--ztrain-training=optimizer=adamw",
                        "--ztrain-zero=dp=1 stage=0", "--plan-memory",
                        "--zero-report=format=json", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return json.loads(p.stdout)


def run(model, cfg, kind, threads, steps, warmup, workdir):
    spec = models.build(model, **cfg, attention=kind)
    mlir = os.path.join(workdir, f"{kind}.mlir")
    exe = os.path.join(workdir, kind)
    if not os.path.exists(exe):
        with open(mlir, "w") as fh:
            fh.write(spec.to_mlir())
        parity.compile_model(mlir, exe, OPT)
    init = os.path.join(workdir, "init.safetensors")
    data = os.path.join(workdir, "data.safetensors")
    if not os.path.exists(init):
        safetensors.save(init, parity.make_init(spec, seed=0))
        safetensors.save(data, parity.make_data(spec, samples=4 * spec.batch, seed=1))
    report = os.path.join(workdir, f"{kind}.json")
    save = os.path.join(workdir, f"{kind}.safetensors")
    parity.run_exe(exe, steps=steps, init=init, data=data, report=report, save=save,
                   threads=threads)
    r = parity.read_report(report)
    p = predicted(mlir, workdir)["per_rank"]
    assert r["memory"]["peak"] == p["predicted_peak"], (kind, r["memory"]["peak"], p)
    assert r["memory"]["activations"] == p["activations"], kind
    with open(save, "rb") as fh:
        weights = fh.read()
    times = [s["time_ms"] for s in r["steps"]][warmup:]
    return statistics.median(times), r["memory"]["activations"], r["memory"]["peak"], weights


def mib(n):
    return f"{n / 2**20:,.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", help="run the models whose name contains this")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(a.threads)
    print(f"threads {a.threads}, {a.steps} steps (median of the last {a.steps - a.warmup}; "
          f"the smallest of {a.rounds} interleaved rounds), cpu backend, f32\n")
    print("| model | attention | ms/step | activations MiB | peak MiB | "
          "time fused/composed | peak fused/composed | weights |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, model, cfg in CONFIGS:
        if a.only and a.only not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            rounds = [{k: run(model, cfg, k, a.threads, a.steps, a.warmup, tmp)
                       for k in ("composed", "fused")} for _ in range(a.rounds)]
        out = {k: (min(r[k][0] for r in rounds),) + rounds[0][k][1:]
               for k in ("composed", "fused")}
        c, f = out["composed"], out["fused"]
        same = "bitwise equal" if c[3] == f[3] else "DIFFER"
        for kind, (ms, acts, peak, _) in out.items():
            ratio = (f"{f[0] / c[0]:.2f}", f"{f[2] / c[2]:.2f}") if kind == "fused" else ("", "")
            print(f"| {name} | {kind} | {ms:,.1f} | {mib(acts)} | {mib(peak)} | "
                  f"{ratio[0]} | {ratio[1]} | {same if kind == 'fused' else ''} |",
                  flush=True)


if __name__ == "__main__":
    main()
