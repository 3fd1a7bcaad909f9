"""The plan of a decided kernel (emmy/schedule/): what its knobs mean, computed once.

The plan's launches are the lowering's (names, grids, blocks) across the schedule features; its
common facts (threads, shared memory, blocks, waves, registers) follow the knobs; bad values are
clear errors naming the kernel; a feature knob a kernel lacks reads as off."""

from __future__ import annotations

import pytest

from emmy.analysis.classify import classify
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp, KnobAttr
from emmy.ir_io import parse_module
from emmy.passes.convert_tile_to_kernel import build_kernel
from emmy.schedule.plan import plan_for, plan_kernel
from emmy.targets import get_target
from example_kernels import PIN_SETS, QKV, kernels

SM90A = get_target("sm_90a")


@pytest.mark.parametrize("pins", PIN_SETS, ids=lambda p: ";".join(p) or "rules")
def test_plan_launches_are_the_lowerings(pins):
    """Each launch of the plan is a launch the kernel stage makes, with its grid and block."""
    for k in kernels(pins=tuple(f"{QKV}.{p}" for p in pins)).values():
        plan = plan_kernel(k, SM90A)
        built = build_kernel(k, SM90A)
        funcs = {f.sym_name.data: f for f in built.funcs}
        made = [(la.kernel, tuple(funcs[la.kernel].grid_dims), tuple(funcs[la.kernel].block_dims)) for la in built.launches]
        assert [(la.kernel, la.grid, la.block) for la in plan.launches] == made, k.kernel_name


def test_split_tail_plans_a_head_and_a_tail():
    """split_tail = 4 on 1100 x 2048 (9 x 16 tiles, 132 SMs): the whole wave as one launch, the
    12 tiles behind it as `_tail` with k split 4 ways; the statistics kernel once for both."""
    from tile_examples import weighted_norm_matmul

    text = weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=128, split_tail=4, fusion="split")
    module = parse_module(make_context(), text, "test.mlir")
    k = next(op for op in module.walk() if isinstance(op, KernelOp))
    plan = plan_kernel(k, SM90A)
    assert [(la.kernel, la.role, la.grid) for la in plan.launches] == [
        ("norm_proj_stats", "stats", (138, 1, 1)),
        ("norm_proj", "main", (132, 1, 1)),
        ("norm_proj_tail", "tail", (12, 1, 4)),
    ]
    built = build_kernel(k, SM90A)
    assert [la.kernel for la in plan.launches] == [la.kernel for la in built.launches]


