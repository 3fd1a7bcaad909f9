"""`emmy tune`'s search: tasks (one per kernel key), one Optuna study per task, the run.

- `task`: `TuneTask`, `tasks_of(options, tokens)`: every distinct kernel key of a layer or model.
- `study`: a study's first trials, one worker's trial loop, naming the best after re-measuring.
- `tune`: the run (workers, progress bars, outcomes for the final table).
- `cost`: `CostMeasurer`, a deterministic measurer from the plan's predicted facts (no GPU), and
  `make_measurer(spec)`.

Records live in `emmy.records` (the store); measurements come from `emmy.measure`.
"""
