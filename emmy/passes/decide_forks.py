"""decide-forks: answer every knob of every `tile.kernel`; THE place schedule answers are chosen.

Option `pin` (string, default empty): values the user fixes, items separated by `;`:
`KERNEL.KNOB=VALUE`, `*.KNOB=VALUE` or `KNOB=VALUE` (every kernel that has the knob). In a
pipeline the spec is one quoted string (xDSL's option grammar accepts any character in it but
`"` and newlines; `,` also separates items):

    emmy-opt f.mlir -p 'decide-forks{pin="rms_norm_qkv_proj.block_m=64;*.workers=mma_sync"}'

Pins may also be recorded in the module, as the string attribute `emmy.pins` (same syntax):
`emmy compile --knob` puts them there, so replaying this pass on a dump file with `emmy-opt`
gives the same answers. The option's items come first, then the module's. A part of a whole
model records the model's pins as `emmy.model_pins` instead: they apply where this part has the
kernel or knob they name, and need not apply here at all (the driver checks that each applies
in some part of the model).

Each kernel's knobs are answered by the evidence hierarchy (`emmy.evidence`), strongest first:
pinned (tier `pinned`), values already decided in the IR (kept with their tier), the user's
tuning store (tier `local`: option `records`, a store URL such as `sqlite:///.../records.db`,
default empty = none; the recorded best of the kernel's exact key and target, its reason naming
the store, study and trial; nothing is created where there is no store), the golden files
(tier `golden`: option `golden`, the golden folder, default empty = none; the entry of the exact
key in `<folder>/<target>/*.json`), the nearest shape (tier `nearest`: a record or golden entry of
the same kernel structure on another shape within the trust radius, nearest first, legal here and
vetted by a fitted prior), the prior (tier
`prior`: the cost model's bounded choice, where the golden folder holds a fitted
`<target>/prior.json`; with the rules off, the target's unfitted defaults), then the default rules (tier `rule`). Option `evidence` (tier names
separated by `,`, default empty = all) turns tiers off. Every combination is checked by
`emmy.tuning.legality.check`: evidence that is no longer legal is skipped and reported; an
illegal pinned set, a pin naming an unknown kernel or knob, or a value outside a domain is an
EmmyError naming the kernel, the knob and the domain. A kernel that some evidence
answered or that had evidence skipped (or every kernel, where the option turns tiers off) gets
an `emmy.evidence` attribute (a JSON string: its key, the structured source of each tier that
answered, the evidence skipped and why, and why each higher tier had no answer), which `emmy
compile --explain` prints; a kernel the rules answered with nothing recorded for it has none.

Input invariant: tile stage (the module may carry `emmy.target`, default sm_90).
Output IR: every `#tile.knob` decided: same name and domain, plus value, tier and reason.
Invariants: bodies, kinds and domains unchanged; same inputs and evidence give the same output.

    // before
    block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256]>
    // after
    block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 128, "rule", "M=512 N=4096: 128 tiles of 128x128, 1 wave on 132 SMs (97% busy)">

Option `max-launches` (int, default 0: the module's `emmy.max_launches` if it has one, else no
budget): the launches one call of a function may make. Some knob values buy speed with a helper
launch (a `_combine` kernel adding split_k's parts). Where a function's forward-phase kernels, as
their plans launch them (`emmy.schedule.plan.plan_kernel`), take more launches than the budget, answers are
traded for ones without the helper, kernel by kernel in IR order, until the function fits or
nothing is left to trade (`combine = kernel` -> `last_block`; the kernel's other knobs re-decided
around it): the rules' and the prior's answers first, then recorded ones (local, golden,
nearest: a measurement of the kernel alone, which the budget, an explicit limit, outranks).
Each traded knob's reason says so. Pinned answers are never traded; prepare-phase kernels (run
once) do not count. Where nothing is left to trade the function makes more launches than the
budget, and `emmy compile` says so. The budget is for programs that launch kernels one
by one, where every launch costs the host microseconds; under CUDA-graph replay the helpers are
faster (H200, Qwen3's layer on sm_90a: 42.0/69.0/130.0 us at 128/512/1100 tokens with them,
48.6/71.6/142.0 with a budget of 8), so there is none unless asked for. `emmy compile
--max-launches N` records it in the module, so dumps replay with it.

A kernel whose outputs lie over different axes runs as parts (`emmy.schedule.plan`), decided as
one product over all their columns. Where a part cannot run with the answers, this pass (not the
lowering) steps rule-tier `block_n` down its domain (while over 64), then `stages`, until every
part can, and says so in the knob's reason (`part @P cannot run with block_n=96 (...): lowered
to 64`): the values in the IR are what runs.

An attention answered `fusion = epilogue` (its computed Q and K in the epilogue of the
contraction producing their rows: emmy.schedule.qk_epilogue) needs that contraction to hold whole
heads per tile, without split_k or split_tail: where its answers do not, this pass answers those
knobs anew (block_n the nearest multiple of the head dim in its domain that works, split_k and
split_tail 1), above every tier but pins, and says so in each one's reason (`block_n=128: whole
heads of 128 columns for @attention's fusion=epilogue`). Where pins forbid it, a pinned epilogue
is an EmmyError naming both kernels (a recorded one gives way to the rules' fusion).

`decisions(module)` lists every knob as a `Decision` (kernel, knob, value, tier, reason) for
`emmy compile --explain` and the dump's decisions file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from emmy.analysis.classify import classify
from emmy.diagnostics import EmmyError
from emmy.evidence import TIERS, parse_tiers
from emmy.evidence.hierarchy import EVIDENCE_ATTR, EvidenceOptions, Hierarchy
from emmy.evidence.prior import prior_decider
from emmy.dialects.tile import KernelOp, KnobValue
from emmy.phase import is_prepare
from emmy.schedule.plan import part_problems, plan_kernel
from emmy.schedule import qk_epilogue
from emmy.tuning.deciders import (
    COMPUTED_TIERS,
    RECORDED_TIERS,
    TRADE_ORDER,
    Answer,
    Decider,
    FixedDecider,
    PinnedDecider,
    Problem,
    decide_kernel,
    trades_for_launches,
)
from emmy.tuning.pins import check_pins_used, parse_pins
from emmy.targets import Target, module_target


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


def _write(op: KernelOp, answers: dict[str, Answer]) -> None:
    knobs = op.knob_dict()
    new = {name: knobs[name].decided(a.value, a.tier, a.reason) for name, a in answers.items()}
    if new != knobs:
        op.with_knobs(new)


MAX_LAUNCHES_ATTR = "emmy.max_launches"
MODEL_PINS_ATTR = "emmy.model_pins"


@dataclass(frozen=True)
class DecideForksPass(ModulePass):
    """Decide every knob: pins first, then recorded values, then the default rules; then trade
    helper launches for the launch budget."""

    name = "decide-forks"
    pin: str = ""
    max_launches: int = 0
    records: str = ""
    golden: str = ""
    evidence: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        budget = launch_budget(op, self.max_launches)
        target = module_target(op)
        strict = ";".join(s for s in (self.pin, _recorded(op, "emmy.pins")) if s)
        kernels = [k for k in op.walk() if isinstance(k, KernelOp)]
        if strict:
            check_pins_used(parse_pins(strict), knob_spaces(kernels))
        pins = parse_pins(";".join(s for s in (strict, _recorded(op, MODEL_PINS_ATTR)) if s))
        options = EvidenceOptions(parse_tiers(self.evidence), self.records, self.golden)
        prior = None
        if "prior" in options.tiers:
            prior = prior_decider(self.golden, target, required="rule" not in options.tiers)
        hierarchy = Hierarchy.build(kernels, target, pins, options, prior=prior)
        deciders = hierarchy.deciders
        problems = {k: problem_of(k, target) for k in kernels}
        answers = {k: decide_kernel(problems[k], deciders) for k in kernels}
        for k in kernels:
            _write(k, answers[k])
            answers[k] = _fit_parts(k, problems[k], answers[k], deciders, target)
        _fit_epilogue_pairs(kernels, problems, answers, deciders, target)
        if budget:
            for func in op.body.block.ops:
                _fit_launch_budget(func, problems, answers, deciders, target, budget)
        for k in kernels:
            tiers = sorted({a.tier for a in answers[k].values()})
            report = hierarchy.report(k.kernel_name, tiers)
            if report["sources"] or report["skipped"] or options.tiers != TIERS:
                k.attributes[EVIDENCE_ATTR] = StringAttr(json.dumps(report, sort_keys=True))


def knob_spaces(kernels: list[KernelOp]) -> dict[str, dict[str, tuple]]:
    """Kernel name -> knob name -> domain, as `check_pins_used` takes them."""
    return {k.kernel_name: {n: kn.values for n, kn in k.knob_dict().items()} for k in kernels}


def _recorded(module: ModuleOp, attr: str) -> str:
    value = module.attributes.get(attr)
    if value is None:
        return ""
    if not isinstance(value, StringAttr):
        raise EmmyError(f"decide-forks: the module's {attr} must be a string of pins, not {value}")
    return value.data


def launch_budget(module: ModuleOp, option: int) -> int:
    """The pass option, else the module's `emmy.max_launches`, else 0 (no budget)."""
    recorded = module.attributes.get(MAX_LAUNCHES_ATTR)
    if option == 0 and recorded is not None:
        if not isinstance(recorded, IntegerAttr):
            raise EmmyError(f"decide-forks: the module's {MAX_LAUNCHES_ATTR} must be an integer, not {recorded}")
        option = recorded.value.data
    if option < 0:
        raise EmmyError(f"decide-forks: max-launches={option}: give 0 (no budget) or more")
    return option


