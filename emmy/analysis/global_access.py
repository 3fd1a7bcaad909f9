"""Which global buffers a kernel reads and writes, and which it touches before its dependency wait.

`kernel-overlap-launches` lets a kernel start while the launch before it finishes. Its threads
must not touch what that launch writes (nor write what it reads) until they have waited for it
(`DEPENDENCY_WAIT`, emmy/phase.py). A kernel whose lowering put that wait late (a product whose
k loop reads only the layer's input and weights, and whose epilogue reads the statistics the
launch before it computes) keeps it there only if nothing before the wait touches that launch's
buffers; this module says what comes before it.

The facts are per parameter of a `kernel.func` (its index), read from the IR:
- an access is any op other than `kernel.ptr_add` and `kernel.yield` with an operand derived
  from a global-memory pointer or tensor-map parameter. `kernel.load` reads, `kernel.store`
  writes; `kernel.call` reads through every such operand and writes through all but those its
  callee only reads through (`READ_ONLY_CALL_ARGS`, the kernel dialect); any other op
  (`kernel.invoke` of a lambda, say) reads and writes.
- `kernel.ptr_add` derives its result from its pointer; any other op that yields a pointer or a
  tensor map from one derives it from every parameter it may come from: all of them where the
  pointer passes through a region (loop-carried values, branch results) or enters one as a block
  argument.
- an access comes *before the wait* unless a `DEPENDENCY_WAIT` (or `DEPENDENCY_WAIT_ONCE`) call precedes it in its own block
  or in a block that encloses it (structured control flow: such a call has run on every path to
  the access). An access inside a lambda counts where the lambda is defined.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from xdsl.ir import Block, SSAValue

from emmy.dialects import kernel as K
from emmy.phase import WAITS


@dataclass
class GlobalAccess:
    """Parameter indices of one kernel: read and written anywhere, and read or written before a
    dependency wait (`early_*`); `waits`: whether the body calls DEPENDENCY_WAIT at all, and
    `waits_first`: whether that call is the body's first op."""

    reads: set[int] = field(default_factory=set)
    writes: set[int] = field(default_factory=set)
    early_reads: set[int] = field(default_factory=set)
    early_writes: set[int] = field(default_factory=set)
    waits: bool = False
    waits_first: bool = False


def _is_memory(t) -> bool:
    return (isinstance(t, K.PtrType) and t.space.data == "global") or isinstance(t, K.TensorMapType)


def is_wait(op) -> bool:
    """A dependency wait: once it returns, the thread has waited (DEPENDENCY_WAIT_ONCE too)."""
    return isinstance(op, K.CallOp) and op.callee.data in WAITS


def _accessed(op, sources) -> tuple[frozenset[int], frozenset[int]]:
    """(read, written) parameters of one accessing op."""
    if isinstance(op, K.LoadOp):
        return sources([op.ptr]), frozenset()
    if isinstance(op, K.StoreOp):
        return frozenset(), sources([op.ptr])
    read_only = K.read_only_args(op.callee.data) if isinstance(op, K.CallOp) else ()
    read = sources(op.operands)
    written = sources(v for i, v in enumerate(op.operands) if i not in read_only)
    return read, written


def global_access(kf: K.KernelFuncOp) -> GlobalAccess:
    """The kernel's accesses to its global-memory parameters (module docstring)."""
    params = kf.body.block.args
    everything = frozenset(i for i, a in enumerate(params) if _is_memory(a.type))
    origin: dict[SSAValue, frozenset[int]] = {a: frozenset({i}) for i, a in enumerate(params) if i in everything}
    out = GlobalAccess()
    first = kf.body.block.first_op
    out.waits_first = first is not None and is_wait(first)

    def sources(values: Iterable[SSAValue]) -> frozenset[int]:
        found: frozenset[int] = frozenset()
        for v in values:
            found |= origin.get(v, frozenset())
        return found

    def walk(block: Block, waited: bool) -> None:
        for arg in block.args:
            if block is not kf.body.block and _is_memory(arg.type):
                origin[arg] = everything
        for op in block.ops:
            if is_wait(op):
                out.waits = waited = True
                continue
            src = sources(op.operands)
            if isinstance(op, K.PtrAddOp):
                origin[op.result] = src
            elif src and not isinstance(op, K.YieldOp):
                read, written = _accessed(op, sources)
                out.reads |= read
                out.writes |= written
                if not waited:
                    out.early_reads |= read
                    out.early_writes |= written
            for r in op.results:
                if _is_memory(r.type) and not isinstance(op, K.PtrAddOp):
                    origin[r] = everything if op.regions else src
            for region in op.regions:
                for b in region.blocks:
                    walk(b, waited)

    walk(kf.body.block, False)
    return out


__all__ = ["GlobalAccess", "global_access", "is_wait"]
