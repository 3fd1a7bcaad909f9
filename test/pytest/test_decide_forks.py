"""Pins, decide-forks and its launch budget, the knob attribute, and classify."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.utils.exceptions import VerifyException

import loop_examples as L
from emmy.analysis.classify import classify
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects.loop import LoadOp
from emmy.dialects.tile import KernelOp, KnobAttr
from emmy.ir_io import parse_module, parse_pipeline, run_passes
from emmy.passes.decide_forks import DecideForksPass, decisions
from emmy.tuning.knobs import knob_names, knob_space
from emmy.tuning.legality import check
from emmy.tuning.pins import Pins, parse_pins, pins_for
from knob_helpers import SM90, decided, info_of, layer_before_decisions


# ------------------------------------------------------------------------------------ pins


def test_parse_pins():
    pins = parse_pins("rms_norm_qkv_proj.block_m=64; *.workers=mma_sync, vector=4")
    assert [(p.kernel, p.knob, p.value) for p in pins.items] == [
        ("rms_norm_qkv_proj", "block_m", 64), ("*", "workers", "mma_sync"), ("*", "vector", 4),
    ]
    assert parse_pins("") == Pins() and not parse_pins(" ; ")
    specific = parse_pins("*.block_m=16;k1.block_m=64")
    assert specific.for_kernel("k1")["block_m"].value == 64
    assert specific.for_kernel("k2")["block_m"].value == 16


@pytest.mark.parametrize(
    "spec,message",
    [
        ("block_m", "pin 'block_m': expected KERNEL.KNOB=VALUE, *.KNOB=VALUE or KNOB=VALUE"),
        ("k.blockm=64", "pin 'k.blockm=64': unknown knob 'blockm'; knobs: block_k, block_kv, block_m"),
        ("k.block_m=64;k.block_m=32", "pin 'k.block_m=32': 'k.block_m=64' already pins k.block_m"),
        ("k.block_m=6 4", "expected KERNEL.KNOB=VALUE"),
    ],
)
def test_pin_syntax_errors(spec, message):
    with pytest.raises(EmmyError, match=message.replace("*", r"\*").replace(".", r"\.")):
        parse_pins(spec)


def test_pins_checked_against_a_kernel_domain():
    space = knob_space("contraction", SM90)
    assert pins_for(parse_pins("*.block_q=64;k.block_m=64"), "k", "contraction", space) == {"block_m": 64}
    with pytest.raises(EmmyError, match=r"pin 'k\.workers=wgmma': workers=wgmma is not in the domain of k\.workers: \[thread, mma_sync\]"):
        pins_for(parse_pins("k.workers=wgmma"), "k", "contraction", space)
    with pytest.raises(EmmyError, match=r"kernel 'k' \(contraction\) has no knob 'items'"):
        pins_for(parse_pins("k.items=2"), "k", "contraction", space)


def test_pin_option_survives_the_pipeline_grammar():
    spec = 'decide-forks{pin="rms_norm_qkv_proj.block_m=64;*.workers=mma_sync"}'
    (p,) = parse_pipeline(spec)
    assert isinstance(p, DecideForksPass) and p.pin == "rms_norm_qkv_proj.block_m=64;*.workers=mma_sync"


# ------------------------------------------------------------------------------------ decide-forks


def test_decide_forks_decides_every_knob_with_tiers():
    module = decided(L.rmsnorm_matmul(33, 512, 256)[0], "*.block_m=32")
    ds = decisions(module)
    assert {d.knob for d in ds} == set(knob_names("contraction", fusion=True))
    assert all(d.value is not None and d.reason for d in ds)
    assert {d.tier for d in ds} == {"pinned", "rule"}
    (bm,) = [d for d in ds if d.knob == "block_m"]
    assert (bm.kernel, bm.value, bm.tier, bm.reason) == ("rms_norm_qkv_proj", 32, "pinned", "pin '*.block_m=32'")
    kernel = next(op for op in module.walk() if isinstance(op, KernelOp))
    assert kernel.knob_value("block_m") == 32 and kernel.is_decided
    assert check(classify(kernel), kernel.knob_values(), SM90) == []


def test_decide_forks_is_deterministic_and_idempotent():
    from emmy.ir_io import print_module

    a = print_module(decided(L.gate_up(33, 96, 64)[0]))
    b = print_module(decided(L.gate_up(33, 96, 64)[0]))
    assert a == b
    ctx = make_context()
    module = parse_module(ctx, a, "again")
    run_passes(ctx, module, parse_pipeline("decide-forks"))
    assert print_module(module) == a


# ------------------------------------------------------------------------------------ knob attribute


def test_knob_attr_python_api():
    k = KnobAttr("block_m", [16, 32, 64])
    assert (k.key, k.values, k.value, k.is_decided) == ("block_m", (16, 32, 64), None, False)
    d = k.decided(32, "rule", "because")
    assert (d.value, d.tier_name, d.reason_text, d.is_decided) == (32, "rule", "because", True)
    with pytest.raises(VerifyException, match="a tier or reason without a chosen value"):
        KnobAttr("block_m", [16], None, "rule", "x")
    with pytest.raises(VerifyException, match="not in the domain"):
        k.decided(48, "rule", "x")


def test_knob_value_of_undecided_kernel_is_an_error():
    ctx = make_context()
    module = parse_module(ctx, L.silu_mul(7, 64)[0], "example")
    run_passes(ctx, module, parse_pipeline("convert-loop-to-tile"))
    kernel = next(op for op in module.walk() if isinstance(op, KernelOp))
    with pytest.raises(EmmyError, match="knob 'threads' is undecided"):
        kernel.knob_value("threads")
    with pytest.raises(EmmyError, match="no knob 'block_m'; knobs: threads, vector, items"):
        kernel.knob("block_m")


# ------------------------------------------------------------------------------------ classify


def test_classify_running_example():
    info = info_of(L.rmsnorm_matmul(512, 4096, 1024))
    assert info.kind == "contraction"
    assert (info.m_axes, info.n_axes, info.k_axes, info.batch_axes) == (("m",), ("n",), ("k",), ())
    assert (info.M, info.N, info.K) == (512, 4096, 1024)
    (c,) = info.contractions
    assert [l.tensor.name_hint for l in c.a_loads] == ["xa", "nwa"]
    assert [l.tensor.name_hint for l in c.b_loads] == ["wa"]
    assert [r.result.name_hint for r in info.prologue] == ["ss"]
    assert info.has_fusion_fork and info.epilogue[-1].name == "loop.store"
    assert (info.vector_axis, info.vector_extent, info.element_bytes) == ("k", 1024, 2)


def test_classify_dual_contraction_shares_a():
    info = info_of(L.gate_up(7, 3072, 1024))
    assert info.kind == "contraction" and info.n_contractions == 2
    a_tensors = {l.tensor for c in info.contractions for l in c.a_loads}
    assert len(a_tensors) == 1 and not info.prologue and not info.has_fusion_fork


def test_classify_attention():
    info = info_of(L.attention(2, 16, 8, 33, 128))
    att = info.attention
    assert info.kind == "attention"
    assert (att.batch_axes, att.query_axis, att.key_axis, att.head_dim_axes, att.value_dim_axis) == (
        ("b", "h"), "q", "kv", ("d",), "e",
    )
    assert att.gqa == ("h", 2) and att.pv_uses_sum
    assert att.max_reduce.kind_name == "max" and att.sum_reduce.kind_name == "sum"
    assert att.qk.m_axes == ("q",) and att.qk.n_axes == ("kv",) and len(att.qk_all) == 3
    assert [l.tensor.name_hint for l in att.pv.b_loads] == ["va"]
    assert not info_of(L.attention(1, 4, 4, 8, 16, normalize_inside=False)).attention.pv_uses_sum


def test_classify_reduction_and_elementwise():
    red = info_of(L.softmax(9, 200))
    assert red.kind == "reduction" and red.row_axes == ("m",) and red.reduced_axes == ("k",)
    assert (red.rows, red.row_length) == (9, 200)
    ew = info_of(L.silu_mul(7, 64))
    assert ew.kind == "elementwise" and ew.parallel_axes == ("m", "n") and ew.vector_axis == "n"
    assert not any(isinstance(o, LoadOp) for o in ew.reductions)


# ------------------------------------------------------------------------------ launch budget


def _forward_launches(ctx, module) -> int:
    from emmy.dialects.kernel import LaunchOp
    from emmy.phase import is_prepare

    run_passes(ctx, module, parse_pipeline("convert-tile-to-kernel"))
    return sum(1 for op in module.walk() if isinstance(op, LaunchOp) and not is_prepare(op))


@pytest.mark.parametrize("model", ["Qwen/Qwen3-Embedding-0.6B", "mistral-7b", "llama-3.2-1b"])
@pytest.mark.parametrize("tokens", [32, 128, 512, 1100])
def test_launch_budget_keeps_a_layer_within_eight_launches(model, tokens, tmp_path):
    """On sm_90a the rules' answers alone take up to 11 launches per layer call (statistics and
    combine helpers); a budget of 8 trades combine kernels for last-block combines until 8 fit,
    and says so in the traded knobs' reasons. Without a budget (the default) nothing is traded."""
    from tiny_models import write_real_sized_model

    if model != "Qwen/Qwen3-Embedding-0.6B":
        write_real_sized_model(tmp_path / model, model)
        model = str(tmp_path / model)
    ctx, free = layer_before_decisions(model, tokens)
    budgeted = free.clone()
    run_passes(ctx, free, parse_pipeline("decide-forks"))
    assert not any("launch budget" in d.reason for d in decisions(free))
    run_passes(ctx, budgeted, parse_pipeline("decide-forks{max-launches=8}"))
    traded = [d for d in decisions(budgeted) if "launch budget" in d.reason]
    assert all(d.knob == "combine" and d.value == "last_block" and d.tier == "rule" for d in traded)
    without, within = _forward_launches(ctx, free), _forward_launches(ctx, budgeted)
    assert within <= 8
    assert within == without - len(traded)
    assert (without > 8) == bool(traded)