def _fit_launch_budget(
    func: Operation,
    problems: dict[KernelOp, Problem],
    answers: dict[KernelOp, dict[str, Answer]],
    deciders: list[Decider],
    target: Target,
    budget: int,
) -> None:
    """Trade helper launches of one function's forward-phase kernels (module docstring) until it
    makes at most `budget` launches per call: the rules' and the prior's answers first, then
    recorded ones; never pins."""
    kernels = [k for k in func.walk() if isinstance(k, KernelOp) and not is_prepare(k)]
    if len(kernels) > budget:
        return  # one launch per kernel is already past the budget
    launches = {k: len(plan_kernel(k, target).launches) for k in kernels}
    names = [d.name for d in deciders]
    for tiers in (COMPUTED_TIERS, RECORDED_TIERS):
        # the trade goes just before the first decider of those tiers, so they answer around it
        at = next((i for i, n in enumerate(names) if n in tiers), len(deciders) - 1)
        # each kind of trade over every kernel before the next kind (a combine before any statistics)
        trades = [(k, t) for k in kernels for t in trades_for_launches(problems[k].space, answers[k], tiers)]
        for k, (knob, value, what) in sorted(trades, key=lambda kt: TRADE_ORDER.index(kt[1][0])):
            total = sum(launches.values())
            if total <= budget:
                return
            was = answers[k][knob]
            traded_from = "" if was.tier in COMPUTED_TIERS else f" (traded from the {was.tier} answer {knob}={was.value})"
            reason = f"launch budget: {_func_name(func)} would make {total} launches per call, {budget} allowed: {what}{traded_from}"
            traded = [*deciders[:at], FixedDecider({knob: Answer(value, "rule", reason)}), *deciders[at:]]
            new = decide_kernel(problems[k], traded)
            if new[knob].value != value:
                continue  # not legal with the rest of this kernel's answers
            old = answers[k]
            _write(k, new)
            fewer = len(plan_kernel(k, target).launches)
            if fewer >= launches[k]:
                _write(k, old)  # saves no launch here: kept as it was
                continue
            answers[k], launches[k] = new, fewer


