"""The plan of an attention kernel, and the roles of its body's values.

    analyze(kernel_op, info) -> AttentionBody     # Q, K, V producers, score, causal mask, store
    plan(info, values, target) -> AttentionPlan   # tiles, warps, pipeline, launches, shared memory

`analyze` checks that a `tile.kernel` body is softmax attention (an EmmyError naming the kernel
otherwise) and finds how each of Q, K and V is produced (`direct` rows copied with cp.async,
`rowsum` rows normalized by a row statistic, `elem` any other value); `emmy.lowering.attention`
turns it into the flash kernel. The plan is what the decided knobs mean: block_q query rows per
block (16 per warp), block_kv keys per step, `stages` K/V buffers, mma.sync or wgmma for S = Q K^T
(one warpgroup per 64 query rows), cp.async or tensor-map copies of K and V, and with
fusion = split a prologue kernel `<name>_prep` that materializes the computed rows first. With
fusion = epilogue (emmy.schedule.qk_epilogue) the projection producing Q's and K's rows writes
them normalized and rotated: no prologue kernel, Q and K plain rows of that output. The order
of the query blocks is the plan's too: longest first, head fastest, and where the key and value
rows of all heads exceed L2, the heads in L2 sections that fit (l2_section, AttentionPlan.tile_at;
kv_group finds the query heads that share key-value heads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import gcd

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import BFloat16Type, Float32Type, FloatAttr, TensorType
from xdsl.ir import BlockArgument, Operation, SSAValue

from emmy.analysis.body import value_tree
from emmy.analysis.classify import AttentionInfo, Domains, KernelInfo
from emmy.analysis.indexing import constant_int
from emmy.diagnostics import EmmyError
from emmy.dialects.loop import AxisOp, LoadOp, ReduceOp, StoreOp
from emmy.schedule.contraction import Decided, LaunchPlan
from emmy.schedule.reduction import row_major_strides
from emmy.targets import Target
from emmy.tuning.knobs import ATTENTION_FUSION, KnobValue, grouped_tile

# Producer modes, as emmy::attention::kDirect / kElem / kRowSum / kTma.
DIRECT, ELEM, ROWSUM, TMA = 0, 1, 2, 3
MODE_NAMES = {DIRECT: "direct", ELEM: "elem", ROWSUM: "rowsum", TMA: "tma"}

_CASTS = (arith.ExtFOp, arith.TruncFOp)
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Producer:
    """How one operand (Q, K or V) of the attention is staged, row by row."""

    name: str  # "q", "k", "v"
    value: SSAValue  # the element value in the loop body (f32)
    row_axis: str  # query axis (Q) or key axis (K, V)
    col_axis: str  # the head-dimension axis of this operand
    mode: int  # DIRECT, ELEM or ROWSUM
    stats: tuple[ReduceOp, ...] = ()  # ROWSUM: the row statistic (structurally equal copies)
    stat_axis: str = ""  # ROWSUM: the statistic's reduced axis
    stat_len: int = 0  # ROWSUM: its extent
    load: LoadOp | None = None  # DIRECT: the load
    stride: int = 0  # DIRECT: elements between consecutive rows


@dataclass(frozen=True, eq=False)
class AttentionBody:
    name: str
    batch_axes: tuple[str, ...]  # batch and head axes (the main kernel's grid x dimension)
    query_axis: str
    key_axis: str
    head_dim: int
    q: Producer
    k: Producer
    v: Producer
    dot: SSAValue  # the Q x K contraction result in the max reduction
    score: SSAValue  # the max reduction's yielded value: score(q, kv, dot)
    out_override: SSAValue  # the value that equals the normalized output in the epilogue
    store: StoreOp
    causal: bool  # key kv masked for query q whenever kv > q + causal_offset
    causal_offset: int
    seq_q: int
    seq_kv: int
    # causal: the select that applies the mask around the score, and its unmasked operand (the
    # score of a key block wholly below the diagonal is the score with `mask` taken as `unmasked`)
    mask: SSAValue | None = None
    unmasked: SSAValue | None = None


def _err(name: str, msg: str) -> EmmyError:
    return EmmyError(f"tile.kernel @{name} (attention): {msg}")


def _strip(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, _CASTS):
        v = v.owner.operands[0]
    return v


class _Same:
    """Structural equality of loop-body values (copies of one expression in different regions)."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, int], bool] = {}

    def __call__(self, a: SSAValue, b: SSAValue) -> bool:
        if a is b:
            return True
        key = (id(a), id(b))
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = False  # no cycles in SSA; guards against re-entry
        r = self._compare(a, b)
        self.memo[key] = r
        return r

    def _compare(self, a: SSAValue, b: SSAValue) -> bool:
        if isinstance(a, BlockArgument) or isinstance(b, BlockArgument):
            return False
        oa, ob = a.owner, b.owner
        if type(oa) is not type(ob) or a.index != b.index or a.type != b.type:  # type: ignore[union-attr]
            return False
        if oa.properties != ob.properties or oa.attributes != ob.attributes:
            return False
        if len(oa.operands) != len(ob.operands):
            return False
        if isinstance(oa, ReduceOp):
            if not self(oa.yielded, ob.yielded):
                return False
        elif oa.regions or ob.regions:
            return False
        return all(self(x, y) for x, y in zip(oa.operands, ob.operands))


