"""Reference interpreters: executable meaning for Emmy's stages (numpy values).

- `emmy.interp.numeric`: dtype helpers (`to_numpy`, `round_to`, `element_dtype`, `rel_error`).
- `emmy.interp.torch_stage.run_function(module, args)`: the torch stage, as PyTorch computes it.
- `emmy.interp.tensor_stage.run_function(module, args)`: the tensor stage.

The stage interpreters are imported on demand (each loads its dialect).
"""

from emmy.interp.numeric import element_dtype, rel_error, round_to, to_numpy

__all__ = ["element_dtype", "rel_error", "round_to", "to_numpy"]
