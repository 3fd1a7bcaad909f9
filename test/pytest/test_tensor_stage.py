"""The tensor stage keeps the numbers: torch-stage interpreter == tensor-stage interpreter after
`convert-torch-to-tensor` and after `tensor-merge-siblings`, and the torch-stage interpreter
agrees with PyTorch."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def

from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects import tensor as T
from emmy.dialects import torch as P
from emmy.interp import tensor_stage, torch_stage
from emmy.interp.numeric import rel_error, to_numpy
from emmy.ir_io import parse_module, print_module
from emmy.passes.convert_torch_to_tensor import ConvertTorchToTensorPass
from emmy.passes.tensor_merge_siblings import TensorMergeSiblingsPass, merged_label

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
INPUTS = os.path.join(ROOT, "test", "filecheck", "inputs")
bf16, f16, f32 = BFloat16Type(), Float16Type(), Float32Type()
TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


# ------------------------------------------------------------------------------------------
# Building torch-stage functions by hand
# ------------------------------------------------------------------------------------------


class FunctionBuilder:
    """Arguments with emmy.name / emmy.role, then ops appended in order."""

    def __init__(self):
        self.block = Block()
        self.arg_attrs: list[DictionaryAttr] = []

    def arg(self, shape, dtype: Attribute, name: str, role: str = "input") -> SSAValue:
        a = self.block.insert_arg(TensorType(dtype, list(shape)), len(self.block.args))
        a.name_hint = name.replace(".", "_")
        self.arg_attrs.append(
            DictionaryAttr({"emmy.name": StringAttr(name), "emmy.role": StringAttr(role)})
        )
        return a

    def __call__(self, op) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def finish(self, *results: SSAValue, name: str = "f") -> ModuleOp:
        self.block.add_op(func.ReturnOp(*results))
        ftype = ([a.type for a in self.block.args], [r.type for r in results])
        f = func.FuncOp(name, ftype, Region(self.block))
        f.arg_attrs = ArrayAttr(self.arg_attrs)
        module = ModuleOp([f])
        module.verify()
        return module


def qwen3_layer(s=8, hidden=64, heads=4, kv_heads=2, head_dim=16, inter=96, eps=1e-6):
    """A Qwen3 decoder layer (HF's op order) at the torch stage, batch 1, bf16."""
    b = FunctionBuilder()
    x = b.arg([1, s, hidden], bf16, "hidden_states")
    cos = b.arg([1, s, head_dim], bf16, "cos")
    sin = b.arg([1, s, head_dim], bf16, "sin")
    p = lambda shape, name: b.arg(shape, bf16, name, "param")  # noqa: E731
    w_in = p([hidden], "input_layernorm.weight")
    wq = p([heads * head_dim, hidden], "self_attn.q_proj.weight")
    wk = p([kv_heads * head_dim, hidden], "self_attn.k_proj.weight")
    wv = p([kv_heads * head_dim, hidden], "self_attn.v_proj.weight")
    wo = p([hidden, heads * head_dim], "self_attn.o_proj.weight")
    wqn = p([head_dim], "self_attn.q_norm.weight")
    wkn = p([head_dim], "self_attn.k_norm.weight")
    w_post = p([hidden], "post_attention_layernorm.weight")
    wg = p([inter, hidden], "mlp.gate_proj.weight")
    wu = p([inter, hidden], "mlp.up_proj.weight")
    wd = p([hidden, inter], "mlp.down_proj.weight")

    h = b(P.RmsNormOp(x, w_in, eps))

    def heads_of(w, norm_w, n):
        t = b(P.ViewOp(b(P.LinearOp(h, w)), [1, s, n, head_dim]))
        if norm_w is not None:
            t = b(P.RmsNormOp(t, norm_w, eps))
        return b(P.TransposeOp(t, 1, 2))

    q, k, v = heads_of(wq, wqn, heads), heads_of(wk, wkn, kv_heads), heads_of(wv, None, kv_heads)
    c = b(P.ViewOp(cos, [1, 1, s, head_dim]))
    sn = b(P.ViewOp(sin, [1, 1, s, head_dim]))

    def rope(t):
        half = head_dim // 2
        x1 = b(P.SliceOp(t, 3, 0, half))
        x2 = b(P.SliceOp(t, 3, half, head_dim))
        rot = b(P.CatOp([b(P.NegOp(x2)), x1], 3))
        return b(P.AddOp(b(P.MulOp(t, c)), b(P.MulOp(rot, sn))))

    q, k = rope(q), rope(k)
    attn = b(
        P.ScaledDotProductAttentionOp(
            q, k, v, is_causal=True, scale=head_dim**-0.5, enable_gqa=kv_heads != heads
        )
    )
    attn = b(P.ViewOp(b(P.TransposeOp(attn, 1, 2)), [1, s, heads * head_dim]))
    x = b(P.AddOp(x, b(P.LinearOp(attn, wo))))
    h2 = b(P.RmsNormOp(x, w_post, eps))
    mlp = b(P.MulOp(b(P.SiluOp(b(P.LinearOp(h2, wg)))), b(P.LinearOp(h2, wu))))
    out = b(P.AddOp(x, b(P.LinearOp(mlp, wd))))
    return b.finish(out, name="layer")


def running_example(s=8, hidden=64, nq=128, nkv=32):
    """RMSNorm followed by the q, k and v linears."""
    b = FunctionBuilder()
    x = b.arg([1, s, hidden], bf16, "hidden_states")
    w = b.arg([hidden], bf16, "input_layernorm.weight", "param")
    ws = [
        b.arg([n, hidden], bf16, f"self_attn.{p}_proj.weight", "param")
        for p, n in (("q", nq), ("k", nkv), ("v", nkv))
    ]
    h = b(P.RmsNormOp(x, w, 1e-6))
    return b.finish(*(b(P.LinearOp(h, wi)) for wi in ws), name="running_example")


def random_args(module: ModuleOp, seed=0) -> list[np.ndarray]:
    """Random values for each argument: N(0, 1) inputs, weights scaled by 1/sqrt(fan-in), norm
    weights around 1; cos/sin in [-1, 1]; integer ids in [0, rows)."""
    rng = np.random.default_rng(seed)
    f = tensor_stage.find_function(module)
    args = []
    for a, attrs in zip(f.body.block.args, f.arg_attrs.data):
        shape = tuple(a.type.get_shape())
        name = attrs.data["emmy.name"].data if "emmy.name" in attrs.data else ""
        if str(a.type.element_type).startswith("i"):
            args.append(rng.integers(0, 16, size=shape))
        elif name.endswith("norm.weight"):
            args.append(1 + 0.1 * rng.standard_normal(shape))
        elif name in ("cos", "sin"):
            args.append(np.cos(rng.uniform(0, 6.3, size=shape)))
        elif len(shape) == 2 and name.endswith("weight"):
            args.append(rng.standard_normal(shape) / math.sqrt(shape[1]))
        else:
            args.append(rng.standard_normal(shape))
    return [np.asarray(x, dtype=np.int64 if x.dtype.kind == "i" else np.float32) for x in args]


def lower(module: ModuleOp, merge: bool) -> ModuleOp:
    m = module.clone()
    ConvertTorchToTensorPass().apply(make_context(), m)
    m.verify()
    if merge:
        TensorMergeSiblingsPass().apply(make_context(), m)
        m.verify()
    return m


def assert_stages_agree(module: ModuleOp, seed=0, tol=1e-5):
    args = random_args(module, seed)
    ref = torch_stage.run_function(module, args)
    for merge in (False, True):
        lowered = lower(module, merge)
        assert not [op for op in lowered.walk() if op.name.startswith("torch.")]
        got = tensor_stage.run_function(lowered, args)
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            err = rel_error(g, r)
            assert err < tol, f"merge={merge}: rel error {err}"


def origins(module: ModuleOp) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in module.walk():
        if op.name.startswith("tensor."):
            label = op.attributes["emmy.origin"].data
            out[label] = out.get(label, 0) + 1
    return out


# ------------------------------------------------------------------------------------------
# Stage against stage
# ------------------------------------------------------------------------------------------


def test_running_example_stages_agree():
    assert_stages_agree(running_example())


def test_running_example_merges_qkv():
    m = lower(running_example(), merge=True)
    matmuls = [op for op in m.walk() if isinstance(op, T.MatmulOp)]
    assert len(matmuls) == 1
    assert matmuls[0].attributes["emmy.origin"].data == "linear_qkv_proj"
    assert isinstance(matmuls[0].rhs.owner, T.ConcatOp)
    assert tuple(matmuls[0].result.type.get_shape()) == (8, 128 + 32 + 32)


@pytest.mark.parametrize("seed", [0, 1])
def test_layer_stages_agree(seed):
    assert_stages_agree(qwen3_layer(), seed)


def test_layer_without_gqa_stages_agree():
    assert_stages_agree(qwen3_layer(heads=2, kv_heads=2, s=5, hidden=32, head_dim=8, inter=40))


def test_layer_origins():
    before = lower(qwen3_layer(), merge=False)
    labels = origins(before)
    for label in (
        "rms_norm", "linear_q_proj", "linear_k_proj", "linear_v_proj", "linear_o_proj",
        "linear_gate_proj", "linear_up_proj", "linear_down_proj", "attention", "silu", "rope",
        "residual", "transpose", "view", "mul",
    ):
        assert label in labels, label
    assert all(label.isidentifier() for label in labels)
    after = origins(lower(qwen3_layer(), merge=True))
    assert "linear_qkv_proj" in after and "linear_gate_up_proj" in after
    assert "linear_q_proj" not in after or all(
        op.name == "tensor.reshape"
        for op in lower(qwen3_layer(), merge=True).walk()
        if op.attributes.get("emmy.origin") == StringAttr("linear_q_proj")
    )
    # two residual adds, the rotary adds of q and k
    adds = [op for op in before.walk() if isinstance(op, T.AddOp)]
    assert sum(op.attributes["emmy.origin"].data == "residual" for op in adds) == 2
    assert sum(op.attributes["emmy.origin"].data == "rope" for op in adds) == 2


def test_layer_merged_matmuls():
    m = lower(qwen3_layer(), merge=True)
    matmuls = [op for op in m.walk() if isinstance(op, T.MatmulOp) and op.is_transposed]
    by_label = {op.attributes["emmy.origin"].data for op in matmuls}
    # q/k/v merged, gate/up merged; o_proj, down_proj alone; attention's q @ k^T
    assert by_label == {"linear_qkv_proj", "linear_gate_up_proj", "linear_o_proj",
                        "linear_down_proj", "attention"}


def test_gqa_is_broadcast_of_kv_heads():
    m = lower(qwen3_layer(), merge=False)
    bcasts = [
        op for op in m.walk()
        if isinstance(op, T.BroadcastOp) and op.attributes["emmy.origin"].data == "attention"
        and len(op.result.type.get_shape()) == 5
    ]
    assert len(bcasts) == 2  # k and v
    assert all(op.dims_list == (0, 1, 3, 4) for op in bcasts)


def test_layer_at_qwen3_size_stages_agree():
    """A layer of Qwen3-Embedding-0.6B's size at 32 tokens lowers and interprets like the
    torch stage (how long that takes is measured by hand, not asserted)."""
    assert_stages_agree(qwen3_layer(s=32, hidden=1024, heads=16, kv_heads=8, head_dim=128, inter=3072))


# ------------------------------------------------------------------------------------------
# Op by op: lowering keeps the torch stage's numbers
# ------------------------------------------------------------------------------------------


def _single(build, *arg_specs, tol=1e-5):
    b = FunctionBuilder()
    args = [b.arg(shape, dt, f"a{i}", role) for i, (shape, dt, role) in enumerate(arg_specs)]
    module = b.finish(b(build(*args)))
    assert_stages_agree(module, tol=tol)
    return module


IN = "input"


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [bf16, f32])
def test_gelu(approximate, dtype):
    _single(lambda x: P.GeluOp(x, approximate), ([4, 33], dtype, IN), tol=1e-5)


