"""A residual add whose sum only an RMSNorm reads, then a projection: loop-fuse makes one kernel
whose A side is g * (x + r), computed from two tensors of token rows, so a warp-specialized
schedule sums the row statistics in its producer warpgroup (`KernelInfo.ws_row_stats`). Used as
a `path.py:fn` factory with `tokens`."""

import torch
from torch import nn


class ResidualNormProj(nn.Module):
    def __init__(self, hidden: int = 1024, out: int = 512):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6)
        self.proj = nn.Linear(hidden, out, bias=False)

    def forward(self, x, r):
        return self.proj(self.norm(x + r))


def make(tokens: int = 512):
    torch.manual_seed(0)
    shape = (1, tokens, 1024)
    return ResidualNormProj().to(torch.bfloat16), (
        torch.randn(shape, dtype=torch.bfloat16), torch.randn(shape, dtype=torch.bfloat16),
    )
