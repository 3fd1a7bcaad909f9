"""The `tensor` dialect's computing ops: elementwise arithmetic, casts and constants,
reductions and the batched contraction (`tensor.matmul`). emmy.dialects.tensor re-exports them
and builds the dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import isfinite
from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    TensorType,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer



from emmy.dialects.tensor_base import (
    AnyTensor,
    _shape,
    _fmt_shape,
    i64_array,
    _ints,
    TensorOp,
)

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
