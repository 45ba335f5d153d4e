"""The Python side on its own: safetensors I/O, the model builders against the
PyTorch reference modules, the examples being current and parseable."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

import e2e_util
from conftest import REPO
from ztrain import ir, models, parity, safetensors, torch_ref


def test_safetensors_roundtrip_and_layout(tmp_path):
    t = {"w": np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5,
         "ids": np.array([[1, -2], [3, 4]], np.int32),
         "big": np.array([2**40, -1], np.int64),
         "scalar": np.float32(3.25)}
    path = str(tmp_path / "t.safetensors")
    safetensors.save(path, t, {"format": "pt"})
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"format": "pt"}
    assert header["w"]["dtype"] == "F32" and header["w"]["shape"] == [3, 4]
    assert header["big"]["dtype"] == "I64" and header["ids"]["dtype"] == "I32"
    for name, info in header.items():
        if name != "__metadata__":
            b, e = info["data_offsets"]
            assert b % np.dtype(safetensors.DTYPES[info["dtype"]]).itemsize == 0
    back, meta = safetensors.load(path, with_metadata=True)
    assert set(back) == set(t)
    for k in t:
        assert back[k].dtype == np.asarray(t[k]).dtype and np.array_equal(back[k], t[k])
    # Corrupt files are rejected with a message, not misread.
    with pytest.raises(safetensors.SafetensorsError):
        safetensors.load_bytes(raw[:-4])
    with pytest.raises(safetensors.SafetensorsError):
        safetensors.load_bytes(raw[:6])


@pytest.mark.parametrize("spec", [models.mlp(4, 6, [5, 7], 3),
                                  models.gpt(2, 5, 11, 2, 8, 2)], ids=["mlp", "gpt"])
def test_builder_matches_torch_module(spec):
    """The IR (interpreted op by op) and the nn.Module compute the same loss and
    gradients in float64: the parity test then only tests the compiler."""
    rng = np.random.default_rng(3)
    init = {k: (v + rng.normal(0, 0.1, v.shape)).astype(np.float32)
            for k, v in parity.make_init(spec, 0).items()}
    batch = {k: torch.from_numpy(v).double() if v.dtype == np.float32 else torch.from_numpy(v)
             for k, v in parity.batch_for_step(parity.make_data(spec), 2, spec.batch).items()}
    m = torch_ref.load_state(torch_ref.from_spec(spec), init).double()
    assert set(m.state_dict()) == {p.name for p in spec.params}
    l1 = m(*m.inputs(batch))
    l1.backward()
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in init.items()}
    l2 = torch_ref.run_ir(spec.module, P, batch)
    l2.backward()
    assert abs(float(l1) - float(l2)) < 1e-12
    grads = dict(m.named_parameters())
    for k in P:
        assert torch.allclose(grads[k].grad, P[k].grad, rtol=1e-10, atol=1e-14), k


def test_builder_rejects_bad_shapes():
    m = ir.Module()
    f = m.entry()
    a = f.arg("a", [2, 3])
    with pytest.raises(ir.IRError):
        f.matmul(a, a)
    with pytest.raises(ir.IRError):
        f.add(a, f.arg("b", [3, 2]))
    with pytest.raises(ir.IRError):
        f.softmax(a, causal=True)
    assert ir.fmt_float(1e-5) == "1.0e-05" and ir.fmt_float(2) == "2.0"
    assert ir.symbol_ref("h.0.attn.q_proj.weight") == "@h.0.attn.q_proj.weight"
    assert ir.symbol_ref("0.weight") == '@"0.weight"'


@pytest.mark.parametrize("build,message", [
    (lambda m, f: m.param("w", [3, 0], init="zeros"), "dimensions must be positive"),
    (lambda m, f: f.arg("x", [0, 5]), "dimensions must be positive"),
    (lambda m, f: m.param("w", [3, 5], init="normal", scale=-0.1),
     "needs a positive finite scale"),
    (lambda m, f: m.param("fc w", [3, 5], init="zeros"), "no whitespace"),
    (lambda m, f: f.arg("the x", [2, 5]), "no whitespace"),
    (lambda m, f: m.buffer("", [2], init="zeros"), "must be non-empty"),
    (lambda m, f: f.layer_norm(f.arg("x", [2, 4]), None, None), "not a value"),
    (lambda m, f: models.gpt(1, 4, 1, 1, 8, 2), "vocab must be >= 2"),
    (lambda m, f: models.llama(1, 4, 8, 1, 8, 2, hidden=0), "hidden size must be positive"),
])
def test_builder_refuses_what_the_compiler_would(build, message):
    """What ztrain-compile would refuse (an empty tensor, a negative
    initializer scale, a name that cannot be a data or checkpoint key, a
    missing operand) is an IRError when the builder is called, not a
    compiler error later or a Python AttributeError."""
    m = ir.Module()
    with pytest.raises(ir.IRError, match=message):
        build(m, m.entry())


@pytest.mark.parametrize("name", ["mlp", "gpt", "llama"])
def test_examples_are_current_and_parse(name, tmp_path):
    """examples/*.mlir equal what examples/regen.sh generates, and ztrain-opt
    parses and verifies them."""
    out = tmp_path / "examples"
    out.mkdir()
    script = os.path.join(REPO, "examples", "regen.sh")
    # Regenerate into a copy of the script's folder layout.
    text = open(script).read().replace('here=$(cd "$(dirname "$0")" && pwd)',
                                       f'here="{out}"')
    text = text.replace('"$here/../python', f'"{os.path.join(REPO, "python")}')
    (out / "regen.sh").write_text(text)
    subprocess.run(["sh", str(out / "regen.sh")], check=True,
                   env=dict(os.environ, PYTHON=sys.executable))
    fresh = (out / f"{name}.mlir").read_text()
    checked_in = open(os.path.join(REPO, "examples", f"{name}.mlir")).read()
    assert fresh == checked_in, f"examples/{name}.mlir is stale: run examples/regen.sh"
    opt = e2e_util.require_tool("ztrain-opt")
    r = e2e_util.run([opt, os.path.join(REPO, "examples", f"{name}.mlir")])
    assert r.returncode == 0, r.stderr


def test_signature_tables_are_the_docs_tables():
    """docs/python.md's builder signatures are the code's, printed by
    `python -m ztrain.models signatures` (a user should not have to read
    models.py for a parameter's name or default)."""
    with open(os.path.join(REPO, "docs", "python.md")) as fh:
        doc = fh.read()
    assert models.signatures_markdown() in doc, "docs/python.md's signature tables are " \
        "stale: regenerate them with python3 -m ztrain.models signatures"