def test_silu_f16():
    _single(P.SiluOp, ([4, 33], f16, IN), tol=1e-5)


def test_layer_norm():
    _single(
        lambda x, w, bias: P.LayerNormOp(x, w, bias, 1e-5),
        ([3, 5, 48], bf16, IN), ([48], bf16, "param"), ([48], bf16, "param"),
    )


def test_linear_with_bias_1d_and_3d():
    _single(P.LinearOp, ([2, 3, 16], bf16, IN), ([8, 16], bf16, "param"), ([8], bf16, "param"))
    _single(P.LinearOp, ([16], f32, IN), ([8, 16], f32, "param"))


def test_binary_broadcast_and_promotion():
    m = _single(P.MulOp, ([4, 1, 8], bf16, IN), ([3, 1], f32, IN))
    assert m.body.block.first_op.function_type.outputs.data[0].element_type == f32
    _single(lambda a, b: P.AddOp(a, b, alpha=0.3), ([4, 8], bf16, IN), ([8], bf16, IN))
    _single(lambda a, b: P.SubOp(a, b, alpha=2.0), ([4, 8], f32, IN), ([4, 8], f32, IN))
    _single(P.DivOp, ([4, 8], bf16, IN), ([4, 8], bf16, IN))


def test_scalar_ops_do_not_round_the_scalar():
    _single(lambda x: P.MulScalarOp(x, 0.1), ([64], bf16, IN))
    _single(lambda x: P.AddScalarOp(x, 1e-3), ([64], bf16, IN))


