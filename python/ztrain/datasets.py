"""Data files for the executables: one tensor per input name, shape [N, ...].

    python -m ztrain.datasets char-lm examples/data/genesis-kjv.txt --seq 64 -o data.safetensors

A character-level language model reads the raw bytes of a text as tokens
(vocab 256): sample i is bytes [i*stride, i*stride + seq) as "tokens" and the
same window shifted by one as "targets", both int32 [N, seq].
"""

import argparse
import sys

import numpy as np

from . import safetensors

__all__ = ["char_lm", "main"]


def char_lm(text_bytes, seq, stride=None):
    """{"tokens", "targets"} int32 [N, seq] from a byte string."""
    buf = np.frombuffer(bytes(text_bytes), dtype=np.uint8).astype(np.int32)
    stride = stride or seq
    if seq <= 0 or stride <= 0:
        raise ValueError("seq and stride must be positive")
    n = (len(buf) - 1 - seq) // stride + 1
    if n <= 0:
        raise ValueError(f"text of {len(buf)} bytes is shorter than seq + 1 = {seq + 1}")
    idx = np.arange(n)[:, None] * stride + np.arange(seq)[None, :]
    return {"tokens": buf[idx], "targets": buf[idx + 1]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ztrain.datasets")
    sub = ap.add_subparsers(dest="kind", required=True)
    c = sub.add_parser("char-lm", help="byte-level LM windows of a text file")
    c.add_argument("text")
    c.add_argument("--seq", type=int, default=64)
    c.add_argument("--stride", type=int, help="default: seq (non-overlapping windows)")
    c.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    with open(a.text, "rb") as fh:
        d = char_lm(fh.read(), a.seq, a.stride)
    safetensors.save(a.output, d)
    print(f"{a.output}: tokens/targets int32 {list(d['tokens'].shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
