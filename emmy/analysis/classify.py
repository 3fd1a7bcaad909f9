"""What kind of kernel a fused loop is, and where its parts are.

    info = classify(op)        # op: a loop.fused or a tile.kernel

Kinds (docs/ir.md), tried in this order:
- `attention`: a top-level `loop.reduce sum` over a key axis that is a contraction (P x V) whose P
  side holds a nested contraction over the head dimension (Q x K), next to a top-level `max` and
  a top-level non-contraction `sum` over the same key axis (the softmax statistics).
- `contraction`: a top-level `loop.reduce sum` whose yielded value is a product `A * B`, where
  A depends on the m-side axes + k and B on the n-side axes + k (each side has axes the other
  lacks, and both depend on k). Casts (`arith.extf`/`truncf`) between the factors are looked
  through; factors that depend on k alone (RMSNorm's weight) count on the A side. Several such
  reduces with the same m/n/k axes (gate and up sharing A) form one "dual" contraction.
- `reduction`: at least one `loop.reduce`, none of the above.
- `elementwise`: no `loop.reduce`.

`KernelInfo` fields (all names are loop axis names; "top-level" means directly in the loop body):

| field | meaning |
|---|---|
| `name`, `kind` | the kernel's `sym_name`; one of `KINDS` |
| `axes` | axis name -> extent, in the loop's order |
| `parallel_axes` | axes some `loop.store` depends on, in loop order; `reduction_axes` the rest |
| `stores` | the top-level `loop.store` ops |
| `reductions` | every top-level `loop.reduce` |
| `element_bytes` | widest element (bytes) of the vectorizable loads and stores |
| `vector_axis`, `vector_extent` | the axis along which accesses are contiguous (k for a contraction, the head dim for attention, the reduced axis for a reduction, the stores' innermost axis for elementwise) and its extent |
| `contractions` | `Contraction`s (below); one, or several sharing A |
| `m_axes`, `n_axes`, `k_axes`, `batch_axes` | contraction axes: A-only, B-only, reduced, shared by A and B |
| `prologue` | top-level non-contraction reduces whose result depends only on m-side and batch axes (RMSNorm's sum of squares): computed once per row |
| `epilogue` | top-level ops other than `loop.reduce` that the stores need, in block order (they read contraction and prologue results), including the stores |
| `other_reductions` | top-level reduces that are neither contractions, prologue nor attention parts |
| `has_fusion_fork` | contractions with prologue reductions (the row statistics can be computed in the kernel or by a launch of their own): the `fusion` knob exists. A loop that `loop-fuse` marked `emmy.fusion = "fused"` without one (a residual added in the epilogue) has nothing to split and no knob |
| `has_siblings_fork` | outputs over the same axes come from different reductions (k and v of the running example, not gate and up, whose one store reads both): the `siblings` knob exists |
| `attention` | an `AttentionInfo` (below) for attention kernels, else None |
| `raw_a_loads`, `stages_results` | contractions: the loads a computed A side reads that can be copied raw (each with whether it needs block_m rows), and whether the stores can be evaluated on the accumulators and staged as bf16 results (`emmy.analysis.operands`): facts of the shared-memory layout |
| `staged_parts` | contractions whose stores also read a tensor: the bf16 values of the stores computed from the accumulators alone, which the staged epilogue stages instead of the f32 accumulators (() where one is not bf16) |
| `a_reads_prologue` | contractions: the A side uses a prologue reduction's result (x * rstd * w, where the norm weight could not be folded into B), so the row statistics must exist before the k loop |
| `epilogue_reads_prologue` | contractions: the stored values use a prologue reduction's result (RMSNorm's row scale applied to the accumulators); where they do not, the epilogue loads no statistic |
| `ws_row_stats` | contractions with a prologue: where a fused `wgmma_ws` kernel sums the row statistics: `in_place` (consumers, rewriting a computed A in place), `a_tiles` (consumers, from the staged A tiles), `producer` (while computing A from several tensors), `before` (a pass before the k loop); "" without a prologue (`emmy.analysis.operands`) |
| `parts_stage_results` | contractions: `stages_results` of every part the kernel is built as (outputs over other axes are parts of their own: the running example's q beside k and v), each store's value read from any contraction's accumulators |
| `op` | the `loop.fused` or `tile.kernel` classified |
| `row_axes`, `reduced_axes` | reductions: the axes the reduce results depend on (one row each) and the axes reduced |

`Contraction`: `reduce` (the `loop.reduce sum`), `k_axes`, `a` / `b` (the A-side and B-side factor
values inside the reduce region: the product of each side's factors, or the single factor),
`a_factors` / `b_factors` (each factor value), `a_loads` / `b_loads` (the `loop.load` ops feeding
each side), `m_axes`, `n_axes`, `batch_axes`.

`AttentionInfo`: `batch_axes` (batch and head axes), `query_axis`, `key_axis`, `head_dim_axes`
(the Q x K contraction's k axes), `value_dim_axis` (V's head-dim axis, an output axis), `qk` (the
first Q x K `Contraction`, nested in the max reduction; `qk_all` has every copy, one per region
that recomputes the scores), `max_reduce`, `sum_reduce`, `pv` (the P x V `Contraction`),
`pv_uses_sum` (the sum is divided out inside P x V rather than in the epilogue), `gqa` (None or
`(head_axis, group)`: K/V read head `head_axis / group`).

Convenience sizes: `M`, `N`, `K` (products of m-side, n-side, k extents; 1 when empty), `batch`
(product of batch extents; for attention the batch and head axes), `n_contractions`, `seq_q`,
`seq_kv`, `head_dim`, `value_dim`, `rows`, `row_length`, `extent(axes)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import combinations
from math import prod

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from emmy.analysis.body import Domains as BodyDomains
from emmy.analysis.body import value_tree
from emmy.analysis.operands import a_reads_prologue, raw_a_loads, reads_prologue, staged_parts, stages_results, ws_row_stats
from emmy.dialects.loop import AxisOp, LoadOp, ReduceOp, StoreOp
from emmy.diagnostics import EmmyError

KINDS: tuple[str, ...] = ("elementwise", "reduction", "contraction", "attention")

_CASTS = (arith.ExtFOp, arith.TruncFOp)
_MAX_FACTORS = 8


@dataclass(frozen=True, eq=False)
class Contraction:
    reduce: ReduceOp
    k_axes: tuple[str, ...]
    m_axes: tuple[str, ...]
    n_axes: tuple[str, ...]
    batch_axes: tuple[str, ...]
    a: SSAValue
    b: SSAValue
    a_factors: tuple[SSAValue, ...]
    b_factors: tuple[SSAValue, ...]
    a_loads: tuple[LoadOp, ...]
    b_loads: tuple[LoadOp, ...]

    @property
    def result(self) -> SSAValue:
        return self.reduce.result

    @property
    def a_value(self) -> SSAValue | None:
        """The one value computing the A side (its product), or None when only its factors exist."""
        return _one_value(self.a, self.a_factors)

    @property
    def b_value(self) -> SSAValue | None:
        """The one value computing the B side, or None when only its factors exist."""
        return _one_value(self.b, self.b_factors)


def _one_value(value: SSAValue, factors: tuple[SSAValue, ...]) -> SSAValue | None:
    if len(factors) == 1:
        return factors[0]
    return None if value in factors else value


@dataclass(frozen=True, eq=False)
class AttentionInfo:
    batch_axes: tuple[str, ...]
    query_axis: str
    key_axis: str
    head_dim_axes: tuple[str, ...]
    value_dim_axis: str
    qk: Contraction
    qk_all: tuple[Contraction, ...]
    max_reduce: ReduceOp
    sum_reduce: ReduceOp
    pv: Contraction
    pv_uses_sum: bool
    gqa: tuple[str, int] | None


@dataclass(frozen=True, eq=False)
class KernelInfo:
    name: str
    kind: str
    axes: dict[str, int]
    parallel_axes: tuple[str, ...]
    reduction_axes: tuple[str, ...]
    stores: tuple[StoreOp, ...]
    reductions: tuple[ReduceOp, ...]
    element_bytes: int
    vector_axis: str
    vector_extent: int
    contractions: tuple[Contraction, ...] = ()
    m_axes: tuple[str, ...] = ()
    n_axes: tuple[str, ...] = ()
    k_axes: tuple[str, ...] = ()
    batch_axes: tuple[str, ...] = ()
    prologue: tuple[ReduceOp, ...] = ()
    epilogue: tuple[Operation, ...] = ()
    other_reductions: tuple[ReduceOp, ...] = ()
    has_fusion_fork: bool = False
    has_siblings_fork: bool = False
    attention: AttentionInfo | None = None
    row_axes: tuple[str, ...] = ()
    reduced_axes: tuple[str, ...] = ()
    raw_a_loads: tuple[tuple[LoadOp, bool], ...] = ()
    stages_results: bool = False
    parts_stage_results: bool = False
    staged_parts: tuple[SSAValue, ...] = ()
    a_reads_prologue: bool = False
    epilogue_reads_prologue: bool = False
    ws_row_stats: str = ""
    op: Operation | None = field(default=None, repr=False)

    def extent(self, axes: Iterable[str]) -> int:
        """Product of the extents of `axes` (1 for none)."""
        return prod(self.axes[a] for a in axes)

    @property
    def k_axis(self) -> str:
        """The (innermost) contraction axis."""
        return self.k_axes[-1]

    @property
    def M(self) -> int:
        if self.attention is not None:
            return self.axes[self.attention.query_axis]
        return self.extent(self.m_axes)

    @property
    def N(self) -> int:
        if self.attention is not None:
            return self.axes[self.attention.value_dim_axis]
        return self.extent(self.n_axes)

    @property
    def K(self) -> int:
        if self.attention is not None:
            return self.axes[self.attention.key_axis]
        return self.extent(self.k_axes)

    @property
    def batch(self) -> int:
        if self.attention is not None:
            return self.extent(self.attention.batch_axes)
        return self.extent(self.batch_axes)

    @property
    def n_contractions(self) -> int:
        return max(1, len(self.contractions))

    @property
    def epilogue_loads(self) -> bool:
        """Whether the stored values read a tensor besides the contractions and the prologue
        (a residual added after a projection): its epilogue then gathers loads in the output's
        layout instead of only converting the accumulators."""
        return any(isinstance(op, LoadOp) for op in self.epilogue)

    @cached_property
    def contraction_widths(self) -> tuple[int, ...]:
        """The column extent of each contraction: the first group's (all over the same axes),
        then each of the other reductions over the same k axes (q over 2048 columns, then k and v
        over 1024 each)."""
        from emmy.analysis.body import domain

        rows = set(self.m_axes) | set(self.batch_axes) | set(self.k_axes)
        return tuple([self.N] * self.n_contractions + [
            self.extent(sorted(set(domain(r.result)) - rows))
            for r in self.other_reductions
            if set(r.axis_names) == set(self.k_axes)
        ])

    @property
    def gemm_n_nc(self) -> tuple[int, int]:
        """(N, contractions per tile) of the matrix product the kernel amounts to. Contractions
        over different column axes (q over 2048 columns, k and v over 1024) are built as parts
        side by side in one launch (lowering.split): together one product over all their
        columns, one contraction per tile."""
        if not self.other_reductions:
            return self.N, self.n_contractions
        return sum(self.contraction_widths), 1

    @property
    def seq_q(self) -> int:
        return self.axes[self.attention.query_axis] if self.attention else 1

    @property
    def seq_kv(self) -> int:
        return self.axes[self.attention.key_axis] if self.attention else 1

    @property
    def head_dim(self) -> int:
        return self.extent(self.attention.head_dim_axes) if self.attention else 1

    @property
    def value_dim(self) -> int:
        return self.axes[self.attention.value_dim_axis] if self.attention else 1

    @property
    def rows(self) -> int:
        return self.extent(self.row_axes)

    @property
    def row_length(self) -> int:
        return self.extent(self.reduced_axes)


# --------------------------------------------------------------------------------------------
# Domains
# --------------------------------------------------------------------------------------------


class Domains:
    """Domains (the axes a value depends on) of the values of one loop body, as frozensets;
    a thin view of `emmy.analysis.body.Domains` (one linear walk of the body)."""

    def __init__(self, owner: Operation) -> None:
        self._body = BodyDomains(owner)
        self._memo: dict[SSAValue, frozenset[str]] = {}

    def __call__(self, value: SSAValue) -> frozenset[str]:
        d = self._memo.get(value)
        if d is None:
            d = frozenset(self._body.of(value))
            self._memo[value] = d
        return d

    def of_op(self, op: Operation) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for operand in op.operands:
            out |= self(operand)
        return out


# --------------------------------------------------------------------------------------------
# classify
# --------------------------------------------------------------------------------------------


def classify(op: Operation) -> KernelInfo:
    """Classify a `loop.fused` or `tile.kernel` (see the module docstring for the fields)."""
    axes_attr = op.properties.get("axes")
    if axes_attr is None or not hasattr(op, "body"):
        raise EmmyError(f"classify: {op.name} is not a loop.fused or tile.kernel")
    name = op.properties["sym_name"].data  # type: ignore[union-attr]
    axes: dict[str, int] = axes_attr.as_dict()  # type: ignore[union-attr]
    block = op.regions[0].block
    dom = Domains(op)

    top = list(block.ops)
    stores = tuple(o for o in top if isinstance(o, StoreOp))
    reduces = tuple(o for o in top if isinstance(o, ReduceOp))
    stored: set[str] = set()
    for s in stores:
        stored |= dom.of_op(s)
    parallel = tuple(a for a in axes if a in stored)
    reduction_axes = tuple(a for a in axes if a not in stored)
    order = _store_axis_order(stores, dom, axes)
    any_reduce = any(isinstance(o, ReduceOp) for o in op.walk())

    base = dict(
        name=name,
        axes=axes,
        parallel_axes=parallel,
        reduction_axes=reduction_axes,
        stores=stores,
        reductions=reduces,
        op=op,
    )

    contractions = [c for r in reduces if (c := _contraction(r, dom, order)) is not None]
    if contractions:
        att = _attention(contractions, reduces, dom, order)
        if att is not None:
            return _attention_info(base, att, top, axes)
        return _contraction_info(base, contractions, reduces, top, dom, axes)
    if any_reduce:
        return _reduction_info(base, reduces, dom, axes, block)
    return _elementwise_info(base, stores, dom, axes, block)


def store_groups(
    stores: Sequence[StoreOp], per_contraction: bool = False, dom: Domains | None = None
) -> list[list[int]]:
    """The stores (by index) grouped by the parallel axes they store over, in first-store order;
    with `per_contraction`, also by the reductions their values read (k apart from v). `dom`:
    the domains of their loop body, when the caller has them already."""
    if not stores:
        return []
    dom = dom or Domains(stores[0].parent_op())
    groups: dict[tuple, list[int]] = {}
    for i, st in enumerate(stores):
        key: tuple = tuple(sorted(dom.of_op(st)))
        if per_contraction:
            key = (key, frozenset(v.owner for v in value_tree(st.operands) if isinstance(v.owner, ReduceOp)))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _store_axis_order(stores: Sequence[StoreOp], dom: Domains, axes: dict[str, int]) -> dict[str, int]:
    """Axis -> position, by first appearance in the stores' index lists (then loop order)."""
    pos: dict[str, int] = {}
    n = 0
    for s in stores:
        for idx in s.indices:
            for a in axes:
                if a in dom(idx) and a not in pos:
                    pos[a] = n
                    n += 1
    for a in axes:
        if a not in pos:
            pos[a] = n
            n += 1
    return pos


