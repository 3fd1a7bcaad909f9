"""`convert-tensor-to-loop`: every tensor op becomes one `loop.fused`.

Input invariant: a module at the tensor stage (`emmy/dialects/tensor.py`), ops labelled with
`emmy.origin`.

Output IR: each function holds only `loop.fused` ops and `func.return`; function arguments feed
loops directly. One loop per tensor op:
- elementwise ops and casts: one axis per result dim, loads, the scalar op, a store;
- `tensor.sum` / `tensor.reduce_max`: the kept dims are axes, the reduced dims reduction axes
  (`k`, or `k0`, `k1`, ...) of a `loop.reduce`, computed in f32 and rounded once;
- `tensor.matmul`: axes `b0.., m, n, k`: a `loop.reduce sum ["k"]` of `extf(a) * extf(b)` in
  f32, then `truncf` to the result dtype;
- layout ops (broadcast, transpose, reshape, slice): copies whose load indices carry the index
  arithmetic; `tensor.concat`: a select chain between loads; `tensor.splat`: a constant;
  `tensor.causal_mask`: a select on an index comparison; `tensor.gather_rows`: a load of the id,
  `index_cast`, and a load of the table row.
Result dims of extent 1 get no axis (they are indexed by constant 0).

Invariants: loops are named after their op's `emmy.origin` (`rms_norm`, `rms_norm_1`, ...;
unique in the function) and keep `emmy.origin`. Stores index each result dim by a distinct
`loop.axis` (or constant 0 for an extent-1 dim). Low-precision (bf16/f16) arithmetic rounds
exactly where the tensor op rounds: each elementwise op computes in its element type (the loop
evaluator computes in f32 and rounds), composite ops (sigmoid) compute in f32 and round once.
Exponentials and divisions whose results reach memory only rounded to bf16/f16 (their own
type, or f32 math such as SiLU's sigmoid whose every use ends in a cast to bf16) carry
`fastmath<afn>` (approximate functions allowed): an approximation off by a few f32 ulps is far
inside the rounding that follows (a bf16 ulp is 2^16 f32 ulps), so later stages may use the
hardware's fast versions (CUDA: `__expf`, `__fdividef`). Results kept in f32 or f64 stay exact.

Before / after:

    %s = tensor.sum %sq {axes = array<i64: 1>, emmy.origin = "rms_norm"} : tensor<32x1024xf32> -> tensor<32xf32>

    %s = loop.fused @rms_norm axes [d0 = 32, k = 1024] ins(%sq : tensor<32x1024xf32>) -> tensor<32xf32> attributes {emmy.origin = "rms_norm"} {
    ^bb0(%a: tensor<32x1024xf32>):
      %d0 = loop.axis "d0" : index
      %r = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %v = loop.load %a[%d0, %k] : tensor<32x1024xf32> -> f32
        loop.yield %v : f32
      }
      loop.store %r, 0 [%d0] : f32
      loop.yield
    }
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.analysis.indexing import IndexBuilder
from emmy.diagnostics import EmmyError
from emmy.dialects import loop as L
from emmy.dialects import tensor as T
from emmy.dialects.tensor import ORIGIN
from emmy.passes.stages import require_input_stage

f32 = Float32Type()


# --------------------------------------------------------------------------------------------
# Building one loop
# --------------------------------------------------------------------------------------------


def _shape(v: SSAValue) -> tuple[int, ...]:
    assert isinstance(v.type, TensorType)
    return tuple(v.type.get_shape())


def _elem(v: SSAValue | Attribute) -> Attribute:
    t = v.type if isinstance(v, SSAValue) else v
    assert isinstance(t, TensorType)
    return t.element_type


APPROX = arith.FastMathFlagsAttr([arith.FastMathFlag.APPROX_FUNC])


def _approx_if(rounded_low: bool) -> arith.FastMathFlagsAttr | None:
    """`fastmath<afn>` for math whose result is rounded to bf16/f16 (see the module docstring)."""
    return APPROX if rounded_low else None


def rounded_to_low(f: func.FuncOp) -> set[Operation]:
    """The elementwise tensor ops of `f` whose results reach memory only rounded to bf16/f16:
    low-precision results, and f32 results used only by casts to bf16/f16 and by such ops."""
    out: set[Operation] = set()
    for op in reversed(list(f.body.block.ops)):
        if not isinstance(op, T.BinaryOp | T.UnaryOp):
            continue
        r = op.results[0]
        uses = [u.operation for u in r.uses]
        if _is_low(_elem(r)) or (uses and all(_rounds(u, out) for u in uses)):
            out.add(op)
    return out


def _rounds(user: Operation, rounded: set[Operation]) -> bool:
    if isinstance(user, T.CastOp):
        return _is_low(_elem(user.results[0]))
    return user in rounded


def _is_low(t: Attribute) -> bool:
    return isinstance(t, BFloat16Type | Float16Type)


class LoopBuilder:
    """Accumulates the axes, inputs and body of one `loop.fused` being built."""

    def __init__(self) -> None:
        self.axes: list[tuple[str, int]] = []
        self.inputs: list[SSAValue] = []
        self.block = Block()
        self._args: dict[SSAValue, SSAValue] = {}
        self._blocks: list[tuple[Block, dict[str, SSAValue], IndexBuilder]] = []
        self._push(self.block, {}, {})

    # ---------------------------------------------------------------- scopes
    def _push(self, block: Block, axis_values: dict[str, SSAValue], forms: dict) -> None:
        def axis_value(name: str) -> SSAValue:
            if name not in axis_values:
                axis_values[name] = self.emit(L.AxisOp(name)).result
            return axis_values[name]

        ib = IndexBuilder(
            self.extents, self.emit, axis_value, [a for a, _ in self.axes], forms
        )
        self._blocks.append((block, axis_values, ib))

    @property
    def extents(self) -> dict[str, int]:
        return dict(self.axes)

    @property
    def index(self) -> IndexBuilder:
        ib = self._blocks[-1][2]
        ib.extents = self.extents
        ib.order = {a: i for i, (a, _) in enumerate(self.axes)}
        return ib

    def emit(self, op: Operation) -> Operation:
        self._blocks[-1][0].add_op(op)
        return op

    def value(self, op: Operation) -> SSAValue:
        return self.emit(op).results[0]

    # ---------------------------------------------------------------- axes and inputs
    def add_axis(self, name: str, extent: int) -> str:
        self.axes.append((name, extent))
        return name

    def axis(self, name: str) -> SSAValue:
        return self.index.axis_value(name)

    def arg(self, tensor: SSAValue) -> SSAValue:
        if tensor not in self._args:
            self.inputs.append(tensor)
            self._args[tensor] = self.block.insert_arg(tensor.type, len(self.block.args))
        return self._args[tensor]

    def load(self, tensor: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        return self.value(L.LoadOp(self.arg(tensor), list(indices)))

    # ---------------------------------------------------------------- result dims
    def result_axes(self, shape: Sequence[int], names: Sequence[str] | None = None) -> list[str | None]:
        """One axis per result dim (None for extent-1 dims), named `d<i>` unless given."""
        out: list[str | None] = []
        for i, n in enumerate(shape):
            out.append(None if n == 1 else self.add_axis(names[i] if names else f"d{i}", n))
        return out

    def indices(self, axes: Sequence[str | None]) -> list[SSAValue]:
        return [self.index.const(0) if a is None else self.axis(a) for a in axes]

    # ---------------------------------------------------------------- reductions
    def reduce(
        self, kind: str, axes: Sequence[str], result_type: Attribute, body: Callable[[], SSAValue]
    ) -> SSAValue:
        outer_block, outer_axes, outer_ib = self._blocks[-1]
        block = Block()
        self._push(block, dict(outer_axes), dict(outer_ib.forms))
        y = body()
        self.emit(L.YieldOp(y))
        self._blocks.pop()
        return self.value(L.ReduceOp(kind, axes, result_type, Region(block)))

    # ---------------------------------------------------------------- scalar helpers
    def convert(self, v: SSAValue, to: Attribute) -> SSAValue:
        """Scalar dtype conversion (float/int), rounding to nearest even when narrowing."""
        src = v.type
        if src == to:
            return v
        if isinstance(src, AnyFloat) and isinstance(to, AnyFloat):
            if src.bitwidth < to.bitwidth:
                return self.value(arith.ExtFOp(v, to))
            if src.bitwidth > to.bitwidth:
                return self.value(arith.TruncFOp(v, to))
            return self.convert(self.convert(v, f32), to)  # bf16 <-> f16
        if isinstance(src, IntegerType) and isinstance(to, AnyFloat):
            if src.width.data == 1:
                return self.value(arith.UIToFPOp(v, to))
            return self.value(arith.SIToFPOp(v, to))
        if isinstance(src, AnyFloat) and isinstance(to, IntegerType):
            return self.value(arith.FPToSIOp(v, to))
        if isinstance(src, IntegerType) and isinstance(to, IntegerType):
            if src.width.data < to.width.data:
                op = arith.ExtUIOp(v, to) if src.width.data == 1 else arith.ExtSIOp(v, to)
                return self.value(op)
            return self.value(arith.TruncIOp(v, to))
        raise EmmyError(f"convert-tensor-to-loop: cannot convert {src} to {to}")

    def constant(self, value: float, t: Attribute) -> SSAValue:
        if isinstance(t, AnyFloat):
            return self.value(arith.ConstantOp(FloatAttr(value, t)))
        if isinstance(t, IntegerType | IndexType):
            return self.value(arith.ConstantOp(IntegerAttr(int(value), t)))
        raise EmmyError(f"convert-tensor-to-loop: no constant of type {t}")

    def finish(self, source: Operation, results: Sequence[SSAValue], stores: Sequence[tuple[SSAValue, list[SSAValue]]]) -> L.FusedOp:
        for n, (v, idx) in enumerate(stores):
            self.emit(L.StoreOp(v, n, idx))
        self.emit(L.YieldOp())
        _drop_dead(self.block)
        origin = source.attributes.get(ORIGIN)
        label = origin.data if isinstance(origin, StringAttr) else source.name.split(".")[-1]
        attrs = {ORIGIN: StringAttr(label)}
        return L.FusedOp(
            label, self.axes, self.inputs, [r.type for r in results], Region(self.block), attrs
        )


def _drop_dead(block: Block) -> None:
    """Remove the scalar ops no store needs (index temporaries, unselected loads)."""
    for op in reversed(list(block.ops)):
        if isinstance(op, L.StoreOp | L.YieldOp):
            continue
        if all(not r.uses for r in op.results):
            op.detach()
            op.erase()
            continue
        for r in op.regions:
            for b in r.blocks:
                _drop_dead(b)


# --------------------------------------------------------------------------------------------
# Patterns
# --------------------------------------------------------------------------------------------


class ToLoopPattern(RewritePattern):
    """Base: `build(op, builder)` returns the scalar values to store for each result."""

    def build(self, op: Operation, b: LoopBuilder, out: list[str | None]) -> SSAValue:
        raise NotImplementedError

    def result_names(self, op: Operation) -> list[str] | None:
        return None

    def convert(self, op: Operation, rewriter: PatternRewriter) -> None:
        b = LoopBuilder()
        result = op.results[0]
        out = b.result_axes(_shape(result), self.result_names(op))
        b.indices(out)  # the result's axes first, at the top of the body
        v = self.build(op, b, out)
        fused = b.finish(op, [result], [(v, b.indices(out))])
        rewriter.replace(op, fused)


def _float_elem(op: Operation) -> Attribute:
    t = _elem(op.results[0])
    if not isinstance(t, AnyFloat):
        raise EmmyError(
            f"convert-tensor-to-loop: {op.name} on element type {t} is not supported (floats only)"
        )
    return t


_BINARY: dict[type[Operation], type[Operation]] = {
    T.AddOp: arith.AddfOp,
    T.SubOp: arith.SubfOp,
    T.MulOp: arith.MulfOp,
    T.DivOp: arith.DivfOp,
    T.MaxOp: arith.MaximumfOp,
    T.MinOp: arith.MinimumfOp,
}

_UNARY: dict[type[Operation], type[Operation]] = {
    T.ExpOp: math.ExpOp,
    T.RsqrtOp: math.RsqrtOp,
    T.SqrtOp: math.SqrtOp,
    T.TanhOp: math.TanhOp,
    T.ErfOp: math.ErfOp,
}


class BinaryToLoop(ToLoopPattern):
    """`tensor.add/sub/mul/div/max/min` -> loads, `arith.<op>f`, store. `rounded`: the ops
    whose results reach memory only rounded to bf16/f16 (their divisions may approximate)."""

    def __init__(self, rounded: Set[Operation] = frozenset()):
        self.rounded = rounded

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.BinaryOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        _float_elem(op)
        idx = b.indices(out)
        x = b.load(op.operands[0], idx)
        y = x if op.operands[1] == op.operands[0] else b.load(op.operands[1], idx)
        flags = _approx_if(op in self.rounded) if isinstance(op, T.DivOp) else None
        return b.value(_BINARY[type(op)](x, y, flags=flags))


class UnaryToLoop(ToLoopPattern):
    """`tensor.neg/exp/rsqrt/sqrt/tanh/erf/sigmoid/recip` -> load, scalar op(s), store.
    `rounded`: as for BinaryToLoop (their exponentials and divisions may approximate)."""

    def __init__(self, rounded: Set[Operation] = frozenset()):
        self.rounded = rounded

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.UnaryOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        t = _float_elem(op)
        x = b.load(op.operands[0], b.indices(out))
        if isinstance(op, T.NegOp):
            return b.value(arith.NegfOp(x))
        approx = _approx_if(op in self.rounded)
        if isinstance(op, T.RecipOp):
            return b.value(arith.DivfOp(b.constant(1.0, t), x, flags=approx))
        if isinstance(op, T.SigmoidOp):
            # 1 / (1 + exp(-x)), computed in f32 and rounded once like the tensor op
            xf = b.convert(x, f32) if _is_low(t) else x
            ct = xf.type
            e = b.value(math.ExpOp(b.value(arith.NegfOp(xf)), fastmath=approx))
            one = b.constant(1.0, ct)
            d = b.value(arith.AddfOp(one, e))
            s = b.value(arith.DivfOp(one, d, flags=approx))
            return b.convert(s, t)
        return b.value(_UNARY[type(op)](x, fastmath=approx if isinstance(op, T.ExpOp) else None))


class CastToLoop(ToLoopPattern):
    """`tensor.cast` -> load, `arith.extf`/`truncf`/..., store."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.CastOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        x = b.load(op.operands[0], b.indices(out))
        return b.convert(x, _elem(op.results[0]))


