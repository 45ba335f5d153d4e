#!/usr/bin/python3
"""Offload: step time of a GPT that fits in memory with its model states
in memory, optimizer states in host memory (cpu: a no-op on the CPU
backend), optimizer states on nvme, and parameters and optimizer states on
nvme (ZeRO-Infinity, stage 3), with the default 3 swap buffers and with 8
(reads 6 uses ahead), and optimizer states streamed in chunks of 256Ki
elements (--sub-group-size), in the same run; with the bytes each moves
per step and the fraction of the swap time hidden behind compute.

Every configuration is one process (--dp=1; stage 3 for the parameter
offload, and its in-memory baseline at stage 3 too), AdamW f32, run
`--steps` steps in `--rounds` interleaved rounds (the disk's speed drifts;
interleaving spreads the drift over all configurations); the step time is
the median of the steps after the first of each round. Swap time: the
bytes each step reads and writes over the read and write bandwidth the swap
engine measures on the same directory at the start of the run
(ztrt_swap_io_bench, 256 MiB, 8 MiB blocks, 8 in flight), since the trace's
io events end when a wait finds a swap done, not when it finished; waited:
the time the step spent blocked in ztrt_swap_wait (the report's
exposed_ms); hidden = 1 - waited / swap time. The peer is the same plan
without offload (ratio column).

A second table runs a smaller GPT with `--backend cuda` on the CUDA
emulator (ztrain-compile --runtime-dir build/lib/cudaemu), offload none /
cpu / nvme: on a device backend `cpu` is ZeRO-Offload's CPU step (the
gradient spilled down as it is made, the host's Adam, the parameter up),
so the table shows the
bytes over the host link per step (the report's host_to_device_bytes and
device_to_host_bytes) against zero-report's, the host memory, and the
host steps per step (how many ran asynchronously, their own time and the
time the step thread waited for them: offload.host_step_ms and
update_wait_ms). The
emulator runs the device's kernels on the CPU, so its step times say
nothing about a GPU's; they are printed for completeness.

Run (after building):  /usr/bin/python3 bench/offload.py [--dir /path/on/nvme]
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ.setdefault("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))

from ztrain import models, parity, safetensors  # noqa: E402

CONFIGS = [  # name, flags, baseline
    ("stage 0", ["--zero-stage=0"], None),
    ("optimizer cpu", ["--zero-stage=0", "--offload-optimizer=cpu"], "stage 0"),
    ("optimizer nvme", ["--zero-stage=0", "--offload-optimizer=nvme"], "stage 0"),
    ("optimizer nvme, 8 bufs", ["--zero-stage=0", "--offload-optimizer=nvme",
                                "--offload-buffer-count=8"], "stage 0"),
    ("optimizer nvme, chunks", ["--zero-stage=0", "--offload-optimizer=nvme",
                                "--sub-group-size=262144"], "stage 0"),
    ("stage 3", ["--zero-stage=3"], None),
    ("optimizer+param nvme", ["--zero-stage=3", "--offload-optimizer=nvme",
                              "--offload-param=nvme"], "stage 3"),
    ("opt+param nvme, 8 bufs", ["--zero-stage=3", "--offload-optimizer=nvme",
                                "--offload-param=nvme", "--offload-buffer-count=8"],
     "stage 3"),
]


EMULATED = [  # name, flags, baseline
    ("none", [], None),
    ("optimizer cpu", ["--offload-optimizer=cpu"], "none"),
    ("optimizer nvme", ["--offload-optimizer=nvme"], "none"),
]


def emulated(args, work, swap):
    """The EMULATED table: --backend cuda on the CUDA emulator."""
    runtime = os.path.join(os.environ["ZTRAIN_BIN_DIR"], "..", "lib", "cudaemu")
    if not os.path.isdir(runtime):
        print("(no emulated table: build/lib/cudaemu is missing)")
        return
    spec = models.gpt(batch=4, seq=64, vocab=256, layers=args.emulated_layers,
                      width=args.emulated_width, heads=args.emulated_width // 64)
    src = os.path.join(work, "gpt-emu.mlir")
    with open(src, "w") as fh:
        fh.write(spec.to_mlir())
    data = os.path.join(work, "data-emu.safetensors")
    safetensors.save(data, parity.make_data(spec, samples=args.steps * spec.batch, seed=2))
    opt = parity.OptimizerConfig("adamw", lr=1e-4)
    exes, plans = {}, {}
    for i, (name, flags, _) in enumerate(EMULATED):
        exes[name] = parity.compile_model(src, os.path.join(work, f"e{i}"), opt,
                                          ["--dp=1", *flags, "--runtime-dir", runtime])
        p = subprocess.run(
            [os.path.join(os.environ["ZTRAIN_BIN_DIR"], "ztrain-opt"), src,
             f"--ztrain-training=optimizer=adamw",
             f"--ztrain-zero=stage=0 dp=1 {' '.join(f[2:] for f in flags)}",
             "--plan-memory", "--zero-report=format=json", "-o", "/dev/null"],
            check=True, stdout=subprocess.PIPE, text=True)
        plans[name] = json.loads(p.stdout)["offload"]["device_backend"]
    times = {name: [] for name, _, _ in EMULATED}
    last = {}
    for _ in range(args.rounds):
        for name, _, _ in EMULATED:
            report = os.path.join(work, "re.json")
            parity.run_exe(exes[name], args.steps, data=data, report=report,
                           threads=args.threads,
                           extra=["--nvme-path", swap, "--backend", "cuda"])
            rep = parity.read_report(report)
            times[name] += [s["time_ms"] for s in rep["steps"]][1:]
            last[name] = rep
    params = sum(math.prod(p.shape) for p in spec.params)
    print()
    print(f"CUDA emulator (--backend cuda): GPT {args.emulated_layers} layers, width "
          f"{args.emulated_width}, {params / 1e6:.2f}M parameters, batch 4 x 64 tokens, "
          f"AdamW f32; step times are the emulator's, not a GPU's")
    print(f"{'configuration':>16} | {'ms/step':>8} {'ratio':>6} | {'H->D MB':>8} "
          f"{'D->H MB':>8} {'= plan':>6} | {'device MB':>9} {'host MB':>8} {'grads MB':>8} "
          f"{'step buf MB':>11} | {'host steps':>10} {'async':>5} {'host ms':>7} "
          f"{'waited ms':>9}")
    for name, _, base in EMULATED:
        rep = last[name]
        ms = statistics.median(times[name])
        ratio = f"{ms / statistics.median(times[base]):5.2f}x" if base else f"{'-':>6}"
        off = rep.get("offload") or {}
        h2d = off.get("host_to_device_bytes", 0) / args.steps
        d2h = off.get("device_to_host_bytes", 0) / args.steps
        plan = plans[name]
        same = "yes" if (h2d, d2h) == (plan["host_to_device_per_step"],
                                       plan["device_to_host_per_step"]) else "NO"
        mem = rep["memory"]
        host = mem["swap_buffers"] + mem["state_swap_buffers"] + \
            mem["host_optimizer_states"] + mem["host_step_buffers"] + mem["host_gradients"]
        print(f"{name:>16} | {ms:8.1f} {ratio} | {h2d / 1e6:8.2f} {d2h / 1e6:8.2f} "
              f"{same:>6} | {mem['device_peak'] / 1e6:9.2f} {host / 1e6:8.2f} "
              f"{mem['host_gradients'] / 1e6:8.2f} {mem['host_step_buffers'] / 1e6:11.2f} | "
              f"{off.get('host_steps', 0) // args.steps:10d} "
              f"{off.get('asynchronous_host_steps', 0) // args.steps:5d} "
              f"{off.get('host_step_ms', 0.0) / args.steps:7.2f} "
              f"{off.get('update_wait_ms', 0.0) / args.steps:9.2f}")


def disk_bandwidth(directory):
    """(write, read) GB/s of the swap engine on `directory`."""
    bench = os.path.join(os.environ["ZTRAIN_BIN_DIR"], "ztrt_swap_io_bench")
    p = subprocess.run([bench, directory, str(256 << 20), str(8 << 20), "8", "4", "1"],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return r["write_gbps"], r["read_gbps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="where the swap directories go (default: the temp dir)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--emulated-layers", type=int, default=2)
    ap.add_argument("--emulated-width", type=int, default=256)
    ap.add_argument("--emulated-only", action="store_true",
                    help="only the CUDA emulator's table")
    args = ap.parse_args()
    spec = models.gpt(batch=8, seq=128, vocab=256, layers=args.layers, width=args.width,
                      heads=args.width // 64)
    with tempfile.TemporaryDirectory() as work, \
            tempfile.TemporaryDirectory(dir=args.dir) as swap:
        if args.emulated_only:
            return emulated(args, work, swap)
        src = os.path.join(work, "gpt.mlir")
        with open(src, "w") as fh:
            fh.write(spec.to_mlir())
        data = os.path.join(work, "data.safetensors")
        safetensors.save(data, parity.make_data(spec, samples=args.steps * spec.batch, seed=2))
        exes = {name: parity.compile_model(src, os.path.join(work, f"m{i}"),
                                           parity.OptimizerConfig("adamw", lr=1e-4),
                                           ["--dp=1", *flags])
                for i, (name, flags, _) in enumerate(CONFIGS)}
        write_gbps, read_gbps = disk_bandwidth(swap)
        times = {name: [] for name, _, _ in CONFIGS}
        last = {}
        for r in range(args.rounds):
            for name, _, _ in CONFIGS:
                report = os.path.join(work, "r.json")
                trace = os.path.join(work, "t.json")
                parity.run_exe(exes[name], args.steps, data=data, report=report,
                               threads=args.threads, extra=["--nvme-path", swap])
                rep = parity.read_report(report)
                times[name] += [s["time_ms"] for s in rep["steps"]][1:]
                last[name] = rep
        print(f"GPT {args.layers} layers, width {args.width}, batch 8 x 128 tokens; "
              f"{args.threads} threads; swap engine on {args.dir}: write {write_gbps:.2f} GB/s, "
              f"read {read_gbps:.2f} GB/s")
        print(f"{'configuration':>22} | {'ms/step':>8} {'ratio':>6} | {'read MB':>8} "
              f"{'write MB':>8} | {'swap ms':>8} {'waited':>7} {'hidden':>6} | "
              f"{'device MB':>9} {'host MB':>8}")
        for name, _, base in CONFIGS:
            rep = last[name]
            ms = statistics.median(times[name])
            ratio = f"{ms / statistics.median(times[base]):5.2f}x" if base else f"{'-':>6}"
            off = rep.get("offload")
            steps = args.steps
            read = off["read_bytes"] / steps / 1e6 if off else 0.0
            write = off["write_bytes"] / steps / 1e6 if off else 0.0
            swap_ms = (read / 1e3 / read_gbps + write / 1e3 / write_gbps) * 1e3 if off else 0.0
            waited = off["exposed_ms"] / steps if off else 0.0
            hidden = f"{100 * max(0.0, 1 - waited / swap_ms):5.0f}%" if off and swap_ms else \
                f"{'-':>6}"
            mem = rep["memory"]
            host = mem["swap_buffers"] + mem["state_swap_buffers"] + \
                mem["host_optimizer_states"]
            print(f"{name:>22} | {ms:8.1f} {ratio} | {read:8.1f} {write:8.1f} | "
                  f"{swap_ms:8.1f} {waited:7.1f} {hidden} | {mem['device_peak'] / 1e6:9.1f} "
                  f"{host / 1e6:8.1f}")
        emulated(args, work, swap)


if __name__ == "__main__":
    main()
