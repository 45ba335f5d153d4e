"""Module-level buffers (train.buffer): non-trainable tensors every rank
holds whole, filled by their rule or from --init, carried by --save and by
checkpoints, priced by zero-report.

The model: causal self-attention over [B, T, C] inputs whose scores are
masked by an i32 `causal` buffer (train.masked_fill) and whose values are
scaled by an f32 table buffer, then a cross entropy. Its gradients reach
the one parameter through both buffers' uses, so a buffer read wrongly
(wrong storage, wrong values, a partitioned copy) changes the numbers.
"""

import json

import numpy as np
import pytest

import e2e_util
from ztrain import ir, parity, safetensors

T, C = 4, 6


def build(batch, table_init=("uniform", 1.0)):
    m = ir.Module()
    w = m.param("w", [C, C], "normal", 0.5)
    mask = m.buffer("attn.mask", [T, T], "i32", "causal")
    table = m.buffer("table", [T, C], "f32", *table_init)
    f = m.entry("loss")
    x = f.arg("x", [batch, T, C])
    y = f.arg("y", [batch, T], "i32")
    h = f.matmul(x, f.param_read(w), transpose_b=True)                   # [B,T,C]
    h = f.mul(h, f.broadcast(f.buffer_read(table), [0], [batch]))
    s = f.matmul(h, h, transpose_b=True)                                 # [B,T,T]
    s = f.masked_fill(s, f.buffer_read(mask), float("-inf"))
    o = f.matmul(f.softmax(s), h)                                        # [B,T,C]
    f.ret(f.cross_entropy(f.reshape(o, [batch * T, C]), f.reshape(y, [batch * T])))
    return m


def data(samples, seed=5):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((samples, T, C)).astype(np.float32),
            "y": rng.integers(0, C, (samples, T)).astype(np.int32)}


def init(seed=6):
    rng = np.random.default_rng(seed)
    return {"w": (rng.standard_normal((C, C)) * 0.5).astype(np.float32)}


mpirun = e2e_util.mpirun


def files(tmp_path, samples):
    init_path, data_path = tmp_path / "init.safetensors", tmp_path / "data.safetensors"
    safetensors.save(str(init_path), init())
    safetensors.save(str(data_path), data(samples))
    return str(init_path), str(data_path)


def test_rules_fill_the_buffers(tmp_path):
    """The runtime's causal and uniform rules are the documented ones
    (ir.Buffer.value computes them independently in numpy), and --save
    writes buffers after the parameters."""
    m = build(2)
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd", lr=0.1))
    init_path, data_path = files(tmp_path, 2)
    saved = tmp_path / "saved.safetensors"
    parity.run_exe(exe, 1, init=init_path, data=data_path, save=saved, seed=17)
    got = safetensors.load(str(saved))
    assert list(got) == ["w", "attn.mask", "table"]
    mask = m.buffers_by_name["attn.mask"].value()
    assert got["attn.mask"].dtype == np.int32
    assert np.array_equal(got["attn.mask"], mask)
    assert np.array_equal(mask, np.triu(np.ones((T, T), np.int32), 1))
    # Both sides compute (2 u - 1) * scale in double from the same 24 bits
    # and round once to float: bitwise.
    assert np.array_equal(got["table"], m.buffers_by_name["table"].value(seed=17))


def test_normal_rule_matches_the_python_generator(tmp_path):
    m = build(2, table_init=("normal", 0.3))
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd", lr=0.1))
    init_path, data_path = files(tmp_path, 2)
    saved = tmp_path / "saved.safetensors"
    parity.run_exe(exe, 1, init=init_path, data=data_path, save=saved, seed=3)
    want = m.buffers_by_name["table"].value(seed=3)
    # Box-Muller in double through C's and numpy's log / cos (each within
    # an ulp of double), rounded once to float: at most 1 float ulp apart.
    np.testing.assert_allclose(safetensors.load(str(saved))["table"], want, rtol=1.2e-7, atol=0)


def test_init_file_overrides_the_rule_and_is_checked(tmp_path):
    m = build(2)
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd", lr=0.1))
    _, data_path = files(tmp_path, 2)
    table = np.arange(T * C, dtype=np.float32).reshape(T, C) / 10
    path = tmp_path / "with_table.safetensors"
    safetensors.save(str(path), dict(init(), table=table))
    saved = tmp_path / "saved.safetensors"
    parity.run_exe(exe, 2, init=path, data=data_path, save=saved)
    got = safetensors.load(str(saved))
    assert np.array_equal(got["table"], table), "the step must not write a buffer"
    assert np.array_equal(got["attn.mask"], np.triu(np.ones((T, T), np.int32), 1))

    safetensors.save(str(path), dict(init(), table=table[:, :3].copy()))
    p = parity.run_exe(exe, 1, init=path, data=data_path, check=False)
    assert p.returncode != 0
    assert f"tensor 'table' has shape [4, 3], the model expects [4, 6]" in p.stderr, p.stderr
    assert p.stderr.count("error") == 1, p.stderr


