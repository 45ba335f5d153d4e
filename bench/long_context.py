#!/usr/bin/python3
"""Long context: what the tiled head + loss (ztrain-compile --loss-tile-bytes,
train-tile-loss) does to a Llama-shaped model's memory, predicted and
measured side by side in one run on this machine.

The model: Llama (RMSNorm, SwiGLU, rotary, grouped-query attention, tied
embeddings) scaled to this machine (2 layers, width 64, 4 heads, 2 KV
heads) with a 32,000-token vocabulary, batch 1. For each sequence length:

- the activation arena plan-memory plans (zero-report's prediction) with the
  loss whole and tiled, alone and with --recompute=full, and for the lengths
  that run here in seconds the measured device peak of 3 steps (the run's
  report: it equals the prediction to the byte) and the step-time ratio;
- then, for a fixed per-rank budget, the longest sequence whose predicted
  peak fits, whole and tiled.

Run (after building):  /usr/bin/python3 bench/long_context.py [--threads 2]
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
os.environ.setdefault("ZTRAIN_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))
BIN = os.environ["ZTRAIN_BIN_DIR"]

from ztrain import models, parity, safetensors  # noqa: E402

VOCAB = 32000
TILE = 16 << 20  # at most 16 MiB of logits per tile (--tile-mib)
OPT = parity.OptimizerConfig("adamw", lr=1e-4)


def spec_for(seq):
    # Fused attention (FlashAttention-style: no [heads, T, T] scores kept),
    # as anyone training long sequences uses.
    return models.llama(batch=1, seq=seq, vocab=VOCAB, layers=2, width=64, heads=4,
                        kv_heads=2, attention="fused")


def predicted(mlir, tiled, recompute):
    """zero-report's per-rank prediction: (activations, peak) in bytes."""
    training = f"optimizer=adamw recompute={recompute}"
    if tiled:
        training += f" loss-tile-bytes={TILE}"
    p = subprocess.run([os.path.join(BIN, "ztrain-opt"), mlir,
                        f"--ztrain-training={training}", "--ztrain-zero", "--plan-memory",
                        "--zero-report=format=json", "-o", os.devnull],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    per_rank = json.loads(p.stdout)["per_rank"]
    return per_rank["activations"], per_rank["predicted_peak"]


def measured(mlir, spec, tiled, threads, steps, tmp):
    """The run's device peak and median step time (ms), steps 2.. of `steps`."""
    name = "tiled" if tiled else "whole"
    flags = [f"--loss-tile-bytes={TILE}"] if tiled else []
    exe = parity.compile_model(mlir, os.path.join(tmp, name), OPT, flags)
    data = os.path.join(tmp, "data.safetensors")
    if not os.path.exists(data):
        safetensors.save(data, parity.make_data(spec, samples=2, seed=1))
    report = os.path.join(tmp, f"{name}.json")
    parity.run_exe(exe, steps=steps, data=data, report=report, threads=threads)
    r = parity.read_report(report)
    times = [s["time_ms"] for s in r["steps"]][1:]
    return r["ranks"][0]["memory"]["device_peak"], statistics.median(times)


def mib(b):
    return f"{b / 2**20:9.1f}"


def main():
    global TILE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seqs", type=int, nargs="+",
                    default=[512, 1024, 2048, 4096, 8192, 16384, 32768, 65536])
    ap.add_argument("--run-up-to", type=int, default=2048,
                    help="measure runs for sequences up to this length")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--budget-mib", type=int, default=512)
    ap.add_argument("--tile-mib", type=int, default=TILE >> 20)
    args = ap.parse_args()
    TILE = args.tile_mib << 20
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    print(f"Llama L2 C64 H4/2 V{VOCAB} batch 1; --loss-tile-bytes={TILE}; "
          f"threads {args.threads}; MiB")
    print(f"{'seq':>6} {'logits':>9} | {'act whole':>9} {'tiled':>9} {'ratio':>6} | "
          f"{'+recompute':>10} {'tiled':>9} | {'peak whole':>10} {'measured':>9} "
          f"{'tiled':>9} {'measured':>9} | {'step x':>6}")
    fits = {}
    for seq in args.seqs:
        spec = spec_for(seq)
        with tempfile.TemporaryDirectory() as tmp:
            mlir = os.path.join(tmp, "model.mlir")
            with open(mlir, "w") as fh:
                fh.write(spec.to_mlir())
            pred = {(t, r): predicted(mlir, t, r)
                    for t in (False, True) for r in ("none", "full")}
            for key, (_, peak) in pred.items():
                if peak <= args.budget_mib << 20:
                    fits[key] = max(fits.get(key, 0), seq)
            mw = mt = ratio = ""
            if seq <= args.run_up_to:
                (pw, tw), (pt, tt) = (measured(mlir, spec, t, args.threads, args.steps, tmp)
                                      for t in (False, True))
                assert pw == pred[(False, "none")][1] and pt == pred[(True, "none")][1], \
                    "a measured peak differs from zero-report's"
                mw, mt, ratio = mib(pw), mib(pt), f"{tt / tw:5.2f}x"
            aw, at = pred[(False, "none")][0], pred[(True, "none")][0]
            print(f"{seq:6} {mib(seq * VOCAB * 4)} | {mib(aw)} {mib(at)} {aw / at:5.1f}x | "
                  f"{mib(pred[(False, 'full')][0]):>10} {mib(pred[(True, 'full')][0])} | "
                  f"{mib(pred[(False, 'none')][1]):>10} {mw:>9} "
                  f"{mib(pred[(True, 'none')][1])} {mt:>9} | {ratio:>6}", flush=True)
    print(f"longest sequence whose predicted peak fits {args.budget_mib} MiB "
          f"(of the lengths above):")
    for (t, r), seq in sorted(fits.items()):
        print(f"  loss {'tiled' if t else 'whole'}, recompute {r}: {seq}")


if __name__ == "__main__":
    main()