@pytest.mark.parametrize("cls", [P.NegOp, P.ExpOp, P.TanhOp])
def test_unary(cls):
    _single(cls, ([4, 8], bf16, IN))


def test_rsqrt():
    b = FunctionBuilder()
    x = b.arg([4, 8], f32, "x")
    module = b.finish(b(P.RsqrtOp(b(P.MulOp(x, x)))))
    assert_stages_agree(module, tol=1e-6)


def test_layout_ops():
    _single(lambda x: P.PermuteOp(x, [2, 0, 1]), ([2, 3, 4], bf16, IN))
    _single(lambda x: P.SliceOp(x, 1, 1, 8, 3), ([2, 9, 4], bf16, IN))
    _single(lambda x: P.ToOp(x, f16), ([2, 9], f32, IN))
    _single(lambda x, y: P.CatOp([x, y, x], 0), ([2, 3], bf16, IN), ([4, 3], bf16, IN))


def test_embedding():
    _single(P.EmbeddingOp, ([16, 8], bf16, "param"), ([2, 5], i64, IN))


def test_sdpa_non_causal_default_scale():
    _single(
        lambda q, k, v: P.ScaledDotProductAttentionOp(
            q, k, v, is_causal=False, scale=0.25, enable_gqa=False
        ),
        ([1, 2, 5, 16], bf16, IN), ([1, 2, 7, 16], bf16, IN), ([1, 2, 7, 8], bf16, IN),
    )


