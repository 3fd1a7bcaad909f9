"""Phases of a compiled function: what runs on every call and what runs once.

Work that reads model parameters only (a norm weight folded into the weight matrix that follows
it, see `loop-hoist-params`) belongs to the **prepare** phase: its loops, tile kernels and
launches carry the discardable attribute `emmy.phase = "prepare"`, the buffers they write are
`prepared` (kept from one call to the next), and the runtime runs them once when the weights are
bound. Everything else is the forward phase (no attribute).
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

PHASE = "emmy.phase"
PREPARE = "prepare"


def is_prepare(op: Operation) -> bool:
    """Whether an op (a loop, tile kernel or launch) belongs to the prepare phase."""
    phase = op.attributes.get(PHASE)
    return isinstance(phase, StringAttr) and phase.data == PREPARE


def mark_prepare(op: Operation) -> None:
    op.attributes[PHASE] = StringAttr(PREPARE)


__all__ = ["PHASE", "PREPARE", "is_prepare", "mark_prepare"]
