"""The frontend: resolving MODEL arguments and tracing layers into torch-stage IR."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from xdsl.dialects import func

from emmy.diagnostics import EmmyError
from emmy.dialects import torch as T
from emmy.frontend import ModelSource, TracedLayer, known_models, resolve_model, trace_layer
from emmy.frontend.importer import OP_TABLE
from emmy.ir_io import parse_module, print_module
from emmy.context import make_context

QWEN = "Qwen/Qwen3-Embedding-0.6B"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def qwen_layer() -> TracedLayer:
    return trace_layer(resolve_model(QWEN), 0, 32)


def op_counts(traced: TracedLayer) -> Counter[str]:
    return Counter(op.name for op in traced.module.walk() if op.name.startswith("torch."))


def the_func(traced: TracedLayer) -> func.FuncOp:
    (fn,) = [op for op in traced.module.ops if isinstance(op, func.FuncOp)]
    return fn


def arg_attr(fn: func.FuncOp, i: int, key: str) -> str:
    assert fn.arg_attrs is not None
    return fn.arg_attrs.data[i].data[key].data


# ------------------------------------------------------------------------------ a tiny evaluator
def evaluate(traced: TracedLayer, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Run the torch-stage function with PyTorch ops (independent of the importer's table)."""
    fn = the_func(traced)
    env = {}
    names = [arg_attr(fn, i, "emmy.name") for i in range(len(fn.args))]
    for arg, name in zip(fn.args, names):
        env[arg] = inputs[name] if name in inputs else traced.params[name]
    for op in fn.body.block.ops:
        a = [env[o] for o in op.operands]
        if isinstance(op, func.ReturnOp):
            return a
        env[op.results[0]] = _eval_op(op, a)
    raise AssertionError("no return")


def _eval_op(op, a):
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16, "f64": torch.float64}
    rtype = op.results[0].type
    shape = tuple(rtype.get_shape())
    match op:
        case T.RmsNormOp():
            x = a[0].float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + op.eps.value.data)
            return a[1] * x.to(a[0].dtype)
        case T.LinearOp():
            return F.linear(*a)
        case T.ScaledDotProductAttentionOp():
            return F.scaled_dot_product_attention(
                *a,
                is_causal=bool(op.is_causal.value.data),
                scale=op.scale.value.data,
                enable_gqa=bool(op.enable_gqa.value.data),
            )
        case T.SiluOp():
            return F.silu(a[0])
        case T.NegOp():
            return -a[0]
        case T.AddOp():
            return a[0] + a[1]
        case T.MulOp():
            return a[0] * a[1]
        case T.ViewOp():
            return a[0].reshape(shape)
        case T.TransposeOp():
            return a[0].transpose(*op.dims.get_values())
        case T.ExpandOp():
            return a[0].expand(shape)
        case T.MatmulOp():
            return torch.matmul(a[0], a[1])
        case T.SliceOp():
            idx = [slice(None)] * a[0].dim()
            idx[op.dim.value.data] = slice(op.start.value.data, op.end.value.data, op.step.value.data)
            return a[0][tuple(idx)]
        case T.CatOp():
            return torch.cat(a, dim=op.dim.value.data)
        case T.ToOp():
            return a[0].to(dtype[str(rtype.element_type)])
        case T.PermuteOp():
            return a[0].permute(*op.perm.get_values())
        case T.AddScalarOp():
            return a[0] + op.value.value.data
        case T.MulScalarOp():
            return a[0] * op.value.value.data
        case T.SubOp():
            return a[0] - a[1] * (1 if op.alpha is None else op.alpha.value.data)
        case T.DivOp():
            return a[0] / a[1]
        case T.EmbeddingOp():
            return F.embedding(a[1], a[0])
        case T.PowScalarOp():
            return a[0].pow(op.value.value.data)
        case T.MeanOp():
            return a[0].mean(dim=tuple(op.dims.get_values()), keepdim=bool(op.keepdim.value.data))
        case T.RsqrtOp():
            return torch.rsqrt(a[0])
    raise AssertionError(f"evaluator lacks {op.name}")


# ------------------------------------------------------------------------------ resolve_model
def test_known_models_lists_qwen():
    assert QWEN in known_models()