# ------------------------------------------------------------------------------------------
# Errors and labels
# ------------------------------------------------------------------------------------------


@irdl_op_definition
class _UnknownTorchOp(IRDLOperation):
    name = "torch.frobnicate"
    x = operand_def(TensorType)
    result = result_def(TensorType)


def test_unlowered_torch_op_is_an_emmy_error():
    b = FunctionBuilder()
    x = b.arg([4], f32, "x")
    module = b.finish(b(_UnknownTorchOp.create(operands=[x], result_types=[x.type])))
    with pytest.raises(EmmyError, match=r"torch\.frobnicate.*torch->tensor"):
        ConvertTorchToTensorPass().apply(make_context(), module)


def test_merged_labels():
    assert merged_label(["linear_q_proj", "linear_k_proj", "linear_v_proj"]) == "linear_qkv_proj"
    assert merged_label(["linear_gate_proj", "linear_up_proj"]) == "linear_gate_up_proj"
    assert merged_label(["linear_wq", "linear_wk"]) == "linear_wq_wk"
    assert merged_label(["linear_a", None]) == "linear_merged"


def test_merge_needs_weights_and_a_shared_input():
    # one matmul per input: nothing to merge; the pass leaves the module as it was
    b = FunctionBuilder()
    x = b.arg([4, 16], bf16, "x")
    y = b.arg([4, 16], bf16, "y")
    w1 = b.arg([8, 16], bf16, "a.weight", "param")
    w2 = b.arg([8, 16], bf16, "b.weight", "param")
    module = lower(b.finish(b(P.LinearOp(x, w1)), b(P.LinearOp(y, w2))), merge=False)
    before = print_module(module)
    TensorMergeSiblingsPass().apply(make_context(), module)
    assert print_module(module) == before


