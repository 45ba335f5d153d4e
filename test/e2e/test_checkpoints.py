"""Sharded checkpoints of a compiled model (ZeRO stage 3, dp=2, Adam):
--save-checkpoint writes one file per rank plus index.json, ztrain-consolidate
turns them into the full weights that --save writes and PyTorch loads,
--resume continues bitwise where the run stopped, also at another ZeRO stage
or number of ranks (resharded on load), and a checkpoint of another model or
a damaged shard is refused with one line.

Every comparison is bitwise: resuming must compute exactly what the
uninterrupted run computes (same step numbers, data and Adam bias
correction), and consolidation only moves bytes.
"""

import json
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


def test_resume_at_another_stage_is_bitwise_the_straight_run(tmp_path):
    """A universal checkpoint: written at ZeRO stage 1, resumed at stage 3
    and at stage 2 on the same ranks. Stages 1-3 compute the same bits
    (test_zero_equivalence), so the resumed runs must end bitwise where the
    uninterrupted stage-1 run ends: the resharding moved every parameter,
    moment and padding element exactly."""
    spec = models.mlp(batch=2, in_features=12, hidden=[16], classes=5)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    exes = {st: e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name=f"s{st}",
                                      extra=["--dp", "2", "--zero-stage", str(st)])
            for st in (1, 2, 3)}
    common = ["--threads", "1", "--seed", "5"]
    mpirun(2, [exes[1], "--steps", "6", "--save", tmp_path / "straight.safetensors"] + common)
    mpirun(2, [exes[1], "--steps", "3", "--save-checkpoint", tmp_path / "ck"] + common)
    for st in (3, 2):
        out = tmp_path / f"resumed{st}.safetensors"
        mpirun(2, [exes[st], "--steps", "3", "--resume", tmp_path / "ck", "--threads", "1",
                   "--save", out])
        assert out.read_bytes() == (tmp_path / "straight.safetensors").read_bytes(), st


def test_resume_on_another_rank_count_reshards(build, tmp_path):
    """Written by 2 ranks at stage 3, resumed by 4 and by 1 (stage 0): the
    state carries over (the resumed run continues from the checkpoint's
    weights and moments, not from scratch), and the steps after it are
    those of the new data-parallel degree (float rounding of the other
    reduction order apart)."""
    _, exes = build
    spec = models.mlp(batch=2, in_features=12, hidden=[16], classes=5)
    one = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-2), name="one")
    ckpt = tmp_path / "ck"
    mpirun(2, [exes[2], "--steps", "3", "--threads", "1", "--save-checkpoint", ckpt])
    # 4 ranks, and 1: both resume, and their first step is step 4.
    r4, r1 = tmp_path / "r4.json", tmp_path / "r1.json"
    mpirun(4, [exes[4], "--steps", "2", "--threads", "1", "--resume", ckpt, "--report", r4])
    p = e2e_util.run([one, "--steps", "2", "--threads", "1", "--resume", ckpt, "--report", r1])
    assert p.returncode == 0, p.stderr
    for r in (r4, r1):
        assert [s["step"] for s in parity.read_report(str(r))["steps"]] == [4, 5]
    # The parameters it resumed from are the checkpoint's: 0 more steps
    # saves them unchanged (consolidated = what one rank loaded).
    full, loaded = tmp_path / "full.safetensors", tmp_path / "loaded.safetensors"
    assert consolidate(ckpt, full).returncode == 0
    p = e2e_util.run([one, "--steps", "0", "--resume", ckpt, "--save", loaded])
    assert p.returncode == 0, p.stderr
    assert loaded.read_bytes() == full.read_bytes()


