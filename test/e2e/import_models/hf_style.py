"""A small causal LM written the way Hugging Face's and other hubs' models
are: forward(input_ids, attention_mask=None, labels=None) returning an
output object with .loss; an additive causal mask of the dtype's lowest
value (not -inf) built in the forward; `input_ids.long()`; a constant made
with torch.tensor; attention scores by baddbmm (as GPT-NeoX and
nn.MultiheadAttention compute them); key/value heads shared by .repeat;
a norm written with var(); abs and leaky_relu in the MLP; a debugging
statistic the loss does not use. Nothing here knows ztrain."""

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CausalLMOutput:
    loss: Optional[torch.Tensor]
    logits: torch.Tensor


class VarNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, kv_heads * self.d)
        self.v = nn.Linear(dim, kv_heads * self.d)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, mask):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(B, T, self.kv, self.d).transpose(1, 2)
        k = k.repeat(1, self.h // self.kv, 1, 1)
        v = v.repeat(1, self.h // self.kv, 1, 1)
        q = q.reshape(B * self.h, T, self.d)
        k = k.reshape(B * self.h, T, self.d)
        scores = torch.baddbmm(mask.expand(B, self.h, T, T).reshape(B * self.h, T, T),
                               q, k.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(self.d))
        att = F.softmax(scores.float(), dim=-1).to(x.dtype)
        y = att.view(B, self.h, T, T) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.n1 = VarNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.n2 = VarNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x, mask):
        x = x + self.attn(self.n1(x), mask)
        h = self.up(self.n2(x))
        h = F.leaky_relu(h, 0.1) + 0.05 * h.abs()
        return x + self.down(h)


class TinyLM(nn.Module):
    def __init__(self, vocab_size=64, dim=32, heads=4, kv_heads=2, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(layers))
        self.norm = VarNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, labels=None):
        ids = input_ids.long()
        B, T = ids.shape
        x = self.embed(ids) * torch.tensor(1.0 / math.sqrt(2.0))
        lowest = torch.finfo(x.dtype).min
        mask = torch.full((T, T), lowest).triu(1)[None, None]
        if attention_mask is not None:
            mask = mask + (1.0 - attention_mask[:, None, None, :].float()) * lowest
        for layer in self.layers:
            x = layer(x, mask)
        x = self.norm(x)
        self.last_spread = torch.atan(x).std()   # a statistic for logging, not the loss
        logits = self.head(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1).long())
        return CausalLMOutput(loss=loss, logits=logits)
