"""The candidates of the recorded tiers for the kernels of one module.

    ev = Evidence.collect(kernels_by_key, target, store=open_store(url, create=False), golden=entries)
    ev.local[name], ev.golden[name], ev.nearest[name]     # lists of Candidate, best first
    ev.stale[name]                                        # records of this kernel under an old space version

- local: the store's recorded best of the kernel's exact key;
- golden: the golden entry of the exact key (entries of the target's folder);
- nearest: records and golden entries of the same structure and target on other shapes, nearest
  first. The distance between two shapes is the sum over their axes of |log2(a / b)|, so 512
  and 1024 tokens are as far apart as 2048 and 4096; ties go to the store, then by key. One
  further than `RADIUS` is reported as skipped (too far), never borrowed.

A local record that lost in a layer check of this very layer (`emmy.records.layer`: the layer,
timed with all its tuned answers, was faster with this kernel's deploy answer) is skipped in this
layer, with the check's figures, and the local tier answers with the deploy answer the layer was
measured with; a layer check that no longer applies (the study names another
best now, another space version, a newer layer schema, the cost measurer's) is reported, never used.

A record or entry whose structure and shape match but whose space version is another is stale:
reported, never used. So is one of a kernel by the same name at the same shape whose structure
is another (its body or knob set changed since it was measured, as when a no-op knob was taken
out; or another model's kernel of that name): its key can no longer match, and `--explain` says
so rather than let it vanish. So is a record the cost measurer wrote (`emmy tune --measurer
cost`): its "times" rank candidates by their predicted facts and were never measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from emmy.evidence.recorded import Candidate, Skipped

# How many nearest candidates a kernel gets (the first legal one answers).
NEAREST = 4
# How far (`distance`) a shape may lie from the kernel's and still lend it an answer: the
# extents' ratios multiply to at most 4 (512 -> 2048 rows of a projection, 512 -> 1024 tokens
# of attention, whose two token axes both count). Past it, the offline judge of the tier
# (`emmy evidence judge`, docs page 6) measured borrowed answers slower than the prior's.
RADIUS = 2.0


@dataclass(frozen=True)
class Known:
    """One measured assignment of some key: the store's best of a study or a golden entry."""

    key_id: str
    structure: str
    shape: str
    target: str
    version: int
    extents: Mapping[str, int]
    values: Mapping[str, object]
    time_s: float
    source: Mapping[str, object]
    summary: str
    measured: bool = True  # False: written by the cost measurer (emmy tune --measurer cost)
    kernel: str = ""  # the kernel's name where it was recorded ("" unknown)


