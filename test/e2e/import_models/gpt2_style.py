"""In the style of Hugging Face's modeling_gpt2.py (written for these tests, not
copied): Conv1D layers (addmm with [in, out] weights), a bool tril buffer
with torch.where(mask, scores, lowest float), the tanh "gelu_new", fused qkv
split, tied wte / lm_head, labels shifted inside the model, a dict output."""
import math
import torch
import torch.nn as nn


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = cfg["n_positions"]
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.embed_dim = cfg["n_embd"]
        self.num_heads = cfg["n_head"]
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(cfg["attn_pdrop"])
        self.resid_dropout = nn.Dropout(cfg["resid_pdrop"])

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype,
                                                 device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        a = self._attn(query, key, value)
        a = self._merge_heads(a, self.num_heads, self.head_dim)
        a = self.c_proj(a)
        return self.resid_dropout(a)


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["n_embd"]
        self.c_fc = Conv1D(4 * d, d)
        self.c_proj = Conv1D(d, 4 * d)
        self.dropout = nn.Dropout(cfg["resid_pdrop"])

    def forward(self, h):
        return self.dropout(self.c_proj(gelu_new(self.c_fc(h))))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["n_embd"]
        self.ln_1 = nn.LayerNorm(d, eps=cfg["layer_norm_epsilon"])
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(d, eps=cfg["layer_norm_epsilon"])
        self.mlp = GPT2MLP(cfg)

    def forward(self, h):
        h = h + self.attn(self.ln_1(h))
        return h + self.mlp(self.ln_2(h))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5):
        super().__init__()
        cfg = dict(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                   n_head=n_head, resid_pdrop=resid_pdrop, attn_pdrop=attn_pdrop,
                   layer_norm_epsilon=layer_norm_epsilon)
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.drop = nn.Dropout(embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(cfg) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=layer_norm_epsilon)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, labels=None):
        input_shape = input_ids.size()
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long, device=input_ids.device)
        position_ids = position_ids.unsqueeze(0)
        h = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        for block in self.h:
            h = block(h)
        h = self.ln_f(h)
        lm_logits = self.lm_head(h)
        loss = None
        if labels is not None:
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = nn.functional.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                                               shift_labels.view(-1))
        return {"loss": loss, "logits": lm_logits}