def test_launch_budget_trades_recorded_answers_after_computed_ones():
    """With the shipped golden files at 128 tokens on sm_90a, o and down answer combine = kernel
    from golden entries, splitting k 4 and 8 ways, and q/k/v takes its row statistics from a
    kernel of their own (10 launches): a budget of 8 (an explicit limit, above recorded
    evidence) trades both combine kernels, keeps the rest of each entry, and says what it
    traded."""
    golden = Path(__file__).resolve().parents[2] / "golden"
    ctx, module = layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 128)
    free = module.clone()
    run_passes(ctx, free, parse_pipeline(f'decide-forks{{golden="{golden}"}}'))
    before = {(d.kernel, d.knob): d for d in decisions(free)}
    assert [before[k, "combine"].tier for k in ("o_proj_residual", "down_proj_residual")] == ["golden", "golden"]
    run_passes(ctx, module, parse_pipeline(f'decide-forks{{golden="{golden}" max-launches=8}}'))
    traded = [d for d in decisions(module) if "launch budget" in d.reason]
    assert [(d.kernel, d.knob, d.value, d.tier) for d in traded] == [
        ("o_proj_residual", "combine", "last_block", "rule"), ("down_proj_residual", "combine", "last_block", "rule")]
    assert all("(traded from the golden answer combine=kernel)" in d.reason for d in traded)
    after = {(d.kernel, d.knob): d for d in decisions(module)}
    assert all(after[k].tier == "golden" and after[k].value == before[k].value
               for k in before if k[0] in ("o_proj_residual", "down_proj_residual") and k[1] != "combine")
    assert _forward_launches(ctx, free) == 10 and _forward_launches(ctx, module) == 8


