"""`convert-torch-to-tensor`: decompose every model-level torch op into tensor primitives.

Input invariant: a module at the torch stage (`emmy/dialects/torch.py`): static shapes, PyTorch
broadcasting and dtype promotion inside the torch ops, parameters as named function arguments.

Output IR: only `tensor` ops (plus func/builtin). Every tensor op carries a discardable
`emmy.origin` string naming the model-level op it came from: `rms_norm`, `layer_norm`,
`linear_<leaf module of the weight>` (e.g. `linear_q_proj` from `self_attn.q_proj.weight`),
`attention`, `silu`, `gelu`, `rope` (the rotary arithmetic between q/k and cos/sin),
`residual` (adds of a function input or of an earlier residual), `embedding`, else the torch
op's own name (`add`, `mul`, `view`, `transpose`, ...).

Invariants: numbers are kept exactly as PyTorch rounds them: each tensor op rounds once to its
result dtype, so low-precision arithmetic that PyTorch does in f32 (RMSNorm's statistics, silu,
gelu, scalar ops, `alpha`) is cast to f32 and back explicitly. Broadcasting becomes explicit
`tensor.broadcast`, dtype promotion explicit `tensor.cast`. A torch op without a lowering is an
`EmmyError` naming it (stage torch->tensor).

Before / after (RMSNorm then a linear):

    %h = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<32x1024xbf16>, tensor<1024xbf16>) -> tensor<32x1024xbf16>
    %q = torch.linear %h, %wq : (tensor<32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<32x2048xbf16>

    %xf = tensor.cast %x {emmy.origin = "rms_norm"} : tensor<32x1024xbf16> -> tensor<32x1024xf32>
    %sq = tensor.mul %xf, %xf {emmy.origin = "rms_norm"} : tensor<32x1024xf32>
    %ss = tensor.sum %sq {axes = array<i64: 1>, emmy.origin = "rms_norm"} : tensor<32x1024xf32> -> tensor<32xf32>
    ... mul by 1/N, add eps, rsqrt, broadcast, mul, cast to bf16, mul by the broadcast weight ...
    %q = tensor.matmul %h, %wq {transpose_rhs, emmy.origin = "linear_q_proj"} : (tensor<32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<32x2048xbf16>
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import (
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from emmy.diagnostics import EmmyError
from emmy.dialects import tensor as T
from emmy.dialects import torch as P
from emmy.dialects.tensor import ORIGIN
from emmy.passes.stages import require_input_stage


# ------------------------------------------------------------------------------------------
# Origin labels (an analysis over each function, before rewriting)
# ------------------------------------------------------------------------------------------

_FIXED_LABELS: dict[type[Operation], str] = {
    P.RmsNormOp: "rms_norm",
    P.LayerNormOp: "layer_norm",
    P.ScaledDotProductAttentionOp: "attention",
    P.SiluOp: "silu",
    P.GeluOp: "gelu",
    P.SoftmaxOp: "softmax",
    P.EmbeddingOp: "embedding",
}
_TRIG_PASS_THROUGH = (P.ViewOp, P.ToOp, P.SliceOp, P.TransposeOp, P.PermuteOp)
_ROTATE_HALF = (P.SliceOp, P.NegOp, P.CatOp)


def _identifier(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text) or "op"


def arg_attr(value: SSAValue, key: str) -> str | None:
    """The string argument attribute `key` (`emmy.name`, `emmy.role`) of a function argument."""
    if not isinstance(value, BlockArgument):
        return None
    parent = value.block.parent_op()
    if not isinstance(parent, func.FuncOp) or parent.arg_attrs is None:
        return None
    attrs = parent.arg_attrs.data[value.index]
    if isinstance(attrs, DictionaryAttr) and isinstance(a := attrs.data.get(key), StringAttr):
        return a.data
    return None


def _linear_label(op: P.LinearOp) -> str:
    name = arg_attr(op.weight, "emmy.name")
    parts = name.split(".") if name else []
    if len(parts) >= 2 and parts[-1] == "weight":
        return "linear_" + _identifier(parts[-2])
    return "linear"


def origin_labels(f: func.FuncOp) -> dict[Operation, str]:
    """The `emmy.origin` label of each torch op in a function (see the module docstring)."""
    ops = list(f.body.walk())
    labels: dict[Operation, str] = {}
    trig: set[SSAValue] = {
        a for a in f.body.block.args if (arg_attr(a, "emmy.name") or "").split(".")[-1] in ("cos", "sin")
    }
    for op in ops:
        if not op.name.startswith("torch."):
            continue
        if type(op) in _FIXED_LABELS:
            labels[op] = _FIXED_LABELS[type(op)]
        elif isinstance(op, P.LinearOp):
            labels[op] = _linear_label(op)
        elif isinstance(op, _TRIG_PASS_THROUGH) and op.operands[0] in trig:
            trig.add(op.results[0])
            labels[op] = "rope"
        elif isinstance(op, P.MulOp) and (op.a in trig or op.b in trig):
            labels[op] = "rope"
        elif isinstance(op, P.AddOp | P.SubOp):
            owners = [v.owner for v in (op.a, op.b)]
            if all(labels.get(o) == "rope" and isinstance(o, P.MulOp) for o in owners):
                labels[op] = "rope"
            elif isinstance(op, P.AddOp) and any(
                arg_attr(v, "emmy.role") == "input" or labels.get(v.owner) == "residual"
                for v in (op.a, op.b)
            ):
                labels[op] = "residual"
    # rotate_half: slices, negations and concatenations used only by rotary arithmetic
    for op in reversed(ops):
        if isinstance(op, _ROTATE_HALF) and op not in labels:
            users = [u.operation for u in op.results[0].uses]
            if users and all(labels.get(u) == "rope" for u in users):
                labels[op] = "rope"
    for op in ops:
        if op.name.startswith("torch.") and op not in labels:
            labels[op] = op.name.removeprefix("torch.")
    return labels


# ------------------------------------------------------------------------------------------
# Building tensor ops
# ------------------------------------------------------------------------------------------

f32 = Float32Type()


def _shape(v: SSAValue) -> tuple[int, ...]:
    assert isinstance(v.type, TensorType)
    return tuple(v.type.get_shape())


def _dtype(v: SSAValue) -> Attribute:
    assert isinstance(v.type, TensorType)
    return v.type.element_type


def compute_dtype(dtype: Attribute) -> Attribute:
    """The dtype PyTorch computes in for `dtype` (f32 for bf16/f16)."""
    return f32 if isinstance(dtype, BFloat16Type | Float16Type) else dtype


@dataclass
class Emitter:
    """Inserts tensor ops before the torch op being rewritten, each labelled with its origin."""

    rewriter: PatternRewriter
    anchor: Operation
    origin: str

    def emit(self, op: Operation, hint: str | None = None) -> SSAValue:
        op.attributes[ORIGIN] = StringAttr(self.origin)
        self.rewriter.insert(op, InsertPoint.before(self.anchor))
        result = op.results[0]
        if hint:
            result.name_hint = hint
        return result

    def cast(self, v: SSAValue, dtype: Attribute, hint: str | None = None) -> SSAValue:
        return v if _dtype(v) == dtype else self.emit(T.CastOp(v, dtype), hint)

    def splat(self, value: float, like: SSAValue) -> SSAValue:
        """A constant with the type of `like`."""
        assert isinstance(like.type, TensorType)
        return self.emit(T.SplatOp(value, like.type))

    def broadcast(self, v: SSAValue, shape: Sequence[int], dims: Sequence[int] | None = None) -> SSAValue:
        """Broadcast to `shape`; without `dims`, PyTorch's right-aligned rule."""
        shape = tuple(shape)
        if _shape(v) == shape and dims is None:
            return v
        if dims is None:
            lead = len(shape) - len(_shape(v))
            dims = range(lead, len(shape))
        return self.emit(T.BroadcastOp(v, shape, list(dims)))

    def reshape(self, v: SSAValue, shape: Sequence[int], hint: str | None = None) -> SSAValue:
        return v if _shape(v) == tuple(shape) else self.emit(T.ReshapeOp(v, shape), hint)

    def reduce_last(self, cls: type[T.ReduceOp], v: SSAValue, hint: str | None = None) -> SSAValue:
        """Reduce over the last axis, then broadcast back to v's shape."""
        rank = len(_shape(v))
        r = self.emit(cls(v, [rank - 1]), hint)
        return self.broadcast(r, _shape(v), range(rank - 1))


