"""Run-time optimizer hyper-parameters and the no-decay group (issue 15
item 1).

- the executable's --beta1 / --beta2 / --eps / --weight-decay (Adam, AdamW)
  and --momentum / --dampening / --weight-decay (SGD) train exactly, bit for
  bit, what a build compiled with those values trains;
- weight decay skips biases, norms and every 1-D parameter by default
  (nanoGPT's two groups), against PyTorch with the same groups; --no-decay
  =none decays everything, as one torch group;
- hyper-parameters of another optimizer, values out of range and momentum
  without a momentum buffer are refused in one line.
"""

import numpy as np
import pytest

import e2e_util
from ztrain import models, parity, safetensors


def spec():
    return models.mlp(batch=8, in_features=16, hidden=[32], classes=5)


def files(tmp_path):
    s = spec()
    init, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init, parity.make_init(s, seed=2))
    safetensors.save(data, parity.make_data(s, samples=40, seed=3))
    return init, data


def trained(exe, tmp_path, init, data, name, flags=()):
    out = tmp_path / f"{name}.safetensors"
    parity.run_exe(exe, 6, init=init, data=data, save=str(out), threads=1, extra=list(flags))
    return out.read_bytes()


@pytest.mark.parametrize("kind,runtime,compiled", [
    ("adamw", ["--beta1", "0.8", "--beta2", "0.95", "--eps", "1e-6", "--weight-decay", "0.05"],
     dict(beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.05)),
    ("adam", ["--weight-decay", "0.01"], dict(weight_decay=0.01)),
    ("sgd", ["--momentum", "0.5", "--dampening", "0.1", "--weight-decay", "0.02"],
     dict(momentum=0.5, dampening=0.1, weight_decay=0.02)),
])
def test_run_time_values_equal_compiled_ones(kind, runtime, compiled, tmp_path):
    init, data = files(tmp_path)
    base = dict(momentum=0.9) if kind == "sgd" else {}
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig(kind, lr=1e-2, **base), name="base")
    ref = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig(kind, lr=1e-2, **{**base, **compiled}),
                                name="ref")
    got = trained(exe, tmp_path, init, data, "got", runtime)
    want = trained(ref, tmp_path, init, data, "want")
    assert got == want
    # And the flags changed something (the defaults train other weights).
    assert trained(exe, tmp_path, init, data, "default") != want


@pytest.mark.parametrize("no_decay", ["1d", "none"])
def test_weight_decay_groups_match_torch(no_decay):
    opt = parity.OptimizerConfig("adamw", lr=1e-2, weight_decay=0.5, no_decay=no_decay)
    r = parity.run_parity(spec(), steps=10, optimizer=opt, samples=40)
    # fp32 parity bounds (test_parity.py): ~1e-7 measured.
    assert r.loss_rel_errors().max() <= 1e-5, r.table()
    assert max(r.compared_weight_errors().values()) <= 1e-4, r.table()


def test_the_bias_does_not_decay_by_default(tmp_path):
    # One SGD step from the same weights on the same batch: the gradients
    # are equal, so the groupings differ only by the decay term lr * wd * p
    # of the 1-D parameters (biases start at 1 here, not 0, so it shows).
    s = spec()
    init = parity.make_init(s, seed=2)
    init = {k: (np.ones_like(v) if v.ndim < 2 else v) for k, v in init.items()}
    init_path, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data, parity.make_data(s, samples=40, seed=3))
    lr, wd = 0.1, 0.5
    out = {}
    for g in ("1d", "none"):
        exe = e2e_util.compile_text(s.to_mlir(), str(tmp_path),
                                    parity.OptimizerConfig("sgd", lr=lr, weight_decay=wd,
                                                           no_decay=g), name=g)
        p = tmp_path / f"{g}.safetensors"
        parity.run_exe(exe, 1, init=init_path, data=data, save=str(p), threads=1)
        out[g] = safetensors.load(str(p))
    for name, a in out["1d"].items():
        if a.ndim >= 2:
            assert np.array_equal(a, out["none"][name]), name   # both decay
        else:
            # none subtracts lr * wd * 1 more (float rounding of ~1: 1e-7).
            assert np.allclose(a - out["none"][name], lr * wd, rtol=0, atol=1e-6), name


def one_error(p):
    assert p.returncode == 2 or p.returncode == 1, (p.returncode, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_refusals_are_one_line(tmp_path):
    adam = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                 parity.OptimizerConfig("adam"), name="adam")
    sgd = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("sgd", lr=0.1), name="sgd")
    nest = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                 parity.OptimizerConfig("sgd", lr=0.1, momentum=0.9,
                                                        nesterov=True), name="nest")
    cases = [
        (adam, ["--momentum", "0.9"], "--momentum is SGD's; this model was compiled for adam"),
        (sgd, ["--beta1", "0.9"], "--beta1 is Adam(W)'s; this model was compiled for sgd"),
        (adam, ["--beta2", "1"], "flag --beta2: '1' must be in [0, 1)"),
        (adam, ["--eps", "0"], "flag --eps: '0' must be finite and positive"),
        (adam, ["--weight-decay", "nan"], "flag --weight-decay: 'nan' must be finite and >= 0"),
        (adam, ["--beta1", "x"], "flag --beta1: 'x' is not a number"),
        (sgd, ["--momentum", "0.9"], "this model was compiled without momentum"),
        (nest, ["--dampening", "0.1"], "Nesterov momentum (compiled in) needs momentum > 0 and "
                                      "dampening 0"),
    ]
    for exe, flags, want in cases:
        line = one_error(e2e_util.run([exe, "--steps", 1] + flags))
        assert want in line, (flags, line)


def test_report_shows_what_the_updates_used(tmp_path):
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", weight_decay=0.1), name="m")
    report = str(tmp_path / "r.json")
    parity.run_exe(exe, 2, report=report, extra=["--beta2", "0.95"])
    h = parity.read_report(report)["hyperparameters"]
    assert h == {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight-decay": 0.1}, h
