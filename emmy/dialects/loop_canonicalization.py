"""The loop dialect's canonicalization patterns: the clean-ups that keep loop bodies small.

Like MLIR's and xDSL's canonicalization, these are local rewrites to a simpler equivalent form,
each rooted at one op and each safe to apply anywhere, in any order, until none applies:

- on `loop.fused` (its `HasCanonicalizationPatternsTrait`): `DropUnusedInputs` (inputs without
  loads go; a tensor passed twice is passed once), `MergeReductionAxes` (reduction axes of equal
  extent whose reductions do not nest get one name; unused axes go) and `CseBody` (structural
  common subexpressions, whole `loop.reduce` regions included, and dead scalar ops);
- on `loop.reduce`: `HoistInvariantOps` (an op that does not depend on the reduced axes moves
  before the reduction) and `FactorOutOfSum` (in a `sum`, factors -- through mulf/extf/truncf,
  and divisors of divf -- that do not depend on the reduced axes move out: exact in real
  arithmetic, but it drops the rounding points the tensor stage had inside the sum, e.g.
  RMSNorm's bf16 normalized value before a matmul, so results then differ from the tensor stage
  at bf16 rounding level);
- dialect-wide (MLIR's dialect-level canonicalization: its root is an `arith` op inside a loop
  body, not a loop op): `FoldIndexArith` (index arithmetic folded with the axes' bounds).

`loop-canonicalize` applies them alone; `loop-fuse` applies them between fusions, so that every
fused body is clean before the next fusion decision looks at it.

Before / after `FactorOutOfSum` (a per-row scale moves out of the sum over k):

    %acc = loop.reduce sum ["k"] : f32 {
      ... %p = arith.mulf %x, %w : f32
      %q = arith.mulf %p, %rstd : f32       // %rstd is defined outside the reduction
      loop.yield %q : f32
    }

    %acc = loop.reduce sum ["k"] : f32 { ... loop.yield %p : f32 }
    %q = arith.mulf %acc, %rstd : f32
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from xdsl.dialects import arith, builtin
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
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriterListener,
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
from emmy.analysis.loops import external_values, reduced_around
from emmy.dialects.loop import AxesAttr, AxisOp, FusedOp, ReduceOp, StoreOp, YieldOp, axes_owner

f32 = Float32Type()


# --------------------------------------------------------------------------------------------
# The pattern sets
# --------------------------------------------------------------------------------------------


@dataclass
class CleanLoops:
    """The loops that `CseBody` and `MergeReductionAxes` processed and that have not changed
    since (so they are not walked again). A pass fills it through `listener()`; the patterns
    work without it (they then run again each time the walker visits a loop)."""

    cse: set[Operation] = field(default_factory=set)
    axes: set[Operation] = field(default_factory=set)

    def touched(self, op: Operation) -> FusedOp | None:
        """A rewrite touched `op`: the loop around it (returned) needs cleaning again."""
        loop: Operation | None = op
        while loop is not None and not isinstance(loop, FusedOp):
            loop = loop.parent_op()
        if loop is not None:
            self.cse.discard(loop)
            self.axes.discard(loop)
        return loop

    def listener(self) -> PatternRewriterListener:
        return PatternRewriterListener(
            operation_insertion_handler=[self.touched],
            operation_removal_handler=[self.touched],
            operation_modification_handler=[self.touched],
        )


def fused_patterns(clean: CleanLoops | None = None) -> tuple[RewritePattern, ...]:
    """The canonicalization patterns rooted at `loop.fused`, in the order they are tried."""
    return (DropUnusedInputs(), MergeReductionAxes(clean), CseBody(clean))


def reduce_patterns() -> tuple[RewritePattern, ...]:
    """The canonicalization patterns rooted at `loop.reduce`, in the order they are tried."""
    return (HoistInvariantOps(), FactorOutOfSum())


def dialect_patterns() -> tuple[RewritePattern, ...]:
    """The dialect-level patterns (rooted at `arith` ops inside loop bodies)."""
    return (FoldIndexArith(),)


def loop_canonicalization_patterns(clean: CleanLoops | None = None) -> list[RewritePattern]:
    """Every canonicalization pattern of the loop dialect, in the order they are tried."""
    return [*dialect_patterns(), *reduce_patterns(), *fused_patterns(clean)]


# --------------------------------------------------------------------------------------------
# Patterns on loop.reduce
# --------------------------------------------------------------------------------------------


class HoistInvariantOps(RewritePattern):
    """Move ops of a `loop.reduce` region that do not depend on its axes before it."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReduceOp, rewriter: PatternRewriter) -> None:
        reduced = set(op.axis_names)
        block = op.body.block
        for inner in list(block.ops):
            if isinstance(inner, YieldOp):
                continue
            if isinstance(inner, AxisOp) and inner.axis_name in reduced:
                continue
            if isinstance(inner, ReduceOp) and _mentions_axes(inner, reduced):
                continue
            # a value `inner` uses is defined inside the reduction when it is defined in its
            # block (an op nested deeper is not visible to `inner`); a hoisted op has left it
            if all(_block_of(v) is not block for v in external_values(inner)):
                inner.detach()
                rewriter.insert(inner, InsertPoint.before(op))


