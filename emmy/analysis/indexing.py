"""Affine analysis of the index expressions in loop bodies.

Load indices are `index` values built from `loop.axis` and `arith` index ops. When an index is
an integer combination of axes plus a constant it is *affine*:

    %k  = loop.axis "k" : index
    %c2 = arith.constant 2 : index
    %t  = arith.muli %k, %c2 : index          affine_form(%t)  == AffineForm({"k": 2}, 0)
    %c1 = arith.constant 1 : index
    %u  = arith.addi %t, %c1 : index          affine_form(%u)  == AffineForm({"k": 2}, 1)
    %h  = arith.divui %u, %c2 : index         affine_form(%h)  is None (not affine)

`index_bounds` gives an interval for any index expression (affine or not) from the axis extents;
`load_access` the affine form of each index of a `loop.load`, which tells which axes a load
depends on and how (unit stride, broadcast, gather). Used by fusion (index simplification),
the loop evaluator (strided fast path) and, later, tiling and coalescing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType
from xdsl.ir import Operation, OpResult, SSAValue

from emmy.dialects.loop import AxisOp, LoadOp


class AffineForm(NamedTuple):
    """`sum(coeffs[a] * a) + constant` over named axes (coefficients are never 0)."""

    coeffs: dict[str, int]
    constant: int

    @property
    def axes(self) -> frozenset[str]:
        return frozenset(self.coeffs)

    def is_constant(self) -> bool:
        return not self.coeffs

    def single_axis(self) -> tuple[str, int] | None:
        """(axis, coefficient) when exactly one axis appears."""
        if len(self.coeffs) == 1:
            ((a, c),) = self.coeffs.items()
            return a, c
        return None


def constant_int(value: SSAValue) -> int | None:
    """The integer value of an `arith.constant` of integer or index type, else None."""
    op = value.owner if isinstance(value, OpResult) else None
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        if isinstance(op.value.type, IndexType | IntegerType):
            return op.value.value.data
    return None


def _combine(a: AffineForm, b: AffineForm, sign: int) -> AffineForm:
    coeffs = dict(a.coeffs)
    for ax, c in b.coeffs.items():
        coeffs[ax] = coeffs.get(ax, 0) + sign * c
        if coeffs[ax] == 0:
            del coeffs[ax]
    return AffineForm(coeffs, a.constant + sign * b.constant)


def affine_form(
    index: SSAValue, cache: dict[SSAValue, AffineForm | None] | None = None
) -> AffineForm | None:
    """The affine form of an index value, or None when it is not affine in the axes.

    Understood: `loop.axis`, integer `arith.constant`, `arith.addi`, `arith.subi`, and
    `arith.muli` where one side is constant. Anything else (divui, remui, select, loads) is
    not affine.
    """
    if cache is not None and index in cache:
        return cache[index]
    result = _affine(index, cache)
    if cache is not None:
        cache[index] = result
    return result


def _affine(index: SSAValue, cache) -> AffineForm | None:
    op = index.owner if isinstance(index, OpResult) else None
    if isinstance(op, AxisOp):
        return AffineForm({op.axis_name: 1}, 0)
    c = constant_int(index)
    if c is not None:
        return AffineForm({}, c)
    if isinstance(op, arith.AddiOp | arith.SubiOp):
        a = affine_form(op.lhs, cache)
        b = affine_form(op.rhs, cache) if a is not None else None
        if a is None or b is None:
            return None
        return _combine(a, b, 1 if isinstance(op, arith.AddiOp) else -1)
    if isinstance(op, arith.MuliOp):
        a = affine_form(op.lhs, cache)
        b = affine_form(op.rhs, cache) if a is not None else None
        if a is None or b is None:
            return None
        if a.is_constant():
            a, b = b, a
        if not b.is_constant():
            return None
        k = b.constant
        if k == 0:
            return AffineForm({}, 0)
        return AffineForm({ax: c * k for ax, c in a.coeffs.items()}, a.constant * k)
    return None


def affine_bounds(form: AffineForm, extents: Mapping[str, int]) -> tuple[int, int]:
    """Inclusive [lo, hi] of an affine form when each axis a ranges over [0, extents[a])."""
    lo = hi = form.constant
    for ax, c in form.coeffs.items():
        top = c * (extents[ax] - 1)
        lo += min(0, top)
        hi += max(0, top)
    return lo, hi


def index_bounds(
    index: SSAValue, extents: Mapping[str, int], cache: dict | None = None
) -> tuple[int, int] | None:
    """Inclusive [lo, hi] that an index expression can take, or None when unknown.

    Affine expressions are bounded exactly; divui/remui/select/addi/subi/muli by interval
    arithmetic; anything else (an index loaded from a tensor) is unknown.
    """
    cache = {} if cache is None else cache
    if index in cache:
        return cache[index]
    form = affine_form(index)
    if form is not None and all(a in extents for a in form.coeffs):
        result: tuple[int, int] | None = affine_bounds(form, extents)
    else:
        result = _interval(index, extents, cache)
    cache[index] = result
    return result


def _interval(index: SSAValue, extents, cache) -> tuple[int, int] | None:
    op = index.owner if isinstance(index, OpResult) else None
    if isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp):
        a = index_bounds(op.lhs, extents, cache)
        b = index_bounds(op.rhs, extents, cache)
        if a is None or b is None:
            return None
        if isinstance(op, arith.AddiOp):
            return a[0] + b[0], a[1] + b[1]
        if isinstance(op, arith.SubiOp):
            return a[0] - b[1], a[1] - b[0]
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if isinstance(op, arith.DivUIOp | arith.RemUIOp):
        a = index_bounds(op.lhs, extents, cache)
        c = constant_int(op.rhs)
        if c is None or c <= 0:
            return None
        if isinstance(op, arith.DivUIOp):
            if a is None or a[0] < 0:
                return None
            return a[0] // c, a[1] // c
        if a is not None and a[0] >= 0 and a[0] // c == a[1] // c:
            return a[0] % c, a[1] % c
        return 0, c - 1
    if isinstance(op, arith.SelectOp):
        a = index_bounds(op.lhs, extents, cache)
        b = index_bounds(op.rhs, extents, cache)
        if a is None or b is None:
            return None
        return min(a[0], b[0]), max(a[1], b[1])
    return None


def load_access(load: LoadOp) -> list[AffineForm | None]:
    """The affine form of each index of a load (None where an index is not affine)."""
    cache: dict = {}
    return [affine_form(i, cache) for i in load.indices]


def load_axes(load: LoadOp) -> frozenset[str] | None:
    """The axes a load's indices depend on, when every index is affine (else None)."""
    forms = load_access(load)
    if any(f is None for f in forms):
        return None
    out: set[str] = set()
    for f in forms:
        assert f is not None
        out |= f.axes
    return frozenset(out)


