#!/usr/bin/python3
"""Past one node (issue 47): flat ZeRO-3 against hybrid sharding (HSDP) on
two hosts with a slow link between them, measured in one run.

The hosts are Linux network namespaces on this machine (python/ztrain/
netns.py, as test_multihost.py builds them): 2 hosts x 2 ranks, shared
memory inside a host, TCP over a veth link between them whose rate a token
bucket (tc tbf) limits. The link's rate is a tenth of what the collectives
achieve through shared memory on one host, measured first in this run
(flat ZeRO-3 with synchronous collectives on 4 ranks of one host: the wire
bytes rank 0 hands MPI over its communication time), unless --rate sets
it.

Each configuration compiles the same GPT with `--dp 4 --zero-stage 3
--overlap` (bucketed, overlapped collectives: what a multi-node job uses):
  flat      one group of 4 ranks (`--ranks-per-node 2` for the link
            accounting only)
  hsdp      `--dp-replicate 2`: states sharded over the 2 ranks of a host,
            replicated across the 2 hosts
  hpz       `--zero-hpz-partition-size 2` (ZeRO++'s hpZ): flat ZeRO-3 whose
            backward gathers stay in the host
and runs `--steps` steps with `--ranks-per-node 2` on the two hosts. Printed
per configuration: the median step time after the warm-up (max over ranks
per step), zero-report's predicted inter-node bytes per step and rank, the
runtime's measured ones (they must be equal), the bytes that crossed host
1's link per step (tc's counters: payload plus TCP/IP and Open MPI's
framing), and the step time relative to flat.

Needs root (network namespaces); 2 cores run 4 ranks oversubscribed.

Run (after building):  /usr/bin/python3 bench/scale_out.py [--steps 8]
  [--warmup 2] [--layers 4] [--width 256] [--rate 800mbit]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from ztrain import models, netns, parity, safetensors  # noqa: E402

OPT = parity.OptimizerConfig("adamw", lr=1e-4)
CONFIGS = [
    ("flat", ["--ranks-per-node", "2"], "ranks-per-node=2"),
    ("hsdp", ["--dp-replicate", "2"], "dp-replicate=2"),
    ("hpz", ["--zero-hpz-partition-size", "2"], "hpz-partition-size=2"),
]


def zero_report(mlir, zero):
    p = subprocess.run([parity.tool("ztrain-opt"), mlir, "--ztrain-training=optimizer=adamw",
                        f"--ztrain-zero=stage=3 dp=4 overlap=true {zero}", "--plan-memory",
                        "--zero-report=format=json", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return json.loads(p.stdout)


def step_ms(report, warmup):
    ranks = report["ranks"]
    steps = len(ranks[0]["time_ms"])
    return statistics.median(max(r["time_ms"][i] for r in ranks) for i in range(warmup, steps))


def inter_node(report):
    return max(sum(c["inter_node_wire_bytes"] for c in r["communication"].values())
               for r in report["ranks"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--rate", default=None, help="tc rate of each host's link (default: "
                    "a tenth of the measured shared-memory collective throughput)")
    args = ap.parse_args()
    ok, why = netns.available()
    if not ok:
        raise SystemExit(f"bench/scale_out.py: virtual hosts unavailable: {why}")

    work = tempfile.mkdtemp(prefix="ztrain-scale-out-")
    spec = models.gpt(batch=2, seq=64, vocab=256, layers=args.layers, width=args.width,
                      heads=4)
    mlir = os.path.join(work, "model.mlir")
    with open(mlir, "w") as fh:
        fh.write(spec.to_mlir())
    safetensors.save(os.path.join(work, "init.safetensors"), parity.make_init(spec, seed=1))
    safetensors.save(os.path.join(work, "data.safetensors"),
                     parity.make_data(spec, samples=64, seed=2))
    exes = {name: parity.compile_model(mlir, os.path.join(work, name), OPT,
                                       ["--dp", "4", "--zero-stage", "3", "--overlap"] + flags)
            for name, flags, _ in CONFIGS}
    # The shared-memory probe: flat ZeRO-3 with synchronous collectives, so
    # that its communication time is the collectives' own.
    exes["probe"] = parity.compile_model(mlir, os.path.join(work, "probe"), OPT,
                                         ["--dp", "4", "--zero-stage", "3"])

    def run_args(name):
        report = os.path.join(work, f"{name}.json")
        return report, [exes[name], "--steps", args.steps, "--threads", "1",
                        "--ranks-per-node", "2", "--report", report,
                        "--init", os.path.join(work, "init.safetensors"),
                        "--data", os.path.join(work, "data.safetensors")]

    # Shared memory on one host: the collectives' throughput sets the rate.
    report, cmd = run_args("probe")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(["mpirun", "--oversubscribe", "-np", "4", "--bind-to", "none"] +
                   [str(c) for c in cmd], check=True, env=env, stdout=subprocess.DEVNULL)
    one_host = parity.read_report(report)
    r0 = one_host["ranks"][0]
    wire = sum(c["wire_bytes"] for c in r0["communication"].values())
    comm_s = r0["overlap"]["comm_ms"] / 1e3
    shm_bits = 8 * wire / comm_s if comm_s > 0 else 0
    rate = args.rate or f"{max(1, int(shm_bits / 10 / 1e6))}mbit"
    elements = zero_report(mlir, "ranks-per-node=2")["parameters"]["elements"]
    print(f"model: GPT L{args.layers} C{args.width} T64 V256, {elements:,} parameters; "
          f"4 ranks, ZeRO-3, {args.steps} steps ({args.warmup} warm-up)")
    print(f"one host (shared memory): {wire / 1e6:.1f} MB wire per rank in "
          f"{comm_s * 1e3:.0f} ms of collectives = {shm_bits / 1e9:.2f} Gbit/s; "
          f"link between hosts: {rate}" + ("" if args.rate else " (a tenth)"))

    rows = []
    with netns.VirtualCluster(hosts=2, rate=rate) as cluster:
        for name, _, zero in CONFIGS:
            report, cmd = run_args(name)
            rx0, tx0 = cluster.link_bytes(1)
            p = cluster.mpirun(2, cmd, mpi_args=["--bind-to", "none"])
            rx1, tx1 = cluster.link_bytes(1)
            if p.returncode != 0:
                raise SystemExit(f"{name} failed:\n{p.stdout}\n{p.stderr}")
            rep = parity.read_report(report)
            predicted = zero_report(mlir, zero)["links"]["inter_node_wire_bytes"]
            rows.append((name, step_ms(rep, args.warmup), predicted, inter_node(rep) / args.steps,
                         (rx1 - rx0 + tx1 - tx0) / 2 / args.steps))
    flat_ms = rows[0][1]
    print(f"{'config':<8}{'step ms':>10}{'inter-node B/step':>20}{'measured':>12}"
          f"{'host 1 link B/step':>20}{'vs flat':>9}")
    for name, ms, predicted, measured, link in rows:
        print(f"{name:<8}{ms:>10.1f}{predicted:>20,}{int(measured):>12,}{int(link):>20,}"
              f"{flat_ms / ms:>8.2f}x")
    for name, _, predicted, measured, _ in rows:
        if predicted != measured:
            raise SystemExit(f"{name}: measured inter-node bytes {measured} != predicted "
                             f"{predicted}")


if __name__ == "__main__":
    main()
