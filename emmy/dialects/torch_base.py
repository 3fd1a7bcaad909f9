"""The `torch` dialect's helpers and shared syntax: shapes and dtypes of values, PyTorch's
promotion and broadcasting, and the op base classes (one syntax for every op; unary, binary and
scalar ops). emmy.dialects.torch re-exports them.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    BFloat16Type,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    base,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------------
# Constraints and helpers
# --------------------------------------------------------------------------------------------

AnyTensor = base(TensorType)

# Float element types ordered by PyTorch's promotion: f16/bf16 < f32 < f64.
_FLOAT_RANK = {Float16Type: 1, BFloat16Type: 1, Float32Type: 2, Float64Type: 3}


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def dtype_of(value: SSAValue | Attribute) -> Attribute:
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType)
    return t.element_type


def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """`array<i64: ...>` from Python ints."""
    return DenseArrayBase.from_list(i64, list(values))


def f64_attr(value: float) -> FloatAttr:
    return FloatAttr(float(value), f64)


def i64_attr(value: int) -> IntegerAttr:
    return IntegerAttr(int(value), i64)


def bool_attr(value: bool) -> IntegerAttr:
    return IntegerAttr(1 if value else 0, i1)


def promote_dtypes(a: Attribute, b: Attribute) -> Attribute:
    """PyTorch's result dtype for a binary op between two tensors of dtypes a and b."""
    if a == b:
        return a
    ra, rb = _FLOAT_RANK.get(type(a)), _FLOAT_RANK.get(type(b))
    if ra is None and rb is None:  # two integer types: the wider
        assert isinstance(a, IntegerType) and isinstance(b, IntegerType)
        return a if a.width.data >= b.width.data else b
    if ra is None:
        return b
    if rb is None:
        return a
    if ra == rb:  # f16 with bf16
        return Float32Type()
    return a if ra > rb else b


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """PyTorch broadcasting of two shapes, or None when they are incompatible."""
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and da != 1 and db != 1:
            return None
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def _ints(attr: DenseArrayBase) -> tuple[int, ...]:
    return tuple(int(v) for v in attr.get_values())


# --------------------------------------------------------------------------------------------
# Shared syntax
# --------------------------------------------------------------------------------------------


class TorchOp(IRDLOperation):
    """Base of every torch-stage op: the shared custom syntax.

    `torch.<op> %a, %b {properties and attributes} : (types of a, b) -> result type`.
    """

    traits = traits_def(Pure())

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        merged: dict[str, Attribute] = {}
        for name in self.get_irdl_definition().properties:
            if name in self.properties:
                merged[name] = self.properties[name]
        merged |= self.attributes
        printer.print_op_attributes(merged)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    @classmethod
    def parse(cls, parser: Parser):
        pos = parser.pos
        operands = [parser.parse_unresolved_operand()]
        while parser.parse_optional_punctuation(",") is not None:
            operands.append(parser.parse_unresolved_operand())
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        values = parser.resolve_operands(operands, ftype.inputs.data, pos)
        prop_names = cls.get_irdl_definition().properties
        props = {k: v for k, v in attrs.items() if k in prop_names}
        others = {k: v for k, v in attrs.items() if k not in prop_names}
        return cls.create(
            operands=values,
            result_types=list(ftype.outputs.data),
            properties=props,
            attributes=others,
        )

    def _fail(self, message: str) -> None:
        raise VerifyException(f"{self.name}: {message}")


class _Unary(TorchOp):
    """An elementwise op on one tensor: the result has the operand's type."""

    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, attributes: dict[str, Attribute] | None = None):
        super().__init__(operands=[x], result_types=[x.type], attributes=attributes)

    def verify_(self) -> None:
        if self.result.type != self.x.type:
            self._fail(f"result type {self.result.type} must equal operand type {self.x.type}")


class _Binary(TorchOp):
    """An elementwise op on two tensors with PyTorch broadcasting and dtype promotion."""

    a = operand_def(AnyTensor)
    b = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, a: SSAValue, b: SSAValue):
        super().__init__(operands=[a, b], result_types=[self.result_type(a, b)])

    @staticmethod
    def result_type(a: SSAValue, b: SSAValue) -> TensorType:
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        assert shape is not None, "shapes do not broadcast"
        return TensorType(promote_dtypes(dtype_of(a), dtype_of(b)), shape)

    def verify_(self) -> None:
        sa, sb = shape_of(self.a), shape_of(self.b)
        shape = broadcast_shapes(sa, sb)
        if shape is None:
            self._fail(f"operand shapes {fmt_shape(sa)} and {fmt_shape(sb)} do not broadcast")
        if shape_of(self.result) != shape:
            self._fail(
                f"result shape {fmt_shape(shape_of(self.result))} must be the broadcast shape "
                f"{fmt_shape(shape)}"
            )
        dtype = promote_dtypes(dtype_of(self.a), dtype_of(self.b))
        if dtype_of(self.result) != dtype:
            self._fail(f"result element type {dtype_of(self.result)} must be {dtype}")


class _BinaryAlpha(_Binary):
    alpha = opt_prop_def(FloatAttr)

    def __init__(self, a: SSAValue, b: SSAValue, alpha: float | None = None):
        props = {} if alpha is None else {"alpha": f64_attr(alpha)}
        IRDLOperation.__init__(self, operands=[a, b], result_types=[self.result_type(a, b)], properties=props)


class _Scalar(_Unary):
    value = prop_def(FloatAttr)

    def __init__(self, x: SSAValue, value: float):
        IRDLOperation.__init__(
            self, operands=[x], result_types=[x.type], properties={"value": f64_attr(value)}
        )
