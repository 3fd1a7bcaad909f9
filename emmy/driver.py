"""Compiling a model: trace, then run the pipeline, with hooks for dumps and timing.

This is the library behind `emmy compile` and `emmy run`; it reads no environment and no argv.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.passes import ModulePass

from emmy.context import STAGES, make_context
from emmy.diagnostics import EmmyError
from emmy.ir_io import parse_pipeline, run_passes, verify
from emmy.passes.pipeline import PIPELINE
from emmy.targets import DEFAULT_TARGET


@dataclass(frozen=True)
class CompileOptions:
    model: str
    layer: int | None = 0
    tokens: int = 512
    target: str = DEFAULT_TARGET
    pins: tuple[str, ...] = ()
    max_launches: int = 0  # decide-forks' launch budget per function call (0: none)
    stop_after: str = "cuda"  # a stage name
    seed: int = 0
    tracer: str = "capture"  # or "export" (torch.export); both give the same torch-stage IR
    verify_each: bool = True  # verify after every pass (else after the last one only)
    records: str = ""  # the tuning store's URL for decide-forks' local tier ("" = none)
    golden: str = ""  # the golden folder for decide-forks' golden tier and the prior ("" = none)
    evidence: str = ""  # the evidence tiers turned on, "pinned,prior" ("" = all; emmy.evidence)
    cache_dir: str = ""  # the compile cache folder (EMMY_HOME) for the trace cache ("" = none)


@dataclass
class CompileResult:
    ctx: Context
    module: ModuleOp
    traced: object  # emmy.frontend.TracedLayer
    timings: list[tuple[str, float]] = field(default_factory=list)


def pipeline_passes(options: CompileOptions) -> list[ModulePass]:
    """The default pipeline up to and including the pass that produces `options.stop_after`.

    Asking for the tile stage stops after `decide-forks` (the tile stage after decisions)."""
    if options.stop_after not in STAGES:
        raise EmmyError(
            f"unknown stage '{options.stop_after}'", hint="valid stages: " + ", ".join(STAGES)
        )
    names: list[str] = []
    for name, _, _, stage in PIPELINE:
        if STAGES.index(stage) > STAGES.index(options.stop_after):
            break
        names.append(name)
    passes = parse_pipeline(",".join(names))
    evidence = {"records": options.records, "golden": options.golden, "evidence": options.evidence}
    evidence = {k: v for k, v in evidence.items() if v}
    if evidence:  # decide-forks' evidence (pass options, not in the IR)
        passes = [replace(p, **evidence) if p.name == "decide-forks" else p for p in passes]
    return passes


def trace(options: CompileOptions):
    """The traced layer (`emmy.frontend.TracedLayer`); with `options.cache_dir`, a
    `emmy.frontend.trace_cache.CachedPart` (its module only) when the trace cache has it."""
    from emmy.frontend import resolve_model
    from emmy.frontend.trace_cache import CachedPart

    source = resolve_model(options.model)
    if options.tokens < 1:
        raise EmmyError(f"--tokens must be at least 1 (got {options.tokens})")
    layer = 0 if options.layer is None else options.layer  # factories ignore the layer
    cache = _trace_cache(options, source, layer)
    cached = cache.load() if cache is not None else None
    if cached is not None:
        return cached[0]
    from emmy.frontend import trace_layer

    traced = trace_layer(source, layer, options.tokens, seed=options.seed, tracer=options.tracer)
    if cache is not None:
        cache.store([CachedPart(traced.function_name, [], traced.module)])
    return traced


def _trace_cache(options: CompileOptions, source, layer: int | None):
    from emmy.frontend.trace_cache import TraceCache

    return TraceCache.open(
        options.cache_dir, source, layer=layer, tokens=options.tokens, seed=options.seed, tracer=options.tracer
    )


def compile_model(
    options: CompileOptions,
    after_each: Callable[[str, ModuleOp], None] | None = None,
) -> CompileResult:
    """Trace the model and lower it to `options.stop_after`.

    `after_each(name, module)` is called with the imported torch module (name "torch-import")
    and after every pass (the pass name)."""
    from emmy.targets import get_target

    get_target(options.target)  # validates the name with a clear error
    t0 = time.perf_counter()
    traced = trace(options)
    return compile_traced(traced, options, after_each, trace_seconds=time.perf_counter() - t0)


def compile_traced(
    traced,
    options: CompileOptions,
    after_each: Callable[[str, ModuleOp], None] | None = None,
    trace_seconds: float = 0.0,
    pins_attr: str = "emmy.pins",
) -> CompileResult:
    """Lower an already traced model (`emmy.frontend.TracedLayer`) to `options.stop_after`.

    The lowering works on a copy: `traced.module` stays at the torch stage, so one trace can be
    compiled again with other options (another target, other pins). The pins are recorded in
    the module attribute `pins_attr`: `emmy.pins` (each must apply to this module) or, for a
    part of a whole model, `emmy.model_pins` (see decide-forks)."""
    ctx = make_context()
    timings: list[tuple[str, float]] = [("trace + import", trace_seconds)]
    module = traced.module.clone()
    module.attributes["emmy.target"] = StringAttr(options.target)
    if options.pins:  # read by decide-forks; kept in the module so dumps replay exactly
        module.attributes[pins_attr] = StringAttr(";".join(options.pins))
    if options.max_launches:  # read by decide-forks, kept like the pins
        from emmy.passes.decide_forks import MAX_LAUNCHES_ATTR  # (the pass pulls in the kernel stage)

        module.attributes[MAX_LAUNCHES_ATTR] = IntegerAttr(options.max_launches, 64)
    verify(module, "imported module")
    if after_each is not None:
        after_each("torch-import", module)

    passes = pipeline_passes(options)
    clock = [time.perf_counter()]

    def hook(p: ModulePass, m: ModuleOp) -> None:
        now = time.perf_counter()
        timings.append((p.name, now - clock[0]))
        if after_each is not None:
            after_each(p.name, m)
        clock[0] = time.perf_counter()

    run_passes(ctx, module, passes, after_each=hook, verify_each=options.verify_each)
    return CompileResult(ctx=ctx, module=module, traced=traced, timings=timings)


@dataclass
class ModelPart:
    """One compiled part of a whole model: the embedding, one distinct layer structure (used by
    `layers`), or the final norm."""

    name: str
    result: CompileResult
    layers: list[int]


@dataclass
class ModelCompileResult:
    traced: object  # emmy.frontend.whole_model.TracedModel (None when read from the trace cache)
    parts: list[ModelPart]

    @property
    def timings(self) -> list[tuple[str, float]]:
        return [(f"{p.name}: {name}", t) for p in self.parts for name, t in p.result.timings]

    def chain(self, ids, cos, sin, step: Callable[[ModelPart, object, dict], object]):
        """Run the model part by part: the embedding of `ids`, every decoder layer on the hidden
        states before it (with `cos`, `sin`), the final norm; returns the norm's output.
        `step(part, traced_part, values)` runs one part's compiled module on `values` (its
        non-parameter inputs; the traced part holds its weights) and returns its output. One
        order for every runner of a whole model (the GPU, the interpreter)."""
        traced = self.traced
        by_layer = {i: p for p in self.parts for i in p.layers}
        parts = {p.name: p for p in self.parts}
        hidden = step(parts["embed_tokens"], traced.embedding, {"input_ids": ids})
        for i, layer in enumerate(traced.layers):
            hidden = step(by_layer[i], layer, {"hidden_states": hidden, "cos": cos, "sin": sin})
        return step(parts["norm"], traced.norm, {"hidden_states": hidden})


def compile_whole_model(
    options: CompileOptions,
    after_each: Callable[[str, str, ModuleOp], None] | None = None,
) -> ModelCompileResult:
    """Compile every part of a model: the embedding, each distinct decoder-layer structure once
    (layers whose IR differs only in their weights share one compiled module), the final norm.

    `after_each(part, name, module)` is called like `compile_model`'s hook, per part."""
    from emmy.frontend import resolve_model
    from emmy.targets import get_target

    get_target(options.target)
    source = resolve_model(options.model)
    if source.kind == "factory":
        return ModelCompileResult(None, [ModelPart("forward", compile_model(options, _part_hook("forward", after_each)), [])])
    t0 = time.perf_counter()
    cache = _trace_cache(options, source, None)
    cached = cache.load() if cache is not None else None
    if cached is not None:  # the parts as they were planned when traced
        traced = None
        plan = [(p.name, p, p.layers) for p in cached]
    else:
        from emmy.frontend.whole_model import trace_model  # imports torch

        traced = trace_model(source, options.tokens, seed=options.seed, tracer=options.tracer)
        groups = traced.distinct_layers()  # keys are computed before compiling rewrites the modules
        plan = [("embed_tokens", traced.embedding, [])]
        plan += [(f"layer{idx[0]}", traced.layers[idx[0]], idx) for idx in groups.values()]
        plan += [("norm", traced.norm, [])]
        if cache is not None:
            from emmy.frontend.trace_cache import CachedPart

            cache.store([CachedPart(name, layers, part.module) for name, part, layers in plan])
    trace_s = time.perf_counter() - t0
    pins = _ModelPins(options.pins)
    parts = []
    for name, part, layers in plan:
        hook = pins.watch(_part_hook(name, after_each))
        result = compile_traced(part, options, hook, trace_seconds=trace_s, pins_attr=pins.attr)
        trace_s = 0.0
        parts.append(ModelPart(name, result, layers))
    pins.check()
    return ModelCompileResult(traced, parts)


