"""PyTorch reference implementations of the models in `ztrain.models`.

Same state_dict names, same composition of the computation (separate q/k/v
projections, scale before the causal softmax, masking with -inf, tanh gelu,
tied output embedding, mean cross entropy), so a safetensors file holds the
same weights for both and the two follow the same loss curve.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import ir, rng, safetensors

__all__ = ["MLP", "GPT", "Llama", "from_spec", "load_state", "state_numpy", "make_optimizer"]


class MLP(nn.Module):
    def __init__(self, in_features, hidden, classes):
        super().__init__()
        sizes = [in_features] + list(hidden) + [classes]
        self.n_layers = len(sizes) - 1
        for i in range(self.n_layers):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x, y):
        h = x
        for i in range(self.n_layers):
            h = getattr(self, f"fc{i + 1}")(h)
            if i < self.n_layers - 1:
                h = F.relu(h)
        return F.cross_entropy(h, y.long())

    def inputs(self, batch):
        """Positional forward() arguments from a {name: tensor} batch."""
        return batch["x"], batch["y"]


class Dropout(nn.Module):
    """train.dropout's inverted dropout with the compiled op's mask
    (`ztrain.rng`): stream `stream`, the seed and step in the shared `run`
    dict ({"seed": int, "step": int}, set by the model's owner before each
    step), one process holding the global batch."""

    def __init__(self, p, stream, run):
        super().__init__()
        self.p, self.stream, self.run = p, stream, run

    def forward(self, x):
        if self.p == 0.0 or not self.training:   # model.eval(): the identity
            return x
        keep = rng.dropout_keep(tuple(x.shape), self.p, self.run["seed"],
                                self.stream, self.run["step"])
        noise = keep.astype(np.float32) * rng.dropout_scale(self.p)
        return x * torch.from_numpy(noise).to(device=x.device, dtype=x.dtype)


class Attention(nn.Module):
    def __init__(self, width, heads, drop_att=None, drop_out=None):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.c_proj = nn.Linear(width, width)
        self.drop_att = drop_att or nn.Identity()
        self.drop_out = drop_out or nn.Identity()

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        D = C // H

        def split(t):  # [B,T,C] -> [B,H,T,D]
            return t.reshape(B, T, H, D).permute(0, 2, 1, 3)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        att = self.drop_att(torch.softmax(s, dim=-1))
        y = torch.matmul(att, v).permute(0, 2, 1, 3).reshape(B, T, C)
        return self.drop_out(self.c_proj(y))


class MLPBlock(nn.Module):
    def __init__(self, width, drop=None):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)
        self.drop = drop or nn.Identity()

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, width, heads, eps, drops=(None, None, None)):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=eps)
        self.attn = Attention(width, heads, drops[0], drops[1])
        self.ln_2 = nn.LayerNorm(width, eps=eps)
        self.mlp = MLPBlock(width, drops[2])

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, width, heads, eps=1e-5, dropout=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq, width)
        # models.gpt's dropout streams: 0 on the embeddings, 1 + 3i, 2 + 3i,
        # 3 + 3i in layer i (attention probabilities, attention output, MLP).
        self.run = {"seed": 0, "step": 1}
        drop = (lambda s: Dropout(dropout, s, self.run)) if dropout > 0.0 else (lambda s: None)
        self.drop = drop(0) or nn.Identity()
        self.h = nn.ModuleList([Block(width, heads, eps,
                                      (drop(1 + 3 * i), drop(2 + 3 * i), drop(3 + 3 * i)))
                                for i in range(layers)])
        self.ln_f = nn.LayerNorm(width, eps=eps)

    def set_run(self, seed, step):
        """The seed and 1-based step of the compiled run being modelled
        (dropout masks depend on them)."""
        self.run.update(seed=seed, step=step)

    def logits(self, tokens):
        x = self.drop(self.wte(tokens.long()) + self.wpe.weight.unsqueeze(0))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return torch.matmul(x, self.wte.weight.t())   # tied output embedding

    def forward(self, tokens, targets):
        logits = self.logits(tokens)
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long())

    def inputs(self, batch):
        return batch["tokens"], batch["targets"]


class LlamaRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm (float32 throughout here)."""

    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _repeat_kv(t, groups):
    """transformers' repeat_kv: [B,KVH,T,D] -> [B,KVH*groups,T,D]."""
    if groups == 1:
        return t
    B, KVH, T, D = t.shape
    return t[:, :, None, :, :].expand(B, KVH, groups, T, D).reshape(B, KVH * groups, T, D)


