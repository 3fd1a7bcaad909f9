"""Captured graph -> torch-stage IR: one `func.func` of `torch` dialect ops.

Every recorded op name is looked up in `OP_TABLE` (the one place mapping PyTorch ops to the
`torch` dialect). A name missing from it raises
`EmmyError("unsupported torch op 'aten.xxx' at <module path> (stage: torch import)")`.
Each builder returns the SSA values of the node's outputs; the importer then checks that their
types equal the shapes and dtypes PyTorch actually produced, so a wrong mapping cannot pass
silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    ModuleOp,
    StringAttr,
    TensorType,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from emmy.dialects import torch as T
from emmy.diagnostics import EmmyError
from emmy.frontend.graph import INPLACE_ARITHMETIC, Constant, Graph, Node, Value

_DTYPES: dict[torch.dtype, Callable[[], Attribute]] = {
    torch.bfloat16: BFloat16Type,
    torch.float16: Float16Type,
    torch.float32: Float32Type,
    torch.float64: Float64Type,
    torch.int64: lambda: i64,
    torch.int32: lambda: i32,
    torch.bool: lambda: i1,
}


def element_type(dtype: torch.dtype) -> Attribute:
    if dtype not in _DTYPES:
        raise EmmyError(f"tensors of dtype {dtype} are not supported (stage: torch import)")
    return _DTYPES[dtype]()


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> TensorType:
    return TensorType(element_type(dtype), list(shape))


class Unsupported(Exception):
    """A builder cannot express this call (the message says why)."""


class _Builder:
    """Appends ops to one block and maps captured `Value`s to SSA values."""

    def __init__(self, block: Block):
        self.block = block
        self.ssa: dict[int, SSAValue] = {}
        self.node: Node | None = None

    def value(self, v: Any) -> SSAValue:
        if isinstance(v, Value):
            return self.ssa[v.index]
        if isinstance(v, Constant):
            raise Unsupported(
                f"a constant tensor {list(v.shape)} {v.dtype} (only inputs, parameters and "
                "computed tensors can be operands)"
            )
        raise Unsupported(f"expected a tensor operand, got {v!r}")

    def add(self, op: Operation, hint: str | None = None) -> SSAValue:
        self.block.add_op(op)
        res = op.results[0]
        res.name_hint = hint or _default_hint(self.node, op)
        return res


def _default_hint(node: Node | None, op: Operation) -> str:
    short = op.name.split(".", 1)[1]
    if node is not None and node.module_path and short in ("linear", "rms_norm", "layer_norm", "embedding"):
        return node.module_path.rsplit(".", 1)[-1]
    return short


def _arg(node: Node, i: int, name: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _is_tensor(v: Any) -> bool:
    return isinstance(v, (Value, Constant))


def _out(node: Node) -> Value:
    return node.outputs[0]


# ------------------------------------------------------------------------------------ builders
Builder = Callable[[_Builder, Node], Sequence[SSAValue]]


def _identity(b: _Builder, node: Node) -> Sequence[SSAValue]:
    return [b.value(node.args[0])]


def _drop(b: _Builder, node: Node) -> Sequence[SSAValue]:
    return []


def _rms_norm(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x, w = b.value(node.args[0]), b.value(node.args[1])
    return [b.add(T.RmsNormOp(x, w, float(_arg(node, 2, "eps"))))]


def _layer_norm(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    shape = _arg(node, 1, "normalized_shape")
    weight, bias = _arg(node, 2, "weight"), _arg(node, 3, "bias")
    if len(shape) != 1:
        raise Unsupported("layer_norm needs a 1-D normalized shape")
    eps = float(_arg(node, 4, "eps", 1e-5))
    if weight is None or bias is None:
        return [_layer_norm_by_parts(b, x, weight, bias, eps)]
    return [b.add(T.LayerNormOp(x, b.value(weight), b.value(bias), eps))]


def _layer_norm_by_parts(b: _Builder, x: SSAValue, weight: Any, bias: Any, eps: float) -> SSAValue:
    """A LayerNorm without a weight or a bias (OLMo's has neither), in the ops it is made of:
    `(x - mean) * rsqrt(var + eps)`, then `* weight` and `+ bias` where given, computed in float32
    and rounded once, as `torch.layer_norm` does."""
    last, narrow, f32 = len(T.shape_of(x)) - 1, T.dtype_of(x), element_type(torch.float32)
    xf = x if narrow == f32 else b.add(T.ToOp(x, f32), "xf")
    centered = b.add(T.SubOp(xf, b.add(T.MeanOp(xf, [last], True), "mean")), "centered")
    var = b.add(T.MeanOp(b.add(T.MulOp(centered, centered), "sq"), [last], True), "var")
    y = b.add(T.MulOp(centered, b.add(T.RsqrtOp(b.add(T.AddScalarOp(var, eps), "var_eps")), "rstd")), "normed")
    for operand, cls in ((weight, T.MulOp), (bias, T.AddOp)):
        if operand is not None:
            w = b.value(operand)
            y = b.add(cls(y, w if T.dtype_of(w) == f32 else b.add(T.ToOp(w, f32))))
    return y if narrow == f32 else b.add(T.ToOp(y, narrow), "layer_norm")


def _linear(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x, w = b.value(node.args[0]), b.value(_arg(node, 1, "weight"))
    bias = _arg(node, 2, "bias")
    return [b.add(T.LinearOp(x, w, None if bias is None else b.value(bias)))]


def _sdpa(b: _Builder, node: Node) -> Sequence[SSAValue]:
    q, k, v = (b.value(_arg(node, i, n)) for i, n in enumerate(("query", "key", "value")))
    if _arg(node, 3, "attn_mask") is not None:
        raise Unsupported("scaled_dot_product_attention with an attn_mask")
    if float(_arg(node, 4, "dropout_p", 0.0)) != 0.0:
        raise Unsupported("scaled_dot_product_attention with dropout")
    is_causal = bool(_arg(node, 5, "is_causal", False))
    scale = _arg(node, 6, "scale")
    if scale is None:
        scale = 1.0 / math.sqrt(T.shape_of(q)[-1])
    gqa = bool(_arg(node, 7, "enable_gqa", False))
    op = T.ScaledDotProductAttentionOp(q, k, v, is_causal=is_causal, scale=float(scale), enable_gqa=gqa)
    return [b.add(op, "attn")]


def _unary(cls: type[T._Unary]) -> Builder:
    def build(b: _Builder, node: Node) -> Sequence[SSAValue]:
        if node.kwargs.get("inplace") or (len(node.args) > 1 and node.args[1] is True):
            raise Unsupported("in-place activation")
        return [b.add(cls(b.value(node.args[0])))]

    return build


def _gelu(b: _Builder, node: Node) -> Sequence[SSAValue]:
    return [b.add(T.GeluOp(b.value(node.args[0]), str(_arg(node, 1, "approximate", "none"))))]


def _pow(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x, e = node.args[0], _arg(node, 1, "exponent")
    if not _is_tensor(x) or _is_tensor(e):
        raise Unsupported("pow with a tensor exponent (a tensor to a number's power is supported)")
    e = _scalar(e)
    if e not in T.POW_EXPONENTS:
        raise Unsupported(f"pow with exponent {e:g} (supported: {T.POW_EXPONENTS_TEXT})")
    return [b.add(T.PowScalarOp(b.value(x), e))]


def _softmax(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    if node.op == "aten._softmax":  # export: (x, dim, half_to_float)
        if _arg(node, 2, "half_to_float", False):
            raise Unsupported("softmax with half_to_float")
    elif _arg(node, 2, "dtype") is not None:
        raise Unsupported("softmax with a dtype argument")
    rank = len(T.shape_of(x))
    dim = _dim(int(_arg(node, 1, "dim", -1)), rank)
    if dim != rank - 1:
        raise Unsupported(f"softmax over dimension {dim} (only the last, {rank - 1}, is supported)")
    return [b.add(T.SoftmaxOp(x, dim))]


def _reduction(cls: type[T._Reduction], what: str) -> Builder:
    """mean / sum / amax over `dim` (an int, a list, or none: every axis), `keepdim`."""

    def build(b: _Builder, node: Node) -> Sequence[SSAValue]:
        x = b.value(node.args[0])
        if node.kwargs.get("dtype") is not None or (len(node.args) > 3 and node.args[3] is not None):
            raise Unsupported(f"{what} with a dtype argument")
        rank = len(T.shape_of(x))
        if rank == 0:
            raise Unsupported(f"{what} of a 0-d tensor")
        dim = _arg(node, 1, "dim")
        dims = range(rank) if dim is None or dim == [] or dim == () else [dim] if isinstance(dim, int) else list(dim)
        dims = sorted({_dim(int(d), rank) for d in dims})
        return [b.add(cls(x, dims, bool(_arg(node, 2, "keepdim", False))))]

    return build


def _clamp(b: _Builder, node: Node) -> Sequence[SSAValue]:
    """clamp / clip (min, max), clamp_min, clamp_max, with numbers as bounds."""
    name = node.op.rsplit(".", 1)[-1]
    x = node.args[0]
    if name == "clamp_min":
        low, high = _arg(node, 1, "min"), None
    elif name == "clamp_max":
        low, high = None, _arg(node, 1, "max")
    else:
        low, high = _arg(node, 1, "min"), _arg(node, 2, "max")
    if _is_tensor(low) or _is_tensor(high):
        raise Unsupported("clamp with tensor bounds (numbers are supported)")
    if low is None and high is None:
        raise Unsupported("clamp without a min or a max")
    low = None if low is None else _scalar(low)
    high = None if high is None else _scalar(high)
    if low is not None and high is not None and low > high:
        raise Unsupported(f"clamp with min {low:g} above max {high:g}")
    return [b.add(T.ClampOp(b.value(x), low, high))]


def _matmul(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x, y = node.args[0], _arg(node, 1, "other", _arg(node, 1, "mat2"))
    if not (_is_tensor(x) and _is_tensor(y)):
        raise Unsupported("matmul with a number")
    x, y = b.value(x), b.value(y)
    if len(T.shape_of(x)) < 2 or len(T.shape_of(y)) < 2:
        raise Unsupported("matmul of a vector (both operands need rank 2 or more)")
    if T.dtype_of(x) != T.dtype_of(y):
        raise Unsupported(f"matmul of {T.dtype_of(x)} and {T.dtype_of(y)} (one element type)")
    if T.broadcast_shapes(T.shape_of(x)[:-2], T.shape_of(y)[:-2]) is None:
        raise Unsupported("matmul whose batch dims do not broadcast")
    return [b.add(T.MatmulOp(x, y))]


def _elementwise_pair(cls: type[T._Binary]) -> Builder:
    def build(b: _Builder, node: Node) -> Sequence[SSAValue]:
        a, other = node.args[0], _arg(node, 1, "other")
        if not (_is_tensor(a) and _is_tensor(other)):
            raise Unsupported(f"{cls.name} of a tensor and a number (both operands must be tensors)")
        return [b.add(cls(b.value(a), b.value(other)))]

    return build


def _scalar(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unsupported(f"expected a number, got {v!r}")
    return float(v)


def _add(b: _Builder, node: Node) -> Sequence[SSAValue]:
    a, other = node.args[0], _arg(node, 1, "other")
    alpha = _scalar(node.kwargs.get("alpha", 1))
    if _is_tensor(other):
        return [b.add(T.AddOp(b.value(a), b.value(other), None if alpha == 1 else alpha))]
    return [b.add(T.AddScalarOp(b.value(a), _scalar(other) * alpha))]


def _sub(b: _Builder, node: Node) -> Sequence[SSAValue]:
    a, other = node.args[0], _arg(node, 1, "other")
    alpha = _scalar(node.kwargs.get("alpha", 1))
    if _is_tensor(other):
        return [b.add(T.SubOp(b.value(a), b.value(other), None if alpha == 1 else alpha))]
    return [b.add(T.AddScalarOp(b.value(a), -_scalar(other) * alpha), "sub")]


def _rsub(b: _Builder, node: Node) -> Sequence[SSAValue]:  # other - x
    x, other = node.args[0], node.args[1]
    if _is_tensor(other):
        return [b.add(T.SubOp(b.value(other), b.value(x)))]
    neg = b.add(T.NegOp(b.value(x)))
    return [b.add(T.AddScalarOp(neg, _scalar(other)), "rsub")]


def _mul(b: _Builder, node: Node) -> Sequence[SSAValue]:
    a, other = node.args[0], _arg(node, 1, "other")
    if _is_tensor(other):
        return [b.add(T.MulOp(b.value(a), b.value(other)))]
    return [b.add(T.MulScalarOp(b.value(a), _scalar(other)))]


def _div(b: _Builder, node: Node) -> Sequence[SSAValue]:
    a, other = node.args[0], _arg(node, 1, "other")
    if node.kwargs.get("rounding_mode") is not None:
        raise Unsupported("division with a rounding_mode")
    if _is_tensor(other):
        return [b.add(T.DivOp(b.value(a), b.value(other)))]
    return [b.add(T.MulScalarOp(b.value(a), 1.0 / _scalar(other)), "div")]


def _to(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x, out = b.value(node.args[0]), _out(node)
    if tuple(T.shape_of(x)) != out.shape:
        raise Unsupported("a conversion that changes the shape")
    if T.dtype_of(x) == element_type(out.dtype):
        return [x]
    return [b.add(T.ToOp(x, element_type(out.dtype)))]


def _to_captured_shape(cls: type[T.ViewOp] | type[T.ExpandOp]) -> Builder:
    """An op whose result type carries the captured output's shape (view / reshape / ...:
    `ViewOp`; expand / expand_as / broadcast_to: `ExpandOp`); none when the shape is x's."""

    def build(b: _Builder, node: Node) -> Sequence[SSAValue]:
        x, out = b.value(node.args[0]), _out(node)
        if T.shape_of(x) == out.shape:
            return [x]
        return [b.add(cls(x, out.shape))]

    return build


