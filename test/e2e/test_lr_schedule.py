"""Run-time learning rate (the executable's --lr, --lr-schedule,
--warmup-steps, --min-lr, --lr-decay-steps; runtime/step/LrSchedule.h).

- --lr at run time is the compiled --lr: the same bits;
- the learning rate of each step, in the report and the progress line, is
  the schedule's formula (parity.lr_schedule, written from the docs), and
  training under it matches PyTorch stepping with the same learning rates;
- with fp16 a step skipped by loss scaling does not advance the schedule.
"""

import math

import pytest

import e2e_util
from ztrain import models, parity, safetensors

STEPS = 20


def spec():
    return models.mlp(batch=16, in_features=32, hidden=[64, 32], classes=10)


def test_runtime_lr_is_the_compiled_lr(tmp_path):
    m = spec()
    init = str(tmp_path / "init.safetensors")
    safetensors.save(init, parity.make_init(m, seed=2))
    saved = {}
    for name, compiled, run in (("a", 2e-3, []), ("b", 1e-3, ["--lr", "2e-3"])):
        exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path),
                                    parity.OptimizerConfig("adamw", lr=compiled,
                                                           weight_decay=0.1), name=name)
        out = tmp_path / f"{name}.safetensors"
        parity.run_exe(exe, steps=5, init=init, save=str(out), extra=run)
        saved[name] = out.read_bytes()
    assert saved["a"] == saved["b"]


@pytest.mark.parametrize("kind,warmup,min_lr,wtype", [
    ("cosine", 5, 1e-4, "linear"), ("linear", 0, 0.0, "linear"),
    ("constant", 4, 0.0, "linear"),
    # DeepSpeed's default warmup (issue 49: a config that left it out
    # compiled and was then refused by the executable).
    ("cosine", 5, 1e-4, "log")])
def test_schedule_matches_formula_and_torch(kind, warmup, min_lr, wtype):
    lr = 1e-2
    flags = ["--lr", repr(lr), "--lr-schedule", kind, "--warmup-steps", str(warmup),
             "--warmup-type", wtype]
    if kind != "constant":
        flags += ["--min-lr", repr(min_lr), "--lr-decay-steps", "16"]
    at = parity.lr_schedule(lr, kind, warmup, min_lr, 16 if kind != "constant" else None,
                            warmup_type=wtype)
    r = parity.run_parity(spec(), steps=STEPS, samples=56, log_every=1,
                          optimizer=parity.OptimizerConfig("adam", lr=1e-3),
                          run_flags=flags, lr_at=at)
    got = [s["lr"] for s in r.report["steps"]]
    want = [at(t) for t in range(1, STEPS + 1)]
    # Both sides evaluate the same double formula; cos may differ in the
    # last bit between libm and Python: 1e-15 relative.
    for t, (g, w) in enumerate(zip(got, want), 1):
        assert math.isclose(g, w, rel_tol=1e-15, abs_tol=1e-18), (t, g, w)
    assert r.report["lr_schedule"]["kind"] == kind
    assert r.report["lr_schedule"]["warmup_type"] == wtype
    if kind != "constant":
        assert got[-1] == pytest.approx(min_lr, abs=1e-15)   # decayed to the floor
    # Training under the schedule: fp32 parity bounds (test_parity.py).
    assert r.loss_rel_errors().max() <= 1e-5, r.table()
    assert max(r.compared_weight_errors().values()) <= 1e-4, r.table()


def test_skipped_steps_do_not_advance_the_schedule(tmp_path):
    """fp16 from 2^24: the first steps overflow and are skipped; the
    warmup counts optimizer steps, so the first applied step takes lr / W."""
    m = spec()
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-3), name="m",
                                extra=["--precision=fp16", "--initial-scale-power=24"])
    report = str(tmp_path / "r.json")
    parity.run_exe(exe, steps=12, report=report,
                   extra=["--lr-schedule", "linear", "--warmup-steps", "4"])
    steps = parity.read_report(report)["steps"]
    applied = [s for s in steps if not s["skipped"]]
    assert len(applied) < len(steps), "no step was skipped"
    for k, s in enumerate(applied[:4], 1):
        assert s["lr"] == pytest.approx(1e-3 * k / 4, rel=1e-15), (k, s)