def test_known_model_config():
    src = resolve_model(QWEN)
    assert src.kind == "known" and src.model_id == QWEN and src.weights_dir is None
    c = src.config
    assert c["model_type"] == "qwen3"
    assert (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]) == (1024, 3072, 28)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (16, 8, 128)
    assert c["rms_norm_eps"] == 1e-6 and c["rope_theta"] == 1e6 and c["vocab_size"] == 151669
    assert c["max_position_embeddings"] == 32768 and c["torch_dtype"] == "bfloat16"
    assert c["tie_word_embeddings"] is True


def test_unknown_model_lists_known_ids_and_other_forms():
    with pytest.raises(EmmyError) as e:
        resolve_model("no-such/model")
    text = str(e.value)
    assert "unknown model 'no-such/model'" in text
    for known in known_models():
        assert known in text
    assert "config.json" in text and "file.py:fn" in text


def test_python_file_without_function_name(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def make(): pass\n")
    with pytest.raises(EmmyError, match="function name"):
        resolve_model(str(path))


def test_factory_missing_function(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def make(): pass\n")
    with pytest.raises(EmmyError, match="defines no function 'nope'.*\n.*make"):
        resolve_model(f"{path}:nope")


def test_factory_missing_file(tmp_path):
    with pytest.raises(EmmyError, match="does not exist"):
        resolve_model(f"{tmp_path}/absent.py:make")


def test_directory_without_config(tmp_path):
    with pytest.raises(EmmyError, match="has no config.json"):
        resolve_model(str(tmp_path))


def test_hf_cache_copy_is_used(tmp_path):
    snap = tmp_path / "models--Qwen--Qwen3-Embedding-0.6B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen3", "num_hidden_layers": 2}))
    assert resolve_model(QWEN, hf_cache=tmp_path).weights_dir is None  # no safetensors: ignored
    (snap / "model.safetensors").write_bytes(b"")
    src = resolve_model(QWEN, hf_cache=tmp_path)
    assert src.weights_dir == snap and src.config["num_hidden_layers"] == 2


# ------------------------------------------------------------------------------ trace_layer
def test_layer_out_of_range():
    src = resolve_model(QWEN)
    for bad in (28, -1):
        with pytest.raises(EmmyError, match=r"layer .* out of range.*28 layers.*0\.\.27"):
            trace_layer(src, bad, 8)


def test_layer_op_counts(qwen_layer):
    counts = op_counts(qwen_layer)
    assert counts["torch.rms_norm"] == 4  # input, post-attention, q_norm, k_norm
    assert counts["torch.linear"] == 7
    assert counts["torch.scaled_dot_product_attention"] == 1
    assert counts["torch.silu"] == 1
    assert counts["torch.add"] == 4  # two RoPE sums, two residuals
    # HF's RMSNorm internals never leak through
    assert not counts & Counter({"torch.rsqrt": 1, "torch.to": 1, "torch.mul_scalar": 1})


def test_sdpa_properties(qwen_layer):
    (sdpa,) = [op for op in qwen_layer.module.walk() if isinstance(op, T.ScaledDotProductAttentionOp)]
    assert sdpa.is_causal.value.data and sdpa.enable_gqa.value.data
    assert sdpa.scale.value.data == pytest.approx(128**-0.5)
    assert T.shape_of(sdpa.q) == (1, 16, 32, 128) and T.shape_of(sdpa.k) == (1, 8, 32, 128)


def test_layer_module_and_function(qwen_layer):
    attrs = qwen_layer.module.attributes
    assert attrs["emmy.model"].data == QWEN
    assert attrs["emmy.layer"].value.data == 0 and attrs["emmy.tokens"].value.data == 32
    fn = the_func(qwen_layer)
    assert fn.sym_name.data == "layer0" == qwen_layer.function_name
    assert [tuple(t.get_shape()) for t in fn.function_type.outputs] == [(1, 32, 1024)]


