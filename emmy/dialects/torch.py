"""The `torch` stage: one op per model-level operation, as the model wrote it.

Operands and results are builtin ranked tensors with static shapes (`tensor<1x32x1024xbf16>`);
element types are `bf16`, `f16`, `f32` (and integers for embedding ids). Broadcasting and
dtype promotion follow PyTorch: a binary op's result shape is the broadcast of its operand
shapes, and mixing two float dtypes gives the wider one (`bf16` with `f16` gives `f32`).

A function at this stage is what `emmy.frontend.trace_layer` produces: its arguments are the
layer's inputs followed by its parameters, each carrying `emmy.name` and `emmy.role`.

Syntax (every op): operands, then properties and attributes in one dictionary, then the
functional type:

    %h = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x512x1024xbf16>, tensor<1024xbf16>) -> tensor<1x512x1024xbf16>
    %q = torch.linear %h, %q_w : (tensor<1x512x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<1x512x2048xbf16>

The generic form (`"torch.rms_norm"(%x, %w) <{eps = 1.000000e-06 : f64}> : (...) -> ...`)
round-trips too.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    BFloat16Type,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
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


# --------------------------------------------------------------------------------------------
# Normalizations, linear, attention
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class RmsNormOp(TorchOp):
    """RMSNorm over the last axis, exactly like Hugging Face's `LlamaRMSNorm`/`Qwen3RMSNorm`:
    `weight * (x.f32 * rsqrt(mean(x.f32^2, -1) + eps)).to(x.dtype)`. The result dtype is the
    promotion of x's and weight's dtypes.

        %h = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    """

    name = "torch.rms_norm"
    x = operand_def(AnyTensor)
    weight = operand_def(AnyTensor)
    eps = prop_def(FloatAttr)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, weight: SSAValue, eps: float):
        rtype = TensorType(promote_dtypes(dtype_of(x), dtype_of(weight)), shape_of(x))
        super().__init__(
            operands=[x, weight], result_types=[rtype], properties={"eps": f64_attr(eps)}
        )

    def verify_(self) -> None:
        xs, ws = shape_of(self.x), shape_of(self.weight)
        if not xs:
            self._fail("x must have at least one dimension")
        if ws != xs[-1:]:
            self._fail(f"weight shape {fmt_shape(ws)} must be [{xs[-1]}] (the last dim of x)")
        if shape_of(self.result) != xs:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must equal x's {fmt_shape(xs)}")
        dtype = promote_dtypes(dtype_of(self.x), dtype_of(self.weight))
        if dtype_of(self.result) != dtype:
            self._fail(f"result element type {dtype_of(self.result)} must be {dtype}")


@irdl_op_definition
class LayerNormOp(TorchOp):
    """LayerNorm over the last axis (`torch.nn.functional.layer_norm` with a 1-D normalized
    shape): `(x - mean) / sqrt(var + eps) * weight + bias`.

        %h = torch.layer_norm %x, %w, %b {eps = 1.000000e-05 : f64} : (tensor<1x32x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<1x32x768xf32>
    """

    name = "torch.layer_norm"
    x = operand_def(AnyTensor)
    weight = operand_def(AnyTensor)
    bias = operand_def(AnyTensor)
    eps = prop_def(FloatAttr)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, weight: SSAValue, bias: SSAValue, eps: float):
        super().__init__(
            operands=[x, weight, bias], result_types=[x.type], properties={"eps": f64_attr(eps)}
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        if not xs:
            self._fail("x must have at least one dimension")
        for what, v in (("weight", self.weight), ("bias", self.bias)):
            if shape_of(v) != xs[-1:]:
                self._fail(f"{what} shape {fmt_shape(shape_of(v))} must be [{xs[-1]}] (the last dim of x)")
        if self.result.type != self.x.type:
            self._fail(f"result type {self.result.type} must equal x's type {self.x.type}")


@irdl_op_definition
class LinearOp(TorchOp):
    """`y = x @ weight^T + bias`: x [..., K], weight [N, K], optional bias [N], result [..., N].
    All element types are equal.

        %q = torch.linear %h, %w : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<1x32x2048xbf16>
    """

    name = "torch.linear"
    x = operand_def(AnyTensor)
    weight = operand_def(AnyTensor)
    bias = opt_operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, weight: SSAValue, bias: SSAValue | None = None):
        shape = shape_of(x)[:-1] + shape_of(weight)[:1]
        operands = [x, weight, [] if bias is None else [bias]]
        super().__init__(operands=operands, result_types=[TensorType(dtype_of(x), shape)])

    def verify_(self) -> None:
        xs, ws = shape_of(self.x), shape_of(self.weight)
        if len(ws) != 2:
            self._fail(f"weight must be 2-D [N, K], got {fmt_shape(ws)}")
        if not xs:
            self._fail("x must have at least one dimension")
        n, k = ws
        if xs[-1] != k:
            self._fail(f"x's last dim {xs[-1]} must equal weight's K = {k} (weight is [N, K] = {fmt_shape(ws)})")
        if self.bias is not None and shape_of(self.bias) != (n,):
            self._fail(f"bias shape {fmt_shape(shape_of(self.bias))} must be [{n}]")
        expected = xs[:-1] + (n,)
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        dtypes = [dtype_of(self.x), dtype_of(self.weight), dtype_of(self.result)]
        if self.bias is not None:
            dtypes.append(dtype_of(self.bias))
        if any(d != dtypes[0] for d in dtypes):
            self._fail("operands and result must share one element type")


@irdl_op_definition
class MatmulOp(TorchOp):
    """`a @ b` of two tensors of rank >= 2 (`torch.matmul`, `bmm`): a [..., M, K], b [..., K, N],
    batch dims broadcast, result [..., M, N]; accumulated in float32 and rounded once. Both
    operands and the result share one element type.

        %s = torch.matmul %q, %kt : (tensor<1x4x32x64xbf16>, tensor<1x4x64x32xbf16>) -> tensor<1x4x32x32xbf16>
    """

    name = "torch.matmul"
    a = operand_def(AnyTensor)
    b = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, a: SSAValue, b: SSAValue):
        batch = broadcast_shapes(shape_of(a)[:-2], shape_of(b)[:-2])
        assert batch is not None, "batch dims do not broadcast"
        shape = list(batch) + [shape_of(a)[-2], shape_of(b)[-1]]
        super().__init__(operands=[a, b], result_types=[TensorType(dtype_of(a), shape)])

    def verify_(self) -> None:
        sa, sb = shape_of(self.a), shape_of(self.b)
        if len(sa) < 2 or len(sb) < 2:
            self._fail(f"operands must have rank >= 2, got {fmt_shape(sa)} and {fmt_shape(sb)}")
        if sa[-1] != sb[-2]:
            self._fail(f"a's last dim {sa[-1]} must equal b's second to last {sb[-2]} (a {fmt_shape(sa)}, b {fmt_shape(sb)})")
        batch = broadcast_shapes(sa[:-2], sb[:-2])
        if batch is None:
            self._fail(f"batch dims {fmt_shape(sa[:-2])} and {fmt_shape(sb[:-2])} do not broadcast")
        expected = tuple(batch) + (sa[-2], sb[-1])
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        if not dtype_of(self.a) == dtype_of(self.b) == dtype_of(self.result):
            self._fail("operands and result must share one element type")


@irdl_op_definition
class ScaledDotProductAttentionOp(TorchOp):
    """`softmax(q @ k^T * scale [+ causal mask]) @ v` per head, like
    `torch.nn.functional.scaled_dot_product_attention`. q [B, H, S, D], k [B, Hkv, Sk, D],
    v [B, Hkv, Sk, Dv], result [B, H, S, Dv]. With `enable_gqa`, query head h reads kv head
    h // (H / Hkv); without it H == Hkv. `is_causal` masks keys after the query position
    (top-left aligned, as PyTorch does).

        %o = torch.scaled_dot_product_attention %q, %k, %v {is_causal = true, scale = 0.088388347648318447 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.scaled_dot_product_attention"
    q = operand_def(AnyTensor)
    k = operand_def(AnyTensor)
    v = operand_def(AnyTensor)
    is_causal = prop_def(BoolAttr)
    scale = prop_def(FloatAttr)
    enable_gqa = prop_def(BoolAttr)
    result = result_def(AnyTensor)

    def __init__(
        self, q: SSAValue, k: SSAValue, v: SSAValue, *, is_causal: bool, scale: float, enable_gqa: bool
    ):
        rshape = shape_of(q)[:-1] + shape_of(v)[-1:]
        super().__init__(
            operands=[q, k, v],
            result_types=[TensorType(dtype_of(q), rshape)],
            properties={
                "is_causal": bool_attr(is_causal),
                "scale": f64_attr(scale),
                "enable_gqa": bool_attr(enable_gqa),
            },
        )

    def verify_(self) -> None:
        qs, ks, vs = shape_of(self.q), shape_of(self.k), shape_of(self.v)
        if len(qs) != 4 or len(ks) != 4 or len(vs) != 4:
            self._fail("q, k and v must be 4-D [B, H, S, D]")
        if not (qs[0] == ks[0] == vs[0]):
            self._fail(f"batch sizes differ: q {qs[0]}, k {ks[0]}, v {vs[0]}")
        if ks[1] != vs[1] or ks[2] != vs[2]:
            self._fail(f"k {fmt_shape(ks)} and v {fmt_shape(vs)} must share heads and length")
        if qs[3] != ks[3]:
            self._fail(f"head dims differ: q has {qs[3]}, k has {ks[3]}")
        h, hkv = qs[1], ks[1]
        if self.enable_gqa.value.data:
            if h % hkv != 0:
                self._fail(f"query heads {h} must be divisible by kv heads {hkv} (enable_gqa)")
        elif h != hkv:
            self._fail(f"query heads {h} must equal kv heads {hkv} without enable_gqa")
        expected = qs[:3] + vs[3:]
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        dtypes = {dtype_of(self.q), dtype_of(self.k), dtype_of(self.v), dtype_of(self.result)}
        if len(dtypes) != 1:
            self._fail("q, k, v and result must share one element type")


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


# --------------------------------------------------------------------------------------------
# Casts and layout
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class ToOp(TorchOp):
    """Dtype conversion (`x.to(dtype)`, `.float()`): the result type carries the dtype.

    %f = torch.to %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xf32>
    """

    name = "torch.to"
    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dtype: Attribute):
        super().__init__(operands=[x], result_types=[TensorType(dtype, shape_of(x))])

    def verify_(self) -> None:
        if shape_of(self.result) != shape_of(self.x):
            self._fail(
                f"result shape {fmt_shape(shape_of(self.result))} must equal operand shape "
                f"{fmt_shape(shape_of(self.x))}"
            )


@irdl_op_definition
class ViewOp(TorchOp):
    """A row-major reinterpretation with the same number of elements (view, reshape,
    unsqueeze, squeeze, flatten): the result type carries the shape.

    %v = torch.view %q : (tensor<1x32x2048xbf16>) -> tensor<1x32x16x128xbf16>
    """

    name = "torch.view"
    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[x], result_types=[TensorType(dtype_of(x), list(shape))])

    def verify_(self) -> None:
        xs, rs = shape_of(self.x), shape_of(self.result)
        if prod(xs) != prod(rs):
            self._fail(
                f"element count changes: {fmt_shape(xs)} has {prod(xs)}, {fmt_shape(rs)} has {prod(rs)}"
            )
        if dtype_of(self.x) != dtype_of(self.result):
            self._fail("result element type must equal operand element type")