def test_launch_budget_trades_rule_answers_never_pins():
    # at 128 tokens the rules split o and down along k: each has a combine kernel to trade
    ctx, module = layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 128)
    pinned = module.clone()
    run_passes(ctx, module, parse_pipeline("decide-forks{max-launches=9}"))
    traded = [d for d in decisions(module) if "launch budget" in d.reason]
    assert [d.kernel for d in traded] == ["o_proj_residual"]
    assert "@layer0 would make 10 launches per call, 9 allowed" in traded[0].reason
    assert "the last of each tile's 4 blocks adds the parts, no _combine kernel" in traded[0].reason
    run_passes(ctx, pinned, parse_pipeline('decide-forks{pin="*.combine=kernel" max-launches=8}'))
    # the pinned combines stay; the rules' kernels of their own (statistics, K rows) are traded
    budget = [d for d in decisions(pinned) if "launch budget" in d.reason]
    assert [(d.kernel, d.knob, d.value) for d in budget] == [("rms_norm_qkv_proj", "fusion", "fused"),
                                                              ("attention", "fusion", "fused")]
    assert all(d.value == "kernel" for d in decisions(pinned) if d.knob == "combine")
    assert _forward_launches(ctx, pinned) == 8
    again = module.clone()  # decided answers are kept, traded ones too
    run_passes(ctx, again, parse_pipeline("decide-forks{max-launches=8}"))
    assert str(again) == str(module)


def test_launch_budget_from_the_module():
    """`emmy compile --max-launches` records the budget in the module (emmy.max_launches), so a
    dump replays with it; the pass option wins over it."""
    from xdsl.dialects.builtin import IntegerAttr, StringAttr

    ctx, module = layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 128)
    option = module.clone()
    module.attributes["emmy.max_launches"] = IntegerAttr(8, 64)
    recorded = module.clone()
    run_passes(ctx, module, parse_pipeline("decide-forks"))
    assert len([d for d in decisions(module) if "launch budget" in d.reason]) == 2
    run_passes(ctx, option, parse_pipeline("decide-forks{max-launches=8}"))
    assert [d.value for d in decisions(option)] == [d.value for d in decisions(module)]
    run_passes(ctx, recorded, parse_pipeline("decide-forks{max-launches=9}"))
    assert len([d for d in decisions(recorded) if "launch budget" in d.reason]) == 1
    bad = option.clone()
    bad.attributes["emmy.max_launches"] = StringAttr("eight")
    with pytest.raises(EmmyError, match='the module\'s emmy.max_launches must be an integer, not "eight"'):
        run_passes(ctx, bad, parse_pipeline("decide-forks"))


def test_launch_budget_must_not_be_negative():
    ctx, module = layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 32)
    with pytest.raises(EmmyError, match=r"decide-forks: max-launches=-1: give 0 \(no budget\) or more"):
        run_passes(ctx, module, parse_pipeline("decide-forks{max-launches=-1}"))