@dataclass
class Evidence:
    local: dict[str, list[Candidate]] = field(default_factory=dict)
    golden: dict[str, list[Candidate]] = field(default_factory=dict)
    nearest: dict[str, list[Candidate]] = field(default_factory=dict)
    stale: dict[str, list[Skipped]] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # kernel -> the layer check its local record lost in
    far: dict[str, int] = field(default_factory=dict)  # kernel -> records of its structure, all past RADIUS

    @classmethod
    def collect(cls, keys: Mapping[str, object], target: str, stored: Sequence[Known], golden: Sequence[Known],
                layers: Sequence = ()) -> Evidence:
        """`keys`: kernel name -> its KernelKey. `stored`, `golden`: what the store and the golden
        files hold (`stored_knowns`, `golden_knowns`). `layers`: the store's layer checks on the
        target (`emmy.records.layer.LayerCheck`): a kernel's local record that lost in this
        layer's check is skipped, with why."""
        ev = cls()
        unmeasured = [("local", k) for k in stored if not k.measured] + [("golden", k) for k in golden if not k.measured]
        stored = [k for k in stored if k.measured]
        golden = [k for k in golden if k.measured]
        for name, key in keys.items():
            for tier, k in unmeasured:
                if k.structure == key.structure and k.target == target:
                    ev.stale.setdefault(name, []).append(
                        Skipped(tier, k.source, "not a measurement: written by the cost measurer (emmy tune --measurer cost)"))
            for tier, known in (("local", stored), ("golden", golden)):
                exact = [k for k in known if k.key_id == key.id]
                getattr(ev, tier)[name] = [_candidate(tier, k, "") for k in exact]
                for k in known:
                    if k.shape != key.shape or k.target != target:
                        continue
                    if k.structure == key.structure and k.version != key.version:
                        ev.stale.setdefault(name, []).append(
                            Skipped(tier, k.source, f"stale: recorded under space version v{k.version}, this Emmy's is v{key.version}"))
                    elif k.kernel == name and k.structure != key.structure:
                        ev.stale.setdefault(name, []).append(Skipped(tier, k.source, (
                            f"stale: recorded for '{name}' at this shape under another structure ({k.structure[:12]}, "
                            f"this Emmy's is {key.structure[:12]}): its body or knob set changed since, or it is "
                            f"another model's kernel of that name; tune it again (a new study starts from its fastest points)")))
            others = [(distance(key.extents(), k.extents), i, k) for i, k in enumerate([*stored, *golden])
                      if k.structure == key.structure and k.target == target and k.version == key.version and k.shape != key.shape]
            others.sort(key=lambda t: (t[0], t[1]))
            ev.nearest[name] = [_candidate("nearest", k, key.shape, d) for d, _, k in others[:NEAREST] if d <= RADIUS]
            far = [_candidate("nearest", k, key.shape, d) for d, _, k in others[:NEAREST] if d > RADIUS]
            if far and not ev.nearest[name]:
                ev.far[name] = len(far)
            for c in far:
                ev.stale.setdefault(name, []).append(Skipped("nearest", c.source, (
                    f"too far to borrow from: distance {c.source['distance']:.2f} over {RADIUS:.2f} (the extents' "
                    f"ratios multiply to more than {2 ** RADIUS:.0f})")))
        if layers:
            ev._apply_layers(keys, layers)
        return ev

    def _apply_layers(self, keys: Mapping[str, object], layers: Sequence) -> None:
        """Skip the local records that lost in this layer's check (the check of the module's own
        signature); report the checks that cannot be read here: of a newer layer schema, of tuned
        values the study no longer names best, of another space version, or not measured."""
        from emmy.records.layer import LAYER_SCHEMA, layer_signature, unversioned

        ids = {name: key.id for name, key in keys.items()}  # type: ignore[attr-defined]
        signature = layer_signature(ids.values())
        bases = {unversioned(i) for i in ids.values()}
        for check in layers:
            if check.signature == signature:
                for name, key_id in ids.items():
                    self._judge(name, key_id, check, LAYER_SCHEMA)
            elif {unversioned(i) for i in check.kernels.values()} == bases:
                lost = {unversioned(i) for i in check.reverted}
                for name, key_id in ids.items():
                    if unversioned(key_id) in lost:
                        self.stale.setdefault(name, []).append(Skipped("local", {"layer": check.study}, (
                            f"stale layer check: made under another space version ({check.kernels.get(name, '?')}, "
                            f"this Emmy's key is {key_id}); the layer was not checked with this key")))

    def _judge(self, name: str, key_id: str, check, schema: int) -> None:
        local = self.local.get(name, [])
        if check.schema > schema:
            if local:
                self.stale.setdefault(name, []).append(Skipped("local", {"layer": check.study}, (
                    f"layer check of a newer Emmy (layer schema {check.schema}; this Emmy reads {schema} "
                    "and older): not read")))
            return
        lost = check.reverted.get(key_id)
        if lost is None or not local:
            return
        where = {**local[0].source, "layer": check.study}
        if not check.measured:
            self.stale.setdefault(name, []).append(Skipped("local", where, (
                "layer check not a measurement: made by the cost measurer (emmy tune --measurer cost)")))
        elif dict(local[0].values) != dict(lost.tuned):
            self.stale.setdefault(name, []).append(Skipped("local", where, (
                f"stale layer check: it judged the tuned values {_values(lost.tuned)}, the study's best is now "
                f"{_values(local[0].values)} (tune the layer again to check it)")))
        else:
            why = check.why(key_id)
            self.stale.setdefault(name, []).append(Skipped("local", where, why))
            # the answer the layer was measured faster with (the nearest tier, with the store
            # on, might borrow another shape's record instead: not what was measured)
            kept = [Candidate(dict(lost.deploy), f"the layer check kept the deploy answer: {why}",
                              {**where, "kept": "deploy"})] if lost.deploy else []
            self.local[name] = kept + local[1:]
            if not self.local[name]:
                self.lost[name] = check.study


