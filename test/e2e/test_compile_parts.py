"""A large model's code is compiled in parts: outline-long-functions cuts
the step into bounded functions, and ztrain-compile translates and
compiles groups of them on --jobs threads into objects linked together
(docs/design.md, "Compile time"). The hidden flags --outline-max-ops and
--ops-per-part make the small example GPT take that path (a few ops per
part, 16 parts); what it trains must not change by a bit, and the
executable must not depend on the number of threads."""

import filecmp
import os
import subprocess

import e2e_util

HERE = os.path.dirname(os.path.abspath(__file__))
GPT = os.path.join(HERE, "..", "..", "examples", "gpt.mlir")
DATA = os.path.join(HERE, "..", "..", "examples", "data", "genesis-kjv.txt")
PARTS = ["--outline-max-ops=3", "--ops-per-part=200"]


def compile_gpt(tmp_path, name, *extra):
    out = tmp_path / name
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"), GPT, "-o", out, "--dp=2",
                      "--zero-stage=3", "--optimizer=adamw", "--lr=1e-3", *extra])
    assert p.returncode == 0, p.stderr
    return out, p


def test_parts_train_bitwise_as_the_whole_step(tmp_path):
    whole, _ = compile_gpt(tmp_path, "whole")
    parts, p = compile_gpt(tmp_path, "parts", *PARTS, "--jobs=2", "--mlir-timing")
    assert "translate and generate code (16 parts)" in p.stderr
    one_thread, _ = compile_gpt(tmp_path, "one_thread", *PARTS, "--jobs=1")
    # The executable is the same whatever the number of threads.
    assert filecmp.cmp(parts, one_thread, shallow=False)
    assert not filecmp.cmp(parts, whole, shallow=False)  # the parts path was taken
    losses = {}
    for exe in (whole, parts):
        run = e2e_util.mpirun(2, [exe, "--steps", 3, "--data", DATA, "--save",
                                  f"{exe}.safetensors"])
        losses[exe] = [line.split()[:4] for line in run.stdout.splitlines()
                       if line.startswith("step ")]
    # Bitwise: the same runtime calls run in the same order either way.
    assert losses[whole] == losses[parts] and len(losses[whole]) == 3
    assert filecmp.cmp(f"{whole}.safetensors", f"{parts}.safetensors", shallow=False)


def test_parts_make_one_relocatable_object(tmp_path):
    obj, _ = compile_gpt(tmp_path, "gpt.o", "--emit=obj", *PARTS)
    with open(obj, "rb") as fh:
        header = fh.read(18)
    assert header[:4] == b"\x7fELF" and header[16] == 1  # ET_REL: a partial link
    symbols = subprocess.run(["nm", obj], stdout=subprocess.PIPE, text=True,
                             check=True).stdout.split("\n")
    defined = {line.split()[-1] for line in symbols if " T " in line or " t " in line}
    assert {"ztrain_step", "ztrain_eval", "ztrain_step.part0"} <= defined
    assert sorted(os.listdir(tmp_path)) == ["gpt.o"]  # no temporaries left


def test_dump_ir_dir_writes_each_parts_llvm_ir(tmp_path):
    dump = tmp_path / "ir"
    compile_gpt(tmp_path, "gpt", *PARTS, "--dump-ir-dir", dump)
    names = os.listdir(dump)
    llvm = sorted(n for n in names if "-llvm-ir" in n)
    assert len(llvm) == 16, llvm
    assert any(n.endswith("-llvm-ir.ll") for n in llvm)
    assert any(n.endswith("-llvm-ir.part15.ll") for n in llvm)
    assert any(n.endswith("-outline-long-functions.mlir") for n in names)