class _ModelPins:
    """`--knob` pins for a whole model: each part takes those that fit it (`emmy.model_pins`),
    and every pin must fit some part: the kernels of all parts are gathered right after
    decide-forks (later stages no longer hold the knobs) and checked at the end."""

    def __init__(self, pins: tuple[str, ...]):
        self.pins = pins
        self.spaces: dict[str, dict] | None = None  # kernel -> knob -> domain, over all parts
        self.attr = "emmy.pins"
        if pins:
            from emmy.passes.decide_forks import MODEL_PINS_ATTR  # (the pass pulls in the kernel stage)

            self.attr = MODEL_PINS_ATTR

    def watch(self, hook: Callable[[str, ModuleOp], None] | None) -> Callable[[str, ModuleOp], None] | None:
        if not self.pins:
            return hook

        def watched(name: str, module: ModuleOp) -> None:
            if name == "decide-forks":
                from emmy.dialects.tile import KernelOp
                from emmy.passes.decide_forks import knob_spaces

                self.spaces = self.spaces or {}
                # two parts may hold kernels of one name (two layer structures): keep every knob
                for kernel, space in knob_spaces([k for k in module.walk() if isinstance(k, KernelOp)]).items():
                    self.spaces.setdefault(kernel, {}).update(space)
            if hook is not None:
                hook(name, module)

        return watched

    def check(self) -> None:
        if self.pins and self.spaces is not None:  # None: the pipeline stopped before decide-forks
            from emmy.tuning.pins import check_pins_used, parse_pins

            check_pins_used(parse_pins(";".join(self.pins)), self.spaces)


def _part_hook(part: str, hook):
    if hook is None:
        return None
    return lambda name, module: hook(part, name, module)
