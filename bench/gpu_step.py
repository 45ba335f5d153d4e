#!/usr/bin/python3
"""A GPT-style training step on one GPU: ztrain's cuda backend against the
same model in PyTorch on the same GPU, in one run.

What it measures, in this order:

  peak    the GPU's float32 GEMM peak, measured: `ztrt_cuda_gemm_peak`
          (built with the cuda backend) times an N x N x N sgemm through the
          backend's own matmul (cuBLAS, TF32 off, the precision the step runs
          at), best of 5. With torch on CUDA, torch.matmul's float32 peak
          (TF32 off) is printed beside it as a cross-check.
  ztrain  the model compiled by ztrain-compile (AdamW), run at world size 1
          with `--backend cuda`; the step time is the report's time_ms (the
          executable synchronizes the GPU at the end of every step), the
          median over the steps after the warm-up.
  torch   ztrain.torch_ref's module of the same model on the same GPU, the
          same initial weights and batches, torch.optim.AdamW, float32 with
          TF32 off; zero_grad + forward + backward + step, timed with
          perf_counter around a torch.cuda.synchronize(); the same median.
          Left out, saying why, when torch has no CUDA.

Both sides report achieved TFLOP/s = model FLOPs per step / step time, and
MFU = achieved / measured peak. Model FLOPs count the GEMMs as executed:
per layer 24 B T C^2 (q, k, v, output projection and the 4C MLP) plus
4 B T^2 C (scores and attention-weighted values; the causal half is not
skipped by either side), plus 2 B T C V for the tied output embedding; the
backward pass is twice the forward (two GEMMs per forward GEMM), so a step
is 3x. Elementwise work is not counted (the usual convention).

The first step's loss is printed for both sides as a sanity check (same
weights, same batch: they agree to ~1e-5).

Run on a machine with an NVIDIA GPU, after building with CUDA
(docs/cuda.md):

  /usr/bin/python3 bench/gpu_step.py [--layers 12 --width 768 --heads 12
      --seq 512 --vocab 8192 --batch 8] [--steps 20] [--json out.json]

Without a GPU it exits with status 2 and says why.
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

from ztrain import models, parity, safetensors  # noqa: E402
from ztrain.devices import cuda_devices  # noqa: E402

OPT = parity.OptimizerConfig("adamw", lr=1e-4)
WARMUP = 3


def model_flops(c):
    """Model FLOPs of one training step (forward + backward GEMMs)."""
    B, T, C, V, L = c["batch"], c["seq"], c["width"], c["vocab"], c["layers"]
    forward = L * (24 * B * T * C * C + 4 * B * T * T * C) + 2 * B * T * C * V
    return 3 * forward


def measure_peak(n):
    exe = os.path.join(parity.bin_dir(), "ztrt_cuda_gemm_peak")
    if not os.access(exe, os.X_OK):
        sys.exit(f"gpu_step: {exe} not found: build the project with the CUDA "
                 "toolkit and NCCL present (CMake prints 'ztrt: cuda backend: ...')")
    p = subprocess.run([exe, str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"gpu_step: {exe} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def bench_ztrain(spec, init_path, data_path, steps, workdir):
    mlir = os.path.join(workdir, "model.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    exe = parity.compile_model(mlir, os.path.join(workdir, "model"), OPT)
    report = os.path.join(workdir, "report.json")
    p = parity.run_exe(exe, steps=steps, init=init_path, data=data_path, report=report,
                       extra=["--backend", "cuda"], check=False)
    if p.returncode != 0:
        sys.exit(f"gpu_step: the ztrain executable failed with --backend cuda:\n"
                 f"{p.stderr.strip()}")
    r = parity.read_report(report)
    times = [s["time_ms"] for s in r["steps"]][WARMUP:]
    return statistics.median(times), r["steps"][0]["loss"], r["memory"]["peak"]


def torch_status():
    """(torch module or None, why not)."""
    try:
        import torch
    except ImportError as e:
        return None, f"torch is not importable ({e})"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} has no CUDA (torch.cuda.is_available() is False)"
    return torch, ""


def torch_peak(torch, n):
    a = torch.full((n, n), 0.5, device="cuda")
    b = torch.full((n, n), 0.25, device="cuda")
    torch.matmul(a, b)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 10)
    return 2.0 * n ** 3 / best / 1e12


def bench_torch(torch, spec, init, data, steps):
    from ztrain import torch_ref

    model = torch_ref.load_state(torch_ref.from_spec(spec), init).cuda()
    opt = torch_ref.make_optimizer(model.parameters(), OPT.kind, **OPT.torch_kwargs())
    times, first_loss = [], None
    for t in range(1, steps + 1):
        batch = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda()
                 for k, v in parity.batch_for_step(data, t, spec.batch).items()}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(*model.inputs(batch))
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        if first_loss is None:
            first_loss = float(loss.detach())
    return statistics.median(times[WARMUP:]), first_loss, torch.cuda.max_memory_allocated()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--peak-n", type=int, default=8192, help="GEMM size of the peak")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile the model (into $ZTRAIN_COMPILE_CACHE, for a GPU "
                         "machine without the compiler: docs/cuda.md#gpu-kit) and stop")
    args = ap.parse_args(argv)
    if args.steps <= WARMUP:
        ap.error(f"--steps must exceed the {WARMUP} warm-up steps")
    if args.compile_only:
        spec = models.gpt(batch=args.batch, seq=args.seq, vocab=args.vocab,
                          layers=args.layers, width=args.width, heads=args.heads)
        with tempfile.TemporaryDirectory(prefix="ztrain-gpu-step-") as d:
            mlir = os.path.join(d, "model.mlir")
            with open(mlir, "w") as fh:
                fh.write(spec.to_mlir())
            parity.compile_model(mlir, os.path.join(d, "model"), OPT)
        return 0

    gpus, why = cuda_devices()
    if gpus == 0:
        print(f"gpu_step: no CUDA device: {why}.\nThis benchmark needs an NVIDIA GPU "
              "and a build with the cuda backend; see docs/cuda.md.", file=sys.stderr)
        return 2

    cfg = dict(batch=args.batch, seq=args.seq, vocab=args.vocab, layers=args.layers,
               width=args.width, heads=args.heads)
    spec = models.gpt(**cfg)
    flops = model_flops(cfg)
    peak = measure_peak(args.peak_n)
    print(f"device      {peak['device']}")
    print(f"model       gpt L{args.layers} C{args.width} H{args.heads} T{args.seq} "
          f"V{args.vocab} batch {args.batch}: {flops / 1e12:.3f} TFLOP per step")
    print(f"peak        {peak['tflops']:.2f} TFLOP/s float32 sgemm "
          f"({peak['n']}^3, ztrt_cuda_gemm_peak)")
    torch, torch_why = torch_status()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print(f"            {torch_peak(torch, args.peak_n):.2f} TFLOP/s torch.matmul "
              f"float32 (cross-check)")

    results = {"device": peak["device"], "config": cfg, "flops_per_step": flops,
               "peak_tflops": peak["tflops"], "steps": args.steps, "warmup": WARMUP}
    with tempfile.TemporaryDirectory(prefix="ztrain-gpu-step-") as d:
        init = parity.make_init(spec, seed=0)
        data = parity.make_data(spec, samples=args.batch * args.steps, seed=1)
        init_path, data_path = os.path.join(d, "init.safetensors"), os.path.join(d, "data.safetensors")
        safetensors.save(init_path, init)
        safetensors.save(data_path, data)
        rows = []
        ms, loss, mem = bench_ztrain(spec, init_path, data_path, args.steps, d)
        rows.append(("ztrain cuda", ms, loss, mem))
        if torch is not None:
            ms, loss, mem = bench_torch(torch, spec, init, data, args.steps)
            rows.append((f"torch {torch.__version__}", ms, loss, mem))

    tokens = args.batch * args.seq
    print()
    print(f"| {'side':<20} | {'ms/step':>9} | {'tokens/s':>10} | {'TFLOP/s':>8} | "
          f"{'MFU':>6} | {'step-1 loss':>11} | {'peak GiB':>8} |")
    print(f"|{'-' * 22}|{'-' * 11}|{'-' * 12}|{'-' * 10}|{'-' * 8}|{'-' * 13}|{'-' * 10}|")
    for name, ms, loss, mem in rows:
        tflops = flops / (ms * 1e-3) / 1e12
        mfu = tflops / peak["tflops"]
        print(f"| {name:<20} | {ms:9.2f} | {tokens / (ms * 1e-3):10.0f} | {tflops:8.2f} | "
              f"{mfu:6.1%} | {loss:11.6f} | {mem / 2**30:8.2f} |")
        results[name] = {"ms": ms, "tflops": tflops, "mfu": mfu, "first_loss": loss,
                         "peak_bytes": mem}
    if torch is None:
        print(f"\n(torch column left out: {torch_why})")
        results["torch"] = torch_why
    print(f"\nmedian of steps {WARMUP + 1}..{args.steps}; MFU against the measured "
          f"float32 sgemm peak above")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
