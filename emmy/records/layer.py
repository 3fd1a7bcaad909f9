"""Layer checks: a compiled layer timed with all its tuned answers together, and the kernels whose
tuned answer lost in that company.

    check = LayerCheck(signature=layer_signature(keys), target="sm_90a", tokens=512, ...,
                       reverted={key_id: Reverted(...)})
    write_layer_check(store, check)          # the study `emmy.layer.<signature>`, attribute `emmy.layer`
    layer_checks(store)                      # every check in the store, by study name

A kernel can be fastest alone and slower beside its neighbours (the cache it leaves, the clocks,
the launches it overlaps). After `emmy tune` names each study's best, it times the layer's chosen
set (every kernel at its tuned answer) against the deploy set (every kernel at the answer Emmy
gives without the store: golden, nearest, prior or rules), interleaved; where the chosen set is
slower beyond the spread, it reverts kernels one at a time to their deploy answers and keeps the
reverts that make the layer faster beyond the spread (`emmy.search.layer_check`). The outcome is
kept here so that the local tier skips a reverted kernel's record in this layer
(`emmy.evidence.gather`), with why.

Layout: one study per layer check, named `emmy.layer.<signature>`, no trials. The signature is a
digest of the sorted key ids of the layer's kernels (`layer_signature`): the same layer at the
same token count on the same target and space version has the same kernels, and so the same
signature; decide-forks computes it from the kernels of the module it decides. Its user attribute
`emmy.layer` (schema `LAYER_SCHEMA`) holds: the kernels (name -> key id), model, layer, tokens,
target (a whole model is timed as a whole and kept as one check per part, `layer` null, `part`
its name); `chosen`, the tuned values of every kernel that was timed (a re-run over the same
bests recalls the check instead of timing again); the chosen, deploy and final sets' times and spreads; `reverted` (key id -> the kernel's
name, the tuned values judged, the deploy values, the tuned answer's own time, the layer's gain
with the deploy answer); the environment of the measurement and its date. A check is stale when
the study's best is no longer the tuned values it judged, or when it was written under another
space version or a newer layer schema: reported as skipped, never used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from emmy.diagnostics import EmmyError, first_line
from emmy.records.store import LAYER_PREFIX

LAYER_ATTR = "emmy.layer"
# The layout of one layer check (the `emmy.layer` attribute). A check of a larger number is
# reported as stale (written by a newer Emmy), never read.
LAYER_SCHEMA = 1


def layer_signature(key_ids) -> str:
    """The digest naming a layer: its kernels' key ids, each once, sorted."""
    text = "\n".join(sorted(set(key_ids)))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def unversioned(key_id: str) -> str:
    """A key id without its space version (`...:v3` -> `...`)."""
    return key_id.rsplit(":v", 1)[0]


@dataclass(frozen=True)
class Reverted:
    """A kernel whose tuned answer lost in the layer: the deploy answer is kept there."""

    kernel: str
    tuned: Mapping[str, object]  # the tuned values judged (the study's best then)
    deploy: Mapping[str, object]
    alone_s: float  # the tuned answer's own time (the study's best)
    gain: float  # how much faster the layer was with the deploy answer (a fraction of the time)


@dataclass(frozen=True)
class LayerCheck:
    """One layer, at one token count, timed with its chosen set and its deploy set."""

    signature: str
    target: str
    tokens: int
    kernels: Mapping[str, str]  # kernel name -> key id
    tuned_s: float
    tuned_spread: float
    deploy_s: float
    deploy_spread: float
    final_s: float  # the layer with the reverts (= tuned_s when there are none)
    final_spread: float
    reverted: Mapping[str, Reverted] = field(default_factory=dict)  # key id -> what was reverted
    chosen: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # kernel -> the tuned values timed
    model: str = ""
    layer: int | None = None  # None: a part of a whole model, timed as a whole
    part: str = ""  # the model's part (a whole model's check is kept per part)
    env: Mapping[str, str] = field(default_factory=dict)
    date: str = ""
    schema: int = LAYER_SCHEMA

    @property
    def study(self) -> str:
        return LAYER_PREFIX + self.signature

    @property
    def measured(self) -> bool:
        """False where the cost measurer's layer cost made it (emmy tune --measurer cost)."""
        from emmy.search.cost import CARD

        return self.env.get("card") != CARD

    def to_json(self) -> dict:
        data = asdict(self)
        data["kernels"] = dict(self.kernels)
        data["reverted"] = {k: asdict(r) for k, r in self.reverted.items()}
        data["chosen"] = {k: dict(v) for k, v in self.chosen.items()}
        return data

    def why(self, key_id: str) -> str:
        """The reason the local tier skips the kernel's record here (`--explain`)."""
        r = self.reverted[key_id]
        where = f"layer {self.layer}" if self.layer is not None else "model"
        return (f"tuned alone {r.alone_s * 1e6:.1f} us, but the {where} at {self.tokens} tokens was "
                f"{r.gain * 100:.0f}% faster with the deploy answer (measured {self.date or 'at an unknown date'}"
                f"{', ' + self.env['card'] if self.env.get('card') else ''}; {self.study})")


