#!/usr/bin/python3
"""Data-parallel training steps: ztrain ZeRO stages 0-3 vs PyTorch DDP and
DDP + ZeroRedundancyOptimizer, N ranks on this machine, measured in one run.

For each model (a GPT from ztrain.models.gpt; optionally an MLP) and each N,
ztrain compiles the model with `--dp N --zero-stage S --optimizer=adamw` for
S = 0..3 and runs it with `ztrain-run --np N` (Open MPI, loopback/shared
memory). PyTorch runs the same nn.Module (ztrain.torch_ref), the same initial
weights and the same per-rank batches in N processes joined by
torch.distributed (gloo backend, CPU, MASTER_ADDR 127.0.0.1), wrapped in
DistributedDataParallel, with torch.optim.AdamW (replicated states, the
peer of stage 0) or torch.distributed.optim.ZeroRedundancyOptimizer over
AdamW (optimizer states sharded by parameter: the peer of stage 1).

Both sides: the model's batch is the per-rank micro-batch B; rank r of step
t trains on global rows ((t-1)*N*B + r*B + b) mod samples (the executable's
data semantics, docs/runtime.md "Data"), so N ranks together see exactly
what one process with batch N*B would.

Threads: every rank is a process with OPENBLAS_NUM_THREADS =
OMP_NUM_THREADS = 1 (ztrain also gets --threads 1, torch
torch.set_num_threads(1)); torch loads the same OpenBLAS build ztrain links
(the OpenMP one, via LD_LIBRARY_PATH). No process is pinned to a core
(ztrain-run gets --bind-to none, which Open MPI would otherwise apply at
N <= 2 only). N = 4 on a 2-core machine oversubscribes both sides equally.

Time: the per-step time of each rank (ztrain: the report's time_ms, the
`ztrain_step` call; torch: perf_counter around zero_grad + forward + backward
+ optimizer step, which includes DDP's gradient all-reduce and ZeRO's
parameter broadcasts), the max over ranks per step (the step is done when
its slowest rank is), then the median over the steps after the warm-up.
Neither side synchronises the ranks between steps beyond what the step
itself does; both exchange the loss outside the timed region. Each
configuration runs --rounds times (alternating order); the fastest run is
shown with the spread. The machine may be shared (other sessions' builds
make steps 2-12x slower on 2 cores): before each run the program waits for
an idle CPU, measures the CPU others used during the run ('other') and
repeats a run where that was >= 10%.

Memory, per rank, max over ranks (MiB = 2^20 bytes):
  alloc peak  ztrain: the runtime allocator's peak of live tensor bytes
              (parameters, gradients, optimizer states, activations,
              inputs). torch: the C heap in use (glibc mallinfo2: arena +
              mmapped chunks), sampled after forward, after backward and
              after the optimizer step of the warm-up steps, minus the heap
              in use before the model was built: a lower bound of torch's
              tensor peak (samples, not a high-water mark) that also counts
              non-tensor heap growth (gloo/DDP buffers, autograd graph).
  predicted   zero-report's predicted per-rank peak (ztrain only).
  P+O         parameters + optimizer states held at rest after the last
              step (ztrain: report; torch: bytes of the rank's parameter
              tensors and of its optimizer's state tensors).
  max RSS     the process's high-water resident set (ztrain: GNU time's %M
              around each rank; torch: getrusage ru_maxrss): everything,
              including code, the MPI / Python / torch libraries and BLAS
              buffers.

Run (after building):  /usr/bin/python3 bench/zero_stages.py [--models gpt mlp]
  [--np 2 4] [--stages 0 1 2 3] [--steps 25] [--warmup 5] [--rounds 2]
(ZTRAIN_BIN_DIR picks the tools, default build/bin; ~3.5 min on 2 cores.)
"""

import argparse
import json
import os
import resource
import shutil
import socket
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

