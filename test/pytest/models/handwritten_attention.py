"""Self-attention written out by hand, as GPT-2-style code does: q @ k^T * scale, a softmax
over the last axis, then @ v, and an output projection. Used as a `path.py:fn` factory in tests."""

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden: int = 96, heads: int = 3):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (z.view(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (self.head_dim ** -0.5)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, h)
        return x + self.out(ctx)


def make(tokens: int = 21):
    torch.manual_seed(0)
    block = Attention().to(torch.bfloat16).eval()
    return block, (torch.randn(1, tokens, 96, dtype=torch.bfloat16),)
