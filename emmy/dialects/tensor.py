"""The `tensor` stage: primitives on whole tensors.

One op is one primitive on whole builtin ranked tensors (static shapes): elementwise arithmetic,
casts, constants, reductions, a batched contraction (`tensor.matmul`), and layout changes
(`broadcast`, `transpose`, `reshape`, `slice`, `concat`). No model-level op is left at this stage.

Conventions
- Elementwise ops take operands of one identical type and produce that type; broadcasting is
  explicit (`tensor.broadcast`) and so is any dtype change (`tensor.cast`).
- Meaning of a value of a low-precision type (`bf16`, `f16`): each op computes its result exactly
  (in f32 for the reference interpreter) and rounds it once, to nearest even, to the result dtype.
- `tensor.matmul` accumulates in f32 whatever its operand dtypes; its result type gives the
  output dtype (one rounding at the end).
- Every op accepts discardable attributes; the passes put `emmy.origin` (a short identifier
  naming the model-level op it came from, e.g. `"rms_norm"`, `"linear_q_proj"`) on each op.

Syntax: `tensor.<op> operands {properties and attributes} : types`, where types is one type when
every operand and the result share it, `T1 -> T2` for one operand, and `(T1, ...) -> T` otherwise:

    %s = tensor.sum %x {axes = array<i64: 1>} : tensor<512x1024xf32> -> tensor<512xf32>
    %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16>

The generic form (`"tensor.sum"(%x) <{axes = array<i64: 1>}> : (...) -> ...`) round-trips too.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import isfinite, prod
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------------
# Constraints and helpers
# --------------------------------------------------------------------------------------------

AnyTensor = base(TensorType)

ORIGIN = "emmy.origin"  # the discardable attribute naming an op's model-level origin (see above)


def _shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """`array<i64: ...>` from Python ints."""
    return DenseArrayBase.from_list(i64, list(values))


def _ints(attr: DenseArrayBase) -> tuple[int, ...]:
    return tuple(int(v) for v in attr.get_values())


class TensorOp(IRDLOperation):
    """Base of every tensor-stage op: the shared custom syntax.

    `tensor.<op> %a, %b <extra> {props, attrs} : <types>`; subclasses may add a leading piece
    (`_print_extra` / `_parse_extra`, used by `tensor.splat` for its value).
    """

    traits = traits_def(Pure())

    # Print the single shared type when all operand and result types are equal.
    SAME_TYPE_SYNTAX: ClassVar[bool] = False

    # ---------------------------------------------------------------- printing
    def _print_extra(self, printer: Printer) -> set[str]:
        """Print a leading piece after the operands; return property names it covered."""
        return set()

    def print(self, printer: Printer) -> None:
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        covered = self._print_extra(printer)
        op_def = self.get_irdl_definition()
        merged: dict[str, Attribute] = {}
        for name in op_def.properties:
            if name in self.properties and name not in covered:
                merged[name] = self.properties[name]
        merged |= self.attributes
        printer.print_op_attributes(merged)
        printer.print_string(" : ")
        in_types = [o.type for o in self.operands]
        out_types = [r.type for r in self.results]
        types = in_types + out_types
        if self.SAME_TYPE_SYNTAX and types and all(t == types[0] for t in types):
            printer.print_attribute(types[0])
        elif len(in_types) == 1 and len(out_types) == 1:
            printer.print_attribute(in_types[0])
            printer.print_string(" -> ")
            printer.print_attribute(out_types[0])
        elif not in_types and len(out_types) == 1:
            printer.print_attribute(out_types[0])
        else:
            printer.print_function_type(in_types, out_types)

    # ---------------------------------------------------------------- parsing
    @classmethod
    def _parse_extra(cls, parser: Parser) -> dict[str, Attribute]:
        return {}

    @classmethod
    def parse(cls, parser: Parser):
        pos = parser.pos
        operands = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            operands.append(first)
            while parser.parse_optional_punctuation(",") is not None:
                operands.append(parser.parse_unresolved_operand())
        props = cls._parse_extra(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        if parser.parse_optional_punctuation("(") is not None:
            in_types: list[Attribute] = []
            if parser.parse_optional_punctuation(")") is None:
                in_types.append(parser.parse_type())
                while parser.parse_optional_punctuation(",") is not None:
                    in_types.append(parser.parse_type())
                parser.parse_punctuation(")")
            parser.parse_punctuation("->")
            out_types: list[Attribute] = [parser.parse_type()]
        else:
            first_type = parser.parse_type()
            if parser.parse_optional_punctuation("->") is not None:
                in_types = [first_type]
                out_types = [parser.parse_type()]
            elif not operands:
                in_types, out_types = [], [first_type]
            else:
                in_types = [first_type] * len(operands)
                out_types = [first_type]
        values = parser.resolve_operands(operands, in_types, pos)
        prop_names = cls.get_irdl_definition().properties
        for name in list(attrs):
            if name in prop_names:
                props[name] = attrs.pop(name)
        return cls.create(
            operands=values, result_types=out_types, properties=props, attributes=attrs
        )

    # ---------------------------------------------------------------- verification
    def _error(self, message: str) -> VerifyException:
        return VerifyException(f"{self.name}: {message}")


# --------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------


class BinaryOp(TensorOp):
    """Elementwise binary op; operands and result have one identical type."""

    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    SAME_TYPE_SYNTAX: ClassVar[bool] = True

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation, attributes=None):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        super().__init__(operands=[lhs, rhs], result_types=[lhs.type], attributes=attributes)

    def verify_(self) -> None:
        a, b, r = self.lhs.type, self.rhs.type, self.result.type
        if not (a == b == r):
            raise self._error(
                f"operands and result must have one type (broadcast and cast explicitly), "
                f"got ({a}, {b}) -> {r}"
            )


@irdl_op_definition
class AddOp(BinaryOp):
    """Elementwise sum. `%c = tensor.add %a, %b : tensor<512x1024xbf16>`"""

    name = "tensor.add"


@irdl_op_definition
class SubOp(BinaryOp):
    """Elementwise difference. `%c = tensor.sub %a, %b : tensor<512x1024xf32>`"""

    name = "tensor.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """Elementwise product. `%c = tensor.mul %a, %b : tensor<512x1024xf32>`"""

    name = "tensor.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """Elementwise quotient. `%c = tensor.div %a, %b : tensor<512x1024xf32>`"""

    name = "tensor.div"


@irdl_op_definition
class MaxOp(BinaryOp):
    """Elementwise maximum. `%c = tensor.max %a, %b : tensor<512x1024xf32>`"""

    name = "tensor.max"


@irdl_op_definition
class MinOp(BinaryOp):
    """Elementwise minimum. `%c = tensor.min %a, %b : tensor<512x1024xf32>`"""

    name = "tensor.min"


class UnaryOp(TensorOp):
    """Elementwise unary op; the result has the operand's type."""

    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)
    SAME_TYPE_SYNTAX: ClassVar[bool] = True

    def __init__(self, x: SSAValue | Operation, attributes=None):
        x = SSAValue.get(x)
        super().__init__(operands=[x], result_types=[x.type], attributes=attributes)

    def verify_(self) -> None:
        if self.input.type != self.result.type:
            raise self._error(
                f"result type must equal the operand type, got {self.input.type} -> "
                f"{self.result.type}"
            )