def test_resume_with_another_global_batch_continues_the_data(tmp_path):
    """A checkpoint of 2 ranks x micro-batch 4 (8 samples a step), resumed
    by one process with micro-batch 4 and with micro-batch 8: the resumed
    steps read the samples after the checkpoint's (sample 24 on after 3
    steps), not step t's samples of the new global batch. Step 4 of the
    micro-batch-4 run computes what rank 0 computed in step 4 of the
    straight 2-rank run (the same weights on the same 4 samples, one
    forward pass: bitwise); the micro-batch-8 run what both ranks did (the
    mean of their two losses against one mean over 8: float rounding,
    2e-7 relative)."""
    def spec(batch):
        return models.gpt(batch=batch, seq=8, vocab=32, layers=1, width=16, heads=2)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, parity.make_data(spec(4), samples=64, seed=5))
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    two = e2e_util.compile_text(spec(4).to_mlir(), str(tmp_path), opt, name="two",
                                extra=["--dp=2", "--zero-stage=1"])
    b4 = e2e_util.compile_text(spec(4).to_mlir(), str(tmp_path), opt, name="b4")
    b8 = e2e_util.compile_text(spec(8).to_mlir(), str(tmp_path), opt, name="b8")
    straight, ckpt = tmp_path / "straight.json", tmp_path / "ck"
    mpirun(2, [two, "--steps", "4", "--threads", "1", "--data", data, "--report", straight])
    mpirun(2, [two, "--steps", "3", "--threads", "1", "--data", data, "--save-checkpoint", ckpt])
    s = parity.read_report(str(straight))
    for exe, name in ((b4, "r4"), (b8, "r8")):
        p = e2e_util.run([exe, "--steps", "1", "--threads", "1", "--data", data,
                          "--resume", ckpt, "--report", tmp_path / f"{name}.json",
                          "--save-checkpoint", tmp_path / f"ck-{name}"])
        assert p.returncode == 0, p.stderr
        r = parity.read_report(str(tmp_path / f"{name}.json"))
        assert [x["step"] for x in r["steps"]] == [4]
        if exe is b4:
            assert ("resuming with 4 samples per optimizer step (the checkpoint's run took 8): "
                    "the data continues at sample 24") in p.stdout, p.stdout
            assert r["steps"][0]["loss"] == s["ranks"][0]["losses"][3]
            consumed = 24 + 4
        else:
            assert "resuming with" not in p.stdout  # the same global batch
            assert r["steps"][0]["loss"] == pytest.approx(s["steps"][3]["loss"], rel=2e-7)
            consumed = 24 + 8
        index = json.loads((tmp_path / f"ck-{name}" / "global_step4" / "index.json").read_text())
        assert index["ztrain"]["data_samples"] == consumed


def test_resume_of_another_model_is_one_line(build, tmp_path):
    _, exes = build
    ckpt = tmp_path / "ck"
    mpirun(2, [exes[2], "--steps", "1", "--save-checkpoint", ckpt])
    other = e2e_util.compile_text(
        models.mlp(batch=2, in_features=12, hidden=[16], classes=5).to_mlir(), str(tmp_path),
        parity.OptimizerConfig("sgd", lr=1e-2), name="sgd")
    p = e2e_util.run([other, "--steps", "1", "--resume", ckpt])
    assert p.returncode != 0
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "the checkpoint has state" in lines[0], p.stderr


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


def test_init_from_a_hugging_face_sharded_checkpoint(tmp_path):
    """--init takes Hugging Face's sharded layout: model.safetensors.index.json
    ("weight_map": tensor -> file) with its shard files, named by the index
    or by the directory; the weights are those of the one-file --init."""
    spec = models.mlp(batch=2, in_features=12, hidden=[16], classes=5)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-2), name="m")
    weights = parity.make_init(spec, seed=9)
    names = sorted(weights)
    one = tmp_path / "one.safetensors"
    safetensors.save(str(one), weights)
    hf = tmp_path / "hf"
    hf.mkdir()
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        safetensors.save(str(hf / file), {k: weights[k] for k in part})
    import json
    (hf / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 0},
        "weight_map": {k: f for f, part in shards.items() for k in part}}))
    outs = []
    for init in (one, hf / "model.safetensors.index.json", hf):
        out = tmp_path / f"out{len(outs)}.safetensors"
        p = e2e_util.run([exe, "--steps", "2", "--init", init, "--save", out, "--threads", "1"])
        assert p.returncode == 0, p.stderr
        outs.append(out.read_bytes())
    assert outs[1] == outs[0] and outs[2] == outs[0]
    # An index that points outside its directory is refused.
    (hf / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {names[0]: "../one.safetensors"}}))
    p = e2e_util.run([exe, "--steps", "1", "--init", hf])
    lines = error_lines(p.stderr)
    assert p.returncode != 0 and len(lines) == 1, p.stderr
    assert "is not a file name in the index's directory" in lines[0]