def test_parameter_naming(qwen_layer):
    fn = the_func(qwen_layer)
    names = [arg_attr(fn, i, "emmy.name") for i in range(len(fn.args))]
    roles = [arg_attr(fn, i, "emmy.role") for i in range(len(fn.args))]
    expected_params = [
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
    ]
    assert names == ["hidden_states", "cos", "sin"] + expected_params
    assert roles == ["input"] * 3 + ["param"] * 11
    assert list(qwen_layer.params) == expected_params
    assert list(qwen_layer.inputs) == ["hidden_states", "cos", "sin"]
    for arg, t in zip(fn.args, qwen_layer.arguments()):
        assert tuple(arg.type.get_shape()) == tuple(t.shape)
    assert qwen_layer.inputs["hidden_states"].shape == (1, 32, 1024)
    assert qwen_layer.inputs["cos"].shape == qwen_layer.inputs["sin"].shape == (1, 32, 128)
    assert all(t.dtype == torch.bfloat16 for t in qwen_layer.arguments())


def test_random_weights_deterministic_and_scaled(qwen_layer):
    p = qwen_layer.params
    assert 0.015 < p["self_attn.q_proj.weight"].float().std() < 0.025
    assert abs(p["input_layernorm.weight"].float().mean() - 1) < 0.01
    again = trace_layer(resolve_model(QWEN), 0, 32)
    assert all(torch.equal(p[k], again.params[k]) for k in p)
    other = trace_layer(resolve_model(QWEN), 0, 32, seed=1)
    assert not torch.equal(p["mlp.up_proj.weight"], other.params["mlp.up_proj.weight"])
    out = qwen_layer.reference(qwen_layer.inputs)
    assert out.shape == (1, 32, 1024) and torch.isfinite(out.float()).all()


def test_tracing_fills_no_weights_and_they_are_the_seeded_values():
    """Tracing reads only the norm weights (the capture probes the norms); the other values are
    made on first use and equal what `random_weights` fills in a module (the values before the
    weights became lazy), and the layer module runs with them."""
    from emmy.frontend import decoder
    from emmy.frontend.trace import materialize, random_weights

    for tracer in ("capture", "export"):
        traced = trace_layer(resolve_model(QWEN), 2, 8, seed=3, tracer=tracer)
        assert sorted(traced.params.materialized()) == [
            "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.k_norm.weight",
            "self_attn.q_norm.weight",
        ]
    c = decoder.LayerConfig.from_hf(dict(resolve_model(QWEN).config), QWEN)
    eager = materialize(decoder.DecoderLayer(c), c.dtype)
    random_weights(eager, 3, 2)
    expected = dict(eager.named_parameters())
    assert list(traced.params) == list(expected)
    assert all(torch.equal(traced.params[k], expected[k]) for k in expected)
    module = traced.layer_module
    assert all(p is not expected[k] and torch.equal(p, expected[k]) for k, p in module.named_parameters())
    with torch.no_grad():
        direct = eager(*(traced.inputs[k] for k in ("hidden_states", "cos", "sin")))
    assert torch.equal(traced.reference(traced.inputs), direct)


def test_ir_computes_the_reference(qwen_layer):
    (out,) = evaluate(qwen_layer, qwen_layer.inputs)
    assert torch.equal(out, qwen_layer.reference(qwen_layer.inputs))


def test_ir_round_trips_as_text(qwen_layer):
    text = print_module(qwen_layer.module)
    assert print_module(parse_module(make_context(), text, "layer.mlir")) == text


def test_matches_transformers_qwen3_layer_bitwise():
    pytest.importorskip("transformers")
    src = resolve_model(QWEN)
    ours = trace_layer(src, 5, 16, seed=3)
    hf = trace_layer(src, 5, 16, seed=3, implementation="transformers")
    assert type(hf.layer_module).__name__ == "Qwen3DecoderLayer"
    assert list(ours.params) == list(hf.params)
    assert all(torch.equal(ours.params[k], hf.params[k]) for k in ours.params)
    assert all(torch.equal(ours.inputs[k], hf.inputs[k]) for k in ours.inputs)  # incl. rotary cos/sin
    assert torch.equal(ours.reference(ours.inputs), hf.reference(ours.inputs))
    assert print_module(ours.module) == print_module(hf.module)


