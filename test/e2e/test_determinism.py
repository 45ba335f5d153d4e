"""Same seed, same configuration: bitwise-identical results; another seed:
different weights (initialization is a function of seed and parameter name)."""

import os

import pytest

import numpy as np

import e2e_util

from ztrain import parity, safetensors

STEPS = 3


def _train(exe, data, d, tag, seed):
    save = os.path.join(d, f"{tag}.safetensors")
    report = os.path.join(d, f"{tag}.json")
    parity.run_exe(exe, STEPS, data=data, save=save, report=report, seed=seed)
    with open(save, "rb") as fh:
        blob = fh.read()
    return blob, parity.report_losses(parity.read_report(report))


def test_same_seed_is_bitwise_identical(small_mlp, tmp_path):
    spec, exe, data, _ = small_mlp
    a, la = _train(exe, data, tmp_path, "a", 7)
    b, lb = _train(exe, data, tmp_path, "b", 7)
    assert a == b, "two runs with --seed 7 wrote different --save files"
    assert la.tolist() == lb.tolist()
    # The file is a real checkpoint holding every parameter with its shape.
    w = safetensors.load(os.path.join(tmp_path, "a.safetensors"))
    for p in spec.params:
        assert p.name in w, f"--save lacks {p.name}"
        assert w[p.name].shape == p.shape and w[p.name].dtype == np.float32
        assert np.isfinite(w[p.name]).all()


def test_different_seed_differs(small_mlp, tmp_path):
    spec, exe, data, _ = small_mlp
    a, la = _train(exe, data, tmp_path, "a", 7)
    c, lc = _train(exe, data, tmp_path, "c", 8)
    assert a != c, "--seed 7 and --seed 8 wrote identical --save files"
    wa = safetensors.load(os.path.join(tmp_path, "a.safetensors"))
    wc = safetensors.load(os.path.join(tmp_path, "c.safetensors"))
    # Every randomly initialized parameter must differ, not just one.
    for p in spec.params:
        if p.init in ("normal", "uniform"):
            assert not np.array_equal(wa[p.name], wc[p.name]), p.name
    assert la[0] != lc[0]


def test_seeded_init_follows_declaration(small_mlp, tmp_path):
    """--seed init draws each param from its declared init (here nn.Linear's
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))). One SGD step with lr 1e-30 (the
    compiler rejects lr 0) moves no weight by even one ulp, so the saved file
    shows the initial weights."""
    spec, _, data, _ = small_mlp
    exe = e2e_util.compile_spec(spec, str(tmp_path), parity.OptimizerConfig("sgd", lr=1e-30))
    save = os.path.join(tmp_path, "w0.safetensors")
    parity.run_exe(exe, 1, data=data, save=save, seed=3)
    w = safetensors.load(save)
    for p in spec.params:
        assert p.init == "uniform"
        a = w[p.name]
        assert np.abs(a).max() <= p.scale, p.name
        # U(-s, s) has std s / sqrt(3) = 0.577 s; generous bounds for n >= 5.
        assert 0.3 * p.scale < a.std() < 0.8 * p.scale, (p.name, a.std(), p.scale)


def test_gpt_same_seed_is_bitwise_identical(tmp_path, compiler):
    """The same for a small GPT (batched matmuls, softmax, layer norm,
    embedding-gradient scatter), on the runtime's synthetic data (no --data),
    with two threads: parallel kernels must not make results order-dependent."""
    from ztrain import models
    spec = models.gpt(batch=2, seq=8, vocab=16, layers=1, width=8, heads=2)
    exe = e2e_util.compile_spec(spec, str(tmp_path), parity.OptimizerConfig("adamw", lr=1e-2,
                                                                           weight_decay=0.1))
    blobs = []
    for tag in ("a", "b"):
        save = os.path.join(tmp_path, f"{tag}.safetensors")
        parity.run_exe(exe, 4, save=save, seed=11, threads=2)
        blobs.append(open(save, "rb").read())
    assert blobs[0] == blobs[1]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_avx512_kernels_train_the_baseline_bits(precision, tmp_path, compiler):
    """The AVX-512 build of the f32 kernels (chosen where the processor has
    it) trains bitwise what the baseline build trains (ZTRT_CPU_ISA=baseline):
    a GPT with gelu, softmax, dropout and AdamW, 4 steps, weights and losses;
    in bf16 the master-weight update of bf16 parameters too."""
    from ztrain import models
    spec = models.gpt(batch=4, seq=32, vocab=32, layers=2, width=32, heads=4, dropout=0.1)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-2),
                                extra=[f"--precision={precision}"])
    out = {}
    for isa in ("default", "baseline"):
        save, report = tmp_path / f"{isa}.safetensors", tmp_path / f"{isa}.json"
        env = {} if isa == "default" else {"ZTRT_CPU_ISA": "baseline"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            parity.run_exe(exe, 4, save=save, report=report, seed=3, threads=2)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k)
                else:
                    os.environ[k] = v
        r = parity.read_report(str(report))
        out[isa] = (save.read_bytes(), parity.report_losses(r).tolist(), r["device"])
    assert out["default"][0] == out["baseline"][0]
    assert out["default"][1] == out["baseline"][1]
    assert "AVX-512" not in out["baseline"][2]
    with open("/proc/cpuinfo") as fh:
        flags = set(next((l for l in fh if l.startswith("flags")), "").split())
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
        assert out["default"][2].endswith("(AVX-512 kernels)"), out["default"][2]
