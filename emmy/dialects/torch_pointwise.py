"""The `torch` dialect's elementwise ops, scalar ops, softmax and reductions.
emmy.dialects.torch re-exports them and builds the dialect.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)

from emmy.dialects.torch_base import (
    AnyTensor,
    shape_of,
    dtype_of,
    fmt_shape,
    i64_array,
    f64_attr,
    i64_attr,
    _ints,
    TorchOp,
    _Unary,
    _Binary,
    _BinaryAlpha,
    _Scalar,
)

# --------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class SiluOp(_Unary):
    """`x * sigmoid(x)`.

    %a = torch.silu %g : (tensor<1x32x3072xbf16>) -> tensor<1x32x3072xbf16>
    """

    name = "torch.silu"


@irdl_op_definition
class GeluOp(_Unary):
    """GELU, exact (`approximate = "none"`) or with the tanh approximation.

    %a = torch.gelu %g {approximate = "tanh"} : (tensor<1x32x3072xf32>) -> tensor<1x32x3072xf32>
    """

    name = "torch.gelu"
    approximate = prop_def(StringAttr)

    def __init__(self, x: SSAValue, approximate: str = "none"):
        IRDLOperation.__init__(
            self,
            operands=[x],
            result_types=[x.type],
            properties={"approximate": StringAttr(approximate)},
        )

    def verify_(self) -> None:
        super().verify_()
        if self.approximate.data not in ("none", "tanh"):
            self._fail(f'approximate must be "none" or "tanh", got "{self.approximate.data}"')


@irdl_op_definition
class NegOp(_Unary):
    """`-x`.

    %n = torch.neg %x : (tensor<1x16x32x64xbf16>) -> tensor<1x16x32x64xbf16>
    """

    name = "torch.neg"


@irdl_op_definition
class RsqrtOp(_Unary):
    """`1 / sqrt(x)`.

    %r = torch.rsqrt %x : (tensor<1x32x1xf32>) -> tensor<1x32x1xf32>
    """

    name = "torch.rsqrt"


@irdl_op_definition
class SqrtOp(_Unary):
    """`sqrt(x)`.

    %r = torch.sqrt %x : (tensor<1x32x1xf32>) -> tensor<1x32x1xf32>
    """

    name = "torch.sqrt"


@irdl_op_definition
class ExpOp(_Unary):
    """`e^x`.

    %e = torch.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.exp"


