"""Sample efficiency of a study: how many measured trials it took to come within a few percent of
the best it found.

    to_within([12.0, None, 10.3, 9.9, 10.0], 0.05)            # -> 3: 10.3 is within 5% of 9.9
    to_within([12.0, None, 10.3, 9.9, 10.0], 0.05, 11.5)      # -> 1: 12.0 is within 5% of a named 11.5
    efficiency_rows(store, within=0.05)                         # one row per study, for `emmy records efficiency`

Times are the trials' own measurements, in the order they were measured (failed trials count: a
tuner spent them too). Each study is judged against two references: its named best (the time
`emmy tune` re-measured, interleaved with the runners-up, when it named the winner) and its
fastest single trial. Over hundreds of trials the fastest single measurement is flattered by
noise (the least of many samples sits below the kernel's typical time), so the named best is
the fairer bar where a study has one; both are reported.

A study is *long* when it has at least `LONG_TRIALS` measured trials or has measured its whole
legal space (`SPACE_ATTR`, written by each tuning run; for a study no run has touched since, the
size is counted again from the kernel module the study keeps): against a long search this says how soon
a short one gets there; against a short study it is only a lower bound.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LONG_TRIALS = 200


@dataclass(frozen=True)
class Efficiency:
    key: str
    kernel: str
    trials: int  # measured trials (failed ones included)
    fastest_s: float | None  # the fastest trial's time
    needed_fastest: int | None  # trials up to the first within the margin of fastest_s (None: nothing right)
    named_s: float | None = None  # the named best's re-measured time, where the study has one
    needed_named: int | None = None  # trials up to the first within the margin of named_s
    space: int | None = None  # legal points in the study's space, where known

    @property
    def needed(self) -> int | None:
        """Trials to the margin of the named best where there is one, else of the fastest trial."""
        return self.needed_named if self.named_s is not None else self.needed_fastest

    @property
    def long(self) -> bool:
        return self.trials >= LONG_TRIALS or (self.space is not None and self.trials >= self.space)


def to_within(times: Sequence[float | None], within: float, reference: float | None = None) -> int | None:
    """How many trials (1-based, in measuring order) until one is within `within` (a fraction) of
    `reference` (default: the fastest of `times`); None when no trial measured right or none
    gets there."""
    ok = [t for t in times if t is not None]
    if not ok:
        return None
    bar = (min(ok) if reference is None else reference) * (1.0 + within)
    return next((i for i, t in enumerate(times, 1) if t is not None and t <= bar), None)


def study_efficiency(key: str, kernel: str, times: Sequence[float | None], within: float,
                     named_s: float | None = None, space: int | None = None) -> Efficiency:
    ok = [t for t in times if t is not None]
    return Efficiency(key, kernel, len(times), min(ok) if ok else None, to_within(times, within),
                      named_s, to_within(times, within, named_s) if named_s is not None else None, space)


def named_time(attrs: Mapping[str, object]) -> float | None:
    """The named best's re-measured time in a study's user attributes, or None."""
    from emmy.records.store import BEST_ATTR

    best = attrs.get(BEST_ATTR)
    t = best.get("time_s") if isinstance(best, Mapping) else None
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


def space_size(attrs: Mapping[str, object]) -> int | None:
    """The number of legal points of a study's space, counted from the kernel module and the target
    its attributes keep; None where they are missing or the module no longer builds."""
    from emmy.analysis.classify import classify
    from emmy.context import make_context
    from emmy.dialects.tile import KernelOp
    from emmy.ir_io import parse_module
    from emmy.records.store import KEY_ATTR, MODULE_ATTR
    from emmy.schedule.space import legal_points
    from emmy.targets import get_target
    from emmy.tuning.knobs import knob_space_for

    module, key = attrs.get(MODULE_ATTR), attrs.get(KEY_ATTR)
    if not isinstance(module, str) or not isinstance(key, Mapping):
        return None
    try:
        target = get_target(str(key.get("target")))
        op = next(op for op in parse_module(make_context(), module, "<study>").walk() if isinstance(op, KernelOp))
        info = classify(op)
        return len(legal_points(info, knob_space_for(info, target), target))
    except Exception:  # a module of an older Emmy, an unknown target: the size is unknown, not an error
        return None


def efficiency_rows(store, within: float) -> list[Efficiency]:
    """One `Efficiency` per study of the store, in the store's order."""
    from emmy.records.store import KERNEL_ATTR, SPACE_ATTR
    from emmy.search.study import measured

    out = []
    for name in store.study_names():
        study = store.load(name)
        attrs = study.user_attrs
        trials = sorted(measured(study), key=lambda t: t.number)
        times = [t.value if t.user_attrs.get("status") == "ok" else None for t in trials]
        space = attrs.get(SPACE_ATTR)
        if not isinstance(space, int) and len(times) < LONG_TRIALS:
            space = space_size(attrs)
        out.append(study_efficiency(name, str(attrs.get(KERNEL_ATTR, "")), times, within, named_time(attrs),
                                    space if isinstance(space, int) else None))
    return out


def median_needed(rows: Sequence[Efficiency]) -> float | None:
    needed = [r.needed for r in rows if r.needed is not None]
    return statistics.median(needed) if needed else None


__all__ = ["Efficiency", "LONG_TRIALS", "efficiency_rows", "median_needed", "named_time", "space_size",
           "study_efficiency", "to_within"]
