"""Model builders: train-dialect IR for an MLP, a GPT-2-style decoder and a
Llama-style decoder.

Standard library only. Parameter names are the PyTorch state_dict names of
the matching modules in `ztrain.torch_ref`, so a safetensors file written by
either side loads into the other.

    python -m ztrain.models mlp --batch 32 --in-features 784 --hidden 128 --classes 10
    python -m ztrain.models gpt --batch 8 --seq 64 --vocab 256 --layers 2 --width 64 --heads 4
    python -m ztrain.models llama --batch 8 --seq 64 --vocab 256 --layers 2 --width 64 --heads 4
"""

import argparse
import math
import sys

from .ir import Module, IRError, check_llama3_scaling

__all__ = ["ModelSpec", "mlp", "gpt", "llama", "llama_from_hf_config", "main"]


class ModelSpec:
    """A built model: its IR module plus the configuration that produced it."""

    def __init__(self, kind, config, module):
        self.kind = kind
        self.config = dict(config)
        self.module = module

    @property
    def batch(self):
        return self.config["batch"]

    @property
    def params(self):
        """[ir.Param] in declaration order (name, shape, init, scale)."""
        return list(self.module.params)

    @property
    def inputs(self):
        """[(name, shape, dtype)] of the step inputs; shape[0] is the batch."""
        return self.module.inputs

    def to_mlir(self):
        return self.module.to_mlir()

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"ModelSpec({self.kind}: {args})"


def _linear(m, f, x, name, fan_in, fan_out, w_init, b_init):
    """PyTorch nn.Linear: y = x @ W^T + b with W [out, in]."""
    w = m.param(f"{name}.weight", [fan_out, fan_in], *w_init)
    b = m.param(f"{name}.bias", [fan_out], *b_init)
    hint = name.replace(".", "_")
    y = f.matmul(x, f.param_read(w), transpose_b=True, hint=hint)
    return f.bias_add(y, f.param_read(b), hint=hint + "_b")


ATTENTION_KINDS = ("composed", "fused")


def _check_attention(kind, dropout, model):
    if kind not in ATTENTION_KINDS:
        raise IRError(f"{model}: attention must be one of {', '.join(ATTENTION_KINDS)}, "
                      f"got {kind!r}")
    if kind == "fused" and dropout > 0.0:
        raise IRError(f"{model}: attention='fused' has no dropout on the attention "
                      "probabilities; use attention='composed' with dropout > 0")


def _causal_attention(f, q, k, v, hint, dropout=0.0, kind="composed"):
    """softmax(q k^T / sqrt(D), causal) v for [B,H,T,D] heads, back to [B,T,H*D]
    (with dropout on the attention probabilities when dropout > 0). k and v
    may have fewer heads than q for "fused" (grouped-query).
    kind="composed": matmul, scale, causal softmax, matmul (the [T, T]
    probabilities are kept for the backward pass); "fused": one
    train.attention op, which keeps none."""
    B, H, T, D = q.shape
    if kind == "fused":
        y = f.attention(q, k, v, causal=True, scale=1.0 / math.sqrt(D),
                        hint=f"{hint}_attn")
        y = f.transpose(y, [0, 2, 1, 3], hint=f"{hint}_yt")
        return f.reshape(y, [B, T, H * D], hint=f"{hint}_yr")
    s = f.matmul(q, k, transpose_b=True, hint=f"{hint}_scores")
    s = f.scale(s, 1.0 / math.sqrt(D), hint=f"{hint}_scaled")
    att = f.softmax(s, causal=True, hint=f"{hint}_att")
    if dropout > 0.0:
        att = f.dropout(att, dropout, hint=f"{hint}_att_drop")
    y = f.matmul(att, v, hint=f"{hint}_y")                     # [B,H,T,D]
    y = f.transpose(y, [0, 2, 1, 3], hint=f"{hint}_yt")         # [B,T,H,D]
    return f.reshape(y, [B, T, H * D], hint=f"{hint}_yr")