# ---------------------------------------------------------------------------- contractions


def _strip_casts(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, _CASTS):
        v = v.owner.operands[0]
    return v


def _factors(v: SSAValue, out: list[SSAValue]) -> None:
    """Flatten a tree of arith.mulf (through casts) into its factors."""
    s = _strip_casts(v)
    if isinstance(s.owner, arith.MulfOp):
        for operand in s.owner.operands:
            _factors(operand, out)
    else:
        out.append(v)


def _loads_of(values: Iterable[SSAValue]) -> tuple[LoadOp, ...]:
    """The loop.load ops a set of values reads (through any ops, nested reduces included),
    in depth-first order of use."""
    seen: dict[LoadOp, None] = {}
    visited: set[SSAValue] = set()
    stack = list(reversed(list(values)))
    while stack:
        v = stack.pop()
        if v in visited:
            continue
        visited.add(v)
        o = v.owner
        if isinstance(o, LoadOp):
            seen.setdefault(o)
        elif isinstance(o, ReduceOp):
            inner_operands: list[SSAValue] = []
            for inner in o.walk():
                if isinstance(inner, LoadOp):
                    seen.setdefault(inner)
                inner_operands.extend(inner.operands)
            stack.extend(reversed(inner_operands))
        elif isinstance(o, Operation):
            stack.extend(reversed(o.operands))
    return tuple(seen)