def _reduces_in(v: SSAValue, stop: set[SSAValue] | None = None) -> list[ReduceOp]:
    """The `loop.reduce` ops whose results the tree of `v` reads (not looking inside them)."""
    out: dict[ReduceOp, None] = {}
    for x in value_tree([v], stop or ()):
        if isinstance(x.owner, ReduceOp):
            out.setdefault(x.owner)
    return list(out)


def _uses_value(v: SSAValue, target: SSAValue, stop: set[SSAValue]) -> bool:
    """Whether the tree of `v` reads `target` (not looking through `stop` values)."""
    seen: set[SSAValue] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x is target:
            return True
        if x in seen or x in stop:
            continue
        seen.add(x)
        o = x.owner
        if isinstance(o, ReduceOp):
            stack.append(o.yielded)
        elif isinstance(o, Operation):
            stack.extend(o.operands)
    return False


def _known_divisor(v: SSAValue) -> int:
    """A number every value of the index expression `v` is a multiple of (1 if unknown)."""
    c = constant_int(v)
    if c is not None:
        return abs(c) if c else 1 << 30
    o = v.owner
    if isinstance(o, arith.MuliOp):
        return _known_divisor(o.lhs) * _known_divisor(o.rhs)
    if isinstance(o, arith.AddiOp | arith.SubiOp):
        return gcd(_known_divisor(o.lhs), _known_divisor(o.rhs))
    if isinstance(o, arith.SelectOp):
        return gcd(_known_divisor(o.lhs), _known_divisor(o.rhs))
    return 1


def _linear(v: SSAValue, inner: frozenset[str], dom: Domains):
    """`v` as sum(coeffs[a] * a for a in inner) + rest, where rest does not depend on `inner`:
    (coeffs, divisor of rest), or None when `v` is not of that form."""
    if not (dom(v) & inner):
        return {}, _known_divisor(v)
    o = v.owner
    if isinstance(o, AxisOp):
        return {o.axis_name: 1}, 1 << 30
    if isinstance(o, arith.AddiOp | arith.SubiOp):
        a = _linear(o.lhs, inner, dom)
        b = _linear(o.rhs, inner, dom)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(o, arith.AddiOp) else -1
        coeffs = dict(a[0])
        for ax, c in b[0].items():
            coeffs[ax] = coeffs.get(ax, 0) + sign * c
        return {ax: c for ax, c in coeffs.items() if c}, gcd(a[1], b[1])
    if isinstance(o, arith.MuliOp):
        for x, y in ((o.lhs, o.rhs), (o.rhs, o.lhs)):
            k = constant_int(y)
            if k is not None:
                a = _linear(x, inner, dom)
                if a is None:
                    return None
                return {ax: c * k for ax, c in a[0].items()}, a[1] * abs(k) if k else 1 << 30
    return None


def direct_load(v: SSAValue, row: str, col: str, dom: Domains) -> tuple[LoadOp, int] | None:
    """(load, row stride) when `v` is extf(bf16 load) of D contiguous, 16-byte aligned elements
    per row: flat index = row * stride + col + rest, stride and rest multiples of 8."""
    x = v.owner.operands[0] if isinstance(v.owner, arith.ExtFOp) else None
    if x is None or not isinstance(x.owner, LoadOp) or not isinstance(x.type, BFloat16Type):
        return None
    stride = row_stride(x.owner, row, col, dom)
    return None if stride is None else (x.owner, stride)


def row_stride(load: LoadOp, row: str, col: str, dom: Domains) -> int | None:
    """The row stride when `load` reads D contiguous, 16-byte aligned bf16 elements per row:
    flat index = row * stride + col + rest, stride and rest multiples of 8 (else None)."""
    t = load.tensor.type
    assert isinstance(t, TensorType)
    if not isinstance(t.element_type, BFloat16Type):
        return None
    coeffs: dict[str, int] = {}
    div = 1 << 30
    for idx, st in zip(load.indices, row_major_strides(t.get_shape())):
        f = _linear(idx, frozenset((row, col)), dom)
        if f is None:
            return None
        for ax, c in f[0].items():
            coeffs[ax] = coeffs.get(ax, 0) + c * st
        div = gcd(div, f[1] * st)
    stride = coeffs.get(row, 0)
    if coeffs.get(col) != 1 or set(coeffs) - {row, col} or stride <= 0:
        return None
    if stride % 8 or div % 8:
        return None
    return stride


def _producer(
    name: str, value: SSAValue, row: str, col: str, dom: Domains, same: _Same, axes: Mapping[str, int], kname: str
) -> Producer:
    # the widened value itself is bf16 (Cohere computes its rotary in f32 and rounds it to bf16:
    # extf(truncf(...)), which is as good an operand as bf16 arithmetic)
    x = value.owner.operands[0] if isinstance(value.owner, arith.ExtFOp) else value
    if not isinstance(x.type, BFloat16Type):
        raise _err(kname, f"{name.upper()} must be a bf16 value widened to f32 (tensor cores take bf16 operands)")
    direct = direct_load(value, row, col, dom)
    if direct is not None:
        return Producer(name, value, row, col, DIRECT, load=direct[0], stride=direct[1])
    reds = _reduces_in(value)
    if not reds:
        return Producer(name, value, row, col, ELEM)
    first = reds[0]
    for r in reds:
        d = dom(r.result)
        if col in d:
            raise _err(kname, f"{name.upper()} reads a reduction that depends on the head dimension")
        if r.kind_name != "sum" or len(r.axis_names) != 1:
            raise _err(kname, f"{name.upper()}'s row statistic must be one loop.reduce sum over one axis")
        if not same(r.result, first.result):
            raise _err(kname, f"{name.upper()} reads more than one row statistic; only one is supported")
    if _reduces_in(first.yielded):
        raise _err(kname, f"{name.upper()}'s row statistic reads another reduction")
    ax = first.axis_names[0]
    return Producer(name, value, row, col, ROWSUM, stats=tuple(reds), stat_axis=ax, stat_len=axes[ax])


