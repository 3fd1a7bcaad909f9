"""Fitting the prior's coefficients to measurements (numpy only).

    prior = fit(samples, target, sources=["records.json"])     # a Prior with residuals and envelope
    r = residuals(samples, coeffs)                              # log(measured) - log(predicted)

The free parameters are the logs of the coefficients (`emmy.prior.model.DEFAULTS`: all positive).
The loss is least squares on log time, robust and anchored:

- Levenberg-Marquardt steps on the log-time residuals (a numeric Jacobian: the model is a few
  maxima and products, cheap to evaluate on all samples at once);
- Huber weights, refreshed each step (residuals past 1.345 robust standard deviations count
  linearly: a mis-measured trial cannot drag the fit);
- a ridge pull toward the defaults (`RIDGE` per parameter, in log units) so a coefficient the
  data say nothing about keeps its physical default instead of wandering;
- each parameter kept within `BOUND` (a factor e^5) of its default, and the efficiencies at or
  below their physical ceilings (`CEILINGS`: a unit at most at its peak), so the fit cannot trade
  a faster-than-peak rate against a slower latency term where the data do not tell them apart.

The residual spread a Prior keeps is per kind and taken within keys (each sample's residual
relative to its key's mean residual): the prior only ever compares candidates of one kernel.

What bounds the prior's picks is measured on keys it was not fitted on (`held_out`): the keys
fall in `FOLDS` folds, each ranked by coefficients fitted to the others; in each held-out key the
top-ranked candidate's residual against every other candidate's is a ranking error, and a kind's
margin is the `QUANTILE` of those errors (as a factor), taken apart for the pairs on the same
arithmetic units and those on different ones (`workers`: ranked through different rates, the
model errs more between them; the held-out records of 2026-12-03 put the 90th percentile of
contractions at x1.34 against x1.62). The same folds decide whether the learned
correction (`emmy.prior.correction`) is kept for a kind: only where it lowers the held-out regret
of the top-ranked pick.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import numpy as np

from emmy.diagnostics import EmmyError
from emmy.prior.correction import correction, fit_correction
from emmy.prior.data import Sample
from emmy.prior.model import DEFAULTS, NAMES, predict
from emmy.prior.store import CATEGORICAL_KNOBS, ENVELOPE_TERMS, MIN_MARGIN, Prior, across_engines

RIDGE = 1e-4
BOUND = 5.0
# Physical ceilings: no unit runs past its peak (L2's bandwidth figure is a published estimate,
# so it may be beaten by a little).
CEILINGS = {"compute_eff": 1.0, "fma_eff": 1.0, "recompute_eff": 1.0, "dram_eff": 1.0, "l2_eff": 2.0}
HUBER = 1.345
# The margin: the QUANTILE of the held-out ranking errors (`held_out`) over FOLDS folds of
# keys, where a kind has at least MIN_PAIRS of them (else the in-sample spread's, `Prior.margin`).
FOLDS = 4
QUANTILE = 0.9
MIN_PAIRS = 10
MAX_STEPS = 60
MIN_SAMPLES = 2


def matrix(samples: Sequence[Sample]) -> dict[str, np.ndarray]:
    """The samples' features as arrays (one entry per sample)."""
    names = samples[0].features.keys()
    return {n: np.array([s.features[n] for s in samples], dtype=float) for n in names}


def log_predict(f: Mapping[str, np.ndarray], theta: np.ndarray) -> np.ndarray:
    """log(predicted seconds) per sample for the log-coefficients `theta`; for a 2-D `theta` (one
    set of coefficients per row) one row of predictions per set (`predict` broadcasts)."""
    with np.errstate(all="ignore"):
        coeffs = np.exp(theta)
        if coeffs.ndim == 2:
            p = predict(f, {n: coeffs[:, j, None] for j, n in enumerate(NAMES)})
        else:
            p = predict(f, dict(zip(NAMES, coeffs)))
        return np.log(np.maximum(p, 1e-30))


def residuals(samples: Sequence[Sample], coeffs: Mapping[str, float]) -> np.ndarray:
    """log(measured) - log(predicted) per sample."""
    theta = np.log([coeffs[n] for n in NAMES])
    y = np.log([s.time_s for s in samples])
    return y - log_predict(matrix(samples), theta)


