#!/usr/bin/python3
"""Elementwise fusion: the same models compiled with --fuse=none and
--fuse=elementwise, measured side by side in one run on this machine.

For each model and precision: the median step time of each executable
(--threads T, the report's time_ms; the two run alternately, several times,
each run's first steps left out), their ratio, the
bytes the memory-bound kernels read and write per step (zero-report's
kernel_bytes_per_step: elementwise, norms, softmax, ...; a fused region
counts its inputs and results once) and the planned activation memory
(plan-memory's activations arena). Both executables train bitwise the same
(test/e2e/test_fusion.py), so only time and memory differ.

Run (after building):  /usr/bin/python3 bench/fusion.py [--threads 2]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ.setdefault("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))
BIN = os.environ["ZTRAIN_BIN_DIR"]

from ztrain import models, parity, safetensors  # noqa: E402

CONFIGS = [
    ("gpt L2 C64 H4 T64 b8 (demo)",
     lambda: models.gpt(batch=8, seq=64, vocab=256, layers=2, width=64, heads=4)),
    ("gpt L4 C256 H8 T128 b8",
     lambda: models.gpt(batch=8, seq=128, vocab=256, layers=4, width=256, heads=8)),
    ("llama L2 C128 T64 b8",
     lambda: models.llama(batch=8, seq=64, vocab=256, layers=2, width=128, heads=4,
                          kv_heads=2, hidden=344)),
]
OPT = parity.OptimizerConfig("adamw", lr=1e-4)


def kernel_bytes(mlir, precision, fuse):
    """zero-report's bytes moved by memory-bound kernels per step."""
    passes = [f"--ztrain-training=precision={precision} optimizer=adamw"]
    if fuse:
        passes.append("--train-fuse-elementwise")
    passes.append("--zero-report=format=json")
    p = subprocess.run([os.path.join(BIN, "ztrain-opt"), mlir, *passes, "-o", os.devnull],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    report = json.loads(p.stdout or p.stderr)
    return report["kernel_bytes_per_step"]


def activations(exe_mlir):
    text = open(exe_mlir).read()
    return int(re.search(r"arena activations (\d+)", text).group(1))


def build(spec, precision, fuse, tmp):
    """The executable, its kernel bytes per step and its activation arena."""
    mlir = os.path.join(tmp, "model.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    mode = "elementwise" if fuse else "none"
    flags = [f"--precision={precision}", f"--fuse={mode}"]
    exe = parity.compile_model(mlir, os.path.join(tmp, f"model.{mode}"), OPT, flags)
    lowered = parity.compile_model(mlir, os.path.join(tmp, f"model.{mode}.mlir"), OPT,
                                   flags + ["--emit=mlir"])
    return exe, kernel_bytes(mlir, precision, fuse), activations(lowered)


def step_times(exe, spec, threads, steps, warmup, tmp):
    init_path = os.path.join(tmp, "init.safetensors")
    data_path = os.path.join(tmp, "data.safetensors")
    if not os.path.exists(init_path):
        safetensors.save(init_path, parity.make_init(spec, seed=0))
        safetensors.save(data_path, parity.make_data(spec, samples=4 * spec.batch, seed=1))
    report = os.path.join(tmp, "report.json")
    parity.run_exe(exe, steps=steps, init=init_path, data=data_path, report=report,
                   threads=threads)
    return [s["time_ms"] for s in parity.read_report(report)["steps"]][warmup:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of each run")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each executable")
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    print(f"threads {args.threads}; median step time over {args.repeats} alternating runs "
          f"of each executable (steps {args.warmup + 1}-{args.steps} of each)")
    print(f"{'model':30} {'prec':5} {'none ms':>8} {'fused ms':>9} {'speedup':>8} "
          f"{'kernel MB none':>15} {'fused':>8} {'act KiB none':>13} {'fused':>8}")
    for name, make in CONFIGS:
        for precision in args.precision:
            spec = make()
            with tempfile.TemporaryDirectory() as tmp:
                built = [build(spec, precision, fuse, tmp) for fuse in (False, True)]
                # Alternating runs: this machine's speed drifts by tens of
                # percent within minutes; both sides see the same drift.
                times = ([], [])
                for _ in range(args.repeats):
                    for side in (0, 1):
                        times[side].extend(step_times(built[side][0], spec, args.threads,
                                                      args.steps, args.warmup, tmp))
            t0, t1 = (statistics.median(t) for t in times)
            (_, b0, a0), (_, b1, a1) = built
            print(f"{name:30} {precision:5} {t0:8.2f} {t1:9.2f} {t0 / t1:7.2f}x "
                  f"{b0 / 1e6:15.1f} {b1 / 1e6:8.1f} {a0 / 1024:13.0f} {a1 / 1024:8.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
