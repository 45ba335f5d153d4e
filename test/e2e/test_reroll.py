"""reroll-call-runs makes loops of long runs of like runtime calls (a wide
layer of adds, a long chain of them, a bucket's copies): the calls and
their order do not change, so what the executable trains must not change
by a bit. Each model is compiled twice, with the loops (the default) and
without (--reroll-min-trips=0), and trained on 2 ranks (4 for the bucket
copies of ZeRO-2): the losses printed and the weights saved are compared
byte for byte."""

import filecmp
import os
import re
import subprocess
import sys

import pytest

import e2e_util

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))

import compile_scaling  # noqa: E402  (the bench's wide and chain shapes)

GPT = os.path.join(ROOT, "examples", "gpt.mlir")
DATA = os.path.join(ROOT, "examples", "data", "genesis-kjv.txt")


def compile_model(src, out, *extra):
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"), src, "-o", out, *extra])
    assert p.returncode == 0, p.stderr
    return out


def train(ranks, exe, *extra):
    run = e2e_util.mpirun(ranks, [exe, "--steps", 3, "--save", f"{exe}.safetensors", *extra])
    losses = [line.split()[:4] for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3, run.stdout
    return losses


def loops_in(tmp_path, src, name, *extra):
    """The loop functions ztrain-compile's LLVM IR defines, and its calls of
    ztrt_add (a loop has one)."""
    ll = compile_model(src, tmp_path / f"{name}.ll", "--emit=llvm", *extra)
    text = open(ll).read()
    return (re.findall(r"define internal void @(ztrain_\w+\.loop\d+)\(", text),
            text.count("call void @ztrt_add("))


@pytest.mark.parametrize("shape", ["wide", "chain", "mixed"])
def test_runs_of_adds_train_bitwise_as_loops(tmp_path, shape):
    src = tmp_path / f"{shape}.mlir"
    src.write_text(compile_scaling.source(shape, 600))
    flags = ["--optimizer=adam", "--dp=2", "--zero-stage=3", "--overlap"]
    loops, adds = loops_in(tmp_path, src, "loops", *flags)
    unrolled, all_adds = loops_in(tmp_path, src, "unrolled", *flags, "--reroll-min-trips=0")
    # The step's and the evaluation's runs of adds are loops: a handful of
    # calls left where there were thousands.
    assert any(name.startswith("ztrain_step.") for name in loops), loops
    assert any(name.startswith("ztrain_eval.") for name in loops), loops
    assert not unrolled and all_adds >= 2 * 600 and adds <= 20, (adds, all_adds)
    with_loops = compile_model(src, tmp_path / "with_loops", *flags)
    without = compile_model(src, tmp_path / "without", *flags, "--reroll-min-trips=0")
    # Bitwise: the same runtime calls run in the same order either way.
    assert train(2, with_loops) == train(2, without)
    assert filecmp.cmp(f"{with_loops}.safetensors", f"{without}.safetensors", shallow=False)


def test_loops_in_parts_train_bitwise(tmp_path):
    # The step cut into functions of 8 ops (the loops, about 20 ops, stay
    # whole) compiled in 11 parts: each table goes with its loop, and the
    # executable has one copy of each.
    src = tmp_path / "wide.mlir"
    src.write_text(compile_scaling.source("wide", 600))
    flags = ["--optimizer=adam", "--dp=2", "--zero-stage=3"]
    parts = compile_model(src, tmp_path / "parts", *flags, "--outline-max-ops=8",
                          "--ops-per-part=20")
    without = compile_model(src, tmp_path / "without", *flags, "--reroll-min-trips=0")
    symbols = subprocess.run(["nm", parts], stdout=subprocess.PIPE, text=True,
                             check=True).stdout.split("\n")
    tables = [line.split()[-1] for line in symbols
              if re.search(r" ztrain_\w+\.table\d+$", line)]
    assert tables and len(tables) == len(set(tables)), tables  # one copy each
    assert train(2, parts) == train(2, without)
    assert filecmp.cmp(f"{parts}.safetensors", f"{without}.safetensors", shallow=False)


def test_bucket_copies_of_zero2_train_bitwise_as_a_loop(tmp_path):
    # ZeRO-2 on 4 ranks packs the example GPT's 36 gradients of a bucket
    # with one ztrt_copy_2d each: a run that becomes a loop.
    flags = ["--optimizer=adamw", "--lr=1e-3", "--dp=4", "--zero-stage=2", "--overlap"]
    loops, _ = loops_in(tmp_path, GPT, "gpt", *flags)
    assert loops, "the bucket's copies were expected to become a loop"
    with_loops = compile_model(GPT, tmp_path / "with_loops", *flags)
    without = compile_model(GPT, tmp_path / "without", *flags, "--reroll-min-trips=0")
    assert train(4, with_loops, "--data", DATA) == train(4, without, "--data", DATA)
    assert filecmp.cmp(f"{with_loops}.safetensors", f"{without}.safetensors", shallow=False)
