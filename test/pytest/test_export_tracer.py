"""The torch.export tracer (`trace_layer(..., tracer="export")`) against the capture tracer.

Both tracers must give byte-identical torch-stage IR for the Llama family (Emmy's decoder copy and
transformers' own classes alike), keep model-level ops (linear, attention) as single ops,
recognize Hugging Face's RMSNorm, and report unsupported ops the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from emmy.diagnostics import EmmyError
from emmy.dialects import torch as T
from emmy.frontend import ModelSource, resolve_model, trace_layer
from emmy.frontend.export import export_graph, find_hf_rms_norms
from emmy.frontend.samples import layer_module, running_example_module
from emmy.frontend.trace import DEFAULT_TRACER, TRACERS
from emmy.ir_io import print_module
from test_frontend import FACTORY, MyRMSNorm, _Layout, _Normed, _ReturnsConstant, _Scaled, _UsesConstant, evaluate

QWEN = "Qwen/Qwen3-Embedding-0.6B"
REPO = Path(__file__).resolve().parents[2]

# Non-power-of-two sizes: hidden 96 = 3 heads x 32, one KV head (GQA 3:1), intermediate 200.
ODD = {
    "hidden_size": 96,
    "intermediate_size": 200,
    "num_hidden_layers": 3,
    "num_attention_heads": 3,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "vocab_size": 101,
    "max_position_embeddings": 128,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}


def counts(module) -> Counter[str]:
    return Counter(op.name for op in module.walk() if op.name.startswith("torch."))


def _source(module, *inputs) -> ModelSource:
    return ModelSource(spec="t.py:f", kind="factory", model_id="t", factory=lambda: (module, inputs))


def test_tracers_and_default():
    assert TRACERS == ("capture", "export") and DEFAULT_TRACER in TRACERS
    with pytest.raises(EmmyError, match="unknown tracer 'jit'"):
        trace_layer(resolve_model(QWEN), 0, 4, tracer="jit")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ identical IR
def test_qwen3_layer_identical_ir():
    capture, export = layer_module("capture"), layer_module("export")
    assert print_module(export) == print_module(capture)
    c = counts(export)
    assert c["torch.rms_norm"] == 4 and c["torch.linear"] == 7
    assert c["torch.scaled_dot_product_attention"] == 1 and c["torch.silu"] == 1
    assert not c & Counter({"torch.rsqrt": 1, "torch.to": 1})


def test_running_example_identical_ir():
    capture, export = running_example_module("capture"), running_example_module("export")
    assert print_module(export) == print_module(capture)
    assert [op.name for op in export.walk() if op.name.startswith("torch.")] == [
        "torch.rms_norm",
        "torch.linear",
        "torch.linear",
        "torch.linear",
    ]


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("config", ["tiny", "odd"])
def test_llama_family_identical_ir(tmp_path, model_type, config):
    from test_frontend import TINY

    base = TINY if config == "tiny" else ODD
    (tmp_path / "config.json").write_text(json.dumps({**base, "model_type": model_type}))
    src = resolve_model(str(tmp_path))
    ours = trace_layer(src, 1, 8, tracer="export")
    text = print_module(ours.module)
    assert text == print_module(trace_layer(src, 1, 8, tracer="capture").module)
    (out,) = evaluate(ours, ours.inputs)
    assert torch.equal(out, ours.reference(ours.inputs))
    if config == "odd":
        assert "tensor<1x8x96xbf16>" in text and "tensor<200x96xbf16>" in text
        assert ("self_attn.q_proj.bias" in ours.params) == (model_type == "qwen2")


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3"])
def test_transformers_layers_through_export(tmp_path, model_type):
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps({**ODD, "model_type": model_type}))
    src = resolve_model(str(tmp_path))
    hf = trace_layer(src, 2, 8, implementation="transformers", tracer="export")
    assert type(hf.layer_module).__name__.lower().startswith(model_type)
    assert print_module(hf.module) == print_module(trace_layer(src, 2, 8, tracer="capture").module)


# ------------------------------------------------------------------------------ factories
@pytest.fixture
def factory_file(tmp_path) -> Path:
    path = tmp_path / "factory.py"
    path.write_text(textwrap.dedent(FACTORY))
    return path


def test_factory_identical_ir(factory_file):
    src = resolve_model(f"{factory_file}:make")
    exp = trace_layer(src, 0, 8, tracer="export")
    assert print_module(exp.module) == print_module(trace_layer(src, 0, 8, tracer="capture").module)
    (out,) = evaluate(exp, exp.inputs)
    assert torch.equal(out, exp.reference(exp.inputs))


def test_unsupported_op_message_is_the_same(factory_file):
    src = resolve_model(f"{factory_file}:bad")
    messages = []
    for tracer in TRACERS:
        with pytest.raises(EmmyError) as e:
            trace_layer(src, 0, 8, tracer=tracer)
        messages.append(str(e.value))
    assert messages == ["unsupported torch op 'aten.cumsum' at block.1 (Cumsum) (stage: torch import)"] * 2


def test_buffers_and_constants():
    traced = trace_layer(_source(_Scaled(), torch.ones(4)), 0, 1, tracer="export")
    assert list(traced.params) == ["scale"]
    assert [op.name for op in traced.module.walk()][-2:] == ["torch.mul", "func.return"]
    with pytest.raises(EmmyError, match="computed from its inputs"):
        trace_layer(_source(_ReturnsConstant(), torch.ones(4)), 0, 1, tracer="export")
    with pytest.raises(EmmyError, match=r"unsupported torch op 'aten.mul' at <root> \(_UsesConstant\).*constant tensor"):
        trace_layer(_source(_UsesConstant(), torch.ones(4)), 0, 1, tracer="export")


def test_rms_norm_pattern():
    x = torch.randn(1, 4, 16, dtype=torch.bfloat16)
    traced = trace_layer(_source(_Normed(one_plus=False), x), 0, 4, tracer="export")
    (norm,) = [op for op in traced.module.walk() if isinstance(op, T.RmsNormOp)]
    assert norm.eps.value.data == 1e-5
    (out,) = evaluate(traced, traced.inputs)
    assert torch.equal(out, traced.reference(traced.inputs))
    # Gemma-style (1 + weight): the weight operand is computed, so the chain is not torch.rms_norm
    # but its primitives (pow, mean, rsqrt, ...), which compute the same
    gemma = trace_layer(_source(_Normed(one_plus=True), x), 0, 4, tracer="export")
    names = {op.name for op in gemma.module.walk()}
    assert "torch.rms_norm" not in names and {"torch.pow_scalar", "torch.mean"} <= names
    (out,) = evaluate(gemma, gemma.inputs)
    assert torch.equal(out, gemma.reference(gemma.inputs))


class _F32Norm(nn.Module):
    """An f32 RMSNorm (the casts are no-ops) and a near miss (mean without keepdim)."""

    def __init__(self):
        super().__init__()
        self.norm = MyRMSNorm(8)
        self.w = nn.Parameter(torch.ones(8))

    def forward(self, x, y):
        return self.norm(x), self.w * (y * torch.rsqrt(y.pow(2).mean(-1) + 1e-5)[..., None])


def test_rms_norm_pattern_f32_and_near_miss():
    module = _F32Norm()
    inputs = [("x", torch.randn(2, 8)), ("y", torch.randn(2, 8))]
    params = list(module.named_parameters())
    graph = export_graph(module, module, inputs, params)
    ops = [n.op for n in graph.nodes]
    assert ops.count("emmy.hf_rms_norm") == 1 and "aten.pow" in ops and "aten.mean" in ops
    (norm,) = [n for n in graph.nodes if n.op == "emmy.hf_rms_norm"]
    assert norm.module_path == "norm" and norm.module_class == "MyRMSNorm" and norm.kwargs == {"eps": 1e-5}
    ep = torch.export.export(module, tuple(t for _, t in inputs), strict=False)
    weights = {n for n in ep.graph.nodes if n.op == "placeholder"}
    norms, skip = find_hf_rms_norms(ep.graph, weights)
    assert len(norms) == 1 and len(skip) == 7  # to, pow, mean, add, rsqrt, mul, to


def test_python_indexing_idioms_compute_the_same():
    x, y = torch.randn(1, 6, 8), torch.randn(6, 8)
    traced = trace_layer(_source(_Layout(), x, y), 0, 6, tracer="export")
    outs, refs = evaluate(traced, traced.inputs), traced.reference(traced.inputs)
    assert len(outs) == len(refs) == 5
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


class _DataDependent(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_export_failure_is_an_emmy_error():
    with pytest.raises(EmmyError, match=r"torch.export could not trace _DataDependent: .*\(stage: torch.export\)"):
        trace_layer(_source(_DataDependent(), torch.ones(4)), 0, 1, tracer="export")


# ------------------------------------------------------------------------------ imports
def test_export_tracing_a_known_model_does_not_import_transformers():
    """`torch.export` traces a 512-token Qwen3 layer of a known model id, in a fresh process,
    without importing transformers. How long it takes is measured by hand, not asserted."""
    code = textwrap.dedent(
        """
        import sys
        from emmy.frontend import resolve_model, trace_layer
        traced = trace_layer(resolve_model("Qwen/Qwen3-Embedding-0.6B"), 0, 512, tracer="export")
        print(list(traced.inputs["hidden_states"].shape), "transformers" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split("]") == ["[1, 512, 1024", " False\n"]