def test_gradient_matches_torch_autograd(tmp_path):
    """One SGD(lr=1) step: init - saved is the compiled gradient; torch
    float64 autograd of the same IR (ztrain.torch_ref.run_ir, the buffers
    bound to the values --save wrote) gives the reference."""
    import torch
    from ztrain import torch_ref
    m = build(3)
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd", lr=1.0))
    init_path, data_path = files(tmp_path, 3)
    saved_path, report = tmp_path / "saved.safetensors", tmp_path / "r.json"
    parity.run_exe(exe, 1, init=init_path, data=data_path, save=saved_path, report=report)
    saved = safetensors.load(str(saved_path))
    grad = init()["w"].astype(np.float64) - saved["w"]
    state = {"w": torch.tensor(init()["w"], dtype=torch.float64, requires_grad=True),
             "attn.mask": torch.from_numpy(saved["attn.mask"]),
             "table": torch.tensor(saved["table"], dtype=torch.float64)}
    d = data(3)
    loss = torch_ref.run_ir(m, state, {"x": torch.tensor(d["x"], dtype=torch.float64),
                                        "y": torch.from_numpy(d["y"])})
    loss.backward()
    z_loss = parity.report_losses(parity.read_report(str(report)))[0]
    # float32 against float64 on one forward pass of O(1) values: ~1e-7.
    assert abs(z_loss - float(loss)) <= 1e-5 * abs(float(loss))
    # The gradient is a float32 backward pass (~1e-6 relative) plus the
    # float32 rounding of init - saved at lr = 1 (|w| ~ 0.5, ulp 6e-8,
    # against gradients ~1e-2): 1e-4 norm-wise leaves >10x room while a
    # missing term through either buffer is O(1) off.
    assert parity.rel_err(grad, state["w"].grad.numpy()) <= 1e-4


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stages_match_one_process(stage, n, tmp_path):
    micro = 2
    init_path, data_path = files(tmp_path, 3 * n * micro)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    ref = e2e_util.compile_text(build(n * micro).to_mlir(), str(tmp_path), opt, name="ref")
    exe = e2e_util.compile_text(build(micro).to_mlir(), str(tmp_path), opt, name=f"dp{n}",
                                extra=["--dp", str(n), "--zero-stage", str(stage)])
    parity.run_exe(ref, 6, init=init_path, data=data_path, save=tmp_path / "ref.safetensors",
                   threads=1)
    for run in ("dp", "again"):
        mpirun(n, [exe, "--steps", 6, "--init", init_path, "--data", data_path, "--threads", 1,
                   "--save", tmp_path / f"{run}.safetensors"])
    # The same run twice: the same bits.
    assert ((tmp_path / "dp.safetensors").read_bytes()
            == (tmp_path / "again.safetensors").read_bytes())
    want = safetensors.load(str(tmp_path / "ref.safetensors"))
    got = safetensors.load(str(tmp_path / "dp.safetensors"))
    assert list(got) == list(want)
    # Buffers are never partitioned or written: identical bits.
    for name in ("attn.mask", "table"):
        assert np.array_equal(got[name], want[name]), name
    # The N-rank mean of per-rank gradients is the one-process mean in
    # another summation order (~1e-7 relative per step); 6 Adam steps keep
    # the weights within ~1e-6 (test_zero_equivalence.py's TOL argument).
    assert parity.rel_err(got["w"], want["w"]) <= 1e-5


@pytest.mark.parametrize("stage", [0, 3])
def test_report_prices_the_buffers(stage, tmp_path):
    src = tmp_path / "model.mlir"
    src.write_text(build(2).to_mlir())
    exe = parity.compile_model(str(src), str(tmp_path / "model"),
                               parity.OptimizerConfig("adam", lr=1e-2),
                               ["--dp", "2", "--zero-stage", str(stage)])
    report = tmp_path / "r.json"
    mpirun(2, [exe, "--steps", 2, "--report", report, "--threads", 1])
    plan = json.loads(e2e_util.run([e2e_util.require_tool("ztrain-opt"), str(src),
                                    "--ztrain-training=optimizer=adam",
                                    f"--ztrain-zero=stage={stage} dp=2",
                                    "--plan-memory", "--zero-report=format=json",
                                    "-o", "/dev/null"]).stdout)["per_rank"]
    # A [4, 4] i32 mask and a [4, 6] f32 table: 16 * 4 + 24 * 4 bytes.
    assert plan["buffers"] == 160
    for rank in parity.read_report(str(report))["ranks"]:
        assert rank["memory"]["buffers"] == plan["buffers"]
        assert rank["memory"]["peak"] == plan["predicted_peak"]


def test_checkpoint_carries_the_buffers(tmp_path):
    """A resumed run reads the buffers back from the checkpoint, also those
    that came from --init; ztrain-consolidate writes them as --save does."""
    m = build(2)
    exe = e2e_util.compile_text(m.to_mlir(), str(tmp_path), parity.OptimizerConfig("adam", lr=1e-2),
                                extra=["--dp", "2", "--zero-stage", "3"])
    _, data_path = files(tmp_path, 8)
    path = tmp_path / "with_table.safetensors"
    safetensors.save(str(path), dict(init(), table=np.full((T, C), 0.75, np.float32)))
    common = ["--data", data_path, "--threads", 1]
    mpirun(2, [exe, "--steps", 6, "--init", path, "--save", tmp_path / "straight.safetensors"]
           + common)
    mpirun(2, [exe, "--steps", 3, "--init", path, "--save-checkpoint", tmp_path / "ck"] + common)
    mpirun(2, [exe, "--steps", 3, "--resume", tmp_path / "ck",
               "--save", tmp_path / "resumed.safetensors"] + common)
    assert ((tmp_path / "resumed.safetensors").read_bytes()
            == (tmp_path / "straight.safetensors").read_bytes())
    index = json.loads((tmp_path / "ck" / "global_step3" / "index.json").read_text())
    kinds = {t["name"]: t["kind"] for t in index["ztrain"]["tensors"]}
    assert kinds["table"] == "buffer" and kinds["attn.mask"] == "buffer"
    full = tmp_path / "full.safetensors"
    p = e2e_util.run([e2e_util.require_tool("ztrain-consolidate"), str(tmp_path / "ck"),
                      "-o", str(full)])
    assert p.returncode == 0, p.stderr
    got = safetensors.load(str(full))
    assert list(got) == ["w", "attn.mask", "table"]
    assert np.array_equal(got["table"], np.full((T, C), 0.75, np.float32))
