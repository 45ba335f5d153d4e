"""train-tile-loss end to end (ztrain-compile --loss-tile-bytes): the
vocabulary projection and its cross-entropy computed in tiles of token rows.
A model whose [256 tokens, 1000 classes] f32 logits (1000 KB) are cut into
tiles of at most 64 KiB (16 tiles of 16 rows; 8 of 32 in bf16) trains like
the untiled model,
at ZeRO stage 0 and 3 and in bf16; zero-report's memory is the run's, to the
byte; and the step no longer holds the logits and their adjoint.
"""

import json
import os
import subprocess

import pytest

import e2e_util
from ztrain import parity, safetensors

MODEL = """
train.param @fc.weight : tensor<16x16xf32> init(normal, 0.2)
train.param @head.weight : tensor<1000x16xf32> init(normal, 0.05)
func.func @loss(%x: tensor<8x32x16xf32> {train.name = "x"}, %y: tensor<8x32xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w1 = train.param_read @fc.weight : tensor<16x16xf32>
  %h = train.matmul %x, %w1 {transpose_b} : (tensor<8x32x16xf32>, tensor<16x16xf32>) -> tensor<8x32x16xf32>
  %r = train.gelu %h : tensor<8x32x16xf32>
  %w2 = train.param_read @head.weight : tensor<1000x16xf32>
  %l = train.matmul %r, %w2 {transpose_b} : (tensor<8x32x16xf32>, tensor<1000x16xf32>) -> tensor<8x32x1000xf32>
  %l2 = train.reshape %l : tensor<8x32x1000xf32> -> tensor<256x1000xf32>
  %y2 = train.reshape %y : tensor<8x32xi32> -> tensor<256xi32>
  %loss = train.cross_entropy %l2, %y2 : (tensor<256x1000xf32>, tensor<256xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
"""
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ROWS, CLASSES = 256, 1000
TILE = 64 * 1024
STEPS = 6
# Why these tolerances. Tiling changes two computations: dW of the head is a
# sum of 16 tiles' products instead of one product over the 256 rows, and
# the loss a sum of 16 shares each rounded to f32. Everything else (each tile's
# logits, adjoint rows, dx rows) is the untiled kernels' on fewer rows.
# fp32: measured 4.8e-8 (fc) and 7.7e-8 (head) relative after 6 Adam steps
# at lr 1e-2 (5.9e-8 and 8.8e-8 at stage 3 on 2 ranks), the losses 1-2 ulps
# apart; 1e-5 has margin and is far below what a wrong tile gives (a
# missing or shifted tile: O(1e-2) in the head's update).
# bf16: each tile's dW term leaves its GEMM rounded to bf16 before the f32
# sum (the untiled dW is rounded once): measured 8e-4 (fc) and 2.5e-3
# (head), losses 4e-5 apart; 1e-2 is 4x the head's and a bf16 ulp is 8e-3.
TOL = {"fp32": 1e-5, "bf16": 1e-2}
LOSS_TOL = {"fp32": 1e-6, "bf16": 1e-2}


