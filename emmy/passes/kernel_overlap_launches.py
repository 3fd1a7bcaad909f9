"""`kernel-overlap-launches`: each launch may start while the one before it finishes.

On targets with programmatic dependent launch (`pdl`: sm_90, sm_90a) a kernel can be launched
before the kernel ahead of it on the stream has completed: its blocks take the multiprocessors
that the earlier grid's last blocks leave free, and it runs its own start-up (the launch itself,
setting up shared memory) under the earlier kernel's tail. It must not touch global memory
before the earlier kernel is done, so it waits for it (`griddepcontrol.wait`) first; the earlier
kernel says when its successor may start launching (`griddepcontrol.launch_dependents`). In a
layer of eight kernels the launches then no longer leave the GPU idle between kernels.

Input invariant: a kernel-stage module (after `convert-tile-to-kernel`).

Output IR: in every host function, each forward-phase `kernel.launch` after the first gets the
discardable attribute `emmy.overlap` (launch with the programmatic stream serialization
attribute). Every `kernel.func` such a launch runs begins with
`kernel.call "emmy::grid_dependency_wait"()`, and every `kernel.func` launched right before one
ends with `kernel.call "emmy::allow_dependents"()` (at its end, not its start: the successor's
blocks then take multiprocessors only as this kernel's blocks finish). Prepare-phase launches
(run once, when the weights are bound) are left as they are. On other targets the module is
unchanged.

Invariants: the numbers and the launch order are unchanged (each kernel still reads what the
kernels before it wrote, because it waits before its first global access); the launch geometry
is unchanged.

Before / after (sm_90):

    kernel.func @norm(...) grid [...] block [...] smem 0 { ... }
    kernel.func @proj(...) grid [...] block [...] smem 0 { ... }
    kernel.launch @norm(%x, %s) : ...
    kernel.launch @proj(%x, %w, %s, %y) : ...

    kernel.func @norm(...) grid [...] block [...] smem 0 {
      ...
      kernel.call "emmy::allow_dependents"() : () -> ()
    }
    kernel.func @proj(...) grid [...] block [...] smem 0 {
      kernel.call "emmy::grid_dependency_wait"() : () -> ()
      ...
    }
    kernel.launch @norm(%x, %s) : ...
    kernel.launch @proj(%x, %w, %s, %y) {emmy.overlap} : ...
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from emmy.dialects import kernel as K
from emmy.phase import is_prepare, mark_overlapped
from emmy.targets import module_target

WAIT = "emmy::grid_dependency_wait"
ALLOW = "emmy::allow_dependents"


def _forward_launches(f: func.FuncOp) -> list[K.LaunchOp]:
    return [op for op in f.body.ops if isinstance(op, K.LaunchOp) and not is_prepare(op)]


def _call_once(kf: K.KernelFuncOp, callee: str, *, first: bool) -> None:
    """Put `kernel.call callee()` first in the kernel's body, or last (before its
    kernel.return), unless the body already calls it."""
    block = kf.body.block
    if any(isinstance(op, K.CallOp) and op.callee.data == callee for op in block.ops):
        return
    call = K.CallOp(callee, [], [])
    at = block.first_op if first else block.last_op
    if at is not None and (first or isinstance(at, K.ReturnOp)):
        block.insert_op_before(call, at)
    else:
        block.add_op(call)


@dataclass(frozen=True)
class KernelOverlapLaunchesPass(ModulePass):
    """Launch each forward-phase kernel after the first with programmatic dependent launch."""

    name = "kernel-overlap-launches"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not module_target(op).has("pdl"):
            return
        kernels = {k.sym_name.data: k for k in op.body.ops if isinstance(k, K.KernelFuncOp)}
        for f in op.body.ops:
            if not isinstance(f, func.FuncOp):
                continue
            launches = _forward_launches(f)
            for before, launch in zip(launches, launches[1:]):
                mark_overlapped(launch)
                _call_once(kernels[before.callee.root_reference.data], ALLOW, first=False)
                _call_once(kernels[launch.callee.root_reference.data], WAIT, first=True)