def check_from(data: Mapping, where: str) -> LayerCheck:
    """A LayerCheck from its JSON form (EmmyError naming `where` when malformed). A check of a
    newer schema is returned as it is, with only its schema and kernels read, for the caller to
    report as stale."""
    try:
        schema = int(data.get("schema", 0))
        kernels = {str(k): str(v) for k, v in dict(data["kernels"]).items()}
        if schema > LAYER_SCHEMA:
            return LayerCheck(signature=str(data.get("signature", "")), target=str(data.get("target", "")),
                              tokens=int(data.get("tokens", 0)), kernels=kernels, tuned_s=0.0, tuned_spread=0.0,
                              deploy_s=0.0, deploy_spread=0.0, final_s=0.0, final_spread=0.0, schema=schema,
                              date=str(data.get("date", "")))
        reverted = {str(k): Reverted(str(r["kernel"]), dict(r["tuned"]), dict(r["deploy"]), float(r["alone_s"]),
                                     float(r["gain"])) for k, r in dict(data.get("reverted") or {}).items()}
        layer = data.get("layer")
        return LayerCheck(
            signature=str(data["signature"]), target=str(data["target"]), tokens=int(data["tokens"]),
            kernels=kernels, tuned_s=float(data["tuned_s"]), tuned_spread=float(data["tuned_spread"]),
            deploy_s=float(data["deploy_s"]), deploy_spread=float(data["deploy_spread"]),
            final_s=float(data["final_s"]), final_spread=float(data["final_spread"]), reverted=reverted,
            model=str(data.get("model", "")), layer=None if layer is None else int(layer), part=str(data.get("part", "")),
            env={str(k): str(v) for k, v in dict(data.get("env") or {}).items()}, date=str(data.get("date", "")),
            schema=schema, chosen={str(k): dict(v) for k, v in dict(data.get("chosen") or {}).items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise EmmyError(f"{where}: a malformed layer check ({first_line(e)})") from None


def write_layer_check(store, check: LayerCheck) -> None:
    """Keep `check` in the store (its study made where missing; a check of the same layer made
    before is replaced: the newer measurement of the same tuned answers)."""
    write_layer_data(store, check.study, check.to_json())


def write_layer_data(store, name: str, data: Mapping) -> None:
    """Keep a check's JSON form as the study `name`'s attribute (an import writes what it read)."""
    import optuna

    from emmy.records.store import store_errors

    with store_errors(store.name):
        try:
            study = optuna.create_study(study_name=name, storage=store.storage, direction="minimize")
        except optuna.exceptions.DuplicatedStudyError:
            study = store.load(name)
        study.set_user_attr(LAYER_ATTR, dict(data))


def layer_checks(store) -> dict[str, LayerCheck]:
    """Every layer check in the store, by study name (a malformed one is an EmmyError naming it)."""
    from emmy.records.store import store_errors

    out = {}
    with store_errors(store.name):
        names = store.layer_names()
        attrs = {name: store.study_attrs(name) or {} for name in names}
    for name in names:
        data = attrs[name].get(LAYER_ATTR)
        if data is None:
            continue
        out[name] = check_from(data, f"store {store.name}: {name}")
    return out


__all__ = [
    "LAYER_ATTR", "LAYER_PREFIX", "LAYER_SCHEMA", "LayerCheck", "Reverted", "check_from", "layer_checks",
    "layer_signature", "unversioned", "write_layer_check", "write_layer_data",
]
