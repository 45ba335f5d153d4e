"""fp16 dynamic loss scaling (docs/mixed-precision.md, "fp16 and loss scaling").

- the sequence of loss scales and skipped steps, for overflows injected at
  chosen steps, is exactly DeepSpeed's DynamicLossScaler (its update_scale,
  transcribed below), and a skipped step changes no weight;
- ZeRO stages 0-3 skip the same steps and compute the same weights, bit for
  bit, at N = 2 and twice, and match one process on the global batch;
- a resumed run continues the scaler where the checkpoint left it: bitwise
  the uninterrupted run;
- an overflow at the minimum scale ends the run with one line naming the step.

Overflows are injected through the data: at the chosen steps every input is
2000 instead of ~N(0, 1). The forward pass stays finite in f16 (activations
reach ~10^3), but the scaled gradients of the weights (sums over the batch
of products of ~10^3 activations with ~10^2 scaled output gradients) pass
f16's 65504 on every rank, so the step must be skipped. On the ordinary
steps the gradients stay ~10^3 below f16's range at the scales reached.
"""

import json
import shutil

import numpy as np
import pytest

import e2e_util
from ztrain import models, parity, safetensors

MPIRUN = shutil.which("mpirun")
STEPS = 24
OVERFLOW_STEPS = {3, 4, 9, 15, 16, 17, 18}
# A small window and initial scale, so that 24 steps see doublings, the
# hysteresis and several halvings.
SCALE_FLAGS = ["--precision=fp16", "--initial-scale-power=10", "--loss-scale-window=4",
               "--hysteresis=2"]


def deepspeed_scales(overflows, init, window, hysteresis, min_scale=1.0):
    """The scale each step uses, DeepSpeed's DynamicLossScaler.update_scale
    (deepspeed/runtime/fp16/loss_scaler.py; consecutive_hysteresis off)
    transcribed: one entry per step, before that step's update_scale."""
    cur_scale, cur_iter, last_overflow_iter = init, 0, -1
    delayed_shift = cur_hysteresis = hysteresis
    used = []
    for overflow in overflows:
        used.append(cur_scale)
        if overflow:
            if delayed_shift == 1 or cur_hysteresis == 1:
                assert cur_scale != min_scale, "DeepSpeed raises here"
                cur_scale = max(cur_scale / 2.0, min_scale)
            else:
                cur_hysteresis -= 1
            last_overflow_iter = cur_iter
        else:
            if (cur_iter - last_overflow_iter) % window == 0:
                cur_hysteresis = delayed_shift
                cur_scale *= 2.0
        cur_iter += 1
    return used


def spec_for(batch):
    return models.mlp(batch=batch, in_features=32, hidden=[64, 32], classes=10)


def overflowing_data(global_batch, steps, overflow_steps, seed=5):
    data = parity.make_data(spec_for(global_batch), samples=steps * global_batch, seed=seed)
    x = data["x"]
    for t in overflow_steps:
        rows = slice((t - 1) * global_batch, t * global_batch)
        x[rows] = 2000.0 * np.sign(x[rows])
    return data


def steps_of(report):
    return sorted(report["steps"], key=lambda s: s["step"])


