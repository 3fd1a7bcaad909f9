"""The deciders of one decide-forks run, in the hierarchy's order, and the report of where each
kernel's answers came from.

    hierarchy = Hierarchy.build(kernels, target, pins, EvidenceOptions(records=url, golden=dir))
    answers = decide_kernel(problem, hierarchy.deciders)
    hierarchy.report(kernel_name)      # JSON-able: key, tiers used, skipped evidence, misses

The report goes into the kernel's `emmy.evidence` attribute (a JSON string) where any evidence
answered or was skipped (see decide-forks), so `--explain` and the dump's decisions can say, for every kernel, which
tier answered, its structured source, what was skipped and why each higher tier had no answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from emmy.evidence import TIERS
from emmy.evidence.gather import Evidence, golden_knowns, stored_knowns, stored_layers
from emmy.evidence.prior import nearest_decider
from emmy.evidence.recorded import RecordedDecider, Skipped
from emmy.tuning.deciders import Decider, KeptDecider, PinnedDecider, RuleDecider
from emmy.tuning.pins import Pins

EVIDENCE_ATTR = "emmy.evidence"


@dataclass(frozen=True)
class EvidenceOptions:
    """What decide-forks may consult: the tiers turned on, the store's URL ("" = none) and the
    golden folder ("" = none)."""

    tiers: tuple[str, ...] = TIERS
    records: str = ""
    golden: str = ""


@dataclass
class Hierarchy:
    deciders: list[Decider]
    keys: dict[str, object]
    recorded: list[RecordedDecider]
    stale: dict[str, list[Skipped]]
    prior: object = None  # the PriorDecider, when the prior tier is on
    misses: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def build(cls, kernels: Sequence, target, pins: Pins, options: EvidenceOptions, prior: Decider | None = None) -> Hierarchy:
        from emmy.schedule.key import kernel_key

        tiers = options.tiers
        keys = {k.kernel_name: kernel_key(k, target) for k in kernels}
        store, store_note = _store(options.records) if {"local", "nearest"} & set(tiers) else (None, "")
        files, golden_note = _golden(options.golden, target.name) if {"golden", "nearest"} & set(tiers) else ([], "")
        stored = stored_knowns(store, target.name) if store is not None else []
        gold = golden_knowns(files, target.name)
        layers = stored_layers(store, target.name) if store is not None and "local" in tiers else []
        ev = Evidence.collect(keys, target.name, stored, gold, layers)
        recorded = []
        deciders: list[Decider] = []
        if "pinned" in tiers:
            deciders.append(PinnedDecider(pins))
        deciders.append(KeptDecider())
        for tier in ("local", "golden", "nearest"):
            if tier in tiers:
                d = (nearest_decider(ev.nearest, prior if "prior" in tiers else None) if tier == "nearest"
                     else RecordedDecider(tier, getattr(ev, tier)))
                recorded.append(d)
                deciders.append(d)
        if "prior" in tiers and prior is not None:
            if "rule" not in tiers:
                prior = replace(prior, completes=True)
            deciders.append(prior)
        if "rule" in tiers or prior is None:
            deciders.append(RuleDecider())
        h = cls(deciders, keys, recorded, ev.stale, prior if "prior" in tiers else None)
        for name in keys:
            h.misses[name] = _misses(tiers, name, ev, store_note, golden_note, options)
            if "prior" not in tiers:
                h.misses[name]["prior"] = "turned off"
            elif h.prior is None:
                h.misses[name]["prior"] = f"no fitted prior for {target.name} (prior.json in the golden folder)"
        return h

    def report(self, kernel: str, tiers_used: Sequence[str]) -> dict:
        """Where the kernel's answers came from: its key, the source of each recorded tier that
        answered, the evidence passed over, and why each higher tier had no answer."""
        used = {d.name: dict(d.used[kernel].source) for d in self.recorded if kernel in d.used and d.name in tiers_used}
        prior = self.prior.source(kernel) if self.prior is not None else None
        if prior is not None:
            used["prior"] = prior
        skipped = [s.to_json() for s in self.stale.get(kernel, [])]
        for d in self.recorded:
            skipped.extend(s.to_json() for s in d.skipped.get(kernel, []))
        misses = dict(self.misses.get(kernel, {}))
        for d in self.recorded:
            passed = d.skipped.get(kernel, [])
            if passed and d.name not in used:
                misses[d.name] = f"all {len(passed)} candidate(s) skipped (see the evidence skipped)"
        if prior is not None and prior["picked"] != "prior" and "prior" not in tiers_used:
            misses["prior"] = f"kept the rules' answer: {prior['why']}"
            del used["prior"]
        key = self.keys[kernel]
        return {"key": key.id, "sources": used, "skipped": skipped, "misses": misses}


def _store(url: str):
    if not url:
        return None, "no store given"
    from emmy.records.store import display_url, open_store

    store = open_store(url, create=False)
    if store is None:
        return None, f"no store at {display_url(url)}"
    return store, store.name


def _golden(directory: str, target: str):
    if not directory:
        return [], "no golden folder given"
    from emmy.golden.schema import read_dir

    path = Path(directory)
    files = read_dir(path, target)
    return files, f"{path / target}"


def _misses(tiers, name, ev: Evidence, store_note: str, golden_note: str, options: EvidenceOptions) -> dict[str, str]:
    out = {}
    for tier in ("local", "golden", "nearest"):
        if tier not in tiers:
            out[tier] = "turned off"
        elif not getattr(ev, tier).get(name):
            if tier == "local" and name in ev.lost:
                out[tier] = f"its record lost in this layer's check ({ev.lost[name]}; see the evidence skipped)"
            elif tier == "local":
                out[tier] = f"no record of this key ({store_note})" if options.records else "no store"
            elif tier == "golden":
                out[tier] = f"no entry for this key in {golden_note}" if options.golden else "no golden folder"
            elif name in ev.far:
                out[tier] = (f"the {ev.far[name]} nearest record(s) of this kernel's structure are too far "
                             "(see the evidence skipped)")
            else:
                out[tier] = "no record or golden entry of this kernel's structure on another shape"
    return out


__all__ = ["EVIDENCE_ATTR", "EvidenceOptions", "Hierarchy"]
