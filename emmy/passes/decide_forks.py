"""decide-forks: answer every knob of every `tile.kernel`; THE place schedule answers are chosen.

Option `pin` (string, default empty): values the user fixes, items separated by `;`:
`KERNEL.KNOB=VALUE`, `*.KNOB=VALUE` or `KNOB=VALUE` (every kernel that has the knob). In a
pipeline the spec is one quoted string (xDSL's option grammar accepts any character in it but
`"` and newlines; `,` also separates items):

    emmy-opt f.mlir -p 'decide-forks{pin="rms_norm_qkv_proj.block_m=64;*.workers=mma_sync"}'

Pins may also be recorded in the module, as the string attribute `emmy.pins` (same syntax):
`emmy compile --knob` puts them there, so replaying this pass on a dump file with `emmy-opt`
gives the same answers. The option's items come first, then the module's.

Each kernel's knobs are answered by the deciders of `emmy.tuning.deciders`, strongest first:
pinned (tier `pinned`), values already decided in the IR (kept with their tier), then the
default rules (tier `rule`). Later the local store, golden files, nearest shapes and the prior
slot in between. Every combination is checked by `emmy.tuning.legality.check`; an illegal pinned
set, a pin naming an unknown kernel or knob, or a value outside a domain is an EmmyError naming
the kernel, the knob and the domain.

Input invariant: tile stage (the module may carry `emmy.target`, default sm_90).
Output IR: every `#tile.knob` decided: same name and domain, plus value, tier and reason.
Invariants: bodies, kinds and domains unchanged; same inputs and evidence give the same output.

    // before
    block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256]>
    // after
    block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 128, "rule", "M=512 N=4096: 128 tiles of 128x128, 1 wave on 132 SMs (97% busy)">

`decisions(module)` lists every knob as a `Decision` (kernel, knob, value, tier, reason) for
`emmy compile --explain` and the dump's decisions file.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.analysis.classify import classify
from emmy.dialects.tile import KernelOp, KnobValue
from emmy.tuning.deciders import Answer, Decider, Problem, decide_kernel, default_deciders
from emmy.tuning.pins import check_pins_used, parse_pins
from emmy.tuning.targets import Target, module_target


@dataclass(frozen=True)
class Decision:
    """One knob of one kernel as decided (value None and tier "" while undecided)."""

    kernel: str
    knob: str
    value: KnobValue | None
    tier: str
    reason: str


def decisions(module: Operation) -> list[Decision]:
    """Every knob of every tile.kernel in the module, in IR order."""
    out = []
    for op in module.walk():
        if isinstance(op, KernelOp):
            for name, k in op.knob_dict().items():
                out.append(Decision(op.kernel_name, name, k.value, k.tier_name, k.reason_text))
    return out


def problem_of(kernel: KernelOp, target: Target) -> Problem:
    """The decision problem of one kernel: its knob space is the domains recorded in the IR."""
    knobs = kernel.knob_dict()
    return Problem(
        kernel=kernel.kernel_name,
        info=classify(kernel),
        target=target,
        space={name: k.values for name, k in knobs.items()},
        recorded={
            name: Answer(k.value, k.tier_name, k.reason_text)
            for name, k in knobs.items()
            if k.value is not None
        },
    )


@dataclass
class DecideKernel(RewritePattern):
    """Decide every knob of one tile.kernel with the given deciders."""

    target: Target
    deciders: list[Decider]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: KernelOp, rewriter: PatternRewriter) -> None:
        problem = problem_of(op, self.target)
        answers = decide_kernel(problem, self.deciders)
        knobs = op.knob_dict()
        new = {
            name: knobs[name].decided(a.value, a.tier, a.reason) for name, a in answers.items()
        }
        if new != knobs:
            op.with_knobs(new)
            rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class DecideForksPass(ModulePass):
    """Decide every knob: pins first, then recorded values, then the default rules."""

    name = "decide-forks"
    pin: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = module_target(op)
        recorded = op.attributes.get("emmy.pins")
        spec = ";".join(
            s for s in (self.pin, recorded.data if isinstance(recorded, StringAttr) else "") if s
        )
        pins = parse_pins(spec)
        if pins:
            kernels = {
                k.kernel_name: {n: kn.values for n, kn in k.knob_dict().items()}
                for k in op.walk()
                if isinstance(k, KernelOp)
            }
            check_pins_used(pins, kernels)
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [DecideKernel(target, default_deciders(pins))], dce_enabled=False
            ),
            apply_recursively=False,
        ).rewrite_module(op)


__all__ = ["Decision", "DecideForksPass", "decisions", "problem_of"]
