"""User-facing error messages not covered elsewhere, one case each: each ends the command with
`error: ...` and exit code 1 (no traceback), and names what is wrong and where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy.cli.main import run
from emmy.cli.opt import run as run_opt
from emmy.cli.report import run_guarded
from tiny_models import TINY, write_tiny_model

INPUTS = Path(__file__).resolve().parents[2] / "test" / "filecheck" / "inputs"


def _error(capsys, fn, argv) -> str:
    assert run_guarded(fn, argv) == 1
    err = capsys.readouterr().err
    # transformers may warn (or log) before the error; a hint may follow it
    lines = err.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("error: ")), None)
    assert first is not None and "Traceback (most recent call last)" not in "\n".join(lines[first:]), err
    return err


def _model_dir(tmp_path: Path, **change) -> str:
    config = {**TINY, "model_type": "qwen3", "head_dim": 16, **change}
    config = {k: v for k, v in config.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_pin_of_a_knob_no_kernel_has(tmp_path, capsys):
    (tmp_path / "m.py").write_text(DOUBLES)
    err = _error(capsys, run, ["compile", f"{tmp_path}/m.py:make", "--knob", "*.block_q=64"])
    assert "pin '*.block_q=64': no kernel in the module has a knob 'block_q'" in err


def test_module_target_that_is_not_a_string(tmp_path, capsys):
    f = tmp_path / "m.mlir"
    f.write_text('builtin.module attributes {emmy.target = 90 : i64} {\n}\n')
    err = _error(capsys, run_opt, [str(f), "-p", "decide-forks"])
    assert 'module attribute emmy.target must be a string such as "sm_90", got 90 : i64' in err


def test_whole_model_without_vocab_size(tmp_path, capsys):
    err = _error(capsys, run, ["compile", _model_dir(tmp_path, vocab_size=None), "--tokens", "4"])
    assert f"{tmp_path}: the config has no vocab_size" in err


def test_unsupported_dtype(tmp_path, capsys):
    err = _error(capsys, run, ["compile", _model_dir(tmp_path, torch_dtype="int8"), "--layer", "0", "--tokens", "4"])
    assert "model dtype 'int8' is not supported (use one of bfloat16, float16, float32)" in err


def test_model_type_transformers_does_not_know(tmp_path, capsys):
    err = _error(capsys, run, ["compile", _model_dir(tmp_path, model_type="no_such_model"), "--layer", "0",
                               "--tokens", "4"])
    assert "model type 'no_such_model' is not supported: " in err


@pytest.mark.parametrize("model_type, message", [
    ("resnet", "model type 'resnet' has no DecoderLayer class in transformers"),
    ("gpt2", "model type 'gpt2' has no rotary position embedding (no RotaryEmbedding class in transformers): "
             "Emmy traces decoder layers that take rotary cos/sin tables"),
])
def test_model_type_without_a_decoder_layer_or_rotary(tmp_path, capsys, model_type, message):
    """GPT-2's layer is `GPT2Block` (found, as GPT-NeoX's `GPTNeoXLayer` is) but takes learned
    positions; ResNet has no layer class at all."""
    config = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 100,
              "max_position_embeddings": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    err = _error(capsys, run, ["compile", str(tmp_path), "--layer", "0", "--tokens", "4"])
    assert message in err


@pytest.mark.parametrize(
    "spec, message",
    [
        ("model.py", "model 'model.py': a Python factory needs its function name, as 'path/to/file.py:fn'"),
        ("{dir}/m.py:1make", "model factory '{dir}/m.py:1make': '1make' is not a Python function name"),
    ],
)
def test_factory_spec_errors(tmp_path, capsys, spec, message):
    (tmp_path / "m.py").write_text("def make(): pass\n")
    err = _error(capsys, run, ["compile", spec.format(dir=tmp_path)])
    assert message.format(dir=tmp_path) in err


DOUBLES = """
import torch
from torch import nn

class Double(nn.Module):
    def forward(self, x):
        return x * 2

def make():
    return Double(), (torch.randn(4, 8),)
"""

MUTATES = """
import torch
from torch import nn

class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return x * 2

def make():
    return Counter(), (torch.randn(4, 8),)
