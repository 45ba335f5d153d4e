"""Gradient check of every train op through the compiled executable.

For each op a tiny model computes  loss = reduce sum(op(params...) * r)  with
r a fixed f32 input (for cross_entropy the op is the loss itself). Compiled
with --optimizer=sgd --lr=1, one step from --init leaves init - grad in the
--save file, so grad = init - saved. That gradient is compared with
  * central finite differences of the loss, each loss read from step 1 of
    --report of a 1-step run from a perturbed --init (checks autodiff and the
    runtime's backward kernels against the runtime's own forward), and
  * torch autograd in float64 of the same IR (ztrain.torch_ref.run_ir), which
    also checks the forward semantics against PyTorch's.
"""

import concurrent.futures as cf
import os
import zlib

import numpy as np
import pytest

import e2e_util
from ztrain import ir, parity, safetensors

# Finite differences in float32. Values are O(1), losses O(1..10).
# - h = 1e-2: truncation error of the central difference is h^2/6 * f''',
#   ~2e-5 * f''' with f''' = O(1..10) for gelu / softmax / layer_norm /
#   cross_entropy (0 for the ops that are linear in each parameter).
# - Rounding: the loss is a float32 sum of <= 24 O(1) terms, off by
#   ~sqrt(24) * 6e-8 * |L| ~ 1e-6 absolute (a few ulps more for
#   transcendental ops), and the difference quotient divides that by 2h:
#   ~1e-4 at worst.
# So |fd - grad| <= FD_ATOL + FD_RTOL * |grad| with FD_ATOL = 2e-3 leaves a
# 10x margin over both error sources, while a wrong gradient (missing
# transpose, wrong reduction dim, dropped term, wrong scale) is off by O(1).
H = 1e-2
FD_ATOL = 2e-3
FD_RTOL = 1e-2
# Against float64 autograd there is no truncation error: the only difference
# is float32 rounding in one forward and backward pass of a tiny op, a few
# ulps of the O(1) values (~1e-6 relative); 1e-4 norm-wise leaves 100x room.
AUTOGRAD_RTOL = 1e-4
# Keep ReLU inputs and the like at least this far from kinks so x +- h never
# crosses one (FD across a kink is meaningless).
KINK_MARGIN = 0.1


def _rand(rng, *shape, away_from_zero=False):
    x = rng.standard_normal(shape)
    if away_from_zero:
        x = np.sign(x) * (KINK_MARGIN + 0.2 + np.abs(x))
    return x.astype(np.float32)


class Case:
    """params: {name: array}; inputs: {name: array}; body(f, P, I) -> op result."""

    def __init__(self, name, params, inputs, body, direct_loss=False):
        self.name, self.params, self.inputs = name, params, inputs
        self.body, self.direct_loss = body, direct_loss

    def build(self, rng):
        m = ir.Module()
        decls = {k: m.param(k, v.shape, "normal", 1.0) for k, v in self.params.items()}
        f = m.entry("loss")
        I = {k: f.arg(k, v.shape, "i32" if v.dtype == np.int32 else "f32")
             for k, v in self.inputs.items()}
        P = {k: f.param_read(d) for k, d in decls.items()}
        out = self.body(f, P, I)
        data = dict(self.inputs)
        if self.direct_loss:
            loss = out
        else:
            r = f.arg("r", out.shape)
            data["r"] = _rand(rng, *out.shape)
            loss = f.reduce("sum", f.mul(out, r), range(len(out.shape)))
        f.ret(loss)
        return m, data