@irdl_op_definition
class ExpandOp(TorchOp):
    """x repeated along axes of extent 1 and new leading axes (`expand`, `expand_as`), by
    PyTorch's right-aligned broadcasting: the result type carries the shape.

    %k = torch.expand %kv : (tensor<1x8x1x32x128xbf16>) -> tensor<1x8x2x32x128xbf16>
    """

    name = "torch.expand"
    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[x], result_types=[TensorType(dtype_of(x), list(shape))])

    def verify_(self) -> None:
        xs, rs = shape_of(self.x), shape_of(self.result)
        lead = len(rs) - len(xs)
        if lead < 0 or any(d not in (1, r) for d, r in zip(xs, rs[lead:])):
            self._fail(f"{fmt_shape(xs)} does not broadcast to {fmt_shape(rs)}")
        _check_layout_dtype(self, self.x, self.result)


def _check_layout_dtype(op: TorchOp, x: SSAValue, result: SSAValue) -> None:
    if dtype_of(x) != dtype_of(result):
        op._fail("result element type must equal operand element type")


@irdl_op_definition
class TransposeOp(TorchOp):
    """Swaps two axes (`dims`, both in [0, rank)).

    %t = torch.transpose %v {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.transpose"
    x = operand_def(AnyTensor)
    dims = prop_def(DenseArrayBase)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dim0: int, dim1: int):
        shape = list(shape_of(x))
        shape[dim0], shape[dim1] = shape[dim1], shape[dim0]
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), shape)],
            properties={"dims": i64_array([dim0, dim1])},
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        dims = _ints(self.dims)
        if len(dims) != 2 or any(not 0 <= d < len(xs) for d in dims):
            self._fail(f"dims must be two axes in [0, {len(xs)}), got {list(dims)}")
        expected = list(xs)
        expected[dims[0]], expected[dims[1]] = expected[dims[1]], expected[dims[0]]
        if shape_of(self.result) != tuple(expected):
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        _check_layout_dtype(self, self.x, self.result)


@irdl_op_definition
class PermuteOp(TorchOp):
    """Reorders axes: result axis i is operand axis perm[i].

    %p = torch.permute %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.permute"
    x = operand_def(AnyTensor)
    perm = prop_def(DenseArrayBase)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, perm: Sequence[int]):
        xs = shape_of(x)
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), [xs[p] for p in perm])],
            properties={"perm": i64_array(perm)},
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        perm = _ints(self.perm)
        if sorted(perm) != list(range(len(xs))):
            self._fail(f"perm {list(perm)} must be a permutation of [0, {len(xs)})")
        expected = tuple(xs[p] for p in perm)
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        _check_layout_dtype(self, self.x, self.result)


