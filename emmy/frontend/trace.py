"""Tracing one decoder layer (or a factory's whole module) into torch-stage IR.

`trace_layer(source, layer, tokens, seed, tracer=...)` builds only the requested decoder layer and
the rotary embedding (never the whole model), gives it weights (from *.safetensors when the
source has them, else deterministic random values from `seed`, which for Emmy's own layer are
made on first use: the trace reads only the norm weights, see `shape_module`), makes example inputs
(`hidden_states` [1, T, H], `cos`/`sin` [1, T, head_dim] at positions 0..T-1), records the layer's
forward with the chosen tracer and imports it (`emmy.frontend.importer`). Whole models:
`emmy.frontend.whole_model.trace_model`.

Llama-family architectures (llama, mistral, qwen2, qwen3 with default RoPE) use Emmy's own copy of
the layer (`emmy.frontend.decoder`, bit-identical to transformers'); others, or
`implementation="transformers"`, build transformers' own `<Arch>DecoderLayer`. Importing
`transformers.models.qwen3.modeling_qwen3` costs 2.0-2.2 s here (after torch), Emmy's copy 5 ms.

Tracers (`tracer=`), both giving byte-identical IR for the Llama family (tested):
- "capture" (default): `emmy.frontend.capture`, a `TorchFunctionMode` recorder.
- "export": `emmy.frontend.export`, `torch.export.export(strict=False)` (training IR, no
  `run_decompositions`, so `aten.linear` and `aten.scaled_dot_product_attention` stay single
  ops), HF RMSNorm recognized by its op pattern in the FX graph.

Why capture is the default (2-core machine, shared and loaded (load average 2-3); best of 3 of
`time`, `emmy compile Qwen/Qwen3-Embedding-0.6B --layer 0`, the tracer forced through
`trace_layer`'s default):
  --ir torch:          capture 2.16 s wall (2.04 s user), export 4.24 s wall (3.64 s user)
  all passes (--time-passes): capture 2.67 s wall ("trace + import" 126 ms),
                              export 4.55 s wall ("trace + import" 1393 ms)
Of export's extra ~1.9 s, ~1.2 s is the first import of `torch.export._trace` (it imports
`torch._dynamo`, sympy, `torch.distributed.fsdp`: ~1200 modules) and 0.3-0.4 s the trace of a
512-token layer itself (under a second, as promised; fake tensors, so independent of the token
count). With export the 3 s budget of `emmy compile --layer 0` is exceeded, so capture stays the
default; export stays available and tested (test/pytest/test_export_tracer.py).
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64

from emmy.diagnostics import EmmyError
from emmy.frontend import decoder
from emmy.frontend.capture import capture
from emmy.frontend.graph import Graph
from emmy.frontend.importer import import_graph
from emmy.frontend.models import ModelSource
from emmy.frontend.weights import LazyTensors
from emmy.frontend.window import set_window, windowed

Implementation = Literal["auto", "emmy", "transformers"]
Tracer = Literal["capture", "export"]
TRACERS: tuple[str, ...] = ("capture", "export")
DEFAULT_TRACER: Tracer = "capture"


@dataclass(eq=False)
class TracedLayer:
    """A traced layer: the torch-stage module and everything needed to run it for reference.

    module: `builtin.module` holding one `func.func @layer<N>` (`@forward` for a factory), with
        module attributes `emmy.model`, `emmy.layer` (absent for a factory), `emmy.tokens`.
    params: parameters by PyTorch name (`self_attn.q_proj.weight`), in function-argument order
        (for a factory, its buffers follow its parameters). A mapping: for the layers of a
        whole model (`emmy.frontend.whole_model`) the tensors are created on first access.
    inputs: example inputs by name (`hidden_states`, `cos`, `sin`; `input0`.. for a factory),
        in function-argument order (for a whole model's layers, created on first access too).
    build: returns the PyTorch module that was traced, with `params` as its parameters (for a
        whole model's layers it is built on first use); `layer_module` caches it.
    reference: `reference(inputs)` runs the PyTorch layer on a dict shaped like `inputs` and
        returns its output (a tensor; for a factory, whatever its module returns, e.g. a tuple).
    """

    module: ModuleOp
    params: Mapping[str, torch.Tensor]
    inputs: Mapping[str, torch.Tensor]
    build: Callable[[], nn.Module]
    reference: Callable[[Mapping[str, torch.Tensor]], torch.Tensor]

    @cached_property
    def layer_module(self) -> nn.Module:
        return self.build()

    @property
    def function_name(self) -> str:
        return self.module.ops.first.sym_name.data  # type: ignore[union-attr]

    def float32_reference(self) -> Any | None:
        """What the traced module returns computed in float32 throughout (a float32 copy run on
        the inputs upcast), or None where it already computes in float32 (or its reference is not
        a `Runner`). `--check` measures both Emmy's and PyTorch's own bf16 results against it."""
        as_float = getattr(self.reference, "float32", None)
        return as_float(self.inputs) if as_float is not None else None

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
    tracer: Tracer = DEFAULT_TRACER,
) -> TracedLayer:
    """Trace decoder layer `layer` of `source` on `tokens` tokens (batch 1). For a factory
    source, `layer` is ignored and the factory's module is traced as a whole (`@forward`).
    `tracer`: "capture" (`emmy.frontend.capture`) or "export" (`emmy.frontend.export`, through
    `torch.export`); both give the same IR for the Llama family."""
    if tokens < 1:
        raise EmmyError(f"--tokens must be at least 1, got {tokens}")
    check_tracer(tracer)
    if source.kind == "factory":
        return _trace_factory(source, tracer, tokens)
    assert source.config is not None
    config = dict(source.config)
    if not decoder.LayerConfig.supports(config):
        config = _standard_names(config)
    n_layers = decoder.config_int(config, "num_hidden_layers", source.model_id)
    if not 0 <= layer < n_layers:
        raise EmmyError(
            f"layer {layer} is out of range for {source.model_id}: it has {n_layers} layers, "
            f"valid layers are 0..{n_layers - 1}"
        )
    decoder.check_positions(config, source.model_id, tokens)
    window = decoder.layer_window(config, layer, tokens, source.model_id)
    use_emmy = implementation == "emmy" or (
        implementation == "auto" and decoder.LayerConfig.supports(config)
    )
    if use_emmy:
        if not decoder.LayerConfig.supports(config):
            raise EmmyError(f"Emmy's own decoder layer does not cover model type '{config.get('model_type')}'")
        module, cos, sin, dtype = _build_emmy(config, tokens, source.model_id)
    else:
        module, cos, sin, dtype = _build_transformers(config, layer, tokens)

    params: Mapping[str, torch.Tensor]
    if source.weights_dir is not None:
        _load_weights(module, source.weights_dir, layer)
        params = dict(module.named_parameters())
        runner = Runner(lambda: module, call_layer, window)
    elif use_emmy:  # values on first use: tracing needs only the norms' (see `shape_module`)
        params = lazy_random_params(module, seed, layer)
        shape_module(module, params)
        runner = Runner(lambda: bind_params(module, params), call_layer, window)
    else:
        random_weights(module, seed, layer)
        params = dict(module.named_parameters())
        runner = Runner(lambda: module, call_layer, window)

    hidden = decoder.config_int(config, "hidden_size", source.model_id)
    gen = torch.Generator().manual_seed(_seed(seed, layer, "hidden_states"))
    hidden_states = torch.randn(1, tokens, hidden, generator=gen).to(dtype)
    inputs = {"hidden_states": hidden_states, "cos": cos, "sin": sin}

    graph = trace_graph(module, module, list(inputs.items()), list(module.named_parameters()), tracer)
    ir = import_graph(
        graph,
        f"layer{layer}",
        module_attrs={
            "emmy.model": StringAttr(source.model_id),
            "emmy.layer": IntegerAttr(layer, i64),
            "emmy.tokens": IntegerAttr(tokens, i64),
        },
    )
    if window is not None:
        set_window(ir, window, f"layer {layer} of {source.model_id}")

    return TracedLayer(ir, params, inputs, runner.module, runner)


def call_layer(module: nn.Module, inputs: Mapping[str, torch.Tensor]) -> Any:
    """A decoder layer's module on its inputs, as every traced layer's `Runner` runs it."""
    return module(inputs["hidden_states"], inputs["cos"], inputs["sin"])


def check_tracer(tracer: str) -> None:
    if tracer not in TRACERS:
        raise EmmyError(f"unknown tracer '{tracer}'", hint="tracers: " + ", ".join(TRACERS))


def trace_graph(
    root: nn.Module,
    call: Callable[..., Any],
    inputs: list[tuple[str, torch.Tensor]],
    params: list[tuple[str, torch.Tensor]] | None,
    tracer: Tracer = DEFAULT_TRACER,
) -> Graph:
    """Record `call(*inputs)` with the chosen tracer (see `trace_layer`)."""
    check_tracer(tracer)
    if tracer == "export":
        from emmy.frontend.export import export_graph  # imports torch.export only when used

        return export_graph(root, call, inputs, params)
    return capture(root, call, inputs, params)


# ------------------------------------------------------------------------------------ builders
def _build_emmy(config: dict[str, Any], tokens: int, model: str):
    c = decoder.LayerConfig.from_hf(config, model)
    module = materialize(decoder.DecoderLayer(c), c.dtype).eval()
    cos, sin = decoder.rotary_cos_sin(c.head_dim, c.rope_theta, tokens, c.dtype)
    return module, cos, sin, c.dtype


def _build_transformers(config: dict[str, Any], layer: int, tokens: int):
    """transformers' own `<Arch>DecoderLayer(config, layer)` and `<Arch>RotaryEmbedding`."""
    import importlib

    model_type = str(config.get("model_type", ""))
    try:
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import model_type_to_module_name

        hf_config = AutoConfig.for_model(**config)
        package = model_type_to_module_name(model_type)  # gemma3_text -> gemma3
        modeling = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    except Exception as e:
        raise EmmyError(f"model type '{model_type}' is not supported: {type(e).__name__}: {e}") from None
    hf_config = getattr(hf_config, "text_config", None) or hf_config
    hf_config._attn_implementation = "sdpa"
    layer_cls = _positional(_layer_class(modeling, model_type))
    ropes = _classes(modeling, "RotaryEmbedding")
    if not ropes:
        raise EmmyError(
            f"model type '{model_type}' has no rotary position embedding (no RotaryEmbedding class in "
            "transformers): Emmy traces decoder layers that take rotary cos/sin tables"
        )
    rope_cls = ropes[0]
    dtype = decoder.config_dtype(config)
    with torch.device("meta"):
        module = layer_cls(hf_config, layer)
    module = materialize(module, dtype).eval()
    rope = rope_cls(hf_config)
    x = torch.zeros(1, tokens, 1, dtype=dtype)
    # Models whose layers alternate local and global attention (Gemma 3) keep a rotary table per
    # layer type; the layer's own type picks it.
    per_type = "layer_type" in inspect.signature(rope.forward).parameters
    kind = (getattr(hf_config, "layer_types", None) or [None] * (layer + 1))[layer] if per_type else None
    with torch.no_grad():
        cos, sin = rope(x, torch.arange(tokens)[None], kind) if per_type else rope(x, torch.arange(tokens)[None])
    return module, cos.to(dtype), sin.to(dtype), dtype


def _standard_names(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with transformers' standard names for the fields its model type spells its own
    way (GPT-J's and CodeGen's `n_embd`, `n_layer`, `n_positions`: the config class's
    `attribute_map`), which the checks here read; unchanged for a type transformers does not know
    (building the layer says so)."""
    try:
        from transformers import CONFIG_MAPPING

        names = CONFIG_MAPPING[str(config.get("model_type", ""))].attribute_map
    except (ImportError, KeyError):
        return config
    return {**{std: config[own] for std, own in names.items() if std not in config and own in config}, **config}


def _positional(layer_cls: type) -> type:
    """`layer_cls` called as Emmy's own layer is, `module(hidden_states, cos, sin)` (what the
    benchmark and the layer checks run), with its parameters' names unchanged."""

    # other arguments the layer's forward requires (older transformers' Falcon: `alibi`), None
    passed = ("self", "hidden_states", "attention_mask", "position_embeddings")
    extra = {
        name: None
        for name, p in inspect.signature(layer_cls.forward).parameters.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in passed
    }

    class Positional(layer_cls):  # type: ignore[misc, valid-type]
        def forward(self, hidden_states, cos, sin):  # type: ignore[override]
            out = super().forward(hidden_states, attention_mask=None, position_embeddings=(cos, sin), **extra)
            return out[0] if isinstance(out, tuple) else out

    Positional.__name__ = Positional.__qualname__ = layer_cls.__name__
    return Positional


def _layer_class(modeling: Any, model_type: str) -> type:
    """The model's decoder layer: `<Arch>DecoderLayer`, or the one layer class of the model that
    transformers makes checkpointable (GPT-NeoX's `GPTNeoXLayer`)."""
    decoder_layers = _classes(modeling, "DecoderLayer")
    if decoder_layers:
        return decoder_layers[0]
    from transformers.modeling_layers import GradientCheckpointingLayer as base

    layers = [c for c in _classes(modeling, "") if issubclass(c, base) and c is not base]
    if len(layers) != 1:
        raise EmmyError(f"model type '{model_type}' has no DecoderLayer class in transformers")
    return layers[0]


def _classes(modeling: Any, suffix: str) -> list[type]:
    """The classes of the module `modeling` whose names end with `suffix`, in name order."""
    found = (getattr(modeling, n) for n in sorted(vars(modeling)) if n.endswith(suffix))
    return [c for c in found if isinstance(c, type)]


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


def norm_weight_names(module: nn.Module) -> set[str]:
    """Names of the parameters that are a norm's weight (initialized around 1, not 0)."""
    norms = {name for name, m in module.named_modules() if "Norm" in type(m).__name__}
    return {f"{owner}.weight" if owner else "weight" for owner in norms}


def random_tensor(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int, layer: int, name: str, norm: bool
) -> torch.Tensor:
    """One parameter's random value: std-0.02 normal around 0 (around 1 for a norm weight),
    seeded by (seed, layer, name). Model-level parameters use layer -1."""
    gen = torch.Generator().manual_seed(_seed(seed, layer, name))
    return torch.empty(shape, dtype=dtype).normal_(1.0 if norm else 0.0, 0.02, generator=gen)


def random_weights(module: nn.Module, seed: int, layer: int) -> None:
    """std-0.02 normal weights and biases; norm weights 1 + 0.02 * normal. Each parameter is
    seeded by (seed, layer, name), so the values do not depend on construction order (and equal
    `random_tensor` of the same name)."""
    norms = norm_weight_names(module)
    with torch.no_grad():
        for name, p in module.named_parameters():
            gen = torch.Generator().manual_seed(_seed(seed, layer, name))
            p.normal_(1.0 if name in norms else 0.0, 0.02, generator=gen)


def lazy_random_params(module: nn.Module, seed: int, layer: int) -> LazyTensors:
    """`module`'s parameters as `random_weights` would fill them, each created on first access
    (`random_tensor` of the same name)."""
    specs = {n: (tuple(p.shape), p.dtype) for n, p in module.named_parameters()}
    norms = norm_weight_names(module)
    return LazyTensors(specs, lambda n: random_tensor(*specs[n], seed, layer, n, n in norms))


def shape_module(module: nn.Module, params: Mapping[str, torch.Tensor]) -> nn.Module:
    """Make `module` (materialized, uninitialized) ready to trace: its norm weights take their
    values from `params` (the capture checks on a probe that a norm computes RMSNorm, which reads
    the weight); every other parameter stays uninitialized. A layer's graph depends on shapes and
    dtypes only (linear and attention are not even run while capturing), so filling the ~15M
    other values of a Qwen3 layer (~0.3 s here) is left to whoever runs the layer. (The meta
    device would also skip the layer's arithmetic, but PyTorch's Python meta kernels, e.g. for
    `pow`, import torch._dynamo and sympy: ~1.1 s.)"""
    norms = norm_weight_names(module)
    return bind_params(module, {n: params[n] for n in norms})


def bind_params(module: nn.Module, params: Mapping[str, torch.Tensor]) -> nn.Module:
    """Make `params[name]` the parameter `name` of `module` (built on the meta device), for
    every name in `params` (`params` may hold a subset)."""
    for name, _ in list(module.named_parameters()):
        if name not in params:
            continue
        owner, _, leaf = name.rpartition(".")
        m = module.get_submodule(owner) if owner else module
        m._parameters[leaf] = nn.Parameter(params[name], requires_grad=False)
    return module


def _load_weights(module: nn.Module, weights_dir: Path, layer: int) -> None:
    """Load this layer's tensors from *.safetensors (keys `model.layers.N.` or `layers.N.`)."""
    from emmy.frontend.weights import SafetensorsIndex

    index = SafetensorsIndex(weights_dir)  # a broken file is an EmmyError naming it
    prefixes = (f"model.layers.{layer}.", f"layers.{layer}.", f"model.language_model.layers.{layer}.")
    missing = []
    for name, p in module.named_parameters():
        key = index.find(tuple(prefix + name for prefix in prefixes))
        if key is None:
            missing.append(name)
            continue
        if index.shapes[key] != tuple(p.shape):
            raise EmmyError(
                f"{index.files[key].name}: {key} has shape {list(index.shapes[key])}, expected {list(p.shape)}"
            )
        with torch.no_grad():
            p.copy_(index.load(key, p.dtype))
    if missing:
        raise EmmyError(
            f"{weights_dir}: the safetensors files lack weights of layer {layer}: {', '.join(sorted(missing))}"
        )


# ------------------------------------------------------------------------------------ factories
def _trace_factory(source: ModelSource, tracer: Tracer, tokens: int) -> TracedLayer:
    """Trace what `fn()` returns; a factory with a `tokens` parameter gets `--tokens`."""
    assert source.factory is not None
    try:
        wants_tokens = "tokens" in inspect.signature(source.factory).parameters
    except (TypeError, ValueError):
        wants_tokens = False
    try:
        made = source.factory(tokens=tokens) if wants_tokens else source.factory()
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
    for i, t in enumerate(example):
        if t.numel() == 0:
            raise EmmyError(
                f"model factory '{source.spec}': example input {i} has shape {list(t.shape)}; "
                "Emmy compiles static shapes with at least one element along every axis"
            )
    module = module.eval()
    inputs = {f"input{i}": t for i, t in enumerate(example)}
    params = dict(module.named_parameters()) | dict(module.named_buffers())  # buffers are params too
    graph = trace_graph(module, module, list(inputs.items()), list(params.items()), tracer)
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

    runner = Runner(lambda: module, lambda m, ins: m(*(ins[k] for k in inputs)))
    return TracedLayer(ir, params, inputs, runner.module, runner)


class Runner:
    """Builds a traced part's PyTorch module on first use and runs it as the part's `reference`.
    With a sliding `window` (`emmy.frontend.window`) the module is built to apply it."""

    def __init__(
        self,
        build: Callable[[], nn.Module],
        run: Callable[[nn.Module, Mapping[str, torch.Tensor]], Any],
        window: int | None = None,
    ):
        self._build = build
        self._run = run
        self._window = window
        self._module: nn.Module | None = None

    def module(self) -> nn.Module:
        if self._module is None:
            module = self._build()
            self._module = module if self._window is None else windowed(module, self._window)
        return self._module

    def __call__(self, inputs: Mapping[str, torch.Tensor]) -> Any:
        with torch.no_grad():
            return self._run(self.module(), inputs)

    def float32(self, inputs: Mapping[str, torch.Tensor]) -> Any | None:
        """The module's result in float32: a float32 copy of it on the inputs' floating tensors
        upcast; None where the module and its inputs hold no lower-precision floats."""
        import copy

        module = self.module()
        tensors = [*module.parameters(), *module.buffers(), *inputs.values()]
        if not any(t.is_floating_point() and t.dtype != torch.float32 for t in tensors):
            return None
        wide = copy.deepcopy(module).float()
        ins = {k: v.float() if v.is_floating_point() else v for k, v in inputs.items()}
        with torch.no_grad():
            return self._run(wide, ins)
