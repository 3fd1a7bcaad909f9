"""The recorded tiers' decider: a full assignment that was measured somewhere, if it is legal here.

The `local`, `golden` and `nearest` tiers all answer the same way: each has, per kernel, a list
of candidates (full knob assignments with where they came from), best first; the first one that
agrees with the stronger answers and is legal on this kernel and target answers every knob it
names. The ones passed over are reported (`skipped`), with why. A tier may also have a `vet`: a
last check of a legal candidate on this kernel (the nearest tier's: `emmy.evidence.prior.NearestVet`,
the prior's comparison of the borrowed values with the rules' answer on this shape), and a
`reshape`, run before the vet: another legal assignment in place of the candidate's, with what
changed and why (the nearest tier's: `emmy.evidence.reshape.Reshape`, a borrowed tile that leaves
this shape's last wave part empty). A reshaped candidate answers with its source's `reshaped`
detail and its reason extended.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from emmy.tuning.deciders import Answer, Problem
from emmy.tuning.knobs import KnobValue
from emmy.tuning.legality import check


@dataclass(frozen=True)
class Candidate:
    """A measured assignment: its values, a one-line reason, and a structured source (a JSON-able
    mapping: tier, store/study/trial, golden file/entry, the shape it was borrowed from, ...)."""

    values: Mapping[str, KnobValue]
    reason: str
    source: Mapping[str, object]


@dataclass(frozen=True)
class Skipped:
    """Evidence that was there and not used, with why."""

    tier: str
    source: Mapping[str, object]
    why: str

    def to_json(self) -> dict:
        return {"tier": self.tier, "source": dict(self.source), "why": self.why}


@dataclass(frozen=True)
class RecordedDecider:
    """Answers from `candidates[kernel]`, the first legal one, all its knobs at once (tier `name`).

    `used` and `skipped` are filled as kernels are decided (kernel name -> the candidate used /
    the ones passed over): the report of one decide-forks run."""

    name: str
    candidates: Mapping[str, Sequence[Candidate]]
    used: MutableMapping[str, Candidate] = field(default_factory=dict)
    skipped: MutableMapping[str, list[Skipped]] = field(default_factory=dict)
    # (problem, fixed, the full assignment) -> why not to use a legal candidate here, or ""
    vet: Callable[[Problem, Mapping[str, Answer], Mapping[str, KnobValue]], str] | None = None
    # (problem, fixed, the full assignment) -> (another legal assignment, its JSON-able detail) or None
    reshape: Callable[[Problem, Mapping[str, Answer], Mapping[str, KnobValue]], tuple[dict, dict] | None] | None = None

    def answer(self, problem: Problem, fixed: Mapping[str, Answer]) -> dict[str, Answer]:
        notes = self.skipped.setdefault(problem.kernel, [])
        del notes[:]  # a kernel decided again (fitting parts, a launch budget) reports once
        for c in self.candidates.get(problem.kernel, ()):
            why = self._unusable(problem, fixed, c)
            if not why and self.reshape is not None:
                c = self._reshaped(problem, fixed, c)
            if not why and self.vet is not None:
                why = self.vet(problem, fixed, {**dict(c.values), **{k: a.value for k, a in fixed.items()}})
            if why:
                notes.append(Skipped(self.name, c.source, why))
                continue
            self.used[problem.kernel] = c
            return {k: Answer(v, self.name, c.reason) for k, v in c.values.items() if k not in fixed}
        return {}

    def _reshaped(self, problem: Problem, fixed: Mapping[str, Answer], c: Candidate) -> Candidate:
        from emmy.evidence.reshape import describe

        got = self.reshape(problem, fixed, {**dict(c.values), **{k: a.value for k, a in fixed.items()}})
        if got is None:
            return c
        values, detail = got
        return Candidate({k: values[k] for k in c.values}, f"{c.reason}; {describe(detail)}", {**c.source, "reshaped": detail})

    @staticmethod
    def _unusable(problem: Problem, fixed: Mapping[str, Answer], c: Candidate) -> str:
        missing = [k for k in problem.space if k not in c.values and k not in fixed]
        unknown = [k for k in c.values if k not in problem.space]
        if unknown or missing:
            parts = [f"knobs this kernel does not have: {', '.join(unknown)}" if unknown else "",
                     f"no value for {', '.join(missing)}" if missing else ""]
            return "stale: " + "; ".join(p for p in parts if p)
        clash = [k for k, a in fixed.items() if k in c.values and c.values[k] != a.value]
        values = {**dict(c.values), **{k: a.value for k, a in fixed.items()}}
        reasons = check(problem.info, values, problem.target)
        if reasons:
            what = f" with {', '.join(f'{k}={fixed[k].value} ({fixed[k].tier})' for k in clash)}" if clash else ""
            return f"illegal on {problem.target.name}{what}: {reasons[0]}"
        return ""


__all__ = ["Candidate", "RecordedDecider", "Skipped"]