"""


@pytest.mark.parametrize("tracer", ["capture", "export"])
def test_factory_that_mutates_a_buffer(tmp_path, capsys, tracer):
    (tmp_path / "m.py").write_text(MUTATES)
    err = _error(capsys, run, ["compile", f"{tmp_path}/m.py:make", "--tracer", tracer])
    stage = "capture" if tracer == "capture" else "torch.export"
    assert (f"in-place 'aten.add_' at <root> (Counter) writes into an input or a parameter; Emmy records values, "
            f"not storage, so it supports in-place arithmetic only on a tensor nothing else sees (stage: {stage})") in err


def _with_word_tokenizer(directory: Path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = write_tiny_model(directory)
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "emmy": 7}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(d)
    return d


def test_text_with_no_tokens(tmp_path, capsys):
    d = _with_word_tokenizer(tmp_path / "m")
    err = _error(capsys, run, ["run", d, "--backend", "interpret", "--text", "   "])
    assert "--text: the text has no tokens" in err


def test_broken_tokenizer_file(tmp_path, capsys):
    d = _with_word_tokenizer(tmp_path / "m")
    (Path(d) / "tokenizer.json").write_text("{not json")
    err = _error(capsys, run, ["run", d, "--backend", "interpret", "--text", "emmy"])
    assert f"cannot tokenize with the tokenizer in '{d}': " in err


CLAMP_BY_TENSOR = """
import torch
from torch import nn

class ClampByTensor(nn.Module):
    def forward(self, x, lo):
        return torch.clamp(x, min=lo)

def make():
    return ClampByTensor(), (torch.randn(4, 8), torch.zeros(4, 8))
"""

FAILS = """
import torch
from torch import nn

class Mismatch(nn.Module):
    def forward(self, x):
        return x.sum(0) + x.sum(1)

def make():
    return Mismatch(), (torch.randn(4, 8),)
