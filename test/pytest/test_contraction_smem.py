"""A contraction's shared memory lives in its plan (emmy/schedule/contraction_smem.py): the plan's
total is what the built kernel declares as its dynamic shared memory, its buffers sit at the
plan's offsets, raw copies that do not fit are the plan's `a_source = "global"` with the reason
(reported beside the plan's shared memory), and legality checks the plan's total."""

from __future__ import annotations

from functools import cache
from itertools import product

import pytest

from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.tile import KernelOp
from emmy.driver import CompileOptions, compile_traced, trace
from emmy.ir_io import parse_module
from emmy.lowering.contraction import build as build_contraction
from emmy.measure.candidate import a_sources, plan_facts
from emmy.schedule.contraction import operand_smem_bytes
from emmy.schedule.plan import plan_for, plan_kernel
from emmy.schedule.space import candidate_facts
from emmy.targets import get_target
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check
from tile_examples import gate_up, kernel_funcs, lower, rmsnorm_matmul
from example_kernels import PIN_SETS as EXAMPLE_PINS
from example_kernels import QKV as EXAMPLE_QKV
from example_kernels import kernels as example_kernels

QWEN3 = "Qwen/Qwen3-Embedding-0.6B"
SM90A, SM80, SM86 = get_target("sm_90a"), get_target("sm_80"), get_target("sm_86")


@cache
def _trace(tokens: int):
    return trace(CompileOptions(model=QWEN3, layer=0, tokens=tokens))


def qwen3_contractions(tokens: int, target: str, pins: tuple[str, ...] = ()) -> list[KernelOp]:
    options = CompileOptions(model=QWEN3, layer=0, tokens=tokens, target=target, pins=pins, stop_after="tile")
    module = compile_traced(_trace(tokens), options).module
    return [k for k in module.walk() if isinstance(k, KernelOp) and k.kind_name == "contraction"]


def declared(part) -> list[tuple[object, K.KernelFuncOp]]:
    """(plan, built main kernel) of each main launch of a part (split_tail: the head and the tail)."""
    built = build_contraction(part.op, part.info, part.plan)
    funcs = {f.sym_name.data: f for f in built.funcs}
    plans = part.plan.split_tail or (part.plan,)
    mains = [la.kernel for la in part.plan.launches if la.role in ("main", "tail")]
    assert len(mains) == len(plans)
    return [(p, funcs[name]) for p, name in zip(plans, mains)]


def assert_plan_is_the_kernels(k: KernelOp, target) -> int:
    """Every part's layout total is its built kernel's dynamic shared memory; returns the parts."""
    kplan = plan_kernel(k, target)
    for part in kplan.parts:
        for plan, func in declared(part):
            assert func.smem_bytes == plan.smem.total == plan.smem_bytes, (k.kernel_name, plan.name)
            assert plan.smem_bytes <= target.smem_per_block
            shared = {op.result.name_hint: op for op in func.walk() if isinstance(op, K.SharedOp)}
            layout = plan.smem
            if "bars" in shared:
                assert shared["bars"].offset.value.data == layout.bars_offset
            if "rs" in shared:
                assert shared["rs"].offset.value.data == layout.stats_offset and layout.stats_bytes > 0
            staged = sorted({op.offset.value.data for op in func.walk()
                             if isinstance(op, K.SharedOp) and op.result.name_hint == "sC"})
            if staged:  # (epilogue = pingpong: one staged tile per consumer warpgroup, epilogue_bytes apart)
                tiles = 2 if plan.pingpong else 1
                assert staged == [layout.epilogue_offset + w * layout.epilogue_bytes for w in range(tiles)]
                assert layout.epilogue_width and layout.total >= staged[-1] + layout.epilogue_bytes
    return len(kplan.parts)


@pytest.mark.parametrize("tokens,target", [(32, "sm_90a"), (512, "sm_90a"), (3000, "sm_90a"), (512, "sm_80"), (3000, "sm_80")])
def test_qwen3_layer_contractions_declare_the_plans_total(tokens, target):
    kernels = qwen3_contractions(tokens, target)
    assert len(kernels) == 4
    for k in kernels:
        assert_plan_is_the_kernels(k, get_target(target))