class TorchLowering(RewritePattern):
    """Base of the patterns: knows each torch op's origin label."""

    def __init__(self, labels: dict[Operation, str]):
        self.labels = labels

    def emitter(self, op: Operation, rewriter: PatternRewriter) -> Emitter:
        return Emitter(rewriter, op, self.labels.get(op) or op.name.removeprefix("torch."))


def _float(attr: Attribute | None, default: float) -> float:
    return default if attr is None else float(attr.value.data)  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------
# Model-level ops
# ------------------------------------------------------------------------------------------


class LowerRmsNorm(TorchLowering):
    """weight * (x.f32 * rsqrt(sum(x.f32^2, -1) * 1/N + eps)).to(x.dtype), as HF rounds it."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.RmsNormOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x, shape, out_dtype = op.x, _shape(op.x), _dtype(op.result)
        cd = compute_dtype(_dtype(x))
        xf = e.cast(x, cd, "xf")
        sq = e.emit(T.MulOp(xf, xf), "sq")
        ss = e.emit(T.SumOp(sq, [len(shape) - 1]), "ss")
        ms = e.emit(T.MulOp(ss, e.splat(1.0 / shape[-1], ss)), "ms")
        var = e.emit(T.AddOp(ms, e.splat(_float(op.eps, 1e-6), ms)), "var")
        r = e.emit(T.RsqrtOp(var), "rstd")
        y = e.emit(T.MulOp(xf, e.broadcast(r, shape, range(len(shape) - 1))), "normed")
        y = e.cast(e.cast(y, _dtype(x)), out_dtype)
        w = e.broadcast(e.cast(op.weight, out_dtype), shape)
        rewriter.replace(op, [], [e.emit(T.MulOp(w, y))])


class LowerLayerNorm(TorchLowering):
    """((x - mean) * rsqrt(var + eps) * weight + bias), computed in f32, rounded once."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.LayerNormOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x, shape = op.x, _shape(op.x)
        cd = compute_dtype(_dtype(x))
        inv_n = 1.0 / shape[-1]
        xf = e.cast(x, cd, "xf")
        s = e.emit(T.SumOp(xf, [len(shape) - 1]), "sum")
        mean = e.emit(T.MulOp(s, e.splat(inv_n, s)), "mean")
        xc = e.emit(T.SubOp(xf, e.broadcast(mean, shape, range(len(shape) - 1))), "centered")
        sq = e.emit(T.MulOp(xc, xc), "sq")
        ss = e.emit(T.SumOp(sq, [len(shape) - 1]), "ss")
        var = e.emit(T.MulOp(ss, e.splat(inv_n, ss)), "var")
        r = e.emit(T.RsqrtOp(e.emit(T.AddOp(var, e.splat(_float(op.eps, 1e-5), var)))), "rstd")
        y = e.emit(T.MulOp(xc, e.broadcast(r, shape, range(len(shape) - 1))), "normed")
        y = e.emit(T.MulOp(y, e.broadcast(e.cast(op.weight, cd), shape)))
        y = e.emit(T.AddOp(y, e.broadcast(e.cast(op.bias, cd), shape)))
        rewriter.replace(op, [], [e.cast(y, _dtype(op.result))])


