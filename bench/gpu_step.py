#!/usr/bin/python3
"""A GPT-style training step on one GPU: ztrain's cuda backend against the
same model in PyTorch on the same GPU, in one run.

What it measures, in this order:

  peak    the GPU's GEMM peak in the step's precision, measured:
          `ztrt_cuda_gemm_peak` (built with the cuda backend) times an
          N x N x N GEMM on random operands through the backend's own matmul
          (fp32: cuBLAS sgemm, TF32 off; bf16: cublasGemmEx, bf16 operands,
          float accumulation), best of 5. With torch on CUDA, torch.matmul's
          peak in the same type (TF32 off) is printed beside it.
  ztrain  the model compiled by ztrain-compile (AdamW; bf16:
          `--precision=bf16`, 16-bit parameters, gradients and reductions,
          f32 masters and moments), run at world size 1 with
          `--backend cuda`; the step time is the report's time_ms (the
          executable synchronizes the GPU at the end of every step), the
          median over the steps after the warm-up. --attention (default
          both): a row for the composed model and one ("ztrain cuda
          fused") for attention="fused", one train.attention op per layer
          (docs/design.md, "Fused attention"); the profile is of the last.
  torch   ztrain.torch_ref's module of the same model on the same GPU, the
          same initial weights and batches, torch.optim.AdamW; fp32 with TF32
          off, or bf16 as PyTorch users run it: torch.autocast(bfloat16)
          around the forward pass, f32 parameters (the same GEMM precision,
          not the same memory policy); zero_grad + forward + backward + step,
          timed with perf_counter around a torch.cuda.synchronize(); the same
          median. Left out, saying why, when torch has no CUDA. A second
          row, "torch + sdpa", runs the same module with its attention
          replaced by F.scaled_dot_product_attention (causal): PyTorch's
          fused attention, the bar for ztrain's fused row; a third, "torch
          + sdpa flash" (bf16) or "mem-efficient" (fp32), the same with
          PyTorch held to that one kernel (torch.nn.attention.sdpa_kernel).
  profile (--profile) the ztrain executable's kernels for two steps under
          Nsight Compute (one metric, gpu__time_duration; --clock-control
          none, so the clocks are left as found): each kernel's launches and
          device time, largest first, and the device time against the
          steps' wall time (what is left is launch gaps and host waits).

Both sides report achieved TFLOP/s = model FLOPs per step / step time, and
MFU = achieved / measured peak. Model FLOPs count the GEMMs as executed:
per layer 24 B T C^2 (q, k, v, output projection and the 4C MLP) plus
4 B T^2 C (scores and attention-weighted values; the causal half is not
skipped by either side), plus 2 B T C V for the tied output embedding; the
backward pass is twice the forward (two GEMMs per forward GEMM), so a step
is 3x. Elementwise work is not counted (the usual convention).

The default model is GPT-2 small's shape (12 layers, width 768, 12 heads,
1024 positions; vocabulary 50304, GPT-2's 50257 padded to a multiple of
64 as nanoGPT does: 124M parameters) at batch 8.

The first step's loss is printed for both sides as a sanity check (same
weights, same batch).

Run on a machine with an NVIDIA GPU, after building with CUDA
(docs/cuda.md):

  /usr/bin/python3 bench/gpu_step.py [--precision fp32|bf16] [--layers 12
      --width 768 --heads 12 --seq 1024 --vocab 50304 --batch 8]
      [--steps 20] [--json out.json] [--profile]

Without a GPU it exits with status 2 and says why.
"""

import argparse
import csv
import glob
import io
import json
import os
import shutil
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


PEAK_DTYPE = {"fp32": "f32", "bf16": "bf16"}


def compile_flags(precision):
    return [] if precision == "fp32" else [f"--precision={precision}"]


