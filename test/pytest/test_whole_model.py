"""Whole-model tracing (`trace_model`): embedding, every decoder layer, final norm, reference."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from emmy.cli.main import run
from torch.nn import functional as F

from emmy.diagnostics import EmmyError
from emmy.dialects import torch as T
from emmy.frontend import ModelSource, TracedModel, layer_key, resolve_model, trace_layer, trace_model
from emmy.ir_io import print_module
from test_frontend import evaluate

QWEN = "Qwen/Qwen3-Embedding-0.6B"
REPO = Path(__file__).resolve().parents[2]
FAMILY = ["llama", "mistral", "qwen2", "qwen3"]

# Non-power-of-two sizes: hidden 96 = 3 heads x 32, one KV head, intermediate 200, vocab 101.
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


def local(tmp_path: Path, model_type: str, **extra) -> ModelSource:
    (tmp_path / "config.json").write_text(json.dumps({**ODD, "model_type": model_type, **extra}))
    return resolve_model(str(tmp_path))


def ops(part) -> list[str]:
    return [op.name for op in part.module.walk() if op.name.startswith("torch.")]


def hf_model(config: dict):
    """transformers' <Arch>Model for a config, bf16, SDPA attention."""
    transformers = pytest.importorskip("transformers")
    hc = transformers.AutoConfig.for_model(**config)
    hc._attn_implementation = "sdpa"
    return transformers.AutoModel.from_config(hc, dtype=torch.bfloat16).eval()


def state_dict(model: TracedModel) -> dict[str, torch.Tensor]:
    sd = {"embed_tokens.weight": model.embedding.params["embed_tokens.weight"]}
    sd["norm.weight"] = model.norm.params["norm.weight"]
    for i, layer in enumerate(model.layers):
        sd |= {f"layers.{i}.{k}": v for k, v in layer.params.items()}
    return sd


# ------------------------------------------------------------------------------ structure
@pytest.mark.parametrize("model_type", FAMILY)
def test_parts_and_their_ir(tmp_path, model_type):
    src = local(tmp_path, model_type)
    model = trace_model(src, 8, seed=2)
    assert len(model.layers) == 3 and len(model.parts()) == 5
    assert [p.function_name for p in model.parts()] == ["embed_tokens", "layer0", "layer1", "layer2", "norm"]
    assert ops(model.embedding) == ["torch.embedding"] and ops(model.norm) == ["torch.rms_norm"]
    emb = print_module(model.embedding.module)
    assert "(%input_ids: tensor<1x8xi64>" in emb and "tensor<101x96xbf16>" in emb
    assert "-> tensor<1x8x96xbf16>" in emb
    for part in (model.embedding, model.norm):
        attrs = part.module.attributes
        assert attrs["emmy.model"].data == str(tmp_path) and attrs["emmy.tokens"].value.data == 8
        assert "emmy.layer" not in attrs
    assert list(model.norm.params) == ["norm.weight"] and list(model.embedding.params) == ["embed_tokens.weight"]
    # each layer is exactly what trace_layer gives: IR, weights, example inputs
    for i, layer in enumerate(model.layers):
        alone = trace_layer(src, i, 8, seed=2)
        assert print_module(layer.module) == print_module(alone.module)
        assert list(layer.params) == list(alone.params)
        assert all(torch.equal(layer.params[k], alone.params[k]) for k in alone.params)
        assert all(torch.equal(layer.inputs[k], alone.inputs[k]) for k in alone.inputs)
        assert torch.equal(layer.reference(layer.inputs), alone.reference(alone.inputs))


