"""Tracing a whole Llama-family model: the embedding lookup, every decoder layer, the final norm.

`trace_model(source, tokens, seed)` returns a `TracedModel` whose parts are each one torch-stage
module (a `TracedLayer`):

- `embedding`: `func.func @embed_tokens(%input_ids: tensor<1xTxi64>, %embed_tokens.weight:
  tensor<VxHxbf16>) -> tensor<1xTxHxbf16>`, one `torch.embedding`;
- `layers[i]`: `func.func @layer<i>(hidden_states, cos, sin, params...)`, exactly what
  `trace_layer(source, i, tokens, seed)` gives (same IR, same weights, same example inputs);
- `norm`: `func.func @norm(%hidden_states, %norm.weight)`, one `torch.rms_norm`.

The modules carry `emmy.model` and `emmy.tokens`; layers also `emmy.layer`. `layer_key(part)` is
a structural key (a hash of the printed IR without `emmy.layer` and with the function renamed), so
a driver compiles each distinct layer structure once; `TracedModel.distinct_layers()` groups the
layers by it.

Cost: Emmy's decoder layer (`emmy.frontend.decoder`) depends only on the config, never on the
layer index, so layer 0 is traced once and the other layers share its IR (cloned, with
`emmy.layer` and the function name set). Weights are `LazyTensors`: created on first access
(random from `(seed, layer, name)`, or read from the source's *.safetensors), and layer 0 is
traced on uninitialized parameters (`emmy.frontend.trace.shape_module`: only its norm weights are
read), so tracing Qwen3-Embedding-0.6B fills neither a layer's 15M parameters nor the 151669x1024
embedding table; `reference` and `embed` create them when they run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64

from emmy.diagnostics import EmmyError
from emmy.frontend import decoder
from emmy.frontend.graph import Graph, Node, Value
from emmy.frontend.importer import import_graph
from emmy.frontend.models import ModelSource
from emmy.frontend.trace import (
    DEFAULT_TRACER,
    TracedLayer,
    Tracer,
    Runner,
    _seed,
    bind_params,
    call_layer,
    check_tracer,
    materialize,
    norm_weight_names,
    random_tensor,
    shape_module,
    trace_graph,
)
from emmy.frontend.weights import LazyTensors, SafetensorsIndex, Spec
from emmy.frontend.window import set_window

MODEL_LEVEL = -1  # the "layer" of model-level parameters in random seeds


@dataclass(eq=False)
class TracedModel:
    """A traced whole model (see the module docstring).

    input_ids: example token ids [1, tokens] (int64), seeded.
    cos, sin: the rotary tables [1, tokens, head_dim] every layer takes.
    """

    model_id: str
    tokens: int
    config: decoder.LayerConfig
    vocab_size: int
    input_ids: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    embedding: TracedLayer
    layers: list[TracedLayer]
    norm: TracedLayer

    def parts(self) -> list[TracedLayer]:
        """Embedding, layers, norm: the order the model runs them."""
        return [self.embedding, *self.layers, self.norm]

    def distinct_layers(self) -> dict[str, list[int]]:
        """`layer_key` -> the indices of the layers with that structure (first-seen order)."""
        groups: dict[str, list[int]] = {}
        for i, layer in enumerate(self.layers):
            groups.setdefault(layer_key(layer), []).append(i)
        return groups

    def ids(self, input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The token ids to run: `input_ids` checked against the model (shape [1, T], every id
        in the vocabulary), or the seeded example ids when None."""
        if input_ids is None:
            return self.input_ids
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise EmmyError(f"input_ids must have shape [1, T], got {list(input_ids.shape)}")
        bad = input_ids[(input_ids < 0) | (input_ids >= self.vocab_size)]
        if bad.numel():
            raise EmmyError(
                f"token id {int(bad[0])} is outside the vocabulary of {self.model_id}: ids run "
                f"from 0 to {self.vocab_size - 1}"
            )
        return input_ids

    def reference(self, input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Run the PyTorch model: embedding, every layer (with rotary), final norm. Returns the
        last hidden state [1, T, H] in the model dtype. T may differ from `tokens`."""
        ids = self.ids(input_ids)
        c = self.config
        if ids.shape[1] == self.tokens:
            cos, sin = self.cos, self.sin
        else:
            cos, sin = decoder.rotary_cos_sin(c.head_dim, c.rope_theta, int(ids.shape[1]), c.dtype)
        with torch.no_grad():
            h = self.embedding.reference({"input_ids": ids})
            for layer in self.layers:
                h = layer.reference({"hidden_states": h, "cos": cos, "sin": sin})
            return self.norm.reference({"hidden_states": h})

    def torch_module(self) -> nn.Module:
        """The whole model as one PyTorch module, `forward(input_ids, cos, sin)` -> the last
        hidden state [1, T, H] (what `reference` computes; for benchmarks and torch.compile)."""
        return _WholeModel(
            self.embedding.layer_module, [p.layer_module for p in self.layers], self.norm.layer_module
        )

    def embed(self, input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Qwen3-Embedding's sentence embedding [1, H] of PyTorch's model (see `pool`)."""
        return pool(self.reference(input_ids))

    def embed_float32(self, input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The same embedding computed in float32 throughout (a copy of the model): the
        reference both Emmy's and PyTorch's bf16 results are measured against."""
        import copy

        ids = self.ids(input_ids)
        c = self.config
        cos, sin = decoder.rotary_cos_sin(c.head_dim, c.rope_theta, int(ids.shape[1]), torch.float32)
        model = copy.deepcopy(self.torch_module()).float()
        with torch.no_grad():
            return pool(model(ids, cos, sin))


def layer_key(traced: TracedLayer) -> str:
    """A structural key: equal for parts whose IR differs only in `emmy.layer` and the function
    name (hence only in parameter values). A hex string."""
    module = traced.module.clone()
    module.attributes.pop("emmy.layer", None)
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            op.sym_name = StringAttr("layer")
    from emmy.ir_io import print_module

    return hashlib.sha256(print_module(module).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------ tracing
def trace_model(
    source: ModelSource, tokens: int, seed: int = 0, *, tracer: Tracer = DEFAULT_TRACER
) -> TracedModel:
    """Trace every part of a Llama-family model (llama, mistral, qwen2, qwen3) on `tokens`
    tokens (batch 1). Weights come from the source's *.safetensors when it has them, else they
    are random from `seed` (created lazily, see the module docstring)."""
    if tokens < 1:
        raise EmmyError(f"--tokens must be at least 1, got {tokens}")
    check_tracer(tracer)
    if source.kind == "factory":
        raise EmmyError(
            f"model '{source.spec}' is a Python factory: it is traced as one function, not as a "
            "model of embedding, layers and norm"
        )
    assert source.config is not None
    config = dict(source.config)
    if not decoder.LayerConfig.supports(config):
        raise EmmyError(
            f"compiling a whole model supports the Llama family ({', '.join(decoder.FAMILY)}, "
            f"SiLU, default RoPE); {source.model_id} is model type '{config.get('model_type')}'",
            hint="compile one decoder layer with --layer N",
        )
    c = decoder.LayerConfig.from_hf(config, source.model_id)
    decoder.check_positions(config, source.model_id, tokens)
    vocab = int(config.get("vocab_size", 0))
    if vocab < 1:
        raise EmmyError(f"{source.model_id}: the config has no vocab_size")
    weights = _Weights(source, seed, c.dtype)
    attrs = {"emmy.model": StringAttr(source.model_id), "emmy.tokens": IntegerAttr(tokens, i64)}
    cos, sin = decoder.rotary_cos_sin(c.head_dim, c.rope_theta, tokens, c.dtype)
    gen = torch.Generator().manual_seed(_seed(seed, MODEL_LEVEL, "input_ids"))
    input_ids = torch.randint(0, vocab, (1, tokens), generator=gen)

    embedding = _embedding(c, vocab, tokens, input_ids, weights, attrs)
    windows = [decoder.layer_window(config, i, tokens, source.model_id) for i in range(c.num_layers)]
    layers = _layers(c, tokens, seed, cos, sin, weights, attrs, tracer, windows, source.model_id)
    norm = _final_norm(c, tokens, seed, weights, attrs, tracer)
    return TracedModel(source.model_id, tokens, c, vocab, input_ids, cos, sin, embedding, layers, norm)


class _Weights:
    """Parameter values for one model: random from the seed, or from *.safetensors."""

    def __init__(self, source: ModelSource, seed: int, dtype: torch.dtype):
        self.seed = seed
        self.dtype = dtype
        self.index = SafetensorsIndex(source.weights_dir) if source.weights_dir is not None else None
        self.where = str(source.weights_dir)

    def params(self, layer: int, specs: Mapping[str, Spec], norms: set[str]) -> LazyTensors:
        if self.index is None:
            return LazyTensors(
                specs, lambda n: random_tensor(specs[n][0], specs[n][1], self.seed, layer, n, n in norms)
            )
        keys = {n: self._key(layer, n, shape) for n, (shape, _) in specs.items()}
        return LazyTensors(specs, lambda n: self.index.load(keys[n], self.dtype))  # type: ignore[union-attr]

    def _key(self, layer: int, name: str, shape: tuple[int, ...]) -> str:
        assert self.index is not None
        if layer == MODEL_LEVEL:
            candidates = (f"model.{name}", name, f"model.language_model.{name}")
        else:
            candidates = tuple(f"{p}layers.{layer}.{name}" for p in ("model.", "", "model.language_model."))
        key = self.index.find(candidates)
        if key is None:
            raise EmmyError(f"{self.where}: the safetensors files lack {candidates[0]}")
        if self.index.shapes[key] != shape:
            raise EmmyError(f"{self.where}: {key} has shape {list(self.index.shapes[key])}, expected {list(shape)}")
        return key


def _specs(module: nn.Module, dtype: torch.dtype) -> dict[str, Spec]:
    return {n: (tuple(p.shape), dtype) for n, p in module.named_parameters()}


def pool(hidden: torch.Tensor) -> torch.Tensor:
    """Qwen3-Embedding's sentence embedding from the final hidden states [B, T, H]: the last
    token's, L2-normalized (`F.normalize(p=2, dim=1)`, in the tensor's dtype, as its model card
    does)."""
    return F.normalize(hidden[:, -1], p=2, dim=1)


class _WholeModel(nn.Module):
    def __init__(self, embedding: nn.Module, layers: list[nn.Module], norm: nn.Module):
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(self, input_ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = self.embedding(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)


def _embedding(c, vocab, tokens, input_ids, weights: _Weights, attrs) -> TracedLayer:
    """`torch.embedding` of the ids into the table: built directly (there is nothing to trace,
    and tracing would need the 151669x1024 table)."""
    name = "embed_tokens.weight"
    params = weights.params(MODEL_LEVEL, {name: ((vocab, c.hidden_size), c.dtype)}, set())
    ids = Value(0, (1, tokens), torch.int64)
    table = Value(1, (vocab, c.hidden_size), c.dtype)
    out = Value(2, (1, tokens, c.hidden_size), c.dtype)
    graph = Graph(
        inputs=[("input_ids", ids)],
        params=[(name, table)],
        nodes=[Node("aten.embedding", (ids, table), {}, (out,), "embed_tokens", "Embedding")],
        outputs=[out],
    )
    ir = import_graph(graph, "embed_tokens", module_attrs=dict(attrs))

    def build() -> nn.Module:
        module = nn.Embedding(vocab, c.hidden_size, device="meta")
        module._parameters["weight"] = nn.Parameter(params[name], requires_grad=False)
        return module

    runner = Runner(build, lambda m, ins: m(ins["input_ids"]))
    return TracedLayer(ir, params, {"input_ids": input_ids}, runner.module, runner)


def _layers(c, tokens, seed, cos, sin, weights: _Weights, attrs, tracer, windows, model) -> list[TracedLayer]:
    """Every decoder layer: layer 0 traced, the others its copies (one structure); a layer with a
    sliding window that the sequence passes (`windows[i]`) gets it in its IR and its module, and
    with it a structure of its own (`layer_key`)."""
    shape = decoder.DecoderLayer(c)  # meta device: shapes and names only
    specs, norms = _specs(shape, c.dtype), norm_weight_names(shape)
    layers: list[TracedLayer] = []
    first: ModuleOp | None = None  # layer 0's IR
    for i in range(c.num_layers):
        params = weights.params(i, specs, norms)
        inputs = _layer_inputs(c, tokens, seed, i, cos, sin)
        runner = Runner(
            lambda p=params: bind_params(decoder.DecoderLayer(c), p).eval(),
            call_layer,
            windows[i],
        )
        layer_attrs = {**attrs, "emmy.layer": IntegerAttr(i, i64)}
        if first is None:  # trace one layer; the others have the same structure
            module = shape_module(materialize(decoder.DecoderLayer(c), c.dtype).eval(), params)
            graph = trace_graph(module, module, list(inputs.items()), list(module.named_parameters()), tracer)
            ir = import_graph(graph, f"layer{i}", module_attrs=_ordered(layer_attrs))
            first = ir
        else:
            ir = first.clone()
            ir.attributes["emmy.layer"] = IntegerAttr(i, i64)
            fn = ir.ops.first
            assert isinstance(fn, func.FuncOp)
            fn.sym_name = StringAttr(f"layer{i}")
        if windows[i] is not None:
            ir = ir.clone() if ir is first else ir  # layer 0's IR stays the windowless copy source
            set_window(ir, windows[i], f"layer {i} of {model}")
        layers.append(TracedLayer(ir, params, inputs, runner.module, runner))
    return layers


def _layer_inputs(c, tokens: int, seed: int, layer: int, cos, sin) -> LazyTensors:
    """hidden_states (random, as `trace_layer` makes them), cos, sin; created on first access."""

    def make(name: str) -> torch.Tensor:
        if name != "hidden_states":
            return {"cos": cos, "sin": sin}[name]
        gen = torch.Generator().manual_seed(_seed(seed, layer, "hidden_states"))
        return torch.randn(1, tokens, c.hidden_size, generator=gen).to(c.dtype)

    hidden = ((1, tokens, c.hidden_size), c.dtype)
    return LazyTensors({"hidden_states": hidden, "cos": _spec(cos), "sin": _spec(sin)}, make)


def _spec(t: torch.Tensor) -> Spec:
    return tuple(t.shape), t.dtype


def _ordered(attrs: dict) -> dict:
    """Module attributes in trace_layer's order: emmy.model, emmy.layer, emmy.tokens."""
    order = ("emmy.model", "emmy.layer", "emmy.tokens")
    return {k: attrs[k] for k in order if k in attrs}


class _FinalNorm(nn.Module):
    def __init__(self, c: decoder.LayerConfig):
        super().__init__()
        self.norm = decoder.RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(hidden_states)


def _final_norm(c, tokens, seed, weights: _Weights, attrs, tracer) -> TracedLayer:
    with torch.device("meta"):
        shape = _FinalNorm(c)
    params = weights.params(MODEL_LEVEL, _specs(shape, c.dtype), norm_weight_names(shape))
    gen = torch.Generator().manual_seed(_seed(seed, MODEL_LEVEL, "norm.hidden_states"))
    hidden = torch.randn(1, tokens, c.hidden_size, generator=gen).to(c.dtype)
    runner = Runner(lambda: bind_params(_FinalNorm(c), params).eval(), lambda m, ins: m(ins["hidden_states"]))
    module = runner.module()
    inputs = {"hidden_states": hidden}
    graph = trace_graph(module, module, list(inputs.items()), list(module.named_parameters()), tracer)
    ir = import_graph(graph, "norm", module_attrs=dict(attrs))
    return TracedLayer(ir, params, inputs, runner.module, runner)
