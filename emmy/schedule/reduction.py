"""The plan of a reduction kernel: rows per block, threads per row, the launch.

    plan(info, values, target) -> ReductionPlan

A block reduces `rows_per_block` rows (at most the rows there are, rounded down to a power of
two), each with `threads / rows_per_block` threads (a power of two); `vector` elements per
access along the contiguous axis (at most 8). Shared memory: one f32 per warp for the
block-wide sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING

from emmy.schedule.contraction import LaunchPlan
from emmy.targets import Target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from emmy.analysis.classify import KernelInfo
    from emmy.tuning.knobs import KnobValue

MAX_VECTOR = 8  # elements per access (16 bytes of bf16)


def pow2_floor(x: int) -> int:
    """The largest power of two <= x (1 for x < 2)."""
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def largest_divisor_pow2(n: int, cap: int) -> int:
    """The largest power of two <= cap dividing n."""
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


def row_major_strides(shape) -> list[int]:
    """Element strides of a row-major tensor of `shape`."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return strides


class OneLaunchPlan:
    """What the plans of the one-launch kernels (reduction, elementwise) derive alike from their
    `name`, `blocks`, `threads`, `vector` and `target`: one main launch of `blocks` blocks."""

    @property
    def waves(self) -> int:
        return -(-self.blocks // self.target.sms)

    @property
    def registers(self) -> int:
        """Registers per thread, estimated: a few per vector lane besides addresses."""
        return 32 + 2 * self.vector

    @property
    def launches(self) -> tuple[LaunchPlan, ...]:
        return (LaunchPlan(self.name, (self.blocks, 1, 1), (self.threads, 1, 1), "main"),)


@dataclass(frozen=True)
class ReductionPlan(OneLaunchPlan):
    name: str
    rows: int  # rows to reduce (the product of the row axes)
    rows_per_block: int
    threads_per_row: int
    vector: int  # requested elements per access (each store narrows it to what its axis divides)
    target: Target = field(repr=False)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def warps(self) -> int:
        return max(1, self.threads // 32)

    @property
    def blocks(self) -> int:
        return -(-self.rows // self.rows_per_block)

    @property
    def smem_bytes(self) -> int:
        return self.warps * 4


def plan(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> ReductionPlan:
    threads, rpb = int(values["threads"]), int(values["rows_per_block"])
    vector = max(1, min(int(values["vector"]), MAX_VECTOR))
    rows = prod(info.axes[a] for a in info.row_axes) if info.row_axes else 1
    rpb = max(1, min(rpb, pow2_floor(rows)))
    tpr = max(1, pow2_floor(threads // rpb))
    return ReductionPlan(name or info.name, rows, rpb, tpr, vector, target)