@pytest.mark.parametrize("flags,message", [
    (["--lr-schedule", "exp"], "flag --lr-schedule: 'exp' is not a schedule (constant, cosine or linear)"),
    (["--min-lr", "1e-4"], "flag --min-lr shapes a decaying schedule; with --lr-schedule=constant it has no effect"),
    (["--lr", "-1"], "flag --lr: '-1' is not a finite number >= 0"),
    (["--lr-schedule", "cosine", "--min-lr", "1"], "--min-lr 1 exceeds the learning rate 0.001"),
    (["--lr-schedule", "cosine", "--warmup-steps", "10", "--lr-decay-steps", "5"],
     "flag --lr-decay-steps 5 ends the decay at or before --warmup-steps 10 ends the warmup"),
])
def test_bad_schedule_flags(flags, message, tmp_path):
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-3), name="m")
    p = parity.run_exe(exe, steps=2, extra=flags, check=False)
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and message in lines[0], p.stderr


def test_resume_continues_the_schedule_and_hyperparameters(tmp_path):
    """The run-time schedule and hyper-parameter flags are the run's, not the
    command line's: a checkpoint records them, and a run resumed without
    them continues them (bitwise the straight run, and the report says
    so), as DeepSpeed restores its scheduler; a flag given at the resume
    replaces the recorded value, field by field."""
    m = spec()
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-3), name="m")
    run = ["--lr", "2e-3", "--lr-schedule", "cosine", "--warmup-steps", "2",
           "--lr-decay-steps", "12", "--min-lr", "1e-4", "--weight-decay", "0.3",
           "--beta2", "0.99"]
    straight = tmp_path / "straight.safetensors"
    parity.run_exe(exe, steps=8, seed=4, save=str(straight), extra=run)
    ck = tmp_path / "ck"
    parity.run_exe(exe, steps=3, seed=4, extra=run + ["--save-checkpoint", str(ck)])
    resumed, report = tmp_path / "resumed.safetensors", tmp_path / "r.json"
    p = parity.run_exe(exe, steps=5, save=str(resumed), report=str(report), log_every=1,
                       extra=["--resume", str(ck)])
    assert resumed.read_bytes() == straight.read_bytes()
    assert ("resuming with the checkpoint's --lr 0.002 --lr-schedule cosine --warmup-steps 2 "
            "--min-lr 0.0001 --lr-decay-steps 12 --beta2 0.99 --weight-decay 0.3") in p.stdout, \
        p.stdout
    r = parity.read_report(str(report))
    assert r["hyperparameters"]["weight-decay"] == 0.3 and r["hyperparameters"]["beta2"] == 0.99
    want = parity.lr_schedule(2e-3, "cosine", warmup=2, min_lr=1e-4, decay_steps=12)
    got = {s["step"]: s["lr"] for s in r["steps"]}
    # The resumed steps' learning rates are the schedule's (1e-12: the
    # formula in Python against the runtime's doubles).
    for t in range(4, 9):
        assert math.isclose(got[t], want(t), rel_tol=1e-12), (t, got[t], want(t))
    # A flag given at the resume wins over the checkpoint's value.
    report2 = tmp_path / "r2.json"
    parity.run_exe(exe, steps=1, report=str(report2),
                   extra=["--resume", str(ck), "--weight-decay", "0.05"])
    assert parity.read_report(str(report2))["hyperparameters"]["weight-decay"] == 0.05


def test_resume_takes_one_schedule_field_and_keeps_the_rest(tmp_path):
    """A resume that only extends the decay (--lr-decay-steps, the checkpoint's
    schedule being cosine) is taken field by field, not refused as a decay
    flag on a constant schedule; and a run whose decay end defaulted to its
    last step inside the warmup resumes as it ran."""
    m = spec()
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-3), name="m")
    ck = tmp_path / "ck"
    parity.run_exe(exe, steps=3, extra=["--lr-schedule", "cosine", "--warmup-steps", "2",
                                        "--lr-decay-steps", "10", "--save-checkpoint", str(ck)])
    report = tmp_path / "r.json"
    parity.run_exe(exe, steps=2, report=str(report),
                   extra=["--resume", str(ck), "--lr-decay-steps", "20"])
    got = {s["step"]: s["lr"] for s in parity.read_report(str(report))["steps"]}
    want = parity.lr_schedule(1e-3, "cosine", warmup=2, decay_steps=20)
    for t in (4, 5):  # (1e-12: the formula in Python against the runtime's doubles)
        assert math.isclose(got[t], want(t), rel_tol=1e-12), (t, got[t], want(t))
    ck2 = tmp_path / "ck2"
    parity.run_exe(exe, steps=2, extra=["--lr-schedule", "cosine", "--warmup-steps", "5",
                                        "--save-checkpoint", str(ck2)])
    p = parity.run_exe(exe, steps=1, extra=["--resume", str(ck2)], check=False)
    assert p.returncode == 0, p.stderr