@irdl_op_definition
class NegOp(UnaryOp):
    """`-x`. `%y = tensor.neg %x : tensor<1x16x32x64xbf16>`"""

    name = "tensor.neg"


@irdl_op_definition
class ExpOp(UnaryOp):
    """`e^x`. `%y = tensor.exp %x : tensor<1x16x32x32xf32>`"""

    name = "tensor.exp"


@irdl_op_definition
class RsqrtOp(UnaryOp):
    """`1/sqrt(x)`. `%y = tensor.rsqrt %x : tensor<512xf32>`"""

    name = "tensor.rsqrt"


@irdl_op_definition
class SqrtOp(UnaryOp):
    """`sqrt(x)`. `%y = tensor.sqrt %x : tensor<512xf32>`"""

    name = "tensor.sqrt"


@irdl_op_definition
class TanhOp(UnaryOp):
    """`tanh(x)`. `%y = tensor.tanh %x : tensor<512x3072xf32>`"""

    name = "tensor.tanh"


@irdl_op_definition
class ErfOp(UnaryOp):
    """The error function. `%y = tensor.erf %x : tensor<512x3072xf32>`"""

    name = "tensor.erf"


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """`1/(1+e^-x)`. `%y = tensor.sigmoid %x : tensor<512x3072xf32>`"""

    name = "tensor.sigmoid"


@irdl_op_definition
class RecipOp(UnaryOp):
    """`1/x`. `%y = tensor.recip %x : tensor<512xf32>`"""

    name = "tensor.recip"


