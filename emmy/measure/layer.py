"""A whole compiled layer (or model) on the GPU: built, checked against PyTorch, and timed beside
other builds of it (`tools/bench.py` and `emmy tune`'s layer check alike).

    traced = trace_layer(resolve_model("tools/running_example.py:make"), 0, 512)
    times, problems = time_builds(traced, "sm_90a", cache, {
        "tuned": EmmyBuild(pins=("rms_norm_qkv_proj.block_m=64", ...)),
        "deploy": EmmyBuild(),
    })
    times["tuned"].time_s, times["tuned"].spread      # median seconds per layer, (p90 - p10) / median
    runs = LayerRuns(traced, "sm_90a", cache)         # the same, each build made once over many rounds
    runs.time({"a": build_a, "b": build_b}); runs.time({"a": build_a, "c": build_c})

Each build compiles with its evidence options (`EmmyBuild`: pins, the tuning store the local tier
reads, the tiers turned on) and launches its kernels in a chain (`emmy.backend.run.GpuLayer`, or
`GpuModel` for a whole model, `ModelCase`). Correctness first: every build's results are compared
with a float32 PyTorch reference on the same weights and inputs (`results_error`); one over the
allowed error (`allowed_error`: the tolerance, or 1.5x PyTorch's own bf16 error where that is
larger) is a problem, never timed. Then the right ones are captured in CUDA graphs and timed by
replay, interleaved (`emmy.measure.timing`), so the card's clocks favour none.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

DEFAULT_TOLERANCE = 1e-2


@dataclass(frozen=True)
class EmmyBuild:
    """How one Emmy contender compiles: pins, the tuning store decide-forks' local tier reads
    ("" = none) and the evidence tiers turned on ("" = all)."""

    pins: tuple[str, ...] = ()
    records: str = ""
    evidence: str = ""

    def options(self, **kw):
        from emmy.driver import CompileOptions
        from emmy.golden import default_dir

        golden = default_dir()  # the shipped golden files and fitted prior, as a user's compile reads them
        return CompileOptions(pins=tuple(self.pins), records=self.records, evidence=self.evidence,
                              golden=str(golden) if golden.is_dir() else "", **kw)


def emmy_plan(traced, target: str, build: EmmyBuild = EmmyBuild()):
    """A traced layer compiled as `build` says: (its launch plan, compile seconds)."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import compile_traced

    opts = build.options(model="bench", layer=0, tokens=1, target=target)
    t0 = time.perf_counter()
    result = compile_traced(traced, opts)
    return launch_plan(result.module), time.perf_counter() - t0


def emmy_layer(traced, target: str, cache, build: EmmyBuild = EmmyBuild()):
    """Emmy's version of a traced module: (a function launching it and returning its outputs,
    compile seconds)."""
    plan, compile_s = emmy_plan(traced, target, build)
    return layer_run(traced, plan, target, cache), compile_s


def layer_run(traced, plan, target: str, cache):
    """A function launching a traced module's compiled plan on the GPU and returning its outputs."""
    from emmy.backend.run import GpuLayer

    layer = GpuLayer(plan, target, cache)
    values = {k: v.cuda() for k, v in {**traced.inputs, **traced.params}.items()}
    layer.bind(values)

    def run(overlap=True):
        layer.launch(overlap=overlap)
        return layer.outputs()

    return run


class ModelCase:
    """A whole model as a case: `layer_module`/`inputs` for the PyTorch contenders, `emmy` for Emmy."""

    def __init__(self, traced):
        self.traced = traced
        self.layer_module = traced.torch_module()
        self.inputs = {"input_ids": traced.input_ids, "cos": traced.cos, "sin": traced.sin}

    def compile(self, target: str, build: EmmyBuild = EmmyBuild()):
        """Emmy's compile of the whole model (every distinct part once)."""
        from emmy.driver import compile_whole_model

        return compile_whole_model(build.options(model=self.traced.model_id, layer=None, tokens=self.traced.tokens,
                                                 target=target))

    def emmy(self, target: str, cache, build: EmmyBuild = EmmyBuild()):
        t0 = time.perf_counter()
        result = self.compile(target, build)
        return self.run(result, target, cache), time.perf_counter() - t0

    def run(self, result, target: str, cache):
        """A function launching the compiled model (`compile`'s result) and returning its output."""
        from emmy.backend.run import GpuModel

        model = GpuModel(result, target, cache, self.traced.input_ids)

        def run(overlap=True):
            model.launch(overlap)
            return [model.output]

        return run