def _block_of(v: SSAValue) -> Block | None:
    """The block that defines `v`."""
    return v.op.parent_block() if isinstance(v, OpResult) else v.block


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


# --------------------------------------------------------------------------------------------
# Patterns on loop.fused
# --------------------------------------------------------------------------------------------


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


@dataclass
class MergeReductionAxes(RewritePattern):
    """Reduction axes of equal extent whose reductions never nest share one name, unless one is
    around a nested reduction and the other inside one (see _nesting); unused axes go."""

    clean: CleanLoops | None = None

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        if self.clean is not None and op in self.clean.axes:
            return
        self._merge(op, rewriter)
        if self.clean is not None:
            self.clean.axes.add(op)

    def _merge(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        reduces: list[ReduceOp] = []
        axis_ops: list[AxisOp] = []
        for inner in op.block.walk():
            if isinstance(inner, ReduceOp):
                reduces.append(inner)
            elif isinstance(inner, AxisOp):
                axis_ops.append(inner)
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

    clean: CleanLoops | None = None

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        if self.clean is not None and op in self.clean.cse:
            return
        _cse_block(op.block, {}, rewriter)
        dce_block(op.block, rewriter)
        if self.clean is not None:
            self.clean.cse.add(op)


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
    props = tuple(sorted(op.properties.items())) if op.properties else ()
    operands = tuple([local.get(v, v) for v in op.operands])
    types = tuple([r.type for r in op.results])
    if not op.regions:
        return (op.name, props, operands, types, ())
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

# --------------------------------------------------------------------------------------------
# Index arithmetic (dialect-wide)
# --------------------------------------------------------------------------------------------


_INDEX_ARITH = (arith.DivUIOp, arith.RemUIOp, arith.CmpiOp, arith.SelectOp, arith.AddiOp, arith.SubiOp, arith.MuliOp)


class FoldIndexArith(RewritePattern):
    """Fold index arithmetic in loop bodies using the axes' bounds: `divui`/`remui` by
    constants, `cmpi` decided by bounds, `select` on a constant, affine chains re-canonicalized."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if type(op) not in _INDEX_ARITH:  # the cheap test first: this pattern sees every op
            return
        if isinstance(op, arith.SelectOp):
            if axes_owner(op) is None:
                return
            c = constant_int(op.cond)
            if c is not None:
                rewriter.replace(op, [], [op.lhs if c else op.rhs])
            return
        index = IndexType()
        if isinstance(op, arith.CmpiOp):
            if op.lhs.type != index:
                return
            owner = axes_owner(op)
            if owner is None:
                return
            extents = owner.properties["axes"].as_dict()
            pred = CMPI_PREDICATES[op.predicate.value.data]
            known = compare_bounds(
                pred, index_bounds(op.lhs, extents), index_bounds(op.rhs, extents)
            )
            if known is not None:
                const = arith.ConstantOp(IntegerAttr(int(known), IntegerType(1)))
                rewriter.replace(op, const)
            return
        if op.results[0].type != index:
            return
        if isinstance(op, arith.DivUIOp | arith.RemUIOp):
            c = constant_int(op.rhs)
            if c is None:
                return
            owner = axes_owner(op)
            if owner is None:
                return
            extents = owner.properties["axes"].as_dict()
            form = simplify_divrem_in(isinstance(op, arith.DivUIOp), op.lhs, c, extents)
            if form is not None:
                rewriter.replace(op, [], [_index_builder(op, extents, rewriter).of_form(form)])
            return
        owner = axes_owner(op)
        if owner is None:
            return
        form = affine_form(op.results[0])
        if form is None or _tree_size(op.results[0]) <= _canonical_size(form):
            return
        extents = owner.properties["axes"].as_dict()
        if any(a not in extents for a in form.coeffs):
            return
        rewriter.replace(op, [], [_index_builder(op, extents, rewriter).of_form(form)])


def _index_builder(op: Operation, extents: dict[str, int], rewriter: PatternRewriter) -> IndexBuilder:
    """Builds index expressions just before `op`."""
    return IndexBuilder(
        extents,
        lambda new: rewriter.insert(new, InsertPoint.before(op)),
        lambda name: _axis_before(op, name, rewriter),
        list(extents),
    )


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