def _llama3_scaling(rope_scaling):
    """None, or (factor, low_freq_factor, high_freq_factor, original) from a
    transformers rope_scaling dict or four numbers."""
    if rope_scaling is None:
        return None
    if isinstance(rope_scaling, dict):
        kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
        if kind == "default":
            return None
        if kind != "llama3":
            raise IRError(f"llama: rope_scaling type {kind!r} is not supported "
                          "(only 'llama3')")
        keys = ("factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings")
        missing = [k for k in keys if k not in rope_scaling]
        if missing:
            raise IRError(f"llama: rope_scaling lacks {', '.join(missing)}")
        rope_scaling = [rope_scaling[k] for k in keys]
    return check_llama3_scaling(rope_scaling, "llama")


def _lm_loss(f, x, embedding, targets, hint):
    """Mean next-token cross-entropy of x [B,T,C] against a [V,C] output
    embedding (the tied input embedding, or an lm_head of its own)."""
    B, T, _ = x.shape
    V = embedding.shape[0]
    logits = f.matmul(x, f.param_read(embedding, hint=hint), transpose_b=True,
                      hint="logits")
    logits = f.reshape(logits, [B * T, V], hint="logits_flat")
    flat_targets = f.reshape(targets, [B * T], hint="targets_flat")
    f.ret(f.cross_entropy(logits, flat_targets))


def mlp(batch, in_features, hidden=(128,), classes=10, init="torch",
        input_name="x", label_name="y"):
    """Linear(in, h0) relu ... Linear(h_last, classes), cross-entropy loss.

    Layers are named fc1, fc2, ... (state_dict `fc1.weight`, `fc1.bias`, ...).
    init="torch" mirrors nn.Linear's default distribution (weight and bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))); init="gpt" uses normal(0.02) weights
    and zero biases.
    """
    hidden = [int(h) for h in hidden]
    if batch <= 0 or in_features <= 0 or classes <= 1 or any(h <= 0 for h in hidden):
        raise IRError("mlp: sizes must be positive and classes >= 2")
    if init not in ("torch", "gpt"):
        raise IRError(f"mlp: init must be 'torch' or 'gpt', got {init!r}")
    m = Module()
    f = m.entry("loss")
    x = f.arg(input_name, [batch, in_features])
    y = f.arg(label_name, [batch], "i32")
    sizes = [in_features] + hidden + [classes]
    h = x
    for i in range(len(sizes) - 1):
        fan_in, fan_out = sizes[i], sizes[i + 1]
        if init == "torch":
            bound = 1.0 / math.sqrt(fan_in)
            w_init = b_init = ("uniform", bound)
        else:
            w_init, b_init = ("normal", 0.02), ("zeros", None)
        h = _linear(m, f, h, f"fc{i + 1}", fan_in, fan_out, w_init, b_init)
        if i < len(sizes) - 2:
            h = f.relu(h, hint=f"relu{i + 1}")
    f.ret(f.cross_entropy(h, y))
    cfg = dict(batch=batch, in_features=in_features, hidden=hidden, classes=classes,
               init=init, input_name=input_name, label_name=label_name)
    return ModelSpec("mlp", cfg, m)