def compile_case(traced, target: str, build: EmmyBuild):
    """A layer (`trace_layer`'s) or a whole model (`ModelCase`) compiled as `build` says, no GPU:
    (the layer's launch plan or the model's compile result, compile seconds)."""
    if isinstance(traced, ModelCase):
        t0 = time.perf_counter()
        return traced.compile(target, build), time.perf_counter() - t0
    return emmy_plan(traced, target, build)


def build_emmy(traced, target: str, cache, build: EmmyBuild, compiled=None):
    """A layer or a whole model built as `build` says (from `compiled`, `compile_case`'s answer,
    where the caller has it): (run, compile seconds)."""
    compiled, compile_s = compiled or compile_case(traced, target, build)
    if isinstance(traced, ModelCase):
        return traced.run(compiled, target, cache), compile_s
    return layer_run(traced, compiled, target, cache), compile_s


def prebuild(traced, target: str, cache, build: EmmyBuild, compiled=None) -> None:
    """Compile a case as `build` says (or take `compiled`, `compile_case`'s answer) and build its
    cubins into `cache` (no GPU)."""
    from emmy.backend.plan import launch_plan
    from emmy.backend.run import build_cubin

    compiled = (compiled or compile_case(traced, target, build))[0]
    if isinstance(traced, ModelCase):
        plans = [launch_plan(p.result.module) for p in compiled.parts]
    else:
        plans = [compiled]
    for plan in plans:
        build_cubin(plan.source, target, cache)


def rel_err(out, ref) -> float:
    import torch

    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm()).item()


def results_error(outs, refs) -> float:
    """The largest relative error of a contender's results against the reference's; a contender
    returning another number of results than the reference is an error (not a shorter zip)."""
    import torch

    torch.cuda.synchronize()
    if len(outs) != len(refs):
        raise ValueError(f"{len(outs)} results where the reference has {len(refs)}")
    return max(rel_err(o.reshape(r.shape), r) for o, r in zip(outs, refs))


