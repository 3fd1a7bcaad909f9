"""The prior's choice for one kernel, bounded by an anchor.

    choice = prior_decision(info, target, space, prior, fixed={})   # what decide-forks calls
    choice.values, choice.predicted_s, choice.runner_up, choice.picked, choice.reason

    choice = choose(info, target, candidates, anchor, prior)        # among given candidates

The anchor is the hand-written rules' answer (`emmy.tuning.rules.decide`): what Emmy knows about
schedules stays as the structure of the search (the rules' order and preferences give the
anchor) and as terms of the model (`emmy.prior.features`), not as the last word.

**The bound.** The prior ranks the candidates by predicted time, each slowed by its envelope
penalty (`Prior.penalty`: a candidate further outside the data the fit saw than the anchor is
must predict that much faster). Its best candidate replaces the anchor only when

    predicted(best) * penalty(best) * margin(best) <= predicted(anchor)

where `best` is the candidate with the least predicted(c) * penalty(c) * margin(c), and
`margin(c) = Prior.margin(kind, across) * exp(ENVELOPE_PENALTY * d(anchor))`: `Prior.margin` is
calibrated on keys held out of the fit (`emmy.prior.fit.held_out`: the factor by which the
top-ranked candidate measured slower, against another candidate of its key, than predicted; the
margin covers a high quantile of it), apart for candidates on other arithmetic units than the
anchor (`across`: another `workers` value, where the model errs more), else exp(Z * spread) from
the in-sample residuals (about 2x for the unfitted defaults); grown by how far the anchor itself
lies outside the fitted data (a shape never measured asks a larger gain), and `penalty(c)`
counting only the distance past the anchor's. So: the pick is never predicted slower than the
anchor (by construction); when the model's ranking error between the pick and the anchor is a
factor E (measured over predicted, the pick's against the anchor's), the pick measures at most
E / margin times the anchor's time:
no slower than the anchor whenever E stays within the margin (as it did for that quantile of the
held-out pairs), at most `worst / margin` slower for the worst held-out error, and faster
whenever the predicted gain holds. A candidate outside the fitted data must show a larger gain
still. Coefficients that rank badly have large held-out errors, so a large margin, and the
anchor stands (a prior that predicts nothing finite stands down too). The anchor is scored
without a penalty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
import math
from typing import TYPE_CHECKING

from emmy.prior.model import score
from emmy.prior.store import ENGINE_KNOB, ENVELOPE_PENALTY, across_engines

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo
    from emmy.prior.store import Prior
    from emmy.targets import Target
    from emmy.tuning.knobs import KnobValue

# Knobs varied two at a time around the anchor (every knob is varied alone).
PAIRED = ("workers", "block_m", "block_n", "block_k", "split_k", "stages", "warps", "schedule",
          "block_q", "block_kv", "threads", "rows_per_block", "items", "vector", "fusion")


@dataclass(frozen=True)
class PriorChoice:
    values: dict  # the chosen knob values
    predicted_s: float | None  # the prior's time for them (None: it predicted nothing)
    anchor: dict  # the rules' answer
    anchor_s: float | None
    runner_up: tuple[dict, float] | None  # the best other candidate and its (penalized) time
    picked: str  # "prior" or "anchor"
    margin: float
    candidates: int  # how many candidates were ranked
    reason: str


def choose(info: KernelInfo, target: Target, candidates: Iterable[Mapping[str, KnobValue]],
           anchor: Mapping[str, KnobValue], prior: Prior) -> PriorChoice:
    """The prior's pick among `candidates` (legal full assignments; the anchor is added), bounded
    by `anchor` (module docstring)."""
    from emmy.prior.features import Kernel

    kernel = Kernel(info, target)
    anchor = dict(anchor)
    anchor_s = score(kernel, anchor, prior, penalized=False)
    base = _distance(kernel, anchor, prior)
    # a kernel whose anchor lies outside the fitted data (a shape never measured) asks more
    grow = math.exp(ENVELOPE_PENALTY * base)

    def margin_of(values: Mapping[str, KnobValue]) -> float:
        return prior.margin(info.kind, across_engines(values, anchor)) * grow

    ranked: list[tuple[float, int, dict]] = []
    seen = set()
    for i, values in enumerate([anchor, *candidates]):
        key = tuple(sorted((k, repr(v)) for k, v in values.items()))
        if key in seen:
            continue
        seen.add(key)
        t = anchor_s if i == 0 else score(kernel, values, prior, base=base)
        if t is not None:
            ranked.append((t, i, dict(values)))
    ranked.sort(key=lambda r: (r[0], r[1]))
    if anchor_s is None or not ranked:
        return PriorChoice(anchor, None, anchor, None, None, "anchor", grow * prior.margin(info.kind), len(ranked),
                           "the prior predicts no time for the rules' answer: the rules' answer stands")
    # each candidate shows its own margin; the pick is the one whose time with it is least
    bounded = [(t * margin_of(v), t, i, v) for t, i, v in ranked if v != anchor]
    if not bounded:
        return PriorChoice(anchor, anchor_s, anchor, anchor_s, None, "anchor", grow * prior.margin(info.kind),
                           len(ranked), "the rules' answer ranks first")
    gate, best_s, _, best = min(bounded, key=lambda b: (b[0], b[2]))
    margin = margin_of(best)
    engines = f", on other units than the rules' ({best.get(ENGINE_KNOB)})" if across_engines(best, anchor) else ""
    if gate <= anchor_s:
        runner = next(((v, t) for t, _, v in ranked if v != best), None)
        return PriorChoice(best, best_s, anchor, anchor_s, runner, "prior", margin, len(ranked),
                           f"predicted {best_s * 1e6:.2f} us against the rules' {anchor_s * 1e6:.2f} us "
                           f"(a gain over the margin x{margin:.2f}{engines})")
    runner = (best, best_s)
    why = ("the rules' answer ranks first" if ranked[0][2] == anchor else
           f"the best other candidate predicts {best_s * 1e6:.2f} us against the rules' "
           f"{anchor_s * 1e6:.2f} us (a gain under the margin x{margin:.2f}{engines})")
    return PriorChoice(anchor, anchor_s, anchor, anchor_s, runner, "anchor", margin, len(ranked), why)


def _distance(kernel, values: Mapping[str, KnobValue], prior: Prior) -> float:
    """How far outside the fitted data the candidate lies (0 where it cannot be planned)."""
    from emmy.diagnostics import EmmyError

    try:
        return prior.distance(kernel.info.kind, kernel.features(values), values)
    except EmmyError:
        return 0.0


def neighbourhood(info: KernelInfo, target: Target, space: Mapping[str, Sequence[KnobValue]],
                  anchor: Mapping[str, KnobValue], fixed: Mapping[str, KnobValue] | None = None) -> list[dict]:
    """Legal candidates around `anchor`: every other value of one knob, and of two of the
    `PAIRED` knobs at once; `fixed` knobs (pins) never change, and no candidate moves to a tile
    height the fit has not seen (`emmy.prior.waves.UNFITTED_BLOCK_M`) or to a value its model has
    no term for (`UNFITTED_VALUES`), unless the anchor has it."""
    from emmy.prior.waves import UNFITTED_BLOCK_M, UNFITTED_VALUES
    from emmy.tuning.knobs import IN_CONTEXT
    from emmy.tuning.legality import check

    fixed = dict(fixed or {})
    free = [k for k in space if k not in fixed and k in anchor]
    # values whose cost lies partly in another kernel are not the prior's to rank (IN_CONTEXT),
    # nor tile heights its fit has never seen (UNFITTED_BLOCK_M) unless the anchor has them
    space = {k: [v for v in vs if (k, v) not in IN_CONTEXT
                 and not (k == "block_m" and v in UNFITTED_BLOCK_M and v != anchor.get(k))
                 and not ((k, v) in UNFITTED_VALUES and v != anchor.get(k))]
             for k, vs in space.items()}
    out: list[dict] = []
    for k in free:
        for v in space[k]:
            if v != anchor[k]:
                out.append({**anchor, k: v})
    paired = [k for k in free if k in PAIRED]
    for a, b in combinations(paired, 2):
        for va in space[a]:
            for vb in space[b]:
                if va != anchor[a] and vb != anchor[b]:
                    out.append({**anchor, a: va, b: vb})
    return [c for c in out if not check(info, c, target)]


def prior_decision(info: KernelInfo, target: Target, space: Mapping[str, Sequence[KnobValue]], prior: Prior,
                   fixed: Mapping[str, KnobValue] | None = None,
                   anchor: Mapping[str, KnobValue] | None = None) -> PriorChoice | None:
    """The prior tier's answer for a kernel: the rules' answer (completing the pins `fixed`; or
    `anchor`, a full legal assignment standing for it) as the anchor, its legal neighbourhood
    ranked, the bound applied. None where the rules find no legal completion (decide-forks
    reports that as it does today)."""
    anchor = dict(anchor) if anchor is not None else rules_anchor(info, target, space, fixed)
    if anchor is None:
        return None
    return choose(info, target, neighbourhood(info, target, space, anchor, fixed), anchor, prior)


def rules_anchor(info: KernelInfo, target: Target, space: Mapping[str, Sequence[KnobValue]],
                 fixed: Mapping[str, KnobValue] | None = None) -> dict | None:
    """The hand-written rules' full answer completing the pins `fixed` (the prior's anchor, and
    what the nearest tier's vet compares a borrowed answer with); None where the rules find no
    legal completion."""
    from emmy.tuning.rules import decide

    choices = decide(info, target, space, fixed)
    if choices is None:
        return None
    anchor = {k: c.value for k, c in choices.items()}
    anchor.update({k: v for k, v in (fixed or {}).items() if k in space})
    return anchor


__all__ = ["PAIRED", "PriorChoice", "choose", "neighbourhood", "prior_decision", "rules_anchor"]
