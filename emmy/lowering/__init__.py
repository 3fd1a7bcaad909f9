"""Kernel builders: one module per kernel kind, each turning a decided `tile.kernel` into
kernel-stage ops (`emmy/dialects/kernel.py`).

`convert-tile-to-kernel` plans each `tile.kernel` (`emmy.schedule.plan.plan_kernel`) and calls,
for each part of a kernel of kind K,

    emmy.lowering.K.build(kernel_op, info, plan) -> Built

- `kernel_op`: the `tile.kernel` op, or one part of it (its body: loop.axis/load/reduce/store +
  arith/math);
- `info`: `emmy.analysis.classify.classify(kernel_op)` (a `KernelInfo`);
- `plan`: its plan (`emmy.schedule.<K>`: tiles, threads, pipeline, launches, on the module's
  target). Builders read no knob and have no defaults of their own: every schedule number
  comes from the plan.

A builder returns a `Built`: the `kernel.func` ops it made (not yet inserted anywhere), the
launches that compute the tile op's results, in order, and the temporary buffers (workspaces,
row statistics) those launches use. Launch arguments name the tile op's inputs and results by
position, the temporary buffers by position, the inputs of `Built.peer` (another tile op: the
attention whose Q and K a contraction's epilogue computes) by position, or give a scalar value:

    Built(funcs=[stats_fn, main_fn],
          launches=[Launch("k_stats", (In(0), Tmp(0))),
                    Launch("k", (In(0), In(1), In(2), Tmp(0), Out(0)))],
          temps=[TensorType(f32, [512])])

A temp listed in `Built.zeroed` is allocated cleared and left cleared by every call (per-tile
counters that blocks of one grid meet on).

Kernel names: the tile op's `sym_name` for the main kernel, `<sym_name>_<suffix>` for helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation

from emmy.dialects.kernel import KernelFuncOp


@dataclass(frozen=True)
class In:
    """The tile op's input (operand) number `index`."""

    index: int


@dataclass(frozen=True)
class Out:
    """The tile op's result number `index`."""

    index: int


@dataclass(frozen=True)
class Tmp:
    """`Built.temps[index]`: a buffer alive for this tile op's launches only."""

    index: int


@dataclass(frozen=True)
class Scalar:
    """A scalar argument passed by value (an `IntegerAttr` / `FloatAttr`)."""

    value: Attribute


@dataclass(frozen=True)
class Peer:
    """Input (operand) number `index` of `Built.peer`, another tile op of the function: the
    attention whose Q and K a contraction's epilogue computes (fusion = epilogue) reads norm
    weights and rotary tables the contraction's own inputs do not hold."""
    index: int


LaunchArg = In | Out | Tmp | Scalar | Peer


@dataclass(frozen=True)
class Launch:
    kernel: str
    args: tuple[LaunchArg, ...]


@dataclass
class Built:
    funcs: list[KernelFuncOp] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    temps: list[TensorType] = field(default_factory=list)
    # indices into `temps` of buffers that must hold zeros before the first call and that every
    # call leaves zero again (counters: `kernel.empty zeroed`)
    zeroed: set[int] = field(default_factory=set)
    # the tile op whose inputs `Peer` arguments name (None: no such arguments)
    peer: Operation | None = None


KINDS = ("elementwise", "reduction", "contraction", "attention")
