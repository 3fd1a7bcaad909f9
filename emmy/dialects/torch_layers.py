"""The `torch` dialect's model-level layers: RMSNorm, LayerNorm, linear, matmul and scaled
dot-product attention. emmy.dialects.torch re-exports them and builds the dialect.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    I64,
    BoolAttr,
    FloatAttr,
    IntegerAttr,
    TensorType,
    i64,
)
from xdsl.ir import SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)

from emmy.dialects.torch_base import (
    AnyTensor,
    shape_of,
    dtype_of,
    fmt_shape,
    f64_attr,
    bool_attr,
    promote_dtypes,
    broadcast_shapes,
    TorchOp,
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
    (top-left aligned, as PyTorch does). `window` (with `is_causal` only) also masks keys `window`
    or more positions before the query: query q sees keys q - window + 1 .. q, the sliding window
    of Mistral, Phi-3 and Gemma's local layers. PyTorch's function has no such argument; the
    frontend sets it from the model's config (see `emmy.frontend.decoder.sliding_window`).

        %o = torch.scaled_dot_product_attention %q, %k, %v {is_causal = true, scale = 0.088388347648318447 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
        %o = torch.scaled_dot_product_attention %q, %k, %v {is_causal = true, scale = 0.125 : f64, enable_gqa = false, window = 4096 : i64} : (tensor<1x32x6000x64xbf16>, tensor<1x32x6000x64xbf16>, tensor<1x32x6000x64xbf16>) -> tensor<1x32x6000x64xbf16>
    """

    name = "torch.scaled_dot_product_attention"
    q = operand_def(AnyTensor)
    k = operand_def(AnyTensor)
    v = operand_def(AnyTensor)
    is_causal = prop_def(BoolAttr)
    scale = prop_def(FloatAttr)
    enable_gqa = prop_def(BoolAttr)
    window = opt_prop_def(IntegerAttr[I64])
    result = result_def(AnyTensor)

    def __init__(
        self,
        q: SSAValue,
        k: SSAValue,
        v: SSAValue,
        *,
        is_causal: bool,
        scale: float,
        enable_gqa: bool,
        window: int | None = None,
    ):
        rshape = shape_of(q)[:-1] + shape_of(v)[-1:]
        properties = {"is_causal": bool_attr(is_causal), "scale": f64_attr(scale), "enable_gqa": bool_attr(enable_gqa)}
        if window is not None:
            properties["window"] = IntegerAttr(window, i64)
        super().__init__(operands=[q, k, v], result_types=[TensorType(dtype_of(q), rshape)], properties=properties)

    @property
    def window_value(self) -> int | None:
        """The sliding window in tokens, or None where every earlier key is seen."""
        return None if self.window is None else self.window.value.data

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
        if self.window_value is not None:
            if self.window_value < 1:
                self._fail(f"window must be at least 1 token, got {self.window_value}")
            if not self.is_causal.value.data:
                self._fail("a window needs is_causal (it bounds how far back a causal query looks)")