def _cases():
    rng = np.random.default_rng(1234)
    R = lambda *s, **k: _rand(rng, *s, **k)
    mm = lambda ta=False, tb=False: (lambda f, P, I: f.matmul(P["a"], P["b"], ta, tb))
    return [
        Case("matmul", {"a": R(2, 3), "b": R(3, 4)}, {}, mm()),
        Case("matmul_ta", {"a": R(3, 2), "b": R(3, 4)}, {}, mm(ta=True)),
        Case("matmul_tb", {"a": R(2, 3), "b": R(4, 3)}, {}, mm(tb=True)),
        Case("matmul_ta_tb", {"a": R(3, 2), "b": R(4, 3)}, {}, mm(True, True)),
        Case("matmul_batched", {"a": R(2, 2, 3), "b": R(2, 3, 2)}, {}, mm()),
        Case("matmul_batched_tb_4d", {"a": R(2, 1, 2, 3), "b": R(2, 1, 2, 3)}, {},
             mm(tb=True)),
        Case("matmul_shared_b", {"a": R(2, 2, 3), "b": R(3, 2)}, {}, mm()),
        Case("matmul_shared_b_tb", {"a": R(2, 2, 3), "b": R(2, 3)}, {}, mm(tb=True)),
        Case("matmul_shared_b_ta", {"a": R(2, 3, 2), "b": R(3, 2)}, {}, mm(ta=True)),
        Case("add", {"a": R(2, 3), "b": R(2, 3)}, {}, lambda f, P, I: f.add(P["a"], P["b"])),
        Case("sub", {"a": R(2, 3), "b": R(2, 3)}, {}, lambda f, P, I: f.sub(P["a"], P["b"])),
        Case("mul", {"a": R(2, 3), "b": R(2, 3)}, {}, lambda f, P, I: f.mul(P["a"], P["b"])),
        # Same value on both sides: the gradient of x*x must sum both uses.
        Case("mul_same_operand", {"a": R(2, 3)}, {}, lambda f, P, I: f.mul(P["a"], P["a"])),
        Case("scale", {"a": R(2, 3)}, {}, lambda f, P, I: f.scale(P["a"], -0.75)),
        Case("bias_add", {"x": R(2, 2, 3), "b": R(3)}, {},
             lambda f, P, I: f.bias_add(P["x"], P["b"])),
        Case("relu", {"x": R(2, 4, away_from_zero=True)}, {},
             lambda f, P, I: f.relu(P["x"])),
        Case("gelu", {"x": R(2, 4)}, {}, lambda f, P, I: f.gelu(P["x"])),
        Case("layer_norm", {"x": R(2, 4), "g": R(4), "b": R(4)}, {},
             lambda f, P, I: f.layer_norm(P["x"], P["g"], P["b"], 1e-5)),
        Case("layer_norm_3d", {"x": R(2, 2, 3), "g": R(3), "b": R(3)}, {},
             lambda f, P, I: f.layer_norm(P["x"], P["g"], P["b"], 1e-5)),
        Case("softmax", {"x": R(2, 4)}, {}, lambda f, P, I: f.softmax(P["x"])),
        Case("softmax_causal", {"x": R(2, 3, 3)}, {},
             lambda f, P, I: f.softmax(P["x"], causal=True)),
        Case("attention_causal", {"q": R(2, 2, 3, 4), "k": R(2, 2, 3, 4),
                                  "v": R(2, 2, 3, 4)}, {},
             lambda f, P, I: f.attention(P["q"], P["k"], P["v"], causal=True)),
        Case("attention_cross", {"q": R(3, 2, 4), "k": R(3, 5, 4), "v": R(3, 5, 4)},
             {}, lambda f, P, I: f.attention(P["q"], P["k"], P["v"], scale=0.7)),
        # Grouped-query: 4 query heads over 2 key / value heads.
        Case("attention_grouped", {"q": R(2, 4, 3, 4), "k": R(2, 2, 3, 4),
                                   "v": R(2, 2, 3, 4)}, {},
             lambda f, P, I: f.attention(P["q"], P["k"], P["v"], causal=True)),
        Case("reshape", {"x": R(2, 3, 2)}, {}, lambda f, P, I: f.reshape(P["x"], [3, 4])),
        Case("transpose", {"x": R(2, 3, 2)}, {},
             lambda f, P, I: f.transpose(P["x"], [2, 0, 1])),
        Case("reduce_sum", {"x": R(2, 3, 2)}, {},
             lambda f, P, I: f.reduce("sum", P["x"], [1])),
        Case("reduce_mean", {"x": R(2, 3, 2)}, {},
             lambda f, P, I: f.reduce("mean", P["x"], [0, 2])),
        Case("broadcast", {"x": R(3)}, {},
             lambda f, P, I: f.broadcast(P["x"], [0, 2], [2, 2])),
        Case("cross_entropy", {"logits": R(3, 4)},
             {"labels": np.array([2, 0, 3], np.int32)},
             lambda f, P, I: f.cross_entropy(P["logits"], I["labels"]), direct_loss=True),
        Case("div", {"a": R(2, 3), "b": R(2, 3, away_from_zero=True)}, {},
             lambda f, P, I: f.div(P["a"], P["b"])),
        Case("neg", {"a": R(2, 3)}, {}, lambda f, P, I: f.neg(P["a"])),
        Case("silu", {"x": R(2, 4)}, {}, lambda f, P, I: f.silu(P["x"])),
        Case("sigmoid", {"x": R(2, 4)}, {}, lambda f, P, I: f.sigmoid(P["x"])),
        Case("exp", {"x": R(2, 4)}, {}, lambda f, P, I: f.exp(P["x"])),
        # sqrt / rsqrt of x*x + 0.5: positive inputs, away from the pole at 0.
        Case("sqrt", {"x": R(2, 4)}, {"c": np.full((2, 4), 0.5, np.float32)},
             lambda f, P, I: f.sqrt(f.add(f.mul(P["x"], P["x"]), I["c"]))),
        Case("rsqrt", {"x": R(2, 4)}, {"c": np.full((2, 4), 0.5, np.float32)},
             lambda f, P, I: f.rsqrt(f.add(f.mul(P["x"], P["x"]), I["c"]))),
        # Ties would make max non-differentiable; random normals have none.
        Case("reduce_max", {"x": R(2, 3, 4)}, {},
             lambda f, P, I: f.reduce("max", P["x"], [1])),
        Case("reduce_max_all", {"x": R(2, 3)}, {},
             lambda f, P, I: f.reduce("max", P["x"], [0, 1]), direct_loss=True),
        Case("rms_norm", {"x": R(2, 2, 4), "g": R(4)}, {},
             lambda f, P, I: f.rms_norm(P["x"], P["g"], 1e-5)),
        # [batch, seq, heads, head_dim] as Llama's q / k before the transpose,
        # and [batch, heads, seq, head_dim] after it.
        Case("rotary_embedding", {"x": R(1, 3, 2, 4)}, {},
             lambda f, P, I: f.rotary_embedding(P["x"], 1, 10000.0)),
        Case("rotary_embedding_seq_last", {"x": R(2, 4, 6)}, {},
             lambda f, P, I: f.rotary_embedding(P["x"], 1, 500.0)),
        # The mask ([3, 3], broadcast over x's leading dim) is a step input,
        # so its leading dim must equal the other inputs' batch (3).
        Case("masked_fill", {"x": R(3, 3, 3)},
             {"mask": np.triu(np.ones((3, 3), np.int32), 1)},
             lambda f, P, I: f.masked_fill(P["x"], I["mask"], -2.5)),
        Case("where", {"a": R(3, 3, 3), "b": R(3, 3, 3)},
             {"mask": np.array([[1, 0, 0], [0, 5, 1], [0, 0, -1]], np.int32)},
             lambda f, P, I: f.where(I["mask"], P["a"], P["b"])),
        # The torch reference draws the compiled op's mask (ztrain.rng) for
        # step 1 and seed 0, the runs' defaults; p = 0.4 drops ~10 of 24.
        Case("dropout", {"x": R(4, 6)}, {},
             lambda f, P, I: f.dropout(P["x"], 0.4, stream=2)),
        Case("slice", {"x": R(2, 5, 3)}, {}, lambda f, P, I: f.slice(P["x"], 1, 1, 3)),
        Case("slice_last_dim", {"x": R(2, 5)}, {}, lambda f, P, I: f.slice(P["x"], 1, 2, 2)),
        Case("concat", {"a": R(2, 1, 3), "b": R(2, 2, 3)}, {},
             lambda f, P, I: f.concat([P["a"], P["b"], P["a"]], 1)),
        Case("concat_dim0", {"a": R(1, 3), "b": R(2, 3)}, {},
             lambda f, P, I: f.concat([P["b"], P["a"]], 0)),
        # Repeated ids: the table gradient must accumulate.
        Case("embedding", {"table": R(4, 3)},
             {"ids": np.array([[1, 3], [1, 0]], np.int32)},
             lambda f, P, I: f.embedding(P["table"], I["ids"])),
    ]


