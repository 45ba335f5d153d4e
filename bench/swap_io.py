#!/usr/bin/python3
"""Swap I/O throughput: ztrain's offload engine (runtime/io/SwapIO,
io_uring + O_DIRECT) against fio with the same engine, block size, queue
depth and bytes, on the same directory, in one run.

Each configuration writes `--gib` GiB sequentially in blocks of `--block`
over 4 files with `--depth` transfers in flight, then reads them back; fio
runs `--ioengine=io_uring --direct=1` write then read jobs of the same
shape. Both sides report GB/s (10^9 bytes per second). The peer is fio
because it is what DeepSpeed's docs use to size NVMe offload
(`ds_nvme_tune` runs the same kind of sweep).

The engine keeps its queue full as fio does (a transfer goes in as soon as
any one completes: `any`); the `fifo` column waits for the oldest first,
as a training step waits for the tensors of its next use. Each
configuration runs `--repeat` times, the three measurements interleaved
(a virtual disk's speed drifts by up to 2x between runs), and the table
shows the medians; the ratio is ztrain's median (any) over fio's.

Run (after building):  /usr/bin/python3 bench/swap_io.py [--dir /path/on/nvme]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "build", "bin", "ztrt_swap_io_bench")


def ztrain(directory, total, block, depth, order):
    p = subprocess.run([BENCH, directory, str(total), str(block), str(depth), "4", "1", order],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr.strip()


def fio(directory, total, block, depth, rw):
    with tempfile.TemporaryDirectory(dir=directory) as d:
        cmd = ["fio", "--name=swap", f"--directory={d}", "--ioengine=io_uring", "--direct=1",
               f"--rw={rw}", f"--bs={block}", f"--iodepth={depth}", "--numjobs=1",
               "--nrfiles=4", f"--size={total}", "--output-format=json"]
        if rw == "read":  # lay the files out first, untimed
            subprocess.run(cmd[:5] + ["--rw=write"] + cmd[6:], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        job = json.loads(p.stdout)["jobs"][0]
        side = job["write" if rw == "write" else "read"]
        return side["bw_bytes"] / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="a directory on the disk to measure (default: the temp dir)")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--block", type=int, nargs="+", default=[1 << 20, 8 << 20])
    ap.add_argument("--depth", type=int, nargs="+", default=[4, 32])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not os.path.exists(BENCH):
        sys.exit(f"{BENCH} not built")
    if not shutil.which("fio"):
        sys.exit("fio not installed (apt-get install fio)")
    total = int(args.gib * (1 << 30))
    st = os.statvfs(args.dir)
    print(f"{args.dir}: {st.f_bavail * st.f_frsize / 1e9:.0f} GB free; {args.gib:g} GiB "
          f"per run, 4 files, write then read")
    header = (f"{'block':>8} {'depth':>5} {'engine':>13} | {'write':>6} {'fifo':>6} "
              f"{'fio':>6} {'ratio':>6} | {'read':>6} {'fifo':>6} {'fio':>6} {'ratio':>6}")
    print(f"{'':>28} | {'ztrain':>6} {'ztrain':>6} {'':>13} | {'ztrain':>6} {'ztrain':>6}")
    print(header)
    print("-" * len(header))
    warned = set()
    for block in args.block:
        for depth in args.depth:
            runs = {"any": [], "fifo": [], "fio": []}
            for _ in range(args.repeat):
                for order in ("any", "fifo"):
                    z, err = ztrain(args.dir, total, block, depth, order)
                    if err and err not in warned:
                        warned.add(err)
                        print(f"  ({err})")
                    runs[order].append((z["write_gbps"], z["read_gbps"]))
                    engine = z["engine"] + ("" if z["direct"] else "/cached")
                runs["fio"].append((fio(args.dir, total, block, depth, "write"),
                                    fio(args.dir, total, block, depth, "read")))
            med = {k: (statistics.median(w for w, _ in v), statistics.median(r for _, r in v))
                   for k, v in runs.items()}
            (aw, ar), (qw, qr), (fw, fr) = med["any"], med["fifo"], med["fio"]
            print(f"{block >> 10:>6}Ki {depth:>5} {engine:>13} | {aw:>6.2f} {qw:>6.2f} "
                  f"{fw:>6.2f} {aw / fw:>5.2f}x | {ar:>6.2f} {qr:>6.2f} {fr:>6.2f} "
                  f"{ar / fr:>5.2f}x")
    print(f"GB/s = 10^9 bytes/s, medians of {args.repeat} interleaved runs; "
          "ratio = ztrain (any) / fio (1.00x: the engine adds nothing).")


if __name__ == "__main__":
    main()
