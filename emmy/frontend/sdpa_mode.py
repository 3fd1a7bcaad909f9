"""A context that routes every `F.scaled_dot_product_attention` call through another function.

The sliding window's reference (`emmy.frontend.window`) and the benchmark's float32 reference in
bounded memory (`emmy.measure.bounded_attention`) both change how PyTorch's attention runs inside
a module they do not own; a `TorchFunctionMode` is PyTorch's own way to do that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def sdpa_through(fn: Callable[..., Any]):
    """A `TorchFunctionMode` in which `F.scaled_dot_product_attention(*args, **kwargs)` becomes
    `fn(F.scaled_dot_product_attention, *args, **kwargs)` (inside fn the mode is off: fn may
    call PyTorch's function without coming back here)."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.scaled_dot_product_attention:
                return fn(func, *args, **kwargs)
            return func(*args, **kwargs)

    return _Mode()
