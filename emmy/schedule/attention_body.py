"""The roles of an attention kernel's body's values: which values are Q, K and V and how each is
produced, the score and its causal mask, the output's store.

    analyze(kernel_op, info) -> AttentionBody     # Q, K, V producers, score, causal mask, store
    kv_group(body, info) -> (axis, group) | None  # the query heads that share a key-value head

`analyze` checks that a `tile.kernel` body is softmax attention (an EmmyError naming the kernel
otherwise) and finds how each of Q, K and V is produced (`direct` rows copied with cp.async,
`rowsum` rows normalized by a row statistic, `elem` any other value). The plan
(emmy.schedule.attention) reads the answers; emmy.lowering.attention turns them into the flash
kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
from emmy.schedule.reduction import row_major_strides

# Producer modes, as emmy::attention::kDirect / kElem / kRowSum / kTma.
DIRECT, ELEM, ROWSUM, TMA = 0, 1, 2, 3
MODE_NAMES = {DIRECT: "direct", ELEM: "elem", ROWSUM: "rowsum", TMA: "tma"}

_CASTS = (arith.ExtFOp, arith.TruncFOp)
_NEG_INF = float("-inf")



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
    # a sliding window inside the causal mask (a second select around `unmasked`, on an affine
    # compare): key kv also masked for query q whenever kv <= q + causal_offset - window; 0 none.
    # `unmasked` keeps that select; `window_mask` is it and `window_unmasked` its unmasked operand
    # (the score of a key block wholly inside the window and below the diagonal: free_score).
    window: int = 0
    window_mask: SSAValue | None = None
    window_unmasked: SSAValue | None = None

    def free_overrides(self) -> list[tuple[SSAValue, SSAValue]]:
        """The selects a key block no mask touches takes as their unmasked operands, outermost
        first: the causal mask's, and the window's inside it (block_masked in attention.cuh tells
        such a block from the rest)."""
        pairs = [(self.mask, self.unmasked)] if self.mask is not None and self.unmasked is not None else []
        if self.window_mask is not None and self.window_unmasked is not None:
            pairs.append((self.window_mask, self.window_unmasked))
        return pairs

    @property
    def free_score(self) -> SSAValue:
        """The score of a key no mask touches, where it is one value of the body: the score with
        no causal mask, the unmasked operand of the causal select, or, with a window select
        right inside it, that select's unmasked operand."""
        if self.mask is None or self.unmasked is None:
            return self.score
        if self.window_mask is self.unmasked and self.window_unmasked is not None:
            return self.window_unmasked
        return self.unmasked


def attention_error(name: str, msg: str) -> EmmyError:
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
        raise attention_error(
            kname,
            f"{name.upper()} is {x.type} here, and the flash kernel multiplies bf16 operands on the tensor cores "
            "(a float16 or float32 model compiles to CUDA as bfloat16: set its torch_dtype to bfloat16)",
        )
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
            raise attention_error(kname, f"{name.upper()} reads a reduction that depends on the head dimension")
        if r.kind_name != "sum" or len(r.axis_names) != 1:
            raise attention_error(kname, f"{name.upper()}'s row statistic must be one loop.reduce sum over one axis")
        if not same(r.result, first.result):
            raise attention_error(kname, f"{name.upper()} reads more than one row statistic; only one is supported")
    if _reduces_in(first.yielded):
        raise attention_error(kname, f"{name.upper()}'s row statistic reads another reduction")
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
    form = _kv_against_q(o, q, kv, dom)
    if form is None:
        return None
    rel, c = form
    if rel == ">":
        return c
    if rel == ">=":
        return c - 1
    return None


def _window(body_unmasked: SSAValue, causal_offset: int, q: str, kv: str,
            dom: Domains) -> tuple[int, arith.SelectOp] | None:
    """(W, the select) when the unmasked score is itself a select giving -inf whenever
    kv <= q + causal_offset - W (convert-tensor-to-loop's form of `tensor.causal_mask {window}`),
    else None."""
    sel = _mask_select(body_unmasked)
    form = None if sel is None else _kv_against_q(sel, q, kv, dom)
    if form is None:
        return None
    rel, c = form  # masked when kv rel q + c
    bound = {"<": c - 1, "<=": c}.get(rel)  # masked when kv <= q + bound
    if bound is None or causal_offset - bound < 1:
        return None
    assert sel is not None
    return causal_offset - bound, sel


