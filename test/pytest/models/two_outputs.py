"""A module with two results: a residual MLP's output and its normalized input (LayerNorm). Used
as a `path.py:fn` factory in tests of `emmy run` on functions that return several tensors."""

import torch
from torch import nn


class TwoOutputs(nn.Module):
    def __init__(self, hidden: int = 80, inner: int = 144):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)

    def forward(self, x):
        h = self.ln(x)
        return x + self.fc2(torch.relu(self.fc1(h))), h


def make():
    torch.manual_seed(0)
    return TwoOutputs().to(torch.bfloat16), (torch.randn(1, 13, 80, dtype=torch.bfloat16),)
