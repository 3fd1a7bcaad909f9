"""Reference interpreter for the tensor stage (xDSL interpreter framework, numpy values).

Every tensor value is a numpy array: float32 for bf16/f16/f32 (entries rounded to the value's
dtype after every op that produces it), float64 for f64, int64 for integers. Each op computes its
exact result as closely as numpy allows (sums and matmuls accumulate in float64) and rounds once to
its result dtype, which is the meaning `emmy/dialects/tensor.py` gives the ops.

    from emmy.interp.tensor_stage import run_function
    (y,) = run_function(module, [x, w])      # the first func.func of the module
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Operation

from emmy.dialects import tensor as T
from emmy.interp.numeric import causal_masked, element_dtype, erf, round_to


def _out(op: Operation, value: np.ndarray) -> tuple[np.ndarray]:
    """Round `value` to the dtype of the op's single result."""
    return (round_to(value, element_dtype(op.results[0].type)),)


def _compute(x: np.ndarray) -> np.ndarray:
    """Operands in their compute precision: float32 (float64 stays float64)."""
    return x if x.dtype == np.float64 else x.astype(np.float32, copy=False)


_BINARY = {
    T.AddOp: np.add,
    T.SubOp: np.subtract,
    T.MulOp: np.multiply,
    T.DivOp: np.divide,
    T.MaxOp: np.maximum,
    T.MinOp: np.minimum,
}

_UNARY = {
    T.NegOp: np.negative,
    T.ExpOp: np.exp,
    T.RsqrtOp: lambda x: 1 / np.sqrt(x),
    T.SqrtOp: np.sqrt,
    T.TanhOp: np.tanh,
    T.ErfOp: erf,
    T.SigmoidOp: lambda x: 1 / (1 + np.exp(-x)),
    T.RecipOp: lambda x: 1 / x,
}


def _binary(op: Operation, args) -> tuple[np.ndarray]:
    with np.errstate(all="ignore"):
        return _out(op, _BINARY[type(op)](_compute(args[0]), _compute(args[1])))


def _unary(op: Operation, args) -> tuple[np.ndarray]:
    with np.errstate(all="ignore"):
        return _out(op, _UNARY[type(op)](_compute(args[0])))