class SplatToLoop(ToLoopPattern):
    """`tensor.splat` -> a constant stored everywhere."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.SplatOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.SplatOp)
        return b.constant(op.float_value, _elem(op.results[0]))


class ReductionToLoop(ToLoopPattern):
    """`tensor.sum` / `tensor.reduce_max` -> a `loop.reduce` over the reduced dims (in f32)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ReduceOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def result_names(self, op: Operation) -> list[str] | None:
        assert isinstance(op, T.ReduceOp)
        kept = [i for i in range(len(_shape(op.input))) if i not in op.axes_list]
        return [f"d{i}" for i in kept]

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.ReduceOp)
        t = _float_elem(op)
        shape = _shape(op.input)
        reduced = op.axes_list
        kind = "sum" if isinstance(op, T.SumOp) else "max"
        red_names = {}
        nonunit = [d for d in reduced if shape[d] != 1]
        for d in nonunit:
            red_names[d] = b.add_axis("k" if len(nonunit) == 1 else f"k{d}", shape[d])
        it = iter(out)
        dims: list[str | None] = []
        for d in range(len(shape)):
            dims.append(red_names.get(d) if d in reduced else next(it))
        acc_t = f32 if _is_low(t) else t

        def body() -> SSAValue:
            return b.convert(b.load(op.operands[0], b.indices(dims)), acc_t)

        if not red_names:  # reducing only extent-1 dims: a copy
            return b.convert(body(), t)
        r = b.reduce(kind, list(red_names.values()), acc_t, body)
        return b.convert(r, t)