def measure_peak(n, precision):
    exe = os.path.join(parity.bin_dir(), "ztrt_cuda_gemm_peak")
    if not os.access(exe, os.X_OK):
        sys.exit(f"gpu_step: {exe} not found: build the project with the CUDA "
                 "toolkit and NCCL present (CMake prints 'ztrt: cuda backend: ...')")
    p = subprocess.run([exe, str(n), "10", PEAK_DTYPE[precision]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"gpu_step: {exe} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def compile_ztrain(spec, precision, workdir, name="model"):
    mlir = os.path.join(workdir, f"{name}.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    return parity.compile_model(mlir, os.path.join(workdir, name), OPT,
                                extra=compile_flags(precision))


def attention_kinds(choice):
    return ("composed", "fused") if choice == "both" else (choice,)


def bench_ztrain(exe, init_path, data_path, steps, workdir):
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


def torch_peak(torch, n, precision):
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.rand((n, n), device="cuda", generator=g).mul_(2).sub_(1).to(dtype)
    b = torch.rand((n, n), device="cuda", generator=g).mul_(2).sub_(1).to(dtype)
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


def use_sdpa(torch, model):
    """Gives each attention module of torch_ref's GPT PyTorch's fused
    attention (F.scaled_dot_product_attention, causal; FlashAttention or
    cuDNN's kernels on an H100) in place of its composed softmax: the peer a
    PyTorch user would write today, and the one fused attention in ztrain
    must be measured against (docs/cuda.md). The same function, up to the
    kernels' summation order."""
    import types
    import torch.nn.functional as F
    from ztrain import torch_ref

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads

        def split(t):  # [B,T,C] -> [B,H,T,D]
            return t.reshape(B, T, H, C // H).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.drop_out(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))

    for m in model.modules():
        if isinstance(m, torch_ref.Attention):
            m.forward = types.MethodType(forward, m)
    return model


def sdpa_backend(torch, precision):
    """The one SDPA kernel PyTorch is held to for the pinned sdpa row, as
    (name, context factory), or None where this torch cannot pin one:
    FlashAttention-2 in bf16, the memory-efficient kernel in fp32 (flash
    has no fp32). Left to itself PyTorch chooses per call among flash,
    cuDNN and memory-efficient kernels, and the unpinned row moved between
    32.8 and 51.8 ms across five H100 machines (docs/cuda.md); the pinned
    row names what it measured."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    if precision == "fp32":
        return "mem-efficient", lambda: sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])
    return "flash", lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def bench_torch(torch, spec, init, data, steps, precision, sdpa=False, pin=None):
    """Median step ms, first loss and peak bytes of torch_ref's module in
    `precision`; `sdpa`: with F.scaled_dot_product_attention, under `pin`
    (a context factory from sdpa_backend) when given."""
    import contextlib
    from ztrain import torch_ref

    def autocast():
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)

    kernel = pin if pin is not None else contextlib.nullcontext

    # This row's own peak: the previous row's model is gone by now, and the
    # peak counter starts again (without the reset the second torch row
    # reported the first one's peak).
    import gc
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = torch_ref.load_state(torch_ref.from_spec(spec), init).cuda()
    if sdpa:
        use_sdpa(torch, model)
    opt = torch_ref.make_optimizer(model.parameters(), OPT.kind, **OPT.torch_kwargs())
    times, first_loss = [], None
    for t in range(1, steps + 1):
        batch = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda()
                 for k, v in parity.batch_for_step(data, t, spec.batch).items()}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with kernel():  # (the backward's kernels too)
            with autocast():
                loss = model(*model.inputs(batch))
            loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        if first_loss is None:
            first_loss = float(loss.detach())
    return statistics.median(times[WARMUP:]), first_loss, torch.cuda.max_memory_allocated()


def find_ncu():
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
                    "/usr/local/cuda/nsight-compute*/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
      "s": 1e9, "second": 1e9}


def run_ncu(ncu_args, exe_args, log, timeout, timeout_hint=""):
    """Nsight Compute with `ncu_args` (its report to `log`) over the
    executable's command `exe_args`: the log's text, or (None, why not)."""
    ncu = find_ncu()
    if ncu is None:
        return None, "Nsight Compute (ncu) not found"
    cmd = [ncu, "--clock-control", "none", "--print-kernel-base", "function",
           "--log-file", log] + ncu_args + exe_args
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"ncu took longer than {timeout} s{timeout_hint}"
    if p.returncode != 0 or not os.path.exists(log):
        return None, f"ncu failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-400:]}"
    with open(log) as fh:
        return fh.read(), None


def profile_ztrain(exe, init_path, data_path, workdir, steps=2, timeout=120):
    """Kernels of `steps` steps under Nsight Compute: [(name, launches, ns)],
    largest first, and the steps' wall time from the report (ms); or a
    string saying why not."""
    report = os.path.join(workdir, "profile-report.json")
    text, why = run_ncu(["--csv", "--metrics", "gpu__time_duration.sum"],
                        [exe, "--backend", "cuda", "--steps", str(steps), "--init", init_path,
                         "--data", data_path, "--report", report],
                        os.path.join(workdir, "ncu.csv"), timeout, " (--profile-timeout)")
    if text is None:
        return why
    start = text.find('"ID"')
    if start < 0:
        return f"ncu wrote no kernel rows: {text[-400:]}"
    kernels = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        ns = value * NS.get(row.get("Metric Unit", "ns").strip(), 1.0)
        name = row["Kernel Name"]
        launches, total = kernels.get(name, (0, 0.0))
        kernels[name] = (launches + 1, total + ns)
    wall = sum(s["time_ms"] for s in parity.read_report(report)["steps"])
    rows = sorted(((n, c, t) for n, (c, t) in kernels.items()), key=lambda r: -r[2])
    return rows, wall


DETAIL_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats",
                   "MemoryWorkloadAnalysis_Tables")


def detail_ztrain(exe, init_path, data_path, workdir, kernel, timeout=120):
    """Nsight Compute's sections (DETAIL_SECTIONS) for the first launch of
    `kernel` (a function name) in one step: its text report, or why not."""
    args = ["-k", f"regex:{kernel}", "--launch-count", "1"]
    for section in DETAIL_SECTIONS:
        args += ["--section", section]
    text, why = run_ncu(args, [exe, "--backend", "cuda", "--steps", "1", "--init", init_path,
                               "--data", data_path],
                        os.path.join(workdir, f"ncu-{kernel}.txt"), timeout)
    return why if text is None else text.strip()


def print_profile(prof, steps=2):
    if isinstance(prof, str):
        print(f"\nprofile: {prof}")
        return {"profile": prof}
    rows, wall = prof
    total = sum(t for _, _, t in rows)
    if not rows or total <= 0:
        print("\nprofile: ncu reported no kernel time")
        return {"profile": "no kernel time"}
    print(f"\nprofile: ztrain's kernels over {steps} steps under ncu (one launch at a time): "
          f"{sum(c for _, c, _ in rows)} launches, {total / 1e6:.1f} ms of device time")
    print(f"| {'kernel':<60} | {'launches':>8} | {'ms':>9} | {'share':>6} |")
    print(f"|{'-' * 62}|{'-' * 10}|{'-' * 11}|{'-' * 8}|")
    for name, count, ns in rows[:20]:
        print(f"| {name[:60]:<60} | {count:8d} | {ns / 1e6:9.2f} | {ns / total:6.1%} |")
    rest = rows[20:]
    if rest:
        ns = sum(t for _, _, t in rest)
        print(f"| {f'({len(rest)} others)':<60} | {sum(c for _, c, _ in rest):8d} | "
              f"{ns / 1e6:9.2f} | {ns / total:6.1%} |")
    print(f"(the steps' wall time under ncu was {wall:.1f} ms: ncu serializes and "
          f"replays each launch)")
    return {"profile": [{"kernel": n, "launches": c, "ns": t} for n, c, t in rows],
            "profile_wall_ms": wall}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--peak-n", type=int, default=8192, help="GEMM size of the peak")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="fp32, or bf16 (ztrain-compile --precision=bf16; torch autocast)")
    ap.add_argument("--attention", choices=["composed", "fused", "both"], default="both",
                    help="ztrain's model: composed attention, one fused train.attention "
                         "op per layer, or a row for each (default)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--profile", action="store_true",
                    help="also time ztrain's kernels under Nsight Compute (ncu)")
    ap.add_argument("--profile-timeout", type=int, default=120,
                    help="seconds ncu may take (default 120)")
    ap.add_argument("--profile-detail", default="",
                    help="comma-separated kernel names: Nsight Compute's speed-of-light, "
                         "occupancy, warp-state and memory sections for the first launch "
                         "of each (of the last model: the fused one by default)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile the model (into $ZTRAIN_COMPILE_CACHE, for a GPU "
                         "machine without the compiler: docs/cuda.md#gpu-kit) and stop")
    args = ap.parse_args(argv)
    if args.steps <= WARMUP:
        ap.error(f"--steps must exceed the {WARMUP} warm-up steps")
    if args.compile_only:
        for kind in attention_kinds(args.attention):
            spec = models.gpt(batch=args.batch, seq=args.seq, vocab=args.vocab,
                              layers=args.layers, width=args.width, heads=args.heads,
                              attention=kind)
            with tempfile.TemporaryDirectory(prefix="ztrain-gpu-step-") as d:
                compile_ztrain(spec, args.precision, d, name=f"model-{kind}")
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
    peak = measure_peak(args.peak_n, args.precision)
    peak_kind = "float32 sgemm" if args.precision == "fp32" else "bf16 GEMM, f32 accumulation"
    print(f"device      {peak['device']}")
    print(f"model       gpt L{args.layers} C{args.width} H{args.heads} T{args.seq} "
          f"V{args.vocab} batch {args.batch}, {args.precision}: "
          f"{flops / 1e12:.3f} TFLOP per step")
    print(f"peak        {peak['tflops']:.2f} TFLOP/s {peak_kind} "
          f"({peak['n']}^3, random operands, ztrt_cuda_gemm_peak)")
    torch, torch_why = torch_status()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print(f"            {torch_peak(torch, args.peak_n, args.precision):.2f} TFLOP/s "
              f"torch.matmul {args.precision} (cross-check)")

    results = {"device": peak["device"], "precision": args.precision, "config": cfg,
               "flops_per_step": flops,
               "peak_tflops": peak["tflops"], "steps": args.steps, "warmup": WARMUP}
    with tempfile.TemporaryDirectory(prefix="ztrain-gpu-step-") as d:
        init = parity.make_init(spec, seed=0)
        data = parity.make_data(spec, samples=args.batch * args.steps, seed=1)
        init_path, data_path = os.path.join(d, "init.safetensors"), os.path.join(d, "data.safetensors")
        safetensors.save(init_path, init)
        safetensors.save(data_path, data)
        rows = []
        for kind in attention_kinds(args.attention):
            # The same parameters (names, shapes, values) either way.
            exe = compile_ztrain(models.gpt(**cfg, attention=kind), args.precision, d,
                                 name=f"model-{kind}")
            ms, loss, mem = bench_ztrain(exe, init_path, data_path, args.steps, d)
            rows.append(("ztrain cuda" + (" fused" if kind == "fused" else ""), ms, loss,
                         mem))
            if kind == "fused" and args.precision != "fp32":
                # The attention kernels with the softmax in registers
                # (mma.sync; ZTRT_CUDA_ATTENTION_KERNEL=mma), the same
                # executable.
                os.environ["ZTRT_CUDA_ATTENTION_KERNEL"] = "mma"
                try:
                    ms, loss, mem = bench_ztrain(exe, init_path, data_path, args.steps, d)
                finally:
                    del os.environ["ZTRT_CUDA_ATTENTION_KERNEL"]
                rows.append(("ztrain cuda fused, mma kernels", ms, loss, mem))
        if torch is not None:
            ms, loss, mem = bench_torch(torch, spec, init, data, args.steps, args.precision)
            rows.append((f"torch {torch.__version__}", ms, loss, mem))
            # PyTorch's fused attention: the bar for ztrain's fused row.
            if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
                ms, loss, mem = bench_torch(torch, spec, init, data, args.steps,
                                            args.precision, sdpa=True)
                rows.append(("torch + sdpa", ms, loss, mem))
                pinned = sdpa_backend(torch, args.precision)
                if pinned is not None:
                    name, pin = pinned
                    ms, loss, mem = bench_torch(torch, spec, init, data, args.steps,
                                                args.precision, sdpa=True, pin=pin)
                    rows.append((f"torch + sdpa {name}", ms, loss, mem))
        print_results(args, rows, flops, peak, peak_kind, torch, torch_why, results)
        # The profile last, after the results are printed and saved: a
        # profile cut short (ncu can take minutes) loses nothing measured.
        if args.profile:
            results.update(print_profile(profile_ztrain(exe, init_path, data_path, d,
                                                        timeout=args.profile_timeout)))
        for kernel in filter(None, args.profile_detail.split(",")):
            print(f"\ndetail: {kernel}\n"
                  f"{detail_ztrain(exe, init_path, data_path, d, kernel)}", flush=True)
        if args.profile or args.profile_detail:
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(results, fh, indent=2)
    return 0


def print_results(args, rows, flops, peak, kind, torch, torch_why, results):
    """The table of rows (side, ms/step, first loss, peak bytes), into
    `results` and --json too."""
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
          f"{kind} peak above", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())
