"""The bundled Llama example (examples/llama.mlir: RMSNorm, SwiGLU, RoPE, no
biases, tied embeddings) trains on the bundled text; a bf16 checkpoint
initializes an f32 model. Parity with PyTorch is in test_parity.py
(llama-adamw, llama-gqa-untied-adamw), ZeRO equivalence with grouped-query
attention and an untied head in test_zero_equivalence.py."""

import json
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


def test_llama3_rope_scaling_matches_transformers_rule(tmp_path):
    """Llama 3's RoPE scaling (rope_type "llama3") trains as torch with
    transformers' _compute_llama3_parameters does (torch_ref; 1e-4 as in
    test_parity.py), and the scaling changes the model: without it torch's
    losses are far from ztrain's, so the comparison sees the scaled
    frequencies. Head dim 8 and theta 10000 give wavelengths 6.3, 62.8,
    628 and 6283: with an original context of 64 and factors 1 and 4, one
    is kept (< 16), one blended, two stretched (> 64)."""
    cfg = dict(batch=4, seq=32, vocab=32, layers=2, width=32, heads=4, kv_heads=2,
               tie_embeddings=False)
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    spec = models.llama(**cfg, rope_scaling=scaling)
    init = parity.make_init(spec, seed=0)
    # Sharp attention (q and k weights of std 0.3, not 0.02), so that the
    # rotation angles matter to the loss: at 0.02 the scores are ~0, every
    # softmax row is near uniform, and the losses with and without the
    # scaling were 7e-6 apart.
    rng = np.random.default_rng(1)
    for k in init:
        if k.endswith(("q_proj.weight", "k_proj.weight")):
            init[k] = rng.normal(0, 0.3, init[k].shape).astype(np.float32)
    data = parity.make_data(spec, samples=8, seed=7)
    opt = parity.OptimizerConfig("adamw", lr=1e-3, weight_decay=0.1)
    r = parity.run_parity(spec, 10, opt, init=init, data=data, workdir=str(tmp_path))
    print(r.table())
    loss_err, weight_err = r.max_errors()
    assert loss_err <= 1e-4 and weight_err <= 1e-4, (loss_err, weight_err)
    plain, _ = parity.torch_train(models.llama(**cfg), init, data, 10, opt)
    apart = np.abs(plain - r.ztrain_losses) / np.abs(plain)
    # Measured 2.5e-3 apart (ztrain vs torch with the scaling: 1.4e-7); 1e-4,
    # the parity bound, would not tell them apart.
    assert apart.max() > 1e-3, apart


def test_bad_rope_scaling_is_one_line():
    with pytest.raises(IRError, match=r"rope_scaling type 'yarn' is not supported"):
        models.llama(batch=1, seq=4, vocab=8, layers=1, width=16, heads=2,
                     rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(IRError, match=r"rope_scaling lacks high_freq_factor"):
        models.llama(batch=1, seq=4, vocab=8, layers=1, width=16, heads=2,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                   "low_freq_factor": 1.0,
                                   "original_max_position_embeddings": 8192})
    with pytest.raises(IRError, match=r"rope_scaling type None is not supported"):
        models.llama(batch=1, seq=4, vocab=8, layers=1, width=16, heads=2,
                     rope_scaling={"factor": 8.0})
    with pytest.raises(IRError, match=r"0 < low_freq_factor < high_freq_factor"):
        models.llama(batch=1, seq=4, vocab=8, layers=1, width=16, heads=2,
                     rope_scaling=(8.0, 4.0, 1.0, 8192))


# config.json of meta-llama/Llama-3.2-1B and TinyLlama/TinyLlama-1.1B (the
# fields the builder reads, plus a few it ignores).
LLAMA_32_1B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": True,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "torch_dtype": "bfloat16", "vocab_size": 128256}
TINYLLAMA = {
    "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5632, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 22, "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "vocab_size": 32000}


