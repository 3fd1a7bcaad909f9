"""Sliding-window attention: the window a layer's config gives, in its IR and in its reference.

Mistral, Phi-3 and the local layers of Gemma 2 and 3 let query q see only keys q - W + 1 .. q
(`sliding_window` = W in their configs; `emmy.frontend.decoder.sliding_window` says which layer
has which). PyTorch's `scaled_dot_product_attention` has no argument for it: transformers builds
a mask tensor, and Emmy traces its layers without one (a causal call). So the window enters on
both sides here, from the config, wherever the sequence is longer than it:

- the IR: `set_window` gives the layer's causal `torch.scaled_dot_product_attention` its
  `window` property (every stage after it carries the mask; see the op's docstring);
- the PyTorch reference: `windowed` makes a layer module run every causal
  `scaled_dot_product_attention` call with the window's mask (`windowed_sdpa`), so `--check`,
  the benchmark's eager and `torch.compile` contenders and the float32 reference compute what
  the model computes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64

from emmy.diagnostics import EmmyError
from emmy.frontend.sdpa_mode import sdpa_through


def windowed_sdpa(sdpa, q, k, v, window: int, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                  scale=None, enable_gqa: bool = False):
    """`sdpa(q, k, v, ...)` with a causal call (no mask of its own) limited to each query's last
    `window` keys, as transformers' sliding-window mask does (key kv is seen by query q when
    q - window < kv <= q); other calls, and sequences the window covers, unchanged."""
    lq = q.shape[-2]
    if not is_causal or attn_mask is not None or lq <= window:
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)
    rows = torch.arange(lq, device=q.device)[:, None]
    keys = torch.arange(k.shape[-2], device=q.device)[None, :]
    mask = (keys <= rows) & (keys > rows - window)
    return sdpa(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa)


def sliding_window(window: int):
    """A context in which every `F.scaled_dot_product_attention` call goes through
    `windowed_sdpa` with `window`."""
    return sdpa_through(lambda sdpa, *args, **kwargs: windowed_sdpa(sdpa, *args, window=window, **kwargs))


def windowed(module: nn.Module, window: int) -> nn.Module:
    """`module`, its class replaced by a subclass whose forward runs inside `sliding_window`
    (parameter names, `deepcopy` and `.float()` as before). Call it after tracing: the tracer
    records the causal call, and `set_window` puts the window in the IR."""
    cls = type(module)

    class Windowed(cls):  # type: ignore[misc, valid-type]
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            with sliding_window(window):
                return super().forward(*args, **kwargs)

    Windowed.__name__ = Windowed.__qualname__ = cls.__name__
    module.__class__ = Windowed
    return module


def set_window(ir: ModuleOp, window: int, where: str) -> None:
    """Give the causal attention of `ir` (one layer) the sliding window. `where` names the
    layer for the error when it has no causal attention."""
    from emmy.dialects import torch as T

    ops = [op for op in ir.walk() if isinstance(op, T.ScaledDotProductAttentionOp) and op.is_causal.value.data]
    if not ops:
        raise EmmyError(
            f"{where} attends over a sliding window of {window} tokens, but its traced attention "
            "is not causal: Emmy applies a window to causal attention only"
        )
    for op in ops:
        op.window = IntegerAttr(window, i64)
