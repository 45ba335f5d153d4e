"""Parity with PyTorch: the same model, weights, data and optimizer in ztrain
and in torch (python/ztrain/torch_ref.py) follow the same loss curve and end
at the same weights."""

import numpy as np
import pytest

from ztrain import models, parity

STEPS = 20

# Why 1e-4, norm-wise, in float32:
# - One float32 rounding is 6e-8 relative. A GEMM or a reduction of K terms
#   computed in a different order (OpenBLAS blocking vs MKL/oneDNN, our
#   softmax / layer-norm / cross-entropy loops vs ATen's vectorized ones)
#   differs by O(sqrt(K) * eps) ~ 1e-6 relative for the K <= 256 here.
# - Training compounds it: 20 steps each start from slightly different
#   weights, and Adam divides by sqrt(v) + eps, so an element whose gradient
#   is tiny (a near-zero bias gradient, an embedding row seen once) gets an
#   O(lr) update whose sign and size depend on the last few bits of that
#   gradient. Measured norm-wise over a tensor these outliers average out;
#   elementwise they would not (and relative error of weights near zero is
#   meaningless anyway).
# - 1e-4 is ~100x the drift we expect from reordering alone, and ~100x below
#   what any real bug gives (a wrong gradient, an off-by-one step count in
#   bias correction, a transposed weight or a misread batch changes the loss
#   or the weights by 1e-2 or more within a few steps).
# The loss is a scalar; the same bound applies to |a - b| / |b| per step.
TOL = 1e-4

# Parameters whose true gradient is exactly zero (parity.zero_gradient_params:
# the attention key bias b_k adds q.b_k to every score of a softmax row, and
# softmax is shift-invariant). Both sides compute that gradient as rounding
# noise (~1e-9) and Adam turns it into updates (damped by eps = 1e-8) with the
# noise's sign, so the two trajectories of b_k are not comparable at 1e-4
# (measured ~3e-4 from a random init). They are held to 1e-2: far below what
# a real bug gives, while every other GPT weight is held to TOL.
NOISE_TOL = 1e-2


def mlp_spec():
    return models.mlp(batch=16, in_features=32, hidden=[64, 32], classes=10)


def gpt_spec():
    return models.gpt(batch=4, seq=8, vocab=32, layers=2, width=16, heads=2)


def llama_spec():
    return models.llama(batch=4, seq=8, vocab=32, layers=2, width=16, heads=2)


def llama_gqa_spec():
    return models.llama(batch=4, seq=8, vocab=32, layers=2, width=32, heads=4, kv_heads=2,
                        tie_embeddings=False)


CASES = [
    # (id, spec builder, optimizer, samples N)
    # N not a multiple of B: later steps wrap around inside a batch.
    ("mlp-adam", mlp_spec, parity.OptimizerConfig("adam", lr=1e-3), 56),
    ("mlp-adamw", mlp_spec,
     parity.OptimizerConfig("adamw", lr=2e-3, beta1=0.8, beta2=0.99, eps=1e-7,
                            weight_decay=0.1), 56),
    ("mlp-sgd-momentum", mlp_spec,
     parity.OptimizerConfig("sgd", lr=0.05, momentum=0.9, dampening=0.1,
                            weight_decay=1e-3), 56),
    ("gpt-adam", gpt_spec, parity.OptimizerConfig("adam", lr=1e-3), 10),
    # RMSNorm, SwiGLU, RoPE, no biases, tied embeddings; against the
    # transformers-style modules in torch_ref (float32 RoPE tables as
    # LlamaRotaryEmbedding computes them).
    ("llama-adamw", llama_spec,
     parity.OptimizerConfig("adamw", lr=1e-3, weight_decay=0.1), 10),
    # Grouped-query attention (transformers' repeat_kv) and an untied lm_head.
    # Judged against float64 too (F64_ARBITER).
    ("llama-gqa-untied-adamw", llama_gqa_spec,
     parity.OptimizerConfig("adamw", lr=1e-3, weight_decay=0.1), 10),
]


# Cases where torch float32 itself drifts from the exact trajectory by more
# than TOL: measured for llama-gqa-untied-adamw, layer 0's o_proj is 1.45e-4
# from torch float32 while ztrain is 2.7e-6 from torch float64 and torch
# float32 1.4e-4 from it (an Adam step on a near-zero gradient element, as
# TOL's note says). There float64 is the arbiter: a weight tensor passes when
# it is within TOL of torch float32 or within TOL of float64, and every
# tensor must be within TOL of float64. (Passing only when no further from
# float64 than torch float32 made the test depend on which float32
# trajectory the machine's BLAS kernels favour: on a CPU without AVX-512,
# 2026-11-29, o_proj was 1.09e-4 from torch float32, 6.4e-5 from float64,
# torch float32 4.5e-5 from float64.)
F64_ARBITER = {"llama-gqa-untied-adamw"}


@pytest.mark.parametrize("name,make_spec,opt,samples", CASES, ids=[c[0] for c in CASES])
def test_parity(name, make_spec, opt, samples, tmp_path, compiler):
    spec = make_spec()
    init = parity.make_init(spec, seed=0)
    # Start from weights where nothing is exactly 0 or 1, so biases and
    # layer-norm parameters get a non-trivial first step too.
    rng = np.random.default_rng(42)
    init = {k: (v + rng.normal(0, 0.02, v.shape)).astype(np.float32) for k, v in init.items()}
    data = parity.make_data(spec, samples=samples, seed=7)
    r = parity.run_parity(spec, STEPS, opt, init=init, data=data, workdir=str(tmp_path),
                          float64_reference=name in F64_ARBITER)
    print(r.table())

    assert len(r.ztrain_losses) == STEPS
    # The loss must move, or the comparison says nothing about the updates.
    assert abs(r.torch_losses[-1] - r.torch_losses[0]) > 100 * TOL * abs(r.torch_losses[0])
    loss_err = r.loss_rel_errors()
    bad = [(i + 1, r.ztrain_losses[i], r.torch_losses[i], e)
           for i, e in enumerate(loss_err) if not e <= TOL]
    assert not bad, f"steps whose loss differs by > {TOL} relative (step, ztrain, torch, err): {bad}"

    missing = sorted(set(r.torch_weights) - set(r.ztrain_weights))
    assert not missing, f"--save file lacks parameters {missing}"
    w_err = r.weight_rel_errors()
    noise_only = parity.zero_gradient_params(spec)
    f64 = r.float64_errors()
    bad = {k: e for k, e in w_err.items()
           if not e <= (NOISE_TOL if k in noise_only else TOL)
           and not (f64 and f64[k][0] <= TOL)}
    assert not bad, f"final weights differ by > {TOL} norm-wise: {bad}"
    if f64:
        far = {k: e for k, (e, _) in f64.items() if not e <= TOL}
        assert not far, f"final weights differ from torch float64 by > {TOL}: {far}"