def plan(src, training, zero):
    opt = e2e_util.require_tool("ztrain-opt")
    p = subprocess.run([opt, str(src), f"--ztrain-training={training}",
                        f"--ztrain-zero={zero}", "--plan-memory",
                        "--zero-report=format=json", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def train(tmp_path, src, name, stage, n, precision, extra=()):
    flags = ["--dp", str(n), "--zero-stage", str(stage), f"--precision={precision}", *extra]
    exe = parity.compile_model(str(src), str(tmp_path / name),
                               parity.OptimizerConfig("adam", lr=1e-2), flags)
    save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
    e2e_util.launch(n, [exe, "--steps", str(STEPS), "--seed", "5", "--threads", "1",
                        "--log-every", "0", "--save", save, "--report", report])
    return safetensors.load(str(save)), parity.read_report(str(report))


@pytest.mark.parametrize("stage,n,precision", [(0, 1, "fp32"), (3, 2, "fp32"),
                                               (0, 1, "bf16")])
def test_tiled_loss_trains_like_untiled_without_the_logits(stage, n, precision, tmp_path):
    src = tmp_path / "head.mlir"
    src.write_text(MODEL)
    whole, whole_report = train(tmp_path, src, "whole", stage, n, precision)
    tiled, tiled_report = train(tmp_path, src, "tiled", stage, n, precision,
                                ["--loss-tile-bytes", str(TILE)])
    # The same tiled run twice: bitwise the same weights and losses.
    again, again_report = train(tmp_path, src, "again", stage, n, precision,
                                ["--loss-tile-bytes", str(TILE)])
    assert all(again[k].tobytes() == tiled[k].tobytes() for k in tiled)
    assert (parity.report_losses(again_report) == parity.report_losses(tiled_report)).all()
    errs = {k: parity.rel_err(tiled[k], whole[k]) for k in whole}
    assert set(errs) == {"fc.weight", "head.weight"}
    assert all(e <= TOL[precision] for e in errs.values()), errs
    losses = parity.report_losses(tiled_report), parity.report_losses(whole_report)
    assert len(losses[0]) == STEPS
    assert abs(losses[0] - losses[1]).max() <= LOSS_TOL[precision] * abs(losses[1]).max(), losses

    # The static plan is the run's, to the byte, on every rank.
    training = f"optimizer=adam lr=0.01 precision={precision}"
    zero = f"stage={stage} dp={n}"
    predicted = {"whole": plan(src, training, zero),
                 "tiled": plan(src, f"{training} loss-tile-bytes={TILE}", zero)}
    for name, report in (("whole", whole_report), ("tiled", tiled_report)):
        per_rank = predicted[name]["per_rank"]
        for rank in report["ranks"]:
            assert rank["memory"]["device_peak"] == per_rank["predicted_peak"], name
            assert rank["memory"]["activations"] == per_rank["activations"], name
    # The untiled step holds the logits and their adjoint at once; the tiled
    # one two tiles of them and the head's dW partial sums (two [1000, 16]
    # buffers, and the f32 sum in bf16: docs/tiling.md). At least one whole
    # logits buffer less, whatever the element type.
    elem = 4 if precision == "fp32" else 2
    saved = (predicted["whole"]["per_rank"]["activations"]
             - predicted["tiled"]["per_rank"]["activations"])
    assert saved >= ROWS * CLASSES * elem, (saved, predicted)


def test_gpt_trains_and_evaluates_like_untiled_and_cannot_sample(tmp_path):
    """The example GPT ([512 tokens, 256] logits, 512 KiB, in 8 tiles): the
    training and evaluation losses are the untiled ones within f32 rounding
    of 8 shares (measured: equal or 1 ulp apart over these steps), and
    --sample, whose logits function would hold the whole logits, is refused
    in one line that names the flag."""
    data = os.path.join(ROOT, "examples", "data", "genesis-kjv.txt")
    gpt = os.path.join(ROOT, "examples", "gpt.mlir")
    losses = {}
    for name, extra in (("whole", []), ("tiled", ["--loss-tile-bytes", str(TILE)])):
        exe = parity.compile_model(gpt, str(tmp_path / name), None, extra)
        report = tmp_path / f"{name}.json"
        e2e_util.launch(1, [exe, "--steps", "3", "--threads", "1", "--data", data,
                            "--eval-data", data, "--eval-every", "1", "--eval-steps", "2",
                            "--log-every", "0", "--report", report])
        r = parity.read_report(str(report))
        losses[name] = list(parity.report_losses(r)) + [e["loss"] for e in r["eval"]]
    assert len(losses["whole"]) == 6
    for a, b in zip(losses["tiled"], losses["whole"]):
        assert abs(a - b) <= 1e-6 * abs(b), losses  # 8 f32 shares: a few ulps
    p = subprocess.run([str(tmp_path / "tiled"), "--sample", "In the", "--data", data],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0
    assert p.stderr.strip().splitlines() == [
        "ztrain: error: --sample: this model has no logits function (its loss is not a "
        "cross-entropy of logits, or it was compiled with --eval=false or "
        "--loss-tile-bytes)"], p.stderr


def test_bad_bounds_are_refused_and_other_losses_warned(tmp_path):
    src = tmp_path / "head.mlir"
    src.write_text(MODEL)
    compiler = e2e_util.require_tool("ztrain-compile")
    p = subprocess.run([compiler, str(src), "-o", str(tmp_path / "bad"), "--loss-tile-bytes=-1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0
    assert "loss-tile-bytes" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "bad").exists()
    # A loss that is not a cross-entropy of a projection: a warning, and
    # the executable is the untiled one.
    mlp = MODEL.replace("%l2 = train.reshape %l :", "%lr = train.relu %l : tensor<8x32x1000xf32>\n"
                        "  %l2 = train.reshape %lr :")
    other = tmp_path / "relu.mlir"
    other.write_text(mlp)
    p = subprocess.run([compiler, str(other), "-o", str(tmp_path / "relu"),
                        "--loss-tile-bytes", str(TILE)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    assert "no cross-entropy of a projection x W^T to tile" in p.stderr
