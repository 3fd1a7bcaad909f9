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

A launched-early kernel of one wave or less (no more blocks than the target has SMs) whose
shared memory would let two of its blocks share an SM (`smem` at most half an SM's) gets `smem`
raised to half an SM's: one block per SM. Launched early, all
its blocks are placed at once on the SMs the earlier kernel has left, two to an SM where they
fit, and the SMs freed later stay idle. On the H200 the Qwen3 layer at 1024 tokens, with the
o and down projections in 128 x 64 tiles of 96 KiB (128 blocks): 114.4 us overlapped against
108.9 us launched one after another; with 5 stages (120 KiB, one block per SM) 103.9 against
107.5 (`docs/bench/h200-layer-1024-occupancy-2026-12-03c.log`).

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

A one-wave kernel launched early (sm_90a, 132 SMs of 228 KiB):

    kernel.func @o(...) grid [16, 8, 1] block [384, 1, 1] smem 98304 { ... }
    ->
    kernel.func @o(...) grid [16, 8, 1] block [384, 1, 1] smem 116736 { ... }
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from emmy.dialects import kernel as K
from emmy.phase import is_prepare, mark_overlapped
from emmy.targets import Target, module_target

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


def _one_block_per_sm(kf: K.KernelFuncOp, target: Target) -> None:
    """Raise the shared memory of a one-wave kernel that two blocks of could share an SM to half
    an SM's (module docstring)."""
    blocks = prod(kf.grid_dims)
    half = target.smem_per_sm // 2
    if kf.smem_bytes <= half and blocks <= target.sms:
        kf.smem = IntegerAttr(half, i64)


@dataclass(frozen=True)
class KernelOverlapLaunchesPass(ModulePass):
    """Launch each forward-phase kernel after the first with programmatic dependent launch."""

    name = "kernel-overlap-launches"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = module_target(op)
        if not target.has("pdl"):
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
                _one_block_per_sm(kernels[launch.callee.root_reference.data], target)