def _contraction(r: ReduceOp, dom: Domains, order: dict[str, int]) -> Contraction | None:
    if r.kind_name != "sum":
        return None
    K = frozenset(r.axis_names)
    factors: list[SSAValue] = []
    _factors(r.yielded, factors)
    if len(factors) < 2 or len(factors) > _MAX_FACTORS:
        return None
    doms = [dom(f) for f in factors]
    best = None
    n = len(factors)
    for size in range(1, n):
        for group in combinations(range(n), size):
            ga = set(group)
            gb = [i for i in range(n) if i not in ga]
            da = frozenset().union(*(doms[i] - K for i in ga))
            db = frozenset().union(*(doms[i] - K for i in gb))
            if not (da - db) or not (db - da):
                continue
            if not any(doms[i] & K for i in ga) or not any(doms[i] & K for i in gb):
                continue
            # Factors without private axes go to the side that comes first in the stores.
            key = (len(da & db), sum(1 for i in gb if not (doms[i] - K) - da))
            if best is None or key < best[0]:
                best = (key, tuple(sorted(ga)), tuple(gb), da, db)
    if best is None:
        return None
    _, ga, gb, da, db = best
    first_a = min(order[a] for a in da - db)
    first_b = min(order[a] for a in db - da)
    if first_b < first_a:
        ga, gb, da, db = gb, ga, db, da
    # Shared-only factors (no private axes) belong on the A side.
    movable = [i for i in gb if not ((doms[i] - K) - da)]
    if movable and len(movable) < len(gb):
        ga = tuple(sorted(set(ga) | set(movable)))
        gb = tuple(i for i in gb if i not in movable)
    a_f = tuple(factors[i] for i in ga)
    b_f = tuple(factors[i] for i in gb)
    m_axes = _ordered(da - db, order)
    n_axes = _ordered(db - da, order)
    batch = _ordered(da & db, order)
    return Contraction(
        reduce=r,
        k_axes=r.axis_names,
        m_axes=m_axes,
        n_axes=n_axes,
        batch_axes=batch,
        a=_side_value(a_f, r),
        b=_side_value(b_f, r),
        a_factors=a_f,
        b_factors=b_f,
        a_loads=_loads_of(a_f),
        b_loads=_loads_of(b_f),
    )