# --------------------------------------------------------------------------------------------
# Simplification rules (used by IndexBuilder and by the index folding patterns of loop-fuse)
# --------------------------------------------------------------------------------------------


def simplify_divrem_in(
    is_div: bool, x: SSAValue, c: int, extents: Mapping[str, int]
) -> AffineForm | None:
    """`simplify_divrem` for an index value inside a loop body with the given axis extents."""
    if c <= 0:
        return None
    form = affine_form(x)
    bounds = index_bounds(x, extents)
    if c == 1:
        return form if is_div else AffineForm({}, 0)
    if bounds is not None and bounds[0] >= 0 and bounds[0] // c == bounds[1] // c:
        q = bounds[0] // c
        if is_div:
            return AffineForm({}, q)
        return AffineForm(dict(form.coeffs), form.constant - q * c) if form is not None else None
    if form is None or any(a not in extents for a in form.coeffs):
        return None
    high = {a: k // c for a, k in form.coeffs.items() if k % c == 0}
    low = AffineForm({a: k for a, k in form.coeffs.items() if k % c != 0}, form.constant % c)
    lo, hi = affine_bounds(low, extents)
    if lo < 0 or hi >= c:
        return None
    if is_div:
        return AffineForm(high, (form.constant - low.constant) // c)
    return low


def compare_bounds(pred: str, a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool | None:
    """The value of `a <pred> b` when the bounds decide it (pred: slt sle sgt sge ult ule ugt
    uge eq ne; unsigned predicates only decided for non-negative bounds)."""
    if a is None or b is None:
        return None
    if pred.startswith("u"):
        if a[0] < 0 or b[0] < 0:
            return None
        pred = "s" + pred[1:]
    (alo, ahi), (blo, bhi) = a, b
    if pred == "slt":
        return True if ahi < blo else False if alo >= bhi else None
    if pred == "sle":
        return True if ahi <= blo else False if alo > bhi else None
    if pred == "sgt":
        return True if alo > bhi else False if ahi <= blo else None
    if pred == "sge":
        return True if alo >= bhi else False if ahi < blo else None
    if pred == "eq":
        return True if alo == ahi == blo == bhi else False if ahi < blo or bhi < alo else None
    if pred == "ne":
        r = compare_bounds("eq", a, b)
        return None if r is None else not r
    return None


CMPI_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")


# --------------------------------------------------------------------------------------------
# Building index expressions
# --------------------------------------------------------------------------------------------


class IndexBuilder:
    """Builds simplified index expressions in a loop body.

    `insert(op)` places a new op (at the builder's insertion point); `axis_value(name)` returns
    the `loop.axis` value of an axis usable there. Affine results are materialized in a
    canonical form (`c0*a0 + c1*a1 + ... + k`, axes in `axis_order`) and shared.
    """

    def __init__(
        self,
        extents: Mapping[str, int],
        insert,
        axis_value,
        axis_order: list[str] | tuple[str, ...] | None = None,
        forms: dict | None = None,
    ):
        self.extents = extents
        self.insert = insert
        self.axis_value = axis_value
        self.order = {a: i for i, a in enumerate(axis_order or list(extents))}
        self.forms: dict = {} if forms is None else forms

    # ---------------------------------------------------------------- materialization
    def const(self, c: int) -> SSAValue:
        return self.of_form(AffineForm({}, c))

    def of_form(self, form: AffineForm) -> SSAValue:
        key = (tuple(sorted(form.coeffs.items())), form.constant)
        if key in self.forms:
            return self.forms[key]
        if form.is_constant():
            op = arith.ConstantOp(IntegerAttr(form.constant, IndexType()))
            self.insert(op)
            v = op.result
        elif form.constant:
            # (terms) + k: the terms are shared with other expressions
            rest = self.of_form(AffineForm(form.coeffs, 0))
            if form.constant > 0:
                v = self._op(arith.AddiOp(rest, self.const(form.constant)))
            else:
                v = self._op(arith.SubiOp(rest, self.const(-form.constant)))
        else:
            axes = sorted(form.coeffs, key=lambda a: self.order.get(a, len(self.order)))
            last = axes[-1]
            k = form.coeffs[last]
            t = self.axis_value(last)
            if k != 1:
                t = self._op(arith.MuliOp(t, self.const(k)))
            if len(axes) == 1:
                v = t
            else:
                head = self.of_form(AffineForm({a: form.coeffs[a] for a in axes[:-1]}, 0))
                v = self._op(arith.AddiOp(head, t))
        self.forms[key] = v
        return v

    def _op(self, op: Operation) -> SSAValue:
        self.insert(op)
        return op.results[0]

    # ---------------------------------------------------------------- arithmetic
    def add(self, a: SSAValue, b: SSAValue | int) -> SSAValue:
        b = self.const(b) if isinstance(b, int) else b
        fa, fb = affine_form(a), affine_form(b)
        if fa is not None and fb is not None:
            return self.of_form(_combine(fa, fb, 1))
        return self._op(arith.AddiOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue | int) -> SSAValue:
        b = self.const(b) if isinstance(b, int) else b
        fa, fb = affine_form(a), affine_form(b)
        if fa is not None and fb is not None:
            return self.of_form(_combine(fa, fb, -1))
        return self._op(arith.SubiOp(a, b))

    def mul(self, a: SSAValue, c: int) -> SSAValue:
        fa = affine_form(a)
        if fa is not None:
            if c == 0:
                return self.const(0)
            return self.of_form(AffineForm({x: k * c for x, k in fa.coeffs.items()}, fa.constant * c))
        if c == 1:
            return a
        return self._op(arith.MuliOp(a, self.const(c)))

    def div(self, a: SSAValue, c: int) -> SSAValue:
        f = simplify_divrem_in(True, a, c, self.extents)
        if f is not None:
            return self.of_form(f)
        return self._op(arith.DivUIOp(a, self.const(c)))

    def rem(self, a: SSAValue, c: int) -> SSAValue:
        f = simplify_divrem_in(False, a, c, self.extents)
        if f is not None:
            return self.of_form(f)
        return self._op(arith.RemUIOp(a, self.const(c)))

    def cmp(self, pred: str, a: SSAValue, b: SSAValue | int) -> SSAValue:
        """An i1 `a <pred> b` (folded to a constant when the bounds decide it)."""
        b = self.const(b) if isinstance(b, int) else b
        known = compare_bounds(
            pred, index_bounds(a, self.extents), index_bounds(b, self.extents)
        )
        if known is not None:
            return self._op(arith.ConstantOp(IntegerAttr(int(known), IntegerType(1))))
        return self._op(arith.CmpiOp(a, b, pred))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        c = constant_int(cond)
        if c is not None:
            return a if c else b
        return self._op(arith.SelectOp(cond, a, b))
