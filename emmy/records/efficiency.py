"""Sample efficiency of a study: how many measured trials it took to come within a few percent of
the fastest one it found.

    to_within([12.0, None, 10.3, 9.9, 10.0], 0.05)   # -> 3: trial 3 (10.3) is within 5% of 9.9
    efficiency_rows(store, within=0.05)                # one row per study, for `emmy records efficiency`

Times are the trials' own measurements, in the order they were measured (failed trials count: a
tuner spent them too). The reference is the study's fastest trial: against a long search (hundreds
of trials) this says how soon a short one gets there; against a short study it is only a lower
bound, and the report says how many trials each study had.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Efficiency:
    key: str
    kernel: str
    trials: int  # measured trials (failed ones included)
    best_s: float | None  # the fastest trial's time
    needed: int | None  # trials up to the first within the margin of best_s (None: nothing right)


def to_within(times: Sequence[float | None], within: float) -> int | None:
    """How many trials (1-based, in measuring order) until one is within `within` (a fraction) of
    the fastest; None when no trial measured right."""
    ok = [t for t in times if t is not None]
    if not ok:
        return None
    bar = min(ok) * (1.0 + within)
    return next(i for i, t in enumerate(times, 1) if t is not None and t <= bar)


def study_efficiency(key: str, kernel: str, times: Sequence[float | None], within: float) -> Efficiency:
    ok = [t for t in times if t is not None]
    return Efficiency(key, kernel, len(times), min(ok) if ok else None, to_within(times, within))


def efficiency_rows(store, within: float) -> list[Efficiency]:
    """One `Efficiency` per study of the store, in the store's order."""
    from emmy.search.study import measured

    out = []
    for name in store.study_names():
        study = store.load(name)
        trials = sorted(measured(study), key=lambda t: t.number)
        times = [t.value if t.user_attrs.get("status") == "ok" else None for t in trials]
        out.append(study_efficiency(name, str(study.user_attrs.get("emmy.kernel", "")), times, within))
    return out


def median_needed(rows: Sequence[Efficiency]) -> float | None:
    needed = [r.needed for r in rows if r.needed is not None]
    return statistics.median(needed) if needed else None


__all__ = ["Efficiency", "efficiency_rows", "median_needed", "study_efficiency", "to_within"]
