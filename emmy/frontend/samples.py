"""Writes the sample torch-stage IR files other stages' tests read.

    .venv/bin/python -m emmy.frontend.samples [OUTPUT_DIR]   (default: test/filecheck/inputs)

- `torch-layer.mlir`: Qwen3-Embedding-0.6B layer 0 at 32 tokens, for `emmy.targets.DEFAULT_TARGET`.
- `torch-running-example.mlir`: the running example: the layer's input RMSNorm followed by the
  q, k, v linears on a [1, 32, 1024] input, returning q, k, v (same names and attributes as the
  layer, function `@layer0`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64

from emmy.frontend import decoder
from emmy.frontend.importer import import_graph
from emmy.frontend.models import resolve_model
from emmy.frontend.trace import DEFAULT_TRACER, Tracer, materialize, random_weights, trace_graph, trace_layer
from emmy.ir_io import print_module
from emmy.targets import DEFAULT_TARGET

MODEL = "Qwen/Qwen3-Embedding-0.6B"
TOKENS = 32


class RunningExample(nn.Module):
    """input_layernorm, then self_attn.{q,k,v}_proj: the start of a Qwen3 layer."""

    def __init__(self, c: decoder.LayerConfig):
        super().__init__()
        self.input_layernorm = decoder.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = decoder.meta_linear(c.hidden_size, c.num_heads * c.head_dim, c.qkv_bias)
        self.self_attn.k_proj = decoder.meta_linear(c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias)
        self.self_attn.v_proj = decoder.meta_linear(c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias)

    def forward(self, hidden_states: torch.Tensor):
        h = self.input_layernorm(hidden_states)
        a = self.self_attn
        return a.q_proj(h), a.k_proj(h), a.v_proj(h)


def layer_module(tracer: Tracer = DEFAULT_TRACER) -> ModuleOp:
    traced = trace_layer(resolve_model(MODEL), 0, TOKENS, tracer=tracer)
    traced.module.attributes["emmy.target"] = StringAttr(DEFAULT_TARGET)
    return traced.module


def running_example_module(tracer: Tracer = DEFAULT_TRACER) -> ModuleOp:
    config = resolve_model(MODEL).config
    assert config is not None
    c = decoder.LayerConfig.from_hf(config)
    module = materialize(RunningExample(c), c.dtype)
    random_weights(module, 0, 0)
    x = torch.randn(1, TOKENS, c.hidden_size, generator=torch.Generator().manual_seed(0)).to(c.dtype)
    graph = trace_graph(module, module, [("hidden_states", x)], None, tracer)
    return import_graph(
        graph,
        "layer0",
        module_attrs={
            "emmy.model": StringAttr(MODEL),
            "emmy.layer": IntegerAttr(0, i64),
            "emmy.tokens": IntegerAttr(TOKENS, i64),
            "emmy.target": StringAttr(DEFAULT_TARGET),
        },
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path("test/filecheck/inputs")
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch-layer.mlir").write_text(print_module(layer_module()))
    (out / "torch-running-example.mlir").write_text(print_module(running_example_module()))


if __name__ == "__main__":
    main()
