"""Models beyond Qwen3: Llama-family decoders with their own sizes (not powers of two), Qwen2's
q/k/v biases, and common blocks (LayerNorm, linear with bias, GELU in tanh and erf forms) go through
every stage, and their interpreted results match PyTorch."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from emmy.cli.main import run
from emmy.diagnostics import EmmyError
from tiny_models import FAMILIES, OTHER_FAMILIES, REAL, TINY, missing_here, write_real_sized_model, write_tiny_model

HERE = Path(__file__).resolve().parent
BLOCK = str(HERE / "models" / "mlp_block.py") + ":make"

@pytest.fixture(params=sorted(FAMILIES))
def tiny_model(request, tmp_path) -> str:
    return write_tiny_model(tmp_path / request.param, request.param)


def test_layer_of_each_family_matches_pytorch(tiny_model, capsys):
    assert run(["run", tiny_model, "--layer", "1", "--tokens", "9", "--backend", "interpret", "--check",
                "--tolerance", "5e-3"]) == 0
    assert "relative error" in capsys.readouterr().out


@pytest.mark.parametrize("family", sorted(OTHER_FAMILIES))
def test_layer_of_other_families_matches_pytorch(family, tmp_path, capsys):
    if missing_here(family):
        pytest.skip(missing_here(family))
    model = write_tiny_model(tmp_path / family, family)
    assert run(["run", model, "--layer", "0", "--tokens", "9", "--backend", "interpret", "--check",
                "--tolerance", "5e-3"]) == 0
    assert "relative error" in capsys.readouterr().out


def test_layer_check_measures_emmy_and_pytorch_against_float32(tmp_path, capsys):
    """A bf16 layer's --check compares with PyTorch in float32 and allows 1.5x PyTorch's own bf16
    error: Gemma 3's six norms put PyTorch's bf16 layer about 1% from float32, more than a strict
    tolerance, and Emmy's rounding (at other points) no further."""
    model = write_tiny_model(tmp_path / "gemma3", "gemma3")
    assert run(["run", model, "--layer", "0", "--tokens", "9", "--backend", "interpret", "--check",
                "--tolerance", "1e-9"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"relative error vs PyTorch float32 \S+ \(PyTorch bf16: \S+\)", out), out
    assert "(1.5x PyTorch's own bf16 error)" in out.splitlines()[-1]


@pytest.mark.parametrize("family", ["phi3", "gemma3"])
def test_layer_with_a_sliding_window_shorter_than_the_sequence(family, tmp_path, capsys):
    """transformers' own layers of Phi-3 (every layer windowed) and Gemma 3 (local layers) with
    a window of 4 keys over 9 tokens: the IR's attention carries it, the PyTorch reference
    applies it (its result is not the plain causal one), and the two agree."""
    from emmy.frontend import resolve_model, trace_layer

    model = write_tiny_model(tmp_path / family, family, sliding_window=4)
    traced = trace_layer(resolve_model(model), 0, 9)
    assert "window = 4 : i64" in str(traced.module)
    plain = trace_layer(resolve_model(write_tiny_model(tmp_path / "plain", family, sliding_window=None)), 0, 9)
    assert not torch.equal(traced.reference(traced.inputs), plain.reference(traced.inputs))
    assert run(["run", model, "--layer", "0", "--tokens", "9", "--backend", "interpret", "--check",
                "--tolerance", "5e-3"]) == 0


def test_config_in_its_own_field_names(tmp_path, capsys):
    """GPT-J's config.json says n_embd, n_head, n_layer and n_positions (transformers' attribute
    map gives the standard names): its layer runs, and the checks read those fields."""
    d = tmp_path / "gptj"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "gptj", "n_embd": 96, "n_head": 3, "n_layer": 2, "n_positions": 64, "rotary_dim": 16,
        "vocab_size": 500, "torch_dtype": "bfloat16", "activation_function": "gelu_new"}))
    assert run(["run", str(d), "--layer", "1", "--tokens", "9", "--backend", "interpret", "--check",
                "--tolerance", "5e-3"]) == 0
    from emmy.cli.report import run_guarded

    assert run_guarded(run, ["compile", str(d), "--layer", "2", "--tokens", "9"]) == 1
    assert "it has 2 layers, valid layers are 0..1" in capsys.readouterr().err
    assert run_guarded(run, ["compile", str(d), "--layer", "0", "--tokens", "65"]) == 1
    assert "its config sets max_position_embeddings to 64" in capsys.readouterr().err


