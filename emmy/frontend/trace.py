"""Tracing one decoder layer (or a factory's whole module) into torch-stage IR.

`trace_layer(source, layer, tokens, seed)` builds only the requested decoder layer and the
rotary embedding (never the whole model), fills its weights (from *.safetensors when the source
has them, else deterministic random values from `seed`), makes example inputs (`hidden_states`
[1, T, H], `cos`/`sin` [1, T, head_dim] at positions 0..T-1), records the layer's forward
(`emmy.frontend.capture`) and imports it (`emmy.frontend.importer`).

Llama-family architectures (llama, mistral, qwen2, qwen3 with default RoPE) use Emmy's own copy of
the layer (`emmy.frontend.decoder`, bit-identical to transformers' and ~3 s cheaper to import);
others, or `implementation="transformers"`, build transformers' own `<Arch>DecoderLayer`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64

from emmy.diagnostics import EmmyError
from emmy.frontend import decoder
from emmy.frontend.capture import capture
from emmy.frontend.importer import import_graph
from emmy.frontend.models import ModelSource

Implementation = Literal["auto", "emmy", "transformers"]


@dataclass(eq=False)
class TracedLayer:
    """A traced layer: the torch-stage module and everything needed to run it for reference.

    module: `builtin.module` holding one `func.func @layer<N>` (`@forward` for a factory), with
        module attributes `emmy.model`, `emmy.layer` (absent for a factory), `emmy.tokens`.
    params: parameters by PyTorch name (`self_attn.q_proj.weight`), in function-argument order
        (for a factory, its buffers follow its parameters).
    inputs: example inputs by name (`hidden_states`, `cos`, `sin`; `input0`.. for a factory),
        in function-argument order.
    layer_module: the PyTorch module that was traced.
    reference: `reference(inputs)` runs the PyTorch layer on a dict shaped like `inputs` and
        returns its output (a tensor; for a factory, whatever its module returns, e.g. a tuple).
    """

    module: ModuleOp
    params: dict[str, torch.Tensor]
    inputs: dict[str, torch.Tensor]
    layer_module: nn.Module
    reference: Callable[[Mapping[str, torch.Tensor]], torch.Tensor]

    @property
    def function_name(self) -> str:
        return self.module.ops.first.sym_name.data  # type: ignore[union-attr]

    def arguments(self) -> list[torch.Tensor]:
        """The tensors to pass to the function, in argument order (inputs, then parameters)."""
        return list(self.inputs.values()) + list(self.params.values())


def trace_layer(
    source: ModelSource,
    layer: int,
    tokens: int,
    seed: int = 0,
    *,
    implementation: Implementation = "auto",
) -> TracedLayer:
    """Trace decoder layer `layer` of `source` on `tokens` tokens (batch 1). For a factory
    source, `layer` is ignored and the factory's module is traced as a whole (`@forward`)."""
    if tokens < 1:
        raise EmmyError(f"--tokens must be at least 1, got {tokens}")
    if source.kind == "factory":
        return _trace_factory(source)
    assert source.config is not None
    config = dict(source.config)
    n_layers = int(config.get("num_hidden_layers", 0))
    if not 0 <= layer < n_layers:
        raise EmmyError(
            f"layer {layer} is out of range for {source.model_id}: it has {n_layers} layers, "
            f"valid layers are 0..{n_layers - 1}"
        )
    use_emmy = implementation == "emmy" or (
        implementation == "auto" and decoder.LayerConfig.supports(config)
    )
    if use_emmy:
        if not decoder.LayerConfig.supports(config):
            raise EmmyError(f"Emmy's own decoder layer does not cover model type '{config.get('model_type')}'")
        module, call, cos, sin, dtype = _build_emmy(config, tokens)
    else:
        module, call, cos, sin, dtype = _build_transformers(config, layer, tokens)

    if source.weights_dir is not None:
        _load_weights(module, source.weights_dir, layer)
    else:
        random_weights(module, seed, layer)

    hidden = int(config["hidden_size"])
    gen = torch.Generator().manual_seed(_seed(seed, layer, "hidden_states"))
    hidden_states = torch.randn(1, tokens, hidden, generator=gen).to(dtype)
    inputs = {"hidden_states": hidden_states, "cos": cos, "sin": sin}
    params = dict(module.named_parameters())

    graph = capture(module, call, list(inputs.items()), list(params.items()))
    ir = import_graph(
        graph,
        f"layer{layer}",
        module_attrs={
            "emmy.model": StringAttr(source.model_id),
            "emmy.layer": IntegerAttr(layer, i64),
            "emmy.tokens": IntegerAttr(tokens, i64),
        },
    )

    def reference(ins: Mapping[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return call(ins["hidden_states"], ins["cos"], ins["sin"])

    return TracedLayer(ir, params, inputs, module, reference)


# ------------------------------------------------------------------------------------ builders
def _build_emmy(config: dict[str, Any], tokens: int):
    c = decoder.LayerConfig.from_hf(config)
    module = materialize(decoder.DecoderLayer(c), c.dtype).eval()
    cos, sin = decoder.rotary_cos_sin(c.head_dim, c.rope_theta, tokens, c.dtype)
    return module, module, cos, sin, c.dtype


def _build_transformers(config: dict[str, Any], layer: int, tokens: int):
    """transformers' own `<Arch>DecoderLayer(config, layer)` and `<Arch>RotaryEmbedding`."""
    import importlib

    model_type = str(config.get("model_type", ""))
    try:
        from transformers import AutoConfig

        hf_config = AutoConfig.for_model(**config)
        modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    except Exception as e:
        raise EmmyError(f"model type '{model_type}' is not supported: {type(e).__name__}: {e}") from None
    hf_config = getattr(hf_config, "text_config", None) or hf_config
    hf_config._attn_implementation = "sdpa"
    layer_cls = _find_class(modeling, "DecoderLayer", model_type)
    rope_cls = _find_class(modeling, "RotaryEmbedding", model_type)
    dtype = decoder.config_dtype(config)
    with torch.device("meta"):
        module = layer_cls(hf_config, layer)
    module = materialize(module, dtype).eval()
    rope = rope_cls(hf_config)
    x = torch.zeros(1, tokens, 1, dtype=dtype)
    with torch.no_grad():
        cos, sin = rope(x, torch.arange(tokens)[None])

    def call(hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = module(hidden_states, attention_mask=None, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out

    return module, call, cos.to(dtype), sin.to(dtype), dtype


def _find_class(modeling: Any, suffix: str, model_type: str) -> type:
    names = sorted(n for n in vars(modeling) if n.endswith(suffix) and isinstance(getattr(modeling, n), type))
    if not names:
        raise EmmyError(f"model type '{model_type}' has no {suffix} class in transformers")
    return getattr(modeling, names[0])


# ------------------------------------------------------------------------------------ weights
def materialize(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Give every parameter of a meta-device module uninitialized CPU storage of `dtype`
    (module.to_empty would import sympy through the meta-tensor path, ~0.4 s)."""
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                m._parameters[name] = nn.Parameter(torch.empty(p.shape, dtype=dtype), requires_grad=False)
    return module


def _seed(seed: int, layer: int, name: str) -> int:
    return zlib.crc32(f"{seed}:{layer}:{name}".encode())


def random_weights(module: nn.Module, seed: int, layer: int) -> None:
    """std-0.02 normal weights and biases; norm weights 1 + 0.02 * normal. Each parameter is
    seeded by (seed, layer, name), so the values do not depend on construction order."""
    norms = {name for name, m in module.named_modules() if "Norm" in type(m).__name__}
    with torch.no_grad():
        for name, p in module.named_parameters():
            gen = torch.Generator().manual_seed(_seed(seed, layer, name))
            owner, _, leaf = name.rpartition(".")
            mean = 1.0 if owner in norms and leaf == "weight" else 0.0
            p.normal_(mean, 0.02, generator=gen)


def _load_weights(module: nn.Module, weights_dir: Path, layer: int) -> None:
    """Load this layer's tensors from *.safetensors (keys `model.layers.N.` or `layers.N.`)."""
    from safetensors import safe_open

    wanted = dict(module.named_parameters())
    found: set[str] = set()
    prefixes = (f"model.layers.{layer}.", f"layers.{layer}.", f"model.language_model.layers.{layer}.")
    for path in sorted(weights_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                for prefix in prefixes:
                    if key.startswith(prefix) and key[len(prefix) :] in wanted:
                        name = key[len(prefix) :]
                        t = f.get_tensor(key)
                        p = wanted[name]
                        if tuple(t.shape) != tuple(p.shape):
                            raise EmmyError(
                                f"{path.name}: {key} has shape {list(t.shape)}, expected {list(p.shape)}"
                            )
                        with torch.no_grad():
                            p.copy_(t.to(p.dtype))
                        found.add(name)
    missing = sorted(set(wanted) - found)
    if missing:
        raise EmmyError(
            f"{weights_dir}: the safetensors files lack weights of layer {layer}: {', '.join(missing)}"
        )


# ------------------------------------------------------------------------------------ factories
def _trace_factory(source: ModelSource) -> TracedLayer:
    assert source.factory is not None
    try:
        made = source.factory()
    except EmmyError:
        raise
    except Exception as e:
        raise EmmyError(f"model factory '{source.spec}' failed: {type(e).__name__}: {e}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module)):
        raise EmmyError(
            f"model factory '{source.spec}' must return (module, example_inputs), got {type(made).__name__}"
        )
    module, example = made
    example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    if not example or not all(isinstance(t, torch.Tensor) for t in example):
        raise EmmyError(f"model factory '{source.spec}': example_inputs must be tensors")
    module = module.eval()
    inputs = {f"input{i}": t for i, t in enumerate(example)}
    params = dict(module.named_parameters()) | dict(module.named_buffers())  # buffers are params too
    graph = capture(module, module, list(inputs.items()), list(params.items()))
    first = example[0]
    tokens = first.shape[1] if first.dim() >= 2 else first.shape[0] if first.dim() == 1 else 1
    ir = import_graph(
        graph,
        "forward",
        module_attrs={
            "emmy.model": StringAttr(source.model_id),
            "emmy.tokens": IntegerAttr(int(tokens), i64),
        },
    )

    def reference(ins: Mapping[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return module(*(ins[k] for k in inputs))

    return TracedLayer(ir, params, inputs, module, reference)
