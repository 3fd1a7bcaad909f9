"""Write a tiny Llama model directory, as Hugging Face lays one out, to try Emmy's local-directory
loader without downloading anything:

    python tools/make_tiny_model.py /tmp/tiny-llama
    emmy compile /tmp/tiny-llama --layer 0

The directory gets `config.json` (a Llama config: hidden 256, 4 heads of 64, 2 key/value heads,
MLP 512, 2 layers, vocabulary 1024, bf16) and `model.safetensors` with random weights under
Hugging Face's names (`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, ...,
`model.norm.weight`), so `transformers.LlamaModel.from_pretrained(DIR)` loads it too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every weight of a Llama model (no LM head) and its shape, in Hugging Face's names."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    out = {"model.embed_tokens.weight": (config["vocab_size"], hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (q, hidden),
            p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden),
            p + "self_attn.o_proj.weight": (hidden, q),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        }
    out["model.norm.weight"] = (hidden,)
    return out


def random_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Norm weights near 1, other weights N(0, 1/fan-in) (the embedding N(0, 1)), in bf16."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes(config).items():
        if len(shape) == 1:
            t = 1 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("embed_tokens.weight"):
            t = torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) / shape[1] ** 0.5
        out[name] = t.to(torch.bfloat16)
    return out


def write(directory: Path, seed: int = 0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    save_file(random_weights(CONFIG, seed), str(directory / "model.safetensors"), metadata={"format": "pt"})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where to write config.json and model.safetensors")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    args = parser.parse_args(argv)
    write(args.directory, args.seed)
    print(f"wrote {args.directory / 'config.json'} and {args.directory / 'model.safetensors'}")


if __name__ == "__main__":
    main()
