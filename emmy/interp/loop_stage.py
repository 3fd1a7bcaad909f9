"""Reference interpreter for the loop stage: each `loop.fused` runs through the vectorized
evaluator of `emmy.analysis.body`.

A loop-stage function holds only `loop.fused` ops and `func.return`. Values are numpy arrays:
float32 for bf16/f16/f32 (entries rounded to the value's dtype), int64 for integers, exactly
as in `emmy.interp.tensor_stage`, so the two stages compare directly.

    from emmy.interp.loop_stage import run_function
    (q, k, v) = run_function(module, [x, norm_w, wq, wk, wv])   # the first func.func
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from emmy.analysis.body import evaluate
from emmy.dialects.loop import FusedOp
from emmy.interp.tensor_stage import find_function, prepare_args


def run_loops(f: func.FuncOp, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run the loops of a loop-stage function on prepared (rounded) arguments."""
    env: dict[SSAValue, np.ndarray] = dict(zip(f.body.block.args, args))
    for op in f.body.block.ops:
        if isinstance(op, FusedOp):
            outs = evaluate(op, [env[v] for v in op.inputs])
            env.update(zip(op.results, outs))
        elif isinstance(op, func.ReturnOp):
            return [np.ascontiguousarray(env[v]) for v in op.operands]
        else:
            raise ValueError(
                f"@{f.sym_name.data}: {op.name} is not a loop-stage op (loop.fused, func.return)"
            )
    raise ValueError(f"@{f.sym_name.data} has no func.return")


def run_function(
    module: ModuleOp, args: Sequence[np.ndarray], name: str | None = None
) -> list[np.ndarray]:
    """Run a loop-stage function (the first func.func, or `name`) on numpy arguments.

    Arguments are rounded to their declared dtypes first; results are contiguous numpy arrays
    (float32 for bf16/f16/f32 values).
    """
    f = find_function(module, name)
    return run_loops(f, prepare_args(f, args))
