"""Small Llama-family model directories for tests: sizes that are not powers of two, one config
per family, random weights (no safetensors)."""

from __future__ import annotations

import json
from pathlib import Path

TINY = {
    "hidden_size": 96, "intermediate_size": 200, "num_hidden_layers": 2, "num_attention_heads": 3,
    "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": 500,
    "max_position_embeddings": 512, "torch_dtype": "bfloat16", "hidden_act": "silu",
    "tie_word_embeddings": False,
}
FAMILIES = {
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "head_dim": 32},
    "mistral": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "head_dim": 32, "sliding_window": None},
    "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
    "qwen3": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "head_dim": 32},
}


def write_tiny_model(directory: Path, family: str = "qwen3") -> str:
    """Create `directory` holding the tiny model of `family` (its config.json); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**TINY, **FAMILIES[family]}))
    return str(directory)
