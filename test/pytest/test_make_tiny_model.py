"""tools/make_tiny_model.py writes a Llama directory that Hugging Face and Emmy both load, as the
README shows (`python tools/make_tiny_model.py /tmp/tiny-llama && emmy compile /tmp/tiny-llama`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from emmy.frontend import resolve_model, trace_layer, trace_model

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "make_tiny_model.py"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, check=True)
    assert proc.stdout.startswith("wrote ")
    return out


def test_transformers_loads_every_weight(tiny):
    from transformers import LlamaModel

    model, info = LlamaModel.from_pretrained(str(tiny), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.config.num_hidden_layers == json.loads((tiny / "config.json").read_text())["num_hidden_layers"]


def test_emmy_loads_a_layer_from_the_files(tiny):
    src = resolve_model(str(tiny))
    assert src.kind == "local" and src.weights_dir == tiny
    stored = load_file(str(tiny / "model.safetensors"))
    traced = trace_layer(src, 1, 4)
    assert traced.params and all(torch.equal(p, stored[f"model.layers.1.{n}"]) for n, p in traced.params.items())


def test_emmy_traces_the_whole_model(tiny):
    model = trace_model(resolve_model(str(tiny)), 4)
    assert [len(v) for v in model.distinct_layers().values()] == [2]
    out = model.reference(model.input_ids)
    assert out.shape == (1, 4, 256) and torch.isfinite(out.float()).all()


def test_the_seed_changes_the_weights(tmp_path):
    for seed in (0, 1):
        subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / str(seed)), "--seed", str(seed)], check=True,
                       capture_output=True)
    a, b = (load_file(str(tmp_path / s / "model.safetensors")) for s in ("0", "1"))
    assert a.keys() == b.keys() and not torch.equal(a["model.norm.weight"], b["model.norm.weight"])
