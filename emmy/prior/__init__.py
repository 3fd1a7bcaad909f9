"""The prior: the cost model that ranks a kernel's schedules when nothing was measured (the last
tier of the deploy evidence hierarchy; docs page 8, "inside the prior").

- `features`: a candidate's physical terms from its plan and the target's hardware table.
- `model`: `predict(features, coeffs)` -> seconds, `DEFAULTS`, `rank(info, points, target, prior)`.
- `store`: `Prior` (coefficients, residual spread, held-out margin, envelope, correction),
  `load_prior` / `write_prior` of `golden/<target>/prior.json`.
- `choose`: the bounded choice, `prior_decision(info, target, space, prior, fixed)`: the rules'
  answer as the anchor, replaced only when the prior predicts a gain over its margin.
- `correction`: the learned correction, a log-time weight per knob value for what the model
  misses (kept per kind only where it ranks held-out keys better).
- `data`: the tuning store's trials (or an export) as samples; `fit`: the coefficients fitted
  to them, the correction and the margin calibrated on held-out keys; `evaluate`: regret on
  keys held out of the fit.
"""
