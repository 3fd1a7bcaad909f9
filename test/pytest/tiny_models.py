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

# Decoder layers of other families, tiny: fused q/k/v and gate/up weights with rotary over the
# whole head (Phi-3: an empty part left to concatenate), a parallel attention and MLP added to
# the residual in one expression with partial rotary, LayerNorm and GELU (Phi-2), Gemma's
# (1 + w) RMSNorm and GELU MLP with one key/value head, StableLM's partial rotary with biases,
# OLMo-2's norms after each block and over whole projections, Granite's multipliers, Cohere's
# interleaved rotary (a stack) computed in f32 and rounded to bf16 before the attention, Gemma 3's
# four norms around the blocks and Q/K norms in a layer of local attention (`gemma3_text`, whose
# code lives in transformers' `gemma3` package), GPT-NeoX's parallel residual in a layer class
# that is not called `DecoderLayer`, the rotary tables of GPT-J and GLM whose pairs of columns
# share an angle (`repeat_interleave`), Falcon's `x.T` weights and `+=` (in place), OLMo's
# LayerNorm without a weight or a bias.
OTHER_FAMILIES = {
    "phi3": {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_key_value_heads": 3,
             "original_max_position_embeddings": 512, "pad_token_id": 0},
    "phi": {"model_type": "phi", "architectures": ["PhiForCausalLM"], "num_key_value_heads": 3,
            "partial_rotary_factor": 0.5, "layer_norm_eps": 1e-5, "hidden_act": "gelu_new"},
    "gemma": {"model_type": "gemma", "architectures": ["GemmaForCausalLM"], "head_dim": 32,
              "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh"},
    "stablelm": {"model_type": "stablelm", "architectures": ["StableLmForCausalLM"], "partial_rotary_factor": 0.25,
                 "layer_norm_eps": 1e-5, "use_qkv_bias": True},
    "olmo2": {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "num_key_value_heads": 3},
    "granite": {"model_type": "granite", "architectures": ["GraniteForCausalLM"], "embedding_multiplier": 12.0,
                "residual_multiplier": 0.22, "attention_multiplier": 0.015625, "logits_scaling": 8.0},
    "cohere": {"model_type": "cohere", "architectures": ["CohereForCausalLM"], "head_dim": 32, "layer_norm_eps": 1e-5,
               "logit_scale": 0.0625, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0},
    "gemma3": {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "head_dim": 32,
               "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 32, "sliding_window": 64},
    "gpt_neox": {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "num_key_value_heads": 3,
                 "rotary_pct": 0.25, "layer_norm_eps": 1e-5, "hidden_act": "gelu", "use_parallel_residual": True},
    "gptj": {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "rotary_dim": 16, "activation_function": "gelu_new"},
    "glm": {"model_type": "glm", "architectures": ["GlmForCausalLM"], "head_dim": 32, "pad_token_id": 0,
            "eos_token_id": 1},
    "falcon": {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "new_decoder_architecture": True,
               "num_kv_heads": 1, "parallel_attn": True, "bias": False, "alibi": False},
    "olmo": {"model_type": "olmo", "architectures": ["OLMoForCausalLM"], "pad_token_id": 0, "eos_token_id": 1},
}


def missing_here(family: str) -> str:
    """Why the installed transformers cannot build `family`'s layer the way Emmy traces it (a
    test's skip reason), or "": before transformers 5, GPT-J computed its rotary table inside
    its attention (no GPTJRotaryEmbedding), and Falcon's layer (whose forward takes `alibi`)
    indexed its rotary table by position ids, a tensor index Emmy does not import."""
    import importlib
    import inspect

    if family == "gptj":
        modeling = importlib.import_module("transformers.models.gptj.modeling_gptj")
        if not hasattr(modeling, "GPTJRotaryEmbedding"):
            return "this transformers computes GPT-J's rotary table inside its attention (no GPTJRotaryEmbedding)"
    if family == "falcon":
        modeling = importlib.import_module("transformers.models.falcon.modeling_falcon")
        alibi = inspect.signature(modeling.FalconDecoderLayer.forward).parameters.get("alibi")
        if alibi is not None and alibi.default is alibi.empty:
            return "this transformers' Falcon layer indexes its rotary table by position ids (aten.index)"
    return ""


def write_tiny_model(directory: Path, family: str = "qwen3", **overrides) -> str:
    """Create `directory` holding the tiny model of `family` (its config.json), config fields in
    `overrides` replaced (`sliding_window=4`, `torch_dtype="float32"`); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {**TINY, **{**FAMILIES, **OTHER_FAMILIES}[family], **overrides}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)

# One decoder layer at the sizes of released models of each family (random weights): head dims
# of 64 and 128, hidden sizes that are not powers of two (896), grouped-query ratios of 4 and 7,
# Qwen2's q/k/v biases. For the GPU tests, which run layer 0 only.
REAL = {
    # Qwen2-0.5B: hidden 896 = 14 heads of 64, 2 key/value heads, intermediate 4864
    "qwen2-0.5b": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
                   "intermediate_size": 4864, "num_attention_heads": 14, "num_key_value_heads": 2,
                   "rope_theta": 1000000.0},
    # Llama-3.2-1B: hidden 2048 = 32 heads of 64, 8 key/value heads, intermediate 8192
    "llama-3.2-1b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                     "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "head_dim": 64, "rope_theta": 500000.0},
    # Mistral-7B: hidden 4096 = 32 heads of 128, 8 key/value heads, intermediate 14336
    "mistral-7b": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 4096,
                   "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "head_dim": 128, "sliding_window": None, "rope_theta": 1000000.0},
}


def write_real_sized_model(directory: Path, name: str, **overrides) -> str:
    """Create `directory` holding a two-layer model with the layer sizes of `name` (see REAL),
    config fields in `overrides` replaced (`sliding_window=256`)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {**TINY, "vocab_size": 1000, "max_position_embeddings": 8192, **REAL[name], **overrides}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def write_windowed_model(directory: Path, window: int, head_dim: int = 128) -> str:
    """Mistral-7B's layer sizes with a sliding window of `window` keys; another head dim keeps
    the hidden size (4096 // head_dim heads: 256 is Gemma's local layers')."""
    sizes = {} if head_dim == 128 else {"head_dim": head_dim, "num_attention_heads": 4096 // head_dim}
    return write_real_sized_model(directory, "mistral-7b", sliding_window=window, **sizes)
