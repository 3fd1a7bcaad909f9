"""The prior tier: the cost model's bounded choice (`emmy.prior.choose.prior_decision`).

The prior ranks the legal neighbourhood of the rules' answer and replaces that answer only when
it predicts a gain over its margin (the bound is in `emmy.prior.choose`). Before that, a fitted
prior reshapes the rules' tile where it leaves the last wave part empty, as the nearest tier
reshapes a borrowed one (`emmy.evidence.reshape`: the Qwen3 layer's o and down projections at
3000 tokens, the rules' 128 x 256 tiles make 96 blocks on 132 SMs; 256 x 96 tiles, 132 blocks,
ran 24.2 and 33.0 us on the H200 against 32.7 and 44.6); the reshaped answer is the anchor.
Where it keeps the rules' answer as they gave it, this decider answers nothing and the rules
answer (tier `rule`, with their own reasons), unless the rules are turned off (`completes`):
then the kept answer is the prior's (tier `prior`). The report says what the prior ranked either
way. Its coefficients come from `<golden folder>/<target>/prior.json` when there is one, else the
target's unfitted defaults.

A fitted prior also vets the nearest tier (`NearestVet`): values measured on another shape are
borrowed unless the prior's physical model (its fitted coefficients, without the learned
correction) predicts the rules' answer faster on this shape. A tile that gave one full wave at
512 tokens can leave a wave and a half at 768; the rules and the model count waves, a copied
answer does not. The borrowed values get no margin: they were measured on another shape, and
what changed with the shape (waves, split-k's share of the SMs) is exactly what the model
counts; a tie (values the model does not tell apart) keeps them. (With a margin of
`MIN_MARGIN`, the down projection's split-k 2 borrowed from 2048 rows stayed at 1536, predicted
1.3% slower than the rules' one wave of 128 x 96 tiles; the H200 ran it 25.7 us with its
combine against 19.7 for the rules' answer.) The learned correction is left out: its weights per
knob value do not depend on the shape, and the borrowed values were measured best, knob values
and all, where they come from (with it, gate/up's `group_m = 2` measured best at 4096 tokens was
skipped at 3000 on a 5% predicted difference that was the correction's weight alone). A vetted-out candidate is reported as
skipped evidence with both predicted times, and the tiers below answer.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from emmy.evidence.recorded import RecordedDecider
from emmy.tuning.deciders import Answer, Problem


@dataclass(frozen=True)
class PriorDecider:
    prior: object  # emmy.prior.store.Prior
    name: str = "prior"
    completes: bool = False  # the last tier (rules off): answer with the rules' answer it kept
    choices: MutableMapping[str, object] = field(default_factory=dict)  # kernel -> PriorChoice
    reshaped: MutableMapping[str, dict] = field(default_factory=dict)  # kernel -> the rules' tile reshaped (detail)

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        from emmy.evidence.reshape import Reshape, describe
        from emmy.prior.choose import prior_decision, rules_anchor

        values = {k: a.value for k, a in fixed.items()}
        anchor = rules_anchor(problem.info, problem.target, problem.space, values)
        if anchor is None:
            return {}
        # the rules' tile, like a borrowed one, reshaped where it leaves the last wave part empty
        filled = Reshape(self.prior)(problem, fixed, anchor) if getattr(self.prior, "fitted", False) else None
        if filled is not None:
            anchor, self.reshaped[problem.kernel] = filled
        choice = prior_decision(problem.info, problem.target, problem.space, self.prior, values, anchor)
        if choice is None:
            return {}
        self.choices[problem.kernel] = choice
        if choice.picked != "prior" and not self.completes and filled is None:
            return {}
        why = choice.reason
        if filled is not None:
            why = f"the rules' answer {describe(filled[1])}; {why}"
        return {k: Answer(v, "prior", f"prior: {why}") for k, v in choice.values.items()
                if k in problem.space and k not in fixed}

    def source(self, kernel: str) -> dict | None:
        """The structured source of the prior's choice for a kernel: its predicted time, the
        rules' predicted time, the runner-up, the margin and what it did."""
        c = self.choices.get(kernel)
        if c is None:
            return None
        runner = None
        if c.runner_up is not None:
            runner = {"values": dict(c.runner_up[0]), "predicted_s": c.runner_up[1]}
        out = {"tier": "prior", "picked": c.picked, "predicted_s": c.predicted_s, "rules_predicted_s": c.anchor_s,
               "runner_up": runner, "margin": round(c.margin, 4), "candidates": c.candidates, "why": c.reason}
        if kernel in self.reshaped:
            out["reshaped"] = self.reshaped[kernel]
        return out


@dataclass(frozen=True)
class NearestVet:
    """The prior's check of a borrowed (nearest) assignment against the rules' answer here."""

    prior: object  # emmy.prior.store.Prior (fitted)

    def __call__(self, problem: Problem, fixed: Mapping[str, Answer], values: Mapping[str, object]) -> str:
        from emmy.prior.choose import rules_anchor
        from emmy.prior.features import Kernel
        from emmy.prior.model import score
        rules = rules_anchor(problem.info, problem.target, problem.space, {k: a.value for k, a in fixed.items()})
        if rules is None:
            return ""
        if all(str(rules.get(k)) == str(v) for k, v in values.items() if k in problem.space):
            return ""
        # the physical model alone (the fitted coefficients): what depends on the shape (waves,
        # tiles, bytes); the learned correction's per-knob-value weights do not, and the borrowed
        # values were measured best, knob values and all, on the shape they come from
        kernel = Kernel(problem.info, problem.target)
        borrowed_s = score(kernel, values, self.prior.coeffs, penalized=False)
        rules_s = score(kernel, rules, self.prior.coeffs, penalized=False)
        if borrowed_s is None or rules_s is None or rules_s >= borrowed_s:
            return ""
        return (f"the prior's physical model predicts the rules' answer faster on this shape ({rules_s * 1e6:.2f} us against "
                f"{borrowed_s * 1e6:.2f} us for the borrowed values)")


def nearest_decider(candidates, prior) -> RecordedDecider:
    """The nearest tier's decider: with a fitted prior (a PriorDecider), its candidates' tiles
    reshaped where they leave this shape's last wave part empty (`emmy.evidence.reshape`) and
    then vetted on each kernel's shape (`NearestVet`); without one, as recorded."""
    from emmy.evidence.reshape import Reshape

    fitted = prior is not None and getattr(prior.prior, "fitted", False)
    if not fitted:
        return RecordedDecider("nearest", candidates)
    return RecordedDecider("nearest", candidates, vet=NearestVet(prior.prior), reshape=Reshape(prior.prior))


def prior_decider(golden: str, target, required: bool = False) -> PriorDecider | None:
    """The prior for `target`: fitted coefficients from the golden folder's prior.json (a broken
    file is an EmmyError naming it). Without a fitted prior there is none (its unfitted defaults
    have a margin near 2x, so they would keep the rules' answer at the cost of ranking every
    kernel's neighbourhood on every compile), unless the prior is `required`: the rules are
    off, and the defaults complete the schedule."""
    from emmy.prior.store import Prior, load_prior, prior_path

    path = prior_path(Path(golden), target.name) if golden else None
    if path is not None and path.exists():
        return PriorDecider(load_prior(path, target.name))
    return PriorDecider(Prior(target.name)) if required else None


__all__ = ["NearestVet", "PriorDecider", "nearest_decider", "prior_decider"]
