"""The layer check at the end of `emmy tune`: the layer timed with every kernel at its tuned answer
(the chosen set) against every kernel at its deploy answer (what Emmy gives without the store:
golden, nearest, prior or rules), interleaved; where the chosen set is slower beyond the spread,
the tuned answers that lose in context are found and recorded (`emmy.records.layer`).

    layer = layer_of(options, tokens=512)             # the layer's kernels: names, keys, deploy answers
    tuned = chosen_set(layer, bests)                  # key id -> named best values
    verdict = check_layer(layer, tuned, timer)        # timer: a LayerTimer (GPU, cost, or a test's)
    write_layer_check(store, layer_record(layer, verdict, ...))

The search for the losers is greedy: each kernel whose tuned answer differs from its deploy answer,
in the layer's order, is reverted to its deploy answer in a copy of the current set (the kernels
of one key together: the local tier answers them alike); the copy and
the current set are timed together, and the revert is kept when the layer is faster with it by
more than the larger of the two spreads. A last round times the chosen set, the final set and the
deploy set together; those are the figures recorded. A re-run whose bests are the ones a kept
check timed recalls that check (`recall`) instead of timing again.

A `LayerTimer` times named sets (kernel name -> knob values) together: `GpuLayerTimer` builds each
set as pins of one compile and times the layer on the GPU (`emmy.measure.layer`), `CostLayerTimer`
sums the cost measurer's per-kernel costs (no GPU; its times mean nothing, and never show
kernels interacting: the logic runs, the tuned set is never slower).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

from emmy.measure.layer import LayerTime
from emmy.measure.timing import faster

Values = Mapping[str, object]
Assignment = Mapping[str, Values]  # kernel name -> knob values


@dataclass(frozen=True)
class LayerKernel:
    name: str
    key: str  # key id
    deploy: Values  # the answer without the store (decide-forks with the local tier off)
    task: object = None  # the TuneTask of its key, where the run has one
    part: str = ""  # the model's part it is in (a whole model: `embed_tokens`, `layer0`, `norm`, ...)


@dataclass(frozen=True)
class Layer:
    """One compiled layer (or, with `layer` None, a whole model: every distinct part once) at one
    token count: its kernels in IR order, part after part."""

    model: str
    layer: int | None
    tokens: int
    target: str
    kernels: tuple[LayerKernel, ...]

    @property
    def signature(self) -> str:
        """The signature of the (first) part: a layer's own."""
        return self.signatures()[self.kernels[0].part if self.kernels else ""]

    def parts(self) -> dict[str, list[LayerKernel]]:
        out: dict[str, list[LayerKernel]] = {}
        for k in self.kernels:
            out.setdefault(k.part, []).append(k)
        return out

    def signatures(self) -> dict[str, str]:
        """Part -> the signature of its module's kernels (what decide-forks matches a check by)."""
        from emmy.records.layer import layer_signature

        return {part: layer_signature(k.key for k in kernels) for part, kernels in self.parts().items()}

    def deploy(self) -> dict[str, Values]:
        return {k.name: dict(k.deploy) for k in self.kernels}

    def where(self) -> str:
        return f"layer {self.layer}" if self.layer is not None else "model"

    def clash(self) -> str:
        """Why the sets of this layer cannot be built ("" when they can): a set pins kernels by
        name, in every part alike, so one name must not stand for kernels of different keys."""
        keys: dict[str, set[str]] = {}
        for k in self.kernels:
            keys.setdefault(k.name, set()).add(k.key)
        names = [n for n, ks in keys.items() if len(ks) > 1]
        if not names:
            return ""
        return (f"kernel {names[0]} is in several parts with different keys, and a set pins kernels by name "
                "in every part alike")


class LayerTimer(Protocol):
    def time(self, sets: Mapping[str, Assignment]) -> dict[str, LayerTime]:
        """Each named set's time, the sets timed together (interleaved)."""

    def environment(self) -> dict[str, str]:
        """The card and versions the times were taken with (`emmy.records.record.ENV_FIELDS`)."""


@dataclass(frozen=True)
class Verdict:
    """A layer check's outcome: the chosen set's, the deploy set's and the final set's times (from
    one round), the kernels reverted to their deploy answers with the layer's gain from each, and
    a problem where the sets could not be compared (a set not right, a build failed)."""

    tuned: LayerTime
    deploy: LayerTime
    final: LayerTime
    reverted: Mapping[str, float] = field(default_factory=dict)  # kernel name (its key's first) -> gain (fraction)
    problem: str = ""

    @property
    def speedup(self) -> float | None:
        if self.final.time_s and self.deploy.time_s:
            return self.deploy.time_s / self.final.time_s
        return None


