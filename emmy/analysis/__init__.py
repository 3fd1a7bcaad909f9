"""Analyses of Emmy's IR.

- `emmy.analysis.body`: domains of loop-body values and a vectorized numpy evaluator
  (`Domains`, `domain`, `Evaluator`, `evaluate`, `parallel_axes`, `reduction_axes`).
- `emmy.analysis.indexing`: affine forms and bounds of index expressions (`affine_form`,
  `index_bounds`, `load_access`).
- `emmy.analysis.loops`: facts about `loop.fused` ops that fusion decides by (`users`,
  `producers`, `reduce_cost`, `reduces_weights`, ...).
"""
