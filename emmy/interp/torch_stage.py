"""Reference interpreter for the torch stage (xDSL interpreter framework, numpy values).

Each torch op is computed as PyTorch computes it on CPU: low-precision (bf16/f16) inputs are
widened to f32, the op's arithmetic runs in f32 (matmuls and reductions accumulate in float64),
and the result is rounded once to the op's result dtype; the normalizations and attention round
at the same intermediate points PyTorch does (RMSNorm casts back to the input dtype before the
weight multiply, attention rounds the probabilities to the input dtype before `@ v`). Values are
numpy arrays: float32 for bf16/f16/f32, float64 for f64, int64 for integers.

    from emmy.interp.torch_stage import run_function
    outputs = run_function(module, [hidden_states, cos, sin, *params])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import InterpreterFunctions, impl, register_impls
from xdsl.ir import Operation

from emmy.dialects import torch as P
from emmy.interp.numeric import causal_masked, element_dtype, erf, round_to
from emmy.interp.tensor_stage import call_function


def _out(op: Operation, value: np.ndarray) -> tuple[np.ndarray]:
    return (round_to(value, element_dtype(op.results[0].type)),)


def _f32(x: np.ndarray) -> np.ndarray:
    """The compute precision PyTorch uses for x: float32 (float64 stays float64)."""
    return x if x.dtype == np.float64 else x.astype(np.float32, copy=False)


def _reduced(op: P._Reduction) -> dict:
    """numpy's `axis` and `keepdims` for a torch reduction (mean, sum, amax)."""
    return {"axis": tuple(int(d) for d in op.dims.get_values()), "keepdims": bool(op.keepdim.value.data)}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b accumulated in float64 (b already laid out [..., K, N])."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _attr_float(attr, default: float) -> float:
    return default if attr is None else float(attr.value.data)


