"""The torch dialect: names per docs/ir.md, constructors, type rules, verifiers, syntax."""

from __future__ import annotations

import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, ModuleOp, TensorType, i64
from xdsl.ir import Block, Region
from xdsl.utils.exceptions import VerifyException

from emmy.context import make_context
from emmy.dialects import torch as T
from emmy.ir_io import parse_module, print_module

bf16, f16, f32 = BFloat16Type(), Float16Type(), Float32Type()

# docs/ir.md, torch section: op name -> Python class
CONTRACT = {
    "torch.rms_norm": "RmsNormOp",
    "torch.layer_norm": "LayerNormOp",
    "torch.linear": "LinearOp",
    "torch.scaled_dot_product_attention": "ScaledDotProductAttentionOp",
    "torch.silu": "SiluOp",
    "torch.gelu": "GeluOp",
    "torch.add": "AddOp",
    "torch.sub": "SubOp",
    "torch.mul": "MulOp",
    "torch.div": "DivOp",
    "torch.add_scalar": "AddScalarOp",
    "torch.mul_scalar": "MulScalarOp",
    "torch.neg": "NegOp",
    "torch.rsqrt": "RsqrtOp",
    "torch.exp": "ExpOp",
    "torch.tanh": "TanhOp",
    "torch.to": "ToOp",
    "torch.view": "ViewOp",
    "torch.transpose": "TransposeOp",
    "torch.permute": "PermuteOp",
    "torch.slice": "SliceOp",
    "torch.cat": "CatOp",
    "torch.embedding": "EmbeddingOp",
    "torch.matmul": "MatmulOp",
    "torch.maximum": "MaximumOp",
    "torch.minimum": "MinimumOp",
    "torch.pow_scalar": "PowScalarOp",
    "torch.sigmoid": "SigmoidOp",
    "torch.relu": "ReluOp",
    "torch.softmax": "SoftmaxOp",
    "torch.mean": "MeanOp",
    "torch.abs": "AbsOp",
    "torch.sqrt": "SqrtOp",
    "torch.expand": "ExpandOp",
    "torch.clamp": "ClampOp",
    "torch.sum": "SumOp",
    "torch.amax": "AmaxOp",
}


def test_dialect_matches_contract():
    assert T.Torch.name == "torch"
    ops = {op.name: op.__name__ for op in T.Torch.operations}
    assert ops == CONTRACT
    for name, cls in CONTRACT.items():
        assert getattr(T, cls).name == name
        assert getattr(T, cls).__doc__ and "torch." in getattr(T, cls).__doc__  # docstring with example


def test_properties_per_contract():
    props = {op.name: set(op.get_irdl_definition().properties) for op in T.Torch.operations}
    assert props["torch.rms_norm"] == {"eps"}
    assert props["torch.scaled_dot_product_attention"] == {"is_causal", "scale", "enable_gqa", "window"}
    assert props["torch.gelu"] == {"approximate"}
    assert props["torch.add"] == props["torch.sub"] == {"alpha"}
    assert props["torch.add_scalar"] == props["torch.mul_scalar"] == {"value"}
    assert props["torch.transpose"] == {"dims"} and props["torch.permute"] == {"perm"}
    assert props["torch.slice"] == {"dim", "start", "end", "step"}
    assert props["torch.cat"] == {"dim"}
    assert props["torch.pow_scalar"] == {"value"} and props["torch.softmax"] == {"dim"}
    assert props["torch.mean"] == props["torch.sum"] == props["torch.amax"] == {"dims", "keepdim"}
    assert props["torch.clamp"] == {"min", "max"}


@pytest.mark.parametrize(
    "a, b, expected",
    [(bf16, bf16, bf16), (bf16, f32, f32), (f32, f16, f32), (bf16, f16, f32), (i64, bf16, bf16)],
)
def test_promote_dtypes(a, b, expected):
    assert T.promote_dtypes(a, b) == expected
    assert T.promote_dtypes(b, a) == expected


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((1, 16, 32, 128), (1, 1, 32, 128), (1, 16, 32, 128)),
        ((4, 8), (8,), (4, 8)),
        ((4, 1), (1, 8), (4, 8)),
        ((), (3,), (3,)),
        ((4, 8), (3, 8), None),
    ],
)
def test_broadcast_shapes(a, b, expected):
    assert T.broadcast_shapes(a, b) == expected


