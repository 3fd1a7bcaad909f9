"""The deploy evidence hierarchy: where `decide-forks` takes each knob's answer from when nothing
is measured (docs page 6, "the deploy evidence hierarchy").

For each kernel, the first tier that has an answer wins:

    pinned  -> a value the user fixed (--knob, a pass option, the module's emmy.pins)
    local   -> the user's tuning store: the recorded best of this exact kernel key and target
               (where the layer check found it slower in this layer: the deploy answer it kept)
    golden  -> a reviewed entry shipped in golden/<target>/ for this exact key
    nearest -> a record or golden entry of the same kernel structure on the nearest other shape
               within the trust radius, same target, re-checked for legality on this one
               (and, with a fitted prior, vetted: emmy.evidence.prior.NearestVet)
    prior   -> the cost model's best-ranked legal option (emmy.prior), bounded by the rules'
               answer (it must be predicted faster by a margin to replace it)
    rule    -> the hand-written rules (emmy.tuning.rules): always completes a legal assignment

(A value an earlier decide-forks recorded in the IR is kept with its tier, after `pinned`.)
Evidence that is no longer legal, or a record whose key is stale, is skipped and reported in the
kernel's `emmy.evidence` attribute (`emmy compile --explain` prints it), never used and never
silently dropped. `--evidence pinned,prior` (or EMMY_EVIDENCE) turns tiers off, so each can be
judged alone; `rule` stays as the last resort unless the prior is on.

- `recorded`: `Candidate`, and `RecordedDecider`, the decider of the three recorded tiers;
- `gather`: the candidates of each recorded tier for one kernel (store, golden files);
- `hierarchy`: the deciders in order, and what each kernel's decisions came from;
- `prior`: the prior tier's decider and the nearest tier's vet;
- `judge`: the nearest tier judged offline on measured records (`emmy evidence judge`).
"""

from __future__ import annotations

from emmy.diagnostics import EmmyError

# In order, strongest first. `kept` (values already in the IR) is not a tier one turns off.
TIERS: tuple[str, ...] = ("pinned", "local", "golden", "nearest", "prior", "rule")


def parse_tiers(text: str) -> tuple[str, ...]:
    """`"pinned,prior"` -> the tiers turned on, in the hierarchy's order; an unknown name is an
    EmmyError listing the valid ones. Empty text means every tier."""
    if not text.strip():
        return TIERS
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in TIERS]
    if unknown:
        raise EmmyError(f"unknown evidence tier '{unknown[0]}'", hint="valid tiers: " + ", ".join(TIERS))
    if "rule" not in names and "prior" not in names:
        raise EmmyError("keep 'rule' or 'prior' on: one of them must complete every schedule")
    return tuple(t for t in TIERS if t in names)


__all__ = ["TIERS", "parse_tiers"]