@irdl_op_definition
class CastOp(TensorOp):
    """Dtype conversion (round to nearest even when narrowing); the shape is kept.

        %y = tensor.cast %x : tensor<512x1024xbf16> -> tensor<512x1024xf32>
    """

    name = "tensor.cast"
    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue | Operation, element_type: Attribute, attributes=None):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        out = TensorType(element_type, x.type.get_shape())
        super().__init__(operands=[x], result_types=[out], attributes=attributes)

    def verify_(self) -> None:
        a, r = _shape(self.input.type), _shape(self.result.type)
        if a != r:
            raise self._error(
                f"result shape {_fmt_shape(r)} must equal the operand shape {_fmt_shape(a)}"
            )


@irdl_op_definition
class SplatOp(TensorOp):
    """A tensor filled with one constant (rounded once to the element type).

        %c = tensor.splat 9.765625e-04 : tensor<512xf32>
    Non-finite values print in the attribute dictionary: `{value = 0xFFF0000000000000 : f64}`.
    """

    name = "tensor.splat"
    value = prop_def(FloatAttr)
    result = result_def(AnyTensor)

    def __init__(self, value: float, type: TensorType, attributes=None):
        super().__init__(
            result_types=[type], properties={"value": FloatAttr(value, f64)}, attributes=attributes
        )

    @property
    def float_value(self) -> float:
        return float(self.value.value.data)

    def _print_extra(self, printer: Printer) -> set[str]:
        v = self.float_value
        if self.value.type != f64 or not isfinite(v):
            return set()
        printer.print_string(" ")
        printer.print_float(v, f64)
        return {"value"}

    @classmethod
    def _parse_extra(cls, parser: Parser) -> dict[str, Attribute]:
        v = parser.parse_optional_number()
        return {} if v is None else {"value": FloatAttr(float(v), f64)}

    def verify_(self) -> None:
        if self.value.type != f64:
            raise self._error(f"value must be an f64 float, got {self.value}")


# --------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------


class ReduceOp(TensorOp):
    """Reduction over `axes`; the result drops those axes and keeps the element type."""

    input = operand_def(AnyTensor)
    axes = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue | Operation, axes: Sequence[int], attributes=None):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        shape = [d for i, d in enumerate(x.type.get_shape()) if i not in set(axes)]
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, shape)],
            properties={"axes": i64_array(sorted(axes))},
            attributes=attributes,
        )

    @property
    def axes_list(self) -> tuple[int, ...]:
        return _ints(self.axes)

    def verify_(self) -> None:
        shape = _shape(self.input.type)
        axes = self.axes_list
        if not axes or any(b <= a for a, b in zip(axes, axes[1:])):
            raise self._error(f"axes must be non-empty and strictly increasing, got {list(axes)}")
        if axes[0] < 0 or axes[-1] >= len(shape):
            raise self._error(f"axes {list(axes)} out of range for rank {len(shape)}")
        expected = tuple(d for i, d in enumerate(shape) if i not in axes)
        got = _shape(self.result.type)
        if got != expected:
            raise self._error(
                f"result shape must be {_fmt_shape(expected)} (operand {_fmt_shape(shape)} "
                f"without axes {list(axes)}), got {_fmt_shape(got)}"
            )
        if self.input.type.element_type != self.result.type.element_type:
            raise self._error(
                f"result element type {self.result.type.element_type} must equal the operand's "
                f"{self.input.type.element_type}"
            )


