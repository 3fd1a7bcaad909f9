"""The `tensor` stage: primitives on whole tensors.

One op is one primitive on whole builtin ranked tensors (static shapes): elementwise arithmetic,
casts, constants, reductions, a batched contraction (`tensor.matmul`), and layout changes
(`broadcast`, `transpose`, `reshape`, `slice`, `concat`). No model-level op is left at this stage.

Conventions
- Elementwise ops take operands of one identical type and produce that type; broadcasting is
  explicit (`tensor.broadcast`) and so is any dtype change (`tensor.cast`).
- Meaning of a value of a low-precision type (`bf16`, `f16`): each op computes its result exactly
  (in f32 for the reference interpreter) and rounds it once, to nearest even, to the result dtype.
- `tensor.matmul` accumulates in f32 whatever its operand dtypes; its result type gives the
  output dtype (one rounding at the end).
- Every op accepts discardable attributes; the passes put `emmy.origin` (a short identifier
  naming the model-level op it came from, e.g. `"rms_norm"`, `"linear_q_proj"`) on each op.

Syntax: `tensor.<op> operands {properties and attributes} : types`, where types is one type when
every operand and the result share it, `T1 -> T2` for one operand, and `(T1, ...) -> T` otherwise:

    %s = tensor.sum %x {axes = array<i64: 1>} : tensor<512x1024xf32> -> tensor<512xf32>
    %c = tensor.matmul %a, %b {transpose_rhs} : (tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16>

The generic form (`"tensor.sum"(%x) <{axes = array<i64: 1>}> : (...) -> ...`) round-trips too.

The ops live in three modules by job, re-exported here: tensor_base.py (helpers, constraints,
the shared syntax), tensor_compute.py (elementwise, casts, constants, reductions, matmul) and
tensor_layout.py (broadcast, transpose, reshape, slice, concat).
"""

from __future__ import annotations

from xdsl.ir import Dialect

from emmy.dialects.tensor_base import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    AnyTensor,
    ORIGIN,
    i64_array,
    TensorOp,
)
from emmy.dialects.tensor_compute import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    BinaryOp,
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    MaxOp,
    MinOp,
    UnaryOp,
    NegOp,
    ExpOp,
    RsqrtOp,
    SqrtOp,
    TanhOp,
    ErfOp,
    SigmoidOp,
    RecipOp,
    CastOp,
    SplatOp,
    ReduceOp,
    SumOp,
    ReduceMaxOp,
    MatmulOp,
)
from emmy.dialects.tensor_layout import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    LayoutOp,
    BroadcastOp,
    TransposeOp,
    ReshapeOp,
    SliceOp,
    ConcatOp,
    CausalMaskOp,
    GatherRowsOp,
    BINARY_OPS,
    UNARY_OPS,
)


Tensor = Dialect(
    "tensor",
    [
        *BINARY_OPS,
        *UNARY_OPS,
        CastOp,
        SplatOp,
        SumOp,
        ReduceMaxOp,
        MatmulOp,
        BroadcastOp,
        TransposeOp,
        ReshapeOp,
        SliceOp,
        ConcatOp,
        CausalMaskOp,
        GatherRowsOp,
    ],
    [],
)