MODELS = {
    "gpt": ("gpt L4 C256 H8 T64 b4/rank",
            lambda b: models.gpt(batch=b, seq=64, vocab=256, layers=4, width=256, heads=8)),
    "mlp": ("mlp 784-1024-1024-10 b32/rank",
            lambda b: models.mlp(batch=b, in_features=784, hidden=[1024, 1024], classes=10)),
}
MICRO = {"gpt": 4, "mlp": 32}
OPT = parity.OptimizerConfig("adamw", lr=1e-4)
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
MiB = float(1 << 20)


def pinned_env(extra=None):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.update(extra or {})
    return env


def uptime():
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


class ForeignCpu:
    """CPU time used on this machine by anything but this program and its
    children during a run, as a share of the machine (all cores): the noise
    indicator of each row. Busy = /proc/stat user+nice+system+irq+softirq
    +steal; ours = getrusage of this process and its waited-for children
    (mpirun and the ranks it reaps, the torch ranks)."""

    def __enter__(self):
        self.start = self._snap()
        return self

    def __exit__(self, *exc):
        end = self._snap()
        hz = os.sysconf("SC_CLK_TCK")
        wall = end[0] - self.start[0]
        busy = (end[1] - self.start[1]) / hz
        ours = end[2] - self.start[2]
        self.share = max(0.0, busy - ours) / (wall * os.cpu_count())
        return False

    @staticmethod
    def _snap():
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:9]]
        busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
        ours = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            u = resource.getrusage(who)
            ours += u.ru_utime + u.ru_stime
        return time.monotonic(), busy, ours


WAITED = [0.0]
RERUNS = [0]
NOISY = 0.10   # share of the cores used by other processes that makes a run noisy


