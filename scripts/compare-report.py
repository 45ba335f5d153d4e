#!/usr/bin/env python3
"""Prints zero-report's prediction beside what a run measured.

usage: compare-report.py PREDICTED.json MEASURED.json
PREDICTED is `ztrain-opt ... --zero-report=format=json`, MEASURED the
executable's --report. Standard library only.
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip())
    with open(sys.argv[1]) as fh:
        plan = json.load(fh)
    with open(sys.argv[2]) as fh:
        run = json.load(fh)
    steps = len(run["steps"])
    ranks = run["ranks"]
    predicted = plan["per_rank"]
    per_kind = {}
    for c in plan["collectives"]:
        per_kind[c["kind"]] = per_kind.get(c["kind"], 0) + c["bytes"]

    print(f"ZeRO stage {plan['stage']} on {plan['world_size']} ranks; per rank, "
          f"measured on every rank (max shown)")
    print(f"  {'':34}{'predicted':>14}{'measured':>14}")

    def row(what, want, got):
        print(f"  {what:34}{want:>14,}{got:>14,}")

    row("parameters (bytes)", predicted["parameters"],
        max(r["memory"]["parameters"] for r in ranks))
    row("gradients (bytes)", predicted["gradients"],
        max(r["memory"]["gradients"] for r in ranks))
    row("optimizer states (bytes)", predicted["optimizer_states"],
        max(r["memory"]["optimizer_states"] for r in ranks))
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        row(f"{kind} (bytes/step)", per_kind.get(kind, 0),
            max(r["communication"][kind]["bytes"] for r in ranks) // steps)
    row("peak memory (bytes)", predicted["predicted_peak"],
        max(r["memory"]["peak"] for r in ranks))
    if "overlap" in ranks[0]:
        hidden = min(r["overlap"]["hidden_fraction"] for r in ranks)
        print(f"  communication hidden behind compute (min over ranks): {hidden:.0%}")


if __name__ == "__main__":
    main()
