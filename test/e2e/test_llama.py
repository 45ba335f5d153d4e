"""The bundled Llama example (examples/llama.mlir: RMSNorm, SwiGLU, RoPE, no
biases, tied embeddings) trains on the bundled text; a bf16 checkpoint
initializes an f32 model. Parity with PyTorch is in test_parity.py
(llama-adamw, llama-gqa-untied-adamw), ZeRO equivalence with grouped-query
attention and an untied head in test_zero_equivalence.py."""

import os
import subprocess
import sys

import numpy as np
import pytest

from ztrain import models, parity, safetensors
from ztrain.ir import IRError

import e2e_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_llama_example_learns_the_bundled_text(tmp_path):
    exe = parity.compile_model(os.path.join(REPO, "examples", "llama.mlir"),
                               str(tmp_path / "llama"),
                               parity.OptimizerConfig("adamw", lr=3e-3, weight_decay=0.01))
    report = str(tmp_path / "report.json")
    parity.run_exe(exe, steps=60, data=os.path.join(REPO, "examples", "data",
                                                    "genesis-kjv.txt"),
                   report=report, seed=1, threads=1)
    losses = parity.report_losses(parity.read_report(report))
    assert len(losses) == 60
    # Byte tokens: the first loss is about ln(256) = 5.5 (uniform over the
    # vocabulary). English text has a few bits of entropy per byte; a model
    # that learns anything is below 3.5 within 60 steps (measured ~3.0 at
    # step 50 with --seed 1); one that does not stays near 5.5.
    assert abs(losses[0] - 5.55) < 0.5, losses[:5]
    assert losses[-5:].mean() < 3.5, losses[-10:]


def test_a_bf16_checkpoint_starts_an_f32_model_from_its_values(tmp_path):
    """Most Hugging Face Llama checkpoints are stored in bf16. --init widens
    each value into the f32 model exactly, so training from the bf16 file
    is bitwise training from the same values stored as F32 (grouped-query
    attention and an untied lm_head, as Llama 2/3 and TinyLlama have)."""
    spec = models.llama(batch=2, seq=8, vocab=32, layers=1, width=16, heads=2,
                        kv_heads=1, tie_embeddings=False)
    init = parity.make_init(spec, seed=0)
    bf16_path, f32_path = str(tmp_path / "bf16.safetensors"), str(tmp_path / "f32.safetensors")
    safetensors.save(bf16_path, init, bf16=list(init))
    widened = safetensors.load(bf16_path)
    # The rounding changed the weights, so the comparison below says that
    # the bf16 values (not the f32 ones they came from) were loaded.
    assert sum(not np.array_equal(widened[k], init[k]) for k in init) >= len(init) - 3
    safetensors.save(f32_path, widened)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, parity.make_data(spec, samples=6, seed=1))
    exe = e2e_util.compile_spec(spec, str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-2), name="llama")
    saved = {}
    for name, path in (("bf16", bf16_path), ("f32", f32_path)):
        saved[name] = str(tmp_path / f"{name}-out.safetensors")
        parity.run_exe(exe, steps=3, init=path, data=data, save=saved[name], threads=1)
    with open(saved["bf16"], "rb") as a, open(saved["f32"], "rb") as b:
        assert a.read() == b.read(), "training from the bf16 file differs from its values in F32"
    assert "lm_head.weight" in safetensors.load(saved["bf16"])


def test_bad_grouped_query_shapes_are_one_line():
    with pytest.raises(IRError, match=r"llama: heads 4 is not a multiple of kv_heads 3"):
        models.llama(batch=1, seq=4, vocab=8, layers=1, width=16, heads=4, kv_heads=3)
    p = subprocess.run([sys.executable, "-m", "ztrain.models", "llama", "--heads", "4",
                        "--kv-heads", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert p.returncode == 1 and p.stderr == (
        "error: llama: heads 4 is not a multiple of kv_heads 0\n"), p.stderr
