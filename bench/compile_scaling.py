#!/usr/bin/python3
"""Compile time against model size: does the pipeline scale linearly in the
number of ops?

Builds GPT-style models of growing depth with the Python builders (tiny
widths: only the op count matters), runs `ztrain-opt` with the training
pipeline, the ZeRO pipeline (stage 3 on 2 ranks, overlap on) and
plan-memory under `--mlir-timing`, and `ztrain-compile` to an object file
(the whole pipeline, lowering, LLVM code generation), and prints, per size,
the ops after the pipeline, the wall time of each costly pass, of the
ztrain-opt run and of ztrain-compile, and the time per 1,000 ops: flat
columns mean linear scaling, growing ones super-linear.

Run (after building):  /usr/bin/python3 bench/compile_scaling.py [--layers 50 100 200 400]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from ztrain import models  # noqa: E402

BIN = os.environ.get("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))
# Names as --mlir-timing prints them.
PASSES = ["TrainAutodiff", "ZeroInsertCollectives", "OverlapSchedule", "PlanMemory"]


def run(layers, workdir):
    spec = models.gpt(batch=1, seq=4, vocab=8, layers=layers, width=4, heads=1)
    src = os.path.join(workdir, f"gpt{layers}.mlir")
    with open(src, "w") as fh:
        fh.write(spec.to_mlir())
    out = os.path.join(workdir, f"gpt{layers}.out.mlir")
    began = time.monotonic()
    p = subprocess.run([os.path.join(BIN, "ztrain-opt"), src, "--ztrain-training=optimizer=adam",
                        "--ztrain-zero=stage=3 dp=2 overlap=true", "--plan-memory",
                        "--mlir-timing", "-o", out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - began
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    passes = {}
    for line in p.stderr.splitlines():
        m = re.match(r"\s*([0-9.]+) \(\s*[0-9.]+%\)\s+(\S+)\s*$", line)
        if m and m.group(2) in PASSES:
            passes[m.group(2)] = passes.get(m.group(2), 0.0) + float(m.group(1))
    with open(out) as fh:
        ops = sum(1 for line in fh if " = " in line or line.strip().startswith(("train.", "dist.")))
    os.remove(out)
    obj = os.path.join(workdir, f"gpt{layers}.o")
    began = time.monotonic()
    p = subprocess.run([os.path.join(BIN, "ztrain-compile"), src, "--optimizer=adam", "--dp=2",
                        "--zero-stage=3", "--overlap", "--emit=obj", "-o", obj],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    compile_wall = time.monotonic() - began
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    os.remove(obj)
    return ops, wall, passes, compile_wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[50, 100, 200, 400, 800, 1600, 3600])
    a = ap.parse_args()
    print(f"{'layers':>6} {'ops':>8} " + " ".join(f"{p:>22}" for p in PASSES)
          + f" {'opt s':>7} {'compile s':>9} {'ms/1k ops':>10}")
    with tempfile.TemporaryDirectory() as d:
        for layers in a.layers:
            ops, wall, passes, compile_wall = run(layers, d)
            cols = " ".join(f"{passes.get(p, 0.0):>22.3f}" for p in PASSES)
            print(f"{layers:>6} {ops:>8} {cols} {wall:>7.2f} {compile_wall:>9.2f} "
                  f"{1000 * compile_wall / ops * 1000:>10.2f}", flush=True)
    print("pass columns: wall seconds (--mlir-timing); opt s: the whole ztrain-opt run "
          "(parse, passes, print); compile s: ztrain-compile --emit=obj (pipeline, lowering, "
          "LLVM codegen); ms/1k ops: compile s per 1,000 ops")


if __name__ == "__main__":
    main()
