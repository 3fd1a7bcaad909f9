"""convert-loop-to-tile: each `loop.fused` becomes a `tile.kernel` with its knobs undecided.

Input invariant: loop stage (every tensor op inside exactly one `loop.fused`); the module may
carry `emmy.target` (default sm_90; an unknown target is an error naming the valid ones).

Output IR: every `loop.fused` is replaced by a `tile.kernel` with the same name, axes, inputs,
results, discardable attributes and body (moved, not copied), plus its `kind` from
`emmy.analysis.classify` and one undecided `#tile.knob` per knob of that kind, whose domain is
already filtered by the target (`emmy.tuning.knobs.knob_space_for`).

Invariants: the numbers computed are unchanged (the body is the same); knobs stay undecided
until `decide-forks`.

    // before
    %y = loop.fused @silu axes [m = 7, n = 64] ins(%x : tensor<7x64xbf16>) -> tensor<7x64xbf16> {...}
    // after (target sm_90)
    %y = tile.kernel @silu kind "elementwise" axes [m = 7, n = 64] knobs {
        threads = #tile.knob<"threads", [64, 128, 256, 512, 1024]>,
        vector = #tile.knob<"vector", [1, 2, 4, 8]>,
        items = #tile.knob<"items", [1, 2, 4, 8]>
      } ins(%x : tensor<7x64xbf16>) -> tensor<7x64xbf16> {...}
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.analysis.classify import classify
from emmy.dialects.loop import FusedOp
from emmy.dialects.tile import KernelOp, KnobAttr
from emmy.passes.stages import require_input_stage
from emmy.tuning.knobs import knob_space_for
from emmy.targets import Target, module_target


@dataclass
class LoopToKernel(RewritePattern):
    """`loop.fused` -> `tile.kernel` with kind and undecided knobs."""

    target: Target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedOp, rewriter: PatternRewriter) -> None:
        info = classify(op)
        space = knob_space_for(info, self.target)
        knobs = {name: KnobAttr(name, domain) for name, domain in space.items()}
        body = Region()
        op.body.move_blocks(body)
        kernel = KernelOp(
            op.name_str,
            info.kind,
            op.axes,
            knobs,
            list(op.inputs),
            [r.type for r in op.results],
            body,
            attributes=dict(op.attributes),
        )
        for old, new in zip(op.results, kernel.results):
            if old.name_hint:
                new.name_hint = old.name_hint
        rewriter.replace(op, [kernel])


@dataclass(frozen=True)
class ConvertLoopToTilePass(ModulePass):
    """Turn every loop.fused into a tile.kernel (kind + undecided knobs for the module target)."""

    name = "convert-loop-to-tile"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_input_stage(op, self.name)
        target = module_target(op)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([LoopToKernel(target)], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
