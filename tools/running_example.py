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
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN, EPS)
        self.q_proj = nn.Linear(HIDDEN, Q_OUT, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_OUT, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_OUT, bias=False)

    def forward(self, x: torch.Tensor):
        h = self.input_layernorm(x)
        return self.q_proj(h), self.k_proj(h), self.v_proj(h)


def make(tokens: int = 32, seed: int = 0):
    torch.manual_seed(seed)
    module = NormQKV().to(torch.bfloat16)
    with torch.no_grad():
        module.input_layernorm.weight.add_(0.1 * torch.randn(HIDDEN, dtype=torch.bfloat16))
    return module, (torch.randn(1, tokens, HIDDEN, dtype=torch.bfloat16),)