_view = _to_captured_shape(T.ViewOp)
_expand = _to_captured_shape(T.ExpandOp)


def _transpose(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    rank = len(T.shape_of(x))
    d0 = _dim(int(_arg(node, 1, "dim0")), rank)
    d1 = _dim(int(_arg(node, 2, "dim1")), rank)
    if d0 == d1:
        return [x]
    return [b.add(T.TransposeOp(x, min(d0, d1), max(d0, d1)))]


def _t(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    if len(T.shape_of(x)) < 2:
        return [x]
    return [b.add(T.TransposeOp(x, 0, 1), "transpose")]


def _big_t(b: _Builder, node: Node) -> Sequence[SSAValue]:  # x.T: every axis reversed
    x = b.value(node.args[0])
    rank = len(T.shape_of(x))
    if rank <= 2:
        return _t(b, node)
    return [b.add(T.PermuteOp(x, list(reversed(range(rank)))))]


def _permute(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    rank = len(T.shape_of(x))
    dims = node.args[1:] if len(node.args) > 1 else (node.kwargs["dims"],)
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    perm = [_dim(int(d), rank) for d in dims]
    if perm == list(range(rank)):
        return [x]
    return [b.add(T.PermuteOp(x, perm))]


def _slice(b: _Builder, x: SSAValue, dim: int, s: slice) -> SSAValue:
    size = T.shape_of(x)[dim]
    start, stop, step = s.indices(size)
    if step < 1:
        raise Unsupported("a slice with a negative step")
    stop = max(stop, start)
    if (start, stop, step) == (0, size, 1):
        return x
    return b.add(T.SliceOp(x, dim, start, stop, step))


def _getitem(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    index = node.args[1]
    items = list(index) if isinstance(index, tuple) else [index]
    if any(_is_tensor(i) or isinstance(i, (list, bool)) for i in items):
        raise Unsupported("indexing with tensors or lists (aten.index)")
    rank = len(T.shape_of(x))
    n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k : k + 1] = [slice(None)] * (rank - n_real)
    dim = 0
    for item in items:
        if item is None:
            continue
        if isinstance(item, int):
            size = T.shape_of(x)[dim]
            i = item + size if item < 0 else item
            x = _slice(b, x, dim, slice(i, i + 1))
        elif isinstance(item, slice):
            x = _slice(b, x, dim, item)
        else:
            raise Unsupported(f"index {item!r}")
        dim += 1
    out = _out(node)
    if T.shape_of(x) != out.shape:
        x = b.add(T.ViewOp(x, out.shape))
    return [x]


def _aten_slice(b: _Builder, node: Node) -> Sequence[SSAValue]:  # aten.slice(x, dim, start, end, step)
    x = b.value(node.args[0])
    dim = _dim(int(_arg(node, 1, "dim", 0)), len(T.shape_of(x)))
    start, end, step = _arg(node, 2, "start"), _arg(node, 3, "end"), _arg(node, 4, "step", 1)
    return [_slice(b, x, dim, slice(start, end, step))]


def _select(b: _Builder, node: Node) -> Sequence[SSAValue]:  # x[..., i, ...] (aten.select)
    x = b.value(node.args[0])
    dim = _dim(int(_arg(node, 1, "dim")), len(T.shape_of(x)))
    size = T.shape_of(x)[dim]
    i = int(_arg(node, 2, "index"))
    i = i + size if i < 0 else i
    x = _slice(b, x, dim, slice(i, i + 1))
    return [b.add(T.ViewOp(x, _out(node).shape))]


def _narrow(b: _Builder, node: Node) -> Sequence[SSAValue]:
    x = b.value(node.args[0])
    dim = _dim(int(_arg(node, 1, "dim")), len(T.shape_of(x)))
    start, length = int(_arg(node, 2, "start")), int(_arg(node, 3, "length"))
    start = start + T.shape_of(x)[dim] if start < 0 else start
    return [_slice(b, x, dim, slice(start, start + length))]


def _chunk(b: _Builder, node: Node) -> Sequence[SSAValue]:
    """`chunk(x, n, dim)` / `split(x, size_or_sizes, dim)`: one slice per output."""
    x = b.value(node.args[0])
    rank = len(T.shape_of(x))
    dim = _dim(int(_arg(node, 2, "dim", 0)), rank)
    extent = T.shape_of(x)[dim]
    how = _arg(node, 1, "chunks" if node.op == "aten.chunk" else "split_size_or_sections")
    if node.op == "aten.chunk":
        step = -(-extent // int(how))
        sizes = [min(step, extent - i) for i in range(0, extent, step)]
    elif isinstance(how, int):
        sizes = [min(int(how), extent - i) for i in range(0, extent, int(how))]
    else:
        sizes = [int(v) for v in how]
    if sum(sizes) != extent or len(sizes) != len(node.outputs):
        raise Unsupported(f"{node.op} into {sizes} along an axis of {extent}")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [_slice(b, x, dim, slice(a, a + n)) for a, n in zip(starts, sizes)]


def _cat(b: _Builder, node: Node) -> Sequence[SSAValue]:
    xs = [b.value(v) for v in _arg(node, 0, "tensors")]
    dim = _arg(node, 1, "dim", node.kwargs.get("axis", 0))
    dim = _dim(int(dim), len(T.shape_of(xs[0])))
    if len(xs) == 1:
        return xs
    return [b.add(T.CatOp(xs, dim))]


def _stack(b: _Builder, node: Node) -> Sequence[SSAValue]:
    """`stack(xs, dim)`: each input viewed with a new axis of extent 1 at dim, then concatenated
    along it (Cohere's rotary interleaves its halves this way)."""
    xs = [b.value(v) for v in _arg(node, 0, "tensors")]
    shape = list(T.shape_of(xs[0]))
    dim = _dim(int(_arg(node, 1, "dim", 0)), len(shape) + 1)
    views = [b.add(T.ViewOp(x, tuple(shape[:dim] + [1] + shape[dim:]))) for x in xs]
    return [views[0] if len(views) == 1 else b.add(T.CatOp(views, dim))]


def _repeat_interleave(b: _Builder, node: Node) -> Sequence[SSAValue]:
    """`repeat_interleave(x, n, dim)`: each element n times in a row along dim, as a view with a
    new axis of extent 1 after dim, expanded to n and merged back (GPT-J's, CodeGen's and GLM's
    rotary tables, whose pairs of columns share an angle)."""
    x = b.value(node.args[0])
    repeats, dim = _arg(node, 1, "repeats"), _arg(node, 2, "dim")
    if _is_tensor(repeats) or isinstance(repeats, (list, tuple)):
        raise Unsupported("repeat_interleave with a tensor of repeats")
    if dim is None:
        raise Unsupported("repeat_interleave without a dim (it flattens its input)")
    shape = list(T.shape_of(x))
    dim, n = _dim(int(dim), len(shape)), int(repeats)
    if n == 1:
        return [x]
    one = b.add(T.ViewOp(x, tuple(shape[: dim + 1] + [1] + shape[dim + 1 :])))
    wide = b.add(T.ExpandOp(one, tuple(shape[: dim + 1] + [n] + shape[dim + 1 :])))
    return [b.add(T.ViewOp(wide, _out(node).shape))]


def _embedding(b: _Builder, node: Node) -> Sequence[SSAValue]:
    ids, weight = b.value(node.args[0]), b.value(_arg(node, 1, "weight"))
    if _arg(node, 3, "max_norm") is not None:
        raise Unsupported("embedding with max_norm")
    return [b.add(T.EmbeddingOp(weight, ids))]


def _dropout(b: _Builder, node: Node) -> Sequence[SSAValue]:
    training = _arg(node, 2, "training", node.kwargs.get("train", True))
    p, training = float(_arg(node, 1, "p", 0.5)), bool(training)
    if training and p != 0.0:
        raise Unsupported("dropout in training mode")
    return [b.value(node.args[0])]


# The one table: recorded op name -> builder. Names are aten op names, plus the Python-level
# aliases that reach the same op (`float()` is `to`, `__getitem__` is slice/select/unsqueeze).
# The capture tracer records torch-level calls (`aten.getitem`, `aten.float`); the export tracer
# records aten overloads by schema name (`aten.slice`, `aten.select`, `aten._to_copy`), with
# arguments normalized to the torch-level order (see `emmy.frontend.export`).
OP_TABLE: dict[str, Builder] = {
    "emmy.hf_rms_norm": _rms_norm,
    "aten.layer_norm": _layer_norm,
    "aten.linear": _linear,
    "aten.scaled_dot_product_attention": _sdpa,
    "aten.silu": _unary(T.SiluOp),
    "aten.gelu": _gelu,
    "aten.neg": _unary(T.NegOp),
    "aten.negative": _unary(T.NegOp),
    "aten.rsqrt": _unary(T.RsqrtOp),
    "aten.sqrt": _unary(T.SqrtOp),
    "aten.exp": _unary(T.ExpOp),
    "aten.tanh": _unary(T.TanhOp),
    "aten.sigmoid": _unary(T.SigmoidOp),
    "aten.relu": _unary(T.ReluOp),
    "aten.pow": _pow,
    "aten.softmax": _softmax,
    "aten._softmax": _softmax,
    "aten.mean": _reduction(T.MeanOp, "mean"),
    "aten.sum": _reduction(T.SumOp, "sum"),
    "aten.amax": _reduction(T.AmaxOp, "amax"),
    "aten.abs": _unary(T.AbsOp),
    "aten.absolute": _unary(T.AbsOp),
    "aten.clamp": _clamp,
    "aten.clip": _clamp,
    "aten.clamp_min": _clamp,
    "aten.clamp_max": _clamp,
    "aten.matmul": _matmul,
    "aten.bmm": _matmul,
    "aten.maximum": _elementwise_pair(T.MaximumOp),
    "aten.minimum": _elementwise_pair(T.MinimumOp),
    "aten.add": _add,
    "aten.sub": _sub,
    "aten.subtract": _sub,
    "aten.rsub": _rsub,
    "aten.mul": _mul,
    "aten.multiply": _mul,
    "aten.div": _div,
    "aten.divide": _div,
    "aten.true_divide": _div,
    "aten.to": _to,
    "aten._to_copy": _to,
    "aten.type": _to,
    "aten.type_as": _to,
    "aten.float": _to,
    "aten.half": _to,
    "aten.bfloat16": _to,
    "aten.double": _to,
    "aten.view": _view,
    "aten.reshape": _view,
    "aten.unsqueeze": _view,
    "aten.squeeze": _view,
    "aten.flatten": _view,
    "aten.unflatten": _view,
    "aten.view_as": _view,
    "aten.reshape_as": _view,
    "aten.expand": _expand,
    "aten.expand_as": _expand,
    "aten.broadcast_to": _expand,
    "aten.transpose": _transpose,
    "aten.swapaxes": _transpose,
    "aten.swapdims": _transpose,
    "aten.t": _t,
    "aten.T": _big_t,
    "aten.numpy_T": _big_t,  # x.T as torch.export records it
    "aten.permute": _permute,
    "aten.getitem": _getitem,
    "aten.narrow": _narrow,
    "aten.slice": _aten_slice,
    "aten.select": _select,
    "aten.cat": _cat,
    "aten.chunk": _chunk,
    "aten.split": _chunk,
    "aten.concat": _cat,
    "aten.concatenate": _cat,
    "aten.stack": _stack,
    "aten.repeat_interleave": _repeat_interleave,
    "aten.embedding": _embedding,
    "aten.contiguous": _identity,
    "aten.clone": _identity,
    "aten.alias": _identity,
    "aten.detach": _identity,
    "aten.data": _identity,
    "aten.dropout": _dropout,
    "aten._assert_tensor_metadata": _drop,
}
# In-place arithmetic as its out-of-place op (each tracer checks that nothing else sees the tensor).
OP_TABLE |= {name: OP_TABLE[name.removesuffix("_")] for name in INPLACE_ARITHMETIC}


def unsupported(op: str, where: str, why: str | None = None) -> EmmyError:
    msg = f"unsupported torch op '{op}' at {where} (stage: torch import)"
    return EmmyError(msg + (f": {why}" if why else ""))


def import_graph(
    graph: Graph,
    func_name: str,
    arg_names: Sequence[tuple[str, str]] | None = None,
    module_attrs: dict[str, Attribute] | None = None,
) -> ModuleOp:
    """Build `builtin.module { func.func @<func_name>(inputs..., params...) }`.

    `arg_names` overrides the (emmy.name, emmy.role) of each argument; by default inputs have
    role "input" and parameters "param", named as captured."""
    args = [(n, v, "input") for n, v in graph.inputs] + [(n, v, "param") for n, v in graph.params]
    arg_types = [tensor_type(v.shape, v.dtype) for _, v, _ in args]
    block = Block(arg_types=arg_types)
    b = _Builder(block)
    for (name, v, _), arg in zip(args, block.args):
        b.ssa[v.index] = arg
        arg.name_hint = name
    for node in graph.nodes:
        build = OP_TABLE.get(node.op)
        if build is None:
            raise unsupported(node.op, node.where)
        b.node = node
        try:
            results = build(b, node)
        except Unsupported as e:
            raise unsupported(node.op, node.where, str(e)) from None
        if not results:
            continue
        if len(results) != len(node.outputs):
            raise unsupported(node.op, node.where, "unexpected number of results")
        for out, res in zip(node.outputs, results):
            expected = tensor_type(out.shape, out.dtype)
            if res.type != expected:
                raise unsupported(
                    node.op, node.where, f"imported as {res.type}, but PyTorch produced {expected}"
                )
            b.ssa[out.index] = res
    returns = []
    for out in graph.outputs:
        if not isinstance(out, Value):
            raise EmmyError("the traced function must return tensors computed from its inputs")
        returns.append(b.ssa[out.index])
    block.add_op(func.ReturnOp(*returns))
    names = arg_names or [(n, role) for n, _, role in args]
    arg_attrs = ArrayAttr(
        [
            DictionaryAttr({"emmy.name": StringAttr(n), "emmy.role": StringAttr(role)})
            for n, role in names
        ]
    )
    fn = func.FuncOp(
        func_name,
        (arg_types, [r.type for r in returns]),
        Region(block),
        arg_attrs=arg_attrs,
    )
    module = ModuleOp([fn])
    if module_attrs:
        module.attributes.update(module_attrs)
    return module
