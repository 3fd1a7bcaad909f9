"""Facts about `loop.fused` ops and their bodies: what a loop computes (reductions, layout only),
who produces and uses it, how long its reductions are, whether it contracts against weights.

`loop-fuse` decides by these; the loop canonicalization and `loop-hoist-params` use a few.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from xdsl.dialects import arith, func
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from emmy.analysis.body import Domains, store_plan
from emmy.analysis.indexing import load_axes
from emmy.dialects.loop import AxisOp, FusedOp, LoadOp, ReduceOp, StoreOp, YieldOp, axes_owner

SHORT_REDUCTION = 256  # the longest reduction cost (product of reduced extents) counted as short



def external_values(op: Operation) -> list[SSAValue]:
    """Values an op (with its regions) uses that are defined outside it."""
    out: list[SSAValue] = list(op.operands)
    if op.regions:
        # the walk meets a value's definition before its uses: `inside` holds the ops met so far
        inside: set[Operation] = set()
        for inner in op.walk():
            inside.add(inner)
            if inner is op:
                continue
            for v in inner.operands:
                owner = v.owner if isinstance(v, OpResult) else v.block.parent_op()
                if owner is not None and owner not in inside:
                    out.append(v)
    return out


def reduced_around(op: Operation) -> set[str]:
    out: set[str] = set()
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FusedOp):
        if isinstance(parent, ReduceOp):
            out.update(parent.axis_names)
        parent = parent.parent_op()
    return out


def has_reduce(loop: FusedOp) -> bool:
    return any(isinstance(op, ReduceOp) for op in loop.block.walk())


def has_nested_reduce(loop: FusedOp) -> bool:
    """Whether a reduction of the loop holds another inside it (a softmax statistic or P·V over
    the keys, each recomputing the scores' sum over the head dimension)."""
    return any(
        isinstance(op, ReduceOp) and any(isinstance(inner, ReduceOp) for inner in op.body.walk() if inner is not op)
        for op in loop.block.walk()
    )


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


def stores_of(loop: FusedOp, n: int) -> list[StoreOp]:
    return [op for op in loop.block.ops if isinstance(op, StoreOp) and op.output_index == n]


def plain_stores(loop: FusedOp) -> bool:
    """Whether every store indexes its result by distinct axes (or constant 0 on a size-1 dim)."""
    return all(store_plan(op) is not None for op in loop.block.ops if isinstance(op, StoreOp))


def one_plain_store_each(loop: FusedOp) -> bool:
    """Whether each result is written by exactly one store, of the plain form."""
    return plain_stores(loop) and all(len(stores_of(loop, n)) == 1 for n in range(len(loop.results)))


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
    longest reduction over a model parameter (a projection's) when that is smaller, so that a
    small model's projections are not 'short' while its head-dim reductions are: small models
    fuse like full-size ones. Reductions over no parameter do not lower it: attention alone,
    whose longest sums run over its keys, fuses like a full-size model's attention at every
    length (at 256 tokens its 128-long scores were 'long' next to the 256 keys and got a kernel
    of their own: 2.5x cuDNN's time on the H200 instead of a flash kernel)."""
    longest = 0
    for loop in module.walk():
        if not isinstance(loop, FusedOp):
            continue
        is_weight = _weight_loads(loop)
        if is_weight is None:
            continue
        for r in loop.walk():
            if isinstance(r, ReduceOp) and axes_owner(r) is loop and any(
                isinstance(o, LoadOp) and is_weight(o) for o in r.body.walk()
            ):
                cost = 1
                for a in r.axis_names:
                    cost *= loop.extents[a]
                longest = max(longest, cost)
    return SHORT_REDUCTION if longest == 0 else max(1, min(SHORT_REDUCTION, (longest - 1) // 2))


def _weight_loads(loop: FusedOp) -> Callable[[LoadOp], bool] | None:
    """Whether a load of `loop` reads one of its model-parameter inputs (weight_derived), as a
    test; None when the loop has no such input."""
    weights = {i for i, v in enumerate(loop.inputs) if weight_derived(v)}
    if not weights:
        return None

    def is_weight(load: LoadOp) -> bool:
        arg = load.operands[0]
        return isinstance(arg, BlockArgument) and arg.block is loop.block and arg.index in weights

    return is_weight


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
    alone, and whose bias q_proj.bias[h * D + d] depends on the head h that Q and K share).
    A weight load whose index is not analyzable counts as a contraction (the safe answer for a
    producer: not recomputed)."""
    return _contracts_weights(loop, unknown=True)


def provably_reduces_weights(loop: FusedOp) -> bool:
    """`reduces_weights` where a weight load of unanalyzable index does not count (rotary
    embedding's `q_norm.weight[(d + 64) % 128]` inside attention): the safe answer for a
    consumer, which is then kept from absorbing short reductions it would recompute per output
    column only when it surely is a projection."""
    return _contracts_weights(loop, unknown=False)


def _contracts_weights(loop: FusedOp, unknown: bool) -> bool:
    is_weight = _weight_loads(loop)
    if is_weight is None:
        return False
    # (reduced axes around it, axes it reads, whether it reads a weight) of every load, once.
    # An index that is not affine reads the axes its value depends on: rotate_half's partner
    # inside a partial rotary ((d + 8) % 16, a bias read there is no projection, and the scores
    # fuse into attention), gate and up weights concatenated (W[n % 8192, k] is a projection).
    dom = Domains(loop)

    def axes_of(load: LoadOp) -> frozenset[str] | None:
        axes = load_axes(load)
        if axes is None:
            axes = frozenset().union(*(dom.of(i) for i in load.indices))
        return axes

    loads = [(reduced_around(op), axes_of(op), is_weight(op)) for op in loop.walk() if isinstance(op, LoadOp)]
    for reduced, axes, weight in loads:
        if not reduced or not weight:
            continue
        if axes is None:
            if unknown:
                return True
            continue
        shared: set[str] = set()
        for other_reduced, other_axes, other_weight in loads:
            if other_reduced & reduced and not other_weight:
                shared |= other_axes or set()
        if axes & reduced and axes - reduced - shared:
            return True
    return False


def loads_of(consumer: FusedOp, value: SSAValue) -> list[LoadOp]:
    """The consumer's loads of a tensor it takes as an input."""
    out = []
    for i, v in enumerate(consumer.inputs):
        if v == value:
            arg = consumer.block.args[i]
            out += [u.operation for u in arg.uses if isinstance(u.operation, LoadOp)]
    return out