class MatmulToLoop(ToLoopPattern):
    """`tensor.matmul` -> axes (b0.., m, n, k), `loop.reduce sum` of extf(a)*extf(b), truncf."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.MatmulOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def result_names(self, op: Operation) -> list[str] | None:
        r = len(_shape(op.results[0]))
        return [f"b{i}" for i in range(r - 2)] + ["m", "n"]

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.MatmulOp)
        t = _float_elem(op)
        K = _shape(op.lhs)[-1]
        k = b.add_axis("k", K) if K != 1 else None
        batch, m, n = out[:-2], out[-2], out[-1]

        def body() -> SSAValue:
            kk = [k]
            a = b.load(op.lhs, b.indices([*batch, m, *kk]))
            rhs = [*batch, n, *kk] if op.is_transposed else [*batch, *kk, n]
            w = b.load(op.rhs, b.indices(rhs))
            return b.value(arith.MulfOp(b.convert(a, f32), b.convert(w, f32)))

        acc = b.reduce("sum", [k], f32, body) if k is not None else body()
        return b.convert(acc, t)


class BroadcastToLoop(ToLoopPattern):
    """`tensor.broadcast` -> a copy; operand axis i reads result axis dims[i] (or 0)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.BroadcastOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.BroadcastOp)
        src = _shape(op.input)
        dims = [out[d] if src[i] != 1 else None for i, d in enumerate(op.dims_list)]
        return b.load(op.input, b.indices(dims))


