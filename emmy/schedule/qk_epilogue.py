"""Attention's computed Q and K in the q/k/v projection's epilogue: which heads, and when it is legal.

    find(attention_op, info) -> QkEpilogue | str              # the facts, or why there are none
    attention_illegal(info) -> str                            # the attention's side (legality)
    projection_illegal(epi, projection_op, info, plan, result) -> str   # the projection's side
    task_of(projection_op) -> QkTask | None                   # what its epilogue computes (its plan's qk)
    check_pairs(tile_kernels)                                 # an EmmyError for an attention left unpaired

Attention's `fusion` knob says where the per-head code of its computed Q and K runs (Qwen3: the
q/k RMSNorm over the head dimension, then the rotary embedding): `fused` (while staging, in the
flash kernel), `split` (a prologue kernel `<name>_prep`), or `epilogue` (in the epilogue of the
contraction that produces their rows, which then holds normalized, rotated Q and K where it held
the raw ones; the flash kernel copies them as direct rows: `direct_rows`). This module holds the
facts the third way rests on; legality, decide-forks (which fits the projection's block_n,
split_k and split_tail for it), `emmy.schedule.plan.plan_kernel` (the projection's plan's `qk`),
the lowerings (emmy.lowering.contraction_epilogue.qk_stores, emmy.lowering.attention) and the
tile interpreter (emmy.interp.qk_epilogue) read them.

The attention side (`find`, `attention_illegal`): each computed operand (Q, K) reads one input by
rows, the source (the projection's output, [rows, columns]), only at its own row and only inside
one aligned head of head_dim columns (columns h * D ... h * D + D - 1: RMSNorm's row sum over d,
rotate_half's partner column d +- D/2); the batch/head axes reach its value only through which
head that is (so query heads sharing a key head under grouped-query attention compute the same
K: it is written once, in place); Q's heads, K's heads and the columns V reads are disjoint; the
source is a contraction tile.kernel's result (an attention isolated for tuning has it as an
argument: there the branch cannot run). The epilogue overwrites column h * D + d of the source
with the operand's bf16 value at (row, h, d) and the flash kernel reads it back from there.

The projection side (`projection_illegal`): the source is stored at [m, n] (its only store of that
result: rows by m, columns by its n axis) and read by the attention only; the plan has block_n a
multiple of D (tiles start at multiples of block_n, so a tile holds whole aligned heads: a head's
row, its row sum and every rotary partner lie in one block), no split_k and no split_tail (their
parts would see partial sums, and split_k's combine adds element by element), and a staged
epilogue holding the whole tile (`epilogue_width` = block_n): the tile's bf16 results sit in
shared memory, where a row's sum over a head and the partner column d +- D/2 are plain reads,
whatever the accumulator layout of the workers (mma.sync's quads, wgmma's warpgroups, several warps
across n). In registers it would need D/2 a multiple of 8 for partners to share a thread and a
shuffle plus a shared-memory reduction across warps for the row sum; the shared-memory form is
chosen because it is legal for every worker layout the staged epilogue has. The heads of each
operand must be first + row / group (query heads, grouped key heads) so that the epilogue finds a
batch/head row for a head by arithmetic.

Only a pin reaches `epilogue` (emmy.tuning.knobs.IN_CONTEXT): the rules keep fused/split, the prior
does not rank it, and a tuning study of the isolated attention cannot run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from xdsl.ir import BlockArgument, Operation, SSAValue

from emmy.analysis.body import Evaluator, value_tree
from emmy.analysis.classify import Domains, KernelInfo, classify
from emmy.dialects.loop import AxisOp, LoadOp, StoreOp
from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp
from emmy.schedule.attention_body import DIRECT, AttentionBody, Producer, analyze, row_stride


@dataclass(frozen=True)
class HeadOperand:
    """One computed operand written by the projection's epilogue."""

    name: str  # "q" or "k"
    heads: tuple[int, ...]  # the source head (column block) of each batch/head row, in row-major order of the batch axes
    row_axis: str  # its row axis in the attention (query or key axis)
    col_axis: str  # its head-dimension axis in the attention
    rows: Producer = field(repr=False, compare=False)  # the operand read back as direct rows of the source

    @property
    def written(self) -> tuple[int, ...]:
        """The distinct heads the epilogue writes for this operand, ascending."""
        return tuple(sorted(set(self.heads)))

    @property
    def progression(self) -> tuple[int, int] | None:
        """(first, group) when batch/head row b reads head first + b // group (every head
        `group` rows in a row: query heads one each, key heads once per grouped-query group),
        else None. The CUDA epilogue finds a row reading head h as (h - first) * group."""
        first, n = self.heads[0], len(self.heads)
        for group in range(1, n + 1):
            if n % group == 0 and all(h == first + b // group for b, h in enumerate(self.heads)):
                return first, group
        return None


@dataclass(frozen=True)
class QkEpilogue:
    """The facts of moving attention's computed Q/K into the projection's epilogue."""

    source: int  # the attention's input (operand index) holding the rows: the projection's output
    rows: int  # the source's rows
    columns: int  # the source's columns
    head_dim: int
    batch_axes: tuple[str, ...]
    batch_shape: tuple[int, ...]
    operands: tuple[HeadOperand, ...]  # the computed ones of Q and K, in that order

    @property
    def heads(self) -> tuple[int, ...]:
        """Every head the epilogue writes, ascending."""
        return tuple(sorted({h for o in self.operands for h in o.heads}))


def _roots(p: Producer) -> list[SSAValue]:
    return [p.value] + [st.yielded for st in p.stats]


def tree_loads(p: Producer) -> list[LoadOp]:
    """The loads the operand's value reads (inside its row statistic too), each once."""
    return [v.owner for v in value_tree(_roots(p), leaves=()) if isinstance(v.owner, LoadOp)]


def _batch_reach(p: Producer, batch: tuple[str, ...]) -> set[str]:
    """The batch axes the operand's value reads other than through the indices of loads."""
    return {
        v.owner.axis_name
        for v in value_tree(_roots(p), leaves=(LoadOp,))
        if isinstance(v.owner, AxisOp) and v.owner.axis_name in batch
    }


def _by_head_only(ev: Evaluator, p: Producer, source: BlockArgument, batch: tuple[str, ...], heads: np.ndarray) -> bool:
    """Whether the operand's loads of other inputs read the same elements for every batch/head
    row reading the same head (Qwen2's bias by query head, by key head under grouped-query
    attention): then the value of a head is one, whichever row computes it."""
    flat = heads.reshape(-1)
    for ld in tree_loads(p):
        if ld.tensor is source:
            continue
        for idx in ld.indices:
            at = _columns(ev, idx, batch).reshape(len(flat), -1)
            for h in set(flat.tolist()):
                rows = at[flat == h]
                if np.any(rows != rows[:1]):
                    return False
    return True


def _columns(ev: Evaluator, idx: SSAValue, batch: tuple[str, ...]) -> np.ndarray:
    """The index values of `idx` as an array [batch..., rest] (rest: every other axis flattened)."""
    arr, axes = ev.value(idx)
    order = [a for a in batch if a in axes] + [a for a in axes if a not in batch]
    arr = np.moveaxis(arr, [axes.index(a) for a in order], range(len(order)))
    arr = arr.reshape([ev.extents[a] if a in axes else 1 for a in batch] + [-1])
    return np.broadcast_to(arr, [ev.extents[a] for a in batch] + [arr.shape[-1]])


def _read_columns(ev: Evaluator, body: AttentionBody, p: Producer, source: BlockArgument) -> list[np.ndarray]:
    return [_columns(ev, ld.indices[1], body.batch_axes) for ld in tree_loads(p) if ld.tensor is source]


def find(op: Operation, info: KernelInfo) -> QkEpilogue | str:
    """The facts of the epilogue branch for the attention tile.kernel `op`, or why it has none
    (a sentence naming the operand and what it reads)."""
    try:
        body = analyze(op, info)
    except EmmyError as e:
        return str(e)
    computed = [p for p in (body.q, body.k) if p.mode != DIRECT]
    if not computed:
        return "Q and K are plain rows already (nothing to compute in an epilogue)"
    block = op.regions[0].block
    ev = Evaluator(op, [np.zeros(a.type.get_shape(), np.float32) for a in block.args])  # type: ignore[union-attr]
    source: BlockArgument | None = None
    D = body.head_dim
    operands = []
    batch_shape = tuple(info.axes[a] for a in body.batch_axes)
    for p in computed:
        name = p.name.upper()
        tensors = {ld.tensor for ld in tree_loads(p) if _row_read(ld, p.row_axis)}
        t = tensors.pop() if len(tensors) == 1 else None
        if (t is None or (source is not None and t is not source)
                or any(ld.tensor is t and not _row_read(ld, p.row_axis) for ld in tree_loads(p))):
            return (f"{name} does not read its rows, and only its own row, from one [rows, columns] input "
                    "(the same for Q and K: the projection's output)")
        source = t
        heads = None
        for cols in _read_columns(ev, body, p, t):
            h = cols // D
            if np.any(h != h[..., :1]):
                return f"{name} reads columns outside one aligned head of {D} columns"
            h = h[..., 0]
            if heads is not None and np.any(h != heads):
                return f"{name} reads columns outside one aligned head of {D} columns"
            heads = h
        assert heads is not None
        reach = _batch_reach(p, body.batch_axes)
        if reach or not _by_head_only(ev, p, t, body.batch_axes, np.asarray(heads)):
            axes = ", ".join(sorted(reach) or body.batch_axes)
            return f"{name} depends on {axes} other than through which head of its source it reads"
        rows_ = _as_direct(p, t, Domains(op))
        if rows_ is None:
            return (f"{name} reads no column h * {D} + d of its source as it is (16-byte aligned rows): "
                    "nothing to read its epilogue's result back from")
        operands.append(HeadOperand(p.name, tuple(int(x) for x in np.asarray(heads).reshape(-1)), p.row_axis, p.col_axis, rows_))
    assert source is not None
    if len(operands) == 2 and set(operands[0].heads) & set(operands[1].heads):
        return "Q and K read the same heads of their source"
    written = {h for o in operands for h in o.heads}
    v = body.v
    v_cols = _read_columns(ev, body, v, source) if v.mode != DIRECT else (
        [_columns(ev, v.load.indices[1], body.batch_axes)] if v.load is not None and v.load.tensor is source else []
    )
    for cols in v_cols:
        if set(np.unique(cols // D).tolist()) & written:
            return "V reads columns of the heads the epilogue would overwrite with Q or K"
    rows_, cols_ = source.type.get_shape()  # type: ignore[union-attr]
    return QkEpilogue(block.args.index(source), rows_, cols_, D, body.batch_axes, batch_shape, tuple(operands))


def _as_direct(p: Producer, source: BlockArgument, dom: Domains) -> Producer | None:
    """The operand as direct rows of the source (where the epilogue writes it): a load of the
    source at (row, h * D + d) in its tree (emmy.schedule.attention_body.row_stride)."""
    for ld in tree_loads(p):
        stride = row_stride(ld, p.row_axis, p.col_axis, dom) if ld.tensor is source else None
        if stride is not None:
            return Producer(p.name, ld.result, p.row_axis, p.col_axis, DIRECT, load=ld, stride=stride)
    return None


def direct_rows(body: AttentionBody, epi: QkEpilogue) -> AttentionBody:
    """The attention body as fusion = epilogue runs it: Q and K (the computed ones) direct rows of
    the source, which the projection's epilogue rewrote."""
    new = {o.name: o.rows for o in epi.operands}
    return replace(body, q=new.get("q", body.q), k=new.get("k", body.k))


def _row_read(ld: LoadOp, row_axis: str) -> bool:
    """Whether a load of a 2-D input reads row `row_axis` (its first index is that axis)."""
    if len(ld.indices) != 2 or not isinstance(ld.tensor, BlockArgument):
        return False
    o = ld.indices[0].owner
    return isinstance(o, AxisOp) and o.axis_name == row_axis


def stored_columns(op: Operation, info: KernelInfo, result: int) -> str:
    """Why result `result` of the contraction tile.kernel `op` is not stored at [m, n] by its
    only m and n axes (empty when it is): the epilogue's tile columns are then source columns."""
    if info.kind != "contraction":
        return f"its rows come from a kernel of kind {info.kind}, not a contraction"
    st = [s for s in info.stores if isinstance(s, StoreOp) and s.output_index == result]
    if len(st) != 1:
        return f"result {result} of @{info.name} is stored {len(st)} times"
    idx = st[0].indices
    axes = [i.owner.axis_name if isinstance(i.owner, AxisOp) else None for i in idx]
    if len(info.m_axes) != 1 or len(info.n_axes) != 1 or axes != [info.m_axes[0], info.n_axes[0]]:
        return f"@{info.name} does not store its result at [m, n] by its row and column axes"
    return ""


def projection_illegal(epi: QkEpilogue, op: Operation, info: KernelInfo, plan, result: int) -> str:
    """Why the contraction tile.kernel `op` (its KernelInfo `info`, its ContractionPlan `plan`)
    cannot compute attention's Q/K in its epilogue for result `result` (empty when it can)."""
    why = stored_columns(op, info, result)
    if why:
        return f"fusion=epilogue: {why}"
    D = epi.head_dim
    if plan.bn % D:
        return (f"fusion=epilogue needs block_n a multiple of the head dim {D} (a tile holds whole "
                f"heads: a row's sum over its head and the rotary partner d +- {D // 2}), not {plan.bn}")
    if plan.split > 1:
        return f"fusion=epilogue needs split_k=1 (split_k's parts and its combine see no whole heads), not {plan.split}"
    if plan.tail > 1:
        return f"fusion=epilogue needs split_tail=1 (the tail's parts are added by a last block of its own plan), not {plan.tail}"
    width = plan.smem.epilogue_width if plan.facts is not None else None
    if width != plan.bn or not info.stages_results:
        return ("fusion=epilogue needs the staged epilogue to hold the whole tile's bf16 results in shared "
                f"memory (block_n={plan.bn}; the layout stages {width or 'no'} columns)")
    for o in epi.operands:
        if o.progression is None:
            return (f"fusion=epilogue: the heads {o.name.upper()} reads ({', '.join(map(str, o.heads))}) are not "
                    "first + row / group: the epilogue cannot tell which head row to compute")
    return ""


@dataclass(frozen=True, eq=False)
class QkTask:
    """What a contraction's epilogue computes for an attention with fusion = epilogue: its plan's
    `qk` (emmy.schedule.plan.plan_kernel), read by the lowering and the tile interpreter."""

    attention: Operation  # the attention tile.kernel
    body: AttentionBody  # its analysis (the Q/K values the epilogue evaluates)
    facts: QkEpilogue
    result: int  # the contraction's result holding the rows
    inputs: tuple[int, ...]  # the attention's other inputs the Q/K code reads (kernel arguments too)


def attention_illegal(info: KernelInfo) -> str:
    """Why the attention `info` cannot take fusion = epilogue on its side (empty when it can):
    its facts (`find`), and its rows must be the result of a contraction tile.kernel of its
    function, whose epilogue would compute them (an attention isolated for tuning has them as
    an argument: there the branch cannot run, and is not measured)."""
    op = info.stores[0].parent_op() if info.stores else None
    if not isinstance(op, KernelOp):
        return "the attention is no tile.kernel"
    facts = find(op, info)
    if isinstance(facts, str):
        return facts
    src = op.operands[facts.source]
    owner = None if isinstance(src, BlockArgument) else src.owner
    if not isinstance(owner, KernelOp) or owner.kind.data != "contraction":
        what = "a function argument" if owner is None else f"the result of '{owner.name}'"
        return f"its Q/K rows are {what}, not the result of a contraction kernel whose epilogue could compute them"
    return ""


def check_pairs(kernels: list[Operation]) -> None:
    """An EmmyError for every attention among `kernels` (tile.kernel ops of one function) whose
    fusion is `epilogue` but whose rows no contraction kernel produces: its Q and K would be read
    raw as if normalized and rotated."""
    for att in kernels:
        if not _epilogue_attention(att):
            continue
        info = classify(att)
        why = attention_illegal(info)
        if why:
            raise EmmyError(f"tile.kernel @{att.kernel_name} (attention): fusion=epilogue: {why}")
        facts = find(att, info)
        assert not isinstance(facts, str)
        task_of(att.operands[facts.source].owner)  # the contraction's side (an EmmyError where it fails)


def _epilogue_attention(op: Operation) -> bool:
    """Whether `op` is an attention tile.kernel whose fusion is decided `epilogue`."""
    return (isinstance(op, KernelOp) and op.kind.data == "attention"
            and op.knob_values().get("fusion") == "epilogue")


def task_of(op: Operation) -> QkTask | None:
    """The Q/K epilogue the contraction tile.kernel `op` runs: where one of its results is read by
    an attention whose fusion is decided `epilogue` (None elsewhere). An EmmyError names the
    attention where its facts do not hold, or where its rows are read by other kernels too."""
    for n, r in enumerate(op.results):
        for use in r.uses:
            att = use.operation
            if not _epilogue_attention(att):
                continue
            where = f"tile.kernel @{att.kernel_name} (attention): fusion=epilogue"  # type: ignore[attr-defined]
            info = classify(att)
            facts = find(att, info)
            if isinstance(facts, str):
                raise EmmyError(f"{where}: {facts}")
            if att.operands[facts.source] is not r:
                continue  # it reads this result otherwise: its rows come from another kernel
            if any(u.operation is not att for u in r.uses):
                raise EmmyError(f"{where}: @{op.kernel_name}'s result is read by other kernels too")  # type: ignore[attr-defined]
            body = analyze(att, info)
            block = att.regions[0].block
            side = sorted({
                block.args.index(ld.tensor) for p in (body.q, body.k) if p.mode != DIRECT
                for ld in tree_loads(p) if ld.tensor is not block.args[facts.source]
            })
            for i in side:
                v = att.operands[i]
                if not isinstance(v, BlockArgument) and not v.owner.is_before_in_block(op):
                    raise EmmyError(f"{where}: its input {i} is computed after @{op.kernel_name}")  # type: ignore[attr-defined]
            return QkTask(att, body, facts, n, tuple(side))
    return None


__all__ = ["HeadOperand", "QkEpilogue", "QkTask", "attention_illegal", "check_pairs", "direct_rows", "find", "projection_illegal", "stored_columns", "task_of", "tree_loads"]
