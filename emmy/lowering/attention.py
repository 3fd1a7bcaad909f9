"""Kernel builder for `tile.kernel` ops of kind "attention": flash attention over the fused body.

    build(kernel_op, info, knobs, target) -> Built      # called by convert-tile-to-kernel
    analyze(kernel_op, info) -> AttentionPlan           # the roles of the body's values (tests)

The loop body computes, for every (batch/head axes, query q, value column e),

    out = epilogue( sum_kv softmax_kv(S(q, kv)) * V(kv, e) ),   S = score(sum_d Q(q, d) K(kv, d))

as nested `loop.reduce`s: a max over kv of S, a sum over kv of exp(S - max), a sum over kv of
P * V (P = exp(S - max), divided by the sum inside or in the epilogue), each recomputing S with
its own copy of the Q x K contraction. Q, K and V are arbitrary scalar code over loads (Qwen3:
q/k RMSNorm over the head dimension, with a row sum of squares, then rotary embedding).

The builder checks that structure (`analyze`, an EmmyError naming the kernel otherwise) and
emits one `kernel.func` whose body makes device lambdas from the loop body and hands them to
Emmy's flash-attention main loop, `emmy::attention::run` (emmy/backend/runtime/attention.cuh):
one pass over the keys with online softmax, causally dead key blocks skipped, Q staged once per
block and K/V once per key block in shared memory, both products on tensor cores (mma.sync).

Producers (Q rows by query, K and V rows by key; columns = the head dimension):
- `direct` (kDirect): the value is a bf16 load whose flat index is `row * stride + col + outer`
  with stride and outer offset multiples of 8: rows are copied with 16-byte cp.async.
- `rowsum` (kRowSum): the value reads one row statistic, a `loop.reduce sum` whose result
  depends on the row but not the column (RMSNorm's sum of squares): one lambda gives the summed
  term `(i, r) -> f32`, a second the element given the sum `(i, d, s) -> f32`; the statistic is
  computed once per staged row (once per query row, once per key row and key block).
- `elem` (kElem): any other value, one lambda `(i, d) -> f32`.
The score lambda `(q, kv, dot) -> f32` is the max reduction's yielded value with the Q x K
contraction replaced by `dot` (scale and mask); the output lambda `(q, e, o)` the stores, with
the normalized P x V sum replaced by `o`.

Launch: grid (product of the batch/head axes, query blocks), 32 * warps threads, dynamic shared
memory for Q (block_q rows) and `stages` buffers of K and V (block_kv rows each). Blocks start in
the order of their index, x fastest, so every head's longest (causal) query block starts before
any head's next longest: the longest blocks first, the shortest filling the last wave.

Variants (`knobs["fusion"]`, the attention's fusion knob; default "fused"):
- "fused": computed Q/K/V (rowsum/elem producers) are evaluated while staging, in the main
  kernel: Q once per query block, K and V once per key block of every query block.
- "split": a prologue kernel `<name>_prep` (grid: row blocks x batch/head rows x the computed
  ones of {Q, K, V}, 256 threads, `emmy::attention::materialize`) writes the computed rows once
  to bf16 temporaries ([rows x head_dim] per batch/head row; K and V per key head under
  grouped-query attention), and the main kernel copies them as direct rows (V is computed
  where the projection has a bias, as Qwen2's). Same values bit for bit, fewer
  evaluations: on an H200 the Qwen3 layer's attention took 21 us instead of 55 us at 512 tokens,
  126 us instead of 308 us at 2048, the same at 32 (mma_sync, block_q 64/128, block_kv 64).

    kernel.func @attention(%x: !kernel.ptr<bf16>, ..., %out: !kernel.ptr<bf16>) grid [16, 8, 1] block [128, 1, 1] smem 81920 min_blocks 1 {
      %bid_x = kernel.block_id x
      ...
      %q_a = kernel.lambda (%i: index, %r: index) -> f32 { ... }
      ...
      kernel.call "emmy::attention::run<128, 64, 64, 4, 2, 2, 128, 2, 128, 0, 0>"(%q_a, %q_b, ...) : (...) -> ()
    }
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import gcd, prod

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import BFloat16Type, Float32Type, FloatAttr, IndexType, IntAttr, StringAttr, TensorType, f32
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from emmy.analysis.body import value_tree
from emmy.analysis.classify import AttentionInfo, Domains, KernelInfo
from emmy.analysis.indexing import constant_int
from emmy.lowering import Built, In, Launch, LaunchArg, Tmp
from emmy.lowering.common import bind_pointers, c_ident, decompose, io_args, knob
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter, Scope, row_major_strides
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.loop import AxisOp, LoadOp, ReduceOp, StoreOp
from emmy.targets import Target

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
class AttentionPlan:
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


def _direct_load(v: SSAValue, row: str, col: str, dom: Domains) -> tuple[LoadOp, int] | None:
    """(load, row stride) when `v` is extf(bf16 load) of D contiguous, 16-byte aligned elements
    per row: flat index = row * stride + col + rest, stride and rest multiples of 8."""
    x = v.owner.operands[0] if isinstance(v.owner, arith.ExtFOp) else None
    if x is None or not isinstance(x.owner, LoadOp) or not isinstance(x.type, BFloat16Type):
        return None
    load = x.owner
    t = load.tensor.type
    assert isinstance(t, TensorType)
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
    return load, stride


def _producer(
    name: str, value: SSAValue, row: str, col: str, dom: Domains, same: _Same, axes: Mapping[str, int], kname: str
) -> Producer:
    x = _strip(value)
    if not isinstance(x.type, BFloat16Type) or not isinstance(value.owner, arith.ExtFOp):
        raise _err(kname, f"{name.upper()} must be a bf16 value widened to f32 (tensor cores take bf16 operands)")
    direct = _direct_load(value, row, col, dom)
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


def _causal(score: SSAValue, q: str, kv: str, dom: Domains) -> int | None:
    """The offset c when the score is -inf whenever kv > q + c (a select on an affine compare
    of kv and q around the whole score), else None."""
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
    if _is_neg_inf(o.lhs):
        masked_when = True
    elif _is_neg_inf(o.rhs):
        masked_when = False
    else:
        return None
    cmp = o.cond.owner
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


def analyze(op: Operation, info: KernelInfo) -> AttentionPlan:
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
    offset = _causal(score, q_axis, kv_axis, dom)
    return AttentionPlan(
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
    )


# --------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    block_q: int
    block_kv: int
    warps: int
    stages: int
    workers: str  # the knob's value
    note: str  # how the knob values were realized ("" when exactly as asked)
    wgmma: bool = False  # S = Q K^T with wgmma (emmy::attention::run's WGMMA)
    tma: bool = False  # copy = tma: direct K and V rows by tensor-map copies (kTma)

    @property
    def threads(self) -> int:
        return 32 * self.warps


def smem_bytes(head_dim: int, block_q: int, block_kv: int, stages: int, wgmma: bool = False) -> int:
    """Dynamic shared memory of emmy::attention::run (Config::kSmemBytes in attention.cuh), plus
    what aligning the base to 1024 bytes may take for wgmma."""
    ld = head_dim if head_dim % 64 == 0 else head_dim + 8
    return (block_q * ld + 2 * stages * block_kv * ld) * 2 + (SMEM_ALIGN_WGMMA if wgmma else 0)


SMEM_ALIGN_WGMMA = 1024  # wgmma's swizzled tiles are read through absolute address bits
TMA_SLAB = 64  # columns per tensor-map box: one 128-byte swizzled slab of the wgmma tiles


def schedule(plan: AttentionPlan, knobs: Mapping[str, object], target: Target, op: Operation) -> Schedule:
    bq = int(knob(knobs, "block_q", op))
    bkv = int(knob(knobs, "block_kv", op))
    warps = int(knob(knobs, "warps", op))
    stages = int(knob(knobs, "stages", op))
    workers = str(knob(knobs, "workers", op))
    name, D = plan.name, plan.head_dim
    note = ""
    if workers == "thread":
        raise _err(name, "workers=thread is not implemented for attention (use mma_sync)")
    wgmma = False
    if workers == "wgmma":
        if not target.has("wgmma"):
            raise _err(name, f"workers=wgmma needs sm_90a (target is {target.name})")
        if D % 64 or D > 256 or warps % 4 or bq != 16 * warps or bkv > 256:
            raise _err(
                name, "workers=wgmma needs a head dim that is a multiple of 64 up to 256, a warpgroup "
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
    smem = smem_bytes(D, bq, bkv, stages, wgmma)
    if smem > target.smem_per_block:
        raise _err(name, f"{smem} bytes of shared memory exceed the {target.smem_per_block} of {target.name}")
    copy = str(knobs.get("copy", "cp_async"))
    if copy not in ("cp_async", "tma"):
        raise _err(name, f"unknown copy '{copy}' (cp_async or tma)")
    tma = copy == "tma"
    if tma and (not wgmma or stages < 3 or plan.seq_kv % bkv):
        raise _err(
            name, "copy=tma needs workers=wgmma, stages >= 3 and a block_kv that divides the keys "
            f"(have {workers}, {stages}, block_kv={bkv} for {plan.seq_kv} keys)"
        )
    return Schedule(bq, bkv, warps, stages, workers, note, wgmma, tma)


# --------------------------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------------------------


def _lambda(kb: KB, arg_types: Sequence[Attribute], names: Sequence[str], result: Attribute | None) -> K.LambdaOp:
    lam = K.LambdaOp(list(arg_types), [result] if result is not None else [])
    for a, n in zip(lam.body.block.args, names):
        a.name_hint = n
    kb.insert(lam)
    return lam


def _f32(kb: KB, v: SSAValue) -> SSAValue:
    return kb.to_f32(v) if not isinstance(v.type, Float32Type) else v


def _producer_args(kb: KB, top: Scope, p: Producer, em: BodyEmitter) -> tuple[SSAValue, SSAValue]:
    """The two run() / materialize() arguments of a producer (see attention.cuh)."""
    idx = IndexType()
    if p.mode == DIRECT:
        assert p.load is not None
        ptr = kb.ptr_add(em.ptrs[p.load.tensor], _row0_offset(kb, top, p))  # the row pointer of row 0
        return ptr, kb.idx(p.stride)
    if p.mode == ELEM:
        lam = _lambda(kb, [idx, idx], ["i", "d"], f32)
        i, d = lam.body.block.args
        with kb.at(lam.body.block):
            s = top.child({p.row_axis: i, p.col_axis: d})
            lam.body.block.add_op(K.YieldOp(_f32(kb, s.one(p.value))))
        return lam.result, kb.idx(0)
    stat = p.stats[0]
    term = _lambda(kb, [idx, idx], ["i", "r"], f32)
    i, r = term.body.block.args
    with kb.at(term.body.block):
        s = top.child({p.row_axis: i, p.stat_axis: r})
        term.body.block.add_op(K.YieldOp(_f32(kb, s.one(stat.yielded))))
    elem = _lambda(kb, [idx, idx, f32], ["i", "d", "sum"], f32)
    i, d, total = elem.body.block.args
    with kb.at(elem.body.block):
        s = top.child({p.row_axis: i, p.col_axis: d}, overrides={st.result: [total] for st in p.stats})
        elem.body.block.add_op(K.YieldOp(_f32(kb, s.one(p.value))))
    return term.result, elem.result


def run_callee(
    plan: AttentionPlan, sched: Schedule, materialized: frozenset[str] = frozenset(),
    maps: Mapping[str, int] | None = None,
) -> str:
    """The C++ name of the main loop with its template arguments (`materialized`: operands read
    as direct rows from the split variant's temporaries; `maps`: operands copied through tensor
    maps, with the row length of each map's view)."""
    args = [plan.head_dim, sched.block_q, sched.block_kv, sched.warps, sched.stages]
    for p in (plan.q, plan.k, plan.v):
        if maps and p.name in maps:
            args += [TMA, maps[p.name]]
        elif p.name in materialized:
            args += [DIRECT, 0]
        else:
            args += [p.mode, p.stat_len if p.mode == ROWSUM else 0]
    args.append(int(sched.wgmma))
    return "emmy::attention::run<" + ", ".join(str(a) for a in args) + ">"


PREP_WARPS = 8  # warps of the split variant's prologue kernel
PREP_ROWS = 4  # rows each of its warps produces


def _gqa_group(plan: AttentionPlan, info: KernelInfo) -> tuple[str, int] | None:
    """(head axis, group) when K and V read a batch axis only as `axis / group` (grouped-query
    attention), or not at all while Q does (one key/value head for all: the group is every
    head): K and V are then materialized once per key head rather than once per query head."""
    roots = [p.value for p in (plan.k, plan.v)] + [st.yielded for p in (plan.k, plan.v) for st in p.stats]

    def walk(visit) -> bool:
        seen: set[SSAValue] = set()
        stack = list(roots)
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            o = v.owner
            r = visit(o)
            if r is False:
                return False
            if r is True:
                continue
            if isinstance(o, ReduceOp):
                stack.append(o.yielded)
            elif isinstance(o, Operation):
                stack.extend(o.operands)
        return True

    found: set[tuple[str, int]] = set()

    def find(o):
        if isinstance(o, arith.DivUIOp) and isinstance(o.lhs.owner, AxisOp) and o.lhs.owner.axis_name in plan.batch_axes:
            c = constant_int(o.rhs)
            if c is not None and c > 1:
                found.add((o.lhs.owner.axis_name, c))
        return None

    walk(find)
    if not found:
        read: set[str] = set()

        def reads(o):
            if isinstance(o, AxisOp):
                read.add(o.axis_name)
            return None

        walk(reads)
        unread = [a for a in plan.batch_axes if a not in read and a in info.attention.qk.m_axes]
        return (unread[0], info.axes[unread[0]]) if len(unread) == 1 else None
    if len(found) != 1:
        return None
    ((axis, group),) = found
    if info.axes[axis] % group:
        return None

    def only_divided(o):
        if isinstance(o, arith.DivUIOp) and isinstance(o.lhs.owner, AxisOp) and o.lhs.owner.axis_name == axis:
            return True if constant_int(o.rhs) == group else False
        if isinstance(o, AxisOp) and o.axis_name == axis:
            return False
        return None

    return (axis, group) if walk(only_divided) else None


def _linear_index(kb: KB, values: Mapping[str, SSAValue], axes: Sequence[str], extents: Mapping[str, int]) -> SSAValue:
    """Row-major linear index of axis values (the inverse of common.decompose)."""
    idx: SSAValue | int = 0
    for a in axes:
        idx = kb.add(kb.mul(idx, extents[a]), values[a])
    return kb.idx(idx)


def build(kernel_op: Operation, info: KernelInfo, knobs: Mapping[str, object], target: Target) -> Built:
    """Kernel-stage ops for one attention `tile.kernel` (see the module docstring).

    knobs["fusion"] (optional, default "fused"): "split" materializes computed Q, K and V once in a
    prologue kernel (`<name>_prep`) and runs the main loop on the materialized rows.
    """
    plan = analyze(kernel_op, info)
    sched = schedule(plan, knobs, target, kernel_op)
    fusion = str(knobs.get("fusion", "fused"))
    if fusion not in ("fused", "split"):
        raise _err(plan.name, f"unknown fusion '{fusion}' (fused or split)")
    if fusion == "split" and any(p.mode != DIRECT for p in (plan.q, plan.k, plan.v)):
        return _build_split(kernel_op, info, plan, sched)
    func, map_refs = _flash_func(kernel_op, info, plan, sched)
    _, _, refs = io_args(kernel_op)
    return Built(funcs=[func], launches=[Launch(func.sym_name.data, (*refs, *map_refs))], temps=[])


def _batch(plan: AttentionPlan, axes: Mapping[str, int]) -> int:
    n = 1
    for a in plan.batch_axes:
        n *= axes[a]
    if n > 65535:
        raise _err(plan.name, f"{n} batch x head rows exceed the grid's y limit of 65535")
    return n


def _flash_func(
    kernel_op: Operation,
    info: KernelInfo,
    plan: AttentionPlan,
    sched: Schedule,
    temps: Sequence[tuple[str, Producer, tuple[str, int] | None]] = (),
    temp_types: Sequence[TensorType] = (),
) -> tuple[K.KernelFuncOp, list[LaunchArg]]:
    """The main kernel and the launch arguments of its tensor maps. `temps`: (name, producer,
    gqa) of operands read from materialized rows (one extra pointer argument each, after the
    tile op's inputs and results; `temp_types` their buffers). With copy = tma, every direct K
    or V operand also gets a tensor map argument (after those), bound to its tensor."""
    axes = info.axes
    n_qblocks = -(-plan.seq_q // sched.block_q)
    if n_qblocks > 65535:
        raise _err(plan.name, f"{n_qblocks} query blocks of {sched.block_q} exceed the grid's y limit of 65535")
    n_batch = _batch(plan, axes)
    types, names, _ = io_args(kernel_op)
    types = types + [K.PtrType(BFloat16Type())] * len(temps)
    names = names + [t[0] for t in temps]
    maps = _tma_maps(kernel_op, plan, sched, temps, temp_types)
    types = types + [m[1] for m in maps]
    names = names + [f"tma_{m[0]}" for m in maps]
    smem = smem_bytes(plan.head_dim, sched.block_q, sched.block_kv, sched.stages, sched.wgmma)
    kb = KB.new_func(
        c_ident(plan.name), types, grid=(n_batch, n_qblocks, 1), block=(sched.threads, 1, 1),
        smem=smem, min_blocks=1, arg_names=names,
    )
    if sched.note:
        kb.func.attributes["emmy.note"] = StringAttr(sched.note)
    ptrs, outs = bind_pointers(kb, kernel_op)
    em = BodyEmitter(kb, kernel_op, ptrs, outs)
    n_args = len(kb.func.body.block.args)
    temp_args = kb.func.body.block.args[n_args - len(maps) - len(temps):n_args - len(maps)]
    map_args = dict(zip((m[0] for m in maps), kb.func.body.block.args[n_args - len(maps):]))

    bid_x = kb.block_id("x")
    bid_y = kb.block_id("y")
    outer = decompose(kb, bid_x, plan.batch_axes, axes) if plan.batch_axes else {}
    top = em.scope(outer)
    # the longest (causal) query blocks of all heads start first (x, the head, varies fastest)
    q_block = kb.sub(n_qblocks - 1, bid_y)
    q_block.name_hint = "q_block"
    tiles = smem_bytes(plan.head_dim, sched.block_q, sched.block_kv, sched.stages)  # without the alignment
    sbuf = kb.shared(BFloat16Type(), tiles // 2, 0, SMEM_ALIGN_WGMMA if sched.wgmma else 16, "smem")

    materialized = {p.name: (arg, p, gqa) for arg, (_, p, gqa) in zip(temp_args, temps)}
    args: list[SSAValue] = []
    for p in (plan.q, plan.k, plan.v):
        if p.name in materialized:
            arg, _, gqa = materialized[p.name]
            rows = plan.seq_q if p is plan.q else plan.seq_kv
            vals = dict(outer)
            ext = dict(axes)
            if gqa is not None:
                vals[gqa[0]] = kb.div(outer[gqa[0]], gqa[1])
                ext[gqa[0]] = axes[gqa[0]] // gqa[1]
            row_set = _linear_index(kb, vals, plan.batch_axes, ext) if plan.batch_axes else kb.idx(0)
            offset = kb.mul(row_set, rows * plan.head_dim)
            if p.name in map_args:
                args += [map_args[p.name], offset]
            else:
                args += [kb.ptr_add(arg, offset), kb.idx(plan.head_dim)]
        elif p.name in map_args:
            args += [map_args[p.name], _row0_offset(kb, top, p)]
        else:
            args += list(_producer_args(kb, top, p, em))

    idx = IndexType()
    score = _lambda(kb, [idx, idx, f32], ["q", "kv", "dot"], f32)
    q, kv, dot = score.body.block.args
    with kb.at(score.body.block):
        s = top.child({plan.query_axis: q, plan.key_axis: kv}, overrides={plan.dot: [dot]})
        score.body.block.add_op(K.YieldOp(_f32(kb, s.one(plan.score))))

    out = _lambda(kb, [idx, idx, f32], ["q", "e", "o"], None)
    q, e, o = out.body.block.args
    with kb.at(out.body.block):
        s = top.child({plan.query_axis: q, plan.v.col_axis: e}, overrides={plan.out_override: [o]})
        s.store(plan.store)
        out.body.block.add_op(K.YieldOp())

    kb.call(
        run_callee(plan, sched, frozenset(materialized), {m[0]: m[2] for m in maps}),
        [
            *args, score.result, out.result, q_block,
            kb.idx(plan.seq_q), kb.idx(plan.seq_kv), kb.idx(int(plan.causal)),
            kb.idx(plan.causal_offset), sbuf,
        ],
    )
    return kb.finish(), [m[3] for m in maps]


def _tma_maps(
    kernel_op: Operation, plan: AttentionPlan, sched: Schedule,
    temps: Sequence[tuple[str, Producer, tuple[str, int] | None]], temp_types: Sequence[TensorType],
) -> list[tuple[str, K.TensorMapType, int, LaunchArg]]:
    """copy = tma: (operand name, map type, row length of the view, launch argument) of every
    K or V operand read as direct rows. The map views the whole tensor as rows of the operand's
    row stride, boxes of block_kv rows by one 64-column slab."""
    if not sched.tma:
        return []
    materialized = {t[0]: i for i, t in enumerate(temps)}
    out = []
    for p in (plan.k, plan.v):
        temp = f"{p.name}_rows"
        if temp in materialized:
            numel, stride = temp_types[materialized[temp]].get_shape()[0], plan.head_dim
            ref: LaunchArg = Tmp(materialized[temp])
        elif p.mode == DIRECT and p.load is not None:
            t = p.load.tensor.type
            assert isinstance(t, TensorType) and isinstance(p.load.tensor, BlockArgument)
            numel, stride = prod(t.get_shape()), p.stride
            ref = In(p.load.tensor.index)
        else:
            continue
        if numel % stride:
            continue
        params = (numel // stride, stride, stride, 0, sched.block_kv, TMA_SLAB)
        out.append((p.name, K.TensorMapType(BFloat16Type(), *(IntAttr(v) for v in params)), stride, ref))
    return out


def _row0_offset(kb: KB, top: Scope, p: Producer) -> SSAValue:
    """The element offset of a direct producer's row 0 (column 0) in its tensor."""
    assert p.load is not None
    at0 = top.child({p.row_axis: 0, p.col_axis: 0})
    t = p.load.tensor.type
    assert isinstance(t, TensorType)
    off: SSAValue | int = 0
    for i, st in zip(p.load.indices, row_major_strides(t.get_shape())):
        off = kb.add(off, kb.mul(at0.one(i), st))
    return off if isinstance(off, SSAValue) else kb.idx(off)


def _build_split(kernel_op: Operation, info: KernelInfo, plan: AttentionPlan, sched: Schedule) -> Built:
    """A prologue kernel materializing the computed Q, K and V rows (those that are not plain
    loads), then the main kernel."""
    axes = info.axes
    D = plan.head_dim
    n_batch = _batch(plan, axes)
    gqa = _gqa_group(plan, info)
    todo: list[tuple[Producer, int, int, tuple[str, int] | None]] = []  # producer, rows, row sets, gqa
    if plan.q.mode != DIRECT:
        todo.append((plan.q, plan.seq_q, n_batch, None))
    for p in (plan.k, plan.v):
        if p.mode != DIRECT:
            todo.append((p, plan.seq_kv, n_batch // gqa[1] if gqa else n_batch, gqa))
    temps = [TensorType(BFloat16Type(), [sets * rows * D]) for _, rows, sets, _ in todo]

    types, names, refs = io_args(kernel_op)
    per_block = PREP_WARPS * PREP_ROWS
    kb = KB.new_func(
        c_ident(plan.name) + "_prep",
        types + [K.PtrType(BFloat16Type())] * len(todo),
        grid=(-(-max(rows for _, rows, _, _ in todo) // per_block), n_batch, len(todo)),
        block=(32 * PREP_WARPS, 1, 1),
        smem=0,
        arg_names=names + [f"{p.name}_rows" for p, *_ in todo],
    )
    ptrs, outs = bind_pointers(kb, kernel_op)
    em = BodyEmitter(kb, kernel_op, ptrs, outs)
    args = kb.func.body.block.args
    temp_args = args[len(args) - len(todo):]
    bid_x, bid_y, bid_z = kb.block_id("x"), kb.block_id("y"), kb.block_id("z")
    row0 = kb.mul(bid_x, per_block)
    for z, ((p, rows, sets, g), dst) in enumerate(zip(todo, temp_args)):
        cond = kb.cmp("eq", bid_z, z)
        if sets < n_batch:
            cond = kb.and_(cond, kb.lt(bid_y, sets))
        with kb.if_(cond):
            ext = dict(axes)
            if g is not None:
                ext[g[0]] = axes[g[0]] // g[1]
            outer = decompose(kb, bid_y, plan.batch_axes, ext) if plan.batch_axes else {}
            if g is not None:
                outer[g[0]] = kb.mul(outer[g[0]], g[1])  # a query head of the key head's group
            top = em.scope(outer)
            a, b = _producer_args(kb, top, p, em)
            out_rows = kb.ptr_add(dst, kb.mul(bid_y, rows * D))
            red = p.stat_len if p.mode == ROWSUM else 0
            kb.call(
                f"emmy::attention::materialize<{D}, {p.mode}, {red}, {PREP_WARPS}, {PREP_ROWS}>",
                [a, b, out_rows, row0, kb.idx(rows)],
            )
    prep = kb.finish()
    main, map_refs = _flash_func(
        kernel_op, info, plan, sched, [(f"{p.name}_rows", p, g) for p, _, _, g in todo], temps
    )
    tmp_refs = tuple(Tmp(i) for i in range(len(todo)))
    return Built(
        funcs=[prep, main],
        launches=[
            Launch(prep.sym_name.data, tuple(refs) + tmp_refs),
            Launch(main.sym_name.data, tuple(refs) + tmp_refs + tuple(map_refs)),
        ],
        temps=temps,
    )


__all__ = ["AttentionPlan", "Producer", "Schedule", "analyze", "build", "run_callee", "schedule", "smem_bytes"]
