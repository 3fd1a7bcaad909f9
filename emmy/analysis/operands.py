"""Facts of a contraction's operands and stores that decide its shared-memory layout.

    raw_a_loads(op, contractions, prologue, axes, dom) -> ((load, full_rows), ...)
    stages_results(op, stores, contractions, prologue) -> bool
    staged_parts(op, stores, contractions, prologue) -> (value, ...)
    a_reads_prologue(contractions, prologue) -> bool
    ws_row_stats(contractions, prologue, raw, axes, dom) -> "" | "in_place" | "a_tiles" | "producer" | "before"

`classify` keeps them on the `KernelInfo` (`raw_a_loads`, `stages_results`, `staged_parts`,
`a_reads_prologue`, `ws_row_stats`); the plan (`emmy.schedule.contraction_smem`) lays out shared
memory from them, legality and the prior read them, and the lowering
(`emmy.lowering.contraction`) stages from the same loads, so all read one answer.

- `raw_a_loads`: when the A side is computed (not a plain copy) and every tensor element it reads
  is a bf16 load contiguous along k (16-byte aligned chunks of 8) indexed by m-side, batch and k
  axes only: those loads, each once, with whether its copy needs block_m rows (it has an m-side
  or batch axis) or one (a norm weight). Empty otherwise. Their tiles can then be copied raw
  with cp.async and A computed from shared memory.

      %x = loop.load %X[%t, %k]        (block_m rows)
      %w = loop.load %W[%k]            (one row)
      %a = arith.mulf %x, %w           -> raw_a_loads: ((%x's load, True), (%w's load, False))

- `stages_results`: every store is bf16 and its value reads nothing but the contractions, the
  row statistics, axes and constants (no tensor, RMSNorm's row scale): a staged epilogue can
  evaluate the stores on the accumulator fragments and stage their bf16 results.
- `staged_parts`: where the stores also read a tensor (a residual added after a projection), the
  values of their trees computed from the accumulators alone, when every one is bf16 (or an
  `arith.extf` of one, which then stands for it): the staged epilogue evaluates those on the
  fragments and stages them as bf16, half the bytes of the f32 accumulators, and evaluates
  the rest of each store on 8 columns at a time, where the tensor reads are 16 bytes wide.
  The values are the same either way: each part is computed from the same f32 accumulator.

      %c = loop.reduce sum ["k"] ...            (the contraction, f32)
      %r = loop.load %X[%m, %n]                 (the residual, bf16)
      %t = arith.truncf %c : f32 to bf16
      %s = arith.addf %r, %t : bf16             -> staged_parts: (%t,)

- `a_reads_prologue`: the A side uses a row statistic (x * rstd * w where the norm weight could
  not be folded into B), so the statistics must exist before the k loop. `reads_prologue` says
  the same of any values: of the stores (RMSNorm's row scale applied in the epilogue), for
  `KernelInfo.epilogue_reads_prologue`.
- `ws_row_stats`: where a fused warp-specialized kernel (workers = wgmma_ws, the row statistics
  summed in the kernel) sums its rows' statistics. Every prologue reduction must be a sum or max
  over exactly the contraction's k axes, and A must not use the statistics; then
  - `in_place`: A is computed from one block_m-row tensor (raw_a_loads): the producer copies its
    tile into the A slot, and each consumer warpgroup rewrites its own rows in place and sums
    their statistics on the way;
  - `a_tiles`: A is a plain copy of one tensor (16-byte chunks along k) and the reductions read
    that tensor alone (RMSNorm's sum of squares once its weight is folded into B): each consumer
    warpgroup sums its rows from the staged A tiles while its wgmmas run;
  - `producer`: A is computed from several block_m-row tensors (x + residual): the producer
    warpgroup sums the statistics while it computes A, and hands them to the tile's consumers
    at once, after the k loop;
  - `before` otherwise: a pass over the tile's rows before the k loop, once per tile (which a
    persistent block, whose producer runs ahead into the next tile, cannot wait for).
  "" without a prologue.

      %ss = loop.reduce sum ["k"] { x[m, k]^2 }     (A = x, B = w * g folded)    -> a_tiles
      %ss = loop.reduce sum ["k"] { x[m, k]^2 }     (A = g * x, g an input)      -> in_place
      %ss = loop.reduce sum ["k"] { (x + r)^2 }     (A = g * (x + r))            -> producer
      %ss = loop.reduce sum ["k"] { x[m, k]^2 }     (A = x * rsqrt(%ss / K) * g) -> before
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import gcd

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, IntegerAttr, TensorType
from xdsl.ir import Operation, SSAValue

from emmy.analysis.body import value_tree
from emmy.dialects.loop import AxisOp, LoadOp, ReduceOp, StoreOp

# elements of one staged access along k: 16 bytes of bf16
CHUNK = 8

Dom = Callable[[SSAValue], frozenset[str]]


def raw_a_loads(op: Operation, contractions, prologue, axes: dict[str, int], dom: Dom) -> tuple[tuple[LoadOp, bool], ...]:
    """The loads a computed A side reads, copied raw (module docstring), or ()."""
    c0 = contractions[0]
    k_axes, k_last = frozenset(c0.k_axes), c0.k_axes[-1]
    if axes[k_last] % CHUNK:
        return ()
    lanes = LaneForms(dom)
    value = c0.a_value
    if value is not None and _plain_copy(value, k_axes, k_last, lanes, dom):
        return ()  # a plain copy already
    roots = [value] if value is not None else list(c0.a_factors)
    side = frozenset(c0.m_axes) | frozenset(c0.batch_axes)
    allowed = side | k_axes
    stop = {r.result for r in prologue}
    loads: list[tuple[LoadOp, bool]] = []
    for v in value_tree(roots, stop=stop, leaves=(ReduceOp, LoadOp)):  # a load's indices are not A
        owner = v.owner
        if isinstance(owner, LoadOp):
            if not _copyable(owner, k_last, lanes) or not dom(v) <= allowed:
                return ()
            if not any(same_expr(owner.result, seen.result) for seen, _ in loads):
                loads.append((owner, bool(dom(v) & side)))
            continue
        if isinstance(owner, (AxisOp, arith.ConstantOp)):
            continue
        if not isinstance(owner, Operation) or owner.regions or owner.dialect_name() not in ("arith", "math"):
            return ()
    return tuple(loads)


def _reads(contractions, prologue) -> Callable[[SSAValue], tuple[bool, bool]]:
    """For a loop-body value: (its tree reads the contractions' accumulators or the row
    statistics, it reads a tensor: a load, another reduction, a block argument); memoized."""
    given = {c.result for c in contractions} | {r.result for r in prologue}
    memo: dict[SSAValue, tuple[bool, bool]] = {}

    def reads(v: SSAValue) -> tuple[bool, bool]:
        if v in given:
            return True, False
        if v not in memo:
            owner = v.owner
            if not isinstance(owner, Operation) or isinstance(owner, (LoadOp, ReduceOp)) or owner.regions:
                memo[v] = (False, True)
            else:
                parts = [reads(x) for x in owner.operands]
                memo[v] = (any(g for g, _ in parts), any(t for _, t in parts))
        return memo[v]

    return reads


def stages_results(op: Operation, stores: Sequence[StoreOp], contractions, prologue) -> bool:
    """Whether the stores can be evaluated on the accumulator fragments (module docstring)."""
    reads = _reads(contractions, prologue)

    def register_only(store: StoreOp) -> bool:
        t = op.results[store.output_index].type
        return isinstance(t, TensorType) and isinstance(t.element_type, BFloat16Type) and not reads(store.value)[1]

    return bool(stores) and all(register_only(s) for s in stores)


def staged_parts(op: Operation, stores: Sequence[StoreOp], contractions, prologue) -> tuple[SSAValue, ...]:
    """The bf16 parts of the stores computed from the accumulators alone (module docstring),
    in the order the stores reach them; () where the stores read no tensor (stages_results
    covers them whole, or they are f32) or where such a part is not bf16."""
    reads = _reads(contractions, prologue)
    if not any(reads(s.value)[1] for s in stores):
        return ()
    found: list[SSAValue] = []
    stack = [s.value for s in reversed(stores)]
    seen: set[SSAValue] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        acc, tensor = reads(v)
        if not acc:
            continue
        if tensor:
            stack.extend(reversed(v.owner.operands))
            continue
        if isinstance(v.owner, arith.ExtFOp) and isinstance(v.owner.input.type, BFloat16Type):
            v = v.owner.input
        if not isinstance(v.type, BFloat16Type):
            return ()
        if v not in found:
            found.append(v)
    return tuple(found)


def a_reads_prologue(contractions, prologue) -> bool:
    """Whether the first contraction's A side uses a prologue reduction's result."""
    if not contractions:
        return False
    c0 = contractions[0]
    return reads_prologue([c0.a_value] if c0.a_value is not None else list(c0.a_factors), prologue)


def reads_prologue(values: Sequence[SSAValue], prologue) -> bool:
    """Whether any of `values` uses a prologue reduction's result (a row statistic)."""
    results = {r.result for r in prologue}
    return bool(results) and any(v in results for v in value_tree(values))


