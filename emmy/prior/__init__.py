"""The prior: the cost model that ranks a kernel's schedules when nothing was measured (the last
tier of the deploy evidence hierarchy; docs page 8, "inside the prior").

- `features`: a candidate's physical terms from its plan and the target's hardware table.
- `model`: `predict(features, coeffs)` -> seconds, `DEFAULTS`, `rank(info, points, target, prior)`.
- `store`: `Prior` (coefficients, residual spread, envelope), `load_prior` / `write_prior` of
  `golden/<target>/prior.json`.
- `choose`: the bounded choice, `prior_decision(info, target, space, prior, fixed)`: the rules'
  answer as the anchor, replaced only when the prior predicts a gain over its margin.
- `data`: the tuning store's trials (or an export) as samples; `fit`: the coefficients fitted
  to them; `evaluate`: regret on keys held out of the fit.
"""
