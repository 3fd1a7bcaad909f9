"""`loop-fuse`: greedy producer-into-consumer fusion of `loop.fused` ops.

Input invariant: a loop-stage module (`convert-tensor-to-loop`'s output): functions hold only
`loop.fused` ops and `func.return`; every store indexes its result by distinct `loop.axis`
values (or constant 0 on an extent-1 dim).

Output IR: the same stage with fewer loops. A producer is fused into a consumer by inlining the
producer's body at each of the consumer's loads of it, with the producer's parallel axes
replaced by the load's index expressions and its reduction axes added to the consumer (fresh
names). Rules (pattern `InlineProducer`, on the consumer):
- (a) a producer without `loop.reduce` (elementwise, layout, concat, cast) is inlined into
  every consumer loop (recomputed) and erased once dead -- unless it is the *epilogue anchor*
  of a reducing loop (the first computing elementwise loop that every path from that loop goes
  through), which must first absorb that loop;
- (b) a producer with reductions is inlined into a consumer that is its only user, when the
  consumer does not reduce over any axis its (long) reductions' results map to: prologues
  (RMSNorm's sum of squares into the q/k/v matmul) and epilogues (a matmul into its residual
  add; the gate/up matmul into the SiLU*up product, which reads it at two column offsets and
  so holds two contractions). A layout-only consumer that feeds other loops does not absorb a
  reducing producer (it is dissolved into its own consumers instead);
- (c) a producer whose reductions are all short (product of reduced extents along any nesting
  <= 256) and read no model parameter is inlined into any consumer, even one reducing over its parallel axes (QK^T over
  the head dim into softmax and the PV contraction; q/k norms): attention becomes one loop;
- (e) the layout-only loops that only feed `func.return` absorb the reducing producer they
  all read (slices of the q/k/v matmul in the running example), and are then merged into one
  loop with several results (`MergeSplitSiblings`).
Clean-ups keep the bodies small: `HoistInvariantOps` (a value that does not depend on a
`loop.reduce`'s axes moves out of its region), `FactorOutOfSum` (rule (d): in a `loop.reduce
sum`, factors -- through mulf/extf/truncf, and divisors of divf -- that do not depend on the
reduced axes move out of the sum; exact in real arithmetic, but it drops the rounding points
the tensor stage had inside the sum, e.g. RMSNorm's bf16 normalized value before the matmul:
results then differ from the tensor stage at bf16 rounding level), `MergeReductionAxes`
(reduction axes of equal extent whose reductions do not nest get one name), `FoldIndexArith`
(index arithmetic folded with the axes' bounds), `CseBody` (structural common subexpressions,
including whole `loop.reduce` regions) and `DropUnusedInputs`.

Invariants: function arguments stay loads. A fused loop gets `emmy.fused_from` (the names of
the loops merged into it) and `emmy.fusion = "fused"` when a producer holding reductions was
merged in; its name joins the distinct model-level origin labels of the loops merged into it
(`rms_norm_qkv_proj`, `attention`, `o_proj_residual`, ...; labels of pure layout loops and
generic arithmetic are dropped; `attention` absorbs rope and norm labels).

Before / after (the running example, abridged):

    %ss = loop.fused @rms_norm axes [d1 = 32, k = 1024] ... { ... loop.reduce sum ["k"] ... }
    ... (mean, rsqrt, scale, cast, weight: elementwise loops) ...
    %qkv = loop.fused @linear_qkv_proj axes [m = 32, n = 4096, k = 1024] ... { ... }

    %q, %k, %v = loop.fused @rms_norm_qkv_proj axes [d1 = 32, d2 = 2048, k = 1024, d2_1 = 1024] ... {
      %ss = loop.reduce sum ["k"] : f32 { ... x * x ... }
      %r = math.rsqrt ...
      %acc = loop.reduce sum ["k"] : f32 { ... x * norm_w * w_q ... }
      %o = arith.mulf %acc, %r : f32
      ...
    }
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func
from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    Float32Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
)
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriterListener,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from emmy.analysis.body import Domains
from emmy.analysis.indexing import (
    CMPI_PREDICATES,
    AffineForm,
    IndexBuilder,
    affine_form,
    compare_bounds,
    constant_int,
    index_bounds,
    simplify_divrem_in,
)
from emmy.dialects.loop import (
    AxesAttr,
    AxisOp,
    FusedOp,
    LoadOp,
    ReduceOp,
    StoreOp,
    YieldOp,
    axes_owner,
)

SHORT_REDUCTION = 256
ORIGIN = "emmy.origin"
FUSED_FROM = "emmy.fused_from"
FUSION = "emmy.fusion"
f32 = Float32Type()

MODEL_LABELS = ("rms_norm", "layer_norm", "attention", "silu", "gelu", "rope", "residual", "embedding", "softmax")
ATTENTION_ABSORBS = ("rope", "rms_norm", "layer_norm", "q_norm", "k_norm")


# --------------------------------------------------------------------------------------------
# Facts about loops
# --------------------------------------------------------------------------------------------


def has_reduce(loop: FusedOp) -> bool:
    return any(isinstance(op, ReduceOp) for op in loop.block.walk())


_LAYOUT_OPS = (
    AxisOp,
    LoadOp,
    StoreOp,
    YieldOp,
    arith.ConstantOp,
    arith.AddiOp,
    arith.SubiOp,
    arith.MuliOp,
    arith.DivUIOp,
    arith.RemUIOp,
    arith.CmpiOp,
    arith.SelectOp,
    arith.IndexCastOp,
)


def is_layout_only(loop: FusedOp) -> bool:
    """No arithmetic on the data: loads, index math, selects between loads, constants."""
    return all(isinstance(op, _LAYOUT_OPS) for op in loop.block.walk())


def is_elementwise(loop: FusedOp) -> bool:
    return not has_reduce(loop)


def users(loop: FusedOp) -> list[Operation]:
    """The distinct ops using the loop's results, in no particular order."""
    seen: dict[Operation, None] = {}
    for r in loop.results:
        for u in r.uses:
            seen[u.operation] = None
    return list(seen)