QKV, GATE_UP = "rms_norm_qkv_proj", "rms_norm_gate_up_proj_silu"
PINNED = [
    ("workers=wgmma_ws", "schedule=persistent", "fusion=split"),  # the epilogue's own tiles after the barriers
    ("workers=wgmma_ws", "schedule=stream_k", "fusion=split"),
    # two staged tiles, one per consumer warpgroup
    ("workers=wgmma_ws", "schedule=persistent", "fusion=split", "epilogue=pingpong", "block_m=64", "block_n=128",
     "warps=8", "cluster=1"),
    ("workers=wgmma_ws", "copy=tma", "fusion=split"),
    ("workers=wgmma_ws", "fusion=fused", "stages=3"),  # row statistics and mbarriers in the block
    ("workers=wgmma", "fusion=fused", "stages=4", "block_m=64"),
    ("workers=mma_sync", "warps=4", "block_m=64", "block_n=64", "stages=3"),
    ("split_k=2", "combine=last_block", "workers=wgmma"),
]


@pytest.mark.parametrize("pins", PINNED, ids=";".join)
def test_pinned_schedules_declare_the_plans_total(pins):
    kernels = qwen3_contractions(512, "sm_90a", tuple(f"{name}.{p}" for name in (QKV, GATE_UP) for p in pins))
    for k in kernels:
        assert_plan_is_the_kernels(k, SM90A)


@pytest.mark.parametrize("pins", EXAMPLE_PINS, ids=lambda p: ";".join(p) or "rules")
def test_running_example_parts_declare_their_plans_total(pins):
    """The running example's q/k/v kernel runs as parts (k and v paired, or each apart)."""
    parts = 0
    for k in example_kernels(pins=tuple(f"{EXAMPLE_QKV}.{p}" for p in pins)).values():
        if k.kind_name == "contraction":
            parts += assert_plan_is_the_kernels(k, SM90A)
    assert parts >= 2


def plan_of(text: str, target):
    module = parse_module(make_context(), text, "test.mlir")
    (k,) = [op for op in module.walk() if isinstance(op, KernelOp)]
    return k, plan_kernel(k, target).parts[0].plan


@pytest.mark.parametrize("target,knobs", [
    ("sm_80", dict(workers="mma_sync", block_m=64, block_n=64, block_k=32, stages=3, warps=4)),
    ("sm_90a", dict(workers="wgmma", block_m=128, block_n=128, block_k=64, stages=3, warps=8)),
    ("sm_90a", dict(workers="mma_sync", block_m=64, block_n=64, block_k=64, stages=1, warps=4)),
])
def test_raw_copies_sit_at_the_plans_offsets(target, knobs):
    """A computed A side (x * rstd * w) with room for the raw copies of x (block_m rows) and w (one
    row): the plan says raw_copies, and each copy, the statistics and the total are the plan's."""
    text = rmsnorm_matmul(M=72, N=80, K=192, target=target, **knobs)
    k, plan = plan_of(text, get_target(target))
    assert plan.a_source == "raw_copies" and "raw copies" in plan.a_source_reason
    assert [rows for _, rows in plan.smem.raw] == [knobs["block_m"], 1]
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    assert [shared[f"raw{i}"].offset.value.data for i in range(2)] == [off for off, _ in plan.smem.raw]
    assert shared["rs"].offset.value.data == plan.smem.stats_offset
    assert f.smem_bytes == plan.smem_bytes == plan.smem.total


def test_raw_copies_that_do_not_fit_are_the_plans_decision():
    """sm_80 has 163 KB a block: 128x128 tiles with block_k 128 fit twice, their raw copies do not.
    The plan says A comes from global loads and why; the kernel follows it; the candidate's facts
    report it beside its shared memory."""
    text = rmsnorm_matmul(M=128, N=128, K=256, target="sm_80", block_m=128, block_n=128, block_k=128, stages=2, warps=8)
    k, plan = plan_of(text, SM80)
    assert plan.a_source == "global"
    with_raw = 2 * (128 + 128) * 128 * 2 + 2 * 128 * 128 * 2 + 2 * 128 * 2 + 128 * 4
    assert plan.a_source_reason == (
        f"the raw copies of the tensors A reads need {with_raw} bytes of shared memory, over the "
        f"{SM80.smem_per_block} a block may use on sm_80: A is computed from global loads while staging"
    )
    assert plan.smem.raw == () and plan.smem_bytes == 2 * (128 + 128) * 128 * 2 + 128 * 4
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    names = {op.result.name_hint for op in f.walk() if isinstance(op, (K.SharedOp, K.LocalOp))}
    assert "raw0" not in names and "stage_a" in names and f.smem_bytes == plan.smem_bytes
    info = plan_kernel(k, SM80).parts[0].info
    facts = candidate_facts(info, k.knob_values(), SM80)
    assert facts["smem_bytes"] == plan.smem_bytes and facts["a_source"] == "global"
    assert facts["a_source_reason"] == plan.a_source_reason
    sources = a_sources(k, SM80)
    assert sources == {"rms_norm_qkv_proj": f"global ({plan.a_source_reason})"}
    assert plan_facts(_NoLaunches(), {}, sources)["a_source"] == f"rms_norm_qkv_proj: global ({plan.a_source_reason})"