def _is_neg_inf(v: SSAValue) -> bool:
    o = v.owner
    if isinstance(o, arith.ConstantOp) and isinstance(o.value, FloatAttr):
        return o.value.value.data == _NEG_INF
    return False


_CMP_GT = {4: ">", 8: ">", 5: ">=", 9: ">=", 2: "<", 6: "<", 3: "<=", 7: "<="}  # sgt ugt sge uge slt ult sle ule
_NEGATE = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


def _causal(score: SSAValue, q: str, kv: str, dom: Domains) -> tuple[int, arith.SelectOp] | None:
    """(c, the select) when the score is -inf whenever kv > q + c (a select on an affine compare
    of kv and q around the whole score), else None."""
    sel = _mask_select(score)
    if sel is None:
        return None
    c = _causal_offset(sel, q, kv, dom)
    return None if c is None else (c, sel)


def _mask_select(score: SSAValue) -> arith.SelectOp | None:
    """The select on an integer compare with -inf on one side around the whole score (through
    casts and multiplications by positive constants), else None."""
    v = score
    while True:
        o = v.owner
        if isinstance(o, _CASTS):
            v = o.operands[0]
        elif isinstance(o, arith.MulfOp) and any(
            isinstance(x.owner, arith.ConstantOp) and float(x.owner.value.value.data) > 0  # type: ignore[union-attr]
            for x in o.operands
        ):
            v = next(x for x in o.operands if not isinstance(x.owner, arith.ConstantOp))
        else:
            break
    o = v.owner
    if not isinstance(o, arith.SelectOp) or not isinstance(o.cond.owner, arith.CmpiOp):
        return None
    return o if _is_neg_inf(o.lhs) or _is_neg_inf(o.rhs) else None


def _causal_offset(o: arith.SelectOp, q: str, kv: str, dom: Domains) -> int | None:
    """The offset c when the select `o` (see _mask_select) gives -inf whenever kv > q + c."""
    masked_when = _is_neg_inf(o.lhs)
    cmp = o.cond.owner
    assert isinstance(cmp, arith.CmpiOp)
    rel = _CMP_GT.get(cmp.predicate.value.data)
    if rel is None:
        return None
    if not masked_when:
        rel = _NEGATE[rel]
    inner = frozenset((q, kv))
    a = _linear(cmp.lhs, inner, dom)
    b = _linear(cmp.rhs, inner, dom)
    ca, cb = constant_int_tree(cmp.lhs, inner, dom), constant_int_tree(cmp.rhs, inner, dom)
    if a is None or b is None or ca is None or cb is None:
        return None
    diff = dict(a[0])
    for ax, c in b[0].items():
        diff[ax] = diff.get(ax, 0) - c
    const = ca - cb  # masked when  diff . (kv, q) + const  rel  0
    if diff == {kv: 1, q: -1}:
        # kv - q + const > 0  <=>  kv > q - const ;  >= 0  <=>  kv > q - const - 1
        if rel == ">":
            return -const
        if rel == ">=":
            return -const - 1
        return None
    if diff == {kv: -1, q: 1}:
        # q - kv + const < 0  <=>  kv > q + const ;  <= 0  <=>  kv > q + const - 1
        if rel == "<":
            return const
        if rel == "<=":
            return const - 1
        return None
    return None


def constant_int_tree(v: SSAValue, inner: frozenset[str], dom: Domains) -> int | None:
    """The constant part of an affine index expression in `inner` axes (None if not affine or if
    it has terms in other axes)."""
    c = constant_int(v)
    if c is not None:
        return c
    o = v.owner
    if isinstance(o, AxisOp):
        return 0 if o.axis_name in inner else None
    if isinstance(o, arith.AddiOp | arith.SubiOp):
        a = constant_int_tree(o.lhs, inner, dom)
        b = constant_int_tree(o.rhs, inner, dom)
        if a is None or b is None:
            return None
        return a + b if isinstance(o, arith.AddiOp) else a - b
    if isinstance(o, arith.MuliOp):
        for x, y in ((o.lhs, o.rhs), (o.rhs, o.lhs)):
            k = constant_int(y)
            if k is not None:
                a = constant_int_tree(x, inner, dom)
                return None if a is None else a * k
    return None


def _exp_of_shifted(v: SSAValue, mx: ReduceOp) -> SSAValue | None:
    """S when `v` is exp(S - max) (through casts), else None."""
    e = _strip(v).owner
    if not isinstance(e, mathd.ExpOp):
        return None
    s = _strip(e.operands[0]).owner
    if not isinstance(s, arith.SubfOp) or _strip(s.rhs) is not mx.result:
        return None
    return s.lhs