def test_layer_keys(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src = local(tmp_path / "a", "qwen3")
    model = trace_model(src, 8)
    keys = {layer_key(layer) for layer in model.layers}
    assert len(keys) == 1 and model.distinct_layers() == {next(iter(keys)): [0, 1, 2]}
    assert len({layer_key(model.embedding), layer_key(model.norm), *keys}) == 3
    assert layer_key(trace_layer(src, 2, 8, seed=5)) in keys  # weights do not matter
    # a different structure (tokens, biases) gives a different key
    assert layer_key(trace_model(src, 9).layers[0]) not in keys
    assert layer_key(trace_model(local(tmp_path / "b", "qwen2"), 8).layers[0]) not in keys
    # the key ignores emmy.layer and the function name only
    text = print_module(model.layers[1].module)
    assert text.replace("@layer1", "@layer2").replace("emmy.layer = 1", "emmy.layer = 2") == print_module(
        model.layers[2].module
    )


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3"])
def test_tracers_agree(tmp_path, model_type):
    src = local(tmp_path, model_type)
    a, b = trace_model(src, 8, tracer="capture"), trace_model(src, 8, tracer="export")
    assert [print_module(p.module) for p in a.parts()] == [print_module(p.module) for p in b.parts()]


# ------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("model_type", FAMILY)
def test_reference_matches_transformers_model(tmp_path, model_type):
    src = local(tmp_path, model_type)
    model = trace_model(src, 8)
    hf = hf_model(dict(src.config))
    assert type(hf).__name__.lower().startswith(model_type)
    result = hf.load_state_dict(state_dict(model), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    for ids in (torch.tensor([[5, 0, 100, 7, 7]]), model.input_ids):  # also another length
        with torch.no_grad():
            expected = hf(input_ids=ids).last_hidden_state
        out = model.reference(ids)
        assert out.shape == (1, ids.shape[1], 96) and out.dtype == torch.bfloat16
        assert torch.equal(out, expected)
    # Qwen3-Embedding's recipe: last-token pooling (no padding), then F.normalize(p=2, dim=1)
    emb = model.embed()
    assert torch.equal(emb, F.normalize(expected[:, -1], p=2, dim=1))
    assert emb.shape == (1, 96) and abs(emb.float().norm().item() - 1) < 1e-2


def test_ir_of_all_parts_computes_the_model(tmp_path):
    model = trace_model(local(tmp_path, "qwen3"), 8, seed=4)
    (h,) = evaluate(model.embedding, {"input_ids": model.input_ids})
    for layer in model.layers:
        (h,) = evaluate(layer, {"hidden_states": h, "cos": model.cos, "sin": model.sin})
    (h,) = evaluate(model.norm, {"hidden_states": h})
    assert torch.equal(h, model.reference())


def test_embed_is_last_token_pooled_and_normalized(tmp_path):
    model = trace_model(local(tmp_path, "qwen3"), 6)
    last = model.reference()[:, -1].float()
    emb = model.embed()
    torch.testing.assert_close(emb.float(), last / last.norm(dim=1, keepdim=True), rtol=1e-2, atol=1e-2)
    other = torch.tensor([[1, 2, 3]])
    assert not torch.equal(model.embed(other), emb)


# ------------------------------------------------------------------------------ weights
def test_weights_from_safetensors(tmp_path):
    hf = hf_model({**ODD, "model_type": "qwen3"})
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.5)
    hf.save_pretrained(str(tmp_path))  # config.json + model.safetensors (keys without "model.")
    src = resolve_model(str(tmp_path))
    assert src.weights_dir == tmp_path
    model = trace_model(src, 8)
    assert torch.equal(model.layers[1].params["mlp.up_proj.weight"], hf.layers[1].mlp.up_proj.weight)
    with torch.no_grad():
        expected = hf(input_ids=model.input_ids).last_hidden_state
    assert torch.equal(model.reference(), expected)


def test_safetensors_errors(tmp_path):
    from safetensors.torch import save_file

    model = trace_model(local(tmp_path, "llama"), 4)
    sd = {f"model.{k}": v for k, v in state_dict(model).items()}
    save_file({k: v for k, v in sd.items() if k != "model.layers.2.mlp.down_proj.weight"}, str(tmp_path / "model.safetensors"))
    with pytest.raises(EmmyError, match=r"lack model.layers.2.mlp.down_proj.weight"):
        trace_model(resolve_model(str(tmp_path)), 4)
    sd["model.norm.weight"] = torch.ones(95, dtype=torch.bfloat16)
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(EmmyError, match=r"model.norm.weight has shape \[95\], expected \[96\]"):
        trace_model(resolve_model(str(tmp_path)), 4)


def test_weights_are_lazy_and_seeded():
    src = resolve_model(QWEN)
    model = trace_model(src, 16, seed=1)
    assert len(model.layers) == 28 and len(model.distinct_layers()) == 1
    assert model.embedding.params.materialized() == []  # the 151669x1024 table is never built
    assert all(layer.params.materialized() == [] for layer in model.layers[1:])
    # layer 0 was traced on uninitialized weights: only the norms, which the capture checks, are read
    assert sorted(model.layers[0].params.materialized()) == [
        "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.k_norm.weight", "self_attn.q_norm.weight"]
    alone = trace_layer(src, 27, 16, seed=1)
    assert all(torch.equal(model.layers[27].params[k], alone.params[k]) for k in alone.params)
    assert print_module(model.layers[27].module) == print_module(alone.module)
    (emb,) = [op for op in model.embedding.module.walk() if isinstance(op, T.EmbeddingOp)]
    assert T.shape_of(emb.weight) == (151669, 1024) and T.shape_of(emb.result) == (1, 16, 1024)


# ------------------------------------------------------------------------------ errors
def test_errors(tmp_path):
    factory = ModelSource(spec="f.py:make", kind="factory", model_id="f", factory=lambda: None)
    with pytest.raises(EmmyError, match="is a Python factory"):
        trace_model(factory, 8)
    (tmp_path / "config.json").write_text(json.dumps({**ODD, "model_type": "gemma"}))
    with pytest.raises(EmmyError, match="supports the Llama family.*'gemma'") as e:
        trace_model(resolve_model(str(tmp_path)), 8)
    assert "--layer N" in (e.value.hint or "")
    with pytest.raises(EmmyError, match="at least 1"):
        trace_model(resolve_model(QWEN), 0)
    with pytest.raises(EmmyError, match="shape \\[1, T\\]"):
        trace_model(resolve_model(QWEN), 2).reference(torch.zeros(4, dtype=torch.long))


def test_sliding_window_layers():
    from emmy.frontend.decoder import sliding_window

    assert sliding_window({"model_type": "mistral", "sliding_window": 4096}, 7) == 4096
    assert sliding_window({"model_type": "mistral", "sliding_window": None}, 7) is None
    qwen2 = {"model_type": "qwen2", "sliding_window": 32, "max_window_layers": 2}
    assert sliding_window(qwen2, 3) is None  # use_sliding_window is off by default
    assert [sliding_window({**qwen2, "use_sliding_window": True}, i) for i in range(4)] == [None, None, 32, 32]
    types = {"model_type": "qwen3", "sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"]}
    assert [sliding_window(types, i) for i in range(2)] == [None, 8]