def as_list(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


@dataclass(frozen=True)
class Reference:
    """A case on the GPU: its PyTorch module and inputs (bf16, what the contenders compute from),
    and the float32 reference results."""

    module: object
    args: list
    refs: list

    def eager(self):
        return self.module(*self.args)


def reference(traced) -> Reference:
    """The case's module and inputs on the GPU and its float32 results (on a float copy; its
    attention in bounded memory, `emmy.measure.bounded_attention`)."""
    import torch

    module = traced.layer_module.cuda()
    args = [v.cuda() for v in traced.inputs.values()]
    from emmy.measure.bounded_attention import bounded_attention

    with torch.no_grad(), bounded_attention():  # (float32 attention at 32768 tokens: 64 GiB whole)
        refs = as_list(copy.deepcopy(module).float()(*[a.float() if a.is_floating_point() else a for a in args]))
    return Reference(module, args, refs)


def allowed_error(ref: Reference, tolerance: float = DEFAULT_TOLERANCE) -> float:
    """The error a contender may have: the tolerance, or 1.5x PyTorch's own bf16 error where that
    is larger (a whole model's many layers of rounding)."""
    import torch

    with torch.no_grad():
        return max(tolerance, 1.5 * results_error(as_list(ref.eager()), ref.refs))


def checked_replays(fns: Mapping[str, Callable[[], object]], ref: Reference, allowed: float,
                    row: dict) -> dict[str, Callable[[], object]]:
    """Correctness first: each function's results against the reference (`row[KEY_err]`); one
    that fails or is over `allowed` gets `row[KEY_error]` and is not timed. The right ones come
    back captured for replay (`emmy.measure.timing.replayable`)."""
    import torch

    from emmy.measure.timing import replayable

    timed = {}
    with torch.no_grad():
        for key, fn in fns.items():
            try:
                row[f"{key}_err"] = results_error(as_list(fn()), ref.refs)
                if not row[f"{key}_err"] <= allowed:
                    row[f"{key}_error"] = (f"relative error {row[f'{key}_err']:.2e} over the allowed "
                                           f"{allowed:.1e}: not timed")
                    continue
                timed[key] = replayable(fn)  # a contender that cannot be captured fails here, alone
            except Exception as e:
                row[f"{key}_error"] = f"{type(e).__name__}: {e}"[:500]
    return timed


@dataclass(frozen=True)
class LayerTime:
    """One build's time in a round: median seconds per layer and relative spread; or, where it
    was not timed, why (`problem`)."""

    time_s: float | None
    spread: float = 0.0
    error: float | None = None  # relative error against the reference
    problem: str = ""


class LayerRuns:
    """The builds of one case (a traced layer or a `ModelCase`), each compiled, checked against the
    reference and captured once, then timed together as often as asked (`time`): a search that
    times the same set in several rounds builds it once."""

    def __init__(self, traced, target: str, cache, tolerance: float = DEFAULT_TOLERANCE):
        self.traced, self.target, self.cache, self.tolerance = traced, target, cache, tolerance
        self._ref: Reference | None = None
        self._allowed = 0.0
        self._made: dict[EmmyBuild, tuple[Callable[[], object] | None, float | None, str]] = {}
        self._compiled: dict[EmmyBuild, tuple] = {}  # build -> compile_case's answer (compiled once)

    def _compile(self, build: EmmyBuild) -> tuple:
        if build not in self._compiled:
            self._compiled[build] = compile_case(self.traced, self.target, build)
        return self._compiled[build]

    def _make(self, build: EmmyBuild) -> tuple[Callable[[], object] | None, float | None, str]:
        if build not in self._made:
            if self._ref is None:
                self._ref = reference(self.traced)
                self._allowed = allowed_error(self._ref, self.tolerance)
            row: dict = {}
            fns = {}
            try:
                fns["it"], _ = build_emmy(self.traced, self.target, self.cache, build, self._compile(build))
            except Exception as e:  # a build that fails is that build's problem; the others go on
                row["it_error"] = f"{type(e).__name__}: {e}"[:500]
            timed = checked_replays(fns, self._ref, self._allowed, row)
            self._made[build] = (timed.get("it"), row.get("it_err"), row.get("it_error", ""))
        return self._made[build]

    def prepare(self, builds: Mapping[str, EmmyBuild]) -> None:
        """The CPU's part of the builds not made yet: compile and nvcc (the cubins cached in the
        cache directory, so making them later loads them), so that a caller can do it before it
        takes the GPU (`emmy.measure.gpu.gpu_lock`). A build that fails here fails again in
        `time`, and is reported there."""
        for build in builds.values():
            if build not in self._made:
                try:
                    prebuild(self.traced, self.target, self.cache, build, self._compile(build))
                except Exception:  # reported by `time`, with the others timed
                    pass

    def time(self, builds: Mapping[str, EmmyBuild], reps: int = 50, inner: int = 10) -> dict[str, LayerTime]:
        """A LayerTime per build: the right ones timed together, interleaved; the others with
        their `problem` (a failed build, an error over the allowed one)."""
        from emmy.measure.timing import sample_replays, summarize, warm_up

        made = {label: self._make(build) for label, build in builds.items()}
        timed = {label: run for label, (run, _, _) in made.items() if run is not None}
        samples = {}
        if timed:
            warm_up(timed)
            samples = sample_replays(timed, reps, inner)
        out = {}
        for label, (_, err, problem) in made.items():
            if label in samples:
                median, spread = summarize(samples[label])
                out[label] = LayerTime(median, spread, err)
            else:
                out[label] = LayerTime(None, error=err, problem=problem or "not timed")
        return out


def time_builds(traced, target: str, cache, builds: Mapping[str, EmmyBuild], tolerance: float = DEFAULT_TOLERANCE,
                reps: int = 50, inner: int = 10) -> dict[str, LayerTime]:
    """Every build of the case (a traced layer or a `ModelCase`) compiled, checked against the
    reference (a wrong one is never timed) and the right ones timed interleaved: a LayerTime per
    build, its `problem` said where it was not timed."""
    return LayerRuns(traced, target, cache, tolerance).time(builds, reps, inner)


__all__ = [
    "DEFAULT_TOLERANCE", "EmmyBuild", "LayerRuns", "LayerTime", "ModelCase", "Reference", "allowed_error", "as_list",
    "build_emmy", "checked_replays", "compile_case", "emmy_layer", "emmy_plan", "layer_run", "prebuild", "reference",
    "rel_err", "results_error", "time_builds",
]