TINY = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "vocab_size": 100,
    "max_position_embeddings": 128,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_llama_family_matches_transformers(tmp_path, model_type):
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": model_type}))
    src = resolve_model(str(tmp_path))
    assert src.kind == "local" and src.weights_dir is None
    ours = trace_layer(src, 1, 8)
    hf = trace_layer(src, 1, 8, implementation="transformers")
    assert type(hf.layer_module).__name__.lower().startswith(model_type)
    assert list(ours.params) == list(hf.params)
    assert torch.equal(ours.reference(ours.inputs), hf.reference(ours.inputs))
    # transformers' own RMSNorm classes become one torch.rms_norm each
    for traced in (ours, hf):
        counts = op_counts(traced)
        assert counts["torch.rms_norm"] == 2 and counts["torch.linear"] == 7
        assert counts["torch.scaled_dot_product_attention"] == 1
    assert (model_type == "qwen2") == ("self_attn.q_proj.bias" in ours.params)
    (out,) = evaluate(hf, hf.inputs)
    assert torch.equal(out, hf.reference(hf.inputs))
    # the module is called as Emmy's own layer is (tools/bench.py and the layer checks do)
    assert torch.equal(hf.layer_module(*hf.inputs.values()), hf.reference(hf.inputs))


def test_a_layer_emmy_does_not_build_itself_runs_like_its_own(tmp_path):
    """Llama 3's rotary scaling (`rope_type` llama3) is not Emmy's own layer's: transformers'
    layer is traced, and the benchmark calls it as `module(hidden_states, cos, sin)` too."""
    pytest.importorskip("transformers")
    scaling = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
               "original_max_position_embeddings": 64, "rope_type": "llama3"}
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "llama", "rope_scaling": scaling}))
    traced = trace_layer(resolve_model(str(tmp_path)), 0, 8)
    assert type(traced.layer_module).__name__ == "LlamaDecoderLayer"
    assert "self_attn.q_proj.weight" in traced.params
    assert torch.equal(traced.layer_module(*traced.inputs.values()), traced.reference(traced.inputs))


def test_local_directory_weights_from_safetensors(tmp_path):
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "qwen3", "head_dim": 16}))
    random_layer = trace_layer(resolve_model(str(tmp_path)), 1, 4, seed=7)
    tensors = {f"model.layers.1.{k}": torch.full_like(v, 0.5) for k, v in random_layer.params.items()}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    src = resolve_model(str(tmp_path))
    assert src.weights_dir == tmp_path
    loaded = trace_layer(src, 1, 4)
    assert all((v == 0.5).all() for v in loaded.params.values())
    with pytest.raises(EmmyError, match="lack weights of layer 0"):
        trace_layer(src, 0, 4)
    tensors["model.layers.1.mlp.up_proj.weight"] = torch.ones(3, 3, dtype=torch.bfloat16)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(EmmyError, match=r"model.layers.1.mlp.up_proj.weight has shape \[3, 3\], expected"):
        trace_layer(src, 1, 4)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(EmmyError, match=r"cannot read .*model.safetensors: SafetensorError"):
        trace_layer(src, 1, 4)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_size": "big"}, "the config's hidden_size is 'big'; it must be a positive integer"),
        ({"num_attention_heads": 0}, "the config's num_attention_heads is 0; it must be a positive integer"),
        ({"num_hidden_layers": None}, "the config's num_hidden_layers is missing"),
        ({"intermediate_size": 2.5}, "the config's intermediate_size is 2.5"),
        ({"rms_norm_eps": "tiny"}, "the config's rms_norm_eps is 'tiny'; it must be a positive number"),
        ({"rope_theta": -1}, "the config's rope_theta is -1"),
        ({"sliding_window": "abc", "use_sliding_window": True}, "the config's sliding_window is 'abc'; it must be a positive integer"),
        ({"sliding_window": -3, "use_sliding_window": True}, "the config's sliding_window is -3"),
        ({"sliding_window": 2, "use_sliding_window": True, "max_window_layers": "x"},
         "the config's max_window_layers is 'x'; it must be a whole number"),
    ],
)
def test_malformed_config_fields(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "model_type": "qwen3", "head_dim": 16, **change}))
    with pytest.raises(EmmyError, match=re.escape(f"{tmp_path}: {message}")):
        trace_layer(resolve_model(str(tmp_path)), 0, 4)


