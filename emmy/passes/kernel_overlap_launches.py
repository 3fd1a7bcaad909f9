"""`kernel-overlap-launches`: each launch may start while the one before it finishes.

On targets with programmatic dependent launch (`pdl`: sm_90, sm_90a) a kernel can be launched
before the kernel ahead of it on the stream has completed: its blocks take the multiprocessors
that the earlier grid's last blocks leave free, and it runs its own start-up (the launch itself,
setting up shared memory) under the earlier kernel's tail. It must not touch what the earlier
kernel writes (nor write what it reads) before the earlier kernel is done, so it waits for it
(`griddepcontrol.wait`) first, or just before it does (a late wait, below); the earlier
kernel says when its successor may start launching (`griddepcontrol.launch_dependents`). In a
layer of eight kernels the launches then no longer leave the GPU idle between kernels.

Input invariant: a kernel-stage module (after `convert-tile-to-kernel`).

Output IR: in every host function, each forward-phase `kernel.launch` after the first gets the
discardable attribute `emmy.overlap` (launch with the programmatic stream serialization
attribute). Every `kernel.func` such a launch runs waits (`kernel.call
"emmy::grid_dependency_wait"()`) before anything else it does, and every `kernel.func` launched
right before one ends with `kernel.call "emmy::allow_dependents"()` (at its end, not its start:
the successor's blocks then take multiprocessors only as this kernel's blocks finish). Prepare-phase launches
(run once, when the weights are bound) are left as they are. On other targets the module is
unchanged.

**A late wait.** A kernel whose lowering put its wait later (a warp-specialized product whose
epilogue reads the row statistics of the statistics kernel launched just before it: its
consumers wait in their last k-step, emmy/lowering/contraction.py) keeps it there when nothing
before the wait, in its own block or an enclosing one, touches a buffer that a launch not yet
finished writes, or writes one it reads (`emmy.analysis.global_access`; the function's
arguments count as one buffer). The launches not yet finished are the one before it and, while
that one waits late too, the ones before that (it may let its successor start before it has
waited). The kernel before a late waiter that does not wait late itself lets it start right
after its own wait (or first thing, launched first), so the product's k loop runs beside it.
Everywhere else the wait moves first.

A launched-early kernel of one wave or less (no more blocks than the target has SMs) whose
shared memory would let two of its blocks share an SM (`smem` at most half an SM's) gets `smem`
raised to half an SM's: one block per SM (unless the launch after it waits late: that one's
blocks are to run beside it). Launched early, all
its blocks are placed at once on the SMs the earlier kernel has left, two to an SM where they
fit, and the SMs freed later stay idle. On the H200 the Qwen3 layer at 1024 tokens, with the
o and down projections in 128 x 64 tiles of 96 KiB (128 blocks): 114.4 us overlapped against
108.9 us launched one after another; with 5 stages (120 KiB, one block per SM) 103.9 against
107.5 (`docs/bench/h200-layer-1024-occupancy-2026-12-03c.log`).

Invariants: the numbers and the launch order are unchanged (each kernel still reads what the
kernels before it wrote, because it waits before it touches anything they touch); the launch
geometry is unchanged.

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
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import BlockArgument, SSAValue
from xdsl.passes import ModulePass

from emmy.analysis.global_access import GlobalAccess, global_access, is_wait
from emmy.dialects import kernel as K
from emmy.phase import ALLOW_DEPENDENTS, DEPENDENCY_WAIT, is_prepare, mark_overlapped
from emmy.targets import Target, module_target


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


def _wait_first(kf: K.KernelFuncOp) -> None:
    """Every dependency wait of the kernel replaced by one before anything else it does."""
    for op in list(kf.walk()):
        if is_wait(op):
            op.detach()
            op.erase()
    _call_once(kf, DEPENDENCY_WAIT, first=True)


def _allow_early(kf: K.KernelFuncOp) -> None:
    """Let the next launch start as soon as this kernel's blocks have waited (or at once)."""
    block = kf.body.block
    call = K.CallOp(ALLOW_DEPENDENTS, [], [])
    first = block.first_op
    if first is not None and is_wait(first):
        block.insert_op_after(call, first)
    elif first is not None:
        block.insert_op_before(call, first)
    else:
        block.add_op(call)