@register_impls
class TorchFunctions(InterpreterFunctions):
    """numpy implementations of the `torch` dialect."""

    @impl(P.RmsNormOp)
    def run_rms_norm(self, interp, op: P.RmsNormOp, args):
        x, w = args
        xf = _f32(x)
        var = np.mean(xf.astype(np.float64) ** 2, axis=-1, keepdims=True).astype(xf.dtype)
        eps = np.array(op.eps.value.data, dtype=xf.dtype)
        h = round_to(xf * (1 / np.sqrt(var + eps)), element_dtype(op.x))
        return _out(op, _f32(w) * h)

    @impl(P.LayerNormOp)
    def run_layer_norm(self, interp, op: P.LayerNormOp, args):
        x, w, b = (_f32(a) for a in args)
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=-1, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
        y = (x64 - mean) / np.sqrt(var + op.eps.value.data)
        return _out(op, y * w + b)

    @impl(P.LinearOp)
    def run_linear(self, interp, op: P.LinearOp, args):
        x, w = args[0], args[1]
        y = round_to(_matmul(x, np.swapaxes(w, -1, -2)), element_dtype(op.result))
        if len(args) == 3:
            y = _f32(y) + _f32(args[2])
        return _out(op, y)

    @impl(P.ScaledDotProductAttentionOp)
    def run_sdpa(self, interp, op: P.ScaledDotProductAttentionOp, args):
        q, k, v = args
        h, hkv = q.shape[1], k.shape[1]
        if h != hkv:
            k, v = np.repeat(k, h // hkv, axis=1), np.repeat(v, h // hkv, axis=1)
        scale = np.float32(_attr_float(op.scale, 1 / math.sqrt(q.shape[-1])))
        scores = _matmul(q, np.swapaxes(k, -1, -2)).astype(np.float32) * scale
        if op.is_causal.value.data:
            sq, sk = scores.shape[-2:]
            scores = np.where(causal_masked(sq, sk, window=op.window_value), np.float32(-np.inf), scores)
        ex = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = ex / ex.sum(axis=-1, keepdims=True, dtype=np.float64).astype(np.float32)
        probs = round_to(probs, element_dtype(op.q))
        return _out(op, _matmul(probs, v))

    @impl(P.SiluOp)
    def run_silu(self, interp, op, args):
        x = _f32(args[0])
        with np.errstate(over="ignore"):
            return _out(op, x * _sigmoid(x))

    @impl(P.GeluOp)
    def run_gelu(self, interp, op: P.GeluOp, args):
        x = _f32(args[0])
        if op.approximate.data == "tanh":
            inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
            return _out(op, x * np.float32(0.5) * (1 + np.tanh(inner)))
        return _out(op, x * np.float32(0.5) * (1 + erf(x * np.float32(math.sqrt(0.5)))))

    def _binary(self, op, fn, args):
        a, b = (_f32(x) for x in args)
        alpha = _attr_float(getattr(op, "alpha", None), 1.0)
        if alpha != 1.0:
            b = b * np.float32(alpha)
        with np.errstate(all="ignore"):
            return _out(op, fn(a, b))

    @impl(P.AddOp)
    def run_add(self, interp, op, args):
        return self._binary(op, np.add, args)

    @impl(P.SubOp)
    def run_sub(self, interp, op, args):
        return self._binary(op, np.subtract, args)

    @impl(P.MulOp)
    def run_mul(self, interp, op, args):
        return self._binary(op, np.multiply, args)

    @impl(P.DivOp)
    def run_div(self, interp, op, args):
        return self._binary(op, np.divide, args)

    @impl(P.AddScalarOp)
    def run_add_scalar(self, interp, op, args):
        x = _f32(args[0])
        return _out(op, x + x.dtype.type(op.value.value.data))

    @impl(P.MulScalarOp)
    def run_mul_scalar(self, interp, op, args):
        x = _f32(args[0])
        return _out(op, x * x.dtype.type(op.value.value.data))

    @impl(P.NegOp)
    def run_neg(self, interp, op, args):
        return _out(op, -args[0])

    @impl(P.RsqrtOp)
    def run_rsqrt(self, interp, op, args):
        with np.errstate(divide="ignore", invalid="ignore"):
            return _out(op, 1 / np.sqrt(_f32(args[0])))

    @impl(P.SqrtOp)
    def run_sqrt(self, interp, op, args):
        with np.errstate(invalid="ignore"):
            return _out(op, np.sqrt(_f32(args[0])))

    @impl(P.ExpOp)
    def run_exp(self, interp, op, args):
        with np.errstate(over="ignore"):
            return _out(op, np.exp(_f32(args[0])))

    @impl(P.TanhOp)
    def run_tanh(self, interp, op, args):
        return _out(op, np.tanh(_f32(args[0])))

    @impl(P.SigmoidOp)
    def run_sigmoid(self, interp, op, args):
        with np.errstate(over="ignore"):
            return _out(op, _sigmoid(_f32(args[0])))

    @impl(P.ReluOp)
    def run_relu(self, interp, op, args):
        return _out(op, np.maximum(args[0], 0))

    @impl(P.AbsOp)
    def run_abs(self, interp, op, args):
        return _out(op, np.abs(args[0]))

    @impl(P.ClampOp)
    def run_clamp(self, interp, op: P.ClampOp, args):
        low, high = op.bounds()
        return _out(op, np.clip(_f32(args[0]), low, high))

    @impl(P.PowScalarOp)
    def run_pow_scalar(self, interp, op: P.PowScalarOp, args):
        with np.errstate(divide="ignore", invalid="ignore"):
            return _out(op, np.power(_f32(args[0]), np.float32(op.value.value.data)))

    @impl(P.SoftmaxOp)
    def run_softmax(self, interp, op, args):
        x = _f32(args[0])
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return _out(op, e / e.sum(axis=-1, keepdims=True))

    @impl(P.MeanOp)
    def run_mean(self, interp, op: P.MeanOp, args):
        return _out(op, _f32(args[0]).mean(**_reduced(op)))

    @impl(P.SumOp)
    def run_sum(self, interp, op: P.SumOp, args):
        return _out(op, _f32(args[0]).sum(**_reduced(op)))

    @impl(P.AmaxOp)
    def run_amax(self, interp, op: P.AmaxOp, args):
        return _out(op, np.asarray(args[0]).max(**_reduced(op)))

    @impl(P.MatmulOp)
    def run_matmul(self, interp, op, args):
        return _out(op, np.matmul(_f32(args[0]), _f32(args[1])))

    @impl(P.MaximumOp)
    def run_maximum(self, interp, op, args):
        return self._binary(op, np.maximum, args)

    @impl(P.MinimumOp)
    def run_minimum(self, interp, op, args):
        return self._binary(op, np.minimum, args)

    @impl(P.ToOp)
    def run_to(self, interp, op, args):
        return _out(op, args[0])

    @impl(P.ViewOp)
    def run_view(self, interp, op: P.ViewOp, args):
        return (np.reshape(args[0], tuple(op.result.type.get_shape())),)

    @impl(P.ExpandOp)
    def run_expand(self, interp, op: P.ExpandOp, args):
        return (np.broadcast_to(args[0], tuple(op.result.type.get_shape())).copy(),)

    @impl(P.TransposeOp)
    def run_transpose(self, interp, op: P.TransposeOp, args):
        a, b = (int(d) for d in op.dims.get_values())
        return (np.swapaxes(args[0], a, b),)

    @impl(P.PermuteOp)
    def run_permute(self, interp, op: P.PermuteOp, args):
        return (np.transpose(args[0], [int(p) for p in op.perm.get_values()]),)

    @impl(P.SliceOp)
    def run_slice(self, interp, op: P.SliceOp, args):
        x = args[0]
        index = [slice(None)] * x.ndim
        index[op.dim.value.data] = slice(op.start.value.data, op.end.value.data, op.step.value.data)
        return (x[tuple(index)],)

    @impl(P.CatOp)
    def run_cat(self, interp, op: P.CatOp, args):
        return (np.concatenate(args, axis=op.dim.value.data),)

    @impl(P.EmbeddingOp)
    def run_embedding(self, interp, op, args):
        table, ids = args
        return (table[np.asarray(ids, dtype=np.int64)],)


def run_function(
    module: ModuleOp, args: Sequence[np.ndarray], name: str | None = None
) -> list[np.ndarray]:
    """Run a torch-stage function (the first func.func, or `name`) on numpy arguments."""
    return call_function(module, args, name, TorchFunctions())
