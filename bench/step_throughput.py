#!/usr/bin/python3
"""Training-step throughput: ztrain-compiled executables vs the same models
in PyTorch, measured in one run on this machine with the same thread count.

Each model is built once with the Python builders; ztrain compiles it (AdamW)
and runs `--steps` steps with `--threads T`, timing each step inside the
executable (the report's time_ms). PyTorch runs the same module
(ztrain.torch_ref), the same initial weights, the same batches and
torch.optim.AdamW with torch.set_num_threads(T), timing zero_grad + forward +
backward + optimizer step with perf_counter. Both sides report the median
over the steps after a warm-up.

Thread pinning: torch.set_num_threads does not control OpenBLAS's threads,
so each side and thread count runs in a child process started with
OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = T (ztrain also gets --threads T).
The peer is torch on the same OpenBLAS build ztrain links (OpenMP
threading, picked with LD_LIBRARY_PATH); torch on Debian's default libblas
alternative (OpenBLAS with pthreads, which fights OpenMP for the cores) is
shown for information.

Run (after building):  /usr/bin/python3 bench/step_throughput.py [--threads 1 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ.setdefault("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ztrain import models, parity, safetensors, torch_ref  # noqa: E402

CONFIGS = [
    ("mlp 784-128-10 b32", lambda: models.mlp(batch=32, in_features=784, hidden=[128], classes=10)),
    ("mlp 784-1024-1024-10 b256",
     lambda: models.mlp(batch=256, in_features=784, hidden=[1024, 1024], classes=10)),
    ("gpt L2 C64 H4 T64 b8 (demo)",
     lambda: models.gpt(batch=8, seq=64, vocab=256, layers=2, width=64, heads=4)),
    ("gpt L4 C256 H8 T128 b8",
     lambda: models.gpt(batch=8, seq=128, vocab=256, layers=4, width=256, heads=8)),
]

OPT = parity.OptimizerConfig("adamw", lr=1e-4)


def loaded_blas():
    """The BLAS shared objects this process (torch) actually mapped."""
    with open("/proc/self/maps") as fh:
        libs = {line.split()[-1] for line in fh if "blas" in line and "/" in line}
    return ", ".join(sorted(os.path.realpath(p) for p in libs)) or "none"


def bench_ztrain(spec, init_path, data_path, steps, warmup, threads, workdir):
    mlir = os.path.join(workdir, "model.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    exe = parity.compile_model(mlir, os.path.join(workdir, "model"), OPT)
    global ZTRAIN_BLAS
    ldd = subprocess.run(["ldd", exe], stdout=subprocess.PIPE, text=True).stdout
    ZTRAIN_BLAS = ", ".join(line.split("=>")[1].split("(")[0].strip()
                            for line in ldd.splitlines() if "blas" in line)
    report = os.path.join(workdir, "report.json")
    parity.run_exe(exe, steps=steps, init=init_path, data=data_path, report=report,
                   threads=threads)
    times = [s["time_ms"] for s in parity.read_report(report)["steps"]][warmup:]
    return statistics.median(times)


def bench_torch(spec, init, data, steps, warmup, threads):
    torch.set_num_threads(threads)
    model = torch_ref.load_state(torch_ref.from_spec(spec), init)
    opt = torch_ref.make_optimizer(model.parameters(), OPT.kind, **OPT.torch_kwargs())
    times = []
    for t in range(1, steps + 1):
        batch = {k: torch.from_numpy(np.ascontiguousarray(v))
                 for k, v in parity.batch_for_step(data, t, spec.batch).items()}
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(*model.inputs(batch))
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[warmup:])


OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
ZTRAIN_BLAS = "unknown"


def measure(part, threads, steps, warmup):
    """{model name: median ms/step} for one side ('ztrain' or 'torch')."""
    out = {}
    for name, make in CONFIGS:
        spec = make()
        init = parity.make_init(spec, seed=0)
        data = parity.make_data(spec, samples=4 * spec.batch, seed=1)
        if part == "torch":
            out[name] = bench_torch(spec, init, data, steps, warmup, threads)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            init_path = os.path.join(tmp, "init.safetensors")
            data_path = os.path.join(tmp, "data.safetensors")
            safetensors.save(init_path, init)
            safetensors.save(data_path, data)
            out[name] = bench_ztrain(spec, init_path, data_path, steps, warmup, threads, tmp)
    out["_blas"] = loaded_blas() if part == "torch" else ZTRAIN_BLAS
    return out


def child(part, threads, steps, warmup, blas_dir=None):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", part,
                        "--threads", str(threads), "--steps", str(steps),
                        "--warmup", str(warmup)],
                       env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--child", choices=["ztrain", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.threads[0], args.steps, args.warmup)))
        return

    header = (f"{'model':30} {'params':>9} {'thr':>3} {'ztrain ms':>10} {'torch ms':>9} "
              f"{'speedup':>8} {'torch(deb) ms':>13} {'speedup':>8}")
    rows = []
    blas = {}
    for threads in args.threads:
        z = child("ztrain", threads, args.steps, args.warmup)
        t = child("torch", threads, args.steps, args.warmup, OPENBLAS_OPENMP)
        d = child("torch", threads, args.steps, args.warmup)
        blas = {"ztrain": z.pop("_blas"), "torch": t.pop("_blas"), "torch(deb)": d.pop("_blas")}
        for name, make in CONFIGS:
            nparams = sum(int(np.prod(p.shape)) for p in make().params)
            rows.append(f"{name:30} {nparams:>9} {threads:>3} {z[name]:>10.2f} {t[name]:>9.2f} "
                        f"{t[name] / z[name]:>7.2f}x {d[name]:>13.2f} {d[name] / z[name]:>7.2f}x")
    print(f"torch {torch.__version__}, {os.cpu_count()} cores; AdamW steps of f32 models")
    for side, lib in blas.items():
        print(f"  {side:11} BLAS: {lib}")
    print(header)
    print("-" * len(header))
    print("\n".join(rows))
    print("speedup = torch ms / ztrain ms (> 1: ztrain faster). torch: the same OpenBLAS\n"
          "build as ztrain (OpenMP threading); torch(deb): Debian's default libblas\n"
          "alternative (OpenBLAS, pthreads). Medians over "
          f"{args.steps - args.warmup} steps after {args.warmup} warm-up steps.")


if __name__ == "__main__":
    main()