def analyze(op: Operation, info: KernelInfo) -> AttentionBody:
    """Check that the body is softmax attention and find the roles of its values."""
    name = op.properties["sym_name"].data  # type: ignore[union-attr]
    att: AttentionInfo | None = info.attention
    if att is None:
        raise _err(name, "the loop is not classified as attention")
    dom = Domains(op)
    same = _Same()
    axes = info.axes
    if len(att.head_dim_axes) != 1:
        raise _err(name, f"the Q x K contraction must reduce one axis, not {list(att.head_dim_axes)}")
    d_axis, e_axis = att.head_dim_axes[0], att.value_dim_axis
    q_axis, kv_axis = att.query_axis, att.key_axis
    D, DV = axes[d_axis], axes[e_axis]
    if D != DV:
        raise _err(name, f"head dimension {D} of Q/K differs from {DV} of V; only equal sizes are supported")
    qk = att.qk
    batch = tuple(a for a in info.parallel_axes if a not in (q_axis, e_axis))
    # Q may read head axes K does not (one key/value head for every query head: then K and V
    # read no head axis at all); those are batch axes of the kernel like the others.
    if q_axis not in qk.m_axes or set(qk.m_axes) - {q_axis} - set(batch) or set(qk.n_axes) != {kv_axis}:
        raise _err(name, "the Q x K contraction must pair the query axis with the key axis")
    if set(qk.batch_axes) - set(batch):
        raise _err(name, f"Q and K share axes {sorted(set(qk.batch_axes) - set(batch))} that the output does not have")

    # Softmax structure: max_kv S, sum_kv exp(S - max), sum_kv P V with P = exp(S - max) [/ sum].
    mx, sm, pv = att.max_reduce, att.sum_reduce, att.pv
    score = mx.yielded
    if not _uses_value(score, qk.result, set()):
        raise _err(name, "the max over keys does not read the Q x K contraction")
    s_sum = _exp_of_shifted(sm.yielded, mx)
    if s_sum is None or not same(s_sum, score):
        raise _err(name, "the sum over keys is not exp(score - max) of the same score")
    p = pv.a
    pn = _strip(p).owner
    divided = False
    if isinstance(pn, arith.DivfOp) and _strip(pn.rhs) is sm.result:
        p, divided = pn.lhs, True
    s_pv = _exp_of_shifted(p, mx)
    if s_pv is None or not same(s_pv, score):
        raise _err(name, "P in the P x V sum is not exp(score - max) [/ sum] of the same score")
    if divided != att.pv_uses_sum:
        raise _err(name, "the softmax sum is used in the P x V sum other than as P's divisor")

    stores = info.stores
    if len(stores) != 1:
        raise _err(name, f"expected one loop.store, found {len(stores)}")
    store = stores[0]
    if divided:
        out_override = pv.result
    else:
        div = [
            o
            for o in info.epilogue
            if isinstance(o, arith.DivfOp) and o.lhs is pv.result and _strip(o.rhs) is sm.result
        ]
        if len(div) != 1:
            raise _err(name, "the epilogue must divide the P x V sum by the softmax sum")
        out_override = div[0].result
    stop = {out_override}
    for r in (pv.result, sm.result, mx.result):
        if r is not out_override and any(_uses_value(x, r, stop) for x in store.operands):
            raise _err(name, "the output reads the softmax statistics other than as softmax(S) V")
    if _reduces_in(store.value, stop):
        raise _err(name, "the epilogue reads a reduction other than the attention output")

    qp = _producer("q", qk.a, q_axis, d_axis, dom, same, axes, name)
    kp = _producer("k", qk.b, kv_axis, d_axis, dom, same, axes, name)
    vp = _producer("v", pv.b, kv_axis, e_axis, dom, same, axes, name)
    bad = _reduces_in(score, {qk.result})
    if bad:
        raise _err(name, "the score reads a reduction other than the Q x K contraction")
    causal = _causal(score, q_axis, kv_axis, dom)
    offset, sel = causal if causal is not None else (None, None)
    return AttentionBody(
        name=name,
        batch_axes=batch,
        query_axis=q_axis,
        key_axis=kv_axis,
        head_dim=D,
        q=qp,
        k=kp,
        v=vp,
        dot=qk.result,
        score=score,
        out_override=out_override,
        store=store,
        causal=offset is not None,
        causal_offset=offset or 0,
        seq_q=axes[q_axis],
        seq_kv=axes[kv_axis],
        mask=sel.result if sel is not None else None,
        unmasked=(sel.rhs if _is_neg_inf(sel.lhs) else sel.lhs) if sel is not None else None,
    )


def kv_group(plan: AttentionBody, info: KernelInfo) -> tuple[str, int] | None:
    """(head axis, group) when K and V read a batch axis only as `axis / group` (grouped-query
    attention), or not at all while Q does (one key/value head for all: the group is every
    head): K and V are then materialized once per key head rather than once per query head."""
    roots = [p.value for p in (plan.k, plan.v)] + [st.yielded for p in (plan.k, plan.v) for st in p.stats]

    def divided(o, axes) -> int | None:
        """The constant c > 1 of `axis / c` for an axis of `axes`, or None."""
        if isinstance(o, arith.DivUIOp) and isinstance(o.lhs.owner, AxisOp) and o.lhs.owner.axis_name in axes:
            c = constant_int(o.rhs)
            return c if c is not None and c > 1 else None
        return None

    owners = [v.owner for v in value_tree(roots, leaves=())]
    found = {(o.lhs.owner.axis_name, c) for o in owners if (c := divided(o, plan.batch_axes)) is not None}
    if not found:
        read = {o.axis_name for o in owners if isinstance(o, AxisOp)}
        unread = [a for a in plan.batch_axes if a not in read and a in info.attention.qk.m_axes]
        return (unread[0], info.axes[unread[0]]) if len(unread) == 1 else None
    if len(found) != 1:
        return None
    ((axis, group),) = found
    if info.axes[axis] % group:
        return None
    # the axis is read only as axis / group: not looking through those divisions, no read is left
    as_group = [o.result for o in owners if divided(o, (axis,)) == group]
    bare = (v.owner for v in value_tree(roots, stop=as_group, leaves=()))
    return None if any(isinstance(o, AxisOp) and o.axis_name == axis for o in bare) else (axis, group)


