"""Gradient clipping by global norm (ztrain-compile --clip-grad-norm,
torch.nn.utils.clip_grad_norm_ semantics).

- against PyTorch (clip_grad_norm_ before each step) in fp32 with Adam and
  SGD with momentum, and in fp16 with loss scaling (the norm of the unscaled
  gradients), clipping active on every step;
- under ZeRO each rank's shard norm enters one scalar all-reduce: stages
  1-3 at N = 2 and 4 compute the same norms and weights, bit for bit, and
  match stage 0 and one process on the global batch.
"""

import shutil

import numpy as np
import pytest

import e2e_util
from ztrain import models, parity, safetensors

MPIRUN = shutil.which("mpirun")
STEPS = 20
MAX_NORM = 0.3   # below every step's norm here (0.45-0.7): clipping always acts


def spec_for(batch):
    return models.mlp(batch=batch, in_features=32, hidden=[64, 32], classes=10)


# fp32 tolerances. ztrain sums the squares in double and rounds once; torch
# takes each tensor's f32 norm and the norm of those: the norms agree to a
# few f32 ulps, so the coefficient max_norm / (norm + 1e-6) does too, and
# each step's update differs by ~1e-7 relative. Measured over 20 steps:
# loss 1-2e-7, weights 6e-8-1.8e-7 (as unclipped fp32 parity). 1e-5 / 1e-4
# are the parity suite's fp32 bounds, far below what a wrong coefficient
# gives (an unclipped step moves the weights ~2x further: 1e-2 here).
LOSS_TOL, WEIGHT_TOL = 1e-5, 1e-4


@pytest.mark.parametrize("kind,precision", [("adam", "fp32"), ("sgd", "fp32"),
                                            ("adam", "fp16")])
def test_clipping_matches_torch(kind, precision):
    opt = parity.OptimizerConfig(kind, lr=1e-2 if precision == "fp32" else 1e-3,
                                 momentum=0.9 if kind == "sgd" else 0.0,
                                 clip_grad_norm=MAX_NORM)
    r = parity.run_parity(spec_for(16), steps=STEPS, optimizer=opt, samples=56,
                          precision=precision, log_every=1)
    norms = [s["grad_norm"] for s in r.report["steps"]]
    assert min(norms) > MAX_NORM, norms   # clipping acted on every step
    assert r.report["clip_grad_norm"] == MAX_NORM
    # fp16 (lr 1e-3, loss-scaled, norm divided by the scale): the fp16
    # bounds of test_mixed_precision (measured 1.4e-5 loss, 3.4e-4 weights).
    loss_tol, weight_tol = (LOSS_TOL, WEIGHT_TOL) if precision == "fp32" else (1e-3, 3e-2)
    assert r.loss_rel_errors().max() <= loss_tol, r.table()
    assert max(r.compared_weight_errors().values()) <= weight_tol, r.table()
    assert r.ztrain_losses[-1] < r.ztrain_losses[0]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("n", [2, 4])
def test_zero_clipping_is_one_norm_over_the_shards(n, tmp_path):
    micro, steps = 4, 8
    ref_spec, spec = spec_for(n * micro), spec_for(micro)
    init = parity.make_init(spec, seed=3)
    init_path = str(tmp_path / "init.safetensors")
    data_path = str(tmp_path / "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data_path, parity.make_data(spec, samples=steps * n * micro, seed=4))
    opt = parity.OptimizerConfig("adam", lr=1e-2, clip_grad_norm=MAX_NORM)
    ref_exe = e2e_util.compile_text(ref_spec.to_mlir(), str(tmp_path), opt, name="ref")
    ref_report = str(tmp_path / "ref.json")
    parity.run_exe(ref_exe, steps=steps, init=init_path, data=data_path,
                   save=str(tmp_path / "ref.safetensors"), report=ref_report, threads=1)
    ref_norms = [s["grad_norm"] for s in parity.read_report(ref_report)["steps"]]
    saved, norms = {}, {}
    for stage in (0, 1, 2, 3):
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name=f"s{stage}",
                                    extra=["--dp", str(n), "--zero-stage", str(stage)])
        save = tmp_path / f"s{stage}.safetensors"
        report = str(tmp_path / f"s{stage}.json")
        e2e_util.mpirun(n, [exe, "--steps", str(steps), "--init", init_path, "--data",
                            data_path, "--save", save, "--report", report, "--threads", "1"])
        saved[stage] = save.read_bytes()
        rep = parity.read_report(report)
        # rank 0's norms; a rank with another coefficient would update its
        # shards differently, and the saved weights below would show it.
        norms[stage] = [s["grad_norm"] for s in rep["steps"]]
    # Stages 1-3 reduce-scatter the same gradients and sum the same shard
    # norms in rank order: bitwise the same step.
    for stage in (2, 3):
        assert saved[stage] == saved[1], f"stage {stage} differs from stage 1"
        assert norms[stage] == norms[1]
    # Stage 0 sums the squares of the whole averaged gradients in one chain,
    # one process those of its own gradients: the norms agree to f32
    # rounding (one ulp of the sum: 1e-7 relative), the weights to the
    # fp32 bound above.
    for other in (norms[0], ref_norms):
        assert np.allclose(norms[1], other, rtol=1e-6, atol=0), (norms[1], other)
    assert min(ref_norms) > MAX_NORM
    ref = safetensors.load(str(tmp_path / "ref.safetensors"))
    for stage in (0, 1):
        got = safetensors.load(str(tmp_path / f"s{stage}.safetensors"))
        errs = {k: parity.rel_err(got[k], ref[k]) for k in ref}
        assert max(errs.values()) <= WEIGHT_TOL, (stage, errs)


def test_progress_line_shows_the_norm(tmp_path):
    exe = e2e_util.compile_text(spec_for(16).to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", clip_grad_norm=1.0), name="m")
    p = parity.run_exe(exe, steps=3, log_every=1)
    lines = [l for l in p.stdout.splitlines() if l.startswith("step")]
    assert len(lines) == 3 and all("grad norm " in l for l in lines), p.stdout
