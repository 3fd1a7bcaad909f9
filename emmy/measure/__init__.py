"""Measuring one candidate schedule of one kernel on the GPU (the tuner's and the benchmark's one
way of measuring).

    measurer = GpuMeasurer(target="sm_90a", cache_dir=Path("~/.emmy"))
    measurer.environment()                      # {"card": "NVIDIA H200", "driver": ..., ...}
    results = measurer.measure(task, [{"block_m": 128, "block_n": 256}, ...])
    results[0].status, results[0].time_s        # "ok", 3.1e-05
    again = measurer.remeasure(task, top3, rounds=5)   # interleaved A B C A B C ...

A candidate goes: the kernel isolated into a function of its own (`isolate.py`), its knobs pinned,
the pipeline from decide-forks on, CUDA, nvcc (`builds.py`: a process pool ahead of the GPU, a
timeout, ptxas's spill report), fresh random inputs of the kernel's shapes with outputs and
temporaries filled with NaN, a comparison with a schedule-independent reference (`reference.py`),
and the timing (`timing.py`: CUDA events under CUDA-graph replay, warm-up, median of repeats, L2
cleared between replays). A candidate that cannot be built, launched or trusted is a `Measurement` with its status
and reason, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from emmy.dialects.tile import KnobValue

STATUSES = ("ok", "wrong", "build_failed", "build_timeout", "launch_error", "spills", "timeout")


@dataclass(frozen=True)
class Measurement:
    """What measuring one candidate found.

    status: "ok" | "wrong" | "build_failed" | "build_timeout" | "launch_error" | "spills" | "timeout"
      ("timeout": its measurement passed its deadline, `emmy.measure.child`)
    time_s: median seconds per call (status "ok" only)
    spread: relative spread of the repeats, (p90 - p10) / median
    error: max relative error against the reference (when the kernel ran)
    reason: why it failed, or "" when ok
    facts: what the plan predicted and the build reported (smem, threads, registers, spill bytes, ...)
    """

    status: str
    time_s: float | None = None
    spread: float | None = None
    error: float | None = None
    reason: str = ""
    facts: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown measurement status '{self.status}'; valid: {', '.join(STATUSES)}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Measurer(Protocol):
    """Measures candidates of one tuning task (`emmy.search.task.TuneTask`: kernel name, key,
    target and the isolated tile-stage module text with undecided knobs)."""

    def environment(self) -> dict[str, str]:
        """card, driver, cuda, torch, emmy versions and a hash of Emmy's source."""
        ...

    def measure(self, task, candidates: Sequence[Mapping[str, KnobValue]]) -> list[Measurement]:
        """One Measurement per candidate, in order: builds in parallel ahead of the GPU, then
        times them one by one. A measurer may stop short after a candidate that timed out
        (`emmy.measure.child`): the candidates past the list's end were not measured."""
        ...

    def remeasure(self, task, candidates: Sequence[Mapping[str, KnobValue]], rounds: int) -> list[Measurement]:
        """Times the candidates interleaved (A B C A B C ... `rounds` times); one Measurement
        per candidate from all its rounds."""
        ...


__all__ = ["STATUSES", "Measurement", "Measurer"]