def _window(part) -> int | None:
    (att,) = [op for op in part.module.walk() if isinstance(op, T.ScaledDotProductAttentionOp)]
    return att.window_value


def test_sliding_window_past_the_sequence_matches_transformers(tmp_path, capsys):
    """A window shorter than the sequence: each layer's attention gets it (query q sees keys
    q - 3 .. q), and the PyTorch reference applies it as transformers' own model does (its
    sliding-window mask), which is not what a plain causal model computes."""
    src = local(tmp_path, "mistral", sliding_window=4)
    model = trace_model(src, 9)
    assert [_window(p) for p in model.layers] == [4, 4, 4]
    hf = hf_model(dict(src.config))
    hf.load_state_dict(state_dict(model), strict=True)
    with torch.no_grad():
        ours = model.reference(model.input_ids)
        assert torch.equal(ours, hf(input_ids=model.input_ids).last_hidden_state)
        assert not torch.equal(ours, trace_model(local(tmp_path, "mistral"), 9).reference(model.input_ids))
    assert [_window(p) for p in trace_model(src, 4).layers] == [None, None, None]  # the window covers it
    assert run(["run", str(tmp_path), "--tokens", "9", "--backend", "interpret", "--check"]) == 0
    assert run(["run", str(tmp_path), "--layer", "2", "--tokens", "9", "--backend", "interpret", "--check",
                "--tolerance", "5e-3"]) == 0


