"""The running example of the docs as a model factory: RMSNorm, then the q, k, v projections of
Qwen3-Embedding-0.6B's first layer (hidden 1024; q 2048, k 1024, v 1024 outputs).

    emmy compile tools/running_example.py:make --ir loop
"""

from __future__ import annotations

import torch
from torch import nn

HIDDEN, Q_OUT, KV_OUT, EPS = 1024, 2048, 1024, 1e-6


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * x.to(dtype)


class NormQKV(nn.Module):
    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, EPS)
        self.q_proj = nn.Linear(hidden, Q_OUT, bias=False)
        self.k_proj = nn.Linear(hidden, KV_OUT, bias=False)
        self.v_proj = nn.Linear(hidden, KV_OUT, bias=False)

    def forward(self, x: torch.Tensor):
        h = self.input_layernorm(x)
        return self.q_proj(h), self.k_proj(h), self.v_proj(h)


def make(tokens: int = 32, seed: int = 0, hidden: int = HIDDEN):
    """The module and its input (`hidden` other than 1024: a k extent the tiles do not divide)."""
    torch.manual_seed(seed)
    module = NormQKV(hidden).to(torch.bfloat16)
    with torch.no_grad():
        module.input_layernorm.weight.add_(0.1 * torch.randn(hidden, dtype=torch.bfloat16))
    return module, (torch.randn(1, tokens, hidden, dtype=torch.bfloat16),)