def check_layer(layer: Layer, tuned: Assignment, timer: LayerTimer) -> Verdict:
    """Time the chosen set `tuned` against the layer's deploy set; where it is slower beyond the
    spread, revert kernels greedily (see the module docstring)."""
    deploy = layer.deploy()
    first = timer.time({"tuned": tuned, "deploy": deploy})
    t, d = first["tuned"], first["deploy"]
    for label, lt in (("chosen", t), ("deploy", d)):
        if lt.time_s is None:
            return Verdict(t, d, t, problem=f"the {label} set was not timed: {lt.problem}")
    if not faster(d, t):
        return Verdict(t, d, t)
    current, reverted = {k: dict(v) for k, v in tuned.items()}, {}
    for key, names in _by_key(layer).items():
        if all(dict(current[n]) == dict(deploy[n]) for n in names):
            continue
        trial = {**current, **{n: dict(deploy[n]) for n in names}}  # a key's kernels revert together
        r = timer.time({"current": current, "revert": trial})
        if faster(r["revert"], r["current"]):
            reverted[names[0]] = (r["current"].time_s - r["revert"].time_s) / r["current"].time_s
            current = trial
    if not reverted:
        return Verdict(t, d, t)
    last = timer.time({"tuned": tuned, "final": current, "deploy": deploy})
    return Verdict(last["tuned"], last["deploy"], last["final"], reverted)


def _by_key(layer: Layer) -> dict[str, list[str]]:
    """Key id -> the names of its kernels in the layer, in the layer's order (kernels of one key
    share the local tier's answer, so they are judged together)."""
    out: dict[str, list[str]] = {}
    for k in layer.kernels:
        names = out.setdefault(k.key, [])
        if k.name not in names:
            names.append(k.name)
    return out


def layer_of(options, tokens: int, tasks: Sequence = ()) -> Layer:
    """The layer `options.layer` of `options.model` (with layer None, the whole model: every
    distinct part once) at `tokens`, compiled to the tile stage with no store (the deploy
    answers), its kernels in IR order (`tasks`: the run's TuneTasks, by key)."""
    from dataclasses import replace

    from emmy.dialects.tile import KernelOp
    from emmy.driver import compile_model, compile_whole_model
    from emmy.schedule.key import kernel_key
    from emmy.targets import get_target

    target = get_target(options.target)
    opts = replace(options, tokens=tokens, stop_after="tile", records="")
    if options.layer is None:
        modules = [(p.name, p.result.module) for p in compile_whole_model(opts).parts]
    else:
        modules = [("", compile_model(opts).module)]
    by_key = {t.key_id: t for t in tasks}
    kernels = []
    for part, module in modules:
        for op in module.walk():
            if isinstance(op, KernelOp):
                key = kernel_key(op, target).id
                values = {n: k.value for n, k in op.knob_dict().items() if k.value is not None}
                kernels.append(LayerKernel(op.kernel_name, key, values, by_key.get(key), part))
    return Layer(options.model, options.layer, tokens, target.name, tuple(kernels))


def chosen_set(layer: Layer, bests: Mapping[str, Values]) -> dict[str, dict]:
    """Every kernel at its key's named best (`bests`: key id -> values), or its deploy answer
    where its key has none."""
    return {k.name: dict(bests.get(k.key, k.deploy)) for k in layer.kernels}


def layer_records(layer: Layer, verdict: Verdict, tuned: Assignment, alone: Mapping[str, float],
                  env: Mapping[str, str]) -> list:
    """The `emmy.records.layer.LayerCheck`s of a verdict, one per part (decide-forks decides a
    model part by part; a layer is one part), each with the layer's (or model's) times and the
    reverts of its own kernels (`alone`: key id -> the tuned answer's own time, its study's best)."""
    from emmy.records.layer import LayerCheck, Reverted

    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    signatures = layer.signatures()
    out = []
    for part, kernels in layer.parts().items():
        names = {k.name: k for k in kernels}
        reverted = {names[n].key: Reverted(n, dict(tuned[n]), dict(names[n].deploy),
                                           float(alone.get(names[n].key, 0.0)), gain)
                    for n, gain in verdict.reverted.items() if n in names}
        out.append(LayerCheck(
            signature=signatures[part], target=layer.target, tokens=layer.tokens,
            kernels={k.name: k.key for k in kernels},
            tuned_s=verdict.tuned.time_s, tuned_spread=verdict.tuned.spread,
            deploy_s=verdict.deploy.time_s, deploy_spread=verdict.deploy.spread,
            final_s=verdict.final.time_s, final_spread=verdict.final.spread,
            reverted=reverted, model=layer.model, layer=layer.layer, part=part, env=dict(env), date=date,
            chosen={k.name: dict(tuned[k.name]) for k in kernels},
        ))
    return out


