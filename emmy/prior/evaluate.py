"""Judging the prior by regret on measurements it was not fitted on.

    rows = evaluate(keys, "sm_90a")      # keys: emmy.prior.data.samples_of(...)[0]; a Row per held-out key
    summary(rows)                        # {"geomean_regret": ..., "worst_regret": ..., "n": ..., "by": {...}}

Two schemes: leave one shape out (each tuning problem in turn is held out, `KeyData.problem`: a
kernel on a shape, with every study of it, those an older pipeline made under another key
included; the prior is fitted on every other problem, the same kernel on other shapes included)
and leave one model out (each model group in turn, `model_groups`: the model a study recorded,
every key of its kernels included, also those of studies that recorded none). Each problem is
judged once, on its newest study (`newest_studies`). For a judged key with at least two measured
candidates, the prior ranks those candidates; the regret is the measured time of its pick over
the best measured time (1.0: it picked the fastest). Two picks are shown: `top`, the prior's
first-ranked among all of them, and `bounded`, what the prior tier would deploy
(`emmy.prior.choose` over the measured candidates in the anchor's neighbourhood, `reachable`:
the rules' answer stands unless the predicted gain beats the margin; its tile first reshaped to
fill the waves where the prior tier does that, `prior_tier_anchor`). Where the rules' answer was not measured (the tuner's first
trial came from a higher tier, golden or nearest records, or the answer's trial failed), a
**proxy anchor** stands in for it: the measured candidate differing from it in the fewest knobs,
those with the anchor's structural knobs (`fusion`: the same program) first (ties: the one
whose values lie nearest the anchor's, `knob_distance`, then the earliest measured), and the
row's pick says so (`anchor~`, `prior~`); it is judged
exactly like a measured anchor, never by the unbounded top pick. `top` remains only where the
rules find no answer at all. The summary's figures are the bounded ones, the worse of the two
schemes. A key whose measured
candidates differ in `fusion` is a fusion fork: its row says which value measured best and
which the prior picked (forks where fusing is the wrong choice are judged like any other).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from emmy.prior.data import KeyData, Sample
from emmy.prior.store import Prior


@dataclass(frozen=True)
class Row:
    scheme: str  # "shape" or "model"
    key: str
    kernel: str
    kind: str
    candidates: int
    best_s: float
    top_s: float
    bounded_s: float
    picked: str  # "prior" or "anchor"; "prior~" / "anchor~" against a proxy anchor; "top" (no anchor)
    fusion: str = ""  # a fusion fork: "best <value>, pick <value>" (whether fusing was right), else ""

    @property
    def top_regret(self) -> float:
        return self.top_s / self.best_s

    @property
    def regret(self) -> float:
        return self.bounded_s / self.best_s


def measured_times(samples: Sequence[Sample]) -> dict[tuple, tuple[dict, float]]:
    """Per distinct candidate (its values), the median of its measured times."""
    groups: dict[tuple, list] = {}
    for s in samples:
        k = values_key(s.values)
        groups.setdefault(k, [dict(s.values), []])[1].append(s.time_s)
    return {k: (v, _median(ts)) for k, (v, ts) in groups.items()}


def values_key(values: Mapping) -> tuple:
    """A candidate's values as a key: the same for equal values in any order."""
    return tuple(sorted((k, repr(v)) for k, v in values.items()))


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def proxy_anchor(anchor: Mapping, measured: Sequence[Mapping]) -> dict:
    """The measured candidate that stands in for an anchor nobody measured: the one differing
    from it in the fewest knobs, among those that run the same program first (the anchor's
    values of the structural knobs, `emmy.tuning.knobs.STRUCTURAL`: a fused kernel does not
    stand in for the rules' split one); ties: the one whose values lie closest to the anchor's
    (`knob_distance`: 8 stages is nearer 4 than 2), then the earliest measured."""
    from emmy.tuning.knobs import STRUCTURAL

    def differing(v: Mapping, knobs) -> int:
        return sum(repr(v.get(k)) != repr(anchor.get(k)) for k in knobs)

    structural = [k for k in STRUCTURAL if k in anchor]
    return dict(min(enumerate(measured), key=lambda iv: (differing(iv[1], structural),
                                                          differing(iv[1], {*anchor, *iv[1]}),
                                                          knob_distance(anchor, iv[1]), iv[0]))[1])


