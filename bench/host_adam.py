#!/usr/bin/python3
"""Host optimizer step: ztrain's Adam/AdamW kernel (the update offloaded
optimizer states run on the host) against torch.optim.Adam / AdamW on the
CPU, same elements, same thread count, same run; and against the machine's
memory bandwidth.

For each size N, each side steps N f32 parameters (gradient fixed) `--iters`
times after a warm-up and reports the median seconds per step. torch runs
its default (foreach) implementation and, where this torch has one for the
CPU, `fused=True`. The bound: a step reads parameter, gradient and both
moments and writes parameter and moments, 28 bytes per element; the copy
column is numpy copying the same number of bytes (one read and one write
stream, so the same traffic) with torch's copy_ on the same threads, as a
measured bandwidth. ratio
"x torch" is torch's time over ztrain's; "x bound" is ztrain's time over
the copy's (1.0 = the step runs at copy speed). The floor is the step's
arithmetic alone: the time the same threads take for the square root and
the two divisions per element that torch's formula asks for (which the
update reproduces bit for bit, correctly rounded), at the update's vector
width, on operands in L1 (ztrt_host_adam_bench measures it); "x floor" is
ztrain's time over it (1.0 = nothing but those instructions), and "max x"
is torch's time over it: what ztrain's ratio to torch would be if the
update took no more than its divider instructions do. The "sse2 ms" column is
ztrain's kernel with ZTRT_CPU_ISA=baseline (the x86-64 build every machine
runs; the main column uses the AVX-512 build where the processor has it,
bitwise the same results).

Run (after building):  /usr/bin/python3 bench/host_adam.py [--threads 2]
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "build", "bin", "ztrt_host_adam_bench")


def ztrain(n, threads, iters, adamw, isa=None):
    env = dict(os.environ)
    env.pop("ZTRT_CPU_ISA", None)
    if isa:
        env["ZTRT_CPU_ISA"] = isa
    p = subprocess.run([BENCH, str(n), str(threads), str(iters), "1" if adamw else "0"],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out["seconds"], out["floor_seconds"]


def torch_step(torch, n, iters, adamw, **kw):
    p = torch.nn.Parameter(torch.linspace(-0.5, 0.5, n))
    p.grad = torch.linspace(-0.018, 0.018, n)
    cls = torch.optim.AdamW if adamw else torch.optim.Adam
    opt = cls([p], lr=1e-3, weight_decay=0.01 if adamw else 0.0, **kw)
    times = []
    for it in range(iters + 1):
        t0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        if it:
            times.append(t1 - t0)
    times.sort()
    return times[len(times) // 2]


def copy_seconds(torch, n, iters):
    # 28 bytes per element moved: 14 bytes read and 14 written per element;
    # torch's copy_ runs on the same threads.
    elems = 7 * n // 2
    src = torch.ones(elems)
    dst = torch.empty(elems)
    times = []
    for it in range(iters + 1):
        t0 = time.perf_counter()
        dst.copy_(src)
        t1 = time.perf_counter()
        if it:
            times.append(t1 - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 10 << 20, 100 << 20])
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    if not os.path.exists(BENCH):
        sys.exit(f"{BENCH} not built")
    import torch
    torch.set_num_threads(args.threads)
    fused_ok = True
    # Warm torch's thread pool and allocator up once, untimed.
    torch_step(torch, args.sizes[0], 2, False)
    print(f"threads {args.threads}, torch {torch.__version__}; seconds per step (median of "
          f"{args.iters}), 28 bytes per element")
    print(f"{'optimizer':>9} {'elements':>10} | {'ztrain ms':>9} {'GB/s':>6} {'sse2 ms':>8} | {'torch ms':>9} "
          f"{'x torch':>7} | {'fused ms':>9} {'x fused':>7} | {'copy ms':>8} {'x bound':>7} | "
          f"{'floor ms':>8} {'x floor':>7} {'max x':>7}")
    for adamw in (False, True):
        for n in args.sizes:
            z, floor = ztrain(n, args.threads, args.iters, adamw)
            zb, _ = ztrain(n, args.threads, args.iters, adamw, isa="baseline")
            t = torch_step(torch, n, args.iters, adamw)
            f = None
            if fused_ok:
                try:
                    f = torch_step(torch, n, args.iters, adamw, fused=True)
                except (RuntimeError, TypeError):
                    fused_ok = False
            c = copy_seconds(torch, n, args.iters)
            fused = f"{f * 1e3:9.2f} {f / z:6.2f}x" if f else f"{'-':>9} {'-':>7}"
            print(f"{'AdamW' if adamw else 'Adam':>9} {n:>10} | {z * 1e3:9.2f} "
                  f"{28 * n / z / 1e9:6.1f} {zb * 1e3:8.2f} | {t * 1e3:9.2f} {t / z:6.2f}x | {fused} | "
                  f"{c * 1e3:8.2f} {z / c:6.2f}x | {floor * 1e3:8.2f} {z / floor:6.2f}x "
                  f"{t / floor:6.2f}x")


if __name__ == "__main__":
    main()