@dataclass(frozen=True)
class LayerOutcome:
    """A layer check in a run: the layer at one token count, its verdict (None where nothing was
    timed) and a note."""

    layer: Layer
    verdict: Verdict | None
    note: str = ""
    problem: bool = False  # not checked: the note says why
    failed: bool = False  # timing it raised (the note has the error): the run's exit status is 1
    recalled: bool = False  # read back from the store's checks of the same bests, not timed again


def check_layers(store, options, tokens: Sequence[int], tasks: Sequence, bests: Mapping[str, Values],
                 alone: Mapping[str, float], make_timer, say=None, measured: bool = True) -> list[LayerOutcome]:
    """The layer check at each token count (`bests`, `alone`: key id -> the named best's values,
    its time), each verdict kept in `store` (`emmy.records.layer`). `make_timer(layer)` gives the
    LayerTimer (`measured`: whether it measures, or is the cost measurer's); `say(line)` is told
    each check's line as it is done."""
    from emmy.records.layer import layer_checks, write_layer_check

    out = []
    for t in tokens:
        layer = layer_of(options, t, tasks)
        tuned = chosen_set(layer, bests)
        clash = layer.clash()
        recalled = None if clash else recall(layer, tuned, layer_checks(store), measured)
        if clash:
            outcome = LayerOutcome(layer, None, clash, problem=True)
        elif tuned == layer.deploy():
            outcome = LayerOutcome(layer, None, "nothing to time: every kernel's tuned answer is its deploy answer")
        elif recalled is not None:
            outcome = LayerOutcome(layer, recalled, recalled=True)
        else:
            try:
                timer = make_timer(layer)
                verdict = check_layer(layer, tuned, timer)
            except Exception as e:  # (out of memory, a CUDA error: the studies' trials are stored already)
                why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
                outcome = LayerOutcome(layer, None, f"timing it failed: {why}", problem=True, failed=True)
            else:
                if not verdict.problem:
                    for record in layer_records(layer, verdict, tuned, alone, timer.environment()):
                        write_layer_check(store, record)
                outcome = LayerOutcome(layer, verdict, verdict.problem, problem=bool(verdict.problem))
        out.append(outcome)
        if say is not None:
            say(layer_line(outcome))
    return out


def recall(layer: Layer, tuned: Assignment, checks: Mapping, measured: bool = True) -> Verdict | None:
    """The verdict the store's checks of this layer hold, where they timed these same tuned values
    (every part's check there, of this Emmy's layer schema, measured or the cost measurer's as
    `measured` says); None otherwise."""
    from emmy.records.layer import LAYER_PREFIX, LAYER_SCHEMA

    found = []
    for part, signature in layer.signatures().items():
        c = checks.get(LAYER_PREFIX + signature)
        names = {k.name for k in layer.parts()[part]}
        if (c is None or c.schema > LAYER_SCHEMA or c.measured != measured or c.target != layer.target
                or c.tokens != layer.tokens
                or {n: dict(v) for n, v in c.chosen.items()} != {n: dict(tuned[n]) for n in names}):
            return None
        found.append(c)
    if not found:
        return None
    c = found[0]
    by_key = {k.key: k.name for k in layer.kernels}
    reverted = {by_key.get(key, r.kernel): r.gain for f in found for key, r in f.reverted.items()}
    return Verdict(LayerTime(c.tuned_s, c.tuned_spread), LayerTime(c.deploy_s, c.deploy_spread),
                   LayerTime(c.final_s, c.final_spread), reverted)


def _where(layer: Layer) -> str:
    return f"{layer.where()} at {layer.tokens} tokens"


def _time(t: LayerTime) -> str:
    return f"{t.time_s * 1e6:.2f} us +- {t.spread * 100:.1f}%" if t.time_s is not None else "not timed"


def layer_line(o: LayerOutcome) -> str:
    """`layer 0 at 512 tokens: tuned 101.20 us +- 1.0%, untuned 103.40 us +- 0.8%: 1.02x`, with
    the kernels whose deploy answer was kept."""
    v = o.verdict
    if o.problem:
        return f"{_where(o.layer)}: not checked: {o.note}"
    if v is None:
        return f"{_where(o.layer)}: {o.note}"
    line = f"{_where(o.layer)}: tuned {_time(v.final)}, untuned {_time(v.deploy)}: {v.speedup:.2f}x"
    if o.recalled:
        line += " (recalled: the same tuned answers were checked before)"
    if v.reverted:
        kept = ", ".join(f"{n} (the layer {g * 100:.0f}% faster with it)" for n, g in v.reverted.items())
        line += f"; the chosen set alone {_time(v.tuned)}; kept the deploy answer of {kept}"
    return line