class TransposeToLoop(ToLoopPattern):
    """`tensor.transpose` -> a copy; operand axis perm[i] reads result axis i."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.TransposeOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.TransposeOp)
        dims: list[str | None] = [None] * len(out)
        for i, p in enumerate(op.perm_list):
            dims[p] = out[i]
        return b.load(op.input, b.indices(dims))


def reshape_indices(
    ib: IndexBuilder, src: Sequence[int], dst: Sequence[int], dst_index: Sequence[SSAValue]
) -> list[SSAValue]:
    """Operand indices of a row-major reshape from `src` to `dst`, given the result indices.

    Dims are matched in groups whose products agree, so a split or a merge of dims costs one
    multiply-add or one divide/remainder per dim (extent-1 dims are skipped)."""
    out: list[SSAValue | None] = [None] * len(src)
    s_dims = [i for i, n in enumerate(src) if n != 1]
    d_dims = [j for j, n in enumerate(dst) if n != 1]
    for i, n in enumerate(src):
        if n == 1:
            out[i] = ib.const(0)
    si = di = 0
    while si < len(s_dims) or di < len(d_dims):
        gs, gd = [s_dims[si]], [d_dims[di]]
        ps, pd = src[gs[0]], dst[gd[0]]
        si, di = si + 1, di + 1
        while ps != pd:
            if ps < pd:
                gs.append(s_dims[si])
                ps *= src[s_dims[si]]
                si += 1
            else:
                gd.append(d_dims[di])
                pd *= dst[d_dims[di]]
                di += 1
        flat = ib.const(0)
        for j in gd:
            flat = ib.add(ib.mul(flat, dst[j]), dst_index[j])
        stride = ps
        for n, i in enumerate(gs):
            stride //= src[i]
            v = flat if stride == 1 else ib.div(flat, stride)
            out[i] = v if n == 0 else ib.rem(v, src[i])
    return [v for v in out if v is not None]


class ReshapeToLoop(ToLoopPattern):
    """`tensor.reshape` -> a copy whose load indices re-split the row-major flat index."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ReshapeOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        idx = reshape_indices(b.index, _shape(op.operands[0]), _shape(op.results[0]), b.indices(out))
        return b.load(op.operands[0], idx)


