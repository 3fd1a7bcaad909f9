"""Analysis of loop bodies: domains, and a vectorized numpy evaluator.

A loop body (of `loop.fused`, or of a later op that keeps it, such as `tile.kernel`) is scalar
code over named axes. The **domain** of a scalar value is the set of axes it depends on:
`loop.axis "k"` depends on k, a `loop.reduce` on its yielded value's axes minus the ones it
reduces, any other op on the union of its operands' domains. Domains are reported in the order
of the owner's axes.

    dom = Domains(fused)                  # one analysis per body
    dom.of(value)                         # ("m", "n")
    domain(value)                         # the same, building the analysis on the fly

The evaluator computes a body with numpy, one array per value over the value's domain (never
over the whole iteration space): a value over domain (m, k) is an array of shape (M, K).

    results = evaluate(fused, [x, w])                         # the loop's results
    block   = evaluate(fused, [x, w], ranges={"m": (0, 16)})  # rows 0..15 of each result

`ranges` restricts axes to half-open [lo, hi) intervals. Restricting a parallel axis computes a
sub-block of the results (arrays of the block's shape); restricting a reduction axis restricts
the reduction to that range, giving a partial reduction. The lower-level `Evaluator` gives any
value, and accepts overrides, so that a tile-stage interpreter can accumulate a contraction's
partial sums over k-blocks and then evaluate the epilogue with the reduce result replaced:

    ev = Evaluator(fused, [x, w])
    acc = 0
    for k0 in range(0, K, 64):
        part, axes = ev.value(reduce_op.result, {"m": (0, 16), "n": (0, 32), "k": (k0, k0 + 64)})
        acc = acc + part                                      # axes == ("m", "n")
    (out,) = ev.results({"m": (0, 16), "n": (0, 32)}, overrides={reduce_op.result: acc})

Numerics: float values are float32 arrays; an op that produces a bf16/f16 scalar rounds its
result (round to nearest even, `emmy.interp.numeric.round_to`), so results match the tensor
stage's rounding points. `loop.reduce sum` of a product of f32 factors evaluates with
`np.einsum` over the factors' own domains (a matmul never materializes the (m, n, k) product).
Index arithmetic runs on int64 index grids. A load whose index is out of range is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence

import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue

from emmy.analysis.indexing import affine_form
from emmy.dialects.loop import AxesAttr, AxisOp, LoadOp, ReduceOp, StoreOp, axes_owner, owner_axes
from emmy.interp.numeric import round_to

Ranges = Mapping[str, tuple[int, int]]


# --------------------------------------------------------------------------------------------
# Domains
# --------------------------------------------------------------------------------------------


def owner_of(value: SSAValue) -> Operation:
    """The axes owner (`loop.fused`, ...) whose body defines a value."""
    if isinstance(value, BlockArgument):
        parent = value.block.parent_op()
        assert parent is not None
        if isinstance(parent.properties.get("axes"), AxesAttr) and parent.regions[0].block is value.block:
            return parent
        op = parent
    else:
        op = value.owner
    owner = axes_owner(op)
    if owner is None:
        raise ValueError(f"{value} is not defined inside a loop body")
    return owner


class Domains:
    """The domain (a bit mask over the owner's axes) of every value in one loop body."""

    def __init__(self, owner: Operation):
        self.owner = owner
        self.axes: tuple[str, ...] = owner_axes(owner).axis_names
        self.bit: dict[str, int] = {a: 1 << i for i, a in enumerate(self.axes)}
        self.masks: dict[SSAValue, int] = {}
        self._walk(owner.regions[0].block)

    def _walk(self, block: Block) -> None:
        masks, bit = self.masks, self.bit
        for op in block.ops:
            if isinstance(op, AxisOp):
                masks[op.result] = bit[op.axis_name]
                continue
            if isinstance(op, ReduceOp):
                self._walk(op.body.block)
                reduced = self.mask_of(op.axis_names)
                masks[op.result] = masks.get(op.yielded, 0) & ~reduced
                continue
            m = 0
            for v in op.operands:
                m |= masks.get(v, 0)
            for r in op.regions:  # any other op with a region: conservatively its whole body
                for b in r.blocks:
                    self._walk(b)
                    for inner in b.ops:
                        for v in inner.results:
                            m |= masks.get(v, 0)
            for r in op.results:
                masks[r] = m

    def mask_of(self, axes) -> int:
        m = 0
        for a in axes:
            m |= self.bit[a]
        return m

    def names(self, mask: int) -> tuple[str, ...]:
        return tuple(a for a in self.axes if mask & self.bit[a])

    def mask(self, value: SSAValue) -> int:
        return self.masks.get(value, 0)

    def of(self, value: SSAValue) -> tuple[str, ...]:
        """The axes `value` depends on, in the owner's axis order."""
        return self.names(self.mask(value))


def domain(value: SSAValue) -> tuple[str, ...]:
    """The axes a scalar value of a loop body depends on (ordered as the owner's axes)."""
    return Domains(owner_of(value)).of(value)


def stores(owner: Operation) -> list[StoreOp]:
    return [op for op in owner.regions[0].block.ops if isinstance(op, StoreOp)]


def parallel_axes(owner: Operation, domains: Domains | None = None) -> tuple[str, ...]:
    """The axes some store depends on (its value or its indices)."""
    d = domains or Domains(owner)
    m = 0
    for st in stores(owner):
        for v in st.operands:
            m |= d.mask(v)
    return d.names(m)


def reduction_axes(owner: Operation, domains: Domains | None = None) -> tuple[str, ...]:
    """The owner's axes that are not parallel."""
    par = set(parallel_axes(owner, domains))
    return tuple(a for a in owner_axes(owner).axis_names if a not in par)


def product_factors(value: SSAValue) -> list[SSAValue]:
    """The factors of a product tree of f32 `arith.mulf` ops (the value itself if none)."""
    out: list[SSAValue] = []
    stack = [value]
    while stack:
        v = stack.pop()
        op = v.owner if isinstance(v, OpResult) else None
        if isinstance(op, arith.MulfOp) and _is_f32(v.type):
            stack.append(op.rhs)
            stack.append(op.lhs)
        else:
            out.append(v)
    return out


def value_tree(
    roots: Iterable[SSAValue], stop: Container[SSAValue] = (), leaves: tuple[type[Operation], ...] = (ReduceOp,)
) -> Iterator[SSAValue]:
    """Every value `roots` are computed from, each once, depth first: a root, then the operands of
    its defining op, and so on (results of `leaves` ops are not looked through: by default a
    `loop.reduce`; nor are block arguments). A `loop.reduce` that is not a leaf is looked through
    to the value its body yields. Values in `stop` are skipped, neither yielded nor looked
    through. Callers may leave the iteration as soon as they know their answer."""
    seen: set[SSAValue] = set()
    stack = list(roots)
    while stack:
        v = stack.pop()
        if v in seen or v in stop:
            continue
        seen.add(v)
        yield v
        o = v.owner
        if isinstance(o, Operation) and not isinstance(o, leaves):
            stack.extend(o.operands)
            if isinstance(o, ReduceOp):
                stack.append(o.yielded)


# --------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------


def _is_f32(t: Attribute) -> bool:
    return isinstance(t, AnyFloat) and t.bitwidth == 32


def _round_fn(t: Attribute) -> Callable[[np.ndarray], np.ndarray] | None:
    """How to round a float32 array to scalar type `t` (None: no rounding needed)."""
    if isinstance(t, BFloat16Type):
        return lambda x: round_to(x, "bf16")
    if isinstance(t, Float16Type):
        return lambda x: round_to(x, "f16")
    return None


def _np_dtype(t: Attribute) -> type:
    if isinstance(t, AnyFloat):
        return np.float64 if t.bitwidth == 64 else np.float32
    if isinstance(t, IntegerType) and t.width.data == 1:
        return np.bool_
    return np.int64


def _as_input(x: np.ndarray, t: Attribute) -> np.ndarray:
    """An input tensor as the evaluator holds it (float32 rounded to its dtype, or int64)."""
    assert isinstance(t, TensorType)
    et = t.element_type
    arr = np.asarray(x)
    if isinstance(et, AnyFloat):
        arr = np.asarray(arr, dtype=np.float64 if et.bitwidth == 64 else np.float32)
        r = _round_fn(et)
        return r(arr) if r is not None else arr
    if isinstance(et, IntegerType) and et.width.data == 1:
        return arr.astype(np.bool_)
    return arr.astype(np.int64)


def _unsigned(f):
    def run(a, b):
        ua, ub = a.astype(np.uint64), b.astype(np.uint64)
        return f(ua, ub).astype(np.int64)

    return run


def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_CMPI = {
    0: np.equal,
    1: np.not_equal,
    2: np.less,
    3: np.less_equal,
    4: np.greater,
    5: np.greater_equal,
    6: _unsigned(np.less),
    7: _unsigned(np.less_equal),
    8: _unsigned(np.greater),
    9: _unsigned(np.greater_equal),
}


def _cmpf(pred: int, a, b):
    unordered = np.isnan(a) | np.isnan(b)
    ordered = ~unordered
    base = {
        1: np.equal,
        2: np.greater,
        3: np.greater_equal,
        4: np.less,
        5: np.less_equal,
        6: np.not_equal,
        8: np.equal,
        9: np.greater,
        10: np.greater_equal,
        11: np.less,
        12: np.less_equal,
        13: np.not_equal,
    }
    if pred == 0:
        return np.zeros(np.broadcast(a, b).shape, dtype=bool)
    if pred == 15:
        return np.ones(np.broadcast(a, b).shape, dtype=bool)
    if pred == 7:
        return ordered
    if pred == 14:
        return unordered
    r = base[pred](a, b)
    return (r & ordered) if pred <= 6 else (r | unordered)


def _float_binary(f):
    return lambda op, a: f(a[0], a[1])


def _float_unary(f):
    return lambda op, a: f(a[0])


def _erf(x):
    from emmy.interp.numeric import erf

    return np.asarray(erf(np.asarray(x, dtype=np.float32)), dtype=np.float32)


# op class -> f(op, operand arrays) -> array; float results are rounded afterwards by type.
_OPS: dict[type[Operation], Callable] = {
    arith.AddfOp: _float_binary(np.add),
    arith.SubfOp: _float_binary(np.subtract),
    arith.MulfOp: _float_binary(np.multiply),
    arith.DivfOp: _float_binary(np.divide),
    arith.MaximumfOp: _float_binary(np.maximum),
    arith.MinimumfOp: _float_binary(np.minimum),
    arith.MaxnumfOp: _float_binary(np.fmax),
    arith.MinnumfOp: _float_binary(np.fmin),
    arith.NegfOp: _float_unary(np.negative),
    arith.ExtFOp: lambda op, a: a[0],
    arith.TruncFOp: lambda op, a: a[0].astype(np.float32),
    arith.SIToFPOp: lambda op, a: a[0].astype(np.float32),
    arith.UIToFPOp: lambda op, a: a[0].astype(np.uint64).astype(np.float32),
    arith.FPToSIOp: lambda op, a: np.trunc(a[0]).astype(np.int64),
    arith.FPToUIOp: lambda op, a: np.trunc(a[0]).astype(np.int64),
    arith.IndexCastOp: lambda op, a: a[0].astype(np.int64),
    arith.ExtSIOp: lambda op, a: a[0].astype(np.int64),
    arith.ExtUIOp: lambda op, a: a[0].astype(np.int64),
    arith.TruncIOp: lambda op, a: a[0].astype(np.int64),
    arith.AddiOp: lambda op, a: a[0] + a[1],
    arith.SubiOp: lambda op, a: a[0] - a[1],
    arith.MuliOp: lambda op, a: a[0] * a[1],
    arith.DivUIOp: lambda op, a: _unsigned(np.floor_divide)(a[0], a[1]),
    arith.RemUIOp: lambda op, a: _unsigned(np.remainder)(a[0], a[1]),
    arith.DivSIOp: lambda op, a: _trunc_div(a[0], a[1]),
    arith.RemSIOp: lambda op, a: a[0] - _trunc_div(a[0], a[1]) * a[1],
    arith.FloorDivSIOp: lambda op, a: np.floor_divide(a[0], a[1]),
    arith.CeilDivSIOp: lambda op, a: -np.floor_divide(-a[0], a[1]),
    arith.CeilDivUIOp: lambda op, a: -_unsigned(np.floor_divide)(-a[0], a[1]),
    arith.MinSIOp: lambda op, a: np.minimum(a[0], a[1]),
    arith.MaxSIOp: lambda op, a: np.maximum(a[0], a[1]),
    arith.MinUIOp: lambda op, a: _unsigned(np.minimum)(a[0], a[1]),
    arith.MaxUIOp: lambda op, a: _unsigned(np.maximum)(a[0], a[1]),
    arith.AndIOp: lambda op, a: a[0] & a[1],
    arith.OrIOp: lambda op, a: a[0] | a[1],
    arith.XOrIOp: lambda op, a: a[0] ^ a[1],
    arith.CmpiOp: lambda op, a: _CMPI[op.predicate.value.data](a[0], a[1]),
    arith.CmpfOp: lambda op, a: _cmpf(op.predicate.value.data, a[0], a[1]),
    arith.SelectOp: lambda op, a: np.where(a[0], a[1], a[2]),
    math.ExpOp: _float_unary(np.exp),
    math.Exp2Op: _float_unary(np.exp2),
    math.ExpM1Op: _float_unary(np.expm1),
    math.LogOp: _float_unary(np.log),
    math.Log2Op: _float_unary(np.log2),
    math.Log10Op: _float_unary(np.log10),
    math.Log1pOp: _float_unary(np.log1p),
    math.SqrtOp: _float_unary(np.sqrt),
    math.RsqrtOp: _float_unary(lambda x: np.float32(1) / np.sqrt(x)),
    math.TanhOp: _float_unary(np.tanh),
    math.SinOp: _float_unary(np.sin),
    math.CosOp: _float_unary(np.cos),
    math.AbsFOp: _float_unary(np.abs),
    math.ErfOp: _float_unary(_erf),
    math.PowFOp: _float_binary(np.power),
    math.FmaOp: lambda op, a: a[0] * a[1] + a[2],
}


# --------------------------------------------------------------------------------------------
# The evaluator
# --------------------------------------------------------------------------------------------


class Evaluator:
    """Evaluates the values of one loop body on numpy inputs (one array per value's domain).

    `inputs` are the tensors bound to the owner's block arguments, in order (float arrays are
    held as float32 rounded to their element type; integers as int64).
    """

    def __init__(self, owner: Operation, inputs: Sequence[np.ndarray]):
        self.owner = owner
        self.block: Block = owner.regions[0].block
        axes = owner_axes(owner)
        self.axes: tuple[str, ...] = axes.axis_names
        self.extents: dict[str, int] = axes.as_dict()
        self.pos: dict[str, int] = {a: i for i, a in enumerate(self.axes)}
        self.domains = Domains(owner)
        if len(inputs) != len(self.block.args):
            raise ValueError(
                f"{owner.name} takes {len(self.block.args)} inputs, got {len(inputs)}"
            )
        self._given: dict[SSAValue, np.ndarray] = {}
        for arg, x in zip(self.block.args, inputs):
            x = np.asarray(x)
            if tuple(x.shape) != tuple(arg.type.get_shape()):  # type: ignore[union-attr]
                raise ValueError(f"input of type {arg.type} got an array of shape {x.shape}")
            self._given[arg] = x
        # each input as the evaluator holds it, made on its first load (`_input`): an evaluator
        # that only computes indices never rounds a large input
        self.inputs: dict[SSAValue, np.ndarray] = {}
        self._cache_key: tuple | None = None
        self._cache: dict[SSAValue, np.ndarray] = {}
        self._affine: dict = {}

    # ---------------------------------------------------------------- public API
    def full_ranges(self, ranges: Ranges | None = None) -> dict[str, tuple[int, int]]:
        """Every axis's [lo, hi): the given ones, else the whole extent (validated)."""
        out = {a: (0, e) for a, e in self.extents.items()}
        for a, (lo, hi) in (ranges or {}).items():
            if a not in out:
                raise ValueError(f"range for unknown axis '{a}' (axes: {', '.join(self.axes)})")
            if not 0 <= lo <= hi <= self.extents[a]:
                raise ValueError(f"range [{lo}, {hi}) of axis '{a}' is outside [0, {self.extents[a]})")
            out[a] = (int(lo), int(hi))
        return out

    def value(
        self,
        v: SSAValue,
        ranges: Ranges | None = None,
        overrides: Mapping[SSAValue, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        """(array, axes): `v` over its domain `axes` (owner order), restricted to `ranges`.

        The array's shape is the length of each axis's range. `overrides` replaces values by
        given arrays (over the value's domain, either the restricted block or the full extents).
        """
        self._begin(ranges, overrides)
        arr = self._get(v)
        names = self.domains.of(v)
        return self._compact(arr, self.domains.mask(v)), names

    def results(
        self,
        ranges: Ranges | None = None,
        overrides: Mapping[SSAValue, np.ndarray] | None = None,
    ) -> list[np.ndarray]:
        """The owner's results (the sub-block given by `ranges` of its parallel axes)."""
        self._begin(ranges, overrides)
        outs: list[np.ndarray | None] = [None] * len(self.owner.results)
        for st in stores(self.owner):
            n = st.output_index
            rtype = self.owner.results[n].type
            assert isinstance(rtype, TensorType)
            outs[n] = self._store(st, rtype, outs[n], ranges is not None)
        return [o for o in outs if o is not None]

    # ---------------------------------------------------------------- state
    def _begin(self, ranges: Ranges | None, overrides) -> None:
        """Set the ranges; keep the cached values when ranges and overrides are the same as
        in the previous call (overrides compared by value)."""
        self.ranges = self.full_ranges(ranges)
        self.lengths = [hi - lo for lo, hi in (self.ranges[a] for a in self.axes)]
        given = tuple((v, np.array(arr)) for v, arr in (overrides or {}).items())
        key = tuple(sorted(self.ranges.items()))
        if self._cache_key is not None:
            old_key, old_given = self._cache_key
            if old_key == key and len(old_given) == len(given) and all(
                v0 is v1 and a0.shape == a1.shape and np.array_equal(a0, a1, equal_nan=True)
                for (v0, a0), (v1, a1) in zip(old_given, given)
            ):
                return
        self._cache_key = (key, given)
        self._cache = {}
        for v, arr in given:
            self._cache[v] = self._expand_override(v, np.asarray(arr))

    def _shape(self, mask: int) -> list[int]:
        return [
            n if mask >> i & 1 else 1 for i, n in enumerate(self.lengths)
        ]

    def _compact(self, arr: np.ndarray, mask: int) -> np.ndarray:
        shape = [n for i, n in enumerate(self.lengths) if mask >> i & 1]
        return np.broadcast_to(arr, self._shape(mask)).reshape(shape)

    def _expand_override(self, v: SSAValue, arr: np.ndarray) -> np.ndarray:
        mask = self.domains.mask(v)
        idx = [i for i in range(len(self.axes)) if mask >> i & 1]
        block = tuple(self.lengths[i] for i in idx)
        full = tuple(self.extents[self.axes[i]] for i in idx)
        if arr.shape == block:
            pass
        elif arr.shape == full:
            arr = arr[tuple(slice(*self.ranges[self.axes[i]]) for i in idx)]
        else:
            raise ValueError(
                f"override for a value over ({', '.join(self.axes[i] for i in idx)}) has shape "
                f"{arr.shape}, expected {block} (the block) or {full} (full extents)"
            )
        t = v.type
        dtype = _np_dtype(t)
        return np.asarray(arr, dtype=dtype).reshape(self._shape(mask))

    # ---------------------------------------------------------------- evaluation
    def _get(self, v: SSAValue) -> np.ndarray:
        cache = self._cache
        if v in cache:
            return cache[v]
        # Iterative post-order over the defining ops (bodies can be long chains).
        stack: list[tuple[SSAValue, bool]] = [(v, False)]
        while stack:
            cur, ready = stack.pop()
            if cur in cache:
                continue
            op = cur.owner if isinstance(cur, OpResult) else None
            if op is None:
                raise ValueError(f"cannot evaluate block argument {cur} as a scalar")
            deps = () if isinstance(op, ReduceOp) else op.operands
            if not ready:
                stack.append((cur, True))
                for d in deps:
                    if d not in cache and d not in self._given:
                        stack.append((d, False))
                continue
            self._eval_op(op)
        return cache[v]

    def _eval_op(self, op: Operation) -> None:
        cache = self._cache
        if isinstance(op, AxisOp):
            i = self.pos[op.axis_name]
            lo, hi = self.ranges[op.axis_name]
            shape = [1] * len(self.axes)
            shape[i] = hi - lo
            cache[op.result] = np.arange(lo, hi, dtype=np.int64).reshape(shape)
            return
        if isinstance(op, arith.ConstantOp):
            cache[op.result] = self._constant(op)
            return
        if isinstance(op, LoadOp):
            cache[op.result] = self._load(op)
            return
        if isinstance(op, ReduceOp):
            r = self._reduce(op)
            rnd = _round_fn(op.result.type)
            cache[op.result] = rnd(r) if rnd is not None else r
            return
        f = _OPS.get(type(op))
        if f is None:
            raise NotImplementedError(f"the loop evaluator does not know {op.name}")
        args = [cache[o] for o in op.operands]
        with np.errstate(all="ignore"):
            out = f(op, args)
        t = op.results[0].type
        rnd = _round_fn(t)
        if isinstance(t, AnyFloat):
            out = np.asarray(out, dtype=_np_dtype(t))
            if rnd is not None:
                out = rnd(out)
        cache[op.results[0]] = np.asarray(out)

    def _constant(self, op: arith.ConstantOp) -> np.ndarray:
        attr = op.value
        t = op.result.type
        if isinstance(attr, FloatAttr):
            arr = np.array(attr.value.data, dtype=np.float64).astype(_np_dtype(t))
            rnd = _round_fn(t)
            return (rnd(arr) if rnd is not None else arr).reshape([1] * len(self.axes))
        if isinstance(attr, IntegerAttr):
            return np.array(attr.value.data, dtype=_np_dtype(t)).reshape([1] * len(self.axes))
        raise NotImplementedError(f"the loop evaluator does not know constant {attr}")

    def _input(self, arg: SSAValue) -> np.ndarray:
        x = self.inputs.get(arg)
        if x is None:
            x = self.inputs[arg] = _as_input(self._given[arg], arg.type)
        return x

    def _load(self, op: LoadOp) -> np.ndarray:
        tensor = self._input(op.tensor)
        dims = tensor.shape
        fast = self._load_by_slicing(op, tensor)
        if fast is not None:
            return fast
        idx = []
        for j, i in enumerate(op.indices):
            a = self._cache[i]
            if a.size and (a.min() < 0 or a.max() >= dims[j]):
                raise IndexError(
                    f"loop.load: index {j} ranges over [{a.min()}, {a.max()}], outside "
                    f"[0, {dims[j]}) of {op.tensor.type}"
                )
            idx.append(a)
        if not idx:
            return np.asarray(tensor).reshape([1] * len(self.axes))
        out = tensor[tuple(idx)]
        return out.reshape(np.broadcast_shapes(*[a.shape for a in idx], (1,) * len(self.axes)))

    def _load_by_slicing(self, op: LoadOp, tensor: np.ndarray) -> np.ndarray | None:
        """A load whose indices are constants or distinct axes with positive strides: a view."""
        keys: list[slice | int] = []
        order: list[int] = []  # owner axis position of each kept tensor dim
        for j, i in enumerate(op.indices):
            form = affine_form(i, self._affine)
            if form is None:
                return None
            if form.is_constant():
                c = form.constant
                if not 0 <= c < tensor.shape[j]:
                    raise IndexError(
                        f"loop.load: constant index {c} outside [0, {tensor.shape[j]}) of "
                        f"{op.tensor.type}"
                    )
                keys.append(c)
                continue
            single = form.single_axis()
            if single is None or single[1] <= 0:
                return None
            ax, c = single
            p = self.pos[ax]
            if p in order:
                return None
            lo, hi = self.ranges[ax]
            first, last = form.constant + c * lo, form.constant + c * (hi - 1)
            if hi > lo and (first < 0 or last >= tensor.shape[j]):
                raise IndexError(
                    f"loop.load: index {j} ranges over [{first}, {last}], outside "
                    f"[0, {tensor.shape[j]}) of {op.tensor.type}"
                )
            keys.append(slice(first, last + 1, c) if hi > lo else slice(0, 0))
            order.append(p)
        view = tensor[tuple(keys)]
        perm = sorted(range(len(order)), key=lambda k: order[k])
        view = view.transpose(perm)
        shape = [1] * len(self.axes)
        for k in perm:
            shape[order[k]] = view.shape[perm.index(k)]
        return view.reshape(shape)

    def _reduce(self, op: ReduceOp) -> np.ndarray:
        red = op.axis_names
        red_pos = [self.pos[a] for a in red]
        red_mask = self.domains.mask_of(red)
        out_mask = self.domains.mask(op.result)
        empty = any(self.lengths[p] == 0 for p in red_pos)
        out_shape = self._shape(out_mask)
        if op.kind_name == "max":
            if empty:
                return np.full(out_shape, -np.inf, dtype=np.float32)
            y = self._get(op.yielded)
            present = tuple(p for p in red_pos if y.shape[p] != 1 or self.lengths[p] == 1)
            r = np.max(y, axis=present, keepdims=True) if present else y
            return np.broadcast_to(r, out_shape).astype(_np_dtype(op.result.type))
        if empty:
            return np.zeros(out_shape, dtype=_np_dtype(op.result.type))
        factors = product_factors(op.yielded) if _is_f32(op.result.type) else [op.yielded]
        arrays = [(self._get(f), self.domains.mask(f)) for f in factors]
        union = 0
        for _, m in arrays:
            union |= m
        # Reduced axes no factor depends on: the sum counts each term that many times.
        scale = 1
        for p in red_pos:
            if not union >> p & 1:
                scale *= self.lengths[p]
        if len(arrays) == 1:
            arr, m = arrays[0]
            axes = tuple(p for p in red_pos if m >> p & 1)
            r = np.sum(arr, axis=axes, keepdims=True, dtype=arr.dtype) if axes else arr
        else:
            r = self._einsum(arrays, union & ~red_mask)
        if scale != 1:
            r = r * np.float32(scale)
        return np.broadcast_to(r, out_shape).astype(_np_dtype(op.result.type))

    def _einsum(self, arrays: list[tuple[np.ndarray, int]], out_mask: int) -> np.ndarray:
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        operands: list = []
        for arr, m in arrays:
            keep = [i for i in range(len(self.axes)) if m >> i & 1]
            compact = np.broadcast_to(arr, self._shape(m)).reshape([self.lengths[i] for i in keep])
            operands += [compact, [i for i in keep]]
        out_axes = [i for i in range(len(self.axes)) if out_mask >> i & 1]
        if len(self.axes) > len(letters):
            raise NotImplementedError("more than 52 axes")
        spec = ",".join("".join(letters[i] for i in ops) for ops in operands[1::2])
        spec += "->" + "".join(letters[i] for i in out_axes)
        r = np.einsum(spec, *operands[0::2], optimize=True)
        return np.asarray(r, dtype=np.float32).reshape(self._shape(out_mask))

    def _store(
        self, st: StoreOp, rtype: TensorType, out: np.ndarray | None, blocked: bool
    ) -> np.ndarray:
        value = self._get(st.value)
        dtype = _np_dtype(rtype.element_type)
        shape = tuple(rtype.get_shape())
        names = store_plan(st)
        plan = None if names is None else [None if a is None else self.pos[a] for a in names]
        if plan is not None:
            # The usual case: result dim j is owner axis plan[j] (None: a size-1 dim).
            axes = [p for p in plan if p is not None]
            store_mask = 0
            for p in axes:
                store_mask |= 1 << p
            if self.domains.mask(st.value) & ~store_mask:
                raise ValueError(
                    "loop.store: the stored value depends on axes the store does not index"
                )
            arr = np.broadcast_to(value, self._shape(store_mask))
            ordered = sorted(axes)
            arr = arr.reshape([self.lengths[p] for p in ordered])
            arr = arr.transpose([ordered.index(p) for p in axes])
            arr = arr.reshape([1 if p is None else self.lengths[p] for p in plan])
            return np.array(arr, dtype=dtype, order="C")
        if blocked:
            raise ValueError("evaluating a block needs stores indexed by plain axes")
        # General store: scatter into the whole result.
        if out is None:
            out = np.zeros(shape, dtype=dtype)
        idx = [self._get(i) for i in st.indices]
        full = np.broadcast_shapes(value.shape, *[a.shape for a in idx])
        out[tuple(np.broadcast_to(a, full) for a in idx)] = np.broadcast_to(value, full)
        return out


def store_plan(st: StoreOp) -> list[str | None] | None:
    """For each dim of the result a store writes, the axis that indexes it (None: constant 0 on
    a size-1 dim); None when the store is not of that plain form (an axis twice, an index
    expression, an axis whose extent is not the dim's size)."""
    owner = axes_owner(st)
    assert owner is not None
    extents = owner_axes(owner).as_dict()
    rtype = owner.results[st.output_index].type
    assert isinstance(rtype, TensorType)
    shape = tuple(rtype.get_shape())
    plan: list[str | None] = []
    for j, i in enumerate(st.indices):
        o = i.owner if isinstance(i, OpResult) else None
        if isinstance(o, AxisOp):
            if o.axis_name in plan or extents[o.axis_name] != shape[j]:
                return None
            plan.append(o.axis_name)
        elif shape[j] == 1 and isinstance(o, arith.ConstantOp) and isinstance(
            o.value, IntegerAttr
        ) and o.value.value.data == 0:
            plan.append(None)
        else:
            return None
    return plan


def evaluate(
    owner: Operation,
    inputs: Sequence[np.ndarray],
    ranges: Ranges | None = None,
    overrides: Mapping[SSAValue, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """The results of a loop (`loop.fused`, or another axes owner) on numpy inputs.

    With `ranges`, only that block of the parallel axes (arrays of the block's shape), and
    reductions restricted to the given ranges of reduction axes (partial reductions).
    """
    return Evaluator(owner, inputs).results(ranges, overrides)