def producers(loop: FusedOp) -> list[FusedOp]:
    seen: dict[FusedOp, None] = {}
    for v in loop.inputs:
        if isinstance(v, OpResult) and isinstance(v.op, FusedOp):
            seen[v.op] = None
    return list(seen)


def feeds_only_return(loop: FusedOp) -> bool:
    us = users(loop)
    return bool(us) and all(isinstance(u, func.ReturnOp) for u in us)


def reduce_cost(r: ReduceOp, extents: dict[str, int]) -> int:
    """Product of reduced extents along the deepest nesting of reductions inside `r`."""
    own = 1
    for a in r.axis_names:
        own *= extents[a]
    inner = 1
    for op in r.body.block.ops:
        if isinstance(op, ReduceOp):
            inner = max(inner, reduce_cost(op, extents))
    return own * inner


def _top_reduces(loop: FusedOp) -> list[ReduceOp]:
    return [op for op in loop.block.ops if isinstance(op, ReduceOp)]


def store_plan(st: StoreOp) -> list[str | None] | None:
    """The axis indexing each result dim (None: constant 0 on an extent-1 dim)."""
    plan: list[str | None] = []
    for i in st.indices:
        o = i.owner if isinstance(i, OpResult) else None
        if isinstance(o, AxisOp):
            if o.axis_name in plan:
                return None
            plan.append(o.axis_name)
        elif constant_int(i) == 0:
            plan.append(None)
        else:
            return None
    return plan


def stores_of(loop: FusedOp, n: int) -> list[StoreOp]:
    return [op for op in loop.block.ops if isinstance(op, StoreOp) and op.output_index == n]


def external_values(op: Operation) -> list[SSAValue]:
    """Values an op (with its regions) uses that are defined outside it."""
    out: list[SSAValue] = list(op.operands)
    if op.regions:
        for inner in op.walk():
            if inner is op:
                continue
            for v in inner.operands:
                owner = v.owner if isinstance(v, OpResult) else v.block.parent_op()
                if owner is not None and not op.is_ancestor(owner):
                    out.append(v)
    return out


def backward_slice(loop: FusedOp, values: Iterable[SSAValue]) -> list[Operation]:
    """Top-level ops of the loop body the values depend on, in body order."""
    block = loop.block
    needed: set[Operation] = set()
    stack = list(values)
    while stack:
        v = stack.pop()
        if not isinstance(v, OpResult):
            continue
        op = v.op
        while op.parent_block() is not block:  # a value defined inside a region
            parent = op.parent_op()
            assert parent is not None
            op = parent
        if op in needed:
            continue
        needed.add(op)
        stack.extend(external_values(op))
    return [op for op in block.ops if op in needed]