class SliceToLoop(ToLoopPattern):
    """`tensor.slice` -> a copy reading `start + stride * i`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.SliceOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.SliceOp)
        ib = b.index
        idx = [
            ib.add(ib.mul(i, st), s)
            for i, s, st in zip(b.indices(out), op.starts_list, op.strides_list)
        ]
        return b.load(op.input, idx)


class ConcatToLoop(ToLoopPattern):
    """`tensor.concat` -> a select chain between one load per operand.

    Operand i's index along the axis is `(c - offset_i) mod size_i` (computed as
    `(c + ((-offset_i) mod size_i)) remui size_i`), which equals `c - offset_i` where operand
    i is selected and stays in range elsewhere, so no load ever reads out of bounds."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.ConcatOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.ConcatOp)
        axis = op.axis_value
        ib = b.index
        base = b.indices(out)
        c = base[axis]
        loads: list[SSAValue] = []
        offsets: list[int] = []
        offset = 0
        for x in op.inputs:
            size = _shape(x)[axis]
            local = ib.rem(ib.add(c, (-offset) % size), size)
            loads.append(b.load(x, [local if d == axis else v for d, v in enumerate(base)]))
            offsets.append(offset)
            offset += size
        value = loads[-1]
        for i in range(len(loads) - 2, -1, -1):
            value = ib.select(ib.cmp("ult", c, offsets[i + 1]), loads[i], value)
        return value


