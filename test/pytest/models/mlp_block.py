"""A transformer MLP block of the GPT/BERT kind: LayerNorm, linear with bias, GELU (tanh form),
linear with bias, GELU (erf form), residual. Used as a `path.py:fn` factory in tests."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden: int = 80, inner: int = 176):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)
        self.act1 = nn.GELU(approximate="tanh")
        self.act2 = nn.GELU()

    def forward(self, x):
        return x + self.act2(self.fc2(self.act1(self.fc1(self.ln(x)))))


def make():
    torch.manual_seed(0)
    block = Block().to(torch.bfloat16)
    with torch.no_grad():
        block.ln.weight.add_(0.1 * torch.randn_like(block.ln.weight))
        block.ln.bias.add_(0.1 * torch.randn_like(block.ln.bias))
    return block, (torch.randn(1, 13, 80, dtype=torch.bfloat16),)