def short_limit(module: Operation) -> int:
    """The largest reduction cost counted as short: SHORT_REDUCTION, or less than half the
    longest reduction of the module when that is smaller (so that a small model's projections
    are not 'short' while its head-dim reductions are: small models fuse like full-size ones)."""
    longest = 0
    for op in module.walk():
        if isinstance(op, ReduceOp):
            owner = axes_owner(op)
            if isinstance(owner, FusedOp):
                cost = 1
                for a in op.axis_names:
                    cost *= owner.extents[a]
                longest = max(longest, cost)
    return SHORT_REDUCTION if longest == 0 else max(1, min(SHORT_REDUCTION, (longest - 1) // 2))


def heavy_reduce_domains(
    loop: FusedOp, n: int, dom: Domains, limit: int = SHORT_REDUCTION
) -> list[tuple[str, ...]]:
    """The domains (producer axes) of the long top-level reductions result n depends on."""
    extents = loop.extents
    sts = stores_of(loop, n)
    out = []
    for op in backward_slice(loop, [v for st in sts for v in st.operands]):
        if isinstance(op, ReduceOp) and reduce_cost(op, extents) > limit:
            out.append(dom.of(op.result))
    return out


def all_short(loop: FusedOp, limit: int = SHORT_REDUCTION) -> bool:
    extents = loop.extents
    return all(reduce_cost(r, extents) <= limit for r in _top_reduces(loop))


def weight_derived(value: SSAValue) -> bool:
    """Whether a tensor is a model parameter (a function argument with `emmy.role = "param"`), or
    computed from parameters alone by loops without reductions (a concatenation of weights)."""
    from xdsl.dialects import func
    from xdsl.ir import BlockArgument

    if isinstance(value, BlockArgument):
        fn = value.block.parent_op()
        if not isinstance(fn, func.FuncOp) or fn.arg_attrs is None:
            return False
        attrs = fn.arg_attrs.data
        role = attrs[value.index].data.get("emmy.role") if value.index < len(attrs) else None
        return getattr(role, "data", None) == "param"
    owner = value.owner
    if isinstance(owner, FusedOp) and not any(isinstance(o, ReduceOp) for o in owner.walk()):
        return bool(owner.inputs) and all(weight_derived(v) for v in owner.inputs)
    return False


def reduces_weights(loop: FusedOp) -> bool:
    """Whether the loop contracts against a weight matrix: a reduction reads a model parameter
    at indices that depend both on a reduced axis and on a kept axis that none of the
    reduction's other operands depends on (W[n, k] against x[m, k]). Such a projection, however
    short, is never recomputed per consumer element; rule (c) is for reductions over activations
    (QK^T over the head dim, whose per-element scale q_norm.weight[d] depends on the reduced axis
    alone, and whose bias q_proj.bias[h * D + d] depends on the head h that Q and K share)."""
    from xdsl.ir import BlockArgument

    from emmy.analysis.indexing import load_axes

    weights = {i for i, v in enumerate(loop.inputs) if weight_derived(v)}
    if not weights:
        return False

    def is_weight(load: LoadOp) -> bool:
        arg = load.operands[0]
        return isinstance(arg, BlockArgument) and arg.block is loop.block and arg.index in weights

    # (reduced axes around it, axes it reads, whether it reads a weight) of every load, once
    loads = [(reduced_around(op), load_axes(op), is_weight(op)) for op in loop.walk() if isinstance(op, LoadOp)]
    for reduced, axes, weight in loads:
        if not reduced or not weight:
            continue
        if axes is None:
            return True
        shared: set[str] = set()
        for other_reduced, other_axes, other_weight in loads:
            if other_reduced & reduced and not other_weight:
                shared |= other_axes or set()
        if axes & reduced and axes - reduced - shared:
            return True
    return False


def reduced_around(op: Operation) -> set[str]:
    out: set[str] = set()
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FusedOp):
        if isinstance(parent, ReduceOp):
            out.update(parent.axis_names)
        parent = parent.parent_op()
    return out


def loads_of(consumer: FusedOp, value: SSAValue) -> list[LoadOp]:
    """The consumer's loads of a tensor it takes as an input."""
    out = []
    for i, v in enumerate(consumer.inputs):
        if v == value:
            arg = consumer.block.args[i]
            out += [u.operation for u in arg.uses if isinstance(u.operation, LoadOp)]
    return out


# --------------------------------------------------------------------------------------------
# Anchors: the elementwise loop a reducing loop fuses forward into
# --------------------------------------------------------------------------------------------


def anchor(q: FusedOp, pos: dict[Operation, int], st: FuseState) -> FusedOp | None:
    """The first loop every path from reducing loop `q` goes through, when the paths reach it
    through elementwise loops only and it computes (or only feeds `func.return`)."""
    pending = set(users(q))
    for _ in range(len(pos) + 1):
        if not pending:
            return None
        if len(pending) == 1:
            (x,) = pending
            if not isinstance(x, FusedOp) or not st.cached(is_elementwise, x):
                return None
            if not st.cached(is_layout_only, x) or feeds_only_return(x):
                return x
            pending = set(users(x))
            continue
        x = min(pending, key=lambda o: pos.get(o, len(pos)))
        if not isinstance(x, FusedOp) or not st.cached(is_elementwise, x):
            return None
        pending.discard(x)
        pending.update(users(x))
    return None


def is_anchor(e: FusedOp, st: FuseState) -> bool:
    """Whether elementwise loop `e` must first absorb a reducing loop upstream of it."""
    if st.cached(is_layout_only, e) and not feeds_only_return(e):
        return False
    block = e.parent_block()
    assert block is not None
    pos = {op: i for i, op in enumerate(block.ops)}
    seen: set[FusedOp] = set()
    stack = producers(e)
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        if st.cached(is_elementwise, p):
            stack.extend(producers(p))
        elif anchor(p, pos, st) is e:
            return True
    return False


# --------------------------------------------------------------------------------------------
# Labels and names
# --------------------------------------------------------------------------------------------


@dataclass
class FuseState:
    """Bookkeeping shared by the patterns of one pass run."""

    labels: dict[Operation, list[str]] = field(default_factory=dict)
    split: set[str] = field(default_factory=set)
    # loops whose body was cleaned (CSE, axis merging) and has not changed since
    clean: set[Operation] = field(default_factory=set)
    axes_clean: set[Operation] = field(default_factory=set)

    # facts about loops, valid while their version is unchanged
    versions: dict[Operation, int] = field(default_factory=dict)
    memo: dict[tuple, object] = field(default_factory=dict)
    limit: int = SHORT_REDUCTION  # the longest reduction cost counted as short

    def all_short(self, loop: FusedOp) -> bool:
        return all_short(loop, self.limit)

    def keeps_parallel(self, producer: FusedOp, consumer: FusedOp) -> bool:
        # A contraction against weights counts as long whatever its extent (see reduces_weights).
        limit = 0 if self.cached(reduces_weights, producer) else self.limit
        return _keeps_parallel(producer, consumer, limit)

    def cached(self, fn, *loops: Operation):
        """`fn(*loops)`, remembered until one of the loops changes."""
        key = (fn, *((lp, self.versions.get(lp, 0)) for lp in loops))
        if key not in self.memo:
            self.memo[key] = fn(*loops)
        return self.memo[key]

    def touched(self, op: Operation) -> None:
        """A rewrite touched `op`: its loop needs cleaning again, its facts are stale."""
        loop: Operation | None = op
        while loop is not None and not isinstance(loop, FusedOp):
            loop = loop.parent_op()
        if loop is not None:
            self.clean.discard(loop)
            self.axes_clean.discard(loop)
            self.versions[loop] = self.versions.get(loop, 0) + 1

    def listener(self) -> PatternRewriterListener:
        return PatternRewriterListener(
            operation_insertion_handler=[self.touched],
            operation_removal_handler=[self.touched],
            operation_modification_handler=[self.touched],
        )

    def labels_of(self, loop: FusedOp) -> list[str]:
        if loop not in self.labels:
            o = loop.attributes.get(ORIGIN)
            self.labels[loop] = [o.data] if isinstance(o, StringAttr) else [loop.sym_name.data]
        return self.labels[loop]


def _merge_lists(a: Sequence[str], b: Sequence[str]) -> list[str]:
    out = list(a)
    for x in b:
        if x not in out:
            out.append(x)
    return out


def _names(loop: FusedOp) -> list[str]:
    f = loop.attributes.get(FUSED_FROM)
    if isinstance(f, ArrayAttr):
        return [s.data for s in f.data if isinstance(s, StringAttr)]
    return [loop.sym_name.data]


def record_fusion(
    state: FuseState, producer: FusedOp, consumer: FusedOp, consumer_was_layout: bool
) -> None:
    consumer.attributes[FUSED_FROM] = ArrayAttr(
        [StringAttr(s) for s in _merge_lists(_names(producer), _names(consumer))]
    )
    if has_reduce(producer) or FUSION in producer.attributes:
        consumer.attributes[FUSION] = StringAttr("fused")
    mine = state.labels_of(consumer)
    if is_layout_only(producer):
        return
    theirs = state.labels_of(producer)
    state.labels[consumer] = _merge_lists(theirs, [] if consumer_was_layout else mine)


def loop_name(labels: Sequence[str]) -> str:
    """Join the distinct model-level origin labels of a loop into a kernel name."""
    clean = []
    for label in labels:
        label = label.removeprefix("linear_")
        if label not in clean:
            clean.append(label)
    model = [l for l in clean if l in MODEL_LABELS or f"linear_{l}" in labels]
    if "softmax" in model and "matmul" in clean:  # softmax between products of activations, by hand
        model = ["attention" if l == "softmax" else l for l in model]
    if "attention" in model:
        # Rope, norms and the projections' bias adds (Qwen2's q/k/v biases) are part of its
        # producers; a projection's contraction never fuses into attention (rule (b)).
        model = [l for l in model if l in MODEL_LABELS and l not in ATTENTION_ABSORBS]
    chosen = model or clean[:1]
    return "_".join(chosen) if chosen else "loop"


# --------------------------------------------------------------------------------------------
# Inlining a producer at a consumer's loads
# --------------------------------------------------------------------------------------------


def _fresh(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    i = 1
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


def consumer_arg(consumer: FusedOp, value: SSAValue, rewriter: PatternRewriter) -> BlockArgument:
    """The consumer's block argument for `value`, adding an input when needed."""
    for i, v in enumerate(consumer.inputs):
        if v == value:
            return consumer.block.args[i]
    n = len(consumer.inputs)
    consumer.operands = [*consumer.inputs, value]
    return rewriter.insert_block_argument(consumer.block, n, value.type)


def inline_producer(
    producer: FusedOp, consumer: FusedOp, rewriter: PatternRewriter, state: FuseState
) -> None:
    """Inline every load of the producer's results in the consumer; erase the producer if dead."""
    consumer_was_layout = is_layout_only(consumer)
    args = {
        a: consumer_arg(consumer, v, rewriter) for a, v in zip(producer.block.args, producer.inputs)
    }
    taken = set(consumer.axis_names)
    new_axes = list(consumer.axes.items())
    renames: dict[str, str] = {}
    adopt: dict[str, set[str | None]] = {}
    for n, result in enumerate(producer.results):
        sites = loads_of(consumer, result)
        if not sites:
            continue
        (st,) = stores_of(producer, n)
        plan = store_plan(st)
        assert plan is not None
        for j, a in enumerate(plan):
            if a is not None:
                adopt.setdefault(a, set()).update(_axis_name_of(load.indices[j]) for load in sites)
        parallel = {a for a in plan if a is not None}
        slice_ops = backward_slice(producer, [st.value])
        for op in slice_ops:
            for inner in op.walk():
                names = [inner.axis_name] if isinstance(inner, AxisOp) else (
                    list(inner.axis_names) if isinstance(inner, ReduceOp) else []
                )
                for a in names:
                    if a not in parallel and a not in renames:
                        renames[a] = _fresh(a, taken)
                        taken.add(renames[a])
                        new_axes.append((renames[a], producer.extents[a]))
        consumer.properties["axes"] = AxesAttr.get(new_axes)
        for load in sites:
            _inline_at(load, plan, slice_ops, st.value, args, renames, rewriter)
    _adopt_axis_names(consumer, adopt)
    # drop the consumer inputs that no longer have loads
    drop_unused_inputs(consumer, rewriter)
    record_fusion(state, producer, consumer, consumer_was_layout)
    rewriter.notify_op_modified(consumer)
    if all(not r.uses for r in producer.results):
        rewriter.erase(producer)


_GENERIC_AXIS = re.compile(r"d\d+$")


def _axis_name_of(index: SSAValue) -> str | None:
    o = index.owner if isinstance(index, OpResult) else None
    return o.axis_name if isinstance(o, AxisOp) else None


def _adopt_axis_names(consumer: FusedOp, adopt: dict[str, set[str | None]]) -> None:
    """A generic consumer axis (`d1`) that a producer's named axis (`m`) maps to one to one
    takes the producer's name (readability only)."""
    taken = set(consumer.axis_names)
    rename: dict[str, str] = {}
    for p, cs in adopt.items():
        names = cs - {None}
        if _GENERIC_AXIS.match(p) or p in taken or len(names) != 1:
            continue
        (c,) = names
        if c is None or not _GENERIC_AXIS.match(c) or c in rename:
            continue
        rename[c] = p
        taken.add(p)
    if not rename:
        return
    for op in consumer.block.walk():
        if isinstance(op, AxisOp) and op.axis_name in rename:
            op.axis = StringAttr(rename[op.axis_name])
        elif isinstance(op, ReduceOp):
            op.axes = ArrayAttr([StringAttr(rename.get(a, a)) for a in op.axis_names])
    consumer.properties["axes"] = AxesAttr.get(
        [(rename.get(a, a), e) for a, e in consumer.axes.items()]
    )


def _inline_at(
    load: LoadOp,
    plan: list[str | None],
    slice_ops: list[Operation],
    stored: SSAValue,
    args: dict[BlockArgument, BlockArgument],
    renames: dict[str, str],
    rewriter: PatternRewriter,
) -> None:
    axis_map = {a: load.indices[j] for j, a in enumerate(plan) if a is not None}
    mapper: dict[SSAValue, SSAValue] = dict(args)
    point = InsertPoint.before(load)
    for op in slice_ops:
        if isinstance(op, AxisOp) and op.axis_name in axis_map:
            mapper[op.result] = axis_map[op.axis_name]
            continue
        clone = op.clone(mapper)
        for r_old, r_new in zip(op.results, clone.results):
            mapper[r_old] = r_new
        _rename_axes(clone, axis_map, renames)
        rewriter.insert(clone, point)
    value = mapper.get(stored, stored)
    rewriter.replace(load, [], [value])


def _rename_axes(op: Operation, axis_map: dict[str, SSAValue], renames: dict[str, str]) -> None:
    for inner in list(op.walk()):
        if isinstance(inner, AxisOp):
            if inner.axis_name in axis_map and inner is not op:
                inner.result.replace_all_uses_with(axis_map[inner.axis_name])
                inner.detach()
                inner.erase()
            elif inner.axis_name in renames:
                inner.axis = StringAttr(renames[inner.axis_name])
        elif isinstance(inner, ReduceOp):
            inner.axes = ArrayAttr([StringAttr(renames.get(a, a)) for a in inner.axis_names])


def drop_unused_inputs(loop: FusedOp, rewriter: PatternRewriter) -> bool:
    """Remove block arguments without uses and merge duplicate inputs."""
    block = loop.block
    first: dict[SSAValue, BlockArgument] = {}
    keep: list[int] = []
    changed = False
    for i, (v, arg) in enumerate(zip(loop.inputs, block.args)):
        if v in first:
            arg.replace_all_uses_with(first[v])
            changed = True
            continue
        if not arg.uses:
            changed = True
            continue
        first[v] = arg
        keep.append(i)
    if not changed:
        return False
    inputs = [loop.inputs[i] for i in keep]
    for arg in [a for i, a in enumerate(block.args) if i not in keep][::-1]:
        rewriter.erase_block_argument(arg)
    loop.operands = inputs
    rewriter.notify_op_modified(loop)
    return True


# --------------------------------------------------------------------------------------------
# Fusion patterns
# --------------------------------------------------------------------------------------------


def _can_inline(producer: FusedOp, consumer: FusedOp, st: FuseState) -> bool:
    if producer is consumer or producer.parent_block() is not consumer.parent_block():
        return False
    if any(store_plan(st) is None for st in producer.block.ops if isinstance(st, StoreOp)):
        return False
    if any(len(stores_of(producer, n)) != 1 for n in range(len(producer.results))):
        return False
    if st.cached(is_elementwise, producer):  # rule (a)
        return not is_anchor(producer, st)
    if st.cached(st.all_short, producer) and not st.cached(reduces_weights, producer):  # rule (c)
        return True
    # rule (b): the only user; the consumer keeps the long reductions' results parallel
    if any(u is not consumer for u in users(producer)):
        return False
    if (
        st.cached(is_elementwise, consumer)
        and st.cached(is_layout_only, consumer)
        and not feeds_only_return(consumer)
    ):
        return False
    return st.cached(st.keeps_parallel, producer, consumer)


def _keeps_parallel(producer: FusedOp, consumer: FusedOp, limit: int = SHORT_REDUCTION) -> bool:
    pdom = Domains(producer)
    cdom = Domains(consumer)
    for n, result in enumerate(producer.results):
        sites = loads_of(consumer, result)
        if not sites:
            continue
        heavy = heavy_reduce_domains(producer, n, pdom, limit)
        if not heavy:
            continue
        (st,) = stores_of(producer, n)
        plan = store_plan(st)
        assert plan is not None
        for load in sites:
            reduced = reduced_around(load)
            if not reduced:
                continue
            for dom in heavy:
                for j, a in enumerate(plan):
                    if a in dom and set(cdom.of(load.indices[j])) & reduced:
                        return False
    return True


def _absorbs_returned_views(producer: FusedOp, consumer: FusedOp) -> bool:
    """Rule (e): every user of a reducing producer is a layout-only loop feeding return."""
    if is_elementwise(producer):
        return False
    us = users(producer)
    return all(
        isinstance(u, FusedOp) and is_layout_only(u) and feeds_only_return(u) for u in us
    ) and consumer in us


@dataclass
class InlineProducer(RewritePattern):
    """Fuse one producer into this consumer (rules a, b, c, e)."""

    state: FuseState
    views: bool = False  # rule (e), applied once nothing else fuses

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        for p in producers(op):
            if _can_inline(p, op, self.state):
                inline_producer(p, op, rewriter, self.state)
                return
            if self.views and _absorbs_returned_views(p, op) and all(
                store_plan(st) is not None for st in p.block.ops if isinstance(st, StoreOp)
            ):
                self.state.split.add(p.sym_name.data)
                for name in _names(p):
                    self.state.split.add(name)
                inline_producer(p, op, rewriter, self.state)
                return


@dataclass
class MergeSplitSiblings(RewritePattern):
    """Merge the loops that absorbed parts of one producer (rule e) into one loop."""

    state: FuseState

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        if not self.state.split or not feeds_only_return(op):
            return
        mine = set(_names(op)) & self.state.split
        if not mine:
            return
        block = op.parent_block()
        assert block is not None
        for other in block.ops:
            if (
                other is not op
                and isinstance(other, FusedOp)
                and set(_names(other)) & mine
                and feeds_only_return(other)
            ):
                merge_siblings(op, other, rewriter, self.state)
                return


def merge_siblings(a: FusedOp, b: FusedOp, rewriter: PatternRewriter, state: FuseState) -> None:
    """One loop computing the results of two independent loops (a's results first)."""
    if b.is_before_in_block(a):
        a, b = b, a
    inputs = list(a.inputs)
    for v in b.inputs:
        if v not in inputs:
            inputs.append(v)
    a_par = set(Domains(a).names(_store_mask(a)))
    b_dom = Domains(b)
    b_par = set(b_dom.names(_store_mask(b, b_dom)))
    axes = list(a.axes.items())
    taken = {n for n, _ in axes}
    rename: dict[str, str] = {}
    for name, ext in b.axes.items():
        if name in b_par and name in a_par and a.extents[name] == ext:
            continue  # the same parallel axis
        if name in taken:
            rename[name] = _fresh(name, taken | set(b.axis_names))
        new = rename.get(name, name)
        taken.add(new)
        axes.append((new, ext))
    body = a.detach_region(a.body)
    block = body.block
    for v in inputs[len(a.inputs):]:
        block.insert_arg(v.type, len(block.args))
    mapper: dict[SSAValue, SSAValue] = {
        arg: block.args[inputs.index(v)] for arg, v in zip(b.block.args, b.inputs)
    }
    term = block.last_op
    assert term is not None
    offset = len(a.results)
    for op in list(b.block.ops):
        if isinstance(op, YieldOp):
            continue
        clone = op.clone(mapper)
        for r_old, r_new in zip(op.results, clone.results):
            mapper[r_old] = r_new
        _rename_axes(clone, {}, rename)
        if isinstance(clone, StoreOp):
            clone.output = IntegerAttr(clone.output_index + offset, builtin.i64)
        block.insert_op_before(clone, term)
    merged = FusedOp(
        a.sym_name.data,
        axes,
        inputs,
        [r.type for r in (*a.results, *b.results)],
        body,
        dict(a.attributes),
    )
    merged.attributes[FUSED_FROM] = ArrayAttr(
        [StringAttr(s) for s in _merge_lists(_names(a), _names(b))]
    )
    if FUSION in b.attributes:
        merged.attributes[FUSION] = b.attributes[FUSION]
    state.labels[merged] = _merge_lists(state.labels_of(a), state.labels_of(b))
    rewriter.insert(merged, InsertPoint.before(b))
    for old, new in zip((*a.results, *b.results), merged.results):
        rewriter.replace_all_uses_with(old, new)
    rewriter.erase(a)
    rewriter.erase(b)


def _store_mask(loop: FusedOp, dom: Domains | None = None) -> int:
    d = dom or Domains(loop)
    m = 0
    for op in loop.block.ops:
        if isinstance(op, StoreOp):
            for v in op.operands:
                m |= d.mask(v)
    return m


# --------------------------------------------------------------------------------------------
# Clean-up patterns
# --------------------------------------------------------------------------------------------


class HoistInvariantOps(RewritePattern):
    """Move ops of a `loop.reduce` region that do not depend on its axes before it."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        reduced = set(op.axis_names)
        for inner in list(op.body.block.ops):
            if isinstance(inner, YieldOp):
                continue
            if isinstance(inner, AxisOp) and inner.axis_name in reduced:
                continue
            if isinstance(inner, ReduceOp) and _mentions_axes(inner, reduced):
                continue
            if all(not _defined_inside(v, op) for v in external_values(inner)):
                inner.detach()
                rewriter.insert(inner, InsertPoint.before(op))


def _mentions_axes(op: Operation, axes: set[str]) -> bool:
    return any(isinstance(o, AxisOp) and o.axis_name in axes for o in op.walk())


def _defined_inside(v: SSAValue, op: Operation) -> bool:
    """Whether `v` is defined inside `op`'s regions."""
    if isinstance(v, OpResult):
        return v.op is not op and op.is_ancestor(v.op)
    parent = v.block.parent_op()
    return parent is not None and op.is_ancestor(parent)


def _real_factors(v: SSAValue) -> list[tuple[SSAValue, bool]]:
    """Leaves of a product through mulf/extf/truncf (and the divisors of divf, flagged True)."""
    out: list[tuple[SSAValue, bool]] = []
    stack: list[tuple[SSAValue, bool]] = [(v, False)]
    while stack:
        x, div = stack.pop()
        op = x.owner if isinstance(x, OpResult) else None
        if isinstance(op, arith.MulfOp):
            stack += [(op.rhs, div), (op.lhs, div)]
        elif isinstance(op, arith.ExtFOp | arith.TruncFOp):
            stack.append((op.input, div))
        elif isinstance(op, arith.DivfOp):
            stack += [(op.rhs, not div), (op.lhs, div)]
        else:
            out.append((x, div))
    return out


class FactorOutOfSum(RewritePattern):
    """Rule (d): `sum_k(a(k) * s) = s * sum_k(a(k))` for factors s that do not depend on k.

    Looks through `arith.mulf`, `extf`, `truncf` and `divf` (exact in real arithmetic; the
    rounding points inside the sum are dropped, see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        if op.kind_name != "sum" or op.result.type != f32:
            return
        leaves = _real_factors(op.yielded)
        if len(leaves) < 2 or any(not isinstance(v.type, AnyFloat) for v, _ in leaves):
            return
        inside = [(v, d) for v, d in leaves if _defined_inside(v, op)]
        outside = [(v, d) for v, d in leaves if not _defined_inside(v, op)]
        if not inside or not outside:
            return
        owner = axes_owner(op)
        assert owner is not None
        dom = Domains(owner)
        if any(dom.mask(v) & dom.mask_of(op.axis_names) for v, _ in outside):
            return
        term = op.body.block.last_op
        assert isinstance(term, YieldOp)
        inner_ops: list[Operation] = []
        num, den = _product(inside, dom, inner_ops)
        if num is None:
            one = arith.ConstantOp(builtin.FloatAttr(1.0, f32))
            inner_ops.append(one)
            num = one.result
        if den is not None:
            inner_ops.append(arith.DivfOp(num, den))
            num = inner_ops[-1].results[0]
        rewriter.insert(inner_ops, InsertPoint.before(term))
        rewriter.replace(term, YieldOp(num))
        uses = list(op.result.uses)
        outer_ops: list[Operation] = []
        scale, div = _product(outside, dom, outer_ops)
        result: SSAValue = op.result
        if scale is not None:
            outer_ops.append(arith.MulfOp(result, scale))
            result = outer_ops[-1].results[0]
        if div is not None:
            outer_ops.append(arith.DivfOp(result, div))
            result = outer_ops[-1].results[0]
        rewriter.insert(outer_ops, InsertPoint.after(op))
        for u in uses:
            u.operation.operands = [
                result if i == u.index else v for i, v in enumerate(u.operation.operands)
            ]
            rewriter.notify_op_modified(u.operation)


def _to_f32(v: SSAValue, emit) -> SSAValue:
    if v.type == f32:
        return v
    op = arith.ExtFOp(v, f32) if v.type.bitwidth < 32 else arith.TruncFOp(v, f32)
    emit(op)
    return op.result


def _product(
    leaves: list[tuple[SSAValue, bool]], dom: Domains, sink: list[Operation]
) -> tuple[SSAValue | None, SSAValue | None]:
    """(numerator, denominator) products in f32 of the leaves, appending the ops to `sink`.

    Leaves whose domains nest are multiplied together first (the A-side and B-side operands
    of a contraction stay apart until the last multiply)."""
    emit = sink.append
    groups: list[tuple[int, SSAValue]] = []
    dens: list[SSAValue] = []
    for v, is_div in leaves:
        x = _to_f32(v, emit)
        if is_div:
            dens.append(x)
            continue
        m = dom.mask(v)
        for i, (gm, gv) in enumerate(groups):
            if gm & m == m or gm & m == gm:
                mul = arith.MulfOp(gv, x)
                emit(mul)
                groups[i] = (gm | m, mul.result)
                break
        else:
            groups.append((m, x))
    return _chain([g for _, g in groups], emit), _chain(dens, emit)


def _chain(values: list[SSAValue], emit) -> SSAValue | None:
    acc: SSAValue | None = None
    for v in values:
        if acc is None:
            acc = v
        else:
            mul = arith.MulfOp(acc, v)
            emit(mul)
            acc = mul.result
    return acc


@dataclass
class MergeReductionAxes(RewritePattern):
    """Reduction axes of equal extent whose reductions never nest share one name, unless one is
    around a nested reduction and the other inside one (see _nesting); unused axes go."""

    state: FuseState

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        if op in self.state.axes_clean:
            return
        self._merge(op, rewriter)
        self.state.axes_clean.add(op)

    def _merge(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        reduces = [r for r in op.block.walk() if isinstance(r, ReduceOp)]
        axis_ops = [a for a in op.block.walk() if isinstance(a, AxisOp)]
        used = {a.axis_name for a in axis_ops} | {x for r in reduces for x in r.axis_names}
        axes = [(n, e) for n, e in op.axes.items() if n in used]
        changed = len(axes) != len(op.axis_names)
        # an axis is reduction-only when every loop.axis of it sits inside a reduce over it
        red_only = {x for r in reduces for x in r.axis_names}
        for a in axis_ops:
            if a.axis_name not in reduced_around(a):
                red_only.discard(a.axis_name)
        by_axis: dict[str, list[ReduceOp]] = {}
        for r in reduces:
            for x in r.axis_names:
                by_axis.setdefault(x, []).append(r)
        names = [n for n, _ in axes]
        extent = dict(axes)
        merge: dict[str, str] = {}
        nests = _nesting(reduces)

        def role(x: str) -> tuple[bool, bool]:  # (around a nested reduction, inside one)
            return any(o == x for o, _ in nests), any(i == x for _, i in nests)

        # first axes of the same role, then any two that do not cross (a row statistic's axis
        # taking an inner axis' name first: RMSNorm over the head dim with the head dim)
        for same_role in (True, False):
            for i, a in enumerate(names):
                if a not in red_only or a in merge:
                    continue
                ra = role(a)
                cands = [b for b in names[:i] if b not in merge and b in red_only and extent[b] == extent[a]]
                if not same_role and ra == (False, False):
                    cands.sort(key=lambda b: not role(b)[1])
                for b in cands:
                    rb = role(b)
                    if (same_role and ra != rb) or (ra[0] and rb[1]) or (ra[1] and rb[0]):
                        continue
                    if _compatible(by_axis.get(a, []), by_axis.get(b, [])):
                        merge[a] = b
                        nests = {(b if x == a else x, b if y == a else y) for x, y in nests}
                        by_axis.setdefault(b, []).extend(by_axis.pop(a, []))
                        break
        # a suffix left by fresh naming: `k_1` becomes `k` when no axis is named `k`
        kept = [n for n in names if n not in merge]
        relabel: dict[str, str] = {}
        for a in kept:
            base = re.sub(r"_\d+$", "", a)
            if a in red_only and base != a and base not in kept and base not in relabel.values():
                relabel[a] = base
        rename = {a: relabel.get(merge.get(a, a), merge.get(a, a)) for a in [*merge, *relabel]}
        if rename:
            for r in reduces:
                r.axes = ArrayAttr([StringAttr(rename.get(x, x)) for x in r.axis_names])
            for a in axis_ops:
                if a.axis_name in rename:
                    a.axis = StringAttr(rename[a.axis_name])
            axes = [(relabel.get(n, n), e) for n, e in axes if n not in merge]
            changed = True
        if changed:
            op.properties["axes"] = AxesAttr.get(axes)
            rewriter.notify_op_modified(op)


def _nesting(reduces: list[ReduceOp]) -> set[tuple[str, str]]:
    """(outer, inner) axis names of every reduction nested in another. An axis around a nested
    reduction never merges with one inside a nested reduction: attention's key and head axes
    both have 128 elements at 128 tokens, and the max (keys around the head-dim dot product)
    and P x V (keys around the head dim, again) have to agree on which name is which."""
    pairs = set()
    for r in reduces:
        for inner in r.body.walk():
            if isinstance(inner, ReduceOp) and inner is not r:
                pairs |= {(x, y) for x in r.axis_names for y in inner.axis_names}
    return pairs


def _compatible(ra: list[ReduceOp], rb: list[ReduceOp]) -> bool:
    for x in ra:
        for y in rb:
            if x is y or x.is_ancestor(y) or y.is_ancestor(x):
                return False
    return True


class DropUnusedInputs(RewritePattern):
    """Inputs without loads go; a tensor passed twice is passed once."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        drop_unused_inputs(op, rewriter)


@dataclass
class CseBody(RewritePattern):
    """Structural common subexpression elimination in a loop body (regions included), and
    removal of unused scalar ops (index division included, which xDSL's DCE keeps)."""

    state: FuseState

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        if op in self.state.clean:
            return
        _cse_block(op.block, {}, rewriter)
        dce_block(op.block, rewriter)
        self.state.clean.add(op)


def dce_block(block: Block, rewriter: PatternRewriter) -> None:
    for op in reversed(list(block.ops)):
        if isinstance(op, StoreOp | YieldOp):
            continue
        if all(not r.uses for r in op.results):
            rewriter.erase(op)
            continue
        for r in op.regions:
            for b in r.blocks:
                dce_block(b, rewriter)


def _is_pure(op: Operation) -> bool:
    return not isinstance(op, StoreOp | YieldOp) and not (
        op.regions and not isinstance(op, ReduceOp)
    )


def _key(op: Operation, local: dict[SSAValue, tuple] | None = None) -> tuple:
    local = {} if local is None else local
    props = tuple(sorted(op.properties.items()))
    operands = tuple(local.get(v, v) for v in op.operands)
    types = tuple(r.type for r in op.results)
    regions = []
    for r in op.regions:
        inner_keys = []
        for b in r.blocks:
            for k, arg in enumerate(b.args):
                local[arg] = ("arg", k)
            for inner in b.ops:
                inner_keys.append(_key(inner, local))
                for k, res in enumerate(inner.results):
                    local[res] = ("local", len(local), k)
        regions.append(tuple(inner_keys))
    return (op.name, props, operands, types, tuple(regions))


def _cse_block(block: Block, table: dict, rewriter: PatternRewriter) -> None:
    for op in list(block.ops):
        for r in op.regions:
            for b in r.blocks:
                _cse_block(b, dict(table), rewriter)
        if not _is_pure(op) or not op.results:
            continue
        try:
            key = _key(op)
        except TypeError:  # an unhashable property
            continue
        prev = table.get(key)
        if prev is not None:
            rewriter.replace(op, [], list(prev.results))
        else:
            table[key] = op


class FoldIndexArith(RewritePattern):
    """Fold index arithmetic in loop bodies using the axes' bounds: `divui`/`remui` by
    constants, `cmpi` decided by bounds, `select` on a constant, affine chains re-canonicalized."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(
            op,
            arith.DivUIOp | arith.RemUIOp | arith.CmpiOp | arith.SelectOp | arith.AddiOp | arith.SubiOp | arith.MuliOp,
        ):
            return
        owner = axes_owner(op)
        if owner is None:
            return
        extents = owner.properties["axes"].as_dict()
        ib = IndexBuilder(
            extents,
            lambda new: rewriter.insert(new, InsertPoint.before(op)),
            lambda name: _axis_before(op, name, rewriter),
            list(extents),
        )
        if isinstance(op, arith.SelectOp):
            c = constant_int(op.cond)
            if c is not None:
                rewriter.replace(op, [], [op.lhs if c else op.rhs])
            return
        if isinstance(op, arith.CmpiOp):
            if op.lhs.type != IndexType():
                return
            pred = CMPI_PREDICATES[op.predicate.value.data]
            known = compare_bounds(
                pred, index_bounds(op.lhs, extents), index_bounds(op.rhs, extents)
            )
            if known is not None:
                const = arith.ConstantOp(IntegerAttr(int(known), IntegerType(1)))
                rewriter.replace(op, const)
            return
        if op.results[0].type != IndexType():
            return
        if isinstance(op, arith.DivUIOp | arith.RemUIOp):
            c = constant_int(op.rhs)
            if c is None:
                return
            form = simplify_divrem_in(isinstance(op, arith.DivUIOp), op.lhs, c, extents)
            if form is not None:
                rewriter.replace(op, [], [ib.of_form(form)])
            return
        form = affine_form(op.results[0])
        if form is None or _tree_size(op.results[0]) <= _canonical_size(form):
            return
        if any(a not in extents for a in form.coeffs):
            return
        rewriter.replace(op, [], [ib.of_form(form)])


def _axis_before(op: Operation, name: str, rewriter: PatternRewriter) -> SSAValue:
    a = AxisOp(name)
    rewriter.insert(a, InsertPoint.before(op))
    return a.result


def _tree_size(v: SSAValue) -> int:
    op = v.owner if isinstance(v, OpResult) else None
    if isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp):
        return 1 + _tree_size(op.lhs) + _tree_size(op.rhs)
    return 0


def _canonical_size(form: AffineForm) -> int:
    n = len(form.coeffs)
    if n == 0:
        return 0
    return sum(1 for c in form.coeffs.values() if c != 1) + (n - 1) + (1 if form.constant else 0)


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


def name_loops(f: func.FuncOp, state: FuseState) -> None:
    """Name each loop after its origin labels, unique in the function."""
    seen: dict[str, int] = {}
    for op in f.body.block.ops:
        if not isinstance(op, FusedOp):
            continue
        base = loop_name(state.labels_of(op)) if FUSED_FROM in op.attributes else _base(op)
        n = seen.get(base, 0)
        seen[base] = n + 1
        op.sym_name = StringAttr(base if n == 0 else f"{base}_{n}")
        if FUSED_FROM in op.attributes:
            op.attributes[ORIGIN] = StringAttr(base)


def _base(op: FusedOp) -> str:
    o = op.attributes.get(ORIGIN)
    return o.data if isinstance(o, StringAttr) else op.sym_name.data


@dataclass(frozen=True)
class LoopFusePass(ModulePass):
    """Fuse producer loops into consumer loops (see the module docstring)."""

    name = "loop-fuse"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        state = FuseState(limit=short_limit(op))
        cleanups: list[RewritePattern] = [
            FoldIndexArith(),
            HoistInvariantOps(),
            FactorOutOfSum(),
            DropUnusedInputs(),
            MergeReductionAxes(state),
            CseBody(state),
        ]
        for extra in (
            [InlineProducer(state)],
            [InlineProducer(state, views=True), MergeSplitSiblings(state)],
        ):
            PatternRewriteWalker(
                GreedyRewritePatternApplier([*cleanups, *extra]),
                apply_recursively=True,
                walk_regions_first=True,
                listener=state.listener(),
            ).rewrite_module(op)
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                name_loops(f, state)
