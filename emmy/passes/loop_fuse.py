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
  so holds two contractions), but a projection is not inlined into a consumer that already
  contracts against weights when the consumer would read it outside its reductions (two contractions
  side by side: Phi-2's attention output projection and fc2 added to the residual in one
  expression). A layout-only consumer that feeds other loops does not absorb a
  reducing producer (it is dissolved into its own consumers instead);
- (c) a producer whose reductions are all short (product of reduced extents along any nesting
  <= 256) and read no model parameter is inlined into any consumer, even one reducing over its parallel axes (QK^T over
  the head dim into softmax and the PV contraction; q/k norms): attention becomes one loop.
  Not into a consumer that contracts against weights (`provably_reduces_weights`): there the short
  reductions would be evaluated again for every output column (at one token, the whole
  attention inside o_proj's sum over heads x head dim: 1024 x 2048 evaluations of three
  128-long sums, 14 ms on an H200 instead of a few microseconds). Such a producer goes by rule
  (b), where every reduction it holds counts as long. Nor is a producer whose reductions nest (a
  softmax statistic or P·V, each recomputing the scores) inlined into a layout-only loop that
  feeds others, as rule (b) would not for long ones: at two tokens the whole attention was
  short and dissolved into the transposes around it, leaving a reduction kernel that is not
  flash attention (1.8 ms on an H200 against the layer's 61 us under torch.compile);
- (e) the layout-only loops that only feed `func.return` absorb the reducing producer they
  all read (slices of the q/k/v matmul in the running example), and are then merged into one
  loop with several results (`MergeSplitSiblings`).
Rules (a)-(c) share one limit: a loop whose value is more than a tensor times row statistics and
weights (a LayerNorm's output, GELU, a residual after a norm) is not inlined as the A of a
contraction against weights with at least COMPUTED_A_MIN_COLUMNS output columns
(`_computed_operand`): it is written once instead of computed again for every column tile.
Between fusions the loop dialect's canonicalization patterns keep the bodies small
(`emmy/dialects/loop_canonicalization.py`, runnable alone as `loop-canonicalize`): index
arithmetic folding, hoisting out of reductions, rule (d) (`FactorOutOfSum`: factors that do not
depend on the reduced axes move out of a sum), reduction axes merged, CSE, unused inputs dropped.
The facts the rules decide by are in `emmy/analysis/loops.py`.

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
from math import prod
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue
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

from emmy.analysis.body import Domains, store_plan
from emmy.analysis.loops import (
    SHORT_REDUCTION,
    all_short,
    backward_slice,
    feeds_only_return,
    has_nested_reduce,
    has_reduce,
    heavy_reduce_domains,
    is_elementwise,
    is_layout_only,
    loads_of,
    one_plain_store_each,
    plain_stores,
    producers,
    provably_reduces_weights,
    reduced_around,
    reduces_weights,
    short_limit,
    stores_of,
    users,
    weight_derived,
)
from emmy.dialects.loop import AxesAttr, AxisOp, FusedOp, LoadOp, ReduceOp, StoreOp, YieldOp
from emmy.dialects.loop_canonicalization import CleanLoops, drop_unused_inputs, loop_canonicalization_patterns
from emmy.dialects.tensor import ORIGIN

FUSED_FROM = "emmy.fused_from"
FUSION = "emmy.fusion"

MODEL_LABELS = ("rms_norm", "layer_norm", "attention", "silu", "gelu", "rope", "residual", "embedding", "softmax")
ATTENTION_ABSORBS = ("rope", "rms_norm", "layer_norm", "q_norm", "k_norm")


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
    clean: CleanLoops = field(default_factory=CleanLoops)  # loops the clean-ups need not revisit

    # facts about loops, valid while their version is unchanged
    versions: dict[Operation, int] = field(default_factory=dict)
    memo: dict[tuple, object] = field(default_factory=dict)
    limit: int = SHORT_REDUCTION  # the longest reduction cost counted as short

    def all_short(self, loop: FusedOp) -> bool:
        return all_short(loop, self.limit)

    def keeps_parallel(self, producer: FusedOp, consumer: FusedOp) -> bool:
        # A contraction against weights counts as long whatever its extent (see reduces_weights);
        # so does any reduction read inside a consumer's contraction against weights, which would
        # evaluate it again for every output column (rule (c)'s exception).
        weights = self.cached(reduces_weights, producer) or self.cached(provably_reduces_weights, consumer)
        return _keeps_parallel(producer, consumer, 0 if weights else self.limit)

    def cached(self, fn, *loops: Operation):
        """`fn(*loops)`, remembered until one of the loops changes."""
        key = (fn, *((lp, self.versions.get(lp, 0)) for lp in loops))
        if key not in self.memo:
            self.memo[key] = fn(*loops)
        return self.memo[key]

    def touched(self, op: Operation) -> None:
        """A rewrite touched `op`: its loop needs cleaning again, its facts are stale."""
        loop = self.clean.touched(op)
        if loop is not None:
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
    if state.cached(has_reduce, producer) or FUSION in producer.attributes:
        consumer.attributes[FUSION] = StringAttr("fused")
    mine = state.labels_of(consumer)
    if state.cached(is_layout_only, producer):
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
    consumer_was_layout = state.cached(is_layout_only, consumer)
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


# --------------------------------------------------------------------------------------------
# Fusion patterns
# --------------------------------------------------------------------------------------------


def _can_inline(producer: FusedOp, consumer: FusedOp, st: FuseState) -> bool:
    if producer is consumer or producer.parent_block() is not consumer.parent_block():
        return False
    if not st.cached(one_plain_store_each, producer):
        return False
    if st.cached(_computed_operand, producer, consumer):  # limits rules (a)-(c)
        return False
    if st.cached(is_elementwise, producer):  # rule (a)
        return not is_anchor(producer, st)
    layout_between = (
        st.cached(is_elementwise, consumer)
        and st.cached(is_layout_only, consumer)
        and not feeds_only_return(consumer)
    )
    if (
        st.cached(st.all_short, producer)
        and not st.cached(reduces_weights, producer)
        and not st.cached(provably_reduces_weights, consumer)
        and not (layout_between and st.cached(has_nested_reduce, producer))
    ):  # rule (c)
        return True
    # rule (b): the only user; the consumer keeps the long reductions' results parallel
    if any(u is not consumer for u in users(producer)):
        return False
    if layout_between:
        return False
    if st.cached(_second_contraction, producer, consumer):
        return False
    return st.cached(st.keeps_parallel, producer, consumer)


def _contraction_shapes(loop: FusedOp) -> set[tuple[tuple[int, ...], frozenset[SSAValue]]]:
    """(reduced extents, the activations it reads) of each top-level sum of `loop` that reads
    a weight: two contractions with the same are one A against two weights (the pair the
    contraction kernel computes side by side)."""
    extents = loop.extents
    out = set()
    for r in loop.block.ops:
        if not isinstance(r, ReduceOp):
            continue
        values = {loop.inputs[ld.tensor.index] for ld in r.walk()
                  if isinstance(ld, LoadOp) and isinstance(ld.tensor, BlockArgument)}
        acts = frozenset(v for v in values if not weight_derived(v))
        if acts != values:  # it reads a weight
            out.add((tuple(extents[a] for a in r.axis_names), acts))
    return out


# From this many output columns a computed A is written once rather than computed again for
# every column tile (8 tiles of 128): H200, Phi-2's LayerNorm before its q/k/v/fc1 product
# (17920 columns) 669 -> 136 + 5 us at 1000 tokens, OLMo-2's post-norm residual before gate/up
# (16384) 915 -> 100 + 7 us. Below it the prologue stays (the MLP block's LayerNorm before fc1,
# 176 columns, a fork of its own: fusion = fused or split).
COMPUTED_A_MIN_COLUMNS = 1024


def _computed_operand(producer: FusedOp, consumer: FusedOp) -> bool:
    """Rules (a)-(c)'s limit: a loop whose value is more than a tensor scaled by row or column
    factors is not inlined into a contraction against weights that reads it inside its sum
    (as A). There it would be computed again for every column tile, by the threads that
    stage A: OLMo-2's residual after its post-attention norm (x + norm(o) * w) as gate/up's A
    took 915 us at 1000 tokens against cuBLAS's 100 for the product alone; Phi-2's GELU of fc1
    as fc2's A and its LayerNorm ((x - mean) * rstd * w + b) as the q/k/v/fc1 product's A were
    4x slower than torch.compile; Cohere's silu(gate) * up made down no contraction at all.
    Only from COMPUTED_A_MIN_COLUMNS output columns, where the recomputation outweighs a write
    and a read of A.
    Kept as a loop of its own it is written once and read as plain rows. RMSNorm's
    x * rstd * w is a tensor scaled by a row statistic and a column weight: it still becomes
    the projection's prologue (rstd leaves the sum, w folds into the weights)."""
    if not provably_reduces_weights(consumer) or all(weight_derived(r) for r in producer.results):
        return False  # weights concatenated or folded are read as they are
    cdom = Domains(consumer)

    def along_the_sum(ld: LoadOp) -> bool:  # read at indices that move with the sum (not a row statistic)
        return bool(set().union(*(cdom.of(i) for i in ld.indices)) & reduced_around(ld))

    sites = [ld for r in producer.results for ld in loads_of(consumer, r) if along_the_sum(ld)]
    if not sites or max(_columns(consumer, ld, cdom) for ld in sites) < COMPUTED_A_MIN_COLUMNS:
        return False
    dom = Domains(producer)
    for st in producer.block.ops:
        if isinstance(st, StoreOp):
            whole = 0  # the axes the stored tensor spans (not the producer's own sums)
            for i in st.indices:
                whole |= dom.mask(i)
            if not _scaled_load(st.value, dom, whole, producer):
                return True
    return False


def _columns(consumer: FusedOp, load: LoadOp, cdom: Domains) -> int:
    """The output elements per row of A: the extents of the consumer's stored axes that `load`
    (A's read) does not depend on (a contraction's n)."""
    read = set().union(*(cdom.of(i) for i in load.indices))
    stored: set[str] = set()
    for st in consumer.block.ops:
        if isinstance(st, StoreOp):
            stored |= set().union(*(cdom.of(i) for i in st.indices))
    return prod(consumer.extents[a] for a in stored - read)


def _scaled_load(v: SSAValue, dom: Domains, whole: int, loop: FusedOp) -> bool:
    """Whether `v` is a load of the whole domain, cast and multiplied by weights or by values
    that vary along fewer axes (a row statistic, a constant)."""

    def scale(x: SSAValue) -> bool:
        while isinstance(x.owner, (arith.ExtFOp, arith.TruncFOp)):
            x = x.owner.operands[0]
        o = x.owner
        if isinstance(o, LoadOp) and isinstance(o.tensor, BlockArgument):
            return weight_derived(loop.inputs[o.tensor.index])  # a norm's weight: folded into B
        return dom.mask(x) != whole

    while True:
        o = v.owner
        if isinstance(o, LoadOp):
            return dom.mask(v) == whole
        if isinstance(o, (arith.ExtFOp, arith.TruncFOp)):
            v = o.operands[0]
        elif isinstance(o, arith.MulfOp):
            full = [x for x in o.operands if not scale(x)]
            if len(full) != 1:
                return False
            v = full[0]
        else:
            return False


def _second_contraction(producer: FusedOp, consumer: FusedOp) -> bool:
    """Rule (b)'s limit: a kernel holds one contraction against weights and its epilogue. A
    projection whose long reductions the consumer would read outside any reduction of its own
    (as an epilogue) is not inlined into a consumer that already contracts against weights:
    Phi-2 adds the attention's output projection and the MLP's fc2, two contractions over
    different rows and k, to the residual in one expression, and one loop holding both is no
    contraction kernel.
    (Gate and up are one merged contraction read at two column offsets; a row prologue such as
    RMSNorm's sum of squares is read inside the consumer's contraction.)"""
    if not (reduces_weights(producer) and provably_reduces_weights(consumer)):
        return False  # attention's softmax statistics go into its P.V as they always did
    if _contraction_shapes(producer) & _contraction_shapes(consumer):
        return False  # gate and up apart (siblings not merged): one A, one k, two weights
    pdom = Domains(producer)
    for n, result in enumerate(producer.results):
        sites = loads_of(consumer, result)
        # a contraction against weights counts as long whatever its extent (FuseState.keeps_parallel)
        if sites and heavy_reduce_domains(producer, n, pdom, 0) and any(not reduced_around(ld) for ld in sites):
            return True
    return False


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
            if self.views and _absorbs_returned_views(p, op) and self.state.cached(plain_stores, p):
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
        # the loop dialect's canonicalization, between fusions: each fused body is clean before
        # the next decision looks at it
        cleanups = loop_canonicalization_patterns(state.clean)
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