class _NoLaunches:
    launches = ()


def test_producer_and_plain_copies_say_why_there_are_no_raw_copies():
    _, ws = plan_of(rmsnorm_matmul(M=256, N=256, K=256, workers="wgmma_ws", block_m=128, block_n=128, warps=8, stages=4), SM90A)
    assert ws.a_source == "global" and ws.a_source_reason == "workers=wgmma_ws: the producer warpgroup stages A itself"
    _, plain = plan_of(gate_up(workers="wgmma", block_m=64, block_n=64, block_k=64, stages=3, warps=4), SM90A)
    assert plain.a_source == "global" and plain.a_source_reason == "A is not computed from tensors that can be copied raw"


def test_over_the_limit_is_an_error_naming_the_kernel():
    text = rmsnorm_matmul(M=256, N=256, K=512, target="sm_80", block_m=256, block_n=256, block_k=128, stages=2, warps=8)
    with pytest.raises(EmmyError, match=r"tile.kernel @rms_norm_qkv_proj: \d+ bytes of shared memory exceed the 166912 a block may use on sm_80"):
        lower(text, "convert-tile-to-kernel")


def test_legality_checks_the_plans_total():
    """Points whose operand tiles fit but whose whole layout (here the row statistics) does not are
    illegal, with the layout's parts and total in the reason. (In the knobs' domains this happens
    only on 99 KB targets, with gate and up's two B tiles.)"""
    kernels = {k.kernel_name: k for k in qwen3_contractions(512, "sm_90a")}
    over = []
    for name, target in product((QKV, GATE_UP), (SM90A, SM80, SM86)):
        info = plan_kernel(kernels[name], SM90A).parts[0].info
        space = knob_space_for(info, target)
        base = dict(kernels[name].knob_values(), workers="wgmma_ws" if target.has("wgmma") else "mma_sync", schedule="grid",
                    fusion="fused", split_k=1, split_tail=1, cluster=1, group_m=1, copy="cp_async", epilogue="together",
                    combine="kernel", warps=4)
        for stages, bm, bn, bk in product(space["stages"], space["block_m"], space["block_n"], space["block_k"]):
            values = dict(base, stages=stages, block_m=bm, block_n=bn, block_k=bk)
            try:
                total = plan_for(info, values, target).smem_bytes
            except EmmyError:
                continue  # values the other rules reject
            if operand_smem_bytes(stages, bm, bn, bk, info.n_contractions) <= target.smem_per_block < total:
                over.append((info, values, target, total))
    assert (GATE_UP, 16, 256, "sm_86") in [(i.name, v["block_m"], v["block_n"], t.name) for i, v, t, _ in over]
    for info, values, target, total in over:
        reasons = [r for r in check(info, values, target) if r.startswith("shared memory")]
        bn = f"2 x block_n={values['block_n']}" if info.n_contractions == 2 else f"block_n={values['block_n']}"
        extra = " + 2 x stages={s} mbarriers x 8 bytes + 1024 bytes of alignment for wgmma".format(s=values["stages"])
        assert reasons == [
            f"shared memory: stages={values['stages']} x (block_m={values['block_m']} + {bn}) x block_k="
            f"{values['block_k']} x 2 bytes + 1 row statistics x block_m={values['block_m']} x 4 bytes"
            f"{extra if values['workers'] == 'wgmma_ws' else ''} = {total / 1024:.1f} KB exceeds the "
            f"{target.smem_per_block / 1024:.1f} KB a block may use on {target.name}"
        ]
        assert not [r for r in check(info, dict(values, fusion="split"), target) if r.startswith("shared memory")]
