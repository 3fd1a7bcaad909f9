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

The ops live in four modules by job, re-exported here: torch_base.py (helpers, promotion,
broadcasting, the shared syntax and base classes), torch_layers.py (normalizations, linear,
attention), torch_pointwise.py (elementwise, scalar, softmax, reductions) and torch_layout.py
(casts and layout).
"""

from __future__ import annotations

from xdsl.ir import Dialect

from emmy.dialects.torch_base import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    AnyTensor,
    shape_of,
    dtype_of,
    fmt_shape,
    i64_array,
    f64_attr,
    i64_attr,
    bool_attr,
    promote_dtypes,
    broadcast_shapes,
    TorchOp,
    _Unary,
    _Binary,
)
from emmy.dialects.torch_layers import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    RmsNormOp,
    LayerNormOp,
    LinearOp,
    MatmulOp,
    ScaledDotProductAttentionOp,
)
from emmy.dialects.torch_pointwise import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    SiluOp,
    GeluOp,
    NegOp,
    RsqrtOp,
    SqrtOp,
    ExpOp,
    TanhOp,
    SigmoidOp,
    ReluOp,
    AbsOp,
    ClampOp,
    POW_EXPONENTS,
    POW_EXPONENTS_TEXT,
    PowScalarOp,
    SoftmaxOp,
    _Reduction,
    MeanOp,
    SumOp,
    AmaxOp,
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    MaximumOp,
    MinimumOp,
    AddScalarOp,
    MulScalarOp,
)
from emmy.dialects.torch_layout import (  # noqa: F401 (re-exported: the dialect's ops and helpers)
    ToOp,
    ViewOp,
    ExpandOp,
    TransposeOp,
    PermuteOp,
    SliceOp,
    CatOp,
    EmbeddingOp,
)


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