def knob_distance(a: Mapping, b: Mapping) -> float:
    """How far apart two candidates' values lie: per knob, |log2| of the ratio of two positive
    numbers (a tile twice as wide counts 1, four times 2), else 1 where they differ."""
    d = 0.0
    for k in {*a, *b}:
        x, y = a.get(k), b.get(k)
        if _positive(x) and _positive(y):
            d += abs(math.log2(x / y))
        elif repr(x) != repr(y):
            d += 1.0
    return d


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def summarize(regrets: Sequence[float]) -> dict[str, float | int]:
    """Geometric mean and worst of the regrets, and their number."""
    if not regrets:
        return {"geomean_regret": None, "worst_regret": None, "n": 0}  # type: ignore[dict-item]
    geo = math.exp(sum(math.log(r) for r in regrets) / len(regrets))
    return {"geomean_regret": round(geo, 4), "worst_regret": round(max(regrets), 4), "n": len(regrets)}


def judge(kd: KeyData, prior: Prior, scheme: str) -> Row | None:
    """The row of one held-out key (None with fewer than two measured candidates)."""
    from emmy.prior.choose import choose
    from emmy.prior.model import score

    times = measured_times(kd.samples)
    if len(times) < 2:
        return None
    kernel = kd.kernel
    info, target = kernel.info, kernel.target
    best_s = min(t for _, t in times.values())
    scored = [(score(kernel, v, prior), i, k) for i, (k, (v, _)) in enumerate(times.items())]
    scored = [s for s in scored if s[0] is not None]
    if not scored:
        return None
    top = min(scored)[2]
    anchor = prior_tier_anchor(kernel, kd.space, prior)
    if not anchor:  # the rules find no legal answer: nothing bounds the pick
        bounded, picked = top, "top"
    else:
        proxy = values_key(anchor) not in times
        if proxy:
            anchor = proxy_anchor(anchor, [v for v, _ in times.values()])
        choice = choose(info, target, reachable(kd, anchor, [v for v, _ in times.values()]), anchor, prior)
        bounded, picked = values_key(choice.values), choice.picked + ("~" if proxy else "")
    fusion = ""
    values = {k: v for k, (v, _) in times.items()}
    if any("fusion" in v for v in values.values()) and len({str(v.get("fusion")) for v in values.values()}) > 1:
        best = min(times, key=lambda k: times[k][1])
        fusion = f"best {values[best].get('fusion')}, pick {values[bounded].get('fusion')}"
    return Row(scheme, kd.key, kd.samples[0].kernel, kd.kind, len(times), best_s, times[top][1], times[bounded][1],
               picked, fusion)


def reachable(kd: KeyData, anchor: Mapping, measured: Sequence[Mapping]) -> list[dict]:
    """The measured candidates the prior tier could deploy from `anchor`: those in its legal
    neighbourhood (`emmy.prior.choose.neighbourhood`: one knob changed, or two of the main
    ones, never to a value the fit has no term for), the anchor itself left to `choose`."""
    from emmy.prior.choose import neighbourhood

    near = {values_key(c) for c in neighbourhood(kd.kernel.info, kd.kernel.target, kd.space, anchor)}
    return [dict(v) for v in measured if values_key(v) in near]


def prior_tier_anchor(kernel, space: Mapping[str, Sequence], prior: Prior) -> dict | None:
    """The anchor the prior tier bounds its pick by (`emmy.evidence.prior.PriorDecider`): the
    rules' answer, its tile reshaped where it leaves the last wave part empty when the prior is
    fitted (`emmy.prior.waves.fill_waves`); None where the rules find no answer."""
    from emmy.prior.choose import rules_anchor

    anchor = rules_anchor(kernel.info, kernel.target, space)
    return (reshaped_anchor(kernel, space, prior, anchor) or anchor) if anchor else anchor


def reshaped_anchor(kernel, space: Mapping[str, Sequence], prior: Prior, rules: Mapping) -> dict | None:
    """The rules' answer `rules` with its tile reshaped to fill the waves by a fitted `prior`
    (`emmy.prior.waves.fill_waves`), the anchor the prior tier bounds by there; None where the
    tile stays or the prior is not fitted."""
    from emmy.prior.waves import fill_waves

    filled = fill_waves(kernel.info, kernel.target, space, rules, prior.coeffs) if prior.fitted else None
    return filled[0] if filled is not None else None


