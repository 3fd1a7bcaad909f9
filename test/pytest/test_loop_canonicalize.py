"""The loop dialect's canonicalization patterns are the ops' `HasCanonicalizationPatternsTrait`:
xDSL's own `canonicalize` pass finds and applies them (the FileCheck test
test/filecheck/passes/loop-canonicalize.mlir checks each pattern through `loop-canonicalize`)."""

from __future__ import annotations

from pathlib import Path

from xdsl.traits import HasCanonicalizationPatternsTrait
from xdsl.transforms.canonicalize import CanonicalizePass

from emmy.context import make_context
from emmy.dialects import loop as L
from emmy.dialects.loop_canonicalization import (
    CseBody,
    DropUnusedInputs,
    FactorOutOfSum,
    FoldIndexArith,
    HoistInvariantOps,
    MergeReductionAxes,
    loop_canonicalization_patterns,
)
from emmy.ir_io import parse_module, print_module
from emmy.passes.loop_canonicalize import LoopCanonicalizePass

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "test" / "filecheck" / "passes" / "loop-canonicalize.mlir"


def _patterns(op: type) -> list[type]:
    (trait,) = op.get_traits_of_type(HasCanonicalizationPatternsTrait)
    return [type(p) for p in trait.get_patterns(op)]


def test_traits_hold_the_patterns_of_their_root_op():
    assert _patterns(L.FusedOp) == [DropUnusedInputs, MergeReductionAxes, CseBody]
    assert _patterns(L.ReduceOp) == [HoistInvariantOps, FactorOutOfSum]
    # the pass tries every pattern: the dialect-level one (rooted at arith ops), then the ops'
    assert [type(p) for p in loop_canonicalization_patterns()] == [
        FoldIndexArith, HoistInvariantOps, FactorOutOfSum, DropUnusedInputs, MergeReductionAxes, CseBody,
    ]


def test_xdsl_canonicalize_applies_the_loop_op_patterns():
    """xDSL's `canonicalize` applies the traits' patterns: on the test cases without index
    arithmetic to fold, its output is loop-canonicalize's."""
    ctx = make_context()
    text = CASES.read_text()
    ours = parse_module(ctx, text, str(CASES))
    LoopCanonicalizePass().apply(ctx, ours)
    theirs = parse_module(ctx, text, str(CASES))
    CanonicalizePass().apply(ctx, theirs)
    funcs = lambda m: {f.sym_name.data: print_module(f) for f in m.body.block.ops}  # noqa: E731
    ours_f, theirs_f = funcs(ours), funcs(theirs)
    for name in ("hoist_invariant_ops", "factor_out_of_sum", "drop_unused_inputs", "merge_reduction_axes", "cse_body"):
        assert theirs_f[name] == ours_f[name], name
    # FoldIndexArith is dialect-level (rooted at arith ops): only loop-canonicalize applies it
    assert "arith.remui" in theirs_f["fold_index_arith"]
    assert "arith.remui" not in ours_f["fold_index_arith"]
