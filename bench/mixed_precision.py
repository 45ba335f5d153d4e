#!/usr/bin/python3
"""Mixed precision step time: ztrain fp32 vs ztrain bf16 (--precision=bf16;
its GEMMs through oneDNN, and with ZTRAIN_CPU_BF16_GEMM=widen: operands
widened to f32 for OpenBLAS) vs ztrain fp16 vs PyTorch fp32 vs PyTorch with
torch.autocast("cpu", dtype=torch.bfloat16), GPT-style models, one run on
this machine, same thread count.

Each side runs in a child process started with OPENBLAS_NUM_THREADS =
OMP_NUM_THREADS = T (ztrain also gets --threads T, torch
torch.set_num_threads(T)); torch uses the same OpenBLAS build ztrain links
(OpenMP threading, picked with LD_LIBRARY_PATH), as bench/step_throughput.py.

  ztrain   the model compiled with AdamW, `--steps` steps; the step time is
           the report's time_ms, median after the warm-up. Memory: the
           report's measured peak of the step's allocations (parameters,
           gradients, optimizer states, activations), and the process's max
           RSS.
  torch    ztrain.torch_ref's module, the same initial weights and batches,
           torch.optim.AdamW; zero_grad + forward + backward + step timed
           with perf_counter, median after the warm-up. autocast: the forward
           (and the loss) under torch.autocast("cpu", bfloat16), parameters
           and AdamW in fp32 (PyTorch's usual CPU mixed precision). Memory:
           max RSS of the child minus its RSS after building the model and
           one warm-up step is not separable from the allocator's cache, so
           the child's max RSS is printed as it is (it includes the
           interpreter and torch's libraries, ~300 MB).

Run (after building):  /usr/bin/python3 bench/mixed_precision.py [--threads 2]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ.setdefault("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))

import numpy as np  # noqa: E402

from ztrain import models, parity, safetensors  # noqa: E402

CONFIGS = [
    ("gpt L4 C256 H8 T128 b8",
     lambda: models.gpt(batch=8, seq=128, vocab=256, layers=4, width=256, heads=8)),
    ("gpt L6 C512 H8 T128 b8",
     lambda: models.gpt(batch=8, seq=128, vocab=256, layers=6, width=512, heads=8)),
]
OPT = parity.OptimizerConfig("adamw", lr=1e-4)
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
SIDES = ["ztrain-fp32", "ztrain-bf16", "ztrain-bf16-widen", "ztrain-fp16", "torch-fp32",
         "torch-autocast"]


def bench_ztrain(spec, precision, steps, warmup, threads, tmp):
    init = parity.make_init(spec, seed=0)
    data = parity.make_data(spec, samples=4 * spec.batch, seed=1)
    init_path = os.path.join(tmp, "init.safetensors")
    data_path = os.path.join(tmp, "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data_path, data)
    mlir = os.path.join(tmp, "model.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    exe = parity.compile_model(mlir, os.path.join(tmp, "model"), OPT,
                               [f"--precision={precision}"])
    report = os.path.join(tmp, "report.json")
    parity.run_exe(exe, steps=steps, init=init_path, data=data_path, report=report,
                   threads=threads)
    r = parity.read_report(report)
    times = [s["time_ms"] for s in r["steps"]][warmup:]
    peak = r["ranks"][0]["memory"]["peak"] if "ranks" in r else r["memory"]["peak"]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return statistics.median(times), peak, rss


def bench_torch(spec, autocast, steps, warmup, threads):
    import torch
    from ztrain import torch_ref
    torch.set_num_threads(threads)
    init = parity.make_init(spec, seed=0)
    data = parity.make_data(spec, samples=4 * spec.batch, seed=1)
    model = torch_ref.load_state(torch_ref.from_spec(spec), init)
    opt = torch_ref.make_optimizer(model.parameters(), OPT.kind, **OPT.torch_kwargs())
    times = []
    for t in range(1, steps + 1):
        batch = {k: torch.from_numpy(np.ascontiguousarray(v))
                 for k, v in parity.batch_for_step(data, t, spec.batch).items()}
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(*model.inputs(batch))
        else:
            loss = model(*model.inputs(batch))
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return statistics.median(times[warmup:]), None, rss


def measure(side, config, threads, steps, warmup):
    spec = dict(CONFIGS)[config]()
    if side.startswith("ztrain"):
        with tempfile.TemporaryDirectory() as tmp:
            return bench_ztrain(spec, side.split("-")[1], steps, warmup, threads, tmp)
    return bench_torch(spec, side == "torch-autocast", steps, warmup, threads)


def child(side, config, threads, steps, warmup):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               LD_LIBRARY_PATH=OPENBLAS_OPENMP)
    if side == "ztrain-bf16-widen":   # the GEMM path without oneDNN
        env["ZTRAIN_CPU_BF16_GEMM"] = "widen"
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", side,
                        "--config", config, "--threads", str(threads),
                        "--steps", str(steps), "--warmup", str(warmup)],
                       env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.config, args.threads, args.steps,
                                 args.warmup)))
        return
    import torch
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, {args.threads} threads; "
          f"AdamW; medians over {args.steps - args.warmup} steps after {args.warmup}")
    header = (f"{'model':24} {'params':>9} {'side':>15} {'ms/step':>9} "
              f"{'vs torch-fp32':>13} {'step peak MB':>12} {'max RSS MB':>10}")
    print(header)
    print("-" * len(header))
    for name, make in CONFIGS:
        nparams = sum(int(np.prod(p.shape)) for p in make().params)
        res = {side: child(side, name, args.threads, args.steps, args.warmup)
               for side in SIDES}
        base = res["torch-fp32"][0]
        for side in SIDES:
            ms, peak, rss = res[side]
            peak_s = f"{peak / 1e6:.1f}" if peak is not None else "-"
            print(f"{name:24} {nparams:>9} {side:>15} {ms:>9.2f} {base / ms:>12.2f}x "
                  f"{peak_s:>12} {rss / 1e6:>10.0f}")
    print("vs torch-fp32 = torch fp32 ms / this side's ms (> 1: faster than PyTorch fp32).\n"
          "step peak: the executable's measured peak of its step allocations (ztrain only).")


if __name__ == "__main__":
    main()
