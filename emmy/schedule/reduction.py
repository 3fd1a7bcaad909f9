"""The plan of a reduction kernel: rows per block, threads per row, the launch.

    plan(info, values, target) -> ReductionPlan

A block reduces `rows_per_block` rows (at most the rows there are, rounded down to a power of
two), each with `threads / rows_per_block` threads (a power of two); `vector` elements per
access along the contiguous axis (at most 8). Shared memory: one f32 per warp for the
block-wide sum.

A kernel whose outputs lie over different axes (the running example at one token: q over n =
2048 rows, k and v over d2 = 1024) is built as parts (`emmy.schedule.plan.split_by_outputs`), one
group of outputs each, its rows those of its group: the plan of the whole kernel counts each
group's rows and blocks (`group_rows`), the sum of what its parts launch, not the product of all
row axes (2048 x 1024 rows: 262144 blocks of 8 where the parts launch 384).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emmy.dialects.loop import ReduceOp
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
    rows: int  # rows to reduce (the product of the row axes; of a group's, summed over the groups)
    rows_per_block: int
    threads_per_row: int
    vector: int  # requested elements per access (each store narrows it to what its axis divides)
    target: Target = field(repr=False)
    groups: tuple[int, ...] = ()  # the rows of each group of outputs built as a part (several)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def warps(self) -> int:
        return max(1, self.threads // 32)

    @property
    def blocks(self) -> int:
        # each part blocks its own rows (rows_per_block clamped to them, as its own plan does)
        return sum(-(-r // min(self.rows_per_block, pow2_floor(r))) for r in self.groups or (self.rows,))

    @property
    def smem_bytes(self) -> int:
        return self.warps * 4


def plan(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> ReductionPlan:
    threads, rpb = int(values["threads"]), int(values["rows_per_block"])
    vector = max(1, min(int(values["vector"]), MAX_VECTOR))
    groups = group_rows(info)
    rows = sum(groups)
    rpb = max(1, min(rpb, pow2_floor(max(groups))))
    tpr = max(1, pow2_floor(threads // rpb))
    return ReductionPlan(name or info.name, rows, rpb, tpr, vector, target, groups if len(groups) > 1 else ())


def group_rows(info: KernelInfo) -> tuple[int, ...]:
    """The rows of each group of outputs (`emmy.analysis.classify.store_groups`, the parts the
    kernel is built as): the row axes of the reduces a group's stores need (through the bodies of
    other reduces too) that the group stores over, as that part's own classification finds
    them. One entry, the product of all row axes, for a kernel of one group."""
    from emmy.analysis.classify import Domains, store_groups

    groups = store_groups(info.stores) if info.op is not None and len(info.stores) > 1 else []
    if len(groups) < 2:
        return (info.extent(info.row_axes),)
    dom = Domains(info.op)
    block = info.op.regions[0].block
    out = []
    for g in groups:
        stores = [info.stores[i] for i in g]
        stored = frozenset().union(*(dom.of_op(s) for s in stores))
        reduces = [o for o in needed(stores, block) if isinstance(o, ReduceOp)]
        row = frozenset().union(*(dom(r.result) for r in reduces))
        out.append(info.extent(a for a in info.axes if a in row and a in stored))
    return tuple(out)


def needed(roots, block) -> list:
    """The top-level ops of `block` the ops `roots` need, themselves included: through operands,
    and through the values the ops nested in them read (a reduce's body reading another's result)."""
    top = set(block.ops)
    seen: set = set()
    stack = list(roots)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for inner in op.walk():
            for v in inner.operands:
                owner = v.owner
                if owner in top and owner not in seen:
                    stack.append(owner)
    return [o for o in block.ops if o in seen]