def _func_with(arg_types, build) -> ModuleOp:
    """A function whose body `build(add, *args)` makes: `add(op)` appends op, returns its result."""
    block = Block(arg_types=arg_types)

    def add(op):
        block.add_op(op)
        return op.results[0]

    results = build(add, *block.args)
    block.add_op(func.ReturnOp(*results))
    fn = func.FuncOp("f", (arg_types, [r.type for r in results]), Region(block))
    return ModuleOp([fn])


def tt(*shape, dtype=bf16) -> TensorType:
    return TensorType(dtype, list(shape))


def test_constructors_infer_types_and_verify():
    def build(add, x, w, qw, kv, row, ids, table):
        h = add(T.RmsNormOp(x, w, 1e-6))
        hf = add(T.RmsNormOp(x, row, 1e-6))
        q = add(T.LinearOp(h, qw))
        v = add(T.ViewOp(q, (1, 32, 16, 128)))
        t = add(T.TransposeOp(v, 1, 2))
        p = add(T.PermuteOp(v, (0, 2, 1, 3)))
        lo = add(T.SliceOp(t, 3, 0, 64))
        ev = add(T.SliceOp(t, 3, 1, 128, 2))
        c = add(T.CatOp([add(T.NegOp(lo)), ev], 3))
        m = add(T.MulOp(c, p))
        a = add(T.ScaledDotProductAttentionOp(m, kv, kv, is_causal=True, scale=0.125, enable_gqa=True))
        s = add(T.AddOp(add(T.SiluOp(q)), q, alpha=2.0))
        f = add(T.ToOp(s, f32))
        mixed = add(T.MulOp(f, q))
        sc = add(T.MulScalarOp(add(T.AddScalarOp(mixed, 1.0)), 0.5))
        e = add(T.EmbeddingOp(table, ids))
        return [h, hf, a, sc, e]

    module = _func_with(
        [tt(1, 32, 1024), tt(1024), tt(2048, 1024), tt(1, 8, 32, 128), tt(1024, dtype=f32), tt(1, 32, dtype=i64), tt(10, 64)],
        build,
    )
    module.verify()
    fn = module.ops.first
    outs = [tuple(t.get_shape()) for t in fn.function_type.outputs]
    assert outs == [(1, 32, 1024), (1, 32, 1024), (1, 16, 32, 128), (1, 32, 2048), (1, 32, 64)]
    assert [t.element_type for t in fn.function_type.outputs] == [bf16, f32, bf16, f32, bf16]
    # custom and generic syntax both round-trip through text
    ctx = make_context()
    text = print_module(module)
    assert print_module(parse_module(ctx, text, "a.mlir")) == text
    assert print_module(parse_module(ctx, print_module(module, generic=True), "b.mlir")) == text


def test_linear_with_bias_and_slice_shape():
    def build(add, x, w, b):
        return [add(T.LinearOp(x, w, b)), add(T.SliceOp(x, 1, 3, 8, 2))]

    module = _func_with([tt(4, 8), tt(16, 8), tt(16)], build)
    module.verify()
    assert [tuple(t.get_shape()) for t in module.ops.first.function_type.outputs] == [(4, 16), (4, 3)]


def test_verifier_rejects_bad_linear():
    def build(add, x, w):
        return [add(T.LinearOp.create(operands=[x, w], result_types=[tt(4, 16)]))]

    module = _func_with([tt(4, 8), tt(16, 4)], build)
    with pytest.raises(VerifyException, match="x's last dim 8 must equal weight's K = 4"):
        module.verify()


def test_verifier_rejects_gqa_without_flag():
    def build(add, q, k):
        return [add(T.ScaledDotProductAttentionOp(q, k, k, is_causal=False, scale=1.0, enable_gqa=False))]

    module = _func_with([tt(1, 16, 8, 64), tt(1, 8, 8, 64)], build)
    with pytest.raises(VerifyException, match="must equal kv heads 8 without enable_gqa"):
        module.verify()


def test_sample_inputs_parse_and_verify():
    """The sample torch-stage files other stages' tests read stay valid."""
    from pathlib import Path

    inputs = Path(__file__).resolve().parents[1] / "filecheck" / "inputs"
    ctx = make_context()
    for name in ("torch-layer.mlir", "torch-running-example.mlir"):
        text = (inputs / name).read_text()
        module = parse_module(ctx, text, name)
        assert module.attributes["emmy.target"].data == "sm_90"
        assert print_module(module) == text
