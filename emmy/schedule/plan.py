"""The plan of a decided kernel: everything its lowering needs, from one place.

    plan_for(info, values, target) -> Plan        # one kernel (or part) of a kind
    plan_kernel(kernel_op, target) -> KernelPlan  # a decided tile.kernel, split into its parts

A plan is a frozen dataclass and a pure function of the kernel's facts (`KernelInfo` from
`emmy.analysis.classify`), its decided knob values and the `Target`. `plan_for` dispatches on the
kind to `emmy.schedule.<kind>.plan` (`ContractionPlan`, `AttentionPlan`, `ReductionPlan`,
`ElementwisePlan`); every plan has

    smem_bytes   shared memory of a block of its main kernel (contraction: the total of its layout,
                 `ContractionPlan.smem`, which also says where a computed A side comes from:
                 `a_source`)
    threads      threads per block of its main kernel
    blocks       blocks of its main launch
    waves        rounds of one block per multiprocessor that launch takes
    registers    registers per thread, estimated
    launches     its launches in order (`LaunchPlan`: kernel name, grid, block, role), helpers
                 included (row statistics, split_k's combine, split_tail's tail, attention's prep)

so legality, the launch budget of `decide-forks` and a tuner read them without building kernels.

A `tile.kernel` whose outputs lie over different axes (q over 2048 columns, k and v over 1024)
is built as parts, one copy of the op per group of outputs (`split_by_outputs`); `plan_kernel`
plans each part with the kernel's values (a part holding several contractions, k and v paired,
splits block_n among them where that is legal) and says how the parts' launches merge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

from emmy.analysis.classify import classify, store_groups
from emmy.diagnostics import EmmyError
from emmy.dialects.loop import StoreOp
from emmy.schedule import attention, contraction, elementwise, qk_epilogue, reduction
from emmy.schedule.attention import AttentionPlan
from emmy.schedule.contraction import ContractionPlan, LaunchPlan
from emmy.schedule.elementwise import ElementwisePlan
from emmy.schedule.reduction import ReductionPlan
from emmy.targets import Target

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo
    from emmy.tuning.knobs import KnobValue

Plan = ContractionPlan | AttentionPlan | ReductionPlan | ElementwisePlan

_PLANNERS = {
    "contraction": contraction.plan,
    "attention": attention.plan,
    "reduction": reduction.plan,
    "elementwise": elementwise.plan,
}


def plan_for(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> Plan:
    """The plan of the kernel (or part) `info` with decided `values` on `target`; `name` the
    kernel's name in the kernel stage (default: the tile op's)."""
    planner = _PLANNERS.get(info.kind)
    if planner is None:
        raise EmmyError(f"tile.kernel @{info.name}: no plan for kernels of kind '{info.kind}'")
    return planner(info, values, target, name)


@dataclass(frozen=True)
class Part:
    """One part of a kernel: a copy of the tile op keeping one group of its outputs."""

    op: Operation = field(repr=False)
    info: KernelInfo = field(repr=False)
    values: Mapping[str, KnobValue]  # the values its plan was made with
    plan: Plan


@dataclass(frozen=True)
class KernelPlan:
    """The plan of a decided `tile.kernel`: its parts' plans and how their launches merge.

    merge: "single" (one part), "one_launch" (the parts' kernels side by side in one launch),
    "shared_head" (their common row-statistics kernel once, then their kernels as one launch),
    "separate" (each part's launches, a row-statistics kernel the parts share only once)."""

    name: str
    kind: str
    parts: tuple[Part, ...]
    merge: str
    target: Target = field(repr=False)

    @property
    def launches(self) -> tuple[LaunchPlan, ...]:
        plans = [p.plan for p in self.parts]
        if self.merge == "single":
            return plans[0].launches
        mains = [pl.launches[-1] for pl in plans]
        joined = LaunchPlan(self.name, (sum(m.grid[0] for m in mains), *mains[0].grid[1:]), mains[0].block, "main")
        if self.merge == "one_launch":
            return (joined,)
        if self.merge == "shared_head":
            return (plans[0].launches[0], joined)
        out: list[LaunchPlan] = []
        for pl in plans:
            out += [la for la in pl.launches if not (la.role == "stats" and out and any(o.role == "stats" for o in out))]
        return tuple(out)

    @property
    def smem_bytes(self) -> int:
        return max(p.plan.smem_bytes for p in self.parts)

    @property
    def threads(self) -> int:
        return max(p.plan.threads for p in self.parts)

    @property
    def blocks(self) -> int:
        return sum(p.plan.blocks for p in self.parts)

    @property
    def waves(self) -> int:
        return -(-self.blocks // self.target.sms)

    @property
    def registers(self) -> int:
        return max(p.plan.registers for p in self.parts)


def plan_kernel(op: Operation, target: Target) -> KernelPlan:
    """The plan of a decided `tile.kernel` (an EmmyError names any undecided knob). A contraction
    whose result an attention with fusion = epilogue reads gets that task in its plan's `qk`
    (emmy.schedule.qk_epilogue.task_of; an EmmyError where its values cannot run it)."""
    name = op.kernel_name  # type: ignore[attr-defined]
    if not op.is_decided:  # type: ignore[attr-defined]
        undecided = [n for n, k in op.knob_dict().items() if not k.is_decided]  # type: ignore[attr-defined]
        raise EmmyError(
            f"tile.kernel @{name}: knobs {', '.join(undecided)} are undecided (run decide-forks first)"
        )
    values = dict(op.knob_values())  # type: ignore[attr-defined]
    kind = op.kind.data  # type: ignore[attr-defined]
    # the split into parts uses `siblings` up (k and v with tiles of their own or not): the
    # parts are planned, and checked, without it
    apart = values.pop("siblings", None) == "apart"
    ops = split_by_outputs(op, apart) if kind != "attention" else [op]
    task = qk_epilogue.task_of(op) if kind == "contraction" else None
    if task is not None and len(ops) > 1:
        raise EmmyError(f"tile.kernel @{name}: fusion=epilogue of @{task.attention.kernel_name} needs a kernel of one part")  # type: ignore[attr-defined]
    if len(ops) == 1:
        info = classify(op)
        pl = plan_for(info, values, target, name)
        if task is not None:
            assert isinstance(pl, ContractionPlan)
            why = qk_epilogue.projection_illegal(task.facts, op, info, pl, task.result)
            if why:
                raise EmmyError(f"tile.kernel @{name}: {why} (for @{task.attention.kernel_name})")  # type: ignore[attr-defined]
            pl = replace(pl, qk=task)
        return KernelPlan(name, kind, (Part(op, info, values, pl),), "single", target)
    parts = []
    for p in ops:
        info = classify(p)
        own, reasons = part_values(info, values, target)
        if reasons:
            raise EmmyError(f"tile.kernel @{name}: its part @{info.name} cannot run with the kernel's knobs: {'; '.join(reasons)}")
        parts.append(Part(p, info, own, plan_for(info, own, target, p.properties["sym_name"].data)))
    return KernelPlan(name, kind, tuple(parts), merge_of(parts), target)


def changes_launches(info: KernelInfo, values: Mapping[str, KnobValue], knob: str,
                     domain: Sequence[KnobValue], target: Target) -> bool:
    """Whether the values of `knob` in `domain` (every other knob as in `values`) plan different
    launches: which kernels run, their grids and blocks. With k split, a prologue's row statistics
    come from a launch of their own whatever `fusion` says, so both of its values launch the same
    kernels.
    A value the plan refuses counts as different (it is not the same program)."""
    seen = set()
    for v in domain:
        try:
            seen.add(plan_for(info, {**values, knob: v}, target).launches)
        except EmmyError:
            return True
    return len(seen) > 1


def part_values(info: KernelInfo, values: Mapping[str, KnobValue], target: Target) -> tuple[dict, list[str]]:
    """The values a part runs with, and the reasons they are illegal for it (empty: legal). The
    kernel was decided as one product over all its parts' columns (KernelInfo.gemm_n_nc), so a
    part with several contractions (k and v paired) splits block_n among them where that is
    legal: every block of the launch then does the same work."""
    from emmy.tuning.legality import check

    if info.n_contractions > 1 and "block_n" in values:
        shared = dict(values, block_n=max(8, int(values["block_n"]) // info.n_contractions // 8 * 8))
        if not check(info, shared, target):  # else too narrow for the workers (mma_sync pieces)
            return shared, []
    return dict(values), check(info, values, target)


def part_problems(op: Operation, values: Mapping[str, KnobValue], target: Target) -> list[tuple[str, list[str]]]:
    """(part name, reasons) of each part of the tile.kernel `op` that cannot run with `values`
    (none for a kernel of one part, whose values the deciders checked)."""
    values = dict(values)
    apart = values.pop("siblings", None) == "apart"
    ops = split_by_outputs(op, apart) if op.kind.data != "attention" else [op]  # type: ignore[attr-defined]
    if len(ops) == 1:
        return []
    found = [(p.properties["sym_name"].data, part_values(classify(p), values, target)[1]) for p in ops]
    return [(n, r) for n, r in found if r]


def merge_of(parts: list[Part]) -> str:
    """How the parts' launches merge (emmy.lowering.split.build_parts does what this says)."""
    first = parts[0].plan
    if isinstance(first, ContractionPlan) and first.persistent and not first.stream_k:
        return "separate"  # (schedule = persistent) each part's blocks already fill the machine
    shapes = [[la.role for la in p.plan.launches] for p in parts]
    if all(s == ["main"] and not _temps(p.plan) for s, p in zip(shapes, parts)):
        return "one_launch"
    if all(s == ["stats", "main"] and _temps(p.plan) == 1 for s, p in zip(shapes, parts)):
        return "shared_head"
    return "separate"


def _temps(pl: Plan) -> int:
    """Temporary buffers of a contraction plan's launches (row statistics, workspace, counters)."""
    if not isinstance(pl, ContractionPlan):
        return 0
    return int(pl.stats_kernel) + (2 if pl.ticketed else int(pl.split > 1))


def split_by_outputs(op: Operation, per_contraction: bool = False) -> list[Operation]:
    """Copies of the tile op, one per group of outputs stored over the same parallel axes, each
    keeping only its group's stores and what they need ([op] itself when there is one group).
    With `per_contraction`, outputs computed from different reductions are apart too (k and v,
    but not gate and up, whose one store reads both): each copy then holds one contraction
    per tile, and its tile is all its own instead of a column share of a pair. Each copy
    computes its rows' statistics itself; normalized values still never reach global memory."""
    top = list(op.regions[0].block.ops)
    stores = [i for i, o in enumerate(top) if isinstance(o, StoreOp)]
    groups = [[stores[j] for j in g] for g in store_groups([top[i] for i in stores], per_contraction)]
    if len(groups) < 2:
        return [op]
    name = op.properties["sym_name"].data  # type: ignore[union-attr]
    parts = []
    for keep in groups:
        part = op.clone()
        ops = list(part.regions[0].block.ops)
        for i in stores:
            if i not in keep:
                ops[i].detach()
                ops[i].erase()
        _erase_dead(part.regions[0].block)
        outs = "_".join(str(top[i].properties["output"].value.data) for i in keep)  # type: ignore[union-attr]
        part.properties["sym_name"] = StringAttr(f"{name}_out{outs}")
        parts.append(part)
    return parts


def _erase_dead(block) -> None:
    changed = True
    while changed:
        changed = False
        for o in reversed(list(block.ops)):
            if o is block.last_op or isinstance(o, StoreOp):  # the terminator, the kept stores
                continue
            if all(not r.uses for r in o.results):
                o.detach()
                o.erase()
                changed = True