def test_rotary_rounded_from_f32_is_a_flash_operand(tmp_path, capsys):
    """Cohere rounds its f32 rotary to bf16 before the attention (extf(truncf(...))): a bf16
    operand of the flash kernel like any other (it was refused as not bf16)."""
    model = write_tiny_model(tmp_path / "cohere", "cohere")
    assert run(["compile", model, "--layer", "0", "--tokens", "300", "--target", "sm_90a"]) == 0
    assert re.search(r"\n  attention +grid", capsys.readouterr().out)


def test_whole_model_embedding_matches_pytorch(tiny_model, capsys):
    assert run(["run", tiny_model, "--tokens", "7", "--backend", "interpret", "--check"]) == 0
    assert "pooled embedding shape (1, 96)" in capsys.readouterr().out


def test_whole_model_compiles_to_cuda(tiny_model, capsys, tmp_path):
    out = tmp_path / "model.cu"
    assert run(["compile", tiny_model, "--tokens", "7", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 distinct parts compiled" in text
    assert "layer0 (used by layers 0-1)" in text
    assert out.read_text().count("__global__") >= 7


def test_block_with_layernorm_bias_and_gelu(capsys):
    assert run(["run", BLOCK, "--backend", "interpret", "--check", "--tolerance", "5e-3"]) == 0
    assert run(["compile", BLOCK, "--ir", "tensor"]) == 0
    tensor_ir = capsys.readouterr().out
    assert "tensor.erf" in tensor_ir and "tensor.tanh" in tensor_ir  # both GELU forms decomposed


ACTIVATIONS = str(HERE / "models" / "activations.py") + ":make"


def test_block_with_relu_sigmoid_pow_chunk_softmax_mean(capsys, tmp_path):
    """ReLU, sigmoid, maximum/minimum, x ** 3, chunk, softmax over the last axis and mean go
    through every stage: interpreted against PyTorch, and the CUDA builds."""
    assert run(["run", ACTIVATIONS, "--backend", "interpret", "--check", "--tolerance", "5e-3"]) == 0
    assert run(["compile", ACTIVATIONS, "--ir", "tensor"]) == 0
    tensor_ir = capsys.readouterr().out
    for op in ("tensor.sigmoid", "tensor.max", "tensor.min", "tensor.reduce_max", "tensor.sum", "tensor.slice"):
        assert op in tensor_ir, op
    if shutil.which("nvcc"):
        from emmy.backend.nvcc import compile_source
        from emmy.backend.plan import launch_plan
        from emmy.driver import CompileOptions, compile_model

        plan = launch_plan(compile_model(CompileOptions(model=ACTIVATIONS, layer=None, target="sm_90")).module)
        assert compile_source(plan.source, "sm_90", tmp_path).exists()


CLAMPS = str(HERE / "models" / "clamp_abs_sum.py") + ":make"


@pytest.mark.parametrize("tracer", ["capture", "export"])
def test_block_with_abs_clamp_sum_amax(tracer, capsys, tmp_path):
    """abs, clamp (both bounds, clamp_min, clamp_max), sum, sqrt and amax over the last axis go through
    every stage with either tracer: interpreted against PyTorch, and the CUDA builds."""
    assert run(["run", CLAMPS, "--backend", "interpret", "--check", "--tolerance", "5e-3", "--tracer", tracer]) == 0
    assert run(["compile", CLAMPS, "--ir", "torch", "--tracer", tracer]) == 0
    torch_ir = capsys.readouterr().out
    for op in ("torch.abs", "torch.clamp", "torch.sum", "torch.amax", "torch.sqrt"):
        assert op in torch_ir, op
    assert "max = 1.000000e+00 : f64}" in torch_ir and "{min = -1.500000e+00 : f64}" in torch_ir
    if shutil.which("nvcc") and tracer == "capture":
        from emmy.backend.nvcc import compile_source
        from emmy.backend.plan import launch_plan
        from emmy.driver import CompileOptions, compile_model

        plan = launch_plan(compile_model(CompileOptions(model=CLAMPS, layer=None, target="sm_90")).module)
        assert compile_source(plan.source, "sm_90", tmp_path).exists()


HANDWRITTEN = str(HERE / "models" / "handwritten_attention.py") + ":make"


@pytest.mark.parametrize("tokens", [21, 300])
def test_handwritten_attention_is_one_flash_kernel(tokens, tmp_path):
    """q @ k^T * scale, softmax, @ v written out by hand (batched matmuls of activations) fuses
    and lowers like scaled_dot_product_attention: one attention kernel, interpreted against
    PyTorch, built with nvcc."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model

    plan = launch_plan(compile_model(CompileOptions(model=HANDWRITTEN, tokens=tokens, target="sm_90a")).module)
    assert [launch.kernel for launch in plan.launches] == ["qkv", "attention", "out_residual"]
    assert plan.source.count("emmy::attention::run<") == 1
    assert run(["run", HANDWRITTEN, "--tokens", str(tokens), "--backend", "interpret", "--check"]) == 0
    if shutil.which("nvcc"):
        from emmy.backend.nvcc import compile_source

        assert compile_source(plan.source, "sm_90a", tmp_path).exists()


RESIDUAL_NORM = str(HERE / "models" / "residual_norm_proj.py") + ":make"


def test_residual_norm_projection_sums_its_statistics_in_the_producer():
    """x + r read only by an RMSNorm before a projection fuses into one contraction whose A side
    is g * (x + r): the producer warpgroup would sum the row statistics (ws_row_stats), so with
    fusion = fused the rules, which take a staggered epilogue at 4096 tokens, back off to
    together (the lowering refused the staggered one); interpreted against PyTorch."""
    from emmy.analysis.classify import classify
    from emmy.dialects.tile import KernelOp
    from emmy.driver import CompileOptions, compile_model

    def kernel(*pins):
        options = CompileOptions(model=RESIDUAL_NORM, tokens=4096, target="sm_90a", pins=pins, stop_after="tile")
        module = compile_model(options).module
        return next(op for op in module.walk() if isinstance(op, KernelOp) and op.kernel_name == "residual_rms_norm_proj")

    def chosen(op):
        return {name: k.value for name, k in op.knob_dict().items()}

    split, fused = kernel(), kernel("*.fusion=fused")
    assert classify(fused).ws_row_stats == "producer"
    assert chosen(split)["epilogue"] == "staggered" and chosen(split)["fusion"] == "split"
    assert chosen(fused)["epilogue"] == "together" and chosen(fused)["schedule"] == "persistent"
    assert run(["run", RESIDUAL_NORM, "--tokens", "40", "--knob", "*.fusion=fused", "--backend", "interpret", "--check"]) == 0


REPEAT_KV = str(HERE / "models" / "repeat_kv_attention.py") + ":make"


@pytest.mark.parametrize("tracer", ["capture", "export"])
def test_repeat_kv_attention_is_one_flash_kernel(tracer, tmp_path):
    """Grouped-query attention with Hugging Face's repeat_kv (expand + reshape of K and V)
    becomes one attention kernel (300 tokens), interpreted against PyTorch."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model

    opts = CompileOptions(model=REPEAT_KV, layer=None, tokens=300, target="sm_90a", tracer=tracer)
    plan = launch_plan(compile_model(opts).module)
    assert [launch.kernel for launch in plan.launches] == ["attention"]
    assert plan.source.count("emmy::attention::run<") == 1
    # at 37 tokens the scores' 32-long sum counts as long next to the 37 keys (loop-fuse's
    # short_limit), so the scores get a kernel of their own; the result is the same
    assert run(["run", REPEAT_KV, "--tokens", "37", "--backend", "interpret", "--check", "--tracer", tracer]) == 0
    if shutil.which("nvcc") and tracer == "capture":
        from emmy.backend.nvcc import compile_source

        assert compile_source(plan.source, "sm_90a", tmp_path).exists()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_block_cuda_compiles_with_nvcc(tmp_path):
    from emmy.backend.nvcc import compile_source
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model

    result = compile_model(CompileOptions(model=BLOCK, layer=None, target="sm_90"))
    plan = launch_plan(result.module)
    # fc1 has 176 columns: its LayerNorm stays the prologue (below loop-fuse's
    # COMPUTED_A_MIN_COLUMNS, from which a computed A is written once)
    assert [launch.kernel for launch in plan.launches] == ["layer_norm_fc1_gelu", "gelu_fc2_residual"]
    assert compile_source(plan.source, "sm_90", tmp_path).exists()


@pytest.mark.parametrize("tokens", [20, 300])
def test_each_family_lowers_attention_to_one_flash_kernel(tiny_model, tokens):
    """Qwen2's q/k/v biases sit inside QK^T; they must not stop the scores from fusing into the
    softmax (the scores would otherwise be a [heads, T, T] float32 tensor in global memory). The
    tiny models have one key/value head for their three query heads, so K and V read no head
    axis: still attention, with the head as a batch axis (K and V computed once for all)."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model

    opts = CompileOptions(model=tiny_model, layer=0, tokens=tokens, target="sm_90a")
    plan = launch_plan(compile_model(opts).module)
    names = [launch.kernel for launch in plan.launches if not launch.prepare]
    assert "attention" in names and not any("proj" in n and "attention" in n for n in names), names
    assert plan.source.count("emmy::attention::run<") == 1
    assert len(names) <= 8, names


ODD_SHAPES = [  # family, hidden, heads, key/value heads, head dim, intermediate, tokens
    ("mistral", 240, 3, 1, 80, 512, 33),  # head dim 80, one key/value head
    ("qwen2", 256, 12, 3, 96, 200, 31),  # head dim 96 with biases, groups of 4
    ("qwen3", 96, 3, 1, 80, 200, 40),  # heads wider than the hidden size
    ("llama", 96, 8, 2, 96, 344, 17),
]


@pytest.mark.parametrize("family,hidden,heads,kv,head_dim,inter,tokens", ODD_SHAPES)
def test_odd_llama_family_shapes(family, hidden, heads, kv, head_dim, inter, tokens, tmp_path, capsys):
    """Head dims that are not powers of two, one or few key/value heads: attention is still one
    flash kernel, and the interpreted layer matches PyTorch."""
    import json

    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model
    from tiny_models import TINY

    config = {**TINY, **FAMILIES[family], "hidden_size": hidden, "num_attention_heads": heads,
              "num_key_value_heads": kv, "head_dim": head_dim, "intermediate_size": inter}
    (tmp_path / "config.json").write_text(json.dumps(config))
    plan = launch_plan(compile_model(CompileOptions(model=str(tmp_path), layer=0, tokens=tokens, target="sm_90a")).module)
    assert plan.source.count("emmy::attention::run<") == 1
    assert run(["run", str(tmp_path), "--layer", "0", "--tokens", str(tokens), "--backend", "interpret", "--check",
                "--tolerance", "5e-3"]) == 0


@pytest.mark.parametrize("name", sorted(REAL))
def test_released_layer_sizes_lower_like_qwen3(name, tmp_path):
    """One layer at the sizes of Qwen2-0.5B, Llama-3.2-1B and Mistral-7B: the same kernels as
    Qwen3's (norm + q/k/v, attention, o + residual, norm + gate/up + SiLU, down + residual)."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model

    model = write_real_sized_model(tmp_path / name, name)
    opts = CompileOptions(model=model, layer=0, tokens=300, target="sm_90a")
    names = {launch.kernel for launch in launch_plan(compile_model(opts).module).launches}
    assert {"rms_norm_qkv_proj", "attention", "o_proj_residual", "rms_norm_gate_up_proj_silu",
            "down_proj_residual"} <= names, names


@pytest.mark.parametrize("dtype, shown", [("float16", "f16"), ("float32", "f32")])
def test_a_model_not_in_bf16_is_refused_by_the_flash_kernel(dtype, shown, tmp_path, capsys):
    """The interpreter runs a float16 or float32 model; the CUDA flash kernel takes bf16 operands,
    and says so, naming the dtype and the fix."""
    model = write_tiny_model(tmp_path / dtype, torch_dtype=dtype)
    from emmy.cli.report import run_guarded

    assert run_guarded(run, ["compile", model, "--layer", "0", "--tokens", "8", "--target", "sm_90a"]) == 1
    err = capsys.readouterr().err
    assert (f"error: tile.kernel @attention (attention): Q is {shown} here, and the flash kernel multiplies bf16 "
            "operands on the tensor cores (a float16 or float32 model compiles to CUDA as bfloat16: set its "
            "torch_dtype to bfloat16)") in err, err
    assert "Traceback" not in err


def test_post_norm_layer_at_persistent_sizes(tmp_path):
    """OLMo-2-1B's layer (norms after the attention and the MLP) at 4097 tokens on sm_90a: its
    o projection stores f32 for the norm after it, so the staggered epilogue, which stages bf16
    results per warpgroup, is not legal there; the rules once chose it (persistent blocks from
    4096 rows) and the build failed."""
    import json

    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_model

    config = {**TINY, **OTHER_FAMILIES["olmo2"], "vocab_size": 1000, "max_position_embeddings": 8192,
              "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16, "num_key_value_heads": 16}
    (tmp_path / "config.json").write_text(json.dumps(config))
    module = compile_model(CompileOptions(model=str(tmp_path), layer=0, tokens=4097, target="sm_90a")).module
    (o_proj,) = [launch for launch in launch_plan(module).launches if launch.kernel == "o_proj"]
    assert o_proj.grid == (132, 1, 1)  # persistent blocks, one per SM


def test_whole_model_run_on_given_token_ids(tiny_model, capsys):
    # The pooled embedding is compared with PyTorch in float32; PyTorch's own bf16 model is off
    # by about 1e-2 there (random embeddings of std 0.02 keep the residual stream small next to
    # each layer's output), and the check allows 1.5x that.
    assert run(["run", tiny_model, "--input-ids", "5,17,301,42,9", "--backend", "interpret", "--check"]) == 0
    out = capsys.readouterr().out
    assert "pooled embedding shape (1, 96)" in out and "vs PyTorch float32" in out and "PyTorch bf16:" in out


def test_whole_model_check_failure_names_the_allowance(tiny_model, capsys, monkeypatch):
    import emmy.execute as execute

    real = execute.model_report

    def worse(traced, output, input_ids=None):
        return real(traced, output * 1.5, input_ids)  # a result PyTorch's rounding cannot explain

    monkeypatch.setattr(execute, "model_report", worse)
    assert run(["run", tiny_model, "--input-ids", "5,17", "--backend", "interpret", "--check"]) == 1
    err = capsys.readouterr().err
    assert "error: relative error 4.9" in err or "error: relative error 5.0" in err
    assert "(1.5x PyTorch's own bf16 error)" in err or "exceeds the tolerance 1.0e-02" in err


def test_run_compares_every_result(capsys, monkeypatch):
    """A function with two results: `emmy run` compares both, and a wrong second one fails."""
    two = str(HERE / "models" / "two_outputs.py") + ":make"
    assert run(["run", two, "--backend", "interpret", "--check"]) == 0
    assert "output shapes (1, 13, 80), (1, 13, 80); relative error" in capsys.readouterr().out

    import emmy.interp.tile_stage as tile_stage

    real = tile_stage.run_function
    monkeypatch.setattr(tile_stage, "run_function", lambda *a: [r if i == 0 else r * 1.1 for i, r in enumerate(real(*a))])
    assert run(["run", two, "--backend", "interpret", "--check"]) == 1
    monkeypatch.setattr(tile_stage, "run_function", lambda *a: real(*a)[:1])
    with pytest.raises(EmmyError, match="returns 1 values where PyTorch's module returns 2"):
        run(["run", two, "--backend", "interpret"])


def test_run_report_allowance():
    import numpy as np

    from emmy.execute import RunReport

    z = np.zeros(1)
    assert RunReport(z, z, 0.0).allowed(1e-2) == 1e-2
    assert RunReport(z, z, 0.0, baseline_error=2e-2).allowed(1e-2) == 3e-2
    assert RunReport(z, z, 0.0, baseline_error=1e-3).allowed(1e-2) == 1e-2


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--input-ids", "5,x"], "expected comma-separated integers"),
        (["--input-ids", ","], "no token ids"),
        (["--text", "hello"], "tokenizer"),
        (["--text", "hi", "--input-ids", "1"], "either --input-ids or --text"),
        (["--layer", "0", "--input-ids", "1"], "whole-model runs"),
        (["--input-ids", "5,99999"], "token id 99999 is outside the vocabulary"),
        (["--input-ids", "-1"], "token id -1 is outside the vocabulary"),
        (["--tokens", "513"], "max_position_embeddings to 512"),
        (["--layer", "0", "--tokens", "513"], "max_position_embeddings to 512"),
        (["--tolerance", "0"], "--tolerance 0.0: give the relative error allowed"),
    ],
)
def test_token_input_errors(tmp_path, extra, message):
    import subprocess
    import sys

    d = write_tiny_model(tmp_path / "m", "qwen2")
    proc = subprocess.run([sys.executable, "-m", "emmy.cli.main", "run", d, "--backend", "interpret", *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert message in proc.stderr


def test_whole_model_run_on_text_with_a_local_tokenizer(tmp_path, capsys):
    """--text goes through the model directory's own tokenizer (a small word-level one here,
    saved the way transformers saves any fast tokenizer)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = Path(write_tiny_model(tmp_path / "qwen3"))
    vocab = {"[UNK]": 0, "emmy": 7, "compiles": 123, "models": 321}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(str(d))

    from emmy.frontend.tokenize import tokenize

    assert tokenize(str(d), "emmy compiles models").tolist() == [[7, 123, 321]]
    assert run(["run", str(d), "--text", "emmy compiles models", "--backend", "interpret", "--check"]) == 0
    assert "pooled embedding shape (1, 96)" in capsys.readouterr().out