def test_common_facts_follow_the_knobs():
    k = kernels(pins=(f"{QKV}.workers=wgmma_ws", f"{QKV}.warps=8", f"{QKV}.block_m=128", f"{QKV}.block_k=64",
                      f"{QKV}.stages=4", f"{QKV}.block_n=128", f"{QKV}.siblings=apart"))[QKV]
    plan = plan_kernel(k, SM90A)
    part = plan.parts[0].plan
    assert part.threads == 8 * 32 + 128  # the producer warpgroup
    # stages x (A + B rows) x block_k x bf16, then (fusion = split: no row statistics in the block)
    # a full and an empty mbarrier per stage, and 1024 bytes for wgmma's alignment
    assert part.smem_bytes == part.smem.total == 4 * (128 + 128) * 64 * 2 + 2 * 4 * 8 + 1024
    assert part.blocks == part.grid[0] * part.grid[1] * part.grid[2]
    assert part.waves == -(-part.blocks // SM90A.sms)
    assert 40 < part.registers <= SM90A.regs_per_thread
    assert plan.threads == max(p.plan.threads for p in plan.parts)
    assert plan.blocks == sum(p.plan.blocks for p in plan.parts)


def test_every_kind_has_the_common_facts():
    for k in kernels(tokens=32, target="sm_80").values():
        plan = plan_kernel(k, get_target("sm_80"))
        assert plan.threads > 0 and plan.blocks > 0 and plan.waves >= 1 and plan.registers > 0
        assert plan.smem_bytes >= 0 and len(plan.launches) >= 1


def test_missing_knob_is_an_error_naming_it():
    k = kernels()[QKV]
    values = {n: v for n, v in k.knob_values().items() if n != "block_k"}
    with pytest.raises(EmmyError, match="knob 'block_k' is missing"):
        plan_for(classify(k), values, SM90A)


def test_missing_feature_knob_reads_as_off():
    k = kernels()[QKV]
    info = classify(k)
    values = {n: v for n, v in k.knob_values().items() if n not in ("schedule", "copy", "cluster", "group_m", "split_tail")}
    plan = plan_for(info, values, SM90A)
    assert (plan.persistent, plan.tma, plan.cluster, plan.group_m, plan.tail) == (False, False, 1, 1, 1)


def test_wgmma_with_one_stage_is_an_error_not_a_silent_change():
    k = kernels()[QKV]
    values = dict(k.knob_values(), workers="wgmma", warps=4, block_m=64, stages=1)
    with pytest.raises(EmmyError, match="wgmma reads its operands from shared memory: stages must be at least 2"):
        plan_for(classify(k), values, SM90A)


def test_undecided_kernel_is_an_error():
    k = kernels()[QKV]
    knobs = k.knob_dict()
    k.with_knobs({**knobs, "block_k": KnobAttr("block_k", knobs["block_k"].values)})
    with pytest.raises(EmmyError, match=f"tile.kernel @{QKV}: knobs block_k are undecided"):
        plan_kernel(k, SM90A)


def test_part_that_cannot_run_is_an_error_naming_it(monkeypatch):
    import emmy.schedule.plan as P

    k = kernels()[QKV]
    monkeypatch.setattr(P, "part_values", lambda info, values, target: (dict(values), ["registers: too many"]))
    with pytest.raises(EmmyError, match=rf"tile.kernel @{QKV}: its part @{QKV}_out\d+ cannot run with the kernel's knobs: registers: too many"):
        plan_kernel(k, SM90A)


def test_decide_forks_fits_parts_and_says_so(monkeypatch):
    """Where a part cannot run with the kernel's answers, decide-forks lowers rule-tier block_n
    (then stages) itself and records why in the knob's reason: the IR holds what runs."""
    import emmy.passes.decide_forks as D

    seen = []

    def fake(op, values, target):  # the first check of the qkv kernel fails, the next passes
        if op.kernel_name != QKV:
            return []
        seen.append(values["block_n"])
        return [("rms_norm_qkv_proj_out1_2", ["registers: too many"])] if len(seen) == 1 else []

    monkeypatch.setattr(D, "part_problems", fake)
    k = kernels(pins=(f"{QKV}.block_n=128",))  # pinned: never adjusted
    assert k[QKV].knob_dict()["block_n"].value == 128
    seen.clear()
    k = kernels(pins=(f"{QKV}.workers=mma_sync",))[QKV]
    bn = k.knob_dict()["block_n"]
    assert seen[0] == 96 and seen[1] == bn.value == 64 and bn.tier_name == "rule"  # one step down the domain
    assert bn.reason_text == f"part @rms_norm_qkv_proj_out1_2 cannot run with block_n={seen[0]} (registers: too many): lowered to {bn.value}"


def test_unknown_kind_has_no_plan():
    from dataclasses import replace

    info = replace(classify(kernels()[QKV]), kind="bogus")
    with pytest.raises(EmmyError, match=f"tile.kernel @{QKV}: no plan for kernels of kind 'bogus'"):
        plan_for(info, {}, SM90A)


def test_parts_that_do_not_merge_as_planned_are_an_error(monkeypatch):
    """The lowering does what the plan says or stops: it never picks another launch layout."""
    import emmy.lowering.split as S

    k = kernels(pins=(f"{QKV}.fusion=fused",))[QKV]
    assert plan_kernel(k, SM90A).merge == "one_launch"
    monkeypatch.setattr(S, "one_launch", lambda builts, name, target: None)
    with pytest.raises(EmmyError, match=rf"tile.kernel @{QKV}: its parts do not merge as planned \(one_launch\)"):
        build_kernel(k, SM90A)