def test_ir_text_round_trips_after_lowering():
    m = lower(qwen3_layer(), merge=True)
    text = print_module(m)
    again = parse_module(make_context(), text, "layer.mlir")
    assert print_module(again) == text


# ------------------------------------------------------------------------------------------
# The torch-stage interpreter against PyTorch
# ------------------------------------------------------------------------------------------


def _torch(a: np.ndarray, dtype="bf16") -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(TORCH_DTYPE[dtype])


def test_torch_stage_matches_pytorch_layer_ops():
    """Each Qwen3 building block, computed with PyTorch in bf16, against the torch stage."""
    module = qwen3_layer()
    args = random_args(module, seed=3)
    (got,) = torch_stage.run_function(module, args)
    x, cos, sin, w_in, wq, wk, wv, wo, wqn, wkn, w_post, wg, wu, wd = (_torch(a) for a in args)

    def rms(t, w):
        tf = t.float()
        return w * (tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(t.dtype)

    def rot(t):
        h = t.shape[-1] // 2
        return torch.cat((-t[..., h:], t[..., :h]), dim=-1)

    s, hd = x.shape[1], wqn.shape[0]
    h = rms(x, w_in)
    q = rms(F.linear(h, wq).view(1, s, -1, hd), wqn).transpose(1, 2)
    k = rms(F.linear(h, wk).view(1, s, -1, hd), wkn).transpose(1, 2)
    v = F.linear(h, wv).view(1, s, -1, hd).transpose(1, 2)
    c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
    q, k = q * c + rot(q) * sn, k * c + rot(k) * sn
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=hd**-0.5, enable_gqa=True)
    x = x + F.linear(a.transpose(1, 2).reshape(1, s, -1), wo)
    h2 = rms(x, w_post)
    ref = x + F.linear(F.silu(F.linear(h2, wg)) * F.linear(h2, wu), wd)
    assert rel_error(got, to_numpy(ref)) < 1e-2


