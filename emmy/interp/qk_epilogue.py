"""Tile interpreter: attention's Q and K computed in the projection's epilogue (fusion = epilogue).

    pairs = epilogue_pairs(function)          # projection result -> the attention that reads it
    rows = run_epilogue(pair, proj_plan, raw, attention_inputs)   # the rewritten rows
    fixed = direct_operands(pair, rows)       # Q/K overrides for the attention's evaluation

The branch is described in `emmy.schedule.qk_epilogue`. The interpreter follows it block by
block: for each tile of the projection's plan (block_m x block_n of its output), the attention's
Q/K expression of every head that lies in the tile is evaluated on that tile alone (every other
element of the source is NaN, so an expression reaching outside its tile shows up: an
AssertionError names the tile), and written in place of the head's raw columns. The attention then
reads Q and K as those rows: every copy of its Q x K contraction's operands is overridden by a
gather of the rewritten rows. The numbers are the same as with fusion = fused or split (the same
bf16 values, computed in another kernel).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.ir import OpResult, SSAValue

from emmy.analysis.body import Domains, Evaluator
from emmy.analysis.classify import classify
from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp
from emmy.schedule.attention import analyze
from emmy.schedule.contraction import ContractionPlan
from emmy.schedule.qk_epilogue import QkEpilogue, find, projection_illegal


@dataclass(frozen=True, eq=False)
class EpiloguePair:
    """An attention with fusion = epilogue and the projection whose result it rewrites."""

    attention: KernelOp
    projection: KernelOp
    result: int  # the projection's result holding the rows
    facts: QkEpilogue


def epilogue_pairs(f: func.FuncOp) -> dict[SSAValue, EpiloguePair]:
    """The projection results that attentions with fusion = epilogue read, each with its pair
    (an EmmyError where the branch cannot run: the attention's facts or the source's producer)."""
    out: dict[SSAValue, EpiloguePair] = {}
    for op in f.body.block.ops:
        if not isinstance(op, KernelOp) or op.kind.data != "attention":
            continue
        if op.knob_values().get("fusion") != "epilogue":
            continue
        facts = find(op, classify(op))
        where = f"tile.kernel @{op.kernel_name} (attention)"
        if isinstance(facts, str):
            raise EmmyError(f"{where}: fusion=epilogue: {facts}")
        src = op.inputs[facts.source]
        proj = src.owner if isinstance(src, OpResult) else None
        if not isinstance(proj, KernelOp):
            raise EmmyError(f"{where}: fusion=epilogue: its rows are not the result of a kernel of this function")
        if any(u.operation is not op for u in src.uses):
            raise EmmyError(f"{where}: fusion=epilogue: @{proj.kernel_name}'s result is read by other kernels too")
        out[src] = EpiloguePair(op, proj, src.index, facts)
    return out


def check_projection(pair: EpiloguePair, plan: ContractionPlan) -> None:
    """An EmmyError naming the projection where its plan cannot run the epilogue."""
    why = projection_illegal(pair.facts, pair.projection, classify(pair.projection), plan, pair.result)
    if why:
        raise EmmyError(f"tile.kernel @{pair.projection.kernel_name}: {why} (for @{pair.attention.kernel_name})")


def run_epilogue(
    pair: EpiloguePair, plan: ContractionPlan, raw: np.ndarray, attention_inputs: Sequence[np.ndarray]
) -> np.ndarray:
    """The projection's rows with the Q/K heads rewritten tile by tile (module docstring)."""
    check_projection(pair, plan)
    epi = pair.facts
    D = epi.head_dim
    body = analyze(pair.attention, classify(pair.attention))
    values = {"q": body.q.value, "k": body.k.value}
    rows, cols = raw.shape
    out = raw.copy()
    for r0 in range(0, rows, plan.bm):
        r1 = min(r0 + plan.bm, rows)
        for c0 in range(0, cols, plan.bn):
            c1 = min(c0 + plan.bn, cols)
            masked = np.full_like(raw, np.nan)
            masked[r0:r1, c0:c1] = raw[r0:r1, c0:c1]
            inputs = list(attention_inputs)
            inputs[epi.source] = masked
            ev = Evaluator(pair.attention, inputs)
            for o in epi.operands:
                for h in o.written:
                    if not c0 <= h * D < c1:
                        continue
                    b = o.heads.index(h)  # a batch/head row reading head h (all compute the same)
                    at = dict(zip(epi.batch_axes, (int(i) for i in np.unravel_index(b, epi.batch_shape))))
                    ranges = {a: (i, i + 1) for a, i in at.items()}
                    ranges[o.row_axis] = (r0, r1)
                    arr, axes = ev.value(values[o.name], ranges)
                    arr = _as_rows(arr, axes, o.row_axis, o.col_axis, r1 - r0, D)
                    if np.isnan(arr).any():
                        raise AssertionError(
                            f"tile.kernel @{pair.projection.kernel_name}: the {o.name.upper()} epilogue of head {h} "
                            f"reads outside its tile (rows {r0}:{r1}, columns {c0}:{c1})"
                        )
                    out[r0:r1, h * D:(h + 1) * D] = arr
    return out


def _as_rows(arr: np.ndarray, axes: Sequence[str], row: str, col: str, n_rows: int, D: int) -> np.ndarray:
    """An operand's value over (its axes) as [rows, D] (the batch axes are one index here)."""
    keep = [a for a in axes if a in (row, col)]
    arr = arr.reshape([n for n, a in zip(arr.shape, axes) if a in keep])
    if keep != [row, col]:
        arr = np.moveaxis(arr, [keep.index(a) for a in (row, col) if a in keep], range(len(keep)))
    return np.broadcast_to(arr.reshape(n_rows if row in keep else 1, D if col in keep else 1), (n_rows, D))


def direct_operands(pair: EpiloguePair, rows: np.ndarray) -> dict[SSAValue, np.ndarray]:
    """Overrides of every copy of the attention's Q and K operands (the operands of each copy of
    its Q x K contraction): the rewritten rows, gathered by head."""
    info = classify(pair.attention)
    att = info.attention
    assert att is not None
    dom = Domains(pair.attention)
    epi = pair.facts
    D = epi.head_dim
    by_name = {o.name: o for o in epi.operands}
    out: dict[SSAValue, np.ndarray] = {}
    for c in att.qk_all:
        for name, v in (("q", c.a), ("k", c.b)):
            o = by_name.get(name)
            if o is None:
                continue
            out[v] = _gather(dom.of(v), info.axes, epi, o.heads, o.row_axis, rows, D)
    return out


def _gather(axes: Sequence[str], extents: Mapping[str, int], epi: QkEpilogue, heads: Sequence[int],
            row: str, rows: np.ndarray, D: int) -> np.ndarray:
    """A value over `axes` (full extents): rows[row, heads[batch] * D + d], d the one other axis."""
    grid = np.indices([extents[a] for a in axes])
    coord = dict(zip(axes, grid))
    others = [a for a in axes if a not in epi.batch_axes and a != row]
    if len(others) != 1:
        raise AssertionError(f"an operand over {list(axes)} has no single head-dimension axis")
    flat = np.zeros(grid.shape[1:], dtype=np.int64)
    for a, n in zip(epi.batch_axes, epi.batch_shape):
        flat = flat * n + (coord[a] if a in coord else 0)
    col = np.asarray(heads)[flat] * D + coord[others[0]]
    r = coord[row] if row in coord else np.zeros_like(col)
    return rows[r, col].astype(np.float32)


__all__ = ["EpiloguePair", "check_projection", "direct_operands", "epilogue_pairs", "run_epilogue"]