def score_fold(body: AttentionBody) -> float:
    """c where the score of a key no mask touches is exactly `dot * c` in f32, c a positive
    finite constant (the attention scale), else 0.0. The main loop then takes the row max of
    the raw dots and folds c into its exponent (FreeScore in attention.cuh): the same softmax
    up to the rounding of c * log2(e), one multiplication per score fewer."""
    v = body.unmasked if body.mask is not None else body.score
    op = v.owner
    if not isinstance(op, arith.MulfOp) or not isinstance(v.type, Float32Type):
        return 0.0
    for a, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        const = b.owner
        if a is body.dot and isinstance(const, arith.ConstantOp) and isinstance(const.value, FloatAttr):
            c = float(const.value.value.data)
            if 0.0 < c < float("inf"):
                return c
    return 0.0


def staged_output(body: AttentionBody) -> bool:
    """Whether the output stores exactly bf16(O / l), the normalized P x V sum rounded once. The
    wgmma main loops then stage O as bf16 in shared memory and store it row by row, whole
    sectors at a time (store_rows_staged in attention.cuh); the store lambda, called with the
    staged value, rounds it to the same bf16 again. Any other epilogue (an f32 output, arithmetic
    after the division) gets the fragments' f32 values as before."""
    v = body.store.value
    op = v.owner
    return isinstance(op, arith.TruncFOp) and op.input is body.out_override and isinstance(v.type, BFloat16Type)


# --------------------------------------------------------------------------------------------
# Plan
# --------------------------------------------------------------------------------------------

SMEM_ALIGN_WGMMA = 1024  # wgmma's swizzled tiles are read through absolute address bits
PREP_WARPS = 8  # warps of the split variant's prologue kernel
PREP_ROWS = 4  # rows each of its warps produces
MAX_GRID_Y = 65535