@register_impls
class TensorFunctions(InterpreterFunctions):
    """numpy implementations of the `tensor` dialect."""

    @impl(T.AddOp)
    def run_add(self, interp, op, args):
        return _binary(op, args)

    @impl(T.SubOp)
    def run_sub(self, interp, op, args):
        return _binary(op, args)

    @impl(T.MulOp)
    def run_mul(self, interp, op, args):
        return _binary(op, args)

    @impl(T.DivOp)
    def run_div(self, interp, op, args):
        return _binary(op, args)

    @impl(T.MaxOp)
    def run_max(self, interp, op, args):
        return _binary(op, args)

    @impl(T.MinOp)
    def run_min(self, interp, op, args):
        return _binary(op, args)

    @impl(T.NegOp)
    def run_neg(self, interp, op, args):
        return _unary(op, args)

    @impl(T.ExpOp)
    def run_exp(self, interp, op, args):
        return _unary(op, args)

    @impl(T.RsqrtOp)
    def run_rsqrt(self, interp, op, args):
        return _unary(op, args)

    @impl(T.SqrtOp)
    def run_sqrt(self, interp, op, args):
        return _unary(op, args)

    @impl(T.TanhOp)
    def run_tanh(self, interp, op, args):
        return _unary(op, args)

    @impl(T.ErfOp)
    def run_erf(self, interp, op, args):
        return _unary(op, args)

    @impl(T.SigmoidOp)
    def run_sigmoid(self, interp, op, args):
        return _unary(op, args)

    @impl(T.RecipOp)
    def run_recip(self, interp, op, args):
        return _unary(op, args)

    @impl(T.CastOp)
    def run_cast(self, interp, op: T.CastOp, args):
        return _out(op, args[0])

    @impl(T.SplatOp)
    def run_splat(self, interp, op: T.SplatOp, args):
        t = op.result.type
        assert isinstance(t, TensorType)
        dtype = element_dtype(t)
        value = round_to(np.array(op.float_value, dtype=np.float64), dtype)
        return (np.full(tuple(t.get_shape()), value, dtype=value.dtype),)

    @impl(T.SumOp)
    def run_sum(self, interp, op: T.SumOp, args):
        return _out(op, np.sum(args[0], axis=op.axes_list, dtype=np.float64))

    @impl(T.ReduceMaxOp)
    def run_reduce_max(self, interp, op: T.ReduceMaxOp, args):
        return _out(op, np.max(args[0], axis=op.axes_list))

    @impl(T.MatmulOp)
    def run_matmul(self, interp, op: T.MatmulOp, args):
        a = args[0].astype(np.float64)
        b = args[1].astype(np.float64)
        if op.is_transposed:
            b = np.swapaxes(b, -1, -2)
        return _out(op, np.matmul(a, b))

    @impl(T.BroadcastOp)
    def run_broadcast(self, interp, op: T.BroadcastOp, args):
        shape = tuple(op.result.type.get_shape())
        dims = op.dims_list
        expanded = [1] * len(shape)
        for i, d in enumerate(dims):
            expanded[d] = args[0].shape[i]
        return (np.broadcast_to(args[0].reshape(expanded), shape),)

    @impl(T.TransposeOp)
    def run_transpose(self, interp, op: T.TransposeOp, args):
        return (np.transpose(args[0], op.perm_list),)

    @impl(T.ReshapeOp)
    def run_reshape(self, interp, op: T.ReshapeOp, args):
        return (np.reshape(args[0], tuple(op.result.type.get_shape())),)

    @impl(T.SliceOp)
    def run_slice(self, interp, op: T.SliceOp, args):
        index = tuple(
            slice(s, s + (n - 1) * st + 1 if n > 0 else s, st)
            for s, n, st in zip(op.starts_list, op.sizes_list, op.strides_list)
        )
        return (args[0][index],)

    @impl(T.ConcatOp)
    def run_concat(self, interp, op: T.ConcatOp, args):
        return (np.concatenate(args, axis=op.axis_value),)

    @impl(T.CausalMaskOp)
    def run_causal_mask(self, interp, op: T.CausalMaskOp, args):
        x = args[0]
        sq, sk = x.shape[-2:]
        masked = causal_masked(sq, sk, op.offset_value, op.window_value)
        return (np.where(masked, np.array(-np.inf, dtype=x.dtype), x),)

    @impl(T.GatherRowsOp)
    def run_gather_rows(self, interp, op: T.GatherRowsOp, args):
        table, ids = args
        return (table[np.asarray(ids, dtype=np.int64)],)


def find_function(module: ModuleOp, name: str | None = None) -> func.FuncOp:
    """The func.func named `name`, or the first one in the module."""
    for op in module.body.block.ops:
        if isinstance(op, func.FuncOp) and (name is None or op.sym_name.data == name):
            return op
    what = f"named '{name}'" if name else "at all"
    raise ValueError(f"the module has no func.func {what}")


def prepare_args(f: func.FuncOp, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Check the argument count and shapes; round each argument to its declared dtype."""
    types = f.function_type.inputs.data
    if len(args) != len(types):
        raise ValueError(f"@{f.sym_name.data} takes {len(types)} arguments, got {len(args)}")
    out = []
    for i, (a, t) in enumerate(zip(args, types)):
        a = np.asarray(a)
        assert isinstance(t, TensorType)
        if tuple(a.shape) != tuple(t.get_shape()):
            raise ValueError(
                f"@{f.sym_name.data} argument {i}: expected shape {tuple(t.get_shape())}, "
                f"got {a.shape}"
            )
        out.append(round_to(a, element_dtype(t)))
    return out


def call_function(
    module: ModuleOp, args: Sequence[np.ndarray], name: str | None, functions: InterpreterFunctions
) -> list[np.ndarray]:
    """Run the first func.func (or `name`) of `module` with `functions` implementing its ops.

    Arguments are rounded to their declared dtypes first; results are contiguous numpy arrays
    (float32 for bf16/f16/f32 values).
    """
    interp = Interpreter(module)
    interp.register_implementations(FuncFunctions())
    interp.register_implementations(functions)
    f = find_function(module, name)
    results = interp.call_op(f, tuple(prepare_args(f, args)))
    return [np.ascontiguousarray(r) for r in results]


def run_function(
    module: ModuleOp, args: Sequence[np.ndarray], name: str | None = None
) -> list[np.ndarray]:
    """Run a tensor-stage function (the first func.func, or `name`) on numpy arguments."""
    return call_function(module, args, name, TensorFunctions())
