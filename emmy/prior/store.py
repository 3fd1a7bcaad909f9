"""A target's prior: its coefficients, how far to trust them, and the file that keeps them.

    prior = load_prior(Path("golden/sm_90a/prior.json"), "sm_90a")   # DEFAULTS when missing
    prior.margin("contraction")     # the predicted gain a pick must show over the anchor
    prior.penalty("contraction", features)   # >= 1: how far outside the fitted data it lies
    write_prior(path, prior)

`golden/<target>/prior.json` (schema `SCHEMA`):

    {"format": "emmy-prior", "schema": 2, "target": "sm_90a", "emmy": "0.1.0", "date": "...",
     "coefficients": {"compute_eff": 0.71, ...},
     "residuals": {"contraction": {"spread": 0.08, "keys": 40, "trials": 900,
                                   "held_out": {"margin": 1.3, "worst": 2.9, "pairs": 800,
                                                "across": {"margin": 1.6, "worst": 2.9, "pairs": 300}}}, ...},
     "envelope": {"contraction": {"tile_area": [lo, hi], ..., "workers": ["mma_sync", ...]}, ...},
     "data": {"trials": 1500, "keys": {"<key id>": 30, ...}, "sources": ["records.json"]},
     "correction": {"contraction": {"combine=last_block": 0.12, "split_k=16": 0.3, ...}, ...}}

`spread` is the robust standard deviation (1.4826 x the median absolute deviation) of the fit's
log-time residuals, each taken relative to its key's mean (a prior only ever compares candidates
of one kernel). `held_out` is the margin calibrated on keys held out of the fit
(`emmy.prior.fit.held_out`: how much slower than predicted, against another candidate of
its key, the top-ranked candidate measured; `margin` a high quantile of that factor over the
pairs on the same arithmetic units (`workers`), `worst` the largest, `pairs` how many; `across`
the same over the pairs on different units, where there were enough). The envelope holds, per
kind, the range of each of `ENVELOPE_TERMS` (log1p of the term) over the fitted candidates and
the categorical knob values seen.
`correction` holds, per kind where the fit kept it, the learned correction's weights
(`emmy.prior.correction`: log-time per knob value; a candidate's time is the model's times
exp(the sum of its values' weights)). Schema 1 files (no `held_out`, no `correction`) are read:
their margin is the spread's.

The bound (what makes a many-times-slower choice impossible rather than unlikely) lives in
`emmy.prior.choose`; its two inputs are here: `margin(kind)`: the held-out margin, else
`exp(Z * spread)` (at least `MIN_MARGIN`; `DEFAULT_SPREAD` for a kind the fit never saw, and for
the unfitted defaults), and
`penalty(kind, f) = exp(ENVELOPE_PENALTY * d)` for a candidate at distance `d` (log units summed
over the terms, plus one per unseen categorical value) outside the envelope (`emmy.prior.choose`
counts only the distance past the anchor's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from emmy.diagnostics import EmmyError
from emmy.prior.model import DEFAULTS, check_coeffs

FORMAT = "emmy-prior"
SCHEMA = 2  # 2: residuals[kind]["held_out"] (the cross-validated margin) and "correction"; 1 is read
FILE_NAME = "prior.json"

# Standard deviations of the residual spread a pick's predicted gain must exceed.
Z = 2.0
MIN_MARGIN = 1.03  # measurement noise: never switch for less
DEFAULT_SPREAD = 0.35  # an unfitted model's trust: margin exp(0.7) ~ 2x
ENVELOPE_PENALTY = 0.5  # per log unit outside the fitted data
# the problem's size (flops, bytes: a shape never measured lies outside) and the schedule's terms
ENVELOPE_TERMS = ("flops", "unique_bytes", "tile_area", "intensity", "waves", "busy", "stages", "steps",
                  "occupancy", "threads", "workspace_bytes", "launches", "reg_overflow")
CATEGORICAL_KNOBS = ("workers", "schedule", "fusion", "combine", "copy")
# The knob that picks a kernel's arithmetic units (emmy.tuning.knobs): two candidates on different
# units are ranked through different rates and efficiencies, so the prior's error between them is
# larger than between two schedules on the same units, and their margin is calibrated apart.
ENGINE_KNOB = "workers"


def across_engines(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether candidates `a` and `b` run on different arithmetic units (`ENGINE_KNOB`)."""
    return a.get(ENGINE_KNOB) != b.get(ENGINE_KNOB)