def evaluate(keys: Mapping[str, KeyData], target: str, fitter: Callable[[list[Sample]], Prior] | None = None,
             schemes: Sequence[str] = ("shape", "model")) -> list[Row]:
    """Rows of every held-out problem under each scheme (module docstring); `fitter` fits a Prior to
    training samples (default: emmy.prior.fit.fit, the defaults when too few)."""
    if fitter is None:
        fitter = _default_fitter(target)
    judged = set(newest_studies(keys))
    rows: list[Row] = []
    for scheme in schemes:
        models = model_groups(keys)
        group_of = (lambda kd: repr(kd.problem)) if scheme == "shape" else (lambda kd: models[kd.key])
        groups: dict[str, list[KeyData]] = {}
        for kd in keys.values():
            groups.setdefault(group_of(kd), []).append(kd)
        for g in sorted(groups):
            train = [s for kd in keys.values() if group_of(kd) != g for s in kd.samples]
            prior = fitter(train)
            for kd in groups[g]:
                row = judge(kd, prior, scheme) if kd.key in judged else None
                if row is not None:
                    rows.append(row)
    return rows


def newest_studies(keys: Mapping[str, KeyData]) -> list[str]:
    """Per tuning problem (`KeyData.problem`: a kernel on a shape), the key of its newest study (the latest
    measured trial; ties: the key). An older study of the same problem measured the kernels of an
    older pipeline: it is held out with the newest and stays in the fits of the other problems, but
    is not judged again (one row per problem; its anchor, the rules' answer of today, was measured,
    if anywhere, in the newest study)."""
    newest: dict[tuple, KeyData] = {}
    for kd in keys.values():
        have = newest.get(kd.problem)
        if have is None or (kd.date, kd.key) > (have.date, have.key):
            newest[kd.problem] = kd
    return sorted(kd.key for kd in newest.values())


def model_groups(keys: Mapping[str, KeyData]) -> dict[str, str]:
    """Key id -> the group "leave one model out" holds out with it. Keys whose samples name the
    same model (`Sample.model`) are one group. A study that recorded no model names its structure
    instead (`emmy.prior.data`), and a structure one study left unrecorded may be a kernel other
    studies recorded a model for (the same kernel tuned before the tuner recorded models): every
    key of that structure joins one group, the unrecorded and the recorded (transitively), so
    holding the model out holds out all its kernels' keys; held apart, the fit would see the
    held-out model's kernels on its other shapes. Two models share a group only through such an
    unrecorded study. A group is named by its models (joined by " + "), else by its structure."""
    parent: dict[tuple, tuple] = {}

    def find(x: tuple) -> tuple:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: tuple, b: tuple) -> None:
        parent[find(a)] = find(b)

    unrecorded = {s.structure for kd in keys.values() for s in kd.samples if s.model == s.structure}
    for kd in keys.values():
        find(("key", kd.key))
        union(("key", kd.key), ("problem", kd.problem))  # a problem's studies of every pipeline version go together
        for s in kd.samples:
            union(("key", kd.key), ("model", s.model))
            if s.structure in unrecorded:
                union(("key", kd.key), ("structure", s.structure))
    names: dict = {}
    for node in parent:
        if node[0] == "model":
            names.setdefault(find(node), []).append(node[1])
    out = {}
    for k in keys:
        labels = sorted(names.get(find(("key", k)), [k]))
        models = [x for x in labels if x not in unrecorded]
        out[k] = " + ".join(models) if models else labels[0]
    return out


def _default_fitter(target: str) -> Callable[[list[Sample]], Prior]:
    from emmy.prior.fit import MIN_SAMPLES, fit

    def fitter(train: list[Sample]) -> Prior:
        return fit(train, target) if len(train) >= MIN_SAMPLES else Prior(target)

    return fitter


def summary(rows: Sequence[Row]) -> dict:
    """The JSON summary: the bounded picks' figures (the worse scheme's), and per scheme."""
    per = {}
    for scheme in sorted({r.scheme for r in rows}):
        mine = [r for r in rows if r.scheme == scheme]
        per[scheme] = {**summarize([r.regret for r in mine]),
                       "top_geomean_regret": summarize([r.top_regret for r in mine])["geomean_regret"]}
    geo = max((p["geomean_regret"] for p in per.values() if p["geomean_regret"] is not None), default=None)
    worst = max((p["worst_regret"] for p in per.values() if p["worst_regret"] is not None), default=None)
    n = max((p["n"] for p in per.values()), default=0)
    return {"geomean_regret": geo, "worst_regret": worst, "n": n, "by": per}


__all__ = ["Row", "evaluate", "judge", "knob_distance", "prior_tier_anchor", "reachable", "reshaped_anchor", "measured_times", "model_groups", "newest_studies", "proxy_anchor", "summarize", "summary", "values_key"]
