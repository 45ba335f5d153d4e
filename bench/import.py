#!/usr/bin/python3
"""How long the PyTorch importer and the compile of what it wrote take.

For nanoGPT-style GPTs (test/e2e/import_models/nanogpt_style.py, GPT-2's
shapes at the largest size: 12 layers, width 768, 12 heads, vocabulary 50304,
124M parameters) it measures, in one run on this machine:

- build: constructing the nn.Module in PyTorch (its own init), for scale;
- import: `ztrain.importer.import_module` (capture with make_fx + lowering);
- write: the .mlir and the --init safetensors of all the weights;
- compile: `ztrain-compile` of the imported IR (AdamW, one process), the
  whole pipeline down to the linked executable.

The budget it is held to (issue 42): import under 10 s and compile under
60 s for the 124M model.

Run (after building):  /usr/bin/python3 bench/import.py [--sizes small gpt2]
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402

from ztrain.importer import import_module  # noqa: E402

SIZES = {
    # name: (layers, width, heads, vocab, block, batch, seq)
    "small": (2, 128, 4, 256, 64, 8, 64),
    "gpt2-6l": (6, 768, 12, 50304, 1024, 8, 64),
    "gpt2": (12, 768, 12, 50304, 1024, 8, 64),
}


def load_gpt():
    path = os.path.join(REPO, "test", "e2e", "import_models", "nanogpt_style.py")
    spec = importlib.util.spec_from_file_location("nanogpt_style", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["small", "gpt2"], choices=list(SIZES))
    ap.add_argument("--compiler", default=os.path.join(REPO, "build", "bin", "ztrain-compile"))
    args = ap.parse_args()
    m = load_gpt()
    rows = []
    for name in args.sizes:
        L, C, H, V, blk, B, T = SIZES[name]
        t0 = time.perf_counter()
        torch.manual_seed(0)
        model = m.GPT(m.GPTConfig(block_size=blk, vocab_size=V, n_layer=L, n_head=H,
                                  n_embd=C, dropout=0.0, bias=True))
        t1 = time.perf_counter()
        ex = {"idx": torch.zeros(B, T, dtype=torch.long),
              "targets": torch.zeros(B, T, dtype=torch.long)}
        imp = import_module(model, ex)
        t2 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            mlir, init = os.path.join(d, "m.mlir"), os.path.join(d, "m.safetensors")
            imp.write(mlir, init)
            t3 = time.perf_counter()
            p = subprocess.run([args.compiler, mlir, "-o", os.path.join(d, "m"),
                                "--optimizer=adamw"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            t4 = time.perf_counter()
            if p.returncode != 0:
                sys.exit(f"ztrain-compile failed:\n{p.stderr}")
        rows.append((name, f"{L}x{C}, V={V}", imp.num_params, t1 - t0, t2 - t1, t3 - t2,
                     t4 - t3))
    print(f"{'model':<8} {'shape':<16} {'params':>12} {'build s':>8} {'import s':>9} "
          f"{'write s':>8} {'compile s':>10}")
    for r in rows:
        print(f"{r[0]:<8} {r[1]:<16} {r[2]:>12,} {r[3]:>8.2f} {r[4]:>9.2f} {r[5]:>8.2f} "
              f"{r[6]:>10.2f}")


if __name__ == "__main__":
    main()
