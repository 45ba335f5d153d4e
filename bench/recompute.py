#!/usr/bin/python3
"""Activation checkpointing: activation memory and step time of
--recompute=none / selective / full on GPT models of 4-12 layers, measured,
against zero-report's prediction, and PyTorch's torch.utils.checkpoint on the
same model in the same run.

ztrain: each policy is compiled (AdamW, f32) and run for `--steps` steps;
the activation bytes are the executable's measured allocation in the
`activations` category (its report's memory.activations), next to
zero-report's prediction for the same flags; the step time is the median of
the report's time_ms after a warm-up.

PyTorch: ztrain.torch_ref's GPT with the same weights and batches, plain and
with torch.utils.checkpoint(use_reentrant=False) around every block (full
recompute per block, as `--recompute=full` with the builders' marks). Its
activation bytes are what autograd saves for the backward pass (the unique
storages packed through torch.autograd.graph.saved_tensors_hooks, parameters
left out), the number PyTorch users compare when they turn checkpointing on;
ztrain's number is its whole activation arena (saved values plus the
backward pass's temporaries), so compare each side's ratios, not bytes
across sides. Step time: zero_grad + forward + backward + AdamW step.

Both sides run with the same thread count on the same OpenBLAS (OpenMP
threading, OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = T; torch in a child
process with that OpenBLAS on LD_LIBRARY_PATH).

Run (after building):  /usr/bin/python3 bench/recompute.py [--layers 4 8 12]
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

OPT = parity.OptimizerConfig("adamw", lr=1e-4)
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
POLICIES = ("none", "selective", "full")


def spec_for(layers, args):
    return models.gpt(batch=args.batch, seq=args.seq, vocab=256, layers=layers,
                      width=args.width, heads=args.heads)


def predicted_activations(mlir, policy):
    opt = parity.tool("ztrain-opt")
    p = subprocess.run([opt, mlir, f"--ztrain-training=optimizer=adamw recompute={policy}",
                        "--ztrain-zero", "--plan-memory", "--zero-report=format=json",
                        "-o", "/dev/null"], check=True, stdout=subprocess.PIPE, text=True)
    r = json.loads(p.stdout)
    work = (r["flops_per_step"] + r["recompute"]["flops_per_step"],
            r["kernel_bytes_per_step"] + r["recompute"]["kernel_bytes_per_step"])
    return (r["per_rank"]["activations"], r["flops_per_step"], r["recompute"]["flops_per_step"],
            work)


def bench_ztrain(spec, args, tmp):
    """{policy: result}; the policies run in turn, `--rounds` times, and each
    keeps its least disturbed round (the smallest median): on a shared
    2-core machine a policy measured alone in a slow minute looks slower
    than it is."""
    mlir = os.path.join(tmp, "model.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    init = os.path.join(tmp, "init.safetensors")
    data = os.path.join(tmp, "data.safetensors")
    exes = {p: parity.compile_model(mlir, os.path.join(tmp, f"model-{p}"), OPT,
                                    [f"--recompute={p}"]) for p in POLICIES}
    out = {}
    for _ in range(args.rounds):
        for policy, exe in exes.items():
            report = os.path.join(tmp, f"report-{policy}.json")
            parity.run_exe(exe, steps=args.steps, init=init, data=data, report=report,
                           threads=args.threads)
            rep = parity.read_report(report)
            ms = statistics.median([s["time_ms"] for s in rep["steps"]][args.warmup:])
            if policy not in out:
                predicted, flops, again, work = predicted_activations(mlir, policy)
                out[policy] = {"measured": rep["memory"]["activations"],
                               "predicted": predicted, "ms": ms, "flops": flops,
                               "recompute_flops": again, "work": work}
            out[policy]["ms"] = min(out[policy]["ms"], ms)
    return out


def bench_torch(layers, args):
    """Runs in the child: {policy: {"saved": bytes, "ms": median}}."""
    import torch
    from torch.utils.checkpoint import checkpoint
    from ztrain import torch_ref

    torch.set_num_threads(args.threads)
    spec = spec_for(layers, args)
    init = parity.make_init(spec, seed=0)
    data = parity.make_data(spec, samples=args.steps * spec.batch, seed=1)
    out = {}
    for policy in ("none", "full") * args.rounds:
        model = torch_ref.load_state(torch_ref.from_spec(spec), init)
        if policy == "full":
            for block in model.h:
                block.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=False))(
                    block.forward)
        params = {p.storage().data_ptr() for p in model.parameters()}
        opt = torch_ref.make_optimizer(model.parameters(), OPT.kind, **OPT.torch_kwargs())
        times, saved = [], 0
        for t in range(1, args.steps + 1):
            batch = {k: torch.from_numpy(np.ascontiguousarray(v))
                     for k, v in parity.batch_for_step(data, t, spec.batch).items()}
            storages = {}

            def pack(x):
                s = x.storage()
                if s.data_ptr() not in params:
                    storages[s.data_ptr()] = s.size() * s.element_size()
                return x

            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
                loss = model(*model.inputs(batch))
            # With checkpointing, the forward saves only the blocks' inputs;
            # what the recomputation saves again is freed block by block.
            saved = sum(storages.values())
            loss.backward()
            opt.step()
            times.append((time.perf_counter() - start) * 1e3)
        ms = statistics.median(times[args.warmup:])
        if policy in out:
            ms = min(ms, out[policy]["ms"])
        out[policy] = {"saved": saved, "ms": ms}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[4, 8, 12])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each policy, in turn; the fastest round counts")
    ap.add_argument("--child-torch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_torch is not None:
        print(json.dumps(bench_torch(args.child_torch, args)))
        return
    threads = str(args.threads)
    os.environ.update(OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads)

    rows = []
    for layers in args.layers:
        spec = spec_for(layers, args)
        z = {}
        with tempfile.TemporaryDirectory() as tmp:
            safetensors.save(os.path.join(tmp, "init.safetensors"),
                             parity.make_init(spec, seed=0))
            safetensors.save(os.path.join(tmp, "data.safetensors"),
                             parity.make_data(spec, samples=args.steps * spec.batch, seed=1))
            z = bench_ztrain(spec, args, tmp)
        env = dict(os.environ, LD_LIBRARY_PATH=OPENBLAS_OPENMP)
        cmd = [sys.executable, os.path.abspath(__file__), "--child-torch", str(layers)]
        for flag in ("batch", "seq", "width", "heads", "threads", "steps", "warmup", "rounds"):
            cmd += [f"--{flag}", str(getattr(args, flag))]
        t = json.loads(subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE,
                                      text=True).stdout)
        for policy in POLICIES:
            r = z[policy]
            peer = t.get(policy)
            rows.append((layers, policy, r, z["none"], peer, t["none"]))

    mib = lambda b: b / 2**20  # noqa: E731
    print(f"GPT width {args.width}, {args.heads} heads, seq {args.seq}, batch {args.batch}, "
          f"vocab 256, f32 AdamW; {args.threads} threads; step time: the smallest of "
          f"{args.rounds} interleaved rounds' medians over {args.steps - args.warmup} steps")
    header = (f"{'L':>3} {'policy':10} {'act MiB':>9} {'predicted':>9} {'of none':>8} "
              f"{'ms/step':>8} {'overhead':>8} {'+FLOPs':>7} | {'torch saved MiB':>15} "
              f"{'of none':>8} {'torch ms':>9} {'overhead':>8}")
    print(header)
    print("-" * len(header))
    for layers, policy, r, base, peer, peer_base in rows:
        line = (f"{layers:>3} {policy:10} {mib(r['measured']):>9.1f} "
                f"{mib(r['predicted']):>9.1f} {r['measured'] / base['measured']:>7.1%} "
                f"{r['ms']:>8.1f} {r['ms'] / base['ms'] - 1:>+8.1%} "
                f"{r['recompute_flops'] / r['flops']:>+7.1%} |")
        if peer:
            line += (f" {mib(peer['saved']):>15.1f} {peer['saved'] / peer_base['saved']:>7.1%} "
                     f"{peer['ms']:>9.1f} {peer['ms'] / peer_base['ms'] - 1:>+8.1%}")
        else:
            line += f" {'-':>15} {'-':>8} {'-':>9} {'-':>8}"
        print(line)
    # The plan search's compute model, fitted to these measurements: step
    # time = matmul FLOPs / R + other kernels' bytes / B (least squares).
    work = np.array([r["work"] for _, _, r, _, _, _ in rows], dtype=np.float64)
    ms = np.array([r["ms"] for _, _, r, _, _, _ in rows]) / 1e3
    (inv_r, inv_b), *_ = np.linalg.lstsq(work, ms, rcond=None)
    fit = work @ np.array([inv_r, inv_b])
    print(f"\nplan-search cost model fitted to the rows above: --device-tflops="
          f"{1 / inv_r / 1e12:.3f} --memory-gbps={1 / inv_b / 1e9:.2f}")
    print(f"{'L':>3} {'policy':10} {'ms/step':>8} {'model ms':>9} {'error':>7}")
    for (layers, policy, r, _, _, _), f in zip(rows, fit):
        print(f"{layers:>3} {policy:10} {r['ms']:>8.1f} {f * 1e3:>9.1f} "
              f"{f * 1e3 / r['ms'] - 1:>+7.1%}")
    print("act MiB: the executable's measured activation allocation; predicted: zero-report's;\n"
          "overhead: step time over the same side's no-recompute step; +FLOPs: recomputed\n"
          "matmul FLOPs over the model's. torch: torch.utils.checkpoint per block ('full'),\n"
          "saved = bytes autograd keeps for backward (a different measure from ztrain's\n"
          "arena: compare ratios). PyTorch has no built-in selective policy.")


if __name__ == "__main__":
    main()