def stored_head_dim(head_dim: int, wgmma: bool) -> int:
    """Columns of a Q, K or V row in shared memory (Config::LD in attention.cuh): with wgmma whole
    64-column slabs (a head dim of 80 or 96 padded to 128; neither product reads the padding:
    Q K^T steps over the real columns, P V is a wgmma of n = the head dim); otherwise rows of a
    multiple of 64 columns as they are (swizzled) and any other width padded by 8 so ldmatrix
    meets distinct banks."""
    if wgmma:
        return -(-head_dim // 64) * 64
    return head_dim if head_dim % 64 == 0 else head_dim + 8


def tile_bytes(head_dim: int, block_q: int, block_kv: int, stages: int, wgmma: bool = False, q_tiles: int = 1) -> int:
    """The Q, K and V tiles of emmy::attention::run (Config::kSmemBytes in attention.cuh).
    `q_tiles`: 2 with schedule = persistent, whose next query block's Q rows are copied into a
    second Q tile while the last one's finish."""
    ld = stored_head_dim(head_dim, wgmma)
    return (q_tiles * block_q * ld + 2 * stages * block_kv * ld) * 2


def smem_bytes(head_dim: int, block_q: int, block_kv: int, stages: int, wgmma: bool = False, q_tiles: int = 1) -> int:
    """Dynamic shared memory of the attention kernel: its tiles (tile_bytes), plus what aligning
    the base to 1024 bytes may take for wgmma (the tensor-map copies' mbarriers,
    AttentionPlan.barriers of 8 bytes, live in that slack: tma_barriers in attention.cuh)."""
    return tile_bytes(head_dim, block_q, block_kv, stages, wgmma, q_tiles) + (SMEM_ALIGN_WGMMA if wgmma else 0)


def l2_section(kv_head_bytes: int, group: int, rows: int, l2_bytes: int) -> int:
    """How many batch x head rows the blocks take together (an L2 section: AttentionPlan.tile_at):
    as many key-value heads as fit in L2 together (`kv_head_bytes` each, K's and V's rows), a
    power of two of them and at least one, each with its `group` query heads (grouped-query
    attention); every row, the plain order, where all of them fit. Blocks of one section read
    the same key and value rows from L2 rather than from memory again; FlashAttention-3's
    scheduler sizes its sections so."""
    fit = max(1, l2_bytes // max(1, kv_head_bytes))
    return min(rows, group * (1 << (fit.bit_length() - 1)))


# workers = wgmma_ws (emmy/backend/runtime/attention_ws.cuh): one producer warpgroup issuing the
# tensor-map copies of K and V, 1 or 2 consumer warpgroups of 64 query rows each.
WS_PRODUCER_THREADS = 128
WS_MAX_CONSUMERS = 2  # two consumers take turns (ping-pong); more have no turn protocol
# setmaxnreg with two consumers (384 threads; ptxas starts every thread at <= 168 registers):
# the producer gives its registers back, the consumers take them (128 * 24 + 256 * 240 <= 65536).
# With one consumer (256 threads) every thread may already have 255: no setmaxnreg.
WS_PRODUCER_REGS = 24
WS_CONSUMER_REGS = 240


@dataclass(frozen=True)
class AttentionPlan:
    name: str
    block_q: int
    block_kv: int
    warps: int
    stages: int
    workers: str  # the knob's value
    fusion: str  # "fused"; "split": computed Q/K/V rows materialized by `<name>_prep` first;
    # "epilogue": computed Q and K written, normalized and rotated, by the projection's epilogue
    # in place of their raw rows (emmy.schedule.qk_epilogue), read here as direct rows
    head_dim: int
    seq_q: int
    seq_kv: int
    batch: int  # batch x head rows (the main kernel's grid x)
    prep: tuple[int, int, int] | None  # the grid of `<name>_prep` (fusion = split with computed rows)
    target: Target = field(repr=False)
    wgmma: bool = False  # S = Q K^T with wgmma (emmy::attention::run's WGMMA)
    tma: bool = False  # copy = tma: direct K and V rows by tensor-map copies (kTma); a ragged
    # last key block is copied from seq_kv - block_kv, its repeated keys masked (key_start in
    # attention.cuh), so that no copy crosses the end of the keys
    persistent: bool = False  # schedule = persistent (wgmma_ws): a block per SM loops over the
    # query blocks (ws_tiles in attention.cuh), taking the next one in the grid's longest-first
    # order from a counter as it frees up
    group: int = 1  # query heads per key-value head where the head is the fastest batch axis
    # (consecutive rows share K and V rows); 1 otherwise

    @property
    def warp_specialized(self) -> bool:
        """workers = wgmma_ws: a producer warpgroup copies K and V, the `warps` compute."""
        return self.workers == "wgmma_ws"

    @property
    def consumers(self) -> int:
        """Warpgroups that compute (wgmma_ws; 0 otherwise), each 64 query rows."""
        return self.warps // 4 if self.warp_specialized else 0

    @property
    def overlap(self) -> str:
        """How softmax overlaps the wgmmas: `pingpong` (two consumers take turns issuing, and
        each overlaps its softmax with its own next QK^T: the wgmma loop's two warpgroups with
        tensor-map copies, and wgmma_ws's two consumers), `intra` (a warpgroup's softmax of key
        block j runs while its P_{j-1} V_{j-1} wgmmas do: the pipelined wgmma loop with 3+
        stages, wgmma_ws with one consumer), or `none`."""
        if self.warp_specialized:
            return "pingpong" if self.consumers == 2 else "intra"
        if self.wgmma and self.stages >= 3:
            return "pingpong" if self.tma and self.warps == 8 else "intra"
        return "none"

    @property
    def threads(self) -> int:
        return 32 * self.warps + (WS_PRODUCER_THREADS if self.warp_specialized else 0)

    @property
    def register_budgets(self) -> tuple[int, int] | None:
        """(producer, consumer) registers per thread set by setmaxnreg (wgmma_ws with two
        consumers), else None (ptxas's allocation for the whole block)."""
        if self.warp_specialized and self.consumers == 2:
            return WS_PRODUCER_REGS, WS_CONSUMER_REGS
        return None

    @property
    def smem_layout(self) -> tuple[tuple[str, int, int], ...]:
        """(region, byte offset from the tiles' base, bytes): the Q tile (block_q rows), then the
        stages' K tiles, then their V tiles (block_kv rows each), as Config in attention.cuh;
        rows of stored_head_dim elements. The mbarriers
        (`barriers`, 8 bytes each) take none of it: they live in the wgmma tiles' 1024-byte
        alignment slack, before the tiles or after them."""
        ld = stored_head_dim(self.head_dim, self.wgmma)
        q, kv = 2 * self.block_q * ld, 2 * self.stages * self.block_kv * ld
        regions = (("q", 0, q), ("k", q, kv), ("v", q + kv, kv))
        return regions + ((("q_next", q + 2 * kv, q),) if self.persistent else ())

    @property
    def barriers(self) -> int:
        """mbarriers in shared memory (8 bytes each, in the 1024-byte alignment slack of
        smem_bytes): with tensor-map copies a `full` and an `empty` one per stage, with
        wgmma_ws K's and V's apart (4 per stage); else none."""
        if not self.tma:
            return 0
        # schedule = persistent: 2 `full` and 2 `empty` ones for the tile slots (WsTiles)
        return (4 if self.warp_specialized else 2) * self.stages + (4 if self.persistent else 0)

    @property
    def query_blocks(self) -> int:
        return -(-self.seq_q // self.block_q)

    @property
    def tiles(self) -> int:
        """Query blocks of every batch x head row: what the blocks compute, one each with
        schedule = grid."""
        return self.batch * self.query_blocks

    @property
    def kv_head_bytes(self) -> int:
        """The key and value rows of one key-value head in bytes, as they are copied (whole
        64-column slabs with tensor-map copies: stored_head_dim)."""
        copied = stored_head_dim(self.head_dim, self.wgmma) if self.tma else self.head_dim
        return 2 * self.seq_kv * copied * 2

    @property
    def section(self) -> int:
        """Batch x head rows per L2 section (l2_section on the target's L2): `batch` where the
        key and value rows of all of them fit."""
        return l2_section(self.kv_head_bytes, self.group, self.batch, self.target.l2_bytes)

    def tile_at(self, ops, t):
        """(batch x head row, query block) of the t-th query block the launch takes (the grid's
        blocks in the order of their index, or the persistent blocks' tile counter): the longest
        causal query blocks first, a query block of every row of a section before the next
        query block, section after section (knobs.grouped_tile with the section as the group).
        With one section, row t % batch and query block query_blocks - 1 - t / batch. `ops`:
        knobs.Ints for numbers, the kernel builder for index code."""
        if self.section >= self.batch:
            q_block = self.tile_block(ops, t)
            return self.tile_row(ops, t), q_block
        row, rank = grouped_tile(ops, t, self.batch, self.query_blocks, self.section)
        return row, ops.sub(self.query_blocks - 1, rank)

    def tile_row(self, ops, t):
        """tile_at's batch x head row alone (with one section no query block computed)."""
        return ops.rem(t, self.batch) if self.section >= self.batch else self.tile_at(ops, t)[0]

    def tile_block(self, ops, t):
        """tile_at's query block alone (with one section no row computed)."""
        if self.section >= self.batch:
            return ops.sub(self.query_blocks - 1, ops.div(t, self.batch))
        return self.tile_at(ops, t)[1]

    @property
    def grid(self) -> tuple[int, int, int]:
        if self.persistent:  # a block per SM (at most a tile each), x only
            return (min(self.tiles, self.target.sms), 1, 1)
        return (self.batch, self.query_blocks, 1)

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def waves(self) -> int:
        """Rounds of query blocks an SM runs (blocks of the grid one after another, or the
        persistent block's loop)."""
        return -(-self.tiles // self.target.sms)

    @property
    def q_tiles(self) -> int:
        """Q tiles in shared memory: 2 with schedule = persistent (smem_bytes)."""
        return 2 if self.persistent else 1

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.head_dim, self.block_q, self.block_kv, self.stages, self.wgmma, self.q_tiles)

    @property
    def registers(self) -> int:
        """Registers per thread, estimated: the output rows and scores a thread holds (fp32)
        besides addresses, at most what a thread may use."""
        per_thread = (self.block_q * self.head_dim + self.block_q * self.block_kv) // (32 * self.warps)
        budgets = self.register_budgets
        return min(budgets[1] if budgets else self.target.regs_per_thread, per_thread + 40)

    @property
    def launches(self) -> tuple[LaunchPlan, ...]:
        main = LaunchPlan(self.name, self.grid, (self.threads, 1, 1), "main")
        if self.prep is None:
            return (main,)
        return (LaunchPlan(f"{self.name}_prep", self.prep, (32 * PREP_WARPS, 1, 1), "prep"), main)


def plan(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> AttentionPlan:
    """The plan of the attention kernel `info` (its body analyzed by `analyze`)."""
    name = name or info.name
    v = Decided(values, f"tile.kernel @{info.name}")
    bq, bkv, warps, stages = int(v["block_q"]), int(v["block_kv"]), int(v["warps"]), int(v["stages"])
    workers = str(v["workers"])
    D, att = info.head_dim, info.attention
    if att is None:
        raise _err(name, "the loop is not classified as attention")
    if workers == "thread":
        raise _err(name, "workers=thread is not implemented for attention (use mma_sync)")
    wgmma = False
    if workers in ("wgmma", "wgmma_ws"):
        if not target.has("wgmma"):
            raise _err(name, f"workers={workers} needs sm_90a (target is {target.name})")
        if D > 256 or warps % 4 or bq != 16 * warps or bkv > 256:
            raise _err(
                name, f"workers={workers} needs a head dim up to 256, a warpgroup "
                "per 64 query rows (warps a multiple of 4, block_q = 16 * warps) and "
                f"block_kv <= 256 (have {D}, {bq}, {warps}, {bkv})"
            )
        wgmma = True
    elif workers != "mma_sync":
        raise _err(name, f"unknown workers '{workers}'")
    if not target.has("mma_sync"):
        raise _err(name, f"{target.name} has no mma.sync bf16 tensor cores")
    if D % 16:
        raise _err(name, f"head dimension {D} is not a multiple of 16")
    if bkv % 16 or bkv <= 0:
        raise _err(name, f"block_kv={bkv} is not a multiple of 16")
    if warps <= 0 or bq % (16 * warps):
        raise _err(name, f"block_q={bq} does not give each of warps={warps} whole 16-row tiles")
    if stages < 1:
        raise _err(name, f"stages={stages} must be at least 1")
    q_tiles = 2 if str(v["schedule"]) == "persistent" else 1  # (persistent: the next query block's Q tile)
    smem = smem_bytes(D, bq, bkv, stages, wgmma, q_tiles)
    if smem > target.smem_per_block:
        second = " (schedule=persistent keeps a second Q tile)" if q_tiles == 2 else ""
        raise _err(name, f"{smem} bytes of shared memory{second} exceed the {target.smem_per_block} of {target.name}")
    copy = str(v["copy"])
    if copy not in ("cp_async", "tma"):
        raise _err(name, f"unknown copy '{copy}' (cp_async or tma)")
    tma = copy == "tma"
    if tma and (not wgmma or (workers == "wgmma" and stages < 3) or bkv > info.seq_kv):
        raise _err(
            name, "copy=tma needs workers=wgmma, stages >= 3 and a block_kv of at most the keys "
            f"(have {workers}, {stages}, block_kv={bkv} for {info.seq_kv} keys)"
        )
    fusion = str(v["fusion"])
    if fusion not in ATTENTION_FUSION:
        raise _err(name, f"unknown fusion '{fusion}' ({', '.join(ATTENTION_FUSION)})")
    if workers == "wgmma_ws":
        why = ws_illegal(info, warps, copy, fusion)
        if why:
            raise _err(name, why)
        if stages < 2:
            raise _err(name, f"workers=wgmma_ws copies K and V into a ring of stages >= 2 buffers (stages={stages})")
    schedule = str(v["schedule"])
    if schedule not in ("grid", "persistent"):
        raise _err(name, f"unknown schedule '{schedule}' (grid or persistent)")
    why = persistent_illegal(workers) if schedule == "persistent" else ""
    if why:
        raise _err(name, why)
    batch = info.extent(a for a in info.parallel_axes if a not in (att.query_axis, att.value_dim_axis))
    if batch > MAX_GRID_Y:
        raise _err(name, f"{batch} batch x head rows exceed the grid's y limit of {MAX_GRID_Y}")
    if -(-info.seq_q // bq) > MAX_GRID_Y:
        raise _err(name, f"{-(-info.seq_q // bq)} query blocks of {bq} exceed the grid's y limit of {MAX_GRID_Y}")
    body = _analyzed(info)
    prep = None
    computed = [r for _, r in _operand_rows(body)] if fusion == "split" else []
    if computed:  # a prologue kernel for the computed ones of Q, K and V
        prep = (-(-max(computed) // (PREP_WARPS * PREP_ROWS)), batch, len(computed))
    return AttentionPlan(
        name, bq, bkv, warps, stages, workers, fusion, D, info.seq_q, info.seq_kv, batch, prep, target, wgmma, tma,
        schedule == "persistent", _kv_group(info, att, body),
    )


def _kv_group(info: KernelInfo, att: AttentionInfo, body: AttentionBody | None) -> int:
    """Query heads per key-value head when consecutive batch x head rows share them (kv_group's
    head axis is the fastest of the rows' axes, row-major as the grid's x), else 1 (and for a
    body the flash kernel cannot run: building it says why)."""
    rows = [a for a in info.parallel_axes if a not in (att.query_axis, att.value_dim_axis)]
    found = kv_group(body, info) if body is not None else None
    if found is None or not rows or found[0] != rows[-1]:
        return 1
    return found[1]


def persistent_illegal(workers: str) -> str:
    """Why schedule = persistent cannot run with these workers (empty when it can; legality.py
    asks the same): it loops the warp-specialized kernel (run_ws in attention.cuh), whose ring of
    K and V buffers and consumers' turns carry on from one query block to the next; the other
    flash loops have no such loop."""
    if workers != "wgmma_ws":
        return f"schedule=persistent loops the warp-specialized kernel over query blocks: it needs workers=wgmma_ws, not {workers}"
    return ""


def ws_illegal(info: KernelInfo, warps: int, copy: str, fusion: str) -> str:
    """Why workers = wgmma_ws cannot run with these knobs (empty when it can; legality.py asks
    the same). Its producer warpgroup only issues tensor-map copies, and the consumers copy their
    Q rows with cp.async: every operand must be plain rows in memory, so computed Q, K or V
    (RMSNorm, rotary embedding) need fusion = split, whose `_prep` kernel materializes them."""
    if warps not in tuple(4 * c for c in range(1, WS_MAX_CONSUMERS + 1)):
        return f"workers=wgmma_ws has 1 or 2 consumer warpgroups: warps must be 4 or 8, not {warps}"
    if copy != "tma":
        return f"workers=wgmma_ws: its producer warpgroup copies K and V with tensor maps (copy=tma, not {copy})"
    if fusion in ("fused", "epilogue"):
        computed = computed_operands(info)
        if fusion == "epilogue":  # the projection's epilogue computes Q and K, not V
            computed = tuple(c for c in computed if c == "v")
        if computed:
            return (f"workers=wgmma_ws needs plain rows of Q, K and V, and {', '.join(computed)} "
                    "computed (normalized, rotated) in the kernel: use fusion=split (a prologue "
                    "kernel materializes them)")
    return ""


def computed_operands(info: KernelInfo) -> tuple[str, ...]:
    """Which of "q", "k", "v" the body computes (not a plain load of rows). A body the flash
    kernel cannot run (analyze's EmmyError) has none here: its plan still serves the tile
    interpreter, and building it raises that error."""
    return tuple(p for p, _ in _operand_rows(_analyzed(info)))


def _analyzed(info: KernelInfo) -> AttentionBody | None:
    """The body's analysis, or None for a body the flash kernel cannot run (analyze's EmmyError)."""
    try:
        return analyze(info.stores[0].parent_op(), info)
    except EmmyError:
        return None


def _operand_rows(body: AttentionBody | None) -> list[tuple[str, int]]:
    """(name, rows) of each of Q, K and V that is computed (not a plain load of rows), in that
    order; none for a body analyze rejects (see computed_operands)."""
    if body is None:
        return []
    return [(p.name, r) for p, r in ((body.q, body.seq_q), (body.k, body.seq_kv), (body.v, body.seq_kv))
            if p.mode != DIRECT]