@dataclass(frozen=True)
class Prior:
    target: str
    coeffs: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))
    residuals: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # kind -> spread, keys, trials
    envelope: Mapping[str, Mapping[str, list]] = field(default_factory=dict)  # kind -> term -> [lo, hi] / values
    data: Mapping[str, object] = field(default_factory=dict)
    date: str = ""
    emmy: str = ""
    path: str = ""  # the file it was read from ("" for the defaults)
    correction: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # kind -> "knob=value" -> log weight

    @property
    def fitted(self) -> bool:
        return bool(self.residuals)

    def spread(self, kind: str) -> float:
        r = self.residuals.get(kind)
        return float(r["spread"]) if r else DEFAULT_SPREAD

    def corrected(self, kind: str, values: Mapping[str, object]) -> float:
        """The learned correction's factor for a candidate of `kind` (1 where none was kept)."""
        from emmy.prior.correction import correction

        return math.exp(correction(self.correction.get(kind, {}), values))

    def margin(self, kind: str, across: bool = False) -> float:
        """How much faster the prior must predict a candidate than the anchor before it picks it:
        the held-out margin the fit calibrated for the kind, else exp(Z * spread). `across`: the
        candidate runs on other arithmetic units than the anchor (`across_engines`); where the
        fit calibrated a margin for such pairs (`held_out["across"]`) it applies, when larger."""
        held = (self.residuals.get(kind) or {}).get("held_out")
        if held:
            m = float(held["margin"])
            if across and held.get("across"):
                m = max(m, float(held["across"]["margin"]))
            return max(MIN_MARGIN, m)
        return max(MIN_MARGIN, math.exp(Z * self.spread(kind)))

    def distance(self, kind: str, f: Mapping[str, float], values: Mapping[str, object] | None = None) -> float:
        """How far (log units) the terms `f` (and categorical `values`) lie outside the fitted
        data of their kind; 0 inside it, and 0 where the kind was not fitted (the margin then
        carries the doubt)."""
        env = self.envelope.get(kind)
        if not env:
            return 0.0
        d = 0.0
        for term in ENVELOPE_TERMS:
            if term in env and term in f:
                lo, hi = env[term]
                v = math.log1p(max(0.0, f[term]))
                d += max(0.0, v - hi, lo - v)
        for knob in CATEGORICAL_KNOBS:
            if values is not None and knob in env and knob in values and str(values[knob]) not in env[knob]:
                d += 1.0
        return d

    def penalty(self, kind: str, f: Mapping[str, float], values: Mapping[str, object] | None = None,
                base: float = 0.0) -> float:
        """exp(ENVELOPE_PENALTY * (distance - base)), at least 1: `base` is the distance of the
        anchor a candidate is compared with (a shape the fit never saw puts every candidate
        outside; only how much further out than the anchor a candidate lies counts)."""
        return math.exp(ENVELOPE_PENALTY * max(0.0, self.distance(kind, f, values) - base))


def prior_path(golden: Path, target: str) -> Path:
    return Path(golden) / target / FILE_NAME


