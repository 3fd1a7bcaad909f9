"""The one way Emmy times GPU work (the tuner and tools/bench.py alike).

    run = replayable(fn)                       # warmed up, captured in a CUDA graph: run() replays it
    warm_up({"a": run_a, "b": run_b})         # replays for 0.2 s: the card's clock up first
    samples = sample_replays({"a": run_a, "b": run_b}, reps=50, inner=10)   # seconds per call
    median, spread = summarize(samples["a"])   # spread: (p90 - p10) / median
    time_replays({"a": run_a}) == {"a": median of a's samples}
    copies = rotation_count(working_set, l2_bytes())   # input sets to rotate through
    kernel_times(run, calls=copies)            # {kernel: device us per call} (torch.profiler)

Each repetition records CUDA events around `inner` replays of every function in turn, the order
rotating from one repetition to the next, so that a card slowing as it warms (clocks under its
power limit) slows every contender alike. A small kernel timed on the same inputs again and
again finds them in L2 and looks faster than it runs in a model: the measurer rotates through
enough copies of its inputs and outputs (`rotation_count`) that each call's data has left L2
since its last use.

Where the events time a call from its first launch to its last kernel's end (gaps between
launches included), `kernel_times` adds up what the device spent inside each kernel (CUPTI's
start and end of every kernel, through torch.profiler): the figure a profile shows, launch
gaps left out.

The pure helpers (summarize, percentile, rotation_count, per_call_times) need no GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

DEFAULT_L2_BYTES = 50 * 1024 * 1024  # H100 / H200
MAX_COPIES = 64


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of the values, linearly interpolated."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> tuple[float, float]:
    """(median, relative spread (p90 - p10) / median) of timing samples."""
    median = statistics.median(samples)
    spread = (percentile(samples, 90) - percentile(samples, 10)) / median if median > 0 else 0.0
    return median, spread


def faster(a, b) -> bool:
    """Whether timing `a` is faster than timing `b` by more than the larger of their spreads
    (anything with `time_s` and `spread`; a time of None is never faster): the rule by which a
    newly measured answer replaces the one kept, for a study's best and a layer's revert alike."""
    if a.time_s is None or b.time_s is None:
        return False
    return a.time_s < b.time_s * (1.0 - max(a.spread or 0.0, b.spread or 0.0))


def rotation_count(working_set: int, l2: int = DEFAULT_L2_BYTES, cap: int = MAX_COPIES) -> int:
    """How many copies of a call's inputs and outputs (`working_set` bytes) to rotate through so
    that together they are at least twice the L2 cache: 1 for a large kernel, up to `cap`."""
    if working_set <= 0:
        return cap
    return max(1, min(cap, math.ceil(2 * l2 / working_set)))


def l2_bytes() -> int:
    """The current CUDA device's L2 cache size."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def replayable(fn: Callable[[], object], graph: bool = True) -> Callable[[], object]:
    """`fn` warmed up and, with graph=True, captured in a CUDA graph: returns what replays it."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if not graph:
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    return Captured(g, fn)


class Captured:
    """A captured CUDA graph's replay, holding the function it captured as well as the graph: the
    tensors the function closes over (inputs, outputs, temporaries) live as long as the replay, so
    their memory is never handed to another allocation, or given back to the driver, while the
    graph can still read and write it. (Holding the graph alone let a caller's inputs be freed: a
    later compile emptying PyTorch's cache unmapped them, and the replay hit an illegal address.)"""

    __slots__ = ("graph", "fn")

    def __init__(self, graph, fn: Callable[[], object]):
        self.graph, self.fn = graph, fn

    def __call__(self) -> None:
        self.graph.replay()


def warm_up(runs: Mapping[str, Callable[[], object]], seconds: float = 0.2) -> None:
    """Replay every function in turn for `seconds` of wall time before any is timed: an idle card
    starts at a low clock and takes a while to raise it (on the H200, samples taken straight away
    spread by 40-150% where warmed ones spread by about 1%)."""
    import time

    import torch

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for run in runs.values():
            for _ in range(10):
                run()
        torch.cuda.synchronize()


def sample_replays(runs: Mapping[str, Callable[[], object]], reps: int = 50, inner: int = 10,
                   calls: Mapping[str, int] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each warmed-up function (see replayable), one sample per repetition,
    timed round-robin with the order rotating. `calls[key]`: how many calls one run of `key`
    makes (a graph replaying the kernel on several input copies), to divide by."""
    import torch

    keys = list(runs)
    times: dict[str, list[float]] = {key: [] for key in keys}
    for rep in range(reps):
        for j in range(len(keys)):
            key = keys[(rep + j) % len(keys)]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                runs[key]()
            end.record()
            end.synchronize()
            per = inner * (calls or {}).get(key, 1)
            times[key].append(start.elapsed_time(end) / 1e3 / per)
    return times


def time_replays(runs: Mapping[str, Callable[[], object]], reps: int = 50, inner: int = 10) -> dict[str, float]:
    """Median seconds per call of each warmed-up function, timed round-robin (sample_replays)."""
    return {key: statistics.median(ts) for key, ts in sample_replays(runs, reps, inner).items()}


def time_fn(fn: Callable[[], object], graph: bool = True, reps: int = 50, inner: int = 10) -> float:
    """Median seconds per call; with graph=True the call is captured once and replayed."""
    return time_replays({"fn": replayable(fn, graph)}, reps=reps, inner=inner)["fn"]


LAUNCH_EVENTS = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "Memcpy", "Memset")


def per_call_times(totals: Sequence[tuple[str, float]], replays: int, calls: int = 1) -> dict[str, float]:
    """Device microseconds per call of each kernel, longest first, from (name, total device us
    over `replays` replays of `calls` calls each) pairs; launch and copy events are left out."""
    out: dict[str, float] = {}
    for name, total in totals:
        if total > 0 and not name.startswith(LAUNCH_EVENTS):
            out[name] = out.get(name, 0.0) + total / (replays * calls)
    return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def kernel_times(replay: Callable[[], object], reps: int = 20, calls: int = 1) -> dict[str, float]:
    """Mean device microseconds per call of every kernel a replay launches (torch.profiler,
    CUPTI). `replay`: a captured graph's replay (replayable), so the kernels run back to back as
    when timed, not paced by the host's launches; `calls`: how many calls one replay makes (a
    graph over several input copies), to divide by."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            replay()
        torch.cuda.synchronize()
    totals = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        totals.append((e.key, t if t is not None else getattr(e, "cuda_time_total", 0.0)))
    return per_call_times(totals, reps, calls)


__all__ = [
    "Captured", "DEFAULT_L2_BYTES", "LAUNCH_EVENTS", "MAX_COPIES", "kernel_times", "l2_bytes", "per_call_times",
    "percentile", "replayable", "rotation_count", "sample_replays", "summarize", "time_fn", "time_replays", "warm_up",
]
