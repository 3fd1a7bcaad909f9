"""The xDSL context Emmy parses and rewrites in.

It holds Emmy's six stage dialects (torch, tensor, loop, tile, kernel, cuda) and the upstream
dialects Emmy reuses (builtin, func, arith, math). xDSL's own `tensor` and `gpu` dialects are
deliberately not loaded: their names would clash with Emmy's stages.
"""

from __future__ import annotations

import importlib

from xdsl.context import Context
from xdsl.ir import Dialect

# stage name -> (module, attribute holding the Dialect)
STAGE_DIALECTS: dict[str, tuple[str, str]] = {
    "torch": ("emmy.dialects.torch", "Torch"),
    "tensor": ("emmy.dialects.tensor", "Tensor"),
    "loop": ("emmy.dialects.loop", "Loop"),
    "tile": ("emmy.dialects.tile", "Tile"),
    "kernel": ("emmy.dialects.kernel", "Kernel"),
    "cuda": ("emmy.dialects.cuda", "Cuda"),
}

STAGES: tuple[str, ...] = tuple(STAGE_DIALECTS)


def _loader(module: str, attr: str):
    def load() -> Dialect:
        return getattr(importlib.import_module(module), attr)

    return load


def make_context() -> Context:
    """A fresh context with every dialect Emmy's IR may contain (loaded lazily)."""
    from xdsl.dialects.arith import Arith
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.dialects.math import Math

    ctx = Context()
    for dialect in (Builtin, Func, Arith, Math):
        ctx.load_dialect(dialect)
    for name, (module, attr) in STAGE_DIALECTS.items():
        ctx.register_dialect(name, _loader(module, attr))
    return ctx