# ------------------------------------------------------------------------------ factories
FACTORY = """
import torch
from torch import nn

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x):
        return torch.nn.functional.silu(self.proj(x))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.out = nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return self.out(self.inner(x)) + x

class Bad(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(Inner(), Cumsum())

    def forward(self, x):
        return self.block(x)

class Cumsum(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)

def make():
    torch.manual_seed(0)
    return Model(), (torch.randn(1, 8, 16),)

def bad():
    return Bad(), (torch.randn(1, 8, 16),)
"""


@pytest.fixture
def factory_file(tmp_path) -> Path:
    path = tmp_path / "factory.py"
    path.write_text(textwrap.dedent(FACTORY))
    return path


def test_factory_traces_whole_module(factory_file):
    src = resolve_model(f"{factory_file}:make")
    assert src.kind == "factory"
    traced = trace_layer(src, 0, 8)
    fn = the_func(traced)
    assert fn.sym_name.data == "forward"
    assert "emmy.layer" not in traced.module.attributes
    assert traced.module.attributes["emmy.model"].data == f"{factory_file}:make"
    names = [arg_attr(fn, i, "emmy.name") for i in range(len(fn.args))]
    assert names == ["input0", "inner.proj.weight", "inner.proj.bias", "out.weight"]
    assert [op.name for op in fn.body.block.ops] == [
        "torch.linear",
        "torch.silu",
        "torch.linear",
        "torch.add",
        "func.return",
    ]
    (out,) = evaluate(traced, traced.inputs)
    assert torch.equal(out, traced.reference(traced.inputs))


def test_unsupported_op_names_op_and_module_path(factory_file):
    src = resolve_model(f"{factory_file}:bad")
    with pytest.raises(EmmyError) as e:
        trace_layer(src, 0, 8)
    assert str(e.value) == "unsupported torch op 'aten.cumsum' at block.1 (Cumsum) (stage: torch import)"


class _Op(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("fn,message", [
    (lambda x: torch.pow(x, 4.0), "pow with exponent 4 (supported: -1, -0.5, 0.5, 1, 2, 3)"),
    (lambda x: torch.pow(2.0, x), "pow with a tensor exponent"),
    (lambda x: torch.softmax(x, dim=0), "softmax over dimension 0 (only the last, 1, is supported)"),
    (lambda x: torch.softmax(x, dim=-1, dtype=torch.float32), "softmax with a dtype argument"),
    (lambda x: torch.maximum(x, torch.tensor(0.0)), None),
    (lambda x: torch.mean(x, dim=-1, dtype=torch.float32), "mean with a dtype argument"),
    (lambda x: torch.matmul(x, x[0]), "matmul of a vector (both operands need rank 2 or more)"),
    (lambda x: x.repeat_interleave(2), "repeat_interleave without a dim (it flattens its input)"),
])
def test_unsupported_forms_of_supported_ops(fn, message):
    """Each new op's forms Emmy does not lower are refused at import with the reason."""
    with pytest.raises(EmmyError) as e:
        trace_layer(_source(_Op(fn), torch.ones(3, 4)), 0, 1)
    if message is not None:
        assert message in str(e.value) and "stage: torch import" in str(e.value)


def test_supported_ops_table_has_the_model_level_ops():
    for name in ("aten.linear", "aten.scaled_dot_product_attention", "aten.silu", "aten.cat", "aten.view",
                 "aten.relu", "aten.sigmoid", "aten.softmax", "aten.mean", "aten.pow", "aten.chunk"):
        assert name in OP_TABLE


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.constant = torch.ones(4)  # neither a parameter nor a buffer

    def forward(self, x):
        return x * self.scale


class _ReturnsConstant(_Scaled):
    def forward(self, x):
        return self.constant


class _UsesConstant(_Scaled):
    def forward(self, x):
        return x * self.constant


def _source(module, *inputs) -> ModelSource:
    return ModelSource(spec="t.py:f", kind="factory", model_id="t", factory=lambda: (module, inputs))


def test_factory_buffers_are_params():
    traced = trace_layer(_source(_Scaled(), torch.ones(4)), 0, 1)
    assert list(traced.params) == ["scale"]
    assert [op.name for op in the_func(traced).body.block.ops] == ["torch.mul", "func.return"]


def test_factory_constant_tensors_are_errors():
    with pytest.raises(EmmyError, match="computed from its inputs"):
        trace_layer(_source(_ReturnsConstant(), torch.ones(4)), 0, 1)
    with pytest.raises(EmmyError, match=r"unsupported torch op 'aten.mul' at <root> \(_UsesConstant\).*constant tensor"):
        trace_layer(_source(_UsesConstant(), torch.ones(4)), 0, 1)
    with pytest.raises(EmmyError, match="must return \\(module, example_inputs\\)"):
        trace_layer(ModelSource(spec="t.py:f", kind="factory", model_id="t", factory=lambda: 3), 0, 1)


@pytest.mark.parametrize(
    "example, message",
    [
        ((3.0,), "example_inputs must be tensors"),
        ((), "example_inputs must be tensors"),
        ((torch.ones(0, 16),), r"example input 0 has shape \[0, 16\]; Emmy compiles static shapes with at least one"),
    ],
)
def test_factory_example_inputs_errors(example, message):
    made = (torch.nn.Identity(), example)
    with pytest.raises(EmmyError, match=message):
        trace_layer(ModelSource(spec="t.py:f", kind="factory", model_id="t", factory=lambda: made), 0, 1)


class MyRMSNorm(torch.nn.Module):
    """HF-style RMSNorm under another class name: recognized."""

    def __init__(self, n, eps=1e-5, one_plus=False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n) * 0.1 + 1)
        self.variance_epsilon = eps
        self.one_plus = one_plus

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        w = 1 + self.weight if self.one_plus else self.weight
        return w * x.to(dtype)