def gpt(batch, seq, vocab, layers, width, heads, epsilon=1e-5, dropout=0.0,
        checkpoints=True, attention="composed"):
    """GPT-2-style decoder with tied input/output embeddings.

    Inputs "tokens" and "targets", both i32 [batch, seq]. State-dict names:
    wte.weight [V, C], wpe.weight [T, C], h.{i}.ln_1.{weight,bias},
    h.{i}.attn.{q_proj,k_proj,v_proj,c_proj}.{weight,bias},
    h.{i}.ln_2.{weight,bias}, h.{i}.mlp.{c_fc,c_proj}.{weight,bias},
    ln_f.{weight,bias}. Attention uses separate q/k/v projections (as the
    Hugging Face checkpoints' split c_attn gives them).

    dropout > 0 adds nanoGPT's four dropouts (train.dropout, streams in
    program order): on the embeddings (stream 0), and in layer i on the
    attention probabilities (1 + 3i), the attention output (2 + 3i) and
    the MLP output (3 + 3i).

    attention="fused" uses one train.attention op per layer instead of the
    composed matmul / scale / softmax / matmul: the same numbers (bitwise in
    f32 on the cpu backend), without keeping batch x heads x seq x seq
    probabilities per layer for the backward pass (no attention dropout).

    checkpoints=True marks each block's output `train.checkpoint`: with
    ztrain-compile --recompute=full|selective every block is one recomputed
    segment (torch.utils.checkpoint per block). The marks change nothing
    without --recompute.
    """
    B, T, V, L, C, H = (int(v) for v in (batch, seq, vocab, layers, width, heads))
    if min(B, T, V, C, H) <= 0 or L < 0:
        raise IRError("gpt: sizes must be positive")
    if V < 2:
        raise IRError(f"gpt: vocab must be >= 2 (a cross-entropy over {V} class is 0), got {V}")
    dropout = float(dropout)
    if not 0.0 <= dropout < 1.0:
        raise IRError(f"gpt: dropout must be in [0, 1), got {dropout}")
    _check_attention(attention, dropout, "gpt")
    if C % H:
        raise IRError(f"gpt: width {C} is not divisible by heads {H}")
    D = C // H
    normal = ("normal", 0.02)
    zeros = ("zeros", None)
    ones = ("ones", None)

    m = Module()
    f = m.entry("loss")
    tokens = f.arg("tokens", [B, T], "i32")
    targets = f.arg("targets", [B, T], "i32")
    wte = m.param("wte.weight", [V, C], *normal)
    wpe = m.param("wpe.weight", [T, C], *normal)

    def layer_norm(x, name):
        g = m.param(f"{name}.weight", [C], *ones)
        b = m.param(f"{name}.bias", [C], *zeros)
        return f.layer_norm(x, f.param_read(g), f.param_read(b), epsilon,
                            hint=name.replace(".", "_"))

    def linear(x, name, fan_in, fan_out):
        return _linear(m, f, x, name, fan_in, fan_out, normal, zeros)

    def heads_first(x, hint):  # [B,T,C] -> [B,H,T,D]
        x = f.reshape(x, [B, T, H, D], hint=hint + "_r")
        return f.transpose(x, [0, 2, 1, 3], hint=hint + "_t")

    tok = f.embedding(f.param_read(wte), tokens, hint="tok_emb")
    pos = f.broadcast(f.param_read(wpe), [0], [B], hint="pos_emb")
    x = f.add(tok, pos, hint="x0")

    def drop(x, hint):
        return f.dropout(x, dropout, hint=hint) if dropout > 0.0 else x

    x = drop(x, "x0_drop")
    for i in range(L):
        p = f"h.{i}"
        a = layer_norm(x, f"{p}.ln_1")
        q = heads_first(linear(a, f"{p}.attn.q_proj", C, C), f"h{i}_q")
        k = heads_first(linear(a, f"{p}.attn.k_proj", C, C), f"h{i}_k")
        v = heads_first(linear(a, f"{p}.attn.v_proj", C, C), f"h{i}_v")
        y = linear(_causal_attention(f, q, k, v, f"h{i}", dropout, attention),
                   f"{p}.attn.c_proj", C, C)
        x = f.add(x, drop(y, f"h{i}_attn_drop"), hint=f"h{i}_res1")
        a = layer_norm(x, f"{p}.ln_2")
        a = linear(a, f"{p}.mlp.c_fc", C, 4 * C)
        a = f.gelu(a, hint=f"h{i}_gelu")
        a = linear(a, f"{p}.mlp.c_proj", 4 * C, C)
        x = f.add(x, drop(a, f"h{i}_mlp_drop"), hint=f"h{i}_res2")
        if checkpoints:
            f.checkpoint(x)
    _lm_loss(f, layer_norm(x, "ln_f"), wte, targets, "wte_out")
    cfg = dict(batch=B, seq=T, vocab=V, layers=L, width=C, heads=H, epsilon=epsilon)
    if dropout > 0.0:
        cfg["dropout"] = dropout
    return ModelSpec("gpt", cfg, m)