class CausalMaskToLoop(ToLoopPattern):
    """`tensor.causal_mask` -> `select(kv > q + offset, -inf, x)`; with a window, x is first
    `select(kv < q + offset - window + 1, -inf, x)` (the causal select stays outermost: the
    attention analysis finds it there and takes what it wraps as the score of keys on the
    diagonal's near side, which the window's select keeps masking)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.CausalMaskOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.CausalMaskOp)
        t = _float_elem(op)
        idx = b.indices(out)
        x = b.load(op.input, idx)
        ib = b.index
        if op.window_value is not None:
            gone = ib.cmp("slt", idx[-1], ib.add(idx[-2], op.offset_value - op.window_value + 1))
            x = ib.select(gone, b.constant(float("-inf"), t), x)
        masked = ib.cmp("sgt", idx[-1], ib.add(idx[-2], op.offset_value))
        return ib.select(masked, b.constant(float("-inf"), t), x)


class GatherRowsToLoop(ToLoopPattern):
    """`tensor.gather_rows` -> load the id, `arith.index_cast`, load the table row element."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.GatherRowsOp, rewriter: PatternRewriter) -> None:
        self.convert(op, rewriter)

    def build(self, op: Operation, b: LoopBuilder, out) -> SSAValue:
        assert isinstance(op, T.GatherRowsOp)
        idx = b.indices(out)
        i = b.load(op.ids, idx[:-1])
        row = b.value(arith.IndexCastOp(i, IndexType()))
        return b.load(op.table, [row, idx[-1]])


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


def unique_loop_names(f: func.FuncOp) -> None:
    """Name each loop of a function after its origin label, unique in the function."""
    seen: dict[str, int] = {}
    for op in f.body.block.ops:
        if not isinstance(op, L.FusedOp):
            continue
        base = op.sym_name.data
        n = seen.get(base, 0)
        seen[base] = n + 1
        op.sym_name = StringAttr(base if n == 0 else f"{base}_{n}")


def check_loop_stage(f: func.FuncOp, pass_name: str) -> None:
    for op in f.body.block.ops:
        if not isinstance(op, L.FusedOp | func.ReturnOp):
            raise EmmyError(
                f"{pass_name}: @{f.sym_name.data} still holds {op.name} (no loop lowering for it)"
            )


@dataclass(frozen=True)
class ConvertTensorToLoopPass(ModulePass):
    """Turn every tensor op into one `loop.fused` (see the module docstring)."""

    name = "convert-tensor-to-loop"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        require_input_stage(op, self.name)
        rounded = set().union(*(rounded_to_low(f) for f in op.body.block.ops if isinstance(f, func.FuncOp)))
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [
                    BinaryToLoop(rounded),
                    UnaryToLoop(rounded),
                    CastToLoop(),
                    SplatToLoop(),
                    ReductionToLoop(),
                    MatmulToLoop(),
                    BroadcastToLoop(),
                    TransposeToLoop(),
                    ReshapeToLoop(),
                    SliceToLoop(),
                    ConcatToLoop(),
                    CausalMaskToLoop(),
                    GatherRowsToLoop(),
                ]
            ),
            apply_recursively=False,
        ).rewrite_module(op)
        for f in op.body.block.ops:
            if isinstance(f, func.FuncOp):
                unique_loop_names(f)
                check_loop_stage(f, self.name)
