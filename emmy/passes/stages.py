"""Which stage a module is at, and the check each conversion pass makes of its input.

A module is at the latest stage whose dialect has an operation in it: a tile-stage module still
holds loop-stage bodies inside its `tile.kernel`s, so "latest" rather than "only". A conversion
pass (`convert-<a>-to-<b>`) converts a module at the stage before it in the pipeline; given a
module at another stage it stops with an error that names both stages and the file to give it
instead, rather than fail later on some operation it does not know, or print the input unchanged.

    emmy-opt 00-torch-import.mlir -p convert-kernel-to-cuda
    error: convert-kernel-to-cuda: the input is at the torch stage (torch.rms_norm in @layer0);
    convert-kernel-to-cuda converts a module at the kernel stage
    give it a module at the kernel stage, such as the output of kernel-overlap-launches
    (09-kernel-overlap-launches.mlir in a dump directory)
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from emmy.context import STAGES
from emmy.diagnostics import EmmyError
from emmy.passes.pipeline import PIPELINE


def _stage_of(op: Operation) -> str | None:
    prefix = op.name.partition(".")[0]
    return prefix if prefix in STAGES else None


def module_stage(module: ModuleOp) -> str | None:
    """The latest stage with an operation in `module`; None when no stage dialect has one."""
    seen = {_stage_of(op) for op in module.walk()}
    latest = [stage for stage in STAGES if stage in seen]
    return latest[-1] if latest else None


def input_stage(pass_name: str) -> tuple[str, str]:
    """(stage, file) a pipeline pass takes as input: the stage after the pass before it (torch
    for the first), and the dump file that holds such a module."""
    names = [name for name, *_ in PIPELINE]
    i = names.index(pass_name)
    if i == 0:
        return "torch", "00-torch-import.mlir"
    prev, _, _, stage = PIPELINE[i - 1]
    return stage, f"{i:02d}-{prev}.mlir"


def require_input_stage(module: ModuleOp, pass_name: str) -> None:
    """Raise EmmyError when `module` is at a stage other than the one `pass_name` converts (a
    module with no stage operation at all has nothing to convert and passes)."""
    found = module_stage(module)
    expected, file = input_stage(pass_name)
    if found is None or found == expected:
        return
    op = next(op for op in module.walk() if _stage_of(op) == found)
    top = op
    while top.parent_op() is not None and top.parent_op() is not module:
        top = top.parent_op()
    name = top.properties.get("sym_name") or top.attributes.get("sym_name")
    where = op.name if name is None else f"{op.name} @{name.data}" if top is op else f"{op.name} in @{name.data}"
    raise EmmyError(
        f"{pass_name}: the input is at the {found} stage ({where}); "
        f"{pass_name} converts a module at the {expected} stage",
        hint=f"give it a module at the {expected} stage, such as the output of {file[3:-5]} ({file} in a dump directory)"
        if expected != "torch" else f"give it an imported model ({file} in a dump directory)",
    )