class _Normed(torch.nn.Module):
    def __init__(self, one_plus):
        super().__init__()
        self.norm = MyRMSNorm(16, one_plus=one_plus).to(torch.bfloat16)

    def forward(self, x):
        return self.norm(x)


def test_rms_norm_recognized_by_behaviour():
    x = torch.randn(1, 4, 16, dtype=torch.bfloat16)
    traced = trace_layer(_source(_Normed(one_plus=False), x), 0, 4)
    (norm,) = [op for op in traced.module.walk() if isinstance(op, T.RmsNormOp)]
    assert norm.eps.value.data == 1e-5
    (out,) = evaluate(traced, traced.inputs)
    assert torch.equal(out, traced.reference(traced.inputs))
    # Gemma-style (1 + weight) is not torch.rms_norm: its ops are recorded one by one (pow,
    # mean, rsqrt, ...) and compute the same
    gemma = trace_layer(_source(_Normed(one_plus=True), x), 0, 4)
    names = {op.name for op in gemma.module.walk()}
    assert "torch.rms_norm" not in names and {"torch.pow_scalar", "torch.mean"} <= names
    (out,) = evaluate(gemma, gemma.inputs)
    assert torch.equal(out, gemma.reference(gemma.inputs))


class _Layout(torch.nn.Module):
    """Python-level tensor idioms that must import as slices, views, transposes and scalars."""

    def forward(self, x, y):
        a = x[:, None, 1:-1, ::2]  # unsqueeze + slices, negative end, step
        b = x[0].t().unsqueeze(0).double()  # select, 2-D transpose, cast
        c = torch.narrow(x, -1, 2, 4).permute(0, 2, 1).contiguous()
        d = (2.0 - c) / 4 - 1  # rsub, div by scalar, sub scalar
        e = torch.cat([d.flatten(1), y.reshape(1, -1)], dim=-1)
        f = x.transpose(-1, -2)[..., :3]
        g = (x - y.view(1, 6, 8)) * x
        return a, b, e, f, g


def test_python_indexing_and_scalar_idioms():
    x = torch.randn(1, 6, 8)
    y = torch.randn(6, 8)
    traced = trace_layer(_source(_Layout(), x, y), 0, 6)
    names = Counter(op.name for op in the_func(traced).body.block.ops)
    assert names["torch.slice"] >= 4 and names["torch.view"] >= 3 and names["torch.permute"] == 1
    assert names["torch.transpose"] == 2 and names["torch.to"] == 1 and names["torch.cat"] == 1
    outs = evaluate(traced, traced.inputs)
    refs = traced.reference(traced.inputs)
    assert len(outs) == len(refs) == 5
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)  # x / 4 imports as x * 0.25