def fit_coeffs(samples: Sequence[Sample], start: Mapping[str, float] | None = None) -> dict[str, float]:
    """The coefficients that fit `samples` best (module docstring)."""
    if len(samples) < MIN_SAMPLES:
        raise EmmyError(f"fitting the prior needs at least {MIN_SAMPLES} measured candidates, got {len(samples)}")
    f = matrix(samples)
    y = np.log([s.time_s for s in samples])
    theta0 = np.log([DEFAULTS[n] for n in NAMES])
    theta = np.log([(start or DEFAULTS)[n] for n in NAMES])
    lo = theta0 - BOUND
    hi = np.minimum(theta0 + BOUND, np.log([CEILINGS.get(n, np.inf) for n in NAMES]))
    lam = 1e-2
    n = len(samples)
    ridge = math.sqrt(RIDGE * n)

    def weights(r: np.ndarray) -> np.ndarray:
        scale = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), 1e-3)
        a = np.abs(r) / (HUBER * scale)
        return np.where(a <= 1, 1.0, 1.0 / np.maximum(a, 1e-12))

    def stacked(th: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The weighted residuals and the ridge terms at `th`: one vector per row of a 2-D `th`."""
        r = y - log_predict(f, th)
        return np.concatenate([np.sqrt(w) * r, ridge * (th - theta0)], axis=-1)

    steps = np.eye(theta.size) * 1e-5  # the Jacobian's forward differences, all in one prediction
    w = weights(y - log_predict(f, theta))
    cost = float(np.sum(stacked(theta, w) ** 2))
    for _ in range(MAX_STEPS):
        r0 = stacked(theta, w)
        J = ((stacked(theta + steps, w) - r0) / 1e-5).T
        g = J.T @ r0
        H = J.T @ J
        improved = False
        while lam < 1e8:
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-9), -g)
            trial = np.clip(theta + step, lo, hi)
            c = float(np.sum(stacked(trial, w) ** 2))
            if c < cost:
                theta, cost, lam, improved = trial, c, max(lam / 3, 1e-7), True
                break
            lam *= 4
        w = weights(y - log_predict(f, theta))
        cost = float(np.sum(stacked(theta, w) ** 2))
        if not improved or float(np.max(np.abs(step))) < 1e-6:
            break
    return {name: float(v) for name, v in zip(NAMES, np.exp(theta))}


def within_key(samples: Sequence[Sample], r: np.ndarray) -> np.ndarray:
    """Each residual relative to the mean residual of its key."""
    keys = np.array([s.key for s in samples])
    out = r.copy()
    for k in set(keys.tolist()):
        m = keys == k
        out[m] = r[m] - r[m].mean()
    return out


def robust_spread(r: np.ndarray) -> float:
    if r.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(r - np.median(r))))


def fit(samples: Sequence[Sample], target: str, sources: Sequence[str] = (), emmy_version: str = "") -> Prior:
    """A Prior for `target` fitted to `samples`: its coefficients, per kind its residual spread,
    the learned correction where it ranks better on held-out keys, the held-out margin and the
    envelope, and a description of the data (keys and their counts, sources)."""
    coeffs = fit_coeffs(samples)
    raw = residuals(samples, coeffs)
    weights = fit_correction(samples, raw)
    held = held_out(samples, coeffs)
    kinds = sorted({s.kind for s in samples})
    res, env, corr = {}, {}, {}
    for kind in kinds:
        idx = [i for i, s in enumerate(samples) if s.kind == kind]
        ks = {samples[i].key for i in idx}
        plain, learnt = held.get(kind, ({}, {}))
        use = bool(weights.get(kind)) and learnt.get("regret", math.inf) < plain.get("regret", math.inf)
        if use:
            corr[kind] = weights[kind]
        r = within_key(samples, raw - np.array([correction(corr.get(s.kind, {}), s.values) for s in samples]))
        res[kind] = {"spread": round(robust_spread(r[idx]), 6), "keys": len(ks), "trials": len(idx)}
        errors = learnt if use else plain
        same, across = np.array(errors.get("errors", [])), np.array(errors.get("across", []))
        if same.size < MIN_PAIRS:  # too few pairs on one engine: the margin covers them all
            same, across = np.concatenate([same, across]), np.array([])
        if same.size >= MIN_PAIRS:
            res[kind]["held_out"] = _margin(same)
            if across.size >= MIN_PAIRS:
                res[kind]["held_out"]["across"] = _margin(across)
        env[kind] = envelope([samples[i] for i in idx])
    counts: dict[str, int] = {}
    for s in samples:
        counts[s.key] = counts.get(s.key, 0) + 1
    data = {"trials": len(samples), "keys": dict(sorted(counts.items())), "sources": list(sources)}
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Prior(target, coeffs, res, env, data, date, emmy_version, correction=corr)


def _margin(errors: np.ndarray) -> dict:
    """A held-out margin from ranking errors (log factors): their QUANTILE (at least MIN_MARGIN),
    the worst, and how many."""
    return {"margin": round(max(MIN_MARGIN, math.exp(float(np.quantile(errors, QUANTILE)))), 4),
            "worst": round(math.exp(float(errors.max())), 4), "pairs": int(errors.size)}


def folds(samples: Sequence[Sample]) -> list[set[str]]:
    """The keys of `samples` in `FOLDS` groups (every FOLDS-th key in id order; fewer groups
    with fewer keys, none with one key: nothing would be left to fit on)."""
    keys = sorted({s.key for s in samples})
    n = min(FOLDS, len(keys))
    return [] if n < 2 else [set(keys[i::n]) for i in range(n)]


def held_out(samples: Sequence[Sample], coeffs: Mapping[str, float]) -> dict[str, tuple[dict, dict]]:
    """Per kind, how the prior ranks keys held out of its fit (cross-validated over `folds`, each
    fit started from `coeffs`), without and with the learned correction: for each, `errors`, in
    each held-out key the log-time residual of the candidate predicted fastest minus that of
    every other candidate on the same arithmetic units (a positive error e: the top-ranked
    candidate measured exp(e) times slower, against that other candidate, than predicted; what a
    margin must cover for the pick not to measure slower than the anchor), `across`, the same
    against candidates on other units (`emmy.prior.store.across_engines`), and `regret`, the
    geometric mean over the held-out keys of the top-ranked candidate's measured time over the
    best."""
    acc: dict[str, tuple[dict, dict]] = {}
    for held in folds(samples):
        train = [s for s in samples if s.key not in held]
        test = [s for s in samples if s.key in held]
        if len(train) < MIN_SAMPLES:  # the other folds hold too little to fit
            continue
        fold = fit_coeffs(train, start=coeffs)
        weights = fit_correction(train, residuals(train, fold))
        r = residuals(test, fold)
        y = np.log([s.time_s for s in test])
        by_key: dict[str, list[int]] = {}
        for i, s in enumerate(test):
            by_key.setdefault(s.key, []).append(i)
        for idx in by_key.values():
            kind = test[idx[0]].kind
            c = np.array([correction(weights.get(kind, {}), test[i].values) for i in idx])
            for variant, rr in zip(acc.setdefault(kind, ({}, {})), (r[idx], r[idx] - c)):
                logp = y[idx] - rr
                top = min(range(len(idx)), key=lambda j: (logp[j], j))
                for j in range(len(idx)):
                    if j != top:
                        across = across_engines(test[idx[top]].values, test[idx[j]].values)
                        variant.setdefault("across" if across else "errors", []).append(float(rr[top] - rr[j]))
                variant.setdefault("regrets", []).append(float(y[idx][top] - y[idx].min()))
    for variants in acc.values():
        for v in variants:
            v["regret"] = math.exp(float(np.mean(v.pop("regrets"))))
    return acc


def envelope(samples: Sequence[Sample]) -> dict[str, list]:
    """Per term, [lo, hi] of log1p(term) over the samples; per categorical knob, the values seen."""
    out: dict[str, list] = {}
    for term in ENVELOPE_TERMS:
        v = [math.log1p(max(0.0, s.features[term])) for s in samples if term in s.features]
        if v:
            out[term] = [round(min(v), 6), round(max(v), 6)]
    for knob in CATEGORICAL_KNOBS:
        seen = sorted({str(s.values[knob]) for s in samples if knob in s.values})
        if seen:
            out[knob] = seen
    return out


__all__ = ["fit", "fit_coeffs", "folds", "held_out", "matrix", "residuals", "robust_spread", "within_key"]