class LowerLinear(TorchLowering):
    """x [..., K] -> reshape [M, K] -> matmul {transpose_rhs} with weight [N, K] -> (+ bias) -> reshape."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.LinearOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        xs, out_shape, dtype = _shape(op.x), _shape(op.result), _dtype(op.result)
        n = _shape(op.weight)[0]
        m = math.prod(xs[:-1])
        x2 = e.reshape(op.x, [m, xs[-1]])
        y = e.emit(T.MatmulOp(x2, op.weight, dtype, transpose_rhs=True), e.origin.removeprefix("linear_"))
        if op.bias is not None:
            y = e.emit(T.AddOp(y, e.broadcast(e.cast(op.bias, dtype), [m, n])))
        rewriter.replace(op, [], [e.reshape(y, out_shape)])


class LowerScaledDotProductAttention(TorchLowering):
    """softmax(q k^T * scale, causal [and windowed]) in f32, probabilities cast to q's dtype, then @ v.

    Grouped-query attention broadcasts k and v from Hkv to H heads (kv head h // (H/Hkv)).
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.ScaledDotProductAttentionOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        b, h, s, d = _shape(op.q)
        hkv = _shape(op.k)[1]
        dtype = _dtype(op.q)
        k, v = op.k, op.v
        if hkv != h:
            k, v = (self._repeat_heads(e, t, h) for t in (k, v))
        scores = e.emit(T.MatmulOp(op.q, k, f32, transpose_rhs=True), "scores")
        scale = _float(op.scale, 1.0 / math.sqrt(d))
        scores = e.emit(T.MulOp(scores, e.splat(scale, scores)), "scaled")
        if op.is_causal.value.data:
            scores = e.emit(T.CausalMaskOp(scores, window=op.window_value), "masked")
        shifted = e.emit(T.SubOp(scores, e.reduce_last(T.ReduceMaxOp, scores, "rowmax")))
        ex = e.emit(T.ExpOp(shifted), "ex")
        probs = e.emit(T.DivOp(ex, e.reduce_last(T.SumOp, ex, "rowsum")), "probs")
        probs = e.cast(probs, dtype)
        rewriter.replace(op, [], [e.emit(T.MatmulOp(probs, v, dtype, transpose_rhs=False))])

    @staticmethod
    def _repeat_heads(e: Emitter, t: SSAValue, heads: int) -> SSAValue:
        b, hkv, s, d = _shape(t)
        g = heads // hkv
        wide = e.broadcast(t, [b, hkv, g, s, d], [0, 1, 3, 4])
        return e.reshape(wide, [b, heads, s, d])


class LowerSilu(TorchLowering):
    """x * sigmoid(x), computed in f32 for low-precision x, rounded once."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.SiluOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        xf = e.cast(op.x, compute_dtype(_dtype(op.x)))
        y = e.emit(T.MulOp(xf, e.emit(T.SigmoidOp(xf))))
        rewriter.replace(op, [], [e.cast(y, _dtype(op.result))])


class LowerGelu(TorchLowering):
    """x * 0.5 * (1 + erf(x / sqrt 2)), or with tanh(sqrt(2/pi) * (x + 0.044715 x^3))."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.GeluOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x = e.cast(op.x, compute_dtype(_dtype(op.x)))
        if op.approximate.data == "tanh":
            cube = e.emit(T.MulOp(e.emit(T.MulOp(x, x)), x))
            inner = e.emit(T.AddOp(x, e.emit(T.MulOp(cube, e.splat(0.044715, x)))))
            t = e.emit(T.TanhOp(e.emit(T.MulOp(inner, e.splat(math.sqrt(2.0 / math.pi), x)))))
        else:
            t = e.emit(T.ErfOp(e.emit(T.MulOp(x, e.splat(math.sqrt(0.5), x)))))
        half = e.emit(T.MulOp(x, e.splat(0.5, x)))
        y = e.emit(T.MulOp(half, e.emit(T.AddOp(t, e.splat(1.0, t)))))
        rewriter.replace(op, [], [e.cast(y, _dtype(op.result))])


# ------------------------------------------------------------------------------------------
# Elementwise
# ------------------------------------------------------------------------------------------


class LowerBinary(TorchLowering):
    """a (op) alpha * b: cast to the promoted dtype, broadcast, one tensor op."""

    OPS: dict[type[Operation], type[T.BinaryOp]] = {
        P.AddOp: T.AddOp,
        P.SubOp: T.SubOp,
        P.MulOp: T.MulOp,
        P.DivOp: T.DivOp,
        P.MaximumOp: T.MaxOp,
        P.MinimumOp: T.MinOp,
    }

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        cls = self.OPS.get(type(op))
        if cls is None:
            return
        e = self.emitter(op, rewriter)
        shape, dtype = _shape(op.results[0]), _dtype(op.results[0])
        alpha = _float(getattr(op, "alpha", None), 1.0)
        # a scaled b is computed in f32 and rounded once, as PyTorch does
        cd = dtype if alpha == 1.0 else compute_dtype(dtype)
        a, b = (e.broadcast(e.cast(v, cd), shape) for v in op.operands)
        if alpha != 1.0:
            b = e.emit(T.MulOp(b, e.splat(alpha, b)))
        rewriter.replace(op, [], [e.cast(e.emit(cls(a, b)), dtype)])


class LowerScalar(TorchLowering):
    """x + value / x * value: in f32 for low-precision x (the scalar is not rounded), rounded once."""

    OPS: dict[type[Operation], type[T.BinaryOp]] = {P.AddScalarOp: T.AddOp, P.MulScalarOp: T.MulOp}

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        cls = self.OPS.get(type(op))
        if cls is None:
            return
        assert isinstance(op, P.AddScalarOp | P.MulScalarOp)
        e = self.emitter(op, rewriter)
        xf = e.cast(op.x, compute_dtype(_dtype(op.x)))
        y = e.emit(cls(xf, e.splat(_float(op.value, 0.0), xf)))
        rewriter.replace(op, [], [e.cast(y, _dtype(op.result))])


class LowerUnary(TorchLowering):
    """neg, rsqrt, sqrt, exp, tanh, sigmoid: one tensor op (computed exactly, rounded once, like PyTorch)."""

    OPS: dict[type[Operation], type[T.UnaryOp]] = {
        P.NegOp: T.NegOp,
        P.RsqrtOp: T.RsqrtOp,
        P.SqrtOp: T.SqrtOp,
        P.ExpOp: T.ExpOp,
        P.TanhOp: T.TanhOp,
        P.SigmoidOp: T.SigmoidOp,
    }

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        cls = self.OPS.get(type(op))
        if cls is None:
            return
        e = self.emitter(op, rewriter)
        rewriter.replace(op, [], [e.emit(cls(op.operands[0]))])


class LowerMatmul(TorchLowering):
    """a @ b: the batch dims broadcast to the result's, then one `tensor.matmul` (b as [..., K, N],
    accumulated in f32, rounded once)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.MatmulOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        batch = list(_shape(op.result)[:-2])
        a = e.broadcast(op.a, batch + list(_shape(op.a)[-2:]))
        b = e.broadcast(op.b, batch + list(_shape(op.b)[-2:]))
        rewriter.replace(op, [], [e.emit(T.MatmulOp(a, b, _dtype(op.result), transpose_rhs=False))])


class LowerRelu(TorchLowering):
    """max(x, 0): exact in x's own type."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.ReluOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        rewriter.replace(op, [], [e.emit(T.MaxOp(op.x, e.splat(0.0, op.x)))])


class LowerAbs(TorchLowering):
    """max(x, -x): exact in x's own type."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.AbsOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        rewriter.replace(op, [], [e.emit(T.MaxOp(op.x, e.emit(T.NegOp(op.x))))])


class LowerClamp(TorchLowering):
    """min(max(x, lo), hi) with the bounds in x's type: exact, as each result is x or a bound
    (a bound rounds to x's type as PyTorch's result does)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.ClampOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        low, high = op.bounds()
        y: SSAValue = op.x
        if low is not None:
            y = e.emit(T.MaxOp(y, e.splat(low, y)))
        if high is not None:
            y = e.emit(T.MinOp(y, e.splat(high, y)))
        rewriter.replace(op, [], [y])


class LowerPowScalar(TorchLowering):
    """x ** 2 and x ** 3 as products, 0.5 / -0.5 / -1 as sqrt / rsqrt / reciprocal, in f32 for
    low-precision x, rounded once."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.PowScalarOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x = e.cast(op.x, compute_dtype(_dtype(op.x)))
        exponent = _float(op.value, 1.0)
        if exponent == 0.5:
            y = e.emit(T.SqrtOp(x))
        elif exponent == -0.5:
            y = e.emit(T.RsqrtOp(x))
        elif exponent == -1.0:
            y = e.emit(T.RecipOp(x))
        else:
            y = x
            for _ in range(int(exponent) - 1):
                y = e.emit(T.MulOp(y, x))
        rewriter.replace(op, [], [e.cast(y, _dtype(op.result))])


class LowerSoftmax(TorchLowering):
    """exp(x - max) / sum over the last axis, in f32 for low-precision x, rounded once."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.SoftmaxOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x = e.cast(op.x, compute_dtype(_dtype(op.x)))
        ex = e.emit(T.ExpOp(e.emit(T.SubOp(x, e.reduce_last(T.ReduceMaxOp, x, "rowmax")))), "ex")
        probs = e.emit(T.DivOp(ex, e.reduce_last(T.SumOp, ex, "rowsum")), "probs")
        rewriter.replace(op, [], [e.cast(probs, _dtype(op.result))])


class LowerMean(TorchLowering):
    """sum over dims (in f32 for low-precision x) times 1/count, rounded once; keepdim
    reshapes the reduced axes back in with extent 1."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.MeanOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x = e.cast(op.x, compute_dtype(_dtype(op.x)))
        dims = [int(d) for d in op.dims.get_values()]
        count = math.prod(_shape(x)[d] for d in dims)
        s = e.emit(T.SumOp(x, dims), "sum")
        mean = e.emit(T.MulOp(s, e.splat(1.0 / count, s)), "mean")
        mean = e.reshape(mean, _shape(op.result))
        rewriter.replace(op, [], [e.cast(mean, _dtype(op.result))])


class LowerSum(TorchLowering):
    """sum over dims (in f32 for low-precision x), rounded once; keepdim reshapes the reduced
    axes back in with extent 1."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.SumOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        x = e.cast(op.x, compute_dtype(_dtype(op.x)))
        s = e.emit(T.SumOp(x, [int(d) for d in op.dims.get_values()]), "sum")
        rewriter.replace(op, [], [e.cast(e.reshape(s, _shape(op.result)), _dtype(op.result))])


class LowerAmax(TorchLowering):
    """max over dims, exact in x's own type; keepdim as for sum."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.AmaxOp, rewriter: PatternRewriter):
        e = self.emitter(op, rewriter)
        m = e.emit(T.ReduceMaxOp(op.x, [int(d) for d in op.dims.get_values()]), "amax")
        rewriter.replace(op, [], [e.reshape(m, _shape(op.result))])


# ------------------------------------------------------------------------------------------
# Casts and layout
# ------------------------------------------------------------------------------------------


class LowerTo(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.ToOp, rewriter: PatternRewriter):
        rewriter.replace(op, [], [self.emitter(op, rewriter).cast(op.x, _dtype(op.result))])


class LowerView(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.ViewOp, rewriter: PatternRewriter):
        rewriter.replace(op, [], [self.emitter(op, rewriter).reshape(op.x, _shape(op.result))])


class LowerExpand(TorchLowering):
    """One `tensor.broadcast`, right-aligned as PyTorch broadcasts."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.ExpandOp, rewriter: PatternRewriter):
        rewriter.replace(op, [], [self.emitter(op, rewriter).broadcast(op.x, _shape(op.result))])


class LowerTranspose(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.TransposeOp, rewriter: PatternRewriter):
        a, b = (int(d) for d in op.dims.get_values())
        perm = list(range(len(_shape(op.x))))
        perm[a], perm[b] = perm[b], perm[a]
        rewriter.replace(op, [], [self.emitter(op, rewriter).emit(T.TransposeOp(op.x, perm))])


class LowerPermute(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.PermuteOp, rewriter: PatternRewriter):
        perm = [int(p) for p in op.perm.get_values()]
        rewriter.replace(op, [], [self.emitter(op, rewriter).emit(T.TransposeOp(op.x, perm))])


class LowerSlice(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.SliceOp, rewriter: PatternRewriter):
        rank, dim = len(_shape(op.x)), op.dim.value.data
        starts, strides = [0] * rank, [1] * rank
        starts[dim], strides[dim] = op.start.value.data, op.step.value.data
        new = T.SliceOp(op.x, starts, _shape(op.result), strides)
        rewriter.replace(op, [], [self.emitter(op, rewriter).emit(new)])


class LowerCat(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.CatOp, rewriter: PatternRewriter):
        # an operand with no extent along the axis adds nothing (Phi-3 concatenates the rotated
        # part of a head with the part rotary leaves, which is empty when rotary takes all of it)
        xs = [x for x in op.xs if _shape(x)[op.dim.value.data] > 0] or [op.xs[0]]
        if len(xs) == 1:
            rewriter.replace(op, [], [xs[0]])
            return
        new = T.ConcatOp(xs, op.dim.value.data)
        rewriter.replace(op, [], [self.emitter(op, rewriter).emit(new)])


class LowerEmbedding(TorchLowering):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: P.EmbeddingOp, rewriter: PatternRewriter):
        new = T.GatherRowsOp(op.weight, op.ids)
        rewriter.replace(op, [], [self.emitter(op, rewriter).emit(new)])