def ws_row_stats(contractions, prologue, raw: tuple[tuple[LoadOp, bool], ...], axes: dict[str, int], dom: Dom) -> str:
    """Where a fused wgmma_ws kernel sums its row statistics (module docstring); `raw`:
    raw_a_loads of the same kernel."""
    if not prologue:
        return ""
    c0 = contractions[0]
    k_axes, k_last = frozenset(c0.k_axes), c0.k_axes[-1]
    if a_reads_prologue(contractions, prologue):
        return "before"
    if not all(r.kind_name in ("sum", "max") and frozenset(r.axis_names) == k_axes for r in prologue):
        return "before"
    rows = sum(1 for _, full in raw if full)
    if rows:
        return "in_place" if rows == 1 else "producer"
    value = c0.a_value
    if value is None or axes[k_last] % CHUNK:
        return "before"
    while isinstance(value.owner, arith.ExtFOp):
        value = value.owner.input
    copy = value.owner
    if not isinstance(copy, LoadOp) or not _copyable(copy, k_last, LaneForms(dom)):
        return "before"
    loads = [o for r in prologue for o in r.walk() if isinstance(o, LoadOp)]
    if not loads or not all(same_expr(o.result, copy.result) for o in loads):
        return "before"
    return "a_tiles"


def same_expr(a: SSAValue, b: SSAValue, memo: dict | None = None) -> bool:
    """Structural equality of two loop-body values (same ops, tensors, axes, constants)."""
    memo = {} if memo is None else memo
    if a is b:
        return True
    key = (a, b)
    if key in memo:
        return memo[key]
    oa, ob = a.owner, b.owner
    ok = False
    if isinstance(oa, Operation) and isinstance(ob, Operation) and type(oa) is type(ob):
        if isinstance(oa, AxisOp):
            ok = oa.axis_name == ob.axis_name
        elif isinstance(oa, ReduceOp):
            ok = False
        else:
            ok = (
                oa.properties == ob.properties
                and oa.attributes == ob.attributes
                and len(oa.operands) == len(ob.operands)
                and [r.type for r in oa.results] == [r.type for r in ob.results]
                and all((x is y) or same_expr(x, y, memo) for x, y in zip(oa.operands, ob.operands))
            )
    memo[key] = ok
    return ok


