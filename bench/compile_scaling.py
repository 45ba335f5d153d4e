#!/usr/bin/python3
"""Compile time against model size: does the pipeline scale linearly in the
number of ops, whatever the shape of the graph?

Three shapes (--shape): `gpt`, GPT-style models of growing depth built with
the Python builders (tiny widths: only the op count matters); `chain`, one
long chain of adds (each reads the previous one and a parameter, so the
parameter's gradient sums one adjoint per add); `wide`, N independent adds
of the input and a parameter summed by a balanced tree of adds (N values
live at once); `mixed`, the wide shape with its leaves cycling through add,
mul and sub (no two neighbouring calls alike). Each runs `ztrain-opt` with the training pipeline, the ZeRO
pipeline (stage 3 on 2 ranks, overlap on) and plan-memory under
`--mlir-timing`, and `ztrain-compile` to an object file (the whole
pipeline, lowering, LLVM code generation), and prints, per size, the ops
after the pipeline, the wall time of each costly pass, of the ztrain-opt
run and of ztrain-compile, and the time per 1,000 ops: flat columns mean
linear scaling, growing ones super-linear.

Run (after building):
  /usr/bin/python3 bench/compile_scaling.py [--layers 50 100 200 400]
  /usr/bin/python3 bench/compile_scaling.py --shape chain --sizes 100000 400000 870000
  /usr/bin/python3 bench/compile_scaling.py --shape wide --sizes 100000 --compare-whole
  /usr/bin/python3 bench/compile_scaling.py --shape wide --sizes 435000 --compare-unrolled
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


def chain_mlir(n):
    """n adds in one chain: h_i = h_{i-1} + w."""
    lines = ["module {",
             "  train.param @w : tensor<4xf32> init(normal, 0.02)",
             '  func.func @step(%x: tensor<4xf32> {train.name = "x"}) -> tensor<f32> '
             "attributes {train.entry} {",
             "    %w = train.param_read @w : tensor<4xf32>",
             "    %h0 = train.add %x, %w : tensor<4xf32>"]
    lines += [f"    %h{i} = train.add %h{i - 1}, %w : tensor<4xf32>" for i in range(1, n)]
    lines += [f"    %l = train.reduce sum %h{n - 1} [0] : tensor<4xf32> -> tensor<f32>",
              "    return %l : tensor<f32>", "  }", "}"]
    return "\n".join(lines) + "\n"


def wide_mlir(n, kinds=("add",)):
    """n independent adds x + w, summed by a balanced tree of adds. With
    several `kinds`, the leaves cycle through them (x + w, x * w, x - w, ...):
    no two neighbours alike, a pattern that repeats every len(kinds) ops."""
    lines = ["module {",
             "  train.param @w : tensor<4xf32> init(normal, 0.02)",
             '  func.func @step(%x: tensor<4xf32> {train.name = "x"}) -> tensor<f32> '
             "attributes {train.entry} {",
             "    %w = train.param_read @w : tensor<4xf32>"]
    level = [f"%a{i}" for i in range(n)]
    lines += [f"    {v} = train.{kinds[i % len(kinds)]} %x, %w : tensor<4xf32>"
              for i, v in enumerate(level)]
    k = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            lines.append(f"    %t{k} = train.add {level[i]}, {level[i + 1]} : tensor<4xf32>")
            nxt.append(f"%t{k}")
            k += 1
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    lines += [f"    %l = train.reduce sum {level[0]} [0] : tensor<4xf32> -> tensor<f32>",
              "    return %l : tensor<f32>", "  }", "}"]
    return "\n".join(lines) + "\n"


def source(shape, size):
    if shape == "chain":
        return chain_mlir(size)
    if shape == "wide":
        return wide_mlir(size)
    if shape == "mixed":
        return wide_mlir(size, ("add", "mul", "sub"))
    return models.gpt(batch=1, seq=4, vocab=8, layers=size, width=4, heads=1).to_mlir()


# ztrain-compile with neither the outlining nor the parts (one step
# function, translated and compiled on one thread): the code generation as
# it was before them, for --compare-whole.
WHOLE = ["--outline-max-ops=1000000000", "--ops-per-part=1000000000"]
# ztrain-compile without reroll-call-runs (every call unrolled; outlining and
# parts as usual), for --compare-unrolled.
UNROLLED = ["--reroll-min-trips=0"]


def compile_seconds(src, obj, extra=()):
    began = time.monotonic()
    p = subprocess.run([os.path.join(BIN, "ztrain-compile"), src, "--optimizer=adam", "--dp=2",
                        "--zero-stage=3", "--overlap", "--emit=obj", "-o", obj, *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - began
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    os.remove(obj)
    return wall


def run(shape, layers, workdir, compare_whole=False, compare_unrolled=False):
    src = os.path.join(workdir, f"{shape}{layers}.mlir")
    with open(src, "w") as fh:
        fh.write(source(shape, layers))
    out = os.path.join(workdir, f"{shape}{layers}.out.mlir")
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
    obj = os.path.join(workdir, f"{shape}{layers}.o")
    compile_wall = compile_seconds(src, obj)
    whole_wall = compile_seconds(src, obj, WHOLE) if compare_whole else None
    unrolled_wall = compile_seconds(src, obj, UNROLLED) if compare_unrolled else None
    return ops, wall, passes, compile_wall, whole_wall, unrolled_wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=["gpt", "chain", "wide", "mixed"], default="gpt",
                    help="gpt: layers of a GPT; chain: one chain of adds; wide: independent "
                         "adds summed by a tree; mixed: wide with the leaves cycling through "
                         "add, mul and sub")
    ap.add_argument("--layers", "--sizes", dest="sizes", type=int, nargs="+",
                    help="GPT layers (gpt) or adds (chain, wide)")
    ap.add_argument("--compare-whole", action="store_true",
                    help="also compile each model as one function on one thread (no "
                         "outline-long-functions, no parts): the 'whole s' column")
    ap.add_argument("--compare-unrolled", action="store_true",
                    help="also compile each model without reroll-call-runs (every runtime "
                         "call unrolled): the 'unrolled s' column")
    a = ap.parse_args()
    sizes = a.sizes or ([50, 100, 200, 400, 800, 1600, 3600] if a.shape == "gpt"
                        else [25000, 100000, 400000, 870000])
    label = "layers" if a.shape == "gpt" else "adds"
    print(f"{label:>6} {'ops':>8} " + " ".join(f"{p:>22}" for p in PASSES)
          + f" {'opt s':>7} {'compile s':>9} {'ms/1k ops':>10}"
          + (f" {'whole s':>8} {'speedup':>8}" if a.compare_whole else "")
          + (f" {'unrolled s':>10} {'speedup':>8}" if a.compare_unrolled else ""))
    with tempfile.TemporaryDirectory() as d:
        for size in sizes:
            ops, wall, passes, compile_wall, whole, unrolled = run(
                a.shape, size, d, a.compare_whole, a.compare_unrolled)
            cols = " ".join(f"{passes.get(p, 0.0):>22.3f}" for p in PASSES)
            extra = f" {whole:>8.2f} {whole / compile_wall:>7.2f}x" if whole else ""
            if unrolled:
                extra += f" {unrolled:>10.2f} {unrolled / compile_wall:>7.2f}x"
            print(f"{size:>6} {ops:>8} {cols} {wall:>7.2f} {compile_wall:>9.2f} "
                  f"{1000 * compile_wall / ops * 1000:>10.2f}{extra}", flush=True)
    print("pass columns: wall seconds (--mlir-timing); opt s: the whole ztrain-opt run "
          "(parse, passes, print); compile s: ztrain-compile --emit=obj (pipeline, lowering, "
          "LLVM codegen); ms/1k ops: compile s per 1,000 ops"
          + ("; whole s: the same as one function on one thread (--outline-max-ops and "
             "--ops-per-part at 1e9), right after" if a.compare_whole else "")
          + ("; unrolled s: the same without reroll-call-runs (--reroll-min-trips=0), right "
             "after" if a.compare_unrolled else ""))


if __name__ == "__main__":
    main()