def wait_quiet(limit, threshold=NOISY):
    """Wait (at most `limit` s) until the rest of the machine uses < threshold
    of the cores over half a second: other processes (a build next door)
    change the step times by 2-3x on 2 cores."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        with ForeignCpu() as f:
            time.sleep(0.5)
        if f.share < threshold:
            break
    WAITED[0] += time.monotonic() - start


# -- ztrain ----------------------------------------------------------------------------

def zero_report(mlir, stage, n):
    p = subprocess.run([parity.tool("ztrain-opt"), mlir, f"--ztrain-training=optimizer={OPT.kind}",
                        f"--ztrain-zero=stage={stage} dp={n}", "--plan-memory", "--zero-report=format=json",
                        "-o", "/dev/null"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=True)
    return json.loads(p.stdout)


def run_ztrain(work, tag, n, stage, steps, warmup):
    mlir = os.path.join(work, "model.mlir")
    exe = parity.compile_model(mlir, os.path.join(work, f"{tag}_np{n}_z{stage}"), OPT,
                               ["--dp", str(n), "--zero-stage", str(stage)])
    report = os.path.join(work, f"{tag}_np{n}_z{stage}.json")
    rssdir = tempfile.mkdtemp(dir=work)
    # Each rank under GNU time, for its max RSS (rank from Open MPI's env).
    wrapper = os.path.join(work, "rank_rss.sh")
    with open(wrapper, "w") as fh:
        fh.write('#!/bin/sh\nexec /usr/bin/time -f %M -o "$ZB_RSSDIR/rss.$OMPI_COMM_WORLD_RANK" '
                 '"$@"\n')
    os.chmod(wrapper, 0o755)
    cmd = [parity.tool("ztrain-run"), "--np", str(n), "--mpi-arg=--bind-to", "--mpi-arg=none",
           wrapper, exe, "--steps", str(steps), "--threads", "1", "--report", report,
           "--data", os.path.join(work, "data.safetensors"),
           "--init", os.path.join(work, "init.safetensors")]
    with ForeignCpu() as foreign:
        p = subprocess.run(cmd, env=pinned_env({"ZB_RSSDIR": rssdir}), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    rep = parity.read_report(report)
    ranks = rep["ranks"]
    assert len(ranks) == n
    per_step = [max(r["time_ms"][i] for r in ranks) for i in range(steps)]
    rss = []
    for r in range(n):
        with open(os.path.join(rssdir, f"rss.{r}")) as fh:
            rss.append(int(fh.read().split()[-1]) * 1024)
    mem = [r["memory"] for r in ranks]
    plan = zero_report(mlir, stage, n)
    comm = {k: max(r["communication"][k]["bytes"] for r in ranks) // steps
            for k in ("all_reduce", "reduce_scatter", "all_gather", "broadcast")}
    return {
        "ms": statistics.median(per_step[warmup:]),
        "ms_rank0": statistics.median(ranks[0]["time_ms"][warmup:]),
        "loss": rep["steps"][-1]["loss"],
        "alloc_peak": max(m["peak"] for m in mem),
        "states": max(m["parameters"] + m["optimizer_states"] for m in mem),
        "mem_max": {k: max(m[k] for m in mem) for k in ("parameters", "optimizer_states")},
        "grad_peak": max(m["peak_by_category"]["gradients"] for m in mem),
        "act_peak": max(m["peak_by_category"]["activations"] for m in mem),
        "rss": max(rss),
        "plan": plan,
        "comm": sum(comm.values()),
        "foreign": foreign.share,
    }


# -- torch -------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(work, model, n, mode, steps, warmup):
    port = free_port()
    env = pinned_env({"LD_LIBRARY_PATH": OPENBLAS_OPENMP, "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port)})
    foreign = ForeignCpu().__enter__()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--torch-rank", str(r),
                               "--world", str(n), "--mode", mode, "--work", work,
                               "--models", model, "--steps", str(steps),
                               "--warmup", str(warmup)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode != 0:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            raise RuntimeError(f"torch rank ({mode}, N={n}) failed:\n{err}")
        outs.append(json.loads(out))
    foreign.__exit__(None, None, None)
    per_step = [max(o["time_ms"][i] for o in outs) for i in range(steps)]
    return {
        "ms": statistics.median(per_step[warmup:]),
        "ms_rank0": statistics.median(outs[0]["time_ms"][warmup:]),
        "loss": outs[0]["loss"],
        "alloc_peak": max(o["heap_peak"] for o in outs),
        "states": max(o["states"] for o in outs),
        "rss": max(o["maxrss"] for o in outs),
        "rss_pre": max(o["rss_pre"] for o in outs),
        "version": outs[0]["version"],
        "blas": outs[0]["blas"],
        "foreign": foreign.share,
    }


def torch_rank(args):
    """One torch rank (a child process; env set by run_torch)."""
    import ctypes

    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ztrain import torch_ref

    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                   "usmblks", "fsmblks", "uordblks", "fordblks",
                                                   "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def heap():
        m = libc.mallinfo2()
        return m.uordblks + m.hblkhd

    def rss_now():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    r, n = args.torch_rank, args.world
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=r, world_size=n)
    _, make = MODELS[args.models[0]]
    spec = make(MICRO[args.models[0]])
    init = safetensors.load(os.path.join(args.work, "init.safetensors"))
    data = safetensors.load(os.path.join(args.work, "data.safetensors"))
    batches = []
    for t in range(1, args.steps + 1):
        rows = parity.batch_for_step(data, t, n * spec.batch)
        batches.append({k: torch.from_numpy(np.ascontiguousarray(v[r * spec.batch:
                                                                   (r + 1) * spec.batch]))
                        for k, v in rows.items()})
    rss_pre = rss_now()
    heap0 = heap()
    model = torch_ref.load_state(torch_ref.from_spec(spec), init)
    ddp = DDP(model)
    kw = dict(lr=OPT.lr, betas=(OPT.beta1, OPT.beta2), eps=OPT.eps, weight_decay=OPT.weight_decay)
    if args.mode == "ddp":
        opt = torch.optim.AdamW(ddp.parameters(), **kw)
    else:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, **kw)
    times, peak = [], 0
    loss_mean = None
    for t in range(args.steps):
        sample = t < args.warmup
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(*model.inputs(batches[t]))
        if sample:
            peak = max(peak, heap())
        loss.backward()
        if sample:
            peak = max(peak, heap())
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
        if sample:
            peak = max(peak, heap())
        loss_mean = loss.detach().clone()
        dist.all_reduce(loss_mean)   # outside the timer, like ztrain's mean loss
    inner = opt.optim if args.mode == "zero" else opt
    states = sum(p.numel() * p.element_size() for p in model.parameters())
    for st in inner.state.values():
        states += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v))
    with open("/proc/self/maps") as fh:
        blas = sorted({os.path.realpath(line.split()[-1]) for line in fh
                       if "blas" in line and "/" in line})
    print(json.dumps({
        "time_ms": times, "loss": float(loss_mean) / n, "heap_peak": peak - heap0,
        "states": states, "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_pre": rss_pre, "version": torch.__version__, "blas": ", ".join(blas)}))
    dist.destroy_process_group()


# -- driver -------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["gpt", "mlp"])
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs of every config; the table shows the fastest (default 2)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quiet-wait", type=float, default=20,
                    help="before each run, wait up to this many seconds for other processes "
                         "to leave the CPU idle (default 20)")
    ap.add_argument("--retries", type=int, default=2,
                    help="repeat a run during which other processes used >= 10%% of the CPU, "
                         "at most this many times (default 2)")
    ap.add_argument("--torch-rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=["ddp", "zero"], help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_rank is not None:
        torch_rank(args)
        return

    t0 = time.time()
    load_before = uptime()
    rows, plan_rows, info = [], [], {}
    work_root = tempfile.mkdtemp(prefix="zero_stages.")
    try:
        for key in args.models:
            title, make = MODELS[key]
            spec = make(MICRO[key])
            nparams = sum(int(np.prod(p.shape)) for p in spec.params)
            work = os.path.join(work_root, key)
            os.makedirs(work)
            with open(os.path.join(work, "model.mlir"), "w") as fh:
                fh.write(spec.to_mlir())
            safetensors.save(os.path.join(work, "init.safetensors"), parity.make_init(spec, seed=0))
            # 4 global batches at the largest N; later steps wrap around.
            safetensors.save(os.path.join(work, "data.safetensors"),
                             parity.make_data(spec, samples=4 * max(args.np) * spec.batch, seed=1))
            for n in args.np:
                configs = [("torch DDP", "ddp"), ("torch DDP+ZeRO-1", "zero")] + \
                    [(f"ztrain stage {st}", st) for st in args.stages]
                runs = {label: [] for label, _ in configs}
                for rnd in range(args.rounds):
                    # Every config once per round, the order reversed on odd rounds,
                    # so that slow drift in the machine's load spreads over all.
                    for label, what in (configs if rnd % 2 == 0 else configs[::-1]):
                        for attempt in range(1 + args.retries):
                            wait_quiet(args.quiet_wait)
                            if isinstance(what, str):
                                r = run_torch(work, key, n, what, args.steps, args.warmup)
                                info["torch"] = (r["version"], r["blas"])
                            else:
                                r = run_ztrain(work, key, n, what, args.steps, args.warmup)
                            runs[label].append(r)
                            # A run that shared the CPU with other processes is
                            # repeated (all runs stay candidates for the fastest).
                            if r["foreign"] < NOISY:
                                break
                            RERUNS[0] += 1
                res = {}
                for label, rs in runs.items():
                    best = min(rs, key=lambda r: r["ms"])
                    best["worst_ms"] = max(r["ms"] for r in rs)
                    res[label] = best
                base = res["torch DDP"]["ms"]
                for label, r in res.items():
                    rows.append((title, nparams, label, n, r, base))
                    if "plan" in r:
                        plan_rows.append((title, label, n, r))
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    load_after = uptime()

    print(f"torch {info['torch'][0]} (gloo), Open MPI, {os.cpu_count()} cores; "
          f"AdamW steps, 1 thread per rank, ranks unpinned")
    print(f"  torch BLAS: {info['torch'][1]}")
    print(f"  load average before {load_before}, after {load_after}; "
          f"{args.steps - args.warmup} timed steps after {args.warmup} warm-up, "
          f"{args.rounds} rounds;\n  waited {WAITED[0]:.0f} s in all for other processes to "
          f"leave the CPU, {RERUNS[0]} runs repeated for noise (see 'other')")
    hdr = (f"{'config':18} {'N':>2} {'ms/step':>8} {'vs DDP':>7} {'r0 ms':>7} {'spread':>6} "
           f"{'other':>5} {'loss@K':>8} "
           f"{'alloc pk':>9} {'predicted':>9} {'P+O':>7} {'max RSS':>8}")
    current = None
    for title, nparams, label, n, r, base in rows:
        if title != current:
            current = title
            print(f"\n{title}, {nparams} params (MiB per rank, max over ranks)")
            print(hdr)
            print("-" * len(hdr))
        pred = r["plan"]["per_rank"]["predicted_peak"] / MiB if "plan" in r else None
        alloc = r["alloc_peak"] / MiB
        print(f"{label:18} {n:>2} {r['ms']:>8.2f} {base / r['ms']:>6.2f}x {r['ms_rank0']:>7.2f} "
              f"{(r['worst_ms'] / r['ms'] - 1) * 100:>5.0f}% {r['foreign'] * 100:>4.0f}% "
              f"{r['loss']:>8.5f} {alloc:>8.1f}{'' if pred else '*'} "
              f"{(f'{pred:.1f}' if pred else '-'):>9} {r['states'] / MiB:>7.1f} "
              f"{r['rss'] / MiB:>8.1f}")
    print("\nms/step: median over steps of the max over ranks, the fastest of the runs;\n"
          "vs DDP = torch DDP ms / this ms (> 1: faster than DDP at the same N); r0 ms: rank\n"
          "0's own median; spread: slowest run / fastest - 1; other: CPU used by other\n"
          "processes during the shown run, % of all cores (noise indicator). loss@K: mean\n"
          "loss over ranks at the last step (same weights, same data: should agree).\n"
          "alloc pk: ztrain's allocator peak (tensor bytes); * torch: C-heap growth since\n"
          "before the model was built, sampled at phase boundaries (a lower bound, not the\n"
          "same metric). predicted: zero-report's per-rank peak. P+O: parameters + optimizer\n"
          "states at rest. max RSS: whole process (torch: Python + torch libraries\n"
          f"included; its RSS before building the model was "
          f"{min(r['rss_pre'] for *_, r, _ in rows if 'rss_pre' in r) / MiB:.0f}-"
          f"{max(r['rss_pre'] for *_, r, _ in rows if 'rss_pre' in r) / MiB:.0f} MiB).")

    print("\nzero-report prediction vs ztrain measurement (MiB per rank; comm MiB per step)")
    h2 = (f"{'model':30} {'stage':>5} {'N':>2} | {'params':>6} {'grads':>6} {'optst':>6} "
          f"{'activ':>6} {'peak':>6} {'comm':>6} | {'params':>6} {'grads':>6} {'optst':>6} "
          f"{'activ':>6} {'peak':>6} {'comm':>6}")
    print(f"{'':42}| {'predicted (zero-report)':^41} | {'measured (report, max over ranks)':^41}")
    print(h2)
    print("-" * len(h2))
    for title, label, n, r in plan_rows:
        p = r["plan"]["per_rank"]
        m = r["mem_max"]
        print(f"{title:30} {label[-1]:>5} {n:>2} | {p['parameters'] / MiB:>6.2f} "
              f"{p['gradients'] / MiB:>6.2f} {p['optimizer_states'] / MiB:>6.2f} "
              f"{p['activations'] / MiB:>6.2f} {p['predicted_peak'] / MiB:>6.2f} "
              f"{r['plan']['communication_bytes_per_step'] / MiB:>6.2f} | "
              f"{m['parameters'] / MiB:>6.2f} {r['grad_peak'] / MiB:>6.2f} "
              f"{m['optimizer_states'] / MiB:>6.2f} {r['act_peak'] / MiB:>6.2f} "
              f"{r['alloc_peak'] / MiB:>6.2f} {r['comm'] / MiB:>6.2f}")
    print("measured: params / optst at rest, grads / activ = the allocator's peak of that\n"
          "category, peak = peak of the total, comm = bus bytes per step (all kinds).")
    print(f"(whole run {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