@irdl_op_definition
class TanhOp(_Unary):
    """`tanh(x)`.

    %t = torch.tanh %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.tanh"


@irdl_op_definition
class SigmoidOp(_Unary):
    """`1 / (1 + e^-x)`.

    %s = torch.sigmoid %x : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
    """

    name = "torch.sigmoid"


@irdl_op_definition
class ReluOp(_Unary):
    """`max(x, 0)`.

    %r = torch.relu %x : (tensor<1x32x3072xbf16>) -> tensor<1x32x3072xbf16>
    """

    name = "torch.relu"


@irdl_op_definition
class AbsOp(_Unary):
    """`|x|`.

    %a = torch.abs %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    """

    name = "torch.abs"


@irdl_op_definition
class ClampOp(_Unary):
    """`x` limited to `[min, max]` (`torch.clamp`); either bound may be absent, not both. The
    result keeps x's type.

    %c = torch.clamp %x {min = -1.000000e+00 : f64, max = 1.000000e+00 : f64} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
    """

    name = "torch.clamp"
    min = opt_prop_def(FloatAttr)
    max = opt_prop_def(FloatAttr)

    def __init__(self, x: SSAValue, low: float | None, high: float | None):
        props = {k: f64_attr(v) for k, v in (("min", low), ("max", high)) if v is not None}
        IRDLOperation.__init__(self, operands=[x], result_types=[x.type], properties=props)

    def bounds(self) -> tuple[float | None, float | None]:
        return tuple(None if a is None else a.value.data for a in (self.min, self.max))  # type: ignore[return-value]

    def verify_(self) -> None:
        super().verify_()
        low, high = self.bounds()
        if low is None and high is None:
            self._fail("needs a min or a max bound")
        if low is not None and high is not None and not low <= high:
            self._fail(f"min {low} must not exceed max {high}")


POW_EXPONENTS = (-1.0, -0.5, 0.5, 1.0, 2.0, 3.0)
POW_EXPONENTS_TEXT = ", ".join(f"{e:g}" for e in POW_EXPONENTS)


@irdl_op_definition
class PowScalarOp(_Scalar):
    """`x ** value` for an exponent Emmy lowers exactly: -1, -0.5, 0.5, 1, 2 or 3 (the
    result keeps x's type).

    %c = torch.pow_scalar %x {value = 3.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.pow_scalar"

    def verify_(self) -> None:
        super().verify_()
        if self.value.value.data not in POW_EXPONENTS:
            self._fail(
                f"exponent {self.value.value.data} is not supported (one of {POW_EXPONENTS_TEXT})"
            )


@irdl_op_definition
class SoftmaxOp(TorchOp):
    """Softmax over the last axis, computed in float32 and rounded once to x's type
    (`torch.softmax(x, dim=-1)`).

    %p = torch.softmax %x {dim = 3 : i64} : (tensor<1x4x8x8xbf16>) -> tensor<1x4x8x8xbf16>
    """

    name = "torch.softmax"
    x = operand_def(AnyTensor)
    dim = prop_def(IntegerAttr)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dim: int):
        super().__init__(operands=[x], result_types=[x.type], properties={"dim": i64_attr(dim)})

    def verify_(self) -> None:
        rank = len(shape_of(self.x))
        if self.result.type != self.x.type:
            self._fail(f"result type {self.result.type} must equal operand type {self.x.type}")
        if rank == 0 or self.dim.value.data != rank - 1:
            self._fail(f"dim must be the last axis ({rank - 1}), got {self.dim.value.data}")


class _Reduction(TorchOp):
    """A reduction over `dims` (strictly increasing); `keepdim` keeps the reduced axes with
    extent 1. The result keeps x's element type."""

    x = operand_def(AnyTensor)
    dims = prop_def(DenseArrayBase)
    keepdim = prop_def(BoolAttr)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dims: Sequence[int], keepdim: bool):
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), self.shape_for(shape_of(x), dims, keepdim))],
            properties={"dims": i64_array(sorted(dims)), "keepdim": BoolAttr.from_bool(keepdim)},
        )

    @staticmethod
    def shape_for(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> list[int]:
        return [1 if i in dims else d for i, d in enumerate(shape)] if keepdim else [
            d for i, d in enumerate(shape) if i not in dims
        ]

    def verify_(self) -> None:
        shape, dims = shape_of(self.x), _ints(self.dims)
        if not dims or any(b <= a for a, b in zip(dims, dims[1:])) or dims[0] < 0 or dims[-1] >= len(shape):
            self._fail(f"dims must be non-empty, strictly increasing axes of rank {len(shape)}, got {list(dims)}")
        keep = bool(self.keepdim.value.data)
        expected = self.shape_for(shape, dims, keep)
        if list(shape_of(self.result)) != expected or dtype_of(self.result) != dtype_of(self.x):
            self._fail(f"result must be {fmt_shape(expected)} of {dtype_of(self.x)}, got {self.result.type}")


@irdl_op_definition
class MeanOp(_Reduction):
    """Mean over `dims`, accumulated in float32 and rounded once to x's type.

    %m = torch.mean %x {dims = array<i64: 2>, keepdim = true} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1xbf16>
    """

    name = "torch.mean"


@irdl_op_definition
class SumOp(_Reduction):
    """Sum over `dims` (`torch.sum`), accumulated in float32 and rounded once to x's type.

    %s = torch.sum %x {dims = array<i64: 1, 2>, keepdim = false} : (tensor<2x3x4xf32>) -> tensor<2xf32>
    """

    name = "torch.sum"


@irdl_op_definition
class AmaxOp(_Reduction):
    """Largest element over `dims` (`torch.amax`); exact in x's type.

    %m = torch.amax %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x16xbf16>) -> tensor<4x1xbf16>
    """

    name = "torch.amax"


@irdl_op_definition
class AddOp(_BinaryAlpha):
    """`a + alpha * b` with broadcasting (`alpha` defaults to 1).

    %s = torch.add %a, %b : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    """

    name = "torch.add"


@irdl_op_definition
class SubOp(_BinaryAlpha):
    """`a - alpha * b` with broadcasting (`alpha` defaults to 1).

    %s = torch.sub %a, %b {alpha = 2.000000e+00 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.sub"


@irdl_op_definition
class MulOp(_Binary):
    """`a * b` with broadcasting.

    %p = torch.mul %a, %b : (tensor<1x16x32x128xbf16>, tensor<1x1x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.mul"


@irdl_op_definition
class DivOp(_Binary):
    """`a / b` with broadcasting.

    %q = torch.div %a, %b : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
    """

    name = "torch.div"


@irdl_op_definition
class MaximumOp(_Binary):
    """Elementwise `max(a, b)` with broadcasting.

    %m = torch.maximum %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.maximum"


@irdl_op_definition
class MinimumOp(_Binary):
    """Elementwise `min(a, b)` with broadcasting.

    %m = torch.minimum %a, %b : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
    """

    name = "torch.minimum"


@irdl_op_definition
class AddScalarOp(_Scalar):
    """`x + value` (value is a Python number in the model; the result keeps x's type).

    %s = torch.add_scalar %x {value = 1.000000e+00 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.add_scalar"


@irdl_op_definition
class MulScalarOp(_Scalar):
    """`x * value` (value is a Python number in the model; the result keeps x's type).

    %s = torch.mul_scalar %x {value = 5.000000e-01 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    """

    name = "torch.mul_scalar"