def llama(batch, seq, vocab, layers, width, heads, hidden=None, epsilon=1e-5,
          rope_theta=10000.0, checkpoints=True, attention="composed", kv_heads=None,
          tie_embeddings=True, rope_scaling=None, initializer_range=0.02):
    """Llama-style decoder: RMSNorm, SwiGLU, rotary embeddings, no biases,
    grouped-query attention, tied or untied input/output embeddings.

    Inputs "tokens" and "targets", both i32 [batch, seq]. Hugging Face
    LlamaForCausalLM state-dict names: model.embed_tokens.weight [V, C],
    model.layers.{i}.input_layernorm.weight [C],
    model.layers.{i}.self_attn.{q,o}_proj.weight [C, C],
    model.layers.{i}.self_attn.{k,v}_proj.weight [KVH*D, C],
    model.layers.{i}.post_attention_layernorm.weight [C],
    model.layers.{i}.mlp.{gate,up}_proj.weight [F, C],
    model.layers.{i}.mlp.down_proj.weight [C, F], model.norm.weight [C],
    and lm_head.weight [V, C] when the embeddings are not tied.
    `hidden` (F) defaults to Llama's rule: 2/3 of 4C rounded up to a
    multiple of 8. Weights are N(0, initializer_range), norms ones.
    kv_heads (KVH, num_key_value_heads; default `heads`): heads of the keys
    and values, each shared by heads/KVH query heads (grouped-query
    attention, as Llama 2 70B, Llama 3 and TinyLlama use). With composed
    attention the shared heads are repeated as transformers' repeat_kv does
    (broadcast, then reshape); train.attention (attention="fused") reads
    them unrepeated, so its backward keeps heads/KVH times fewer key and
    value bytes (bitwise the same numbers on the cpu backend).
    tie_embeddings (tie_word_embeddings): the logits read
    model.embed_tokens.weight (Llama 3.2 1B/3B) or their own lm_head.weight
    (Llama 2, Llama 3 8B, TinyLlama).
    rope_scaling: Llama 3's frequency scaling, as transformers' config
    writes it ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor":
    1.0, "high_freq_factor": 4.0, "original_max_position_embeddings":
    8192}) or as those four numbers in that order; None: plain RoPE.
    checkpoints: as gpt's (each decoder layer's output marked).
    attention: as gpt's ("composed" or "fused").
    """
    B, T, V, L, C, H = (int(v) for v in (batch, seq, vocab, layers, width, heads))
    if min(B, T, V, C, H) <= 0 or L < 0:
        raise IRError("llama: sizes must be positive")
    if V < 2:
        raise IRError(f"llama: vocab must be >= 2 (a cross-entropy over {V} class is 0), got {V}")
    scaling = _llama3_scaling(rope_scaling)
    if C % H:
        raise IRError(f"llama: width {C} is not divisible by heads {H}")
    KVH = H if kv_heads is None else int(kv_heads)
    if KVH <= 0 or H % KVH:
        raise IRError(f"llama: heads {H} is not a multiple of kv_heads {kv_heads}")
    G = H // KVH
    D = C // H
    if D % 2:
        raise IRError(f"llama: head dim {D} must be even for rotary embeddings")
    F = int(hidden) if hidden is not None else (int(2 * 4 * C / 3) + 7) // 8 * 8
    if F <= 0:
        raise IRError("llama: hidden size must be positive")
    _check_attention(attention, 0.0, "llama")
    if not float(initializer_range) > 0:
        raise IRError(f"llama: initializer_range must be positive, got {initializer_range}")
    normal = ("normal", float(initializer_range))
    ones = ("ones", None)

    m = Module()
    f = m.entry("loss")
    tokens = f.arg("tokens", [B, T], "i32")
    targets = f.arg("targets", [B, T], "i32")
    emb = m.param("model.embed_tokens.weight", [V, C], *normal)

    def rms_norm(x, name):
        g = m.param(f"{name}.weight", [C], *ones)
        return f.rms_norm(x, f.param_read(g), epsilon, hint=name.split(".")[-1])

    def linear(x, name, fan_in, fan_out):  # nn.Linear(bias=False)
        w = m.param(f"{name}.weight", [fan_out, fan_in], *normal)
        return f.matmul(x, f.param_read(w), transpose_b=True,
                        hint=name.replace(".", "_"))

    x = f.embedding(f.param_read(emb), tokens, hint="tok_emb")
    for i in range(L):
        p = f"model.layers.{i}"
        a = rms_norm(x, f"{p}.input_layernorm")

        def heads(name, n, rope):  # [B,T,n*D] -> [B,n,T,D], rotated before the transpose
            t = f.reshape(linear(a, f"{p}.self_attn.{name}", C, n * D), [B, T, n, D],
                          hint=f"l{i}_{name}_r")
            if rope:
                t = f.rotary_embedding(t, 1, rope_theta, llama3_scaling=scaling,
                                       hint=f"l{i}_{name}_rope")
            t = f.transpose(t, [0, 2, 1, 3], hint=f"l{i}_{name}_t")
            if n == H or attention == "fused":   # train.attention reads h // G itself
                return t
            # repeat_kv: [B,KVH,T,D] -> [B,KVH,G,T,D] -> [B,H,T,D]; head h reads
            # the shared head h // G. Its adjoint sums the G query heads' gradients.
            t = f.broadcast(t, [2], [G], hint=f"l{i}_{name}_rep")
            return f.reshape(t, [B, H, T, D], hint=f"l{i}_{name}_heads")

        q = heads("q_proj", H, True)
        k, v = heads("k_proj", KVH, True), heads("v_proj", KVH, False)
        y = _causal_attention(f, q, k, v, f"l{i}", kind=attention)
        x = f.add(x, linear(y, f"{p}.self_attn.o_proj", C, C), hint=f"l{i}_res1")
        a = rms_norm(x, f"{p}.post_attention_layernorm")
        gate = f.silu(linear(a, f"{p}.mlp.gate_proj", C, F), hint=f"l{i}_silu")
        up = linear(a, f"{p}.mlp.up_proj", C, F)
        a = f.mul(gate, up, hint=f"l{i}_swiglu")
        x = f.add(x, linear(a, f"{p}.mlp.down_proj", F, C), hint=f"l{i}_res2")
        if checkpoints:
            f.checkpoint(x)
    head = emb if tie_embeddings else m.param("lm_head.weight", [V, C], *normal)
    _lm_loss(f, rms_norm(x, "model.norm"), head, targets,
             "embed_out" if tie_embeddings else "lm_head")
    cfg = dict(batch=B, seq=T, vocab=V, layers=L, width=C, heads=H, hidden=F,
               epsilon=epsilon, rope_theta=rope_theta, kv_heads=KVH,
               tie_embeddings=bool(tie_embeddings), rope_scaling=scaling)
    return ModelSpec("llama", cfg, m)