CASES = _cases()


def _loss_of(exe, init, data_path, path):
    safetensors.save(path + ".safetensors", init)
    rep = path + ".json"
    parity.run_exe(exe, 1, init=path + ".safetensors", data=data_path, report=rep)
    return parity.report_losses(parity.read_report(rep))[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradcheck(case, tmp_path, compiler):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    module, data = case.build(rng)
    d = str(tmp_path)
    exe = e2e_util.compile_text(module.to_mlir(), d,
                                parity.OptimizerConfig("sgd", lr=1.0))
    data_path = os.path.join(d, "data.safetensors")
    safetensors.save(data_path, data)
    init = {k: v.copy() for k, v in case.params.items()}

    # Gradient from one SGD(lr=1) step: saved = init - grad.
    safetensors.save(os.path.join(d, "init.safetensors"), init)
    parity.run_exe(exe, 1, init=os.path.join(d, "init.safetensors"), data=data_path,
                   save=os.path.join(d, "saved.safetensors"),
                   report=os.path.join(d, "r.json"))
    saved = safetensors.load(os.path.join(d, "saved.safetensors"))
    loss0 = parity.report_losses(parity.read_report(os.path.join(d, "r.json")))[0]
    grad = {k: init[k].astype(np.float64) - saved[k].astype(np.float64) for k in init}

    # Float64 autograd of the same IR.
    import torch
    from ztrain import torch_ref
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in init.items()}
    Ind = {k: torch.tensor(v, dtype=torch.float64 if v.dtype == np.float32 else torch.int32)
           for k, v in data.items()}
    ref_loss = torch_ref.run_ir(module, P, Ind)
    ref_loss.backward()
    assert abs(loss0 - float(ref_loss)) <= 1e-5 * max(1.0, abs(float(ref_loss))), \
        f"forward: ztrain loss {loss0} vs torch float64 {float(ref_loss)}"
    for k in init:
        e = parity.rel_err(grad[k], P[k].grad.numpy())
        assert e <= AUTOGRAD_RTOL, \
            f"d loss / d {k}: ztrain {grad[k].ravel()} vs torch autograd " \
            f"{P[k].grad.numpy().ravel()} (norm-wise rel err {e:.2e})"

    # Central finite differences, every element of every parameter.
    jobs = []
    for k in init:
        for idx in np.ndindex(init[k].shape):
            for sign in (1, -1):
                p = {n: v.copy() for n, v in init.items()}
                p[k][idx] += np.float32(sign * H)
                jobs.append((k, idx, sign, p))
    with cf.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        losses = list(pool.map(
            lambda j: _loss_of(exe, j[1][3], data_path,
                               os.path.join(d, f"fd{j[0]}")), enumerate(jobs)))
    fd = {k: np.zeros(v.shape) for k, v in init.items()}
    for i in range(0, len(jobs), 2):
        (k, idx, _, p_plus), (_, _, _, p_minus) = jobs[i], jobs[i + 1]
        # Divide by the float32 points actually used, not by exactly 2h.
        span = float(p_plus[k][idx]) - float(p_minus[k][idx])
        fd[k][idx] = (losses[i] - losses[i + 1]) / span
    for k in init:
        bad = np.abs(fd[k] - grad[k]) > FD_ATOL + FD_RTOL * np.abs(grad[k])
        assert not bad.any(), \
            f"d loss / d {k}: finite differences {fd[k].ravel()} vs ztrain {grad[k].ravel()}"