"""


def test_clamp_with_tensor_bounds(tmp_path, capsys):
    (tmp_path / "m.py").write_text(CLAMP_BY_TENSOR)
    err = _error(capsys, run, ["compile", f"{tmp_path}/m.py:make"])
    assert "unsupported torch op 'aten.clamp' at <root> (ClampByTensor) (stage: torch import): clamp with tensor bounds" in err


def test_module_that_fails_on_its_example_inputs(tmp_path, capsys):
    (tmp_path / "m.py").write_text(FAILS)
    err = _error(capsys, run, ["compile", f"{tmp_path}/m.py:make"])
    assert ("running Mismatch on its example inputs to trace it failed: RuntimeError: The size of tensor a (8) "
            "must match the size of tensor b (4)") in err


# ------------------------------------------------------------------------------ the verdict of --check
def test_check_prints_ok_within_the_tolerance(tmp_path, capsys):
    model = write_tiny_model(tmp_path / "m")
    assert run(["run", model, "--layer", "0", "--tokens", "4", "--backend", "interpret", "--check"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("ok: relative error ") and last.endswith(" within the tolerance 1.0e-02")


def test_check_prints_failed_over_the_tolerance(tmp_path, capsys):
    """A float32 model: nothing rounds to bf16, so the tolerance is the whole allowance."""
    model = write_tiny_model(tmp_path / "m", torch_dtype="float32")
    assert run_guarded(run, ["run", model, "--layer", "0", "--tokens", "4", "--backend", "interpret", "--check",
                             "--tolerance", "1e-9"]) == 1
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith("FAILED: relative error ") and last.endswith(" over the tolerance 1.0e-09")
    assert "error: relative error " in captured.err and "exceeds the tolerance 1.0e-09" in captured.err


def test_run_without_check_prints_no_verdict(tmp_path, capsys):
    model = write_tiny_model(tmp_path / "m")
    assert run(["run", model, "--layer", "0", "--tokens", "4", "--backend", "interpret"]) == 0
    out = capsys.readouterr().out
    assert "relative error vs PyTorch" in out
    assert not any(line.startswith(("ok:", "FAILED:")) for line in out.splitlines())


@pytest.mark.parametrize("error, verdict", [(5e-3, "ok: relative error 5.000e-03 within the tolerance 1.0e-02"),
                                            (2e-2, "FAILED: relative error 2.000e-02 over the tolerance 1.0e-02")])
def test_check_on_the_gpu_path_prints_the_verdict(tmp_path, capsys, monkeypatch, error, verdict):
    """`emmy run --backend cuda --check` ends with the same verdict as the interpreter (the GPU
    run itself is replaced by a report with a known error: this machine may have no GPU)."""
    import numpy as np

    import emmy.backend.run as gpu_run
    import emmy.cli.main as cli
    from emmy.execute import RunReport

    seen = []

    def fake_run_on_gpu(options, cache_dir):
        seen.append(options)
        return RunReport(output=np.zeros((1, 4, 96)), reference=np.zeros((1, 4, 96)), rel_error=error)

    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    monkeypatch.setattr(gpu_run, "run_on_gpu", fake_run_on_gpu)
    model = write_tiny_model(tmp_path / "m")
    code = run(["run", model, "--layer", "0", "--tokens", "4", "--backend", "cuda", "--check"])
    assert seen and code == (0 if verdict.startswith("ok") else 1)
    assert capsys.readouterr().out.strip().splitlines()[-1] == verdict


# ------------------------------------------------------------------------------ a pass given the wrong stage
TORCH_MODULE = """builtin.module {
  func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
    %s = torch.relu %a : (tensor<4xf32>) -> tensor<4xf32>
    func.return %s : tensor<4xf32>
  }
}
"""

TENSOR_MODULE = """builtin.module {
  func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {
    %h = tensor.cast %a : tensor<4xf32> -> tensor<4xf32>
    func.return %h : tensor<4xf32>
  }
}
"""


@pytest.mark.parametrize("pass_name, stage, previous", [
    ("convert-tensor-to-loop", "tensor", "tensor-merge-siblings (02-tensor-merge-siblings.mlir"),
    ("convert-loop-to-tile", "loop", "loop-hoist-params (05-loop-hoist-params.mlir"),
    ("convert-tile-to-kernel", "tile", "decide-forks (07-decide-forks.mlir"),
    ("convert-kernel-to-cuda", "kernel", "kernel-overlap-launches (09-kernel-overlap-launches.mlir"),
])
def test_conversion_pass_on_a_torch_stage_file(tmp_path, capsys, pass_name, stage, previous):
    """Each conversion pass given a module at another stage says so, and which stage it converts."""
    (tmp_path / "m.mlir").write_text(TORCH_MODULE)
    err = _error(capsys, run_opt, [str(tmp_path / "m.mlir"), "-p", pass_name])
    assert (f"error: {pass_name}: the input is at the torch stage (torch.relu in @f); "
            f"{pass_name} converts a module at the {stage} stage\n") in err
    assert f"give it a module at the {stage} stage, such as the output of {previous} in a dump directory)" in err


def test_convert_torch_to_tensor_on_a_tensor_stage_file(tmp_path, capsys):
    (tmp_path / "m.mlir").write_text(TENSOR_MODULE)
    err = _error(capsys, run_opt, [str(tmp_path / "m.mlir"), "-p", "convert-torch-to-tensor"])
    assert ("error: convert-torch-to-tensor: the input is at the tensor stage (tensor.cast in @g); "
            "convert-torch-to-tensor converts a module at the torch stage\n"
            "give it an imported model (00-torch-import.mlir in a dump directory)") in err


def test_a_tile_stage_module_is_not_at_the_loop_stage(capsys):
    """A tile-stage module still holds loop-stage bodies in its kernels: it is at the tile stage,
    and convert-loop-to-tile refuses it (rather than lower the bodies a second time)."""
    spec = "convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile"
    err = _error(capsys, run_opt, [str(INPUTS / "torch-running-example.mlir"), "-p", spec + ",convert-loop-to-tile"])
    assert "error: convert-loop-to-tile: the input is at the tile stage (tile.kernel in @" in err
    assert "convert-loop-to-tile converts a module at the loop stage" in err


# ------------------------------------------------------------------------------ empty tensors
EMPTY = """
import torch
from torch import nn

class {name}(nn.Module):
    def forward(self, x):
        rest = x[..., 8:]          # no columns: rotary took them all (as in Phi-3)
        return {body}

def make():
    return {name}(), (torch.randn(4, 8),)
"""


def test_an_empty_slice_concatenated_is_dropped(tmp_path, capsys):
    (tmp_path / "m.py").write_text(EMPTY.format(name="Rest", body="torch.cat([-x, rest], dim=-1)"))
    assert run(["run", f"{tmp_path}/m.py:make", "--backend", "interpret", "--check"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("ok: relative error 0.000e+00")


def test_an_empty_tensor_used_elsewhere(tmp_path, capsys):
    (tmp_path / "m.py").write_text(EMPTY.format(name="Used", body="x * 2, rest + 1"))
    err = _error(capsys, run, ["compile", f"{tmp_path}/m.py:make"])
    assert "convert-torch-to-tensor: 'tensor." in err and "makes an empty tensor (tensor<4x0xf32>) that is used" in err