def llama_from_hf_config(config, batch, seq, layers=None, checkpoints=True,
                         attention="composed"):
    """llama(...) from a Hugging Face LlamaConfig (config.json's dict, or its
    path): vocab_size, num_hidden_layers, hidden_size, num_attention_heads,
    num_key_value_heads, intermediate_size, rms_norm_eps, rope_theta and
    rope_scaling (llama3), or the newer rope_parameters that holds both,
    tie_word_embeddings and initializer_range. `layers` overrides
    num_hidden_layers (a truncated model to try things on). Settings the
    builder does not model are refused by name, not ignored."""
    if isinstance(config, str):
        import json
        try:
            with open(config) as fh:
                config = json.load(fh)
        except (OSError, ValueError) as e:
            raise IRError(f"llama: cannot read the config {config!r}: {e}") from None
    if not isinstance(config, dict):
        raise IRError("llama: a Hugging Face config is a JSON object")
    where = "llama: Hugging Face config"
    need = ("vocab_size", "num_hidden_layers", "hidden_size", "num_attention_heads",
            "intermediate_size")
    missing = [k for k in need if k not in config]
    if missing:
        raise IRError(f"{where} lacks {', '.join(missing)}")
    archs = config.get("architectures") or ["LlamaForCausalLM"]
    if config.get("model_type", "llama") != "llama" or archs != ["LlamaForCausalLM"]:
        said = [f"model_type {config['model_type']!r}"] if "model_type" in config else []
        if config.get("architectures"):
            said.append(f"architectures {config['architectures']}")
        raise IRError(f"{where}: {' / '.join(said)} is not a LlamaForCausalLM")
    unsupported = [
        ("hidden_act", config.get("hidden_act", "silu") != "silu"),
        ("attention_bias", bool(config.get("attention_bias", False))),
        ("mlp_bias", bool(config.get("mlp_bias", False))),
        ("attention_dropout", float(config.get("attention_dropout", 0.0) or 0.0) != 0.0),
    ]
    partial = config.get("partial_rotary_factor", 1.0)
    unsupported.append(("partial_rotary_factor", partial is not None and float(partial) != 1.0))
    heads, width = int(config["num_attention_heads"]), int(config["hidden_size"])
    head_dim = config.get("head_dim")
    if head_dim is not None and heads and int(head_dim) * heads != width:
        unsupported.append(("head_dim != hidden_size / num_attention_heads", True))
    bad = [name for name, is_bad in unsupported if is_bad]
    if bad:
        raise IRError(f"{where}: not supported: {', '.join(f'{b}={config.get(b)!r}' if b in config else b for b in bad)}")
    theta, scaling = config.get("rope_theta", 10000.0), config.get("rope_scaling")
    params = config.get("rope_parameters")
    if params is not None:   # transformers >= 5: theta and the scaling in one dict
        if not isinstance(params, dict) or "rope_theta" not in params:
            raise IRError(f"{where}: rope_parameters without rope_theta: {params!r}")
        theta, scaling = params["rope_theta"], params
    return llama(batch, seq, config["vocab_size"],
                 config["num_hidden_layers"] if layers is None else layers, width, heads,
                 hidden=config["intermediate_size"],
                 epsilon=float(config.get("rms_norm_eps", 1e-6)),
                 rope_theta=float(theta),
                 checkpoints=checkpoints, attention=attention,
                 kv_heads=config.get("num_key_value_heads") or heads,
                 tie_embeddings=bool(config.get("tie_word_embeddings", False)),
                 rope_scaling=scaling,
                 initializer_range=float(config.get("initializer_range", 0.02)))