@irdl_op_definition
class SliceOp(TorchOp):
    """`x[..., start:end:step, ...]` along `dim`; normalized: 0 <= dim < rank,
    0 <= start <= end <= size, step >= 1.

    %s = torch.slice %q {dim = 3 : i64, start = 0 : i64, end = 64 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    """

    name = "torch.slice"
    x = operand_def(AnyTensor)
    dim = prop_def(IntegerAttr)
    start = prop_def(IntegerAttr)
    end = prop_def(IntegerAttr)
    step = prop_def(IntegerAttr)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dim: int, start: int, end: int, step: int = 1):
        shape = list(shape_of(x))
        shape[dim] = max(0, -(-(end - start) // step))
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), shape)],
            properties={
                "dim": i64_attr(dim),
                "start": i64_attr(start),
                "end": i64_attr(end),
                "step": i64_attr(step),
            },
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        dim = self.dim.value.data
        start, end, step = self.start.value.data, self.end.value.data, self.step.value.data
        if not 0 <= dim < len(xs):
            self._fail(f"dim {dim} must be in [0, {len(xs)})")
        if step < 1:
            self._fail(f"step {step} must be at least 1")
        if not 0 <= start <= end <= xs[dim]:
            self._fail(f"need 0 <= start <= end <= {xs[dim]}, got start {start}, end {end}")
        expected = list(xs)
        expected[dim] = -(-(end - start) // step)
        if shape_of(self.result) != tuple(expected):
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        _check_layout_dtype(self, self.x, self.result)


@irdl_op_definition
class CatOp(TorchOp):
    """Concatenates tensors along `dim` (0 <= dim < rank); all other dims and dtypes equal.

    %c = torch.cat %n, %a {dim = 3 : i64} : (tensor<1x16x32x64xbf16>, tensor<1x16x32x64xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.cat"
    xs = var_operand_def(AnyTensor)
    dim = prop_def(IntegerAttr)
    result = result_def(AnyTensor)

    def __init__(self, xs: Sequence[SSAValue], dim: int):
        shape = list(shape_of(xs[0]))
        shape[dim] = sum(shape_of(x)[dim] for x in xs)
        super().__init__(
            operands=[list(xs)],
            result_types=[TensorType(dtype_of(xs[0]), shape)],
            properties={"dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        if not self.xs:
            self._fail("needs at least one operand")
        shapes = [shape_of(x) for x in self.xs]
        rank = len(shapes[0])
        dim = self.dim.value.data
        if not 0 <= dim < rank:
            self._fail(f"dim {dim} must be in [0, {rank})")
        for s in shapes:
            if len(s) != rank or s[:dim] + s[dim + 1 :] != shapes[0][:dim] + shapes[0][dim + 1 :]:
                self._fail(
                    f"operand shapes {', '.join(fmt_shape(s) for s in shapes)} differ outside dim {dim}"
                )
        expected = list(shapes[0])
        expected[dim] = sum(s[dim] for s in shapes)
        if shape_of(self.result) != tuple(expected):
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        dtypes = {dtype_of(x) for x in self.xs} | {dtype_of(self.result)}
        if len(dtypes) != 1:
            self._fail("operands and result must share one element type")


@irdl_op_definition
class EmbeddingOp(TorchOp):
    """Row lookup: weight [V, H], integer ids [...] -> [..., H].

    %e = torch.embedding %table, %ids : (tensor<151669x1024xbf16>, tensor<1x32xi64>) -> tensor<1x32x1024xbf16>
    """

    name = "torch.embedding"
    weight = operand_def(AnyTensor)
    ids = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, weight: SSAValue, ids: SSAValue):
        shape = shape_of(ids) + shape_of(weight)[1:]
        super().__init__(operands=[weight, ids], result_types=[TensorType(dtype_of(weight), shape)])

    def verify_(self) -> None:
        ws = shape_of(self.weight)
        if len(ws) != 2:
            self._fail(f"weight must be 2-D [V, H], got {fmt_shape(ws)}")
        if not isinstance(dtype_of(self.ids), IntegerType):
            self._fail(f"ids must have an integer element type, got {dtype_of(self.ids)}")
        expected = shape_of(self.ids) + ws[1:]
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        if dtype_of(self.result) != dtype_of(self.weight):
            self._fail("result element type must equal weight's")


Torch = Dialect(
    "torch",
    [
        RmsNormOp,
        LayerNormOp,
        LinearOp,
        MatmulOp,
        ScaledDotProductAttentionOp,
        SiluOp,
        GeluOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        MaximumOp,
        MinimumOp,
        AddScalarOp,
        MulScalarOp,
        PowScalarOp,
        NegOp,
        RsqrtOp,
        SqrtOp,
        ExpOp,
        TanhOp,
        SigmoidOp,
        ReluOp,
        AbsOp,
        ClampOp,
        SoftmaxOp,
        MeanOp,
        SumOp,
        AmaxOp,
        ToOp,
        ViewOp,
        ExpandOp,
        TransposeOp,
        PermuteOp,
        SliceOp,
        CatOp,
        EmbeddingOp,
    ],
    [],
)
