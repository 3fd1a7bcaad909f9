"""The pipeline: Emmy's passes in the order a compile runs them.

This file is the one place the order lives. It reads top to bottom like the diagram on page 1:

    torch --decompose--> tensor --to loops, fuse--> loop --tile lowering--> tile
          --decide forks--> tile --kernel lowering--> kernel --overlap launches--> kernel --> cuda
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

# (pass name, module under emmy.passes, class name, stage the module is in after the pass)
PIPELINE: tuple[tuple[str, str, str, str], ...] = (
    ("convert-torch-to-tensor", "convert_torch_to_tensor", "ConvertTorchToTensorPass", "tensor"),
    ("tensor-merge-siblings", "tensor_merge_siblings", "TensorMergeSiblingsPass", "tensor"),
    ("convert-tensor-to-loop", "convert_tensor_to_loop", "ConvertTensorToLoopPass", "loop"),
    ("loop-fuse", "loop_fuse", "LoopFusePass", "loop"),
    ("loop-hoist-params", "loop_hoist_params", "LoopHoistParamsPass", "loop"),
    ("convert-loop-to-tile", "convert_loop_to_tile", "ConvertLoopToTilePass", "tile"),
    ("decide-forks", "decide_forks", "DecideForksPass", "tile"),
    ("convert-tile-to-kernel", "convert_tile_to_kernel", "ConvertTileToKernelPass", "kernel"),
    ("kernel-overlap-launches", "kernel_overlap_launches", "KernelOverlapLaunchesPass", "kernel"),
    ("convert-kernel-to-cuda", "convert_kernel_to_cuda", "ConvertKernelToCudaPass", "cuda"),
)

# Passes that are not part of the default pipeline but can be run with emmy-opt.
EXTRA_PASSES: tuple[tuple[str, str, str], ...] = (
    # the loop dialect's canonicalization alone (loop-fuse applies it between fusions)
    ("loop-canonicalize", "loop_canonicalize", "LoopCanonicalizePass"),
)


def _factory(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        return getattr(importlib.import_module(f"emmy.passes.{module}"), cls)

    return load


def all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every pass Emmy defines, by name, as lazy factories (xDSL's registry convention)."""
    passes = {name: _factory(module, cls) for name, module, cls, _ in PIPELINE}
    passes.update({name: _factory(module, cls) for name, module, cls in EXTRA_PASSES})
    return passes


def pass_names() -> list[str]:
    return [name for name, *_ in PIPELINE] + [name for name, *_ in EXTRA_PASSES]


def stage_after(pass_name: str) -> str:
    for name, _, _, stage in PIPELINE:
        if name == pass_name:
            return stage
    raise KeyError(pass_name)