class LlamaAttention(nn.Module):
    def __init__(self, width, heads, theta, kv_heads=None, rope_scaling=None):
        super().__init__()
        self.heads, self.theta, self.rope_scaling = heads, theta, rope_scaling
        self.kv_heads = kv_heads or heads
        kv_width = width // heads * self.kv_heads
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, kv_width, bias=False)
        self.v_proj = nn.Linear(width, kv_width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        D = C // H

        def split(t, n):  # [B,T,n*D] -> [B,n,T,D]
            return t.reshape(B, T, n, D).transpose(1, 2)

        KVH = self.kv_heads
        q = split(self.q_proj(x), H)
        k, v = split(self.k_proj(x), KVH), split(self.v_proj(x), KVH)
        # LlamaRotaryEmbedding: frequencies and angles in float32.
        inv = 1.0 / (self.theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
        if self.rope_scaling is not None:   # rope_type "llama3"
            inv = ir.llama3_inv_freq(torch, inv, self.rope_scaling)
        freqs = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)   # [T, D]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k, v = _repeat_kv(k, H // KVH), _repeat_kv(v, H // KVH)
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, C)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(width, hidden, bias=False)
        self.up_proj = nn.Linear(width, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, width, heads, hidden, eps, theta, kv_heads=None, rope_scaling=None):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(width, eps)
        self.self_attn = LlamaAttention(width, heads, theta, kv_heads, rope_scaling)
        self.post_attention_layernorm = LlamaRMSNorm(width, eps)
        self.mlp = LlamaMLP(width, hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab, layers, width, heads, hidden, eps, theta, kv_heads=None,
                 rope_scaling=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList([LlamaLayer(width, heads, hidden, eps, theta, kv_heads,
                                                rope_scaling)
                                     for _ in range(layers)])
        self.norm = LlamaRMSNorm(width, eps)


class Llama(nn.Module):
    """LlamaForCausalLM (grouped-query attention with kv_heads < heads; an
    lm_head of its own unless tie): the same state-dict names."""

    def __init__(self, vocab, seq, layers, width, heads, hidden, eps=1e-5, theta=10000.0,
                 kv_heads=None, tie=True, rope_scaling=None):
        super().__init__()
        self.model = LlamaModel(vocab, layers, width, heads, hidden, eps, theta, kv_heads,
                                rope_scaling)
        self.lm_head = None if tie else nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.model.embed_tokens(tokens.long())
        for layer in self.model.layers:
            x = layer(x)
        out = self.model.embed_tokens if self.lm_head is None else self.lm_head
        logits = torch.matmul(self.model.norm(x), out.weight.t())
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long())

    def inputs(self, batch):
        return batch["tokens"], batch["targets"]


def from_spec(spec):
    """The torch module for a `ztrain.models.ModelSpec`."""
    c = spec.config
    if spec.kind == "mlp":
        model = MLP(c["in_features"], c["hidden"], c["classes"])
        x, y = c.get("input_name", "x"), c.get("label_name", "y")
        model.inputs = lambda batch: (batch[x], batch[y])
        return model
    if spec.kind == "gpt":
        return GPT(c["vocab"], c["seq"], c["layers"], c["width"], c["heads"],
                   c.get("epsilon", 1e-5), c.get("dropout", 0.0))
    if spec.kind == "llama":
        return Llama(c["vocab"], c["seq"], c["layers"], c["width"], c["heads"], c["hidden"],
                     c.get("epsilon", 1e-5), c.get("rope_theta", 10000.0),
                     c.get("kv_heads"), c.get("tie_embeddings", True),
                     c.get("rope_scaling"))
    raise ValueError(f"unknown model kind {spec.kind!r}")


def load_state(model, state):
    """Load {name: np.ndarray} or a safetensors path, strictly (all names, all shapes)."""
    if isinstance(state, str):
        state = safetensors.load(state)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    if missing or extra:
        raise KeyError(f"state dict mismatch: missing {missing}, unexpected {extra}")
    for name, t in own.items():
        if tuple(state[name].shape) != tuple(t.shape):
            raise ValueError(f"{name}: shape {list(state[name].shape)} != {list(t.shape)}")
    model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32))
                           for k, v in state.items()})
    return model


def state_numpy(model):
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def make_optimizer(params, kind, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                   weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False,
                   no_decay="1d"):
    """torch.optim with the same hyper-parameters as ztrain-compile's flags.

    no_decay="1d" (ztrain-compile's default --no-decay): parameters of rank
    < 2 (biases, norm gains) in a second group with weight_decay 0, as
    nanoGPT's configure_optimizers; "none": one group."""
    params = list(params)
    if no_decay == "1d" and weight_decay:
        groups = [{"params": [p for p in params if p.dim() >= 2]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        params = [g for g in groups if g["params"]]
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(beta1, beta2), eps=eps,
                                weight_decay=weight_decay)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps,
                                 weight_decay=weight_decay)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening,
                               weight_decay=weight_decay, nesterov=nesterov)
    raise ValueError(f"unknown optimizer {kind!r}")


# -- an interpreter of the builder's IR ------------------------------------------------

def run_ir(module, params, inputs, seed=0, step=1):
    """Evaluate a module built with `ztrain.ir` in torch, op by op.

    params / inputs: {name: torch.Tensor}; params also holds the values of
    the module's buffers, under their names (as a state dict does). seed / step: those of the
    compiled run being modelled (train.dropout's mask depends on them; one
    process holding the global batch). Returns the loss tensor; autograd
    gives the gradient of any params that require it. Each op's meaning is
    the PyTorch function registered beside its builder in `ztrain.ir`
    (`ir.REFERENCES`), so this checks the model builders against the torch
    modules above (and gives gradcheck an independent second opinion).
    """
    f = module.functions[0]
    env = {v.name: inputs[n] for v, n in f.args}
    for res, op, operands, attrs in f.ops:
        if op in ("param_read", "buffer_read"):
            r = params[attrs["name"]]   # a state dict: parameters and buffers
        else:
            ref = ir.REFERENCES.get(op)
            if ref is None:
                raise NotImplementedError(f"no PyTorch reference for train.{op}")
            r = ref(torch, F, [env[v.name] for v in operands],
                    dict(attrs, _run={"seed": seed, "step": step}), res.shape)
        if tuple(r.shape) != res.shape:
            raise AssertionError(f"{op}: interpreter shape {tuple(r.shape)} != IR {res.shape}")
        env[res.name] = r
    return env[f.result.name]