@irdl_op_definition
class SumOp(ReduceOp):
    """Sum over axes.

        %s = tensor.sum %x {axes = array<i64: 1>} : tensor<512x1024xf32> -> tensor<512xf32>
    """

    name = "tensor.sum"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over axes.

        %m = tensor.reduce_max %x {axes = array<i64: 3>} : tensor<1x16x32x32xf32> -> tensor<1x16x32xf32>
    """

    name = "tensor.reduce_max"


# --------------------------------------------------------------------------------------------
# Contraction
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class MatmulOp(TensorOp):
    """Batched matrix product over the last axis of `lhs`, accumulated in f32.

    `lhs` is [..., M, K]; `rhs` is [..., N, K] with `transpose_rhs`, else [..., K, N]; the batch
    dims are equal; the result is [..., M, N] with the element type the result type names.
    Both operands have one element type.

        %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16>
    """

    name = "tensor.matmul"
    lhs = operand_def(AnyTensor)
    rhs = operand_def(AnyTensor)
    transpose_rhs = opt_prop_def(UnitAttr)
    result = result_def(AnyTensor)

    def __init__(
        self,
        lhs: SSAValue | Operation,
        rhs: SSAValue | Operation,
        result_element_type: Attribute,
        transpose_rhs: bool = True,
        attributes=None,
    ):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        a, b = _shape(lhs.type), _shape(rhs.type)
        n = b[-2] if transpose_rhs else b[-1]
        super().__init__(
            operands=[lhs, rhs],
            result_types=[TensorType(result_element_type, [*a[:-1], n])],
            properties={"transpose_rhs": UnitAttr()} if transpose_rhs else {},
            attributes=attributes,
        )

    @property
    def is_transposed(self) -> bool:
        return self.transpose_rhs is not None

    def verify_(self) -> None:
        a, b, r = _shape(self.lhs.type), _shape(self.rhs.type), _shape(self.result.type)
        if len(a) < 2 or len(a) != len(b):
            raise self._error(
                f"operands must have one rank >= 2, got {_fmt_shape(a)} and {_fmt_shape(b)}"
            )
        if a[:-2] != b[:-2]:
            raise self._error(
                f"batch dims must be equal, got {_fmt_shape(a[:-2])} and {_fmt_shape(b[:-2])}"
            )
        k_rhs, n = (b[-1], b[-2]) if self.is_transposed else (b[-2], b[-1])
        if a[-1] != k_rhs:
            which = "last" if self.is_transposed else "second to last"
            raise self._error(
                f"contraction dims differ: lhs {_fmt_shape(a)} has K = {a[-1]}, rhs "
                f"{_fmt_shape(b)} has {k_rhs} on its {which} axis"
            )
        expected = (*a[:-1], n)
        if r != expected:
            raise self._error(f"result shape must be {_fmt_shape(expected)}, got {_fmt_shape(r)}")
        if self.lhs.type.element_type != self.rhs.type.element_type:
            raise self._error(
                f"operands must have one element type, got {self.lhs.type.element_type} and "
                f"{self.rhs.type.element_type}"
            )


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


class LayoutOp(TensorOp):
    """One-operand layout op: the element type is kept."""

    def _check_element_type(self) -> None:
        a, r = self.operands[0].type, self.results[0].type
        if a.element_type != r.element_type:
            raise self._error(
                f"result element type {r.element_type} must equal the operand's {a.element_type}"
            )


@irdl_op_definition
class BroadcastOp(LayoutOp):
    """Broadcast: operand axis i becomes result axis `dims[i]`; the other result axes are new.

    A size-1 operand axis may be expanded to any size.

        %y = tensor.broadcast %x {dims = array<i64: 0>} : tensor<512xf32> -> tensor<512x1024xf32>
    """

    name = "tensor.broadcast"
    input = operand_def(AnyTensor)
    dims = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(
        self, x: SSAValue | Operation, shape: Sequence[int], dims: Sequence[int], attributes=None
    ):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, list(shape))],
            properties={"dims": i64_array(dims)},
            attributes=attributes,
        )

    @property
    def dims_list(self) -> tuple[int, ...]:
        return _ints(self.dims)

    def verify_(self) -> None:
        self._check_element_type()
        a, r, dims = _shape(self.input.type), _shape(self.result.type), self.dims_list
        if len(dims) != len(a):
            raise self._error(f"dims must have one entry per operand axis ({len(a)}), got {list(dims)}")
        if any(d < 0 or d >= len(r) for d in dims) or any(y <= x for x, y in zip(dims, dims[1:])):
            raise self._error(
                f"dims must be strictly increasing result axes (< {len(r)}), got {list(dims)}"
            )
        for i, d in enumerate(dims):
            if a[i] != r[d] and a[i] != 1:
                raise self._error(
                    f"operand axis {i} (size {a[i]}) cannot broadcast to result axis {d} "
                    f"(size {r[d]})"
                )


@irdl_op_definition
class TransposeOp(LayoutOp):
    """Permute axes: result axis i is operand axis `perm[i]`.

        %y = tensor.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x32x16x128xbf16> -> tensor<1x16x32x128xbf16>
    """

    name = "tensor.transpose"
    input = operand_def(AnyTensor)
    perm = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue | Operation, perm: Sequence[int], attributes=None):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        shape = x.type.get_shape()
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, [shape[p] for p in perm])],
            properties={"perm": i64_array(perm)},
            attributes=attributes,
        )

    @property
    def perm_list(self) -> tuple[int, ...]:
        return _ints(self.perm)

    def verify_(self) -> None:
        self._check_element_type()
        a, r, perm = _shape(self.input.type), _shape(self.result.type), self.perm_list
        if sorted(perm) != list(range(len(a))):
            raise self._error(f"perm must be a permutation of 0..{len(a) - 1}, got {list(perm)}")
        expected = tuple(a[p] for p in perm)
        if r != expected:
            raise self._error(f"result shape must be {_fmt_shape(expected)}, got {_fmt_shape(r)}")


@irdl_op_definition
class ReshapeOp(LayoutOp):
    """Same elements in row-major order, new shape.

        %y = tensor.reshape %x : tensor<1x32x1024xbf16> -> tensor<32x1024xbf16>
    """

    name = "tensor.reshape"
    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue | Operation, shape: Sequence[int], attributes=None):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, list(shape))],
            attributes=attributes,
        )

    def verify_(self) -> None:
        self._check_element_type()
        a, r = _shape(self.input.type), _shape(self.result.type)
        if prod(a) != prod(r):
            raise self._error(
                f"element count must be kept: {_fmt_shape(a)} has {prod(a)}, "
                f"{_fmt_shape(r)} has {prod(r)}"
            )


@irdl_op_definition
class SliceOp(LayoutOp):
    """Strided slice: result[i...] = x[starts + i * strides]; the result shape is `sizes`.

        %y = tensor.slice %x {starts = array<i64: 0, 64>, sizes = array<i64: 32, 64>, strides = array<i64: 1, 1>} : tensor<32x128xbf16> -> tensor<32x64xbf16>
    """

    name = "tensor.slice"
    input = operand_def(AnyTensor)
    starts = prop_def(DenseArrayBase.constr(i64))
    sizes = prop_def(DenseArrayBase.constr(i64))
    strides = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(
        self,
        x: SSAValue | Operation,
        starts: Sequence[int],
        sizes: Sequence[int],
        strides: Sequence[int] | None = None,
        attributes=None,
    ):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        strides = [1] * len(sizes) if strides is None else strides
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, list(sizes))],
            properties={
                "starts": i64_array(starts),
                "sizes": i64_array(sizes),
                "strides": i64_array(strides),
            },
            attributes=attributes,
        )

    @property
    def starts_list(self) -> tuple[int, ...]:
        return _ints(self.starts)

    @property
    def sizes_list(self) -> tuple[int, ...]:
        return _ints(self.sizes)

    @property
    def strides_list(self) -> tuple[int, ...]:
        return _ints(self.strides)

    def verify_(self) -> None:
        self._check_element_type()
        a, r = _shape(self.input.type), _shape(self.result.type)
        starts, sizes, strides = self.starts_list, self.sizes_list, self.strides_list
        if not (len(starts) == len(sizes) == len(strides) == len(a)):
            raise self._error(
                f"starts, sizes and strides must have one entry per axis ({len(a)}), got "
                f"{len(starts)}, {len(sizes)}, {len(strides)}"
            )
        if r != sizes:
            raise self._error(
                f"result shape {_fmt_shape(r)} must equal sizes {_fmt_shape(sizes)}"
            )
        for i, (s, n, st) in enumerate(zip(starts, sizes, strides)):
            if s < 0 or n < 0 or st < 1 or (n > 0 and s + (n - 1) * st >= a[i]):
                raise self._error(
                    f"axis {i}: start {s}, size {n}, stride {st} do not fit in extent {a[i]}"
                )


@irdl_op_definition
class ConcatOp(TensorOp):
    """Concatenation along `axis`; all other dims and the element type equal.

        %w = tensor.concat %wq, %wk, %wv {axis = 0 : i64} : (tensor<2048x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<4096x1024xbf16>
    """

    name = "tensor.concat"
    inputs = var_operand_def(AnyTensor)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(AnyTensor)

    def __init__(self, xs: Sequence[SSAValue | Operation], axis: int, attributes=None):
        vals = [SSAValue.get(x) for x in xs]
        shapes = [_shape(v.type) for v in vals]
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        super().__init__(
            operands=[vals],
            result_types=[TensorType(vals[0].type.element_type, out)],
            properties={"axis": IntegerAttr(axis, i64)},
            attributes=attributes,
        )

    @property
    def axis_value(self) -> int:
        return self.axis.value.data

    def verify_(self) -> None:
        if not self.inputs:
            raise self._error("needs at least one operand")
        r = _shape(self.result.type)
        axis = self.axis_value
        if axis < 0 or axis >= len(r):
            raise self._error(f"axis {axis} out of range for rank {len(r)}")
        total = 0
        for i, x in enumerate(self.inputs):
            s = _shape(x.type)
            if x.type.element_type != self.result.type.element_type:
                raise self._error(
                    f"operand {i} element type {x.type.element_type} must equal the result's "
                    f"{self.result.type.element_type}"
                )
            if len(s) != len(r) or any(s[d] != r[d] for d in range(len(r)) if d != axis):
                raise self._error(
                    f"operand {i} shape {_fmt_shape(s)} must match the result "
                    f"{_fmt_shape(r)} except on axis {axis}"
                )
            total += s[axis]
        if total != r[axis]:
            raise self._error(
                f"result axis {axis} has size {r[axis]}, but the operands sum to {total}"
            )


@irdl_op_definition
class CausalMaskOp(TensorOp):
    """Causal mask on scores [..., Sq, Sk]: entries with key index > query index + `offset`
    become -inf; the others are kept.

        %m = tensor.causal_mask %s : tensor<1x16x32x32xf32>
        %m = tensor.causal_mask %s {offset = 4 : i64} : tensor<1x16x32x36xf32>
    """

    name = "tensor.causal_mask"
    input = operand_def(AnyTensor)
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(AnyTensor)
    SAME_TYPE_SYNTAX: ClassVar[bool] = True

    def __init__(self, x: SSAValue | Operation, offset: int = 0, attributes=None):
        x = SSAValue.get(x)
        super().__init__(
            operands=[x],
            result_types=[x.type],
            properties={"offset": IntegerAttr(offset, i64)} if offset else {},
            attributes=attributes,
        )

    @property
    def offset_value(self) -> int:
        return 0 if self.offset is None else self.offset.value.data

    def verify_(self) -> None:
        a = _shape(self.input.type)
        if len(a) < 2:
            raise self._error(f"operand must have rank >= 2 ([..., Sq, Sk]), got {_fmt_shape(a)}")
        if self.result.type != self.input.type:
            raise self._error(
                f"result type must equal the operand type, got {self.input.type} -> "
                f"{self.result.type}"
            )


@irdl_op_definition
class GatherRowsOp(TensorOp):
    """Embedding lookup: table [V, H], integer ids [...] -> [..., H].

        %e = tensor.gather_rows %table, %ids : (tensor<151669x1024xbf16>, tensor<1x32xi64>) -> tensor<1x32x1024xbf16>
    """

    name = "tensor.gather_rows"
    table = operand_def(AnyTensor)
    ids = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, table: SSAValue | Operation, ids: SSAValue | Operation, attributes=None):
        table, ids = SSAValue.get(table), SSAValue.get(ids)
        out = [*_shape(ids.type), _shape(table.type)[-1]]
        super().__init__(
            operands=[table, ids],
            result_types=[TensorType(table.type.element_type, out)],
            attributes=attributes,
        )

    def verify_(self) -> None:
        t, ids, r = _shape(self.table.type), _shape(self.ids.type), _shape(self.result.type)
        if len(t) != 2:
            raise self._error(f"table must be 2-D [V, H], got {_fmt_shape(t)}")
        if not isinstance(self.ids.type.element_type, IntegerType):
            raise self._error(f"ids must be integers, got {self.ids.type.element_type}")
        expected = (*ids, t[1])
        if r != expected:
            raise self._error(f"result shape must be {_fmt_shape(expected)}, got {_fmt_shape(r)}")
        if self.result.type.element_type != self.table.type.element_type:
            raise self._error(
                f"result element type {self.result.type.element_type} must equal the table's "
                f"{self.table.type.element_type}"
            )


BINARY_OPS = (AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp)
UNARY_OPS = (NegOp, ExpOp, RsqrtOp, SqrtOp, TanhOp, ErfOp, SigmoidOp, RecipOp)

Tensor = Dialect(
    "tensor",
    [
        *BINARY_OPS,
        *UNARY_OPS,
        CastOp,
        SplatOp,
        SumOp,
        ReduceMaxOp,
        MatmulOp,
        BroadcastOp,
        TransposeOp,
        ReshapeOp,
        SliceOp,
        ConcatOp,
        CausalMaskOp,
        GatherRowsOp,
    ],
    [],
)