def _fit_parts(
    kernel: KernelOp, problem: Problem, answers: dict[str, Answer], deciders: list[Decider], target: Target
) -> dict[str, Answer]:
    """A kernel whose outputs lie over different axes runs as parts (emmy.schedule.plan), decided
    as one product over all their columns. Where a part cannot run with the answers (its
    contractions need more registers than the whole), rule-tier block_n steps down its domain
    (while over 64), then stages, until every part can; each step is recorded in the knob's reason.
    Pinned and recorded answers are kept (the plan then names the part that cannot run)."""
    for _ in range(16):
        bad = part_problems(kernel, {n: a.value for n, a in answers.items()}, target)
        if not bad:
            break
        step = _fit_step(answers, problem.space)
        if step is None:
            break
        knob, value = step
        part, reasons = bad[0]
        reason = f"part @{part} cannot run with {knob}={answers[knob].value} ({reasons[0]}): lowered to {value}"
        fixed = [*deciders[:-1], FixedDecider({knob: Answer(value, "rule", reason)}), deciders[-1]]
        new = decide_kernel(problem, fixed)
        if new[knob].value != value:
            break  # not legal with the rest of this kernel's answers
        answers = new
        _write(kernel, new)
    return answers


def _fit_epilogue_pairs(
    kernels: list[KernelOp], problems: dict[KernelOp, Problem], answers: dict[KernelOp, dict[str, Answer]],
    deciders: list[Decider], target: Target,
) -> None:
    """Attention's fusion = epilogue needs the contraction producing its rows to compute Q and K
    in its epilogue (emmy.schedule.qk_epilogue.projection_illegal: block_n whole heads, no split_k,
    no split_tail, the whole tile staged). Where the contraction's answers do not allow it, the
    knobs in the way are answered anew (block_n the nearest multiple of the head dim in its
    domain that works, split_k and split_tail 1), above every tier but pins; each such knob's
    reason says so. Where pins forbid it, a pinned epilogue is an EmmyError naming both kernels;
    another tier's epilogue gives way to the rules' fusion."""
    for att in kernels:
        fusion = answers[att].get("fusion")
        if att.kind.data != "attention" or fusion is None or fusion.value != "epilogue":
            continue
        facts = qk_epilogue.find(att, problems[att].info)
        assert not isinstance(facts, str)  # legality saw to it
        proj = att.operands[facts.source].owner
        assert isinstance(proj, KernelOp)  # legality saw to it
        why = _epilogue_problem(proj, target)
        if why:
            why = _fit_projection(proj, att, facts.head_dim, problems[proj], answers, deciders, target) or ""
        if not why:
            continue
        if fusion.tier == "pinned":
            raise EmmyError(f"tile.kernel @{att.kernel_name}: fusion=epilogue is pinned, but @{proj.kernel_name} cannot compute Q and K in its epilogue: {why}")
        keep = {n: a for n, a in answers[att].items() if n != "fusion"}
        answers[att] = decide_kernel(problems[att], [FixedDecider(keep), deciders[-1]])
        _write(att, answers[att])


