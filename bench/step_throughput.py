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

Thread pinning: Debian's torch calls OpenBLAS (the pthread build, through
the libblas alternative) whose thread count torch.set_num_threads does not
control, so each thread count runs in a child process started with
OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = T; ztrain gets --threads T.

Run (after building):  /usr/bin/python3 bench/step_throughput.py [--threads 1 2]
"""

import argparse
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


def run_rows(threads, steps, warmup):
    for name, make in CONFIGS:
        spec = make()
        init = parity.make_init(spec, seed=0)
        data = parity.make_data(spec, samples=4 * spec.batch, seed=1)
        nparams = sum(int(np.prod(p.shape)) for p in spec.params)
        with tempfile.TemporaryDirectory() as tmp:
            init_path = os.path.join(tmp, "init.safetensors")
            data_path = os.path.join(tmp, "data.safetensors")
            safetensors.save(init_path, init)
            safetensors.save(data_path, data)
            z = bench_ztrain(spec, init_path, data_path, steps, warmup, threads, tmp)
            t = bench_torch(spec, init, data, steps, warmup, threads)
            print(f"{name:30} {nparams:>9} {threads:>3} {z:>10.2f} {t:>10.2f} "
                  f"{1e3 / z:>11.1f} {1e3 / t:>10.1f} {t / z:>7.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_rows(args.threads[0], args.steps, args.warmup)

    print(f"torch {torch.__version__} (BLAS loaded: {loaded_blas()}); {os.cpu_count()} cores")
    header = (f"{'model':30} {'params':>9} {'thr':>3} {'ztrain ms':>10} {'torch ms':>10} "
              f"{'ztrain st/s':>11} {'torch st/s':>10} {'speedup':>8}")
    print(header)
    print("-" * len(header), flush=True)
    for threads in args.threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                        "--threads", str(threads), "--steps", str(args.steps),
                        "--warmup", str(args.warmup)], env=env, check=True)
    print("speedup = torch ms / ztrain ms (> 1: ztrain faster); medians over "
          f"{args.steps - args.warmup} steps after {args.warmup} warm-up steps")


if __name__ == "__main__":
    main()