def _plain_copy(v: SSAValue, k_axes: frozenset[str], k_last: str, lanes: LaneForms, dom: Dom) -> bool:
    """A tree of selects (conditions independent of k) over copyable loads, casts looked through."""
    while isinstance(v.owner, arith.ExtFOp):
        v = v.owner.input
    owner = v.owner
    if isinstance(owner, LoadOp):
        return _copyable(owner, k_last, lanes)
    if isinstance(owner, arith.SelectOp):
        return not (dom(owner.cond) & k_axes) and all(
            _plain_copy(x, k_axes, k_last, lanes, dom) for x in (owner.lhs, owner.rhs)
        )
    return False


def _copyable(load: LoadOp, k_last: str, lanes: LaneForms) -> bool:
    """A bf16 load contiguous along k in aligned chunks of CHUNK elements (a cp.async of 16 bytes)."""
    t = load.tensor.type
    if not isinstance(t, TensorType) or not isinstance(t.element_type, BFloat16Type):
        return False
    return lanes.access(t, load.indices, k_last) == (True, True)


class LaneForms:
    """How an index changes over `lanes` consecutive values of one axis (base a multiple of
    `lanes`): the access analysis of the lowering (emmy.lowering.scalar.BodyEmitter: vector
    loads and stores) and of the plan's facts (which A loads are raw 16-byte copies)."""

    def __init__(self, dom: Dom):
        self.dom = dom
        self.cache: dict = {}

    def access(self, t: TensorType, indices: Sequence[SSAValue], axis: str, lanes: int = CHUNK) -> tuple[bool, bool]:
        """(contiguous along `axis` with unit stride, base offset a multiple of `lanes`)."""
        shape = t.get_shape()
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        coeff, mult = 0, 0
        for idx, st in zip(indices, strides):
            c, m = self.form(idx, axis, lanes)
            if c is None:
                return False, False
            coeff += c * st
            mult = gcd(mult, m * st)
        return coeff == 1, mult % lanes == 0

    def form(self, v: SSAValue, axis: str, lanes: int = CHUNK) -> tuple[int | None, int]:
        """(a, m): v(base + j) = v(base) + a * j for j < lanes (a None: not so), and m divides
        v(base) (0: v(base) is 0)."""
        key = (v, axis, lanes)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._form(v, axis, lanes)
        return found

    def _form(self, v: SSAValue, axis: str, lanes: int) -> tuple[int | None, int]:
        op = v.owner
        if isinstance(op, AxisOp):
            return (1, lanes) if op.axis_name == axis else (0, 1)
        if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
            return 0, abs(op.value.value.data)
        if not isinstance(op, Operation) or axis not in self.dom(v):
            if not isinstance(op, (arith.AddiOp, arith.SubiOp, arith.MuliOp)):
                return 0, 1
        f = lambda x: self.form(x, axis, lanes)  # noqa: E731
        if isinstance(op, (arith.AddiOp, arith.SubiOp)):
            (a1, m1), (a2, m2) = f(op.lhs), f(op.rhs)
            if a1 is None or a2 is None:
                return None, 1
            return (a1 + a2 if isinstance(op, arith.AddiOp) else a1 - a2), gcd(m1, m2)
        if isinstance(op, arith.MuliOp):
            (a1, m1), (a2, m2) = f(op.lhs), f(op.rhs)
            c1, c2 = _const(op.lhs), _const(op.rhs)
            if c2 is not None and a1 is not None:
                return a1 * c2, m1 * abs(c2)
            if c1 is not None and a2 is not None:
                return a2 * c1, m2 * abs(c1)
            if a1 == 0 and a2 == 0:
                return 0, m1 * m2
            return None, 1
        if isinstance(op, (arith.DivUIOp, arith.RemUIOp)):
            c = _const(op.rhs)
            a, m = f(op.lhs)
            if c is None or c <= 0 or a is None or a < 0:
                return None, 1
            g = gcd(m, c) if m else c
            if a * (lanes - 1) >= g:
                return (0, 1) if a == 0 else (None, 1)
            if isinstance(op, arith.DivUIOp):
                return 0, 1
            return a, g
        if isinstance(op, arith.SelectOp):
            if axis in self.dom(op.cond):
                return None, 1
            (a1, m1), (a2, m2) = f(op.lhs), f(op.rhs)
            if a1 is None or a1 != a2:
                return None, 1
            return a1, gcd(m1, m2)
        if isinstance(op, arith.IndexCastOp):
            return f(op.operands[0])
        return None, 1


def _const(v: SSAValue) -> int | None:
    op = v.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


__all__ = [
    "CHUNK", "LaneForms", "a_reads_prologue", "raw_a_loads", "reads_prologue", "same_expr",
    "staged_parts", "stages_results", "ws_row_stats",
]