def build(kind, **cfg):
    """mlp(**cfg), gpt(**cfg) or llama(**cfg) by name."""
    if kind == "mlp":
        return mlp(**cfg)
    if kind == "gpt":
        return gpt(**cfg)
    if kind == "llama":
        return llama(**cfg)
    raise IRError(f"unknown model kind {kind!r}")


def signatures_markdown():
    """docs/python.md's signature tables, from the code: every builder
    method of `ir.Function` and every model builder, with its parameters
    and defaults (`python -m ztrain.models signatures`)."""
    import inspect
    from . import ir as _ir

    def sig(fn, drop_self):
        s = inspect.signature(fn)
        ps = list(s.parameters.values())[1 if drop_self else 0:]
        return "(" + ", ".join(str(p) for p in ps) + ")"

    def doc(fn):
        d = inspect.getdoc(fn) or ""
        first = d.split("\n\n")[0].replace("\n", " ").strip()
        return first.replace("|", "\\|")
    rows = ["| builder (`f = m.entry(...)`) | what it makes |", "| --- | --- |"]
    skip = {"to_mlir"}
    for name, fn in sorted(inspect.getmembers(_ir.Function, inspect.isfunction)):
        if name.startswith("_") or name in skip:
            continue
        what = doc(fn) or (f"`train.{name}`" if name not in ("ret", "arg") else "")
        rows.append(f"| `f.{name}{sig(fn, True)}` | {what} |")
    rows += ["", "| model builder | |", "| --- | --- |"]
    for name in ("mlp", "gpt", "llama", "llama_from_hf_config"):
        fn = globals()[name]
        rows.append(f"| `models.{name}{sig(fn, False)}` | {doc(fn)} |")
    return "\n".join(rows) + "\n"


