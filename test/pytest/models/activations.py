"""A block using the elementwise and reduction ops of common PyTorch models beyond the Llama
family: ReLU, sigmoid, maximum/minimum, a number to a power (GPT-2's hand-written GELU), chunk
(a GLU), softmax over the last axis and mean. Used as a `path.py:fn` factory in tests."""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden: int = 80, inner: int = 192):
        super().__init__()
        self.up = nn.Linear(hidden, 2 * inner)
        self.down = nn.Linear(inner, hidden)
        self.gate = nn.Linear(hidden, hidden)

    def forward(self, x):
        a, b = self.up(x).chunk(2, dim=-1)
        h = F.relu(a) * torch.sigmoid(b)
        h = 0.5 * h * (1 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        y = self.down(h)
        y = torch.minimum(torch.maximum(y, -x), x + 1)
        centred = y - y.mean(-1, keepdim=True)
        return x + torch.softmax(self.gate(centred), dim=-1) * centred


def make():
    torch.manual_seed(0)
    block = Block().to(torch.bfloat16).eval()
    return block, (torch.randn(1, 13, 80, dtype=torch.bfloat16),)
