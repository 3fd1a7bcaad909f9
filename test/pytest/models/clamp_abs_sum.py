"""A block with the clamping and reduction ops of common models: abs, clamp (both bounds, and
clamp_min / clamp_max), a sum over the last axis (an L1 norm, then its square root) and amax (a max-shifted
exponential). Used as a `path.py:fn` factory in tests."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden: int = 80, inner: int = 144):
        super().__init__()
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)

    def forward(self, x):
        h = self.up(x).clamp(-2.0, 2.0)
        h = torch.clamp_min(h, -1.5) + torch.clamp_max(h.abs(), 1.0)
        l1 = h.abs().sum(-1, keepdim=True)
        h = h / (l1.sqrt() + 1.0)
        shifted = torch.exp(h - h.amax(dim=-1, keepdim=True))
        return x + self.down(shifted)


def make():
    torch.manual_seed(0)
    return Block().to(torch.bfloat16).eval(), (torch.randn(1, 13, 80, dtype=torch.bfloat16),)