def load_prior(path: Path, target: str) -> Prior:
    """The prior in `path` for `target`; the defaults (unfitted) when the file does not exist;
    an EmmyError naming the file when it is broken or for another target."""
    path = Path(path)
    if not path.exists():
        return Prior(target)
    where = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise EmmyError(f"{where}:{e.lineno}:{e.colno}: not JSON ({e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise EmmyError(f"{where}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    return prior_from(data, where, target)


def prior_from(data: object, where: str, target: str) -> Prior:
    """A Prior from a prior file's JSON data (checked; EmmyError naming `where`)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EmmyError(f"{where}: not an Emmy prior file (no \"format\": \"{FORMAT}\")")
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise EmmyError(f"{where}: its \"schema\" must be an integer, not {schema!r}")
    if schema > SCHEMA:
        raise EmmyError(f"{where} was written by a newer Emmy (prior schema {schema}; this Emmy reads "
                        f"schema {SCHEMA} and older)", hint="upgrade Emmy, or fit the prior again")
    if data.get("target") != target:
        raise EmmyError(f"{where}: a prior for {data.get('target')!r}, not for {target}")
    coeffs = check_coeffs(data.get("coefficients"), where)
    residuals = data.get("residuals", {})
    if not isinstance(residuals, dict) or not all(
        isinstance(r, dict) and _number(r.get("spread")) and r["spread"] >= 0 for r in residuals.values()
    ):
        raise EmmyError(f"{where}: \"residuals\" must map each kind to an object with a non-negative \"spread\"")
    for kind, r in residuals.items():
        held = r.get("held_out")
        across = held.get("across") if isinstance(held, dict) else None
        for name, m in (("held_out", held), ("held_out.across", across)):
            if m is not None and not (isinstance(m, dict) and _number(m.get("margin")) and m["margin"] >= 1
                                      and _number(m.get("worst")) and isinstance(m.get("pairs"), int)):
                raise EmmyError(f"{where}: residuals of {kind}: \"{name}\" must hold a \"margin\" of at least 1, "
                                f"a \"worst\" factor and a count of \"pairs\"")
    envelope = data.get("envelope", {})
    if not isinstance(envelope, dict) or not all(isinstance(e, dict) for e in envelope.values()):
        raise EmmyError(f"{where}: \"envelope\" must map each kind to an object")
    for kind, env in envelope.items():
        for term, rng in env.items():
            ok = (isinstance(rng, list) and len(rng) == 2 and all(_number(x) for x in rng)) if term in ENVELOPE_TERMS \
                else isinstance(rng, list) and all(isinstance(x, str) for x in rng)
            if not ok:
                raise EmmyError(f"{where}: envelope of {kind}: {term} must be [low, high] numbers or a list of values")
    correction = data.get("correction", {})
    if not isinstance(correction, dict) or not all(
        isinstance(w, dict) and all(isinstance(k, str) and _number(v) for k, v in w.items()) for w in correction.values()
    ):
        raise EmmyError(f"{where}: \"correction\" must map each kind to an object of \"knob=value\": number")
    return Prior(target, coeffs, residuals, envelope, data.get("data", {}) or {}, str(data.get("date", "")),
                 str(data.get("emmy", "")), where, correction)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def prior_json(prior: Prior) -> dict:
    return {
        "format": FORMAT, "schema": SCHEMA, "target": prior.target, "emmy": prior.emmy, "date": prior.date,
        "coefficients": dict(prior.coeffs), "residuals": {k: dict(v) for k, v in prior.residuals.items()},
        "envelope": {k: dict(v) for k, v in prior.envelope.items()}, "data": dict(prior.data),
        "correction": {k: dict(v) for k, v in prior.correction.items()},
    }


def write_prior(path: Path, prior: Prior) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(prior_json(prior), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as e:
        raise EmmyError(f"cannot write '{path}': {e.strerror}") from None


__all__ = ["DEFAULT_SPREAD", "ENGINE_KNOB", "ENVELOPE_PENALTY", "FILE_NAME", "MIN_MARGIN", "Prior", "Z",
           "across_engines", "load_prior", "prior_from", "prior_json", "prior_path", "write_prior"]
