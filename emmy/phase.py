"""Phases of a compiled function: what runs on every call and what runs once.

Work that reads model parameters only (a norm weight folded into the weight matrix that follows
it, see `loop-hoist-params`) belongs to the **prepare** phase: its loops, tile kernels and
launches carry the discardable attribute `emmy.phase = "prepare"`, the buffers they write are
`prepared` (kept from one call to the next), and the runtime runs them once when the weights are
bound. Everything else is the forward phase (no attribute).

A forward-phase launch may also carry the unit attribute `emmy.overlap`: it is launched with
programmatic dependent launch and may start while the launch before it finishes (its kernel
waits for that one before touching global memory; see `kernel-overlap-launches`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr, UnitAttr
from xdsl.ir import Operation

PHASE = "emmy.phase"
PREPARE = "prepare"
OVERLAP = "emmy.overlap"


def is_prepare(op: Operation) -> bool:
    """Whether an op (a loop, tile kernel or launch) belongs to the prepare phase."""
    phase = op.attributes.get(PHASE)
    return isinstance(phase, StringAttr) and phase.data == PREPARE


def mark_prepare(op: Operation) -> None:
    op.attributes[PHASE] = StringAttr(PREPARE)


def is_overlapped(op: Operation) -> bool:
    """Whether a launch (`kernel.launch` or `cuda.launch`) may start before the previous one ends."""
    return isinstance(op.attributes.get(OVERLAP), UnitAttr)


def mark_overlapped(op: Operation) -> None:
    op.attributes[OVERLAP] = UnitAttr()


__all__ = ["OVERLAP", "PHASE", "PREPARE", "is_overlapped", "is_prepare", "mark_overlapped", "mark_prepare"]