@pytest.mark.parametrize("config,params", [(LLAMA_32_1B, 1_235_814_400),
                                           (TINYLLAMA, 1_100_048_384)],
                         ids=["llama-3.2-1b", "tinyllama-1.1b"])
def test_hugging_face_configs_build_the_published_models(config, params, tmp_path):
    """The builder reads a LlamaConfig into the same parameters the published
    checkpoints hold: the counts are the models' published sizes (what
    transformers' num_parameters() gives), and the names and shapes are
    LlamaForCausalLM's (no lm_head when tied)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = models.llama_from_hf_config(str(path), batch=1, seq=16)
    shapes = {p.name: tuple(p.shape) for p in spec.params}
    assert sum(int(np.prod(s)) for s in shapes.values()) == params
    C, H, KVH = config["hidden_size"], config["num_attention_heads"], \
        config["num_key_value_heads"]
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (C // H * KVH, C)
    assert ("lm_head.weight" in shapes) == (not config["tie_word_embeddings"])
    text = spec.to_mlir()
    if config["rope_scaling"]:
        assert "llama3_scaling = array<f64: 32.0, 1.0, 4.0, 8192.0>" in text
    else:
        assert "llama3_scaling" not in text
    # --layers truncates (a model to try things on); the rest stays.
    small = models.llama_from_hf_config(config, batch=1, seq=16, layers=1)
    assert small.config["layers"] == 1 and small.config["kv_heads"] == KVH


def test_unsupported_hugging_face_configs_are_one_line(tmp_path):
    with pytest.raises(IRError, match=r"not supported: attention_bias=True"):
        models.llama_from_hf_config(dict(TINYLLAMA, attention_bias=True), batch=1, seq=4)
    with pytest.raises(IRError, match=r"model_type 'mistral'"):
        models.llama_from_hf_config(dict(TINYLLAMA, model_type="mistral"), batch=1, seq=4)
    with pytest.raises(IRError, match=r"lacks intermediate_size"):
        cfg = dict(TINYLLAMA)
        del cfg["intermediate_size"]
        models.llama_from_hf_config(cfg, batch=1, seq=4)
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    p = subprocess.run([sys.executable, "-m", "ztrain.models", "llama", "--hf-config",
                        str(bad)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert p.returncode == 1 and p.stderr.startswith("error: llama: cannot read the config")
    assert p.stderr.count("\n") == 1, p.stderr


def test_newer_hugging_face_config_forms(tmp_path):
    """transformers >= 5 writes rope_parameters (theta and scaling in one
    dict); "default" is plain RoPE; initializer_range sets the init's std;
    partial rotary embeddings are refused, and so are flags that clash with
    the config."""
    newer = {k: v for k, v in LLAMA_32_1B.items() if k not in ("rope_theta", "rope_scaling")}
    newer["rope_parameters"] = dict(LLAMA_32_1B["rope_scaling"], rope_theta=500000.0)
    a = models.llama_from_hf_config(newer, batch=1, seq=8, layers=1).to_mlir()
    b = models.llama_from_hf_config(LLAMA_32_1B, batch=1, seq=8, layers=1).to_mlir()
    assert a == b
    plain = dict(TINYLLAMA, rope_scaling={"rope_type": "default"}, initializer_range=0.01)
    text = models.llama_from_hf_config(plain, batch=1, seq=8, layers=1).to_mlir()
    assert "llama3_scaling" not in text and "init(normal, 0.01)" in text
    with pytest.raises(IRError, match=r"not supported: partial_rotary_factor=0.5"):
        models.llama_from_hf_config(dict(TINYLLAMA, partial_rotary_factor=0.5), batch=1, seq=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINYLLAMA))
    p = subprocess.run([sys.executable, "-m", "ztrain.models", "llama", "--hf-config",
                        str(path), "--kv-heads", "2", "--width=64"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert p.returncode == 1 and p.stderr == (
        "error: llama: --hf-config sets --width, --kv-heads; leave them out\n"), p.stderr