def layer_rows(outcomes: Sequence[LayerOutcome]) -> list[tuple[str, ...]]:
    """Rows for `emmy.search.tune.HEADER`'s table: the layer (all its kernels), its tokens,
    tuned time (with the reverts) and spread, untuned time, speed-up."""
    rows = []
    for o in outcomes:
        v = o.verdict
        if v is None or v.problem:
            continue
        reverts = f" ({len(v.reverted)} reverted)" if v.reverted else ""
        rows.append((o.layer.where(), f"{o.layer.tokens} tokens",
                     "-", _time(v.final) + reverts, _time(v.deploy), f"{v.speedup:.2f}x"))
    return rows


def pins_of(sets: Assignment) -> tuple[str, ...]:
    """A set as pins (`KERNEL.KNOB=VALUE`), every knob of every kernel it names."""
    return tuple(f"{kernel}.{knob}={value}" for kernel, values in sets.items() for knob, value in values.items())


class GpuLayerTimer:
    """Times sets of a traced layer on the GPU: each set one compile with its answers pinned (made
    once, however many rounds time it), checked against PyTorch first, the sets timed together by
    graph replay (`emmy.measure.layer.LayerRuns`). It compiles and builds first, then holds the
    GPU (`emmy.measure.gpu.gpu_lock`) while it loads, checks and times: no other measuring process
    on this host times on it meanwhile, and they time while this one builds."""

    def __init__(self, traced, target: str, cache_dir, tolerance: float | None = None):
        from emmy.measure.gpu import GpuMeasurer
        from emmy.measure.layer import DEFAULT_TOLERANCE, LayerRuns

        self.cache_dir = cache_dir
        self.runs = LayerRuns(traced, target, cache_dir, DEFAULT_TOLERANCE if tolerance is None else tolerance)
        self._env = GpuMeasurer(cache_dir).environment()

    def environment(self) -> dict[str, str]:
        return dict(self._env)

    def time(self, sets: Mapping[str, Assignment]) -> dict[str, LayerTime]:
        from emmy.measure.gpu import device_id, gpu_lock
        from emmy.measure.layer import EmmyBuild

        builds = {label: EmmyBuild(pins=pins_of(s)) for label, s in sets.items()}
        self.runs.prepare(builds)  # compile and nvcc before taking the GPU: another process times meanwhile
        with gpu_lock(self.cache_dir, device_id()):
            return self.runs.time(builds)


class CostLayerTimer:
    """The cost measurer's layer cost: the sum of its kernels' costs (`emmy.search.cost`), each set
    alike in every round (spread 1%). No GPU; the times mean nothing. The candidates the cost
    measurer fails by construction in a study (one in eleven, to exercise failed trials) are
    costed here like any other: the check needs a cost for every kernel's answer."""

    SPREAD = 0.01
    NEVER_FAILS = 1 << 33  # (over the 32-bit draw the cost measurer fails on: only a zero draw fails)

    def __init__(self, layer: Layer):
        from emmy.search.cost import CostMeasurer

        missing = [k.name for k in layer.kernels if k.task is None]
        if missing:
            raise ValueError(f"no task for {', '.join(missing)}")
        self.layer, self.measurer = layer, CostMeasurer(fail_every=self.NEVER_FAILS)

    def environment(self) -> dict[str, str]:
        return self.measurer.environment()

    def time(self, sets: Mapping[str, Assignment]) -> dict[str, LayerTime]:
        out = {}
        for label, s in sets.items():
            total, problem = 0.0, ""
            for k in self.layer.kernels:
                m = self.measurer.measure(k.task, [s[k.name]])[0]
                if m.time_s is None:
                    problem = f"{k.name}: {m.status} ({m.reason})"
                    break
                total += m.time_s
            out[label] = LayerTime(None, problem=problem) if problem else LayerTime(total, self.SPREAD, 0.0)
        return out


__all__ = [
    "CostLayerTimer", "GpuLayerTimer", "Layer", "LayerKernel", "LayerOutcome", "LayerTimer", "Verdict", "check_layer",
    "check_layers", "chosen_set", "faster", "layer_line", "layer_of", "layer_records", "layer_rows", "pins_of",
    "recall",
]