def test_torch_stage_rms_norm_is_bit_exact_with_pytorch():
    b = FunctionBuilder()
    x = b.arg([6, 128], bf16, "x")
    w = b.arg([128], bf16, "w", "param")
    module = b.finish(b(P.RmsNormOp(x, w, 1e-6)))
    xs, ws = random_args(module, seed=5)
    (got,) = torch_stage.run_function(module, [xs, ws])
    (low,) = tensor_stage.run_function(lower(module, merge=False), [xs, ws])
    tx, tw = _torch(xs), _torch(ws)
    tf = tx.float()
    ref = tw * (tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    # the same roundings in the same places
    np.testing.assert_array_equal(got, to_numpy(ref))
    np.testing.assert_array_equal(low, to_numpy(ref))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_torch_stage_elementwise_match_pytorch(approximate):
    b = FunctionBuilder()
    x = b.arg([300], bf16, "x")
    module = b.finish(b(P.GeluOp(x, approximate)), b(P.SiluOp(x)), b(P.MulScalarOp(x, 0.1)))
    (xs,) = random_args(module, seed=7)
    gelu, silu, scaled = torch_stage.run_function(module, [xs])
    t = _torch(xs)
    for got, ref in (
        (gelu, F.gelu(t, approximate=approximate)), (silu, F.silu(t)), (scaled, t * 0.1)
    ):
        diff = np.abs(got - to_numpy(ref))
        # equal up to one bf16 rounding step on rare ties of f32 arithmetic
        assert (diff <= 2**-7 * np.abs(to_numpy(ref)) + 1e-30).all()
        assert (diff == 0).mean() > 0.97


# ------------------------------------------------------------------------------------------
# The traced Qwen3 layer (emmy.frontend) and the sample IR files
# ------------------------------------------------------------------------------------------


def _frontend():
    try:
        from emmy.frontend import resolve_model, trace_layer
    except ImportError:
        pytest.skip("emmy.frontend.trace_layer is not available yet")
    return resolve_model, trace_layer


@pytest.mark.parametrize("tokens", [7, 32])
def test_traced_qwen3_layer(tokens):
    resolve_model, trace_layer = _frontend()
    traced = trace_layer(resolve_model("Qwen/Qwen3-Embedding-0.6B"), 0, tokens)
    module = traced.module
    f = tensor_stage.find_function(module)
    names = [attrs.data["emmy.name"].data for attrs in f.arg_attrs.data]
    inputs = {k: to_numpy(v) for k, v in dict(traced.inputs).items()}
    params = {k: to_numpy(v) for k, v in dict(traced.params).items()}
    args = [inputs[n] if n in inputs else params[n] for n in names]
    ref_t = traced.reference(traced.inputs)
    ref_t = ref_t[0] if isinstance(ref_t, tuple | list) else ref_t
    ref = to_numpy(ref_t)

    (got_torch,) = torch_stage.run_function(module, args)
    assert rel_error(got_torch, ref) < 2e-2, "torch-stage interpreter vs PyTorch"
    for merge in (False, True):
        lowered = lower(module, merge)
        (got,) = tensor_stage.run_function(lowered, args)
        assert rel_error(got, got_torch) < 1e-4, f"tensor stage (merge={merge}) vs torch stage"
        assert rel_error(got, ref) < 2e-2


@pytest.mark.parametrize("name", ["torch-running-example.mlir", "torch-layer.mlir"])
def test_sample_inputs(name):
    path = os.path.join(INPUTS, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not there yet")
    with open(path, encoding="utf-8") as fh:
        module = parse_module(make_context(), fh.read(), path)
    assert_stages_agree(module)


def test_torch_stage_sdpa_matches_pytorch():
    b = FunctionBuilder()
    q = b.arg([1, 4, 9, 16], bf16, "q")
    k = b.arg([1, 2, 9, 16], bf16, "k")
    v = b.arg([1, 2, 9, 16], bf16, "v")
    module = b.finish(
        b(P.ScaledDotProductAttentionOp(q, k, v, is_causal=True, scale=0.25, enable_gqa=True))
    )
    args = random_args(module, seed=11)
    (got,) = torch_stage.run_function(module, args)
    tq, tk, tv = (_torch(a) for a in args)
    ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=0.25, enable_gqa=True)
    assert rel_error(got, to_numpy(ref)) < 1e-2
    (low,) = tensor_stage.run_function(lower(module, merge=False), args)
    assert rel_error(low, got) < 1e-6


# ------------------------------------------------------------------------------------------
# The tensor-stage interpreter on hand-written tensor IR, against numpy / PyTorch
# ------------------------------------------------------------------------------------------

TENSOR_IR = """
func.func @f(%x: tensor<3x5xf32>, %b: tensor<2x3x4xbf16>, %c: tensor<2x4x6xbf16>, %t: tensor<6x2xf32>, %ids: tensor<2x2xi64>, %r: tensor<3x1xf32>)
    -> (tensor<3x5xf32>, tensor<3x2xf32>, tensor<2x3x6xbf16>, tensor<5xf32>, tensor<2x2x2xf32>, tensor<3x5xbf16>, tensor<4x3x5xf32>, tensor<5x3xf32>, tensor<3x10xf32>, tensor<3x5xf32>) {
  %m = tensor.causal_mask %x {offset = 1 : i64} : tensor<3x5xf32>
  %s = tensor.slice %x {starts = array<i64: 1, 0>, sizes = array<i64: 2, 2>, strides = array<i64: 1, 3>} : tensor<3x5xf32> -> tensor<2x2xf32>
  %st = tensor.transpose %s {perm = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  %sr = tensor.reshape %x : tensor<3x5xf32> -> tensor<15xf32>
  %s6 = tensor.slice %sr {starts = array<i64: 0>, sizes = array<i64: 6>, strides = array<i64: 1>} : tensor<15xf32> -> tensor<6xf32>
  %s32 = tensor.reshape %s6 : tensor<6xf32> -> tensor<3x2xf32>
  %mm = tensor.matmul %b, %c : (tensor<2x3x4xbf16>, tensor<2x4x6xbf16>) -> tensor<2x3x6xbf16>
  %mx = tensor.reduce_max %x {axes = array<i64: 0>} : tensor<3x5xf32> -> tensor<5xf32>
  %g = tensor.gather_rows %t, %ids : (tensor<6x2xf32>, tensor<2x2xi64>) -> tensor<2x2x2xf32>
  %tenth = tensor.splat 0.1 : tensor<3x5xbf16>
  %rb = tensor.broadcast %r {dims = array<i64: 1, 2>} : tensor<3x1xf32> -> tensor<4x3x5xf32>
  %xt = tensor.transpose %x {perm = array<i64: 1, 0>} : tensor<3x5xf32> -> tensor<5x3xf32>
  %cat = tensor.concat %x, %m {axis = 1 : i64} : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x10xf32>
  %mn = tensor.min %x, %m : tensor<3x5xf32>
  %rc = tensor.recip %mn : tensor<3x5xf32>
  func.return %m, %s32, %mm, %mx, %g, %tenth, %rb, %xt, %cat, %rc : tensor<3x5xf32>, tensor<3x2xf32>, tensor<2x3x6xbf16>, tensor<5xf32>, tensor<2x2x2xf32>, tensor<3x5xbf16>, tensor<4x3x5xf32>, tensor<5x3xf32>, tensor<3x10xf32>, tensor<3x5xf32>
}
"""


def test_tensor_stage_ops_against_numpy():
    module = parse_module(make_context(), TENSOR_IR, "ops.mlir")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    b, c = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 6))
    t = rng.standard_normal((6, 2)).astype(np.float32)
    ids = np.array([[0, 5], [3, 3]])
    r = rng.standard_normal((3, 1)).astype(np.float32)
    m, s32, mm, mx, g, tenth, rb, xt, cat, rc = tensor_stage.run_function(module, [x, b, c, t, ids, r])
    mask = np.arange(5)[None, :] > np.arange(3)[:, None] + 1
    np.testing.assert_array_equal(m, np.where(mask, -np.inf, x))
    np.testing.assert_array_equal(s32, x.reshape(-1)[:6].reshape(3, 2))
    ref = (_torch(b).float() @ _torch(c).float()).bfloat16()
    np.testing.assert_array_equal(mm, to_numpy(ref))
    np.testing.assert_array_equal(mx, x.max(axis=0))
    np.testing.assert_array_equal(g, t[ids])
    assert (tenth == to_numpy(torch.full((3, 5), 0.1, dtype=torch.bfloat16))).all()
    np.testing.assert_array_equal(rb, np.broadcast_to(r, (4, 3, 5)))
    np.testing.assert_array_equal(xt, x.T)
    np.testing.assert_array_equal(cat, np.concatenate([x, np.where(mask, -np.inf, x)], axis=1))
    np.testing.assert_allclose(rc, 1 / np.minimum(x, np.where(mask, -np.inf, x)), rtol=1e-6)
    assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in (m, mm, rb, xt))


def test_run_function_checks_arguments():
    module = parse_module(make_context(), TENSOR_IR, "ops.mlir")
    with pytest.raises(ValueError, match="takes 6 arguments"):
        tensor_stage.run_function(module, [])
    with pytest.raises(ValueError, match=r"argument 0: expected shape \(3, 5\)"):
        tensor_stage.run_function(module, [np.zeros((5, 3))] * 6)
    with pytest.raises(ValueError, match="no func.func named 'g'"):
        tensor_stage.run_function(module, [], name="g")