def _one_block_per_sm(kf: K.KernelFuncOp, target: Target) -> None:
    """Raise the shared memory of a one-wave kernel that two blocks of could share an SM to half
    an SM's (module docstring)."""
    blocks = prod(kf.grid_dims)
    half = target.smem_per_sm // 2
    if kf.smem_bytes <= half and blocks <= target.sms:
        kf.smem = IntegerAttr(half, i64)


class _Buffers:
    """The buffers (launch operands) a launch reads and writes, by its kernel's accesses. The
    function's own arguments count as one buffer: the caller may pass one tensor for two."""

    def __init__(self, launch: K.LaunchOp, access: GlobalAccess):
        self.args = list(launch.args)
        self.reads = self._of(access.reads)
        self.writes = self._of(access.writes)
        self.early_reads = self._of(access.early_reads)
        self.early_writes = self._of(access.early_writes)

    def _of(self, params: set[int]) -> set:
        return {_buffer(self.args[i]) for i in params if isinstance(self.args[i].type, TensorType)}


def _buffer(v: SSAValue):
    return "function arguments" if isinstance(v, BlockArgument) else v


def _late_wait_holds(s: _Buffers, unfinished: list[_Buffers]) -> bool:
    """Whether a kernel that touches `s.early_*` before its wait may start beside the launches
    `unfinished` (those that may not have finished when it starts)."""
    for p in unfinished:
        if s.early_reads & p.writes or s.early_writes & (p.reads | p.writes):
            return False
    return True


@dataclass(frozen=True)
class KernelOverlapLaunchesPass(ModulePass):
    """Launch each forward-phase kernel after the first with programmatic dependent launch."""

    name = "kernel-overlap-launches"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = module_target(op)
        if not target.has("pdl"):
            return
        kernels = {k.sym_name.data: k for k in op.body.ops if isinstance(k, K.KernelFuncOp)}
        launches_of: dict[str, list[tuple[list[K.LaunchOp], int]]] = {}
        chains = []
        for f in op.body.ops:
            if isinstance(f, func.FuncOp):
                chain = _forward_launches(f)
                chains.append(chain)
                for i, launch in enumerate(chain):
                    launches_of.setdefault(launch.callee.root_reference.data, []).append((chain, i))

        def kernel(launch: K.LaunchOp) -> K.KernelFuncOp:
            return kernels[launch.callee.root_reference.data]

        # where each kernel waits: late (its lowering's place) only where every launch of it
        # that overlaps the one before touches nothing before the wait that the launches not
        # yet finished touch; a kernel whose blocks wait late may let its own successor start
        # before its predecessor has finished, so those count too
        late: dict[str, bool] = {}
        for chain in chains:
            for i, launch in enumerate(chain):
                name = launch.callee.root_reference.data
                kf = kernel(launch)
                access = global_access(kf)
                if i == 0:
                    continue
                unfinished = []
                for j in range(i - 1, -1, -1):
                    unfinished.append(_Buffers(chain[j], global_access(kernel(chain[j]))))
                    if j == 0 or late.get(chain[j].callee.root_reference.data) is not True:
                        break
                holds = access.waits and not access.waits_first and _late_wait_holds(_Buffers(launch, access), unfinished)
                late[name] = late.get(name, True) and holds

        for chain in chains:
            for i, launch in enumerate(chain[1:], 1):
                mark_overlapped(launch)
                name = launch.callee.root_reference.data
                if not late.get(name):
                    _wait_first(kernel(launch))
                # (not where the next launch waits late: its blocks need room beside these)
                after = chain[i + 1].callee.root_reference.data if i + 1 < len(chain) else None
                if not late.get(after):
                    _one_block_per_sm(kernel(launch), target)
        # who lets the next launch start: right after its own wait where the next waits late
        # (its k loop then runs beside this kernel), else at its end
        for chain in chains:
            for before, launch in zip(chain, chain[1:]):
                kb = kernel(before)
                if late.get(launch.callee.root_reference.data) and not late.get(before.callee.root_reference.data):
                    _allow_early(kb)
                _call_once(kb, ALLOW_DEPENDENTS, first=False)
