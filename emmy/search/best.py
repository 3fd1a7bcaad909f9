"""Naming a study's best: the top few candidates re-measured interleaved, a new best only where it
is faster than the recorded one by more than the spread.

    best = name_best(store, task, measurer)   # after the trials (emmy.search.study); once per new trials
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emmy.measure import Measurement
from emmy.measure.timing import faster
from emmy.records.store import BEST_ATTR, Store
from emmy.search.points import point_key
from emmy.search.study import branch_of, measured, task_fork_knobs, utc_now

# How many of the best candidates are re-measured, interleaved, before a study names its best,
# and how many rounds.
TOP = 3
ROUNDS = 5


@dataclass(frozen=True)
class Best:
    """What a study names after re-measuring: the trial, its values, time and spread; `kept`
    when the recorded best stayed (the new one was not faster by more than the spread);
    `recalled` when it was named over the same trials before and read back, not measured."""

    trial: int
    values: Mapping[str, object]
    time_s: float
    spread: float
    kept: bool
    recalled: bool = False
    default_s: float | None = None  # the default answer's time in the same interleaved rounds (None: not right)
    # The study's fork (`fork_knobs`, e.g. ("fusion",)): branch -> its best trial re-measured in
    # the same rounds: trial, values, time_s, spread (time_s None, with a `note`, where it is not
    # right); None where the space has no fork (or the best was named before forks were kept).
    fork: Mapping[str, Mapping[str, object]] | None = None
    fork_knobs: tuple[str, ...] = ()


def name_best(store: Store, task, measurer, top: int = TOP, rounds: int = ROUNDS) -> Best | None:
    """Re-measure the `top` fastest measured candidates and the recorded best, interleaved; the
    fastest that is still right becomes the study's best, unless a best is recorded and the
    newcomer is not faster than it by more than the larger of their spreads. None where nothing
    measured right. A best named over the same measured trials as the study holds now is
    recalled, not measured again (a re-run over finished studies names only what is missing).
    The task's default (the answer before tuning) is re-measured in the same rounds, so the
    speed-up a run reports compares two times taken alike (`Best.default_s`), never a trial's
    single measurement with a re-measured one.

    A study whose space has a structural fork (`fork_knobs`: `fusion`) also re-measures, in the
    same rounds, the fastest trial of each branch (fused, split) that is not among them, and
    keeps each branch's re-measured best (`Best.fork`): the fused kernel against the split
    kernels, each at its own best schedule, and the best named from those same rounds."""
    study = store.load(task.key_id)
    trials = measured(study)
    old = study.user_attrs.get(BEST_ATTR)
    if old is not None and old.get("measured") == len(trials):
        d = old.get("default_s")
        return Best(int(old["trial"]), dict(old["values"]), float(old["time_s"]), float(old.get("spread") or 0.0),
                    kept=True, recalled=True, default_s=None if d is None else float(d), fork=old.get("fork"),
                    fork_knobs=tuple(old.get("fork_knobs") or ()))
    ok = sorted((t for t in trials if t.value is not None), key=lambda t: t.value)
    chosen, keys = [], set()
    for t in ok:
        if point_key(t.user_attrs["values"]) not in keys:
            keys.add(point_key(t.user_attrs["values"]))
            chosen.append(t)
        if len(chosen) == top:
            break
    knobs = task_fork_knobs(task)
    for t in ok:  # each branch's fastest trial, where the top few have none of its branch
        if knobs and branch_of(t.user_attrs["values"], knobs) not in {branch_of(c.user_attrs["values"], knobs) for c in chosen}:
            keys.add(point_key(t.user_attrs["values"]))
            chosen.append(t)
    candidates = [dict(t.user_attrs["values"]) for t in chosen]
    if old is not None and point_key(old["values"]) not in keys:
        candidates.append(dict(old["values"]))
    if not candidates:
        return None
    numbers = [t.number for t in chosen] + ([int(old["trial"])] if len(candidates) > len(chosen) else [])
    default = dict(task.default) if task.default else None
    extra = default is not None and point_key(default) not in {point_key(c) for c in candidates}
    timing = candidates + ([default] if extra else [])  # the default is timed in the same rounds
    again = measurer.remeasure(task, timing, rounds)
    default_m = dict(zip(map(point_key, timing), again)).get(point_key(default)) if default is not None else None
    default_s = default_m.time_s if default_m is not None and default_m.ok else None
    results = [(n, v, m) for n, v, m in zip(numbers, candidates, again) if m.ok and m.time_s is not None]
    if not results:
        return None
    fork = _fork_times(knobs, trials, zip(numbers, candidates, again)) if knobs else None
    n, values, m = min(results, key=lambda r: r[2].time_s)
    kept = old is not None and point_key(old["values"]) == point_key(values)
    if old is not None:
        prev = next((r for r in results if point_key(r[1]) == point_key(old["values"])), None)
        if prev is not None and prev[0] != n and not faster(m, prev[2]):
            (n, values, m), kept = prev, True
    _write_best(study, n, values, m, measurer.environment(), len(trials), default_s, fork, knobs)
    return Best(n, values, m.time_s, m.spread or 0.0, kept=kept, default_s=default_s, fork=fork, fork_knobs=knobs)


def _fork_times(knobs, trials, remeasured) -> dict[str, dict[str, object]]:
    """Branch -> its fastest re-measured candidate (trial, values, time_s, spread), for each
    branch a measured trial is on; where none of its candidates re-measured right, the first
    one's trial and values with time_s None and the reason in `note`; where none of its trials
    was right, trial None and the note "none right"."""
    fork: dict[str, dict[str, object]] = {}
    for n, values, m in remeasured:
        label, right = branch_of(values, knobs), m.ok and m.time_s is not None
        now = fork.get(label)
        if right and (now is None or now["time_s"] is None or m.time_s < now["time_s"]):
            fork[label] = {"trial": n, "values": dict(values), "time_s": m.time_s, "spread": m.spread or 0.0}
        elif not right and now is None:
            fork[label] = {"trial": n, "values": dict(values), "time_s": None, "spread": None,
                           "note": f"re-measured {m.status}: {m.reason}"}
    for t in trials:
        label = branch_of(t.user_attrs["values"], knobs)
        fork.setdefault(label, {"trial": None, "values": None, "time_s": None, "spread": None, "note": "none right"})
    return dict(sorted(fork.items()))


def _write_best(study, trial: int, values, m: Measurement, env, count: int, default_s: float | None = None,
                fork=None, knobs: Sequence[str] = ()) -> None:
    """The study's best; `measured`: how many measured trials it was chosen from; `default_s`:
    the default answer's time in the same rounds; `fork` and `fork_knobs` (only where the space
    has a fork): each branch's re-measured best (`Best.fork`)."""
    best = {
        "trial": trial, "values": dict(values), "time_s": m.time_s, "spread": m.spread or 0.0,
        "error": m.error, "env": dict(env), "date": utc_now(), "measured": count, "default_s": default_s,
    }
    if fork is not None:
        best.update(fork=fork, fork_knobs=list(knobs))
    study.set_user_attr(BEST_ATTR, best)


__all__ = ["Best", "name_best"]