PATTERNS: tuple[type[TorchLowering], ...] = (
    LowerRmsNorm,
    LowerLayerNorm,
    LowerLinear,
    LowerScaledDotProductAttention,
    LowerSilu,
    LowerGelu,
    LowerBinary,
    LowerScalar,
    LowerUnary,
    LowerMatmul,
    LowerRelu,
    LowerAbs,
    LowerClamp,
    LowerPowScalar,
    LowerSoftmax,
    LowerMean,
    LowerSum,
    LowerAmax,
    LowerTo,
    LowerView,
    LowerExpand,
    LowerTranspose,
    LowerPermute,
    LowerSlice,
    LowerCat,
    LowerEmbedding,
)


@dataclass(frozen=True)
class ConvertTorchToTensorPass(ModulePass):
    """Decompose torch ops into tensor primitives (see the module docstring)."""

    name = "convert-torch-to-tensor"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        require_input_stage(op, self.name)
        labels: dict[Operation, str] = {}
        for f in op.walk():
            if isinstance(f, func.FuncOp):
                labels.update(origin_labels(f))
        patterns = [p(labels) for p in PATTERNS]
        PatternRewriteWalker(
            GreedyRewritePatternApplier(patterns, dce_enabled=False), apply_recursively=False
        ).rewrite_module(op)
        _erase_unused_empty(op)
        for left in op.walk():
            where = left.parent_op()
            fn = f" in @{where.sym_name.data}" if isinstance(where, func.FuncOp) else ""
            if left.name.startswith("torch."):
                raise EmmyError(
                    f"convert-torch-to-tensor: no lowering for '{left.name}'{fn} "
                    f"(stage torch->tensor)"
                )
            empty = [r for r in left.results if _empty(r)]
            if empty:
                raise EmmyError(
                    f"convert-torch-to-tensor: '{left.name}'{fn} makes an empty tensor ({empty[0].type}) that "
                    f"is used; empty tensors are supported only as operands of a concatenation (stage torch->tensor)"
                )


def _empty(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and 0 in value.type.get_shape()


def _erase_unused_empty(module: builtin.ModuleOp) -> None:
    """Erase tensor ops whose results hold no elements and are no longer used (the slices that fed
    a concatenation's empty operands), last first so that their empty operands go too."""
    for op in reversed(list(module.walk())):
        if op.name.startswith("tensor.") and not any(r.uses for r in op.results) and any(map(_empty, op.results)):
            op.detach()
            op.erase()