def _side_value(factors: tuple[SSAValue, ...], r: ReduceOp) -> SSAValue:
    """The single value computing a side's product when one exists, else its first factor."""
    if len(factors) == 1:
        return factors[0]
    wanted = set(factors)
    for o in r.body.block.ops:
        if isinstance(o, arith.MulfOp):
            fs: list[SSAValue] = []
            _factors(o.result, fs)
            if set(fs) == wanted:
                return o.result
    return factors[0]


def _ordered(axes: Iterable[str], order: dict[str, int]) -> tuple[str, ...]:
    return tuple(sorted(axes, key=lambda a: order[a]))


def _contraction_info(base, contractions, reduces, top, dom, axes) -> KernelInfo:
    first = contractions[0]
    same = tuple(
        c
        for c in contractions
        if (c.m_axes, c.n_axes, c.k_axes, c.batch_axes)
        == (first.m_axes, first.n_axes, first.k_axes, first.batch_axes)
    )
    in_contraction = {c.reduce for c in same}
    row_axes = frozenset(first.m_axes) | frozenset(first.batch_axes)
    prologue = tuple(
        r for r in reduces if r not in in_contraction and dom(r.result) <= row_axes
    )
    other = tuple(r for r in reduces if r not in in_contraction and r not in prologue)
    elt = max(_elt_bytes(l.tensor.type) for c in same for l in c.a_loads + c.b_loads) if any(
        c.a_loads or c.b_loads for c in same
    ) else 4
    k_axis = first.k_axes[-1]
    op = base["op"]
    raw = raw_a_loads(op, same, prologue, axes, dom)
    return KernelInfo(
        **base,
        kind="contraction",
        element_bytes=elt,
        vector_axis=k_axis,
        vector_extent=axes[k_axis],
        contractions=same,
        m_axes=first.m_axes,
        n_axes=first.n_axes,
        k_axes=first.k_axes,
        batch_axes=first.batch_axes,
        prologue=prologue,
        epilogue=_epilogue(top),
        other_reductions=other,
        has_fusion_fork=bool(prologue),
        has_siblings_fork=len(store_groups(base["stores"], True, dom)) > len(store_groups(base["stores"], False, dom)),
        raw_a_loads=raw,
        stages_results=stages_results(op, base["stores"], same, prologue),
        parts_stage_results=stages_results(op, base["stores"], contractions, prologue),
        staged_parts=staged_parts(op, base["stores"], same, prologue),
        a_reads_prologue=a_reads_prologue(same, prologue),
        epilogue_reads_prologue=reads_prologue([st.value for st in base["stores"]], prologue),
        ws_row_stats=ws_row_stats(same, prologue, raw, axes, dom),
    )


