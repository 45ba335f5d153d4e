"""LoRA fine-tuning in the style of loralib / PEFT: a small pretrained
language model whose weights are frozen, with trainable low-rank adapters
(lora_A, lora_B) beside every linear layer and a trainable final norm.
Plain PyTorch; requires_grad=False is the only thing that marks the frozen
weights."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    """y = x W^T + b + (x A^T B^T) * alpha / r, W and b frozen."""

    def __init__(self, fan_in, fan_out, r=4, alpha=8, bias=True):
        super().__init__()
        self.base = nn.Linear(fan_in, fan_out, bias=bias)
        self.lora_A = nn.Parameter(torch.randn(r, fan_in) / math.sqrt(fan_in))
        self.lora_B = nn.Parameter(torch.zeros(fan_out, r))
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


class Block(nn.Module):
    def __init__(self, d, r):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = LoRALinear(d, 4 * d, r)
        self.proj = LoRALinear(4 * d, d, r)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x))))


def mark_only_lora_as_trainable(model, also=()):
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name or any(name.startswith(a) for a in also))


class LoRALM(nn.Module):
    def __init__(self, vocab=64, d=32, layers=2, r=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, r) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = LoRALinear(d, vocab, r, bias=False)
        mark_only_lora_as_trainable(self, also=("ln_f.",))

    def forward(self, idx, targets=None):
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