def _epilogue_problem(proj: KernelOp, target: Target) -> str:
    """Why the contraction `proj` cannot run its reader's fusion = epilogue (empty when it can)."""
    try:
        plan_kernel(proj, target)
    except EmmyError as e:
        return str(e)
    return ""


def _fit_projection(
    proj: KernelOp, att: KernelOp, head_dim: int, problem: Problem, answers: dict[KernelOp, dict[str, Answer]],
    deciders: list[Decider], target: Target,
) -> str | None:
    """Answer the contraction's knobs in the way of the epilogue anew (see _fit_epilogue_pairs);
    None when that worked, else why not."""
    old = answers[proj]
    why = ""
    fixed: dict[str, Answer] = {}
    note = f"for @{att.kernel_name}'s fusion=epilogue (Q and K computed in this kernel's epilogue)"
    for knob in ("split_k", "split_tail"):
        if knob in old and old[knob].tier != "pinned":  # (the rules may split k for narrower tiles)
            fixed[knob] = Answer(1, "rule", f"{knob}=1 {note}")
    bn = int(old["block_n"].value) if "block_n" in old else 0  # type: ignore[arg-type]
    widths = [bn] if old.get("block_n") is None or old["block_n"].tier == "pinned" or bn % head_dim == 0 else []
    widths += sorted((int(v) for v in problem.space.get("block_n", ()) if int(v) % head_dim == 0 and int(v) != bn),  # type: ignore[arg-type]
                     key=lambda v: (abs(v - bn), v))
    first = 1 if deciders and isinstance(deciders[0], PinnedDecider) else 0
    for width in widths:
        trial = dict(fixed)
        if width != bn:
            trial["block_n"] = Answer(width, "rule", f"block_n={width}: whole heads of {head_dim} columns {note}")
        try:
            new = decide_kernel(problem, [*deciders[:first], FixedDecider(trial), *deciders[first:]])
        except EmmyError as e:
            why = str(e)
            continue
        answers[proj] = new
        _write(proj, new)
        why = _epilogue_problem(proj, target)
        if not why:
            return None
    answers[proj] = old
    _write(proj, old)
    return why or f"no block_n in its domain holds whole heads of {head_dim} columns"


def _fit_step(answers: dict[str, Answer], space: dict[str, tuple]) -> tuple[str, int] | None:
    """The next rule-tier adjustment a part may need: block_n one step down its domain (while
    over 64), else stages one step down."""
    for knob, floor in (("block_n", 64), ("stages", 1)):
        a = answers.get(knob)
        if a is None or a.tier != "rule" or int(a.value) <= floor:  # type: ignore[arg-type]
            continue
        lower = [int(v) for v in space.get(knob, ()) if int(v) < int(a.value)]  # type: ignore[arg-type]
        if lower:
            return knob, max(lower)
    return None


def _func_name(func: Operation) -> str:
    name = func.properties.get("sym_name") or func.attributes.get("sym_name")
    return f"@{name.data}" if isinstance(name, StringAttr) else f"'{func.name}'"


__all__ = ["MAX_LAUNCHES_ATTR", "Decision", "DecideForksPass", "decisions", "problem_of"]
