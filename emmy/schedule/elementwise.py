"""The plan of an elementwise kernel: vector lanes, slots, blocks.

    plan(info, values, target) -> ElementwisePlan

Each thread handles `items` slots of `vector` lanes along the contiguous axis (a power of two
<= min(vector, 8) dividing its extent); a block has `threads` threads, and the grid covers
every slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING

from emmy.schedule.reduction import MAX_VECTOR, OneLaunchPlan, largest_divisor_pow2
from emmy.targets import Target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from emmy.analysis.classify import KernelInfo
    from emmy.tuning.knobs import KnobValue


def vector_width(info: KernelInfo, requested: int, axis: str) -> int:
    """The lanes per thread along `axis`: a power of two <= min(requested, 8) dividing its extent."""
    if not axis:
        return 1
    return largest_divisor_pow2(info.axes[axis], max(1, min(int(requested), MAX_VECTOR)))


@dataclass(frozen=True)
class ElementwisePlan(OneLaunchPlan):
    name: str
    threads: int
    items: int  # slots per thread
    vector: int  # lanes per slot along `vector_axis`
    vector_axis: str  # "" when the kernel has none
    slots: int  # vectors to compute
    target: Target = field(repr=False)

    @property
    def blocks(self) -> int:
        return max(1, -(-self.slots // (self.threads * self.items)))

    @property
    def smem_bytes(self) -> int:
        return 0


def plan(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> ElementwisePlan:
    vaxis = info.vector_axis if info.vector_axis in info.axes else ""
    vector = vector_width(info, int(values["vector"]), vaxis)
    virt = dict(info.axes)
    if vaxis:
        virt[vaxis] = info.axes[vaxis] // vector
    slots = prod(virt.values()) if virt else 1
    return ElementwisePlan(name or info.name, int(values["threads"]), int(values["items"]), vector, vaxis, slots, target)
