"""A Llama in the style of Hugging Face's modeling_llama.py, written for
ztrain's import tests.

Plain PyTorch. The traits kept: RMSNorm computed in the model (pow, mean,
rsqrt), rotary embeddings from an inv_freq buffer (not persistent) turned
into cos/sin tables in the forward and applied with rotate_half, grouped-
query attention whose keys and values are repeated with expand + reshape,
an additive causal mask of -inf, SwiGLU, no biases, an untied head, and a
forward that returns a dict with the loss when given labels, which it
shifts itself (labels[..., 1:]).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Rotary(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x, positions):
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n):
    b, h, t, d = x.shape
    if n == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n, t, d).reshape(b, h * n, t, d)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, dim, bias=False)
        self.rotary = Rotary(self.hd)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = self.rotary(x, torch.arange(t, device=x.device))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        p = F.softmax(s + mask, dim=-1, dtype=torch.float32)
        y = torch.matmul(p, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = MLP(dim, hidden)

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab, dim, layers, heads, kv_heads, hidden):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            [DecoderLayer(dim, heads, kv_heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(dim)

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.full((t, t), float("-inf"), device=ids.device).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, vocab_size=256, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=8, num_key_value_heads=2, intermediate_size=176):
        super().__init__()
        self.model = LlamaModel(vocab_size, hidden_size, num_hidden_layers,
                                num_attention_heads, num_key_value_heads,
                                intermediate_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.model(input_ids))
        out = {"logits": logits}
        if labels is not None:
            # Labels are the inputs; the model shifts them, as transformers'
            # causal LMs do.
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            out["loss"] = F.cross_entropy(shift_logits.view(-1, shift_logits.shape[-1]),
                                          shift_labels.view(-1))
        return out
