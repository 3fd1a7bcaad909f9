"""Grouped-query attention written out the way Hugging Face's eager attention writes it: K and
V repeated to every query head with `repeat_kv` (expand, then reshape), `q @ k^T * scale`,
softmax, `@ v`. Used as a `path.py:fn` factory in tests (`tokens` sets the sequence length)."""

import torch
from torch import nn


class RepeatKvAttention(nn.Module):
    def forward(self, q, k, v):
        b, kv_heads, s, d = k.shape
        groups = q.shape[1] // kv_heads
        k = k[:, :, None].expand(b, kv_heads, groups, s, d).reshape(b, kv_heads * groups, s, d)
        v = v[:, :, None].expand(b, kv_heads, groups, s, d).reshape(b, kv_heads * groups, s, d)
        scores = q @ k.transpose(-1, -2) * d**-0.5
        return torch.softmax(scores, dim=-1) @ v


def make(tokens: int = 21):
    torch.manual_seed(0)
    q = torch.randn(1, 4, tokens, 32, dtype=torch.bfloat16)
    k = torch.randn(1, 2, tokens, 32, dtype=torch.bfloat16)
    v = torch.randn(1, 2, tokens, 32, dtype=torch.bfloat16)
    return RepeatKvAttention(), (q, k, v)
