"""The prior's learned correction: what the physical model misses about single knob values.

    weights = fit_correction(samples, r)         # kind -> {"block_n=256": 0.05, ...} (log units)
    factor = math.exp(correction(weights.get(kind, {}), values))

A ridge regression of the model's log-time residuals on the candidate's knob values (one
indicator per `knob=value`), per kind of kernel. Both sides are centred within each key first:
the prior only ever compares candidates of one kernel, so only what a knob value adds against the
other candidates of the same key is learnt (a constant error per key is not). The pull toward 0
(`LAMBDA`) keeps a value seen in few candidates near 0; a value never seen adds nothing. The fit
(`emmy.prior.fit`) keeps a kind's correction only where it lowers the regret of the top-ranked
pick on keys held out of it, and stores the weights in the prior file, so every predicted time
stays explainable: the model's time times exp(the sum of the candidate's weights).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

LAMBDA = 3.0  # the ridge pull, in units of one candidate's squared indicator


def knob_terms(values: Mapping[str, object]) -> list[str]:
    """The indicator names of a candidate's knob values, "knob=value"."""
    return [f"{k}={v}" for k, v in sorted(values.items())]


def correction(weights: Mapping[str, float], values: Mapping[str, object]) -> float:
    """The log-time correction of a candidate: the sum of the weights of its knob values."""
    return float(sum(weights.get(t, 0.0) for t in knob_terms(values)))


def fit_correction(samples: Sequence, r: np.ndarray) -> dict[str, dict[str, float]]:
    """Per kind, the ridge weights of the residuals `r` (log measured - log predicted, one per
    sample) on the samples' knob values, both centred within keys (module docstring)."""
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({s.kind for s in samples}):
        idx = [i for i, s in enumerate(samples) if s.kind == kind]
        names = sorted({t for i in idx for t in knob_terms(samples[i].values)})
        col = {n: j for j, n in enumerate(names)}
        X = np.zeros((len(idx), len(names)))
        for row, i in enumerate(idx):
            for t in knob_terms(samples[i].values):
                X[row, col[t]] = 1.0
        y = np.asarray(r, dtype=float)[idx].copy()
        keys = np.array([samples[i].key for i in idx])
        for k in set(keys.tolist()):
            m = keys == k
            X[m] -= X[m].mean(axis=0)
            y[m] -= y[m].mean()
        w = np.linalg.solve(X.T @ X + LAMBDA * np.eye(len(names)), X.T @ y)
        out[kind] = {n: round(float(v), 6) for n, v in zip(names, w) if abs(v) >= 1e-6}
    return out


__all__ = ["LAMBDA", "correction", "fit_correction", "knob_terms"]
