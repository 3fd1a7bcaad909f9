"""Tile interpreter: attention's Q and K computed in the projection's epilogue (fusion = epilogue).

    rows = run_epilogue(task, plan, raw, attention_inputs)   # the projection's rewritten rows
    fixed = direct_operands(task, rows)                       # Q/K for the attention's evaluation

The branch is described in `emmy.schedule.qk_epilogue`; `task` is its `QkTask` (`task_of` the
projection: what the plan's `qk` holds). The interpreter follows it block by block: for each tile
of the projection's plan (block_m x block_n of its output), the attention's Q/K code of every head
that lies in the tile is evaluated on that tile alone (every other element of the rows is NaN, so
code reaching outside its tile shows up: an AssertionError names the tile), and written in place
of the head's raw columns. The attention then reads Q and K as those rows: every copy of its
Q x K contraction's operands is overridden by a gather of the rewritten rows. The numbers are the
same as with fusion = fused or split (the same bf16 values, computed in another kernel).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.ir import SSAValue

from emmy.analysis.body import Domains, Evaluator
from emmy.analysis.classify import classify
from emmy.schedule.contraction import ContractionPlan
from emmy.schedule.qk_epilogue import QkEpilogue, QkTask


def run_epilogue(
    task: QkTask, plan: ContractionPlan, raw: np.ndarray, attention_inputs: Sequence[np.ndarray]
) -> np.ndarray:
    """The projection's rows with the Q/K heads rewritten tile by tile (module docstring); `plan`
    is the projection's (emmy.schedule.plan.plan_kernel checked the pair's legality for it)."""
    epi = task.facts
    D = epi.head_dim
    values = {"q": task.body.q.value, "k": task.body.k.value}
    rows, cols = raw.shape
    out = raw.copy()
    for r0 in range(0, rows, plan.bm):
        r1 = min(r0 + plan.bm, rows)
        for c0 in range(0, cols, plan.bn):
            c1 = min(c0 + plan.bn, cols)
            heads = [(o, h) for o in epi.operands for h in o.written if c0 <= h * D < c1]
            if not heads:
                continue
            masked = np.full_like(raw, np.nan)
            masked[r0:r1, c0:c1] = raw[r0:r1, c0:c1]
            inputs = list(attention_inputs)
            inputs[epi.source] = masked
            ev = Evaluator(task.attention, inputs)
            for o, h in heads:
                b = o.heads.index(h)  # a batch/head row reading head h (all compute the same)
                at = (int(i) for i in np.unravel_index(b, epi.batch_shape))
                ranges = {a: (i, i + 1) for a, i in zip(epi.batch_axes, at)}
                ranges[o.row_axis] = (r0, r1)
                arr, axes = ev.value(values[o.name], ranges)
                arr = _as_rows(arr, axes, o.row_axis, o.col_axis, r1 - r0, D)
                if np.isnan(arr).any():
                    raise AssertionError(
                        f"tile.kernel @{task.attention.kernel_name}: the {o.name.upper()} epilogue of head {h} "  # type: ignore[attr-defined]
                        f"reads outside its tile (rows {r0}:{r1}, columns {c0}:{c1})"
                    )
                out[r0:r1, h * D:(h + 1) * D] = arr
    return out


def _as_rows(arr: np.ndarray, axes: Sequence[str], row: str, col: str, n_rows: int, D: int) -> np.ndarray:
    """An operand's value over (its axes) as [rows, D] (the batch axes are one index here)."""
    keep = [a for a in axes if a in (row, col)]
    arr = arr.reshape([n for n, a in zip(arr.shape, axes) if a in keep])
    if keep == [col, row]:
        arr = arr.T
    return np.broadcast_to(arr.reshape(n_rows if row in keep else 1, D if col in keep else 1), (n_rows, D))


def direct_operands(task: QkTask, rows: np.ndarray) -> dict[SSAValue, np.ndarray]:
    """Overrides of every copy of the attention's Q and K operands (the operands of each copy of
    its Q x K contraction): the rewritten rows, gathered by head."""
    info = classify(task.attention)
    att = info.attention
    assert att is not None
    dom = Domains(task.attention)
    epi = task.facts
    by_name = {o.name: o for o in epi.operands}
    out: dict[SSAValue, np.ndarray] = {}
    for c in att.qk_all:
        for name, v in (("q", c.a), ("k", c.b)):
            o = by_name.get(name)
            if o is not None:
                out[v] = _gather(dom.of(v), info.axes, epi, o.heads, o.row_axis, rows)
    return out


def _gather(axes: Sequence[str], extents: Mapping[str, int], epi: QkEpilogue, heads: Sequence[int],
            row: str, rows: np.ndarray) -> np.ndarray:
    """A value over `axes` (full extents): rows[row, heads[batch] * D + d], d the one other axis."""
    grid = np.indices([extents[a] for a in axes])
    coord = dict(zip(axes, grid))
    others = [a for a in axes if a not in epi.batch_axes and a != row]
    if len(others) != 1:
        raise AssertionError(f"an operand over {list(axes)} has no single head-dimension axis")
    flat = np.zeros(grid.shape[1:], dtype=np.int64)
    for a, n in zip(epi.batch_axes, epi.batch_shape):
        flat = flat * n + (coord[a] if a in coord else 0)
    col = np.asarray(heads)[flat] * epi.head_dim + coord[others[0]]
    r = coord[row] if row in coord else np.zeros_like(col)
    return rows[r, col].astype(np.float32)


__all__ = ["direct_operands", "run_epilogue"]