def test_sliding_window_layers_are_parts_of_their_own(tmp_path, capsys):
    """Qwen2 windows the layers from `max_window_layers` on: those get a structure (and a kernel
    set) of their own beside the plain causal ones."""
    src = local(tmp_path, "qwen2", sliding_window=5, use_sliding_window=True, max_window_layers=1)
    model = trace_model(src, 11)
    assert [_window(p) for p in model.layers] == [None, 5, 5]
    assert len({layer_key(p) for p in model.layers}) == 2
    assert run(["compile", str(tmp_path), "--tokens", "11", "-o", str(tmp_path / "m.cu")]) == 0
    out = capsys.readouterr().out
    assert "layer0 (used by layers 0)" in out and "layer1 (used by layers 1-2)" in out, out


def test_sliding_window_of_a_layer_without_causal_attention_is_refused(tmp_path):
    from xdsl.dialects.builtin import BoolAttr

    from emmy.frontend.window import set_window

    model = trace_model(local(tmp_path, "mistral"), 3)
    ir = model.layers[0].module.clone()
    for op in ir.walk():
        if isinstance(op, T.ScaledDotProductAttentionOp):
            op.properties["is_causal"] = BoolAttr.from_bool(False)
    with pytest.raises(EmmyError, match="layer 0 of m attends over a sliding window of 2 tokens, but its traced "
                                        "attention is not causal: Emmy applies a window to causal attention only"):
        set_window(ir, 2, "layer 0 of m")


# ------------------------------------------------------------------------------ imports
def test_tracing_the_whole_model_traces_one_layer_structure():
    """Tracing all of Qwen3-Embedding-0.6B (28 layers) in a fresh process: the 28 layers share
    one structure (one layer is traced and compiled) and transformers is never imported. How
    long it takes is measured by hand, not asserted."""
    code = textwrap.dedent(
        """
        import sys
        from emmy.frontend import resolve_model, trace_model
        model = trace_model(resolve_model("Qwen/Qwen3-Embedding-0.6B"), 512)
        print([len(v) for v in model.distinct_layers().values()], "transformers" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["[28]", "False"]


def test_torch_module_runs_the_whole_model(tmp_path):
    import torch
    from tiny_models import write_tiny_model

    from emmy.frontend import resolve_model
    from emmy.frontend.whole_model import trace_model

    traced = trace_model(resolve_model(write_tiny_model(tmp_path / "m")), 6)
    with torch.no_grad():
        out = traced.torch_module()(traced.input_ids, traced.cos, traced.sin)
    assert torch.equal(out, traced.reference())


def test_pins_for_a_whole_model_apply_where_they_fit(tmp_path, capsys):
    """`--knob` on a whole model: a pin naming a layer's kernel pins it in the layer part and
    is no error in the embedding and norm parts, which lack that kernel; a pin that fits no part
    is an error listing the kernels of every part."""
    from emmy.driver import CompileOptions, compile_whole_model
    from emmy.passes.decide_forks import decisions

    seen = {}

    def keep(part, name, module):
        if name == "decide-forks":
            seen[part] = {(d.kernel, d.knob): (d.value, d.tier) for d in decisions(module)}

    opts = CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=None, tokens=16, stop_after="tile",
                          pins=("attention.block_q=32", "*.threads=128"))
    compile_whole_model(opts, keep)
    assert seen["layer0"][("attention", "block_q")] == (32, "pinned")
    assert seen["embed_tokens"][("embedding", "threads")] == (128, "pinned")
    assert seen["norm"][("rms_norm", "threads")] == (128, "pinned")
    assert run(["compile", "Qwen/Qwen3-Embedding-0.6B", "--tokens", "16", "--knob", "attention.block_q=32"]) == 0
    capsys.readouterr()
    with pytest.raises(EmmyError, match=r"pin 'atention.block_q=32': no kernel named 'atention'; kernels: embedding, .*attention.*, rms_norm"):
        compile_whole_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=None, tokens=16,
                                           pins=("atention.block_q=32",)))
    with pytest.raises(EmmyError, match=r"pin '\*.blockq=32': unknown knob 'blockq'"):
        compile_whole_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=None, tokens=16,
                                           pins=("*.blockq=32",)))