def test_loss_scale_sequence_is_deepspeeds(tmp_path):
    batch = 16
    spec = spec_for(batch)
    data_path = str(tmp_path / "data.safetensors")
    safetensors.save(data_path, overflowing_data(batch, STEPS, OVERFLOW_STEPS))
    opt = parity.OptimizerConfig("adam", lr=1e-3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name="m",
                                extra=SCALE_FLAGS)
    report_path = str(tmp_path / "r.json")
    p = parity.run_exe(exe, steps=STEPS, data=data_path, report=report_path, log_every=1)
    steps = steps_of(parity.read_report(report_path))
    skipped = {s["step"] for s in steps if s["skipped"]}
    assert skipped == OVERFLOW_STEPS, "overflow where none was injected, or none where one was"
    overflows = [s["step"] in OVERFLOW_STEPS for s in steps]
    want = deepspeed_scales(overflows, init=1024.0, window=4, hysteresis=2)
    assert [s["loss_scale"] for s in steps] == want
    # The sequence exercises every rule: hysteresis spent without halving
    # (steps 3 -> 4), halvings, and doublings after clean windows.
    assert want[2] == want[3] and want[4] == want[3] / 2
    assert max(want) > 1024.0 and min(want) < 1024.0
    report = parity.read_report(report_path)
    assert report["loss_scale"]["skipped_steps"] == len(OVERFLOW_STEPS)
    lines = [l for l in p.stdout.splitlines() if l.startswith("step")]
    assert len(lines) == STEPS
    for line, s in zip(lines, steps):
        assert f"loss scale {s['loss_scale']:.17g}" in line, line
        assert ("(overflow: step skipped)" in line) == s["skipped"], line
    # A skipped step changes no weight: after steps 3-4 (both skipped) the
    # weights are those after step 2.
    after = {}
    for k in (2, 4):
        save = str(tmp_path / f"w{k}.safetensors")
        parity.run_exe(exe, steps=k, data=data_path, save=save)
        after[k] = open(save, "rb").read()
    assert after[2] == after[4]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_zero_fp16_stages_skip_together_and_match_one_process(tmp_path):
    n, micro, steps = 2, 4, 12
    overflow_steps = {3, 4, 9}
    ref_spec, spec = spec_for(n * micro), spec_for(micro)
    init = parity.make_init(spec, seed=3)
    init_path = str(tmp_path / "init.safetensors")
    data_path = str(tmp_path / "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data_path, overflowing_data(n * micro, steps, overflow_steps))
    opt = parity.OptimizerConfig("adam", lr=1e-3)
    ref_exe = e2e_util.compile_text(ref_spec.to_mlir(), str(tmp_path), opt, name="ref",
                                    extra=SCALE_FLAGS)
    ref_report = str(tmp_path / "ref.json")
    parity.run_exe(ref_exe, steps=steps, init=init_path, data=data_path,
                   save=str(tmp_path / "ref.safetensors"), report=ref_report, threads=1)
    ref_steps = steps_of(parity.read_report(ref_report))
    assert {s["step"] for s in ref_steps if s["skipped"]} == overflow_steps
    saved = {}
    for stage, run in ((0, 0), (1, 0), (2, 0), (3, 0), (3, 1)):
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name=f"s{stage}",
                                    extra=SCALE_FLAGS + ["--dp", str(n), "--zero-stage",
                                                         str(stage)])
        save = tmp_path / f"s{stage}-{run}.safetensors"
        report = str(tmp_path / f"s{stage}-{run}.json")
        e2e_util.mpirun(n, [exe, "--steps", str(steps), "--init", init_path, "--data",
                            data_path, "--save", save, "--report", report, "--threads", "1"])
        got = steps_of(parity.read_report(report))
        # The same skips and scales as one process: the flag is agreed.
        assert [(s["skipped"], s["loss_scale"]) for s in got] == \
            [(s["skipped"], s["loss_scale"]) for s in ref_steps], stage
        saved[(stage, run)] = save.read_bytes()
    assert saved[(3, 0)] == saved[(3, 1)], "two identical runs differ"
    for stage in (1, 2, 3):
        assert saved[(stage, 0)] == saved[(0, 0)], f"stage {stage} differs from stage 0"
    # Against one process: each rank's gradient is rounded to f16 before the
    # average (one process rounds the global-batch gradient once), so
    # elements differ by up to one f16 ulp (2^-11 relative); through Adam
    # and the rounding of the masters that is at most a one-ulp flip of a
    # weight, ~5e-4 relative per element. 1e-2 norm-wise is 20x that and far
    # below a missing rank's share (1/2 of every update: weights move
    # ~9 lr = 9e-3 per element, 5-50% of these tensors' norms).
    ref = safetensors.load(str(tmp_path / "ref.safetensors"))
    got = safetensors.load(str(tmp_path / "s3-0.safetensors"))
    errs = {k: parity.rel_err(got[k], ref[k]) for k in sorted(ref)}
    assert max(errs.values()) <= 1e-2, errs
    assert any(parity.rel_err(ref[k], init[k]) > 1e-3 for k in ref)


def test_resume_continues_the_scaler_bitwise(tmp_path):
    batch, steps = 16, 14
    spec = spec_for(batch)
    data_path = str(tmp_path / "data.safetensors")
    safetensors.save(data_path, overflowing_data(batch, steps, {3, 4, 9}))
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-3), name="m",
                                extra=SCALE_FLAGS)
    full, resumed = str(tmp_path / "full.safetensors"), str(tmp_path / "res.safetensors")
    parity.run_exe(exe, steps=steps, data=data_path, save=full)
    ckpt = str(tmp_path / "ckpt")
    # Stop inside the hysteresis (after step 3's overflow, before step 4's).
    parity.run_exe(exe, steps=3, data=data_path, extra=["--save-checkpoint", ckpt])
    index = json.load(open(f"{ckpt}/global_step3/index.json"))
    assert index["ztrain"]["loss_scaler"] == {"scale": 1024, "iter": 3,
                                              "last_overflow_iter": 2,
                                              "hysteresis": 1, "skipped": 1}
    report = str(tmp_path / "r.json")
    parity.run_exe(exe, steps=steps - 3, data=data_path, save=resumed, report=report,
                   extra=["--resume", ckpt])
    assert open(full, "rb").read() == open(resumed, "rb").read()
    first = steps_of(parity.read_report(report))[0]
    assert first["step"] == 4 and first["skipped"] and first["loss_scale"] == 1024


def test_overflow_at_the_minimum_scale_stops_the_run(tmp_path):
    """At scale 1 no finite f16 forward pass overflows this MLP's gradients,
    so the overflow is a diverged step: an infinite input (NaN gradients).
    The scaler's verdict comes inside the step, before the driver looks at
    the (NaN) loss."""
    batch = 16
    spec = spec_for(batch)
    data_path = str(tmp_path / "data.safetensors")
    data = parity.make_data(spec, samples=4 * batch, seed=5)
    data["x"][batch:2 * batch] = np.inf
    safetensors.save(data_path, data)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-3), name="m",
                                extra=["--precision=fp16", "--initial-scale-power=0",
                                       "--hysteresis=1"])
    ckpt = tmp_path / "ckpt"
    p = parity.run_exe(exe, steps=4, data=data_path, extra=["--save-checkpoint", str(ckpt)],
                       check=False)
    assert p.returncode != 0
    errors = [l for l in p.stderr.splitlines() if "error" in l]
    assert errors == ["ztrain: error: step 2: the gradients overflow at the minimum loss "
                      "scale 1 (--min-loss-scale); stopping. The loss is probably diverging: "
                      "lower the learning rate, or train in bf16"], p.stderr
    assert not (ckpt / "latest").exists()
