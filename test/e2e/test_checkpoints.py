"""Sharded checkpoints of a compiled model (ZeRO stage 3, dp=2, Adam):
--save-checkpoint writes one file per rank plus index.json, ztrain-consolidate
turns them into the full weights that --save writes and PyTorch loads,
--resume continues bitwise where the run stopped, and a checkpoint of another
rank count or a damaged shard is refused with one line.

Every comparison is bitwise: resuming must compute exactly what the
uninterrupted run computes (same step numbers, data and Adam bias
correction), and consolidation only moves bytes.
"""

import os

import numpy as np
import pytest
import torch

import e2e_util
from ztrain import models, parity, safetensors



mpirun = e2e_util.mpirun


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("ztrain: error:")]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """The MLP compiled for ZeRO stage 3 on 2 and on 4 ranks: (dir, {dp: exe})."""
    d = tmp_path_factory.mktemp("checkpoints")
    exes = {dp: e2e_util.compile_zero_mlp(d, dp, name=f"dp{dp}") for dp in (2, 4)}
    return d, exes


def consolidate(ckpt, out):
    return e2e_util.run([e2e_util.require_tool("ztrain-consolidate"), ckpt, "-o", out])


def test_consolidated_shards_are_the_saved_weights(build, tmp_path):
    _, exes = build
    ckpt, saved, full = tmp_path / "ck", tmp_path / "saved.safetensors", tmp_path / "full.safetensors"
    mpirun(2, [exes[2], "--steps", "3", "--threads", "1", "--save-checkpoint", ckpt,
               "--save", saved])
    assert sorted(os.listdir(ckpt)) == ["global_step3", "latest"]
    assert (ckpt / "latest").read_text() == "global_step3\n"
    assert sorted(os.listdir(ckpt / "global_step3")) == [
        "index.json", "rank-0-of-2.safetensors", "rank-1-of-2.safetensors"]
    p = consolidate(ckpt, full)
    assert p.returncode == 0, p.stderr
    assert full.read_bytes() == saved.read_bytes()

    # What PyTorch gets: the model's full shapes, bitwise the saved values.
    want = safetensors.load(str(saved))
    got = {k: torch.from_numpy(v) for k, v in safetensors.load(str(full)).items()}
    assert set(got) == set(want)
    for name, tensor in got.items():
        assert tuple(tensor.shape) == want[name].shape
        assert torch.equal(tensor.view(torch.int32),
                           torch.from_numpy(want[name]).view(torch.int32)), name


def test_resume_continues_bitwise(build, tmp_path):
    _, exes = build
    _check_resume_continues_bitwise(exes[2], tmp_path)


def test_resume_with_dropout_continues_bitwise(tmp_path):
    # Dropout masks depend on the seed and the step: a resumed run must take
    # both from the checkpoint to drop what the uninterrupted run dropped.
    spec = models.gpt(batch=2, seq=8, vocab=32, layers=1, width=16, heads=2, dropout=0.25)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adam", lr=1e-2),
                                name="gpt_dropout", extra=["--dp", "2", "--zero-stage", "3"])
    _check_resume_continues_bitwise(exe, tmp_path)


def _check_resume_continues_bitwise(exe, tmp_path):
    common = ["--threads", "1", "--seed", "11"]
    mpirun(2, [exe, "--steps", "12", "--save", tmp_path / "straight.safetensors",
               "--report", tmp_path / "straight.json"] + common)
    mpirun(2, [exe, "--steps", "6", "--save-checkpoint", tmp_path / "ck",
               "--report", tmp_path / "first.json"] + common)
    # --steps counts the steps after the checkpoint's; the seed comes from it.
    mpirun(2, [exe, "--steps", "6", "--resume", tmp_path / "ck", "--threads", "1",
               "--save", tmp_path / "resumed.safetensors",
               "--report", tmp_path / "second.json"])

    assert ((tmp_path / "resumed.safetensors").read_bytes()
            == (tmp_path / "straight.safetensors").read_bytes())
    straight = parity.read_report(str(tmp_path / "straight.json"))["steps"]
    halves = (parity.read_report(str(tmp_path / "first.json"))["steps"]
              + parity.read_report(str(tmp_path / "second.json"))["steps"])
    assert [s["step"] for s in halves] == list(range(1, 13))
    # The report prints losses with %.9g, which round-trips a float32.
    assert [s["loss"] for s in halves] == [s["loss"] for s in straight]


def test_resume_on_another_rank_count_is_one_line(build, tmp_path):
    _, exes = build
    ckpt = tmp_path / "ck"
    mpirun(2, [exes[2], "--steps", "1", "--save-checkpoint", ckpt])
    p = mpirun(4, [exes[4], "--steps", "1", "--resume", ckpt], check=False)
    assert p.returncode != 0
    assert error_lines(p.stderr) == [
        f"ztrain: error: [rank 0] --resume '{ckpt}': the checkpoint was written for dp=2, "
        "this run has dp=4; resume with the same number of ranks and the same build"]


def test_consolidating_a_damaged_checkpoint_fails_cleanly(build, tmp_path):
    _, exes = build
    ckpt, full = tmp_path / "ck", tmp_path / "full.safetensors"
    mpirun(2, [exes[2], "--steps", "1", "--save-checkpoint", ckpt])
    shard = ckpt / "global_step1" / "rank-1-of-2.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-8])
    p = consolidate(ckpt, full)
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"ztrain: error: ztrain-consolidate: '{shard}' is not a valid safetensors file: "), p.stderr
    shard.unlink()
    p = consolidate(ckpt, full)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        f"ztrain: error: ztrain-consolidate: cannot open '{shard}': No such file or directory"]
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_a_flipped_byte_is_found_by_resume_and_consolidate(build, tmp_path):
    """Every tensor's CRC-32C is in the index: one flipped data byte in a
    shard is refused, naming the file and the tensor, where it used to be
    accepted and silently change the weights."""
    _, exes = build
    ckpt = tmp_path / "ck"
    mpirun(2, [exes[2], "--steps", "2", "--save-checkpoint", ckpt])
    shard = ckpt / "global_step2" / "rank-1-of-2.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01          # the last byte is tensor data, not the header
    shard.write_bytes(bytes(data))
    p = mpirun(2, [exes[2], "--steps", "1", "--resume", ckpt], check=False)
    assert p.returncode != 0
    lines = error_lines(p.stderr)
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"ztrain: error: [rank 1] --resume: '{shard}': tensor '"), lines
    assert "fails its checksum" in lines[0] and "the file is damaged" in lines[0]
    p = consolidate(ckpt, tmp_path / "full.safetensors")
    assert p.returncode == 1
    assert "fails its checksum" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "full.safetensors").exists()