def _kv_against_q(o: arith.SelectOp, q: str, kv: str, dom: Domains) -> tuple[str, int] | None:
    """(rel, c) when the select `o` (see _mask_select) gives -inf exactly where `kv rel q + c`
    (rel one of > >= < <=), its compare affine in kv and q with coefficients 1 and -1."""
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
    if diff == {kv: 1, q: -1}:  # kv - q + const rel 0  <=>  kv rel q - const
        return rel, -const
    if diff == {kv: -1, q: 1}:  # q - kv + const rel 0  <=>  kv (rel mirrored) q + const
        return {">": "<", ">=": "<=", "<": ">", "<=": ">="}[rel], const
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
        raise attention_error(name, "the loop is not classified as attention")
    dom = Domains(op)
    same = _Same()
    axes = info.axes
    if len(att.head_dim_axes) != 1:
        raise attention_error(name, f"the Q x K contraction must reduce one axis, not {list(att.head_dim_axes)}")
    d_axis, e_axis = att.head_dim_axes[0], att.value_dim_axis
    q_axis, kv_axis = att.query_axis, att.key_axis
    D, DV = axes[d_axis], axes[e_axis]
    if D != DV:
        raise attention_error(name, f"head dimension {D} of Q/K differs from {DV} of V; only equal sizes are supported")
    qk = att.qk
    batch = tuple(a for a in info.parallel_axes if a not in (q_axis, e_axis))
    # Q may read head axes K does not (one key/value head for every query head: then K and V
    # read no head axis at all); those are batch axes of the kernel like the others.
    if q_axis not in qk.m_axes or set(qk.m_axes) - {q_axis} - set(batch) or set(qk.n_axes) != {kv_axis}:
        raise attention_error(name, "the Q x K contraction must pair the query axis with the key axis")
    if set(qk.batch_axes) - set(batch):
        raise attention_error(name, f"Q and K share axes {sorted(set(qk.batch_axes) - set(batch))} that the output does not have")

    # Softmax structure: max_kv S, sum_kv exp(S - max), sum_kv P V with P = exp(S - max) [/ sum].
    mx, sm, pv = att.max_reduce, att.sum_reduce, att.pv
    score = mx.yielded
    if not _uses_value(score, qk.result, set()):
        raise attention_error(name, "the max over keys does not read the Q x K contraction")
    s_sum = _exp_of_shifted(sm.yielded, mx)
    if s_sum is None or not same(s_sum, score):
        raise attention_error(name, "the sum over keys is not exp(score - max) of the same score")
    p = pv.a
    pn = _strip(p).owner
    divided = False
    if isinstance(pn, arith.DivfOp) and _strip(pn.rhs) is sm.result:
        p, divided = pn.lhs, True
    s_pv = _exp_of_shifted(p, mx)
    if s_pv is None or not same(s_pv, score):
        raise attention_error(name, "P in the P x V sum is not exp(score - max) [/ sum] of the same score")
    if divided != att.pv_uses_sum:
        raise attention_error(name, "the softmax sum is used in the P x V sum other than as P's divisor")

    stores = info.stores
    if len(stores) != 1:
        raise attention_error(name, f"expected one loop.store, found {len(stores)}")
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
            raise attention_error(name, "the epilogue must divide the P x V sum by the softmax sum")
        out_override = div[0].result
    stop = {out_override}
    for r in (pv.result, sm.result, mx.result):
        if r is not out_override and any(_uses_value(x, r, stop) for x in store.operands):
            raise attention_error(name, "the output reads the softmax statistics other than as softmax(S) V")
    if _reduces_in(store.value, stop):
        raise attention_error(name, "the epilogue reads a reduction other than the attention output")

    qp = _producer("q", qk.a, q_axis, d_axis, dom, same, axes, name)
    kp = _producer("k", qk.b, kv_axis, d_axis, dom, same, axes, name)
    vp = _producer("v", pv.b, kv_axis, e_axis, dom, same, axes, name)
    bad = _reduces_in(score, {qk.result})
    if bad:
        raise attention_error(name, "the score reads a reduction other than the Q x K contraction")
    causal = _causal(score, q_axis, kv_axis, dom)
    offset, sel = causal if causal is not None else (None, None)
    unmasked = _unmasked_operand(sel) if sel is not None else None
    window = _window(unmasked, offset, q_axis, kv_axis, dom) if unmasked is not None else None
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
        unmasked=unmasked,
        window=window[0] if window is not None else 0,
        window_mask=window[1].result if window is not None else None,
        window_unmasked=_unmasked_operand(window[1]) if window is not None else None,
    )


def _unmasked_operand(sel: arith.SelectOp) -> SSAValue:
    """The operand of a mask's select (_mask_select) that is not -inf."""
    return sel.rhs if _is_neg_inf(sel.lhs) else sel.lhs


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
    v = body.free_score
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