def _epilogue(top: Sequence[Operation]) -> tuple[Operation, ...]:
    """Top-level non-reduce ops the stores need, in block order (stores included)."""
    needed: set[Operation] = set()
    stack = [o for o in top if isinstance(o, StoreOp)]
    needed.update(stack)
    while stack:
        o = stack.pop()
        for operand in o.operands:
            d = operand.owner
            if isinstance(d, Operation) and not isinstance(d, ReduceOp) and d not in needed:
                if d.parent_block() is o.parent_block():
                    needed.add(d)
                    stack.append(d)
    return tuple(o for o in top if o in needed)


def _elt_bytes(t) -> int:
    if isinstance(t, TensorType):
        t = t.element_type
    width = getattr(t, "bitwidth", None)
    if width is None:
        width = getattr(getattr(t, "width", None), "data", 32)
    return max(1, int(width) // 8)


# ---------------------------------------------------------------------------- attention


def _nested_contractions(r: ReduceOp, dom: Domains, order) -> list[Contraction]:
    out = []
    for o in r.body.walk():
        if isinstance(o, ReduceOp) and o is not r:
            c = _contraction(o, dom, order)
            if c is not None:
                out.append(c)
    return out


def _attention(contractions, reduces, dom, order):
    for pv in contractions:
        if len(pv.k_axes) != 1:
            continue
        key = pv.k_axes[0]
        inner = _nested_contractions(pv.reduce, dom, order)
        if not inner:
            continue
        # the max and the sum over keys both recompute the scores (a nested Q x K contraction);
        # a row statistic that only shares the key axis' name (RMSNorm of a query row over a
        # head dim as long as the keys) is not one of them
        scores = {
            r: nested for r in reduces
            if r.axis_names == (key,) and r is not pv.reduce and (nested := _nested_contractions(r, dom, order))
        }
        maxes = [r for r in scores if r.kind_name == "max"]
        sums = [r for r in scores if r.kind_name == "sum" and all(c.reduce is not r for c in contractions)]
        if not maxes or not sums:
            continue
        mx, sm = maxes[0], sums[0]
        qk_all = scores[mx] + scores[sm] + inner
        qk = qk_all[0]
        if not qk.m_axes or len(pv.n_axes) != 1:
            continue
        return pv, mx, sm, qk, tuple(qk_all)
    return None


def _query_axis(qk: Contraction, key: str, score: SSAValue) -> str:
    """The query axis among the axes only Q reads. Usually the only one; with one key/value head
    for all query heads (multi-query attention, or grouped-query attention whose group is every
    head) K and V do not read the head axis either, and the query axis is the one the causal
    mask compares with the key axis, or else the last (SDPA's [batch, heads, sequence, dim])."""
    if len(qk.m_axes) == 1:
        return qk.m_axes[0]
    for v in value_tree([score]):
        o = v.owner
        if isinstance(o, arith.CmpiOp):
            lhs, rhs = (_axes_read(x) for x in o.operands)
            for a in qk.m_axes:
                if (key in lhs and a in rhs) or (key in rhs and a in lhs):
                    return a
    return qk.m_axes[-1]


def _axes_read(value: SSAValue) -> set[str]:
    """The loop axes an index expression reads."""
    return {v.owner.axis_name for v in value_tree([value], leaves=(ReduceOp, LoadOp)) if isinstance(v.owner, AxisOp)}


def _uses(region_op: Operation, value: SSAValue) -> bool:
    return any(value in o.operands for o in region_op.walk())


def _gqa(loads: Sequence[LoadOp]) -> tuple[str, int] | None:
    for l in loads:
        for idx in l.indices:
            o = idx.owner
            if isinstance(o, arith.DivUIOp):
                lhs, rhs = o.operands
                if isinstance(lhs.owner, AxisOp) and isinstance(rhs.owner, arith.ConstantOp):
                    group = int(rhs.owner.value.value.data)  # type: ignore[union-attr]
                    return (lhs.owner.axis_name, group) if group > 1 else None
    return None


def _attention_info(base, att, top, axes) -> KernelInfo:
    pv, mx, sm, qk, qk_all = att
    key = pv.k_axes[0]
    loads = qk.a_loads + qk.b_loads + pv.b_loads
    elt = max(_elt_bytes(l.tensor.type) for l in loads) if loads else 4
    head = qk.k_axes[-1]
    query = _query_axis(qk, key, mx.yielded)
    order = list(axes)
    batch = tuple(sorted(qk.batch_axes + tuple(a for a in qk.m_axes if a != query), key=order.index))
    info = AttentionInfo(
        batch_axes=batch,
        query_axis=query,
        key_axis=key,
        head_dim_axes=qk.k_axes,
        value_dim_axis=pv.n_axes[0],
        qk=qk,
        qk_all=qk_all,
        max_reduce=mx,
        sum_reduce=sm,
        pv=pv,
        pv_uses_sum=_uses(pv.reduce, sm.result),
        gqa=_gqa(qk.b_loads + pv.b_loads),
    )
    return KernelInfo(
        **base,
        kind="attention",
        element_bytes=elt,
        vector_axis=head,
        vector_extent=axes[head],
        contractions=(pv,),
        m_axes=(info.query_axis,),
        n_axes=(info.value_dim_axis,),
        k_axes=(key,),
        batch_axes=info.batch_axes,
        epilogue=_epilogue(top),
        attention=info,
    )


# ---------------------------------------------------------------------------- reductions


def _reduction_info(base, reduces, dom, axes, block) -> KernelInfo:
    all_reduces = [o for o in block.walk() if isinstance(o, ReduceOp)]
    top = reduces or tuple(all_reduces)
    row: set[str] = set()
    red: set[str] = set()
    for r in top:
        row |= dom(r.result)
        red |= set(r.axis_names)
    row_axes = tuple(a for a in axes if a in row and a in base["parallel_axes"])
    reduced = tuple(a for a in axes if a in red)
    vec_axis = _vector_axis_of(
        [o for r in top for o in r.walk() if isinstance(o, LoadOp)], reduced, dom, axes
    )
    vloads = [
        o for r in top for o in r.walk() if isinstance(o, LoadOp) and o.indices
        and vec_axis in dom(o.indices[-1])
    ]
    elt = max((_elt_bytes(l.tensor.type) for l in vloads), default=4)
    return KernelInfo(
        **base,
        kind="reduction",
        element_bytes=elt,
        vector_axis=vec_axis,
        vector_extent=axes[vec_axis] if vec_axis else 1,
        epilogue=_epilogue(list(block.ops)),
        row_axes=row_axes,
        reduced_axes=reduced,
    )


def _vector_axis_of(loads, candidates, dom, axes) -> str:
    """The candidate axis the most loads index their innermost dimension by (last wins ties)."""
    if not candidates:
        return ""
    score = {a: 0 for a in candidates}
    for l in loads:
        if l.indices:
            inner = dom(l.indices[-1])
            for a in candidates:
                if a in inner:
                    score[a] += 1
    best = max(score.values())
    return [a for a in candidates if score[a] == best][-1]


def _elementwise_info(base, stores, dom, axes, block) -> KernelInfo:
    vec_axis = ""
    for s in stores:
        if s.indices:
            inner = [a for a in axes if a in dom(s.indices[-1])]
            if inner:
                vec_axis = inner[-1]
                break
    if not vec_axis and base["parallel_axes"]:
        vec_axis = base["parallel_axes"][-1]
    accesses = [o for o in block.walk() if isinstance(o, LoadOp | StoreOp)]
    sizes = []
    for o in accesses:
        if o.indices and vec_axis in dom(o.indices[-1]):
            t = o.tensor.type if isinstance(o, LoadOp) else o.value.type
            sizes.append(_elt_bytes(t))
    return KernelInfo(
        **base,
        kind="elementwise",
        element_bytes=max(sizes, default=4),
        vector_axis=vec_axis,
        vector_extent=axes[vec_axis] if vec_axis else 1,
        epilogue=_epilogue(list(block.ops)),
    )


__all__ = ["KINDS", "AttentionInfo", "Contraction", "Domains", "KernelInfo", "classify"]
