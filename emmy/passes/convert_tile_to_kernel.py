"""convert-tile-to-kernel: every decided `tile.kernel` becomes explicit GPU code.

Each `tile.kernel` is planned (`emmy.schedule.plan.plan_kernel`: its decided knobs on the
module's `emmy.target`, split into parts where its outputs lie over different axes) and each part
handed with its plan to the builder of its kind, `emmy.lowering.<kind>.build(op, info, plan)`; the
plan holds every number the builder uses. The builder returns `kernel.func` ops plus the launches computing the
tile op's results (and the temporary buffers they need). The pass puts the `kernel.func`s at
module level, before the function, and replaces the tile op in the function by `kernel.empty`
buffers (its results and temporaries) and `kernel.launch`es, in order.

A contraction whose epilogue computes an attention's Q and K (its plan's `qk`: fusion =
epilogue) takes that attention's other inputs too (launch arguments `Peer`); every such attention
is checked to have its pair first (`emmy.schedule.qk_epilogue.check_pairs`).

Input invariant: tile stage, every knob decided (`decide-forks`).
Output IR: module-level `kernel.func`s; functions hold `kernel.empty`, `kernel.launch`,
`arith.constant` (scalar launch arguments) and `func.return`.
Invariants: function signatures unchanged; each result of a tile op becomes one buffer, written
by the launches that replaced it; kernel names are the tile ops' `sym_name` (helpers get a suffix).

    // before
    %y = tile.kernel @silu kind "elementwise" axes [m = 512, n = 1024] knobs {...decided...}
        ins(%x : tensor<512x1024xbf16>) -> tensor<512x1024xbf16> { ... }
    // after
    kernel.func @silu(%x: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [256, 1, 1] block [256, 1, 1] smem 0 { ... }
    func.func @f(...) {
      %y = kernel.empty : tensor<512x1024xbf16>
      kernel.launch @silu(%x, %y) : tensor<512x1024xbf16>, tensor<512x1024xbf16>
    }
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from emmy.lowering import Built, In, Out, Peer, Scalar, Tmp
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.tile import KernelOp
from emmy.passes.stages import require_input_stage
from emmy.phase import is_prepare, mark_prepare
from emmy.schedule.plan import plan_kernel
from emmy.schedule.qk_epilogue import check_pairs
from emmy.targets import Target, module_target


def builder_for(kind: str):
    """The `build` function of `emmy.lowering.<kind>`."""
    try:
        module = importlib.import_module(f"emmy.lowering.{kind}")
    except ModuleNotFoundError as e:
        if e.name == f"emmy.lowering.{kind}":
            raise EmmyError(f"convert-tile-to-kernel: no kernel builder for kind '{kind}'") from None
        raise
    build = getattr(module, "build", None)
    if build is None:
        raise EmmyError(f"convert-tile-to-kernel: emmy.lowering.{kind} has no build()")
    return build


def build_kernel(op: KernelOp, target: Target) -> Built:
    """Run the builder of `op`'s kind on each part of its plan (`emmy.schedule.plan.plan_kernel`,
    which checks that every knob is decided)."""
    from emmy.lowering.split import build_parts

    builder = builder_for(op.kind.data)
    kplan = plan_kernel(op, target)
    if kplan.merge == "single":
        part = kplan.parts[0]
        return builder(op, part.info, part.plan)
    return build_parts(kplan, builder)


class LowerTileKernel(RewritePattern):
    def __init__(self, target: Target):
        self.target = target
        self.names: set[str] = set()

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: KernelOp, rewriter: PatternRewriter) -> None:
        built = build_kernel(op, self.target)
        host = op.parent_op()
        while host is not None and not isinstance(host.parent_op(), ModuleOp):
            host = host.parent_op()
        if host is None:
            raise EmmyError(f"tile.kernel @{op.kernel_name}: must be inside a function of a module")
        renames: dict[str, str] = {}
        for f in built.funcs:
            name = f.sym_name.data
            unique = name
            n = 1
            while unique in self.names:
                unique = f"{name}_{n}"
                n += 1
            self.names.add(unique)
            renames[name] = unique
            if unique != name:
                f.sym_name = StringAttr(unique)
            rewriter.insert(f, InsertPoint.before(host))
        outs: list[SSAValue] = []
        for r in op.results:
            e = K.EmptyOp(r.type)
            e.result.name_hint = r.name_hint or op.kernel_name
            rewriter.insert(e, InsertPoint.before(op))
            outs.append(e.result)
        temps: list[SSAValue] = []
        for i, t in enumerate(built.temps):
            e = K.EmptyOp(t, zeroed=i in built.zeroed)
            e.result.name_hint = f"{op.kernel_name}_{'counters' if i in built.zeroed else 'tmp'}"
            rewriter.insert(e, InsertPoint.before(op))
            temps.append(e.result)
        for launch in built.launches:
            args: list[SSAValue] = []
            for a in launch.args:
                if isinstance(a, In):
                    args.append(op.operands[a.index])
                elif isinstance(a, Out):
                    args.append(outs[a.index])
                elif isinstance(a, Tmp):
                    args.append(temps[a.index])
                elif isinstance(a, Peer):
                    assert built.peer is not None
                    args.append(built.peer.operands[a.index])
                elif isinstance(a, Scalar):
                    c = arith.ConstantOp(a.value)  # type: ignore[arg-type]
                    rewriter.insert(c, InsertPoint.before(op))
                    args.append(c.result)
                else:  # pragma: no cover
                    raise EmmyError(f"convert-tile-to-kernel: bad launch argument {a}")
            k_launch = K.LaunchOp(renames.get(launch.kernel, launch.kernel), args)
            if is_prepare(op):
                mark_prepare(k_launch)
            rewriter.insert(k_launch, InsertPoint.before(op))
        rewriter.replace(op, [], outs)


@dataclass(frozen=True)
class ConvertTileToKernelPass(ModulePass):
    """Lower every `tile.kernel` through the kernel builder of its kind."""

    name = "convert-tile-to-kernel"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_input_stage(op, self.name)
        target = module_target(op)
        for f in op.body.block.ops:  # an attention's Q/K from a contraction's epilogue: both sides hold
            check_pairs([k for k in f.walk() if isinstance(k, KernelOp)])
        PatternRewriteWalker(
            GreedyRewritePatternApplier([LowerTileKernel(target)], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)


__all__ = ["ConvertTileToKernelPass", "build_kernel", "builder_for"]
