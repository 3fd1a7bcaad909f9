"""Judging the nearest tier offline: its answer at each recorded shape as if that shape had no
record, measured against that shape's own trials (docs page 6, "Judging the nearest tier").

    rows = judge_nearest(data, keys, "sm_90a", prior)   # data: emmy.prior.data.records_data(...)
    summary(rows)    # {"geomean_regret": ..., "worst_regret": ..., "n": ..., "coverage": ...}

For each study of the records at shape S with at least `MIN_MEASURED` distinct measured
candidates (enough that S's best means something) and a neighbour (a study of the same kernel
structure on another shape; without one the nearest tier has nothing to say and the prior
answers, which `emmy prior evaluate` judges), the deploy hierarchy below `golden` is run on S's
kernel with the records' other studies as the only evidence, with the same `Evidence` and
deciders a compile uses: the nearest tier (the neighbours' named bests, `export_knowns`, within
the radius and vetted by `prior`), then the prior and the rules where it has no answer. The
regret is the measured time at S of the assignment that answered over the best measured time
at S (each distinct assignment's median). An answer S never measured cannot be judged: the row
says so, and `coverage` is the share of rows judged. The prior is the shipped one unless
another is given; it may have been fitted on S's own trials, so its ranking is not held out
here (`emmy prior evaluate` judges the prior held out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A study needs this many distinct measured candidates to be judged (its best must mean something).
MIN_MEASURED = 8


@dataclass(frozen=True)
class Row:
    key: str
    kernel: str
    shape: str  # the axes part of the key's shape
    tier: str  # the tier that answered most knobs: nearest, prior or rule
    borrowed: str  # the source of a nearest answer (the neighbour's study, alternative), else ""
    candidates: int  # distinct measured candidates at this shape
    best_s: float
    answer_s: float | None  # the answer's measured time here (None: never measured here)

    @property
    def regret(self) -> float | None:
        return None if self.answer_s is None else self.answer_s / self.best_s


def judge_nearest(data: Sequence[tuple[str, Mapping]], keys: Mapping, target: str, prior) -> list[Row]:
    """A row per study of `keys` (key id -> `emmy.prior.data.KeyData`) with enough measured
    candidates; `data`: the (source, export) pairs they came from; `prior`: a fitted
    `emmy.prior.store.Prior`, or None (then no ranking, no vet, the rules below)."""
    from emmy.evidence.gather import Evidence, export_key, export_knowns
    from emmy.evidence.prior import PriorDecider, nearest_decider
    from emmy.prior.evaluate import measured_times, values_key
    from emmy.records.store import KEY_ATTR
    from emmy.tuning.deciders import Problem, RuleDecider, decide_kernel

    knowns = [k for source, export in data for k in export_knowns(export, source, target)]
    fields = {s["name"]: s["attrs"].get(KEY_ATTR) for _, export in data for s in export["studies"]}
    rows = []
    for kd in sorted(keys.values(), key=lambda kd: (kd.samples[0].kernel, kd.key)):
        times = measured_times(kd.samples)
        if len(times) < MIN_MEASURED or not isinstance(fields.get(kd.key), Mapping):
            continue
        key = export_key(fields[kd.key])
        kernel = kd.samples[0].kernel or kd.key
        others = [k for k in knowns if k.key_id != kd.key and k.shape != key.shape]
        if not any(k.structure == key.structure and k.version == key.version for k in others):
            continue  # no neighbour at all: the nearest tier has nothing to say (the prior's to judge)
        ev = Evidence.collect({kernel: key}, target, others, [])
        decider = PriorDecider(prior) if prior is not None else None
        deciders = [nearest_decider(ev.nearest, decider)]
        if decider is not None:
            deciders.append(decider)
        deciders.append(RuleDecider())
        problem = Problem(kernel, kd.kernel.info, kd.kernel.target, kd.space, {})
        answers = decide_kernel(problem, deciders)
        tiers = [a.tier for a in answers.values()]
        tier = max(sorted(set(tiers)), key=tiers.count)
        used = deciders[0].used.get(kernel) if tier == "nearest" else None
        borrowed = ""
        if used is not None:
            borrowed = f"{str(used.source.get('shape', '')).split(';')[0]}"
            if "alternative" in used.source:
                borrowed += f" (alternative {used.source['alternative']})"
        values = {k: a.value for k, a in answers.items()}
        hit = times.get(values_key(values))
        rows.append(Row(kd.key, kernel, key.shape.split(";")[0], tier, borrowed, len(times),
                        min(t for _, t in times.values()), hit[1] if hit else None))
    return rows


def summary(rows: Sequence[Row]) -> dict:
    """Geometric mean and worst regret of the judged rows, their number, and the share judged."""
    from emmy.prior.evaluate import summarize

    regrets = [r.regret for r in rows if r.regret is not None]
    coverage = round(len(regrets) / len(rows), 4) if rows else None
    return {**summarize(regrets), "coverage": coverage}


__all__ = ["MIN_MEASURED", "Row", "judge_nearest", "summary"]
