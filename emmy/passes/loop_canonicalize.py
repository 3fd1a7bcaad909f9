"""`loop-canonicalize`: apply the loop dialect's canonicalization patterns until none applies.

Input and output: a loop-stage module. The patterns (`emmy/dialects/loop_canonicalization.py`)
are those `loop-fuse` applies between fusions: index arithmetic folded with the axes' bounds,
loop-invariant ops hoisted out of `loop.reduce`, invariant factors moved out of sums, unused or
repeated inputs dropped, reduction axes merged, common subexpressions and dead scalar ops
removed. Run alone, it cleans a body without fusing anything (xDSL's `canonicalize` does the same
for the ops whose `HasCanonicalizationPatternsTrait` it finds, without the dialect-level
`FoldIndexArith`).

Before / after (a load whose index is `m * 1 + 0`, and an unused input):

    loop.fused @f axes [m = 4] ins(%x, %y : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4xf32>, %ya: tensor<4xf32>):
      %m = loop.axis "m" : index
      %c1 = arith.constant 1 : index
      %i = arith.muli %m, %c1 : index
      %v = loop.load %xa[%i] : tensor<4xf32> -> f32
      ...

    loop.fused @f axes [m = 4] ins(%x : tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%xa: tensor<4xf32>):
      %m = loop.axis "m" : index
      %v = loop.load %xa[%m] : tensor<4xf32> -> f32
      ...
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker

from emmy.dialects.loop_canonicalization import CleanLoops, loop_canonicalization_patterns


@dataclass(frozen=True)
class LoopCanonicalizePass(ModulePass):
    """Canonicalize loop bodies (see the module docstring)."""

    name = "loop-canonicalize"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        clean = CleanLoops()
        PatternRewriteWalker(
            GreedyRewritePatternApplier(loop_canonicalization_patterns(clean)),
            apply_recursively=True,
            walk_regions_first=True,
            listener=clean.listener(),
        ).rewrite_module(op)