def test_consolidate_to_hugging_face_shards(build, tmp_path):
    """ztrain-consolidate --max-shard-size writes Hugging Face's sharded
    layout: files of at most that many tensor bytes and an index whose
    weight_map names one file per tensor. Read as HF's loaders read it
    (every file of the map, each tensor from its file), it is the one-file
    consolidation bit for bit, and --init takes it back."""
    import json
    _, exes = build
    ckpt = tmp_path / "ck"
    mpirun(2, [exes[2], "--steps", "2", "--threads", "1", "--save-checkpoint", ckpt])
    one, hf = tmp_path / "one.safetensors", tmp_path / "hf"
    assert consolidate(ckpt, one).returncode == 0
    tool = e2e_util.require_tool("ztrain-consolidate")
    p = e2e_util.run([tool, ckpt, "-o", hf, "--max-shard-size=300"])
    assert p.returncode == 0, p.stderr
    index = json.loads((hf / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and files == sorted(f.name for f in hf.glob("model-*.safetensors"))
    want = safetensors.load(str(one))
    got = {}
    for f in files:
        for k, v in safetensors.load(str(hf / f)).items():
            assert index["weight_map"][k] == f
            got[k] = v
    assert set(got) == set(want)
    assert all(np.array_equal(got[k].view(np.uint32), want[k].view(np.uint32)) for k in want)
    total = sum(v.nbytes for v in want.values())
    assert index["metadata"]["total_size"] == total
    # Each file holds at most 300 bytes of tensors, unless one tensor alone
    # is larger.
    for f in files:
        sizes = [v.nbytes for v in safetensors.load(str(hf / f)).values()]
        assert sum(sizes) <= 300 or len(sizes) == 1, (f, sizes)
    # Hugging Face's spelling of the size: one file here.
    p = e2e_util.run([tool, ckpt, "-o", tmp_path / "hf5", "--max-shard-size=5GB"])
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in (tmp_path / "hf5").glob("model-*.safetensors")) == [
        "model-00001-of-00001.safetensors"]


def test_keep_checkpoints_after_a_rollback_keeps_the_live_runs(build, tmp_path):
    """A run resumed from an earlier step of its directory (a rollback, e.g.
    past a loss spike) saves into the same directory: --keep-checkpoints K
    keeps the newest K of the live run, and the checkpoints of the run it
    rolled back from (steps past its own) are neither counted nor deleted,
    but replaced as the live run saves those steps, with one warning."""
    _, exes = build
    exe, root = exes[2], tmp_path / "ck"
    mpirun(2, [exe, "--steps", 8, "--seed", 3, "--save-checkpoint", root,
               "--checkpoint-every", 2])
    assert sorted(os.listdir(root)) == ["global_step2", "global_step4", "global_step6",
                                        "global_step8", "latest"]
    # (--steps counts the steps to run from the checkpoint's.)
    p = mpirun(2, [exe, "--steps", 2, "--seed", 3, "--resume", root / "global_step2",
                   "--save-checkpoint", root, "--checkpoint-every", 1, "--keep-checkpoints", 2])
    # Live: steps 3 and 4 saved (2 kept: 2 went); 6 and 8 are the abandoned run's.
    assert sorted(os.listdir(root)) == ["global_step3", "global_step4", "global_step6",
                                        "global_step8", "latest"]
    assert "global_step6, global_step8 in" in p.stderr and "past this run's step 3" in p.stderr, \
        p.stderr
    assert "not counted and not deleted" in p.stderr, p.stderr
    # Continuing past them replaces them: the live run's newest 2 remain.
    mpirun(2, [exe, "--steps", 5, "--seed", 3, "--resume", root, "--save-checkpoint", root,
               "--checkpoint-every", 1, "--keep-checkpoints", 2])
    assert sorted(os.listdir(root)) == ["global_step8", "global_step9", "latest"]
    with open(root / "latest") as fh:
        assert fh.read().strip() == "global_step9"


def test_keep_checkpoints_after_a_rollback_with_another_interval(build, tmp_path):
    """The same with save intervals that do not line up: the abandoned run's
    checkpoints are those past the live run's step at its first save, and
    stay uncounted while the live run passes them (one it passes without
    saving stays; one it saves is its own)."""
    _, exes = build
    exe, root = exes[2], tmp_path / "ck"
    mpirun(2, [exe, "--steps", 8, "--seed", 3, "--save-checkpoint", root,
               "--checkpoint-every", 2])
    # Resumed at 2, saving after steps 3, 6 and 7 (the last), keeping 2.
    mpirun(2, [exe, "--steps", 5, "--seed", 3, "--resume", root / "global_step2",
               "--save-checkpoint", root, "--checkpoint-every", 3, "--keep-checkpoints", 2])
    assert sorted(os.listdir(root)) == ["global_step4", "global_step6", "global_step7",
                                        "global_step8", "latest"]
