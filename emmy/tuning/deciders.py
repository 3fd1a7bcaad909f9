"""Deciders: the ordered sources of knob values that `decide-forks` consults.

A decider answers some knobs of one kernel (`Problem`), given the answers of the stronger
deciders before it (`fixed`). `decide_kernel` asks them in order; each answer is kept only if the
assignment so far stays legal (`emmy.tuning.legality.check`); the first decider to answer a knob
wins. The order is the deploy evidence hierarchy (docs page 6, "the deploy evidence hierarchy"):

    pinned -> (kept: a value an earlier decide-forks recorded) -> local -> golden -> nearest
           -> prior -> rule

Only `pinned`, `kept` and `rule` exist today; the others plug into `default_deciders`. The rule
decider always completes a legal assignment when one exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from emmy.analysis.classify import KernelInfo
from emmy.diagnostics import EmmyError
from emmy.tuning import rules
from emmy.tuning.knobs import KnobValue
from emmy.tuning.legality import check
from emmy.tuning.pins import Pins, pins_for
from emmy.targets import Target


@dataclass(frozen=True)
class Answer:
    """A knob value with the evidence tier and a readable reason."""

    value: KnobValue
    tier: str
    reason: str


@dataclass(frozen=True)
class Problem:
    """One kernel to decide: its name, classification, target, knob space and any knob values
    already recorded in the IR (knob -> Answer)."""

    kernel: str
    info: KernelInfo
    target: Target
    space: Mapping[str, tuple[KnobValue, ...]]
    recorded: Mapping[str, Answer]


class Decider(Protocol):
    name: str

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        """Values for some knobs not in `fixed` (may be empty)."""
        ...


@dataclass(frozen=True)
class PinnedDecider:
    """The user's pins (tier `pinned`); an illegal pinned set is an error, never skipped."""

    pins: Pins
    name: str = "pinned"

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        values = pins_for(self.pins, problem.kernel, problem.info.kind, problem.space)
        texts = self.pins.for_kernel(problem.kernel)
        out = {k: Answer(v, "pinned", f"pin '{texts[k].text}'") for k, v in values.items()}
        reasons = check(problem.info, values, problem.target)
        if reasons:
            pinned = ", ".join(f"{k}={v}" for k, v in values.items())
            raise EmmyError(
                f"kernel '{problem.kernel}': the pinned values {pinned} are illegal on "
                f"{problem.target.name}:\n  " + "\n  ".join(reasons)
            )
        return out


@dataclass(frozen=True)
class KeptDecider:
    """Values already decided in the IR (an earlier decide-forks) keep their tier and reason."""

    name: str = "kept"

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        return {k: a for k, a in problem.recorded.items() if k not in fixed}


@dataclass(frozen=True)
class RuleDecider:
    """The default rules (`emmy.tuning.rules`, tier `rule`): completes any legal assignment."""

    name: str = "rule"

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        values = {k: a.value for k, a in fixed.items()}
        choices = rules.decide(problem.info, problem.target, problem.space, values)
        if choices is None:
            raise EmmyError(_no_schedule(problem, fixed))
        return {k: Answer(c.value, "rule", c.reason) for k, c in choices.items()}


@dataclass(frozen=True)
class FixedDecider:
    """Given answers, as they are (decide-forks' launch budget puts its trades before the tiers
    whose answers it trades)."""

    answers: Mapping[str, Answer]
    name: str = "fixed"

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        return {k: a for k, a in self.answers.items() if k in problem.space and k not in fixed}


# The helper launches the launch budget trades, in the order it tries them (over every kernel
# before the next kind): a split-k combine kernel, then a kernel that computes a fused
# kernel's producers first (row statistics, attention's rotated K rows).
TRADE_ORDER = ("combine", "fusion")


# The tiers whose answers the launch budget may trade, in the rounds it tries them: what the
# rules or the prior computed, then what was recorded (a measurement of the kernel alone, which
# the budget, the user's explicit limit, outranks). Pinned answers are never traded.
COMPUTED_TIERS: tuple[str, ...] = ("rule", "prior")
RECORDED_TIERS: tuple[str, ...] = ("nearest", "golden", "local")


def trades_for_launches(
    space: Mapping[str, tuple[KnobValue, ...]], answers: Mapping[str, Answer], tiers: Sequence[str] = COMPUTED_TIERS,
) -> list[tuple[str, KnobValue, str]]:
    """(knob, value, what it does) that may save a kernel one helper launch, where its current
    answer came from one of `tiers`: split_k's parts added by the last block of each tile instead of
    a `_combine` kernel; then `fusion` = fused: what a kernel of its own computed first (row
    statistics, attention's rotated K rows) computed in this one. The launch budget keeps a trade only where the plan
    makes fewer launches with it."""
    out = []
    combine, split = answers.get("combine"), answers.get("split_k")
    if (combine is not None and split is not None and combine.tier in tiers and combine.value == "kernel"
            and int(split.value) > 1 and "last_block" in space.get("combine", ())):
        out.append(("combine", "last_block",
                    f"the last of each tile's {split.value} blocks adds the parts, no _combine kernel"))
    fusion = answers.get("fusion")
    if fusion is not None and fusion.tier in tiers and fusion.value == "split" and "fused" in space.get("fusion", ()):
        out.append(("fusion", "fused",
                    "fused: what a kernel of its own computed first (row statistics, rotated K rows) computed in this one"))
    return out


def default_deciders(pins: Pins) -> list[Decider]:
    """The evidence hierarchy as it exists today."""
    return [PinnedDecider(pins), KeptDecider(), RuleDecider()]


def decide_kernel(problem: Problem, deciders: Sequence[Decider]) -> dict[str, Answer]:
    """Every knob of `problem.space` answered, legal together, in the space's order."""
    fixed: dict[str, Answer] = {}
    for decider in deciders:
        missing = [k for k in problem.space if k not in fixed]
        if not missing:
            break
        answer = {
            k: a for k, a in decider.answer(problem, fixed).items() if k in missing
        }
        if not answer:
            continue
        trial = {k: a.value for k, a in {**fixed, **answer}.items()}
        if check(problem.info, trial, problem.target):
            continue  # evidence that is no longer legal is skipped
        fixed.update(answer)
    missing = [k for k in problem.space if k not in fixed]
    if missing:
        raise EmmyError(_no_schedule(problem, fixed))
    return {k: fixed[k] for k in problem.space}


def _no_schedule(problem: Problem, fixed: Mapping[str, Answer]) -> str:
    values = {k: a.value for k, a in fixed.items()}
    fixed_text = ", ".join(f"{k}={v}" for k, v in values.items()) or "nothing fixed"
    # Explain with the rule's unconstrained choice overridden by the fixed values.
    free = rules.decide(problem.info, problem.target, problem.space, {}) or {}
    trial = {k: c.value for k, c in free.items()} | values
    reasons = check(problem.info, trial, problem.target)
    detail = ("\n  " + "\n  ".join(reasons)) if reasons else ""
    return (
        f"kernel '{problem.kernel}': no legal schedule on {problem.target.name} with "
        f"{fixed_text}{detail}"
    )