def distance(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """Sum over the axes of |log2(a / b)| (an axis missing on one side counts as far: 64)."""
    axes = set(a) | set(b)
    return sum(abs(math.log2(a[x] / b[x])) if x in a and x in b and a[x] > 0 and b[x] > 0 else 64.0 for x in sorted(axes))


def stored_knowns(store, target: str) -> list[Known]:
    """The recorded best of every study of the store on `target`."""
    from emmy.records.store import KERNEL_ATTR, KEY_ATTR, best_record, store_errors
    from emmy.schedule.key import KernelKey
    from emmy.search.cost import CARD as COST_CARD

    with store_errors(store.name):
        studies = [(name, store.study_attrs(name) or {}) for name in store.study_names()]
    out = []
    for name, attrs in studies:
        fields = attrs.get(KEY_ATTR) or {}
        if fields.get("target") != target:
            continue
        record = best_record(store, name, attrs)
        if record is None:
            continue
        key = KernelKey(str(fields.get("structure", "")), str(fields.get("shape", "")), target, int(fields.get("version", 0)))
        out.append(Known(
            key_id=name, structure=key.structure, shape=key.shape, target=target, version=key.version,
            extents=key.extents(), values=dict(record.values), time_s=record.time_s,
            source={"store": store.name, "study": record.study, "trial": record.trial, "time_s": record.time_s,
                    "card": record.card},
            summary=f"tuned {record.summary()} ({record.source()})",
            measured=record.card != COST_CARD, kernel=str(attrs.get(KERNEL_ATTR, "")),
        ))
    return out


def export_knowns(data: Mapping, source: str, target: str) -> list[Known]:
    """The named best of every study of a records export (`emmy records export`) on `target`:
    what `stored_knowns` reads from a store."""
    from emmy.records.record import record_from
    from emmy.records.store import BEST_ATTR, KERNEL_ATTR, KEY_ATTR
    from emmy.search.cost import CARD as COST_CARD

    out = []
    for study in data.get("studies", []):
        attrs = study["attrs"]
        fields = attrs.get(KEY_ATTR) or {}
        if not isinstance(fields, Mapping) or fields.get("target") != target or BEST_ATTR not in attrs:
            continue
        key = export_key(fields)
        try:
            record = record_from(attrs[BEST_ATTR], key=study["name"], kernel=str(attrs.get(KERNEL_ATTR, "")),
                                 target=target, store=source)
        except (KeyError, TypeError, ValueError):
            continue  # a malformed best answers nothing (emmy records show names it)
        out.append(Known(
            key_id=study["name"], structure=key.structure, shape=key.shape, target=target, version=key.version,
            extents=key.extents(), values=dict(record.values), time_s=record.time_s,
            source={"records": source, "study": study["name"], "trial": record.trial, "time_s": record.time_s,
                    "card": record.card},
            summary=f"tuned {record.summary()} ({source}, study {study['name'][:21]}, trial {record.trial})",
            measured=record.card != COST_CARD, kernel=str(attrs.get(KERNEL_ATTR, "")),
        ))
    return out


def export_key(fields: Mapping):
    """The `KernelKey` of a study's key attribute (`emmy.key`)."""
    from emmy.schedule.key import KernelKey

    return KernelKey(str(fields.get("structure", "")), str(fields.get("shape", "")), str(fields.get("target", "")),
                     int(fields.get("version", 0) or 0))


def stored_layers(store, target: str) -> list:
    """The store's layer checks on `target` (`emmy.records.layer`)."""
    from emmy.records.layer import layer_checks

    return [c for c in layer_checks(store).values() if c.target == target]


def _values(values: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def golden_knowns(files, target: str) -> list[Known]:
    """Every entry of the golden files for `target`."""
    from emmy.search.cost import CARD as COST_CARD

    out = []
    for f in files:
        if f.target != target:
            continue
        for i, e in enumerate(f.entries):
            key = e.kernel_key()
            out.append(Known(
                key_id=e.key, structure=e.structure, shape=e.shape, target=e.target, version=e.version,
                extents=key.extents(), values=dict(e.values), time_s=e.time_s,
                source={"file": str(f.path), "entry": i, "kernel": e.kernel, "tokens": e.tokens,
                        "time_s": e.time_s, "card": e.card},
                summary=f"golden: {e.time_s * 1e6:.2f} us on {e.card or 'an unknown card'} ({f.path.name} entry {i}: {e.kernel} at {e.tokens} tokens)",
                measured=e.card != COST_CARD, kernel=e.kernel,
            ))
    return out


def _candidate(tier: str, k: Known, shape: str, d: float = 0.0) -> Candidate:
    source = {"tier": tier, "key": k.key_id, **k.source}
    reason = k.summary
    if tier == "nearest":
        source.update({"shape": k.shape, "distance": round(d, 3)})
        reason = f"nearest shape ({k.shape.split(';')[0]}, distance {d:.2f}): {k.summary}"
    return Candidate(dict(k.values), reason, source)  # type: ignore[arg-type]


__all__ = ["NEAREST", "RADIUS", "Evidence", "Known", "distance", "export_key", "export_knowns",
           "golden_knowns", "stored_knowns", "stored_layers"]