def _interleave_inplace_t(x):
    y = x * 2.0
    y += x.repeat_interleave(2, dim=-1)[..., ::2]  # in place, on a tensor nothing else sees
    y.mul_(0.5)
    return y @ x.T, x.repeat_interleave(3, dim=0)


def test_repeat_interleave_in_place_arithmetic_and_big_t():
    """GPT-J's and GLM's rotary tables (`repeat_interleave`), Falcon's `+=` and `weight.T`."""
    x = torch.randn(3, 4)
    traced = trace_layer(_source(_Op(_interleave_inplace_t), x), 0, 1)
    names = Counter(op.name for op in the_func(traced).body.block.ops)
    assert names["torch.expand"] == 2 and names["torch.transpose"] == 1 and names["torch.add"] == 1
    for out, ref in zip(evaluate(traced, traced.inputs), traced.reference(traced.inputs)):
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


class _RepeatBy(torch.nn.Module):
    def forward(self, x, repeats):
        return x.repeat_interleave(repeats, dim=0)


def test_repeat_interleave_by_a_tensor_is_refused():
    with pytest.raises(EmmyError) as e:
        trace_layer(_source(_RepeatBy(), torch.ones(3, 4), torch.tensor([1, 2, 1])), 0, 1)
    assert "repeat_interleave with a tensor of repeats" in str(e.value)


def _writes_a_viewed_tensor(x):
    y = x * 2.0
    v = y.view(12)
    y += 1.0
    return v


@pytest.mark.parametrize("fn, message", [
    (lambda x: x.add_(1.0), "in-place 'aten.add_' at <root> (_Op) writes into an input or a parameter"),
    (_writes_a_viewed_tensor, "in-place 'aten.add_' at <root> (_Op) writes into a tensor that shares its storage "
                              "with a view; Emmy records values, not storage"),
])
@pytest.mark.parametrize("tracer", ["capture", "export"])
def test_in_place_arithmetic_that_others_see_is_refused(fn, message, tracer):
    with pytest.raises(EmmyError) as e:
        trace_layer(_source(_Op(fn), torch.ones(3, 4)), 0, 1, tracer=tracer)
    stage = "capture" if tracer == "capture" else "torch.export"
    assert message in str(e.value) and f"(stage: {stage})" in str(e.value)


def test_in_place_arithmetic_imports_alike_with_either_tracer():
    x = torch.randn(3, 4)
    outs = []
    for tracer in ("capture", "export"):
        traced = trace_layer(_source(_Op(_interleave_inplace_t), x), 0, 1, tracer=tracer)
        outs.append(evaluate(traced, traced.inputs))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ------------------------------------------------------------------------------ imports
def test_tracing_a_known_model_does_not_import_transformers():
    """Resolving a known model id and tracing one 512-token layer, in a fresh process, never
    imports transformers (importing it alone costs seconds). How long import + trace take is
    measured by hand (`emmy compile --time-passes`), not asserted here."""
    code = textwrap.dedent(
        """
        import sys
        from emmy.frontend import resolve_model, trace_layer
        traced = trace_layer(resolve_model("Qwen/Qwen3-Embedding-0.6B"), 0, 512)
        print(list(traced.inputs["hidden_states"].shape), "transformers" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split("]") == ["[1, 512, 1024", " False\n"]


def test_factory_with_a_tokens_parameter_gets_tokens():
    """A factory that takes `tokens` (tools/running_example.py:make) is called with --tokens;
    one without keeps its own example inputs (test_factory_traces_whole_module)."""
    root = Path(__file__).resolve().parents[2]
    src = resolve_model(f"{root / 'tools' / 'running_example.py'}:make")
    for tokens in (5, 64):
        traced = trace_layer(src, 0, tokens)
        assert traced.module.attributes["emmy.tokens"].value.data == tokens
        assert list(traced.inputs["input0"].shape) == [1, tokens, 1024]