def _parser():
    ap = argparse.ArgumentParser(prog="python -m ztrain.models",
                                 description="Print a model's train-dialect IR.")
    sub = ap.add_subparsers(dest="model", required=True)
    sub.add_parser("signatures", help="print the builders' signatures (markdown; "
                   "docs/python.md holds a copy)")
    a = sub.add_parser("mlp")
    a.add_argument("--batch", type=int, default=32)
    a.add_argument("--in-features", type=int, default=784)
    a.add_argument("--hidden", type=int, nargs="*", default=[128])
    a.add_argument("--classes", type=int, default=10)
    a.add_argument("--init", choices=["torch", "gpt"], default="torch")
    g = sub.add_parser("gpt")
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("--seq", type=int, default=64)
    g.add_argument("--vocab", type=int, default=256)
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--width", type=int, default=64)
    g.add_argument("--heads", type=int, default=4)
    ll = sub.add_parser("llama")
    ll.add_argument("--batch", type=int, default=8)
    ll.add_argument("--seq", type=int, default=64)
    ll.add_argument("--vocab", type=int, default=256)
    ll.add_argument("--layers", type=int,
                    help="default 2 (with --hf-config: num_hidden_layers)")
    ll.add_argument("--width", type=int, default=64)
    ll.add_argument("--heads", type=int, default=4)
    ll.add_argument("--hidden", type=int, help="SwiGLU width (default: Llama's 8/3 rule)")
    ll.add_argument("--rope-theta", type=float, default=10000.0)
    ll.add_argument("--hf-config", metavar="CONFIG.json",
                    help="sizes, heads, RoPE and tying from a Hugging Face LlamaConfig "
                         "(config.json); --batch, --seq and --layers (if given) still "
                         "apply, the other size flags are ignored")
    ll.add_argument("--rope-scaling", metavar="FACTOR,LOW,HIGH,ORIGINAL",
                    help="Llama 3's RoPE frequency scaling (rope_type llama3): factor, "
                         "low_freq_factor, high_freq_factor, "
                         "original_max_position_embeddings; Llama 3.1: 8,1,4,8192")
    ll.add_argument("--kv-heads", type=int,
                    help="key/value heads, each shared by heads/kv-heads query heads "
                         "(grouped-query attention; default: --heads)")
    ll.add_argument("--untied", action="store_true",
                    help="an lm_head.weight of its own for the logits instead of the "
                         "input embedding (tie_word_embeddings=false)")
    for p in (g, ll):
        p.add_argument("--no-checkpoints", action="store_true",
                       help="do not mark each block's output train.checkpoint "
                            "(--recompute then finds segments from the graph)")
        p.add_argument("--attention", choices=ATTENTION_KINDS, default="composed",
                       help="composed: matmul, scale, causal softmax, matmul; fused: "
                            "one train.attention op per layer, which keeps no "
                            "seq x seq probabilities for the backward pass")
    for p in (a, g, ll):
        p.add_argument("-o", "--output", help="write here instead of stdout")
    return ap


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.model == "signatures":
        sys.stdout.write(signatures_markdown())
        return 0
    try:
        if args.model == "mlp":
            spec = mlp(args.batch, args.in_features, args.hidden, args.classes, args.init)
        elif args.model == "gpt":
            spec = gpt(args.batch, args.seq, args.vocab, args.layers, args.width, args.heads,
                       checkpoints=not args.no_checkpoints, attention=args.attention)
        elif args.hf_config:
            given = argv if argv is not None else sys.argv[1:]
            clash = [f for f in ("--vocab", "--width", "--heads", "--hidden", "--rope-theta",
                                 "--rope-scaling", "--kv-heads", "--untied")
                     if any(a == f or a.startswith(f + "=") for a in given)]
            if clash:
                raise IRError(f"llama: --hf-config sets {', '.join(clash)}; leave "
                              f"{'it' if len(clash) == 1 else 'them'} out")
            spec = llama_from_hf_config(args.hf_config, args.batch, args.seq,
                                        layers=args.layers,
                                        checkpoints=not args.no_checkpoints,
                                        attention=args.attention)
        else:
            spec = llama(args.batch, args.seq, args.vocab,
                         2 if args.layers is None else args.layers, args.width,
                         args.heads, hidden=args.hidden, rope_theta=args.rope_theta,
                         checkpoints=not args.no_checkpoints, attention=args.attention,
                         kv_heads=args.kv_heads, tie_embeddings=not args.untied,
                         rope_scaling=(args.rope_scaling.split(",")
                                       if args.rope_scaling else None))
    except IRError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cmd = " ".join(["python -m ztrain.models"] + (argv if argv is not None else sys.argv[1:]))
    if args.output:
        cmd = cmd.replace(" -o " + args.output, "").replace(" --output " + args.output, "")
    text = f"// Generated by `{cmd}` (python/ztrain/models.py).\n" + spec.to_mlir()
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
