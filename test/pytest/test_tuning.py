"""Targets, knob spaces, legality, the default rules, pins, decide-forks and classify."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.utils.exceptions import VerifyException

import loop_examples as L
from emmy.analysis.classify import classify
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects.loop import FusedOp, LoadOp
from emmy.dialects.tile import KernelOp, KnobAttr
from emmy.ir_io import parse_module, parse_pipeline, run_passes
from emmy.passes.decide_forks import DecideForksPass, decisions
from emmy.tuning import rules, rules_attention, rules_contraction, rules_tiles
from emmy.tuning.knobs import knob_names, knob_space, knob_space_for, tile_at
from emmy.tuning.legality import check, warp_grid
from emmy.tuning.pins import Pins, parse_pins, pins_for
from emmy.targets import TARGETS, get_target

# ------------------------------------------------------------------------------------ helpers


def fused_of(text: str) -> FusedOp:
    module = parse_module(make_context(), text, "example")
    return next(op for op in module.walk() if isinstance(op, FusedOp))


def info_of(example) -> object:
    return classify(fused_of(example[0]))


def decided(text: str, pin: str = ""):
    ctx = make_context()
    module = parse_module(ctx, text, "example")
    run_passes(ctx, module, parse_pipeline(f'convert-loop-to-tile,decide-forks{{pin="{pin}"}}'))
    return module


SM90A, SM90, SM80, SM86 = (get_target(n) for n in ("sm_90a", "sm_90", "sm_80", "sm_86"))

# ------------------------------------------------------------------------------------ targets


def test_targets_table():
    assert list(TARGETS) == ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"]
    assert SM90A.sms == SM90.sms == 132 and SM80.sms == 108
    assert SM90A.smem_per_block == 227 * 1024 and SM80.smem_per_block == 163 * 1024
    assert SM86.smem_per_block == get_target("sm_89").smem_per_block == 99 * 1024
    for t in TARGETS.values():
        assert t.has("mma_sync") and t.has("cp_async")
        assert t.has("wgmma") == (t.name == "sm_90a")
        assert t.has("tma") == (t.name in ("sm_90", "sm_90a"))
        assert t.smem_per_block <= t.smem_per_sm and t.max_threads_per_block == 1024


def test_unknown_target_lists_valid_names():
    with pytest.raises(EmmyError, match="unknown target 'sm_70'; valid targets: sm_80, sm_86, sm_89, sm_90, sm_90a"):
        get_target("sm_70")


# ------------------------------------------------------------------------------------ knobs


def test_knob_spaces_by_kind_and_target():
    assert knob_names("contraction") == (
        "block_m", "block_n", "block_k", "split_k", "combine", "split_tail", "stages", "workers", "warps", "schedule",
        "copy", "cluster", "group_m", "epilogue", "slices", "vector",
    )
    assert knob_names("contraction", fusion=True)[-1] == "fusion"
    assert knob_names("contraction", fusion=True, siblings=True)[-2:] == ("siblings", "fusion")
    assert knob_space("contraction", SM80, siblings=True)["siblings"] == ("paired", "apart")
    assert knob_names("attention") == ("block_q", "block_kv", "workers", "stages", "warps", "copy", "schedule")
    assert knob_names("reduction") == ("rows_per_block", "threads", "vector")
    assert knob_names("elementwise") == ("threads", "vector", "items")
    assert knob_space("contraction", SM90A)["workers"] == ("thread", "mma_sync", "wgmma", "wgmma_ws")
    assert knob_space("contraction", SM90)["workers"] == ("thread", "mma_sync")
    assert knob_space("attention", SM80)["workers"] == ("mma_sync",)
    assert knob_space("attention", SM90A)["workers"] == ("mma_sync", "wgmma", "wgmma_ws")
    assert knob_space("contraction", SM90A)["schedule"] == ("grid", "persistent", "stream_k")
    assert knob_space("contraction", SM90)["schedule"] == ("grid",)  # persistent blocks need wgmma_ws
    # tensor-map copies and block pairs feed wgmma_ws warpgroups: sm_90a only
    assert knob_space("contraction", SM90A)["copy"] == ("cp_async", "tma")
    assert knob_space("contraction", SM90)["copy"] == ("cp_async",)
    assert knob_space("contraction", SM90A)["cluster"] == (1, 2)
    assert knob_space("contraction", SM80)["cluster"] == (1,)
    assert knob_space("contraction", SM90A)["epilogue"] == ("together", "staggered", "pingpong")
    assert knob_space("contraction", SM90)["epilogue"] == ("together",)
    assert knob_space("contraction", SM90A)["slices"] == ("rows", "cols")  # cols: wgmma only
    assert knob_space("contraction", SM90)["slices"] == ("rows",)
    assert knob_space("attention", SM90A)["copy"] == ("cp_async", "tma")
    assert knob_space("attention", SM90)["copy"] == ("cp_async",)
    with pytest.raises(EmmyError, match="unknown kernel kind 'conv'"):
        knob_names("conv")


def test_fusion_knob_only_with_a_prologue():
    assert "fusion" in knob_space_for(info_of(L.rmsnorm_matmul(7, 64, 32)), SM90)
    assert "fusion" not in knob_space_for(info_of(L.matmul(7, 64, 32)), SM90)


# ------------------------------------------------------------------------------------ legality

GOOD = {
    "block_m": 128, "block_n": 128, "block_k": 64, "split_k": 1, "stages": 4,
    "workers": "wgmma", "warps": 8, "vector": 8,
}


def test_legal_assignment_has_no_reasons():
    info = info_of(L.matmul(512, 4096, 1024))
    assert check(info, GOOD, SM90A) == []


def test_shared_memory_limit_depends_on_target():
    info = info_of(L.matmul(512, 4096, 1024))
    values = dict(GOOD, workers="mma_sync", stages=3, block_n=256, warps=8)
    assert check(info, values, SM80) == []  # 3 x (128 + 256) x 64 x 2 bytes = 144 KB <= 163 KB
    reasons = check(info, values, SM86)
    assert reasons == [
        "shared memory: stages=3 x (block_m=128 + block_n=256) x block_k=64 x 2 bytes = 144.0 KB "
        "exceeds the 99.0 KB a block may use on sm_86"
    ]
    assert any("192.0 KB exceeds the 163.0 KB" in r for r in check(info, dict(values, stages=4), SM80))


def test_dual_contraction_counts_both_weights():
    info = info_of(L.gate_up(512, 3072, 1024))
    assert info.n_contractions == 2
    values = dict(GOOD, workers="mma_sync", block_n=256, stages=3)
    reasons = check(info, values, SM90A)
    assert any("2 x block_n=256" in r for r in reasons)
    assert any(r.startswith("registers: 2 x block_m=128 x block_n=256") for r in reasons)


def test_register_and_thread_limits():
    info = info_of(L.matmul(512, 4096, 1024))
    reasons = check(info, dict(GOOD, workers="mma_sync", block_m=256, block_n=256, warps=4), SM90A)
    assert any("registers: block_m=256 x block_n=256 fp32 accumulators over 128 threads is 512 per thread" in r for r in reasons)
    info_e = info_of(L.silu_mul(7, 64))
    assert check(info_e, {"threads": 1024, "vector": 8, "items": 1}, SM90A) == []


def test_wgmma_and_mma_sync_shapes():
    info = info_of(L.matmul(512, 4096, 1024))
    r = check(info, dict(GOOD, block_m=32, warps=2), SM90A)
    assert "wgmma: warps=2 is not a multiple of 4 (whole warpgroups)" in r
    assert "wgmma: block_m=32 is not a multiple of 64" in r
    assert "wgmma: block_m=64 does not give each of the 2 warpgroups 64-row slices (block_m must be a multiple of 128)" in check(
        info, dict(GOOD, block_m=64, warps=8, epilogue="together"), SM90A
    )
    # (checked once the epilogue is known: with epilogue = pingpong each warpgroup takes whole tiles)
    assert check(info, dict(GOOD, block_m=64, warps=8), SM90A) == []
    assert "wgmma reads its operands from shared memory: stages must be at least 2" in check(info, dict(GOOD, stages=1), SM90A)
    assert any("is not in its domain on sm_90" in x for x in check(info, GOOD, SM90))
    assert warp_grid(64, 64, 4) == (2, 2) and warp_grid(16, 32, 4) == (1, 4) and warp_grid(16, 16, 4) is None
    r = check(info, dict(GOOD, workers="mma_sync", block_m=16, block_n=16, warps=4), SM90A)
    assert any(x.startswith("mma_sync: block_m=16 x block_n=16 cannot be split among warps=4") for x in r)
    # plain threads: 12 warps are 384 threads, 32 along n and 12 rows, which 128 rows do not divide
    r = check(info, dict(GOOD, workers="thread", block_m=128, block_n=64, warps=12, stages=1), SM90A)
    assert "thread workers: block_m=128 is not a multiple of the 12 thread rows of warps=12 with block_n=64" in r
    assert not any(x.startswith("thread workers") for x in check(
        info, dict(GOOD, workers="thread", block_m=192, block_n=64, warps=12, stages=1), SM90A))


def test_three_consumer_warpgroups_trade_registers():
    """192-row tiles: three consumer warpgroups and the producer, 512 threads. setmaxnreg gives
    the consumers 152 registers each (WS3_CONSUMER_REGS), 112 of them for accumulators: 192 x 192
    (96 each) fits, 192 x 256 (128) does not; without a producer there is nothing to trade and
    each of the 384 threads has 168 (128 for accumulators)."""
    from emmy.schedule.contraction import register_budget, ws_register_budgets

    info = info_of(L.matmul(4096, 4096, 1024))
    assert ws_register_budgets("wgmma_ws", 512) == (56, 152) and ws_register_budgets("wgmma_ws", 384) is None
    assert register_budget(SM90A, 512, "wgmma_ws") == (152, 112)
    assert register_budget(SM90A, 512) == (128, 88)
    ws = dict(GOOD, workers="wgmma_ws", copy="tma", block_m=192, warps=12)
    assert not any(x.startswith("registers") for x in check(info, dict(ws, block_n=192), SM90A))
    assert ("registers: block_m=192 x block_n=256 fp32 accumulators over 384 threads is 128 per thread, "
            "over the 112 that fit in 152 registers") in check(info, dict(ws, block_n=256), SM90A)
    from emmy.schedule.space import candidate_facts

    facts = candidate_facts(info, dict(ws, block_n=192, split_k=1, schedule="grid"), SM90A)
    assert (facts["threads"], facts["producer_registers"], facts["consumer_registers"]) == (512, 56, 152)
    assert "producer_registers" not in candidate_facts(info, dict(ws, block_m=128, warps=8, split_k=1), SM90A)
    # gate and up side by side: 2 x 256 columns are 256 accumulators per thread per 64-row
    # slice whatever the warps (known before `warps` is chosen)
    dual = info_of(L.gate_up(512, 3072, 1024))
    msg = ("wgmma_ws: 2 x block_n=256 needs 256 fp32 accumulators per thread for each 64-row slice, "
           "over the 192 a thread can hold")
    assert msg in check(dual, {"workers": "wgmma_ws", "block_n": 256}, SM90A)
    assert check(dual, {"workers": "wgmma_ws", "block_n": 128}, SM90A) == []


def test_vector_and_split_k():
    info = info_of(L.matmul(7, 96, 100))  # K = 100: 16-byte vectors do not divide it
    reasons = check(info, {"vector": 8, "block_k": 32}, SM90)
    assert "vector=8 does not divide the contiguous extent k=100" in reasons
    assert check(info, {"vector": 4, "block_k": 32}, SM90) == []
    f32 = info_of(L.softmax(4, 64))
    assert f32.element_bytes == 4
    assert check(f32, {"vector": 8}, SM90) == [
        "vector=8 of 4-byte elements is 32 bytes; one global access moves at most 16"
    ]
    mm = info_of(L.matmul(7, 96, 1024))
    assert check(mm, {"block_k": 64, "split_k": 3}, SM90) == [
        "split_k=3 does not divide the 16 k-steps (K=1024 / block_k=64)"
    ]
    assert check(mm, {"block_k": 128, "split_k": 16}, SM90) == [
        "split_k=16 exceeds the 8 k-steps (K=1024 / block_k=128)"
    ]


def test_attention_and_reduction_limits():
    att = info_of(L.attention(1, 16, 8, 512, 128))
    assert (att.head_dim, att.value_dim, att.seq_q, att.seq_kv) == (128, 128, 512, 512)
    big = {"block_q": 128, "block_kv": 128, "stages": 3, "workers": "mma_sync", "warps": 8}
    assert any(r.startswith("shared memory: block_q=128 x 128 + stages=3 x block_kv=128") for r in check(att, big, SM86))
    assert any(r.startswith("registers: block_q=128") for r in check(att, dict(big, warps=1), SM90))
    assert "mma_sync: block_q=64 does not give each of the warps=8 16-row slices (block_q must be a multiple of 128)" in check(
        att, {"block_q": 64, "workers": "mma_sync", "warps": 8}, SM90
    )
    # the wgmma flash kernel: a warpgroup per 64 query rows, head dims in 64-column slabs
    wg = {"block_q": 64, "block_kv": 64, "stages": 2, "workers": "wgmma", "warps": 4}
    assert check(att, wg, SM90A) == []
    assert check(att, dict(wg, block_q=128, warps=8), SM90A) == []
    assert check(att, dict(wg, block_q=128, warps=4), SM90A) == [
        "wgmma: block_q=128 is not 64 rows per warpgroup of warps=4",
    ]
    assert check(att, dict(wg, block_q=32, warps=2), SM90A) == [
        "wgmma: warps=2 is not whole warpgroups (a multiple of 4)",
    ]
    # K and V by tensor-map copies: the pipelined wgmma loop, whole key blocks
    tma = dict(wg, stages=3, copy="tma")
    assert check(att, tma, SM90A) == []
    assert check(att, dict(tma, workers="mma_sync", block_q=64, warps=4), SM90A) == [
        "copy=tma copies K and V for the wgmma flash loop: it needs workers=wgmma or wgmma_ws, not mma_sync",
    ]
    assert check(att, dict(tma, stages=2), SM90A) == [
        "copy=tma needs the pipelined wgmma loop: stages at least 3 (stages=2)",
    ]
    att_odd = info_of(L.attention(1, 16, 8, 130, 128))
    assert check(att_odd, tma, SM90A) == []  # the ragged last key block is copied from key 130 - 64
    att_short = info_of(L.attention(1, 16, 8, 48, 128))
    assert check(att_short, tma, SM90A) == [
        "copy=tma copies whole key blocks: block_kv=64 is more than the 48 keys",
    ]
    att96 = info_of(L.attention(1, 4, 2, 512, 96))  # stored as two 64-column slabs, the second half read
    assert not [r for r in check(att96, wg, SM90A) if "head dimension" in r]
    att320 = info_of(L.attention(1, 4, 2, 512, 320))
    assert "wgmma: head dimension 320 is over 256" in check(att320, wg, SM90A)
    red = info_of(L.rmsnorm(512, 1024))
    assert check(red, {"rows_per_block": 4, "threads": 128, "vector": 8}, SM90) == []
    assert check(red, {"rows_per_block": 4, "threads": 64}, SM90) == [
        "threads=64 over rows_per_block=4 does not give each row whole warps (threads must be a multiple of 128)"
    ]


def test_unknown_knob_and_value_outside_domain():
    info = info_of(L.silu_mul(7, 64))
    assert check(info, {"block_m": 64}, SM90) == [
        "'block_m' is not a knob of elementwise kernels (knobs: threads, vector, items)"
    ]
    assert check(info, {"threads": 48}, SM90) == [
        "threads=48 is not in its domain on sm_90: [64, 128, 256, 512, 1024]"
    ]


# ------------------------------------------------------------------------------------ rules

SHAPES = [
    L.matmul(7, 4096, 1024), L.matmul(33, 1024, 2048), L.matmul(512, 1024, 3072),
    L.matmul(2048, 4096, 1024), L.rmsnorm_matmul(7, 4096, 1024), L.rmsnorm_matmul(512, 4096, 1024),
    L.gate_up(7, 3072, 1024), L.gate_up(2048, 3072, 1024), L.matmul(7, 96, 100),
    L.attention(1, 16, 8, 7, 128), L.attention(1, 16, 8, 512, 128), L.attention(1, 16, 8, 2048, 128),
    L.attention(1, 4, 2, 33, 64), L.rmsnorm(7, 1024), L.rmsnorm(512, 128), L.softmax(64, 4096),
    L.silu_mul(7, 3072), L.silu_mul(2048, 3072),
]


@pytest.mark.parametrize("target", ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"])
def test_rules_always_give_a_legal_complete_schedule(target):
    t = get_target(target)
    for example in SHAPES:
        info = info_of(example)
        space = knob_space_for(info, t)
        choices = rules.decide(info, t, space)
        assert choices is not None and set(choices) == set(space)
        values = {k: c.value for k, c in choices.items()}
        assert check(info, values, t) == [], (info.name, values)
        assert all(c.reason for c in choices.values())


def test_rules_follow_the_shapes():
    small = rules.decide(info_of(L.matmul(7, 4096, 1024)), SM90A, knob_space_for(info_of(L.matmul(7, 4096, 1024)), SM90A))
    assert small["block_m"].value == 16 and small["workers"].value == "mma_sync"
    tiles = 4096 // small["block_n"].value * small["split_k"].value
    assert tiles >= SM90A.sms // 2  # small M: narrow tiles or split_k fill the SMs
    big_info = info_of(L.matmul(2048, 4096, 1024))
    big = rules.decide(big_info, SM90A, knob_space_for(big_info, SM90A))
    assert big["workers"].value == "wgmma_ws" and big["block_m"].value >= 128 and big["stages"].value >= 3
    # each consumer warpgroup multiplies one 64-row slice: 2 of them for block_m=128
    assert big["warps"].value == 4 * big["block_m"].value // 64
    assert "tiles of" in big["block_m"].reason and "132 SMs" in big["block_m"].reason
    big80 = rules.decide(big_info, SM80, knob_space_for(big_info, SM80))
    assert big80["workers"].value == "mma_sync" and big80["block_m"].value >= 128
    att_s = info_of(L.attention(1, 16, 8, 7, 128))
    att_l = info_of(L.attention(1, 16, 8, 2048, 128))
    assert rules.decide(att_s, SM90, knob_space_for(att_s, SM90))["block_q"].value == 16
    assert rules.decide(att_l, SM90, knob_space_for(att_l, SM90))["block_q"].value == 64
    # sm_90a, from 1000 keys of head dim 128: the warp-specialized kernel, two consumer
    # warpgroups of 64 rows sharing 128-key blocks that the producer copies by tensor maps
    ws = rules.decide(att_l, SM90A, knob_space_for(att_l, SM90A))
    assert [ws[k].value for k in ("workers", "block_q", "block_kv", "warps", "stages", "copy", "fusion")] == \
        ["wgmma_ws", 128, 128, 8, 2, "tma", "split"]
    assert "producer warpgroup" in ws["workers"].reason and check(att_l, {k: c.value for k, c in ws.items()}, SM90A) == []
    # below, Q K^T on wgmma where 64-row query tiles fill
    att_m = info_of(L.attention(1, 16, 8, 512, 128))
    wg = rules.decide(att_m, SM90A, knob_space_for(att_m, SM90A))
    assert (wg["workers"].value, wg["block_q"].value, wg["warps"].value) == ("wgmma", 64, 4)
    assert rules.decide(att_s, SM90A, knob_space_for(att_s, SM90A))["workers"].value == "mma_sync"
    # K and V by tensor-map copies on the pipelined wgmma loop, at ragged lengths too (the last
    # key block copied from seq_kv - block_kv); cp.async otherwise
    assert wg["copy"].value == "tma" and "tensor-map copies" in wg["copy"].reason
    assert rules.decide(att_s, SM90A, knob_space_for(att_s, SM90A))["copy"].value == "cp_async"
    att_odd = info_of(L.attention(1, 16, 8, 130, 128))
    assert rules.decide(att_odd, SM90A, knob_space_for(att_odd, SM90A))["copy"].value == "tma"
    # the wgmma kernel pinned at long sequences (as before wgmma_ws led): 128 x 128 tiles where
    # they fill the SMs twice (384 tiles at 3000 tokens), 64 x 64 where not (128 at 1000)
    wgmma = {"workers": "wgmma"}
    att_3k = info_of(L.attention(1, 16, 8, 3000, 128))
    wide_3k = rules.decide(att_3k, SM90A, knob_space_for(att_3k, SM90A), wgmma)
    assert [wide_3k[k].value for k in ("block_q", "block_kv", "warps", "stages", "copy")] == [128, 128, 8, 3, "tma"]
    assert check(att_3k, {**wgmma, **{k: c.value for k, c in wide_3k.items()}}, SM90A) == []
    att_1k = info_of(L.attention(1, 16, 8, 1000, 128))
    d_1k = rules.decide(att_1k, SM90A, knob_space_for(att_1k, SM90A), wgmma)
    assert [d_1k[k].value for k in ("block_q", "block_kv", "warps", "stages", "copy")] == [64, 64, 4, 3, "tma"]
    assert rules.decide(att_1k, SM90A, knob_space_for(att_1k, SM90A))["workers"].value == "wgmma_ws"
    att_4k = info_of(L.attention(1, 16, 8, 4096, 128))
    wide = rules.decide(att_4k, SM90A, knob_space_for(att_4k, SM90A), wgmma)
    assert [wide[k].value for k in ("block_q", "block_kv", "warps", "stages", "copy")] == [128, 128, 8, 3, "tma"]
    assert check(att_4k, {**wgmma, **{k: c.value for k, c in wide.items()}}, SM90A) == []
    assert rules.decide(att_4k, SM90, knob_space_for(att_4k, SM90))["block_q"].value == 64  # mma.sync
    # head dim 64 (Llama-3.2-1B, Qwen2-0.5B): 64 query rows by 128 keys, one warpgroup; from 4096
    # keys, where 192-row query blocks give every SM three (32 heads: 704 of them), three
    # consumer warpgroups, not where they would not (14 heads: 308 < 3 x 132), nor at 3000 keys
    att_d64_3k = info_of(L.attention(1, 32, 8, 3000, 64))
    d64 = rules.decide(att_d64_3k, SM90A, knob_space_for(att_d64_3k, SM90A))
    assert [d64[k].value for k in ("workers", "block_q", "block_kv", "warps", "stages", "copy")] == [
        "wgmma", 64, 128, 4, 3, "tma"]
    att_d64 = info_of(L.attention(1, 32, 8, 4096, 64))
    d64 = rules.decide(att_d64, SM90A, knob_space_for(att_d64, SM90A))
    assert [d64[k].value for k in ("workers", "block_q", "block_kv", "warps", "stages", "copy", "schedule")] == [
        "wgmma_ws", 192, 128, 12, 2, "tma", "grid"]
    assert "three consumer warpgroups" in d64["workers"].reason and "704 query blocks" in d64["workers"].reason
    assert check(att_d64, {k: c.value for k, c in d64.items()}, SM90A) == []
    att_d64_few = info_of(L.attention(1, 14, 2, 4096, 64))
    assert rules.decide(att_d64_few, SM90A, knob_space_for(att_d64_few, SM90A))["block_q"].value == 64
    assert rules.decide(att_d64, SM90, knob_space_for(att_d64, SM90))["workers"].value == "mma_sync"
    # a short chunk of queries against many keys in many heads: not three consumers' 192 rows
    from types import SimpleNamespace
    chunk = SimpleNamespace(batch=4096, seq_q=100, seq_kv=8192, head_dim=64)
    assert not rules_attention._ws3_attention(chunk, SM90A)
    assert rules_attention._ws3_attention(SimpleNamespace(batch=4096, seq_q=192, seq_kv=8192, head_dim=64), SM90A)
    # head dims that are not multiples of 64: wgmma from 64 up (Phi-3's 96: the warp-specialized
    # kernel from 1000 keys), mma.sync below (48: wgmma legal, never timed, second choice)
    att_d96 = info_of(L.attention(1, 32, 32, 3000, 96))
    assert rules.decide(att_d96, SM90A, knob_space_for(att_d96, SM90A))["workers"].value == "wgmma_ws"
    att_d48 = info_of(L.attention(1, 8, 8, 1000, 48))
    d48 = rules.decide(att_d48, SM90A, knob_space_for(att_d48, SM90A))
    assert d48["workers"].value == "mma_sync"
    assert [v for v, _ in rules_attention._a_workers(None, att_d48, SM90A, {}, {})] == ["mma_sync", "wgmma", "thread"]
    # gate and up side by side over a long k (Llama-3.2-1B, Mistral-7B): from 4 tiles of 64 x 128
    # per SM pingpong tiles in persistent blocks, no pairs; below, pairs of blocks share each B
    # tile (one pair per tile); over Qwen3's K=1024 they do not pair
    g_long = info_of(L.gate_up(4096, 8192, 2048))
    d = rules.decide(g_long, SM90A, knob_space_for(g_long, SM90A))
    assert (d["schedule"].value, d["cluster"].value, d["copy"].value, d["epilogue"].value) == ("persistent", 1, "tma", "pingpong")
    assert "pingpong" in d["cluster"].reason
    assert check(g_long, {k: c.value for k, c in d.items()}, SM90A) == []
    g_512 = info_of(L.gate_up(512, 8192, 2048))
    d512 = rules.decide(g_512, SM90A, knob_space_for(g_512, SM90A))
    assert (d512["schedule"].value, d512["cluster"].value) == ("grid", 2)
    g_short = info_of(L.gate_up(4096, 3072, 1024))
    short = rules.decide(g_short, SM90A, knob_space_for(g_short, SM90A))
    assert (short["schedule"].value, short["cluster"].value, short["epilogue"].value) == ("persistent", 1, "pingpong")
    red = info_of(L.rmsnorm(512, 1024))
    r = rules.decide(red, SM90, knob_space_for(red, SM90))
    assert r["vector"].value == 8 and r["threads"].value // r["rows_per_block"].value == 32


def test_persistent_schedule_legality():
    info = info_of(L.matmul(4096, 4096, 1024))
    base = dict(GOOD, workers="wgmma_ws", schedule="persistent")
    assert check(info, base, SM90A) == []
    assert check(info, dict(base, workers="wgmma"), SM90A) == [
        "schedule=persistent needs workers=wgmma_ws (a producer warpgroup that stages the next tile "
        "during the epilogue), not workers=wgmma"
    ]
    assert check(info, dict(base, split_k=2), SM90A) == ["schedule=persistent needs split_k=1 (split_k=2)"]
    reading = info_of(L.rmsnorm_matmul_reading_stats(4096, 1024, 1024))
    assert reading.a_reads_prologue and not info_of(L.rmsnorm_matmul(4096, 1024, 1024)).a_reads_prologue
    assert check(reading, dict(base, fusion="fused"), SM90A) == [
        "schedule=persistent: the A side uses row statistics that a fused kernel computes before its "
        "k loop, once per tile; use schedule=grid or fusion=split"
    ]
    assert check(reading, dict(base, fusion="split"), SM90A) == []


def test_ws_row_stats_says_where_a_fused_warp_specialized_kernel_sums_its_statistics():
    """One fact for the lowering, legality and the prior (emmy.analysis.operands)."""
    assert info_of(L.matmul(4096, 1024, 1024)).ws_row_stats == ""
    # A = g * x, g an input: x's tile is copied and rewritten in place by the consumers
    assert info_of(L.rmsnorm_matmul(4096, 1024, 1024, target="sm_90a")).ws_row_stats == "in_place"
    # A = x: the consumers sum the squares from the staged A tiles; not where k is not a whole
    # number of 16-byte chunks
    assert info_of(L.rmsnorm_matmul_folded(4096, 1024, 1024)).ws_row_stats == "a_tiles"
    assert info_of(L.rmsnorm_matmul_folded(4096, 1024, 1020)).ws_row_stats == "before"
    # A = g * (x + r): the producer computes A from two row tensors and sums the squares
    assert info_of(L.add_rmsnorm_matmul(4096, 1024, 1024, target="sm_90a")).ws_row_stats == "producer"
    # A = x * (sum of squares): the statistics before the k loop
    assert info_of(L.rmsnorm_matmul_reading_stats(4096, 1024, 1024)).ws_row_stats == "before"


def test_row_statistics_summed_before_the_k_loop_or_by_the_producer_limit_schedules():
    base = dict(GOOD, workers="wgmma_ws", schedule="persistent", fusion="fused")
    odd = info_of(L.rmsnorm_matmul_folded(4096, 1024, 1020))
    assert (
        "schedule=persistent: the row statistics cannot be summed from the staged tiles (a reduction other "
        "than a sum or max over the k axes, or an A side neither a plain copy nor computed from copied rows): "
        "a fused kernel computes them before its k loop, once per tile; use schedule=grid or fusion=split"
    ) in check(odd, dict(base, vector=4), SM90A)
    assert not [r for r in check(odd, dict(base, vector=4, fusion="split"), SM90A) if "schedule=" in r]
    added = info_of(L.add_rmsnorm_matmul(4096, 1024, 1024, target="sm_90a"))
    staggered = dict(base, epilogue="staggered", block_m=128, block_n=128, warps=8)
    assert check(added, staggered, SM90A) == [
        "epilogue=staggered: the producer warpgroup sums the row statistics while it computes the A side "
        "(from several tensors) and hands them to both consumer warpgroups at once; it needs fusion=split "
        "or epilogue=together"
    ]
    assert check(added, dict(staggered, fusion="split"), SM90A) == []
    assert check(added, dict(staggered, epilogue="together"), SM90A) == []
    # the rules, which prefer staggered there, back off to together (before, the build failed)
    space = knob_space_for(added, SM90A)
    assert rules.decide(added, SM90A, space)["epilogue"].value == "staggered"
    assert rules.decide(added, SM90A, space, {"fusion": "fused"})["epilogue"].value == "together"
    # the consumers sum the statistics of their own rows: a staggered epilogue waits for nothing else
    for info in (info_of(L.rmsnorm_matmul(4096, 1024, 1024, target="sm_90a")), info_of(L.rmsnorm_matmul_folded(4096, 1024, 1024))):
        assert check(info, staggered, SM90A) == []


def test_stream_k_schedule_legality_and_rule():
    info = info_of(L.matmul(1100, 1024, 2048))
    base = dict(GOOD, workers="wgmma_ws", schedule="stream_k")
    assert check(info, base, SM90A) == []
    assert check(info, dict(base, workers="wgmma"), SM90A)[0].startswith("schedule=stream_k needs workers=wgmma_ws")
    assert check(info, dict(base, split_k=2), SM90A) == ["schedule=stream_k needs split_k=1 (split_k=2)"]
    reasons = check(info, dict(base, cluster=2, group_m=2, epilogue="staggered"), SM90A)
    for r in ("schedule=stream_k needs cluster=1 (cluster=2)", "schedule=stream_k needs group_m=1 (group_m=2)",
              "schedule=stream_k needs epilogue=together (epilogue=staggered)",
              "epilogue=staggered takes turns between tiles of a persistent block: it needs schedule=persistent "
              "(schedule=stream_k)"):
        assert r in reasons
    norm = info_of(L.rmsnorm_matmul(1100, 1024, 2048))
    assert check(norm, dict(base, fusion="fused"), SM90A) == [
        "schedule=stream_k: a block's run of k-steps covers part of a row; the row statistics must come "
        "from a kernel of their own (fusion=split, not fused)"
    ]
    assert check(norm, dict(base, fusion="split"), SM90A) == []
    huge = info_of(L.matmul(262144, 65536, 8192))
    assert check(huge, dict(base, block_k=16), SM90A) == [
        "schedule=stream_k: 1048576 tiles x 512 k-steps x 132 blocks overflow the kernel's 32-bit index arithmetic"
    ]
    thin = info_of(L.matmul(150, 200, 2048))  # 6 tiles x 128 k-steps: runs of 5 or 6 steps
    assert check(thin, dict(base, block_m=64, block_n=128, block_k=16, warps=4), SM90A) == [
        "schedule=stream_k: 6 tiles x 128 k-steps on 132 blocks give runs of 5 or 6 steps, so up to 22 blocks "
        "share a tile (at most 8); use larger tiles or a larger block_k"
    ]
    # the rules never take it (H200, docs/bench/h200-stream-k.log: slower at 1100 tokens)
    for M in (1100, 4096):
        mi = info_of(L.matmul(M, 1024, 2048, target="sm_90a"))
        assert rules.decide(mi, SM90A, knob_space_for(mi, SM90A))["schedule"].value != "stream_k"


def test_tma_copies_legality_and_rule():
    info = info_of(L.matmul(4096, 4096, 1024))
    assert check(info, dict(GOOD, workers="wgmma_ws", copy="tma"), SM90A) == []
    assert check(info, dict(GOOD, workers="wgmma", copy="tma"), SM90A) == [
        "copy=tma needs workers=wgmma_ws (its producer warpgroup issues the copies), not workers=wgmma"
    ]
    decided = rules.decide(info, SM90A, knob_space_for(info, SM90A))
    assert decided["workers"].value == "wgmma_ws" and decided["copy"].value == "tma"
    assert "tensor-memory-accelerator" in decided["copy"].reason
    small = info_of(L.matmul(7, 64, 32))
    assert rules.decide(small, SM90A, knob_space_for(small, SM90A))["copy"].value == "cp_async"


@pytest.mark.parametrize("mb, nb, group, cluster", [(1, 7, 1, 1), (5, 3, 1, 1), (5, 3, 2, 1), (7, 9, 4, 1),
                                                    (32, 112, 16, 1), (8, 5, 32, 1), (6, 5, 4, 2), (32, 112, 16, 2)])
def test_tile_order_hands_out_every_tile_once(mb, nb, group, cluster):
    order = [tile_at(t, mb, nb, group, cluster) for t in range(mb * nb)]
    assert sorted(order) == [(m, n) for m in range(mb) for n in range(nb)]
    if group <= cluster:  # along n, a cluster's row tiles together
        assert order[:cluster * 2] == [(r + 0, 0) for r in range(cluster)] + [(r, 1) for r in range(cluster)]
    else:  # down the group's rows first
        assert order[:min(group, mb)] == [(m, 0) for m in range(min(group, mb))]


def test_group_m_legality_and_rule():
    info = info_of(L.matmul(4096, 4096, 1024))
    base = dict(GOOD, workers="wgmma_ws", copy="tma", block_m=128, block_n=256)
    assert check(info, dict(base, group_m=16), SM90A) == []
    assert check(info, dict(base, cluster=2, group_m=2), SM90A) == []
    assert check(info, dict(base, cluster=2, group_m=1), SM90A) == ["group_m=1 is not a multiple of cluster=2"]
    small = info_of(L.matmul(300, 4096, 1024))
    assert check(small, dict(base, group_m=8), SM90A) == ["group_m=8 groups more row tiles than the 3 of block_m=128"]
    assert check(small, dict(base, group_m=4), SM90A) == []
    # Mistral-7B's gate/up at 4096 tokens: 224 MB of weights, far more than L2; groups of 16
    # row tiles read a quarter of what tiles along n do per wave
    big = info_of(L.gate_up(4096, 14336, 4096))
    # (with together's tiles; the rules' own choice is pingpong tiles in the widest groups)
    d = rules.decide(big, SM90A, knob_space_for(big, SM90A), {"epilogue": "together"})
    assert (d["cluster"].value, d["group_m"].value) == (2, 16)
    assert "instead of 134 MB along n" in d["group_m"].reason and "224 MB" in d["group_m"].reason
    assert check(big, {k: c.value for k, c in d.items()}, SM90A) == []
    ping = rules.decide(big, SM90A, knob_space_for(big, SM90A))
    assert (ping["cluster"].value, ping["group_m"].value, ping["epilogue"].value) == (1, 32, "pingpong")
    # at 512 tokens all four row tiles go together, in 128 tiles of 112 columns (3.9 waves;
    # 128 columns would leave the fourth wave 39% full)
    # (with together's tiles: the rules' own choice there is pingpong tiles, 8 x 112 of 64 x 128)
    d512 = rules.decide(info_of(L.gate_up(512, 14336, 4096)), SM90A, knob_space_for(big, SM90A), {"epilogue": "together"})
    assert (d512["group_m"].value, d512["block_n"].value) == (4, 112)
    assert "512 tiles of 128x112" in d512["block_n"].reason
    # Qwen3's gate/up: 12 MB of weights stay in L2, tiles go along n
    qwen = info_of(L.gate_up(4096, 3072, 1024))
    q = rules.decide(qwen, SM90A, knob_space_for(qwen, SM90A), {"epilogue": "together"})
    assert q["group_m"].value == 1 and "stays in the 60 MB L2" in q["group_m"].reason
    # split k: one row of tiles per split part, no order to choose
    assert rules.decide(info_of(L.matmul(64, 4096, 16384)), SM90A, knob_space_for(info, SM90A))["group_m"].value == 1


def test_rules_take_three_warpgroup_tiles_only_narrow():
    """Llama-3.2-1B's down projection at 1100 tokens (2048 x 8192 weights): 192 x 96 tiles are 6 x 22
    = 132, one wave without a split k (three consumer warpgroups, measured 62.4 against 79.7 us
    for 128 x 192 split 4 ways); wider 192-row tiles, measured slow, and 192 rows without a
    producer warpgroup are never proposed (rules_tiles.unruled)."""
    info = info_of(L.matmul(1100, 2048, 8192))
    got = rules.decide(info, SM90A, knob_space_for(info, SM90A))
    assert [got[k].value for k in ("workers", "block_m", "block_n", "split_k", "warps")] == ["wgmma_ws", 192, 96, 1, 12]
    assert got["warps"].reason.startswith("3 consumer warpgroup(s) for 192x96")
    assert rules_tiles.unruled("wgmma_ws", 192, 128) and rules_tiles.unruled("wgmma", 192, 96)
    assert not rules_tiles.unruled("wgmma_ws", 192, 96) and not rules_tiles.unruled("wgmma_ws", 128, 256)


def test_split_tail_legality_and_rule():
    info = info_of(L.matmul(1100, 2048, 1024))  # 9 x 16 = 144 tiles of 128 x 128: 132 + 12
    base = dict(GOOD, workers="wgmma_ws", block_m=128, block_n=128, block_k=64)
    assert check(info, dict(base, split_tail=4), SM90A) == []
    reasons = check(info, dict(base, split_tail=4, split_k=2, schedule="persistent", copy="tma", cluster=2, group_m=2), SM90A)
    for r in ("split_tail=4 needs split_k=1 (split_k=2)", "split_tail=4 needs schedule=grid (schedule=persistent)",
              "split_tail=4 needs cluster=1 (cluster=2)", "split_tail=4 needs group_m=1 (group_m=2)"):
        assert r in reasons
    assert check(info, dict(base, split_tail=3), SM90A) == ["split_tail=3 does not divide the 16 k-steps (K=1024 / block_k=64)"]
    assert check(info, dict(base, block_n=256, split_tail=2), SM90A) == [
        "split_tail=2: 72 tiles on 132 SMs leave no partial wave behind a full one"]
    normed = info_of(L.rmsnorm_matmul(1100, 2048, 1024, target="sm_90a"))
    assert check(normed, dict(base, split_tail=2, fusion="fused"), SM90A) == [
        "split_tail=2: the tail's parts need whole-row statistics from a kernel of their own (fusion=split, not fused)"]
    assert check(normed, dict(base, split_tail=2, fusion="split"), SM90A) == []
    # a product per head (both factors read the head axis: a batch axis)
    batched = L.matmul(1100, 2048, 1024, target="sm_90a")[0]
    for old, new in (("axes [m = 1100", "axes [h = 2, m = 1100"), ("tensor<1100x1024xbf16>", "tensor<2x1100x1024xbf16>"),
                     ("tensor<2048x1024xbf16>", "tensor<2x2048x1024xbf16>"), ("tensor<1100x2048xbf16>", "tensor<2x1100x2048xbf16>"),
                     ("%xa[%m, %k]", "%xa[%h, %m, %k]"), ("%wa[%n, %k]", "%wa[%h, %n, %k]"), ("0 [%m, %n]", "0 [%h, %m, %n]"),
                     ("    %m = loop.axis", '    %h = loop.axis "h" : index\n    %m = loop.axis')):
        batched = batched.replace(old, new)
    heads = info_of((batched, []))
    assert heads.batch == 2
    assert "split_tail=2 needs a contraction without batch axes" in check(heads, dict(base, split_tail=2), SM90A)

    # measured slower than leaving the last wave partly idle: the rules keep one launch
    g = info_of(L.gate_up(1100, 8192, 2048))
    d = rules.decide(g, SM90A, knob_space_for(g, SM90A))
    assert d["split_tail"].value == 1 and "cost more" in d["split_tail"].reason
    # a pinned split tail is completed legally around it
    pinned = rules.decide(g, SM90A, knob_space_for(g, SM90A), {"split_tail": 2, "block_m": 128, "block_n": 128})
    assert (pinned["schedule"].value, pinned["cluster"].value, pinned["group_m"].value) == ("grid", 1, 1)


def test_few_rows_over_a_long_k_take_their_statistics_first():
    """At most 32 rows with RMSNorm over K >= 1024 (Qwen3, Llama-3.2-1B, Mistral-7B at 32
    tokens): the row statistics in a kernel of their own, and Mistral's q/k/v split along k to
    fill the SMs; Qwen3's K=1024 keeps its tiles, and a K of 512 the fused statistics."""
    mistral = info_of(L.rmsnorm_matmul(32, 6144, 4096, target="sm_90a"))
    d = rules.decide(mistral, SM90A, knob_space_for(mistral, SM90A))
    assert (d["workers"].value, d["fusion"].value, d["split_k"].value) == ("mma_sync", "split", 4)
    assert "only streams the weights" in d["fusion"].reason
    qwen = info_of(L.rmsnorm_matmul(32, 4096, 1024, target="sm_90a"))
    q = rules.decide(qwen, SM90A, knob_space_for(qwen, SM90A))
    assert (q["fusion"].value, q["split_k"].value, q["block_n"].value) == ("split", 1, 32)
    short = info_of(L.rmsnorm_matmul(32, 4096, 512, target="sm_90a"))
    assert rules.decide(short, SM90A, knob_space_for(short, SM90A))["fusion"].value == "fused"
    wide = info_of(L.rmsnorm_matmul(512, 6144, 4096, target="sm_90a"))  # wgmma_ws: split for its shared memory
    assert "wgmmas" in rules.decide(wide, SM90A, knob_space_for(wide, SM90A))["fusion"].reason


def test_cluster_legality():
    info = info_of(L.matmul(4096, 4096, 1024))
    pair = dict(GOOD, workers="wgmma_ws", copy="tma", cluster=2, block_m=128, block_n=256)
    assert check(info, pair, SM90A) == []
    assert check(info, dict(pair, copy="cp_async"), SM90A) == [
        "cluster=2 multicasts tensor-map copies: it needs copy=tma (copy=cp_async)"
    ]
    assert check(info, dict(pair, schedule="persistent"), SM90A) == []  # persistent pairs of blocks
    odd = info_of(L.matmul(300, 4096, 1024))
    assert check(odd, pair, SM90A) == ["cluster=2: the 3 row tiles of block_m=128 do not pair up"]
    assert check(info, dict(GOOD, workers="mma_sync", cluster=2), SM80) == ["cluster=2 is not in its domain on sm_80: [1]"]
    # slices = cols: pairs along n, sharing A; any group of row tiles
    cols = dict(pair, slices="cols", block_m=192, block_n=128, warps=8, group_m=1)
    assert check(odd, cols, SM90A) == []  # 2 row tiles of 192, 32 column tiles
    narrow = info_of(L.matmul(300, 640, 1024))
    assert check(narrow, cols, SM90A) == ["cluster=2: the 5 column tiles of block_n=128 do not pair up"]
    assert check(info, dict(pair, group_m=1), SM90A) == ["group_m=1 is not a multiple of cluster=2"]


def matmul_residual(M, N, K):
    """x @ w^T + r: a projection whose epilogue adds a tensor (o_proj and down_proj's residual)."""
    text, args = L.matmul(M, N, K, target="sm_90a")
    text = text.replace(f"%w: tensor<{N}x{K}xbf16>) ->", f"%w: tensor<{N}x{K}xbf16>, %r: tensor<{M}x{N}xbf16>) ->")
    text = text.replace(f"ins(%x, %w : tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>)",
                        f"ins(%x, %w, %r : tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>, tensor<{M}x{N}xbf16>)")
    text = text.replace(f"%wa: tensor<{N}x{K}xbf16>):", f"%wa: tensor<{N}x{K}xbf16>, %ra: tensor<{M}x{N}xbf16>):")
    text = text.replace("    %o = arith.truncf %acc : f32 to bf16\n", f"""    %rv = loop.load %ra[%m, %n] : tensor<{M}x{N}xbf16> -> bf16
    %rf = arith.extf %rv : bf16 to f32
    %sum = arith.addf %acc, %rf : f32
    %o = arith.truncf %sum : f32 to bf16
""")
    assert "%sum" in text and "%ra" in text
    return text, args + [(M, N)]


def test_rules_choose_persistent_blocks_from_4096_rows_where_the_epilogue_reads_no_tensor():
    """Measured on the H200: persistent blocks pay from M=4096 when the epilogue only converts
    the accumulators; one block per tile stays where the epilogue adds a residual, and below
    4096 rows. Persistent is offered wherever it is legal."""
    def schedule(example, **fixed):
        info = info_of(example)
        return rules.decide(info, SM90A, knob_space_for(info, SM90A), fixed)

    big = schedule(L.matmul(4096, 4096, 1024, target="sm_90a"))
    assert big["schedule"].value == "persistent" and "M=4096" in big["schedule"].reason
    stats = schedule(L.rmsnorm_matmul(32768, 4096, 1024, target="sm_90a"))
    assert stats["schedule"].value == "persistent" and stats["fusion"].value == "split"
    residual = schedule(matmul_residual(4096, 1024, 2048))
    assert residual["schedule"].value == "grid" and "adds a tensor" in residual["schedule"].reason
    assert info_of(matmul_residual(64, 64, 64)).epilogue_loads and not info_of(L.matmul(64, 64, 64)).epilogue_loads
    small = schedule(L.matmul(512, 4096, 1024, target="sm_90a"))
    assert small["schedule"].value == "grid" and "from M=4096" in small["schedule"].reason
    pinned = schedule(L.matmul(512, 4096, 1024, target="sm_90a"), schedule="persistent")
    assert pinned["workers"].value == "wgmma_ws" and pinned["split_k"].value == 1
    assert schedule(L.rmsnorm_matmul_reading_stats(4096, 4096, 1024), schedule="persistent")["fusion"].value == "split"
    assert schedule(L.matmul(4096, 4096, 1024, target="sm_90a"), stages=3)["schedule"].value == "grid"


def _explained(model: str, tokens: int) -> dict:
    """{(kernel, knob): (value, reason)} of a compiled model's decisions (sm_90a)."""
    from emmy.driver import CompileOptions, compile_model

    opts = CompileOptions(model=model, layer=0, tokens=tokens, target="sm_90a", stop_after="tile")
    module = compile_model(opts).module
    return {
        (op.kernel_name, name): (kn.value, kn.reason.data if kn.reason is not None else "")
        for op in module.walk() if isinstance(op, KernelOp)
        for name, kn in op.knob_dict().items()
    }


def test_rules_stagger_the_epilogues_of_persistent_q_k_v_projections():
    """epilogue = staggered where a persistent wgmma_ws block's tiles hold one contraction each
    (the q/k/v parts); together where gate and up share the tile, where the epilogue adds a
    residual (grid blocks), and below 4096 rows (grid blocks)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    layer = _explained("Qwen/Qwen3-Embedding-0.6B", 4096)
    assert layer[("rms_norm_qkv_proj", "epilogue")][0] == "staggered"
    assert layer[("rms_norm_gate_up_proj_silu", "schedule")][0] == "persistent"
    value, reason = layer[("rms_norm_gate_up_proj_silu", "epilogue")]
    assert value == "pingpong" and "each consumer warpgroup multiplies and stores whole tiles in turn" in reason
    assert layer[("down_proj_residual", "epilogue")][0] == "together"
    assert _explained("tools/running_example.py:make", 32768)[("rms_norm_qkv_proj", "epilogue")][0] == "staggered"
    assert _explained("tools/running_example.py:make", 512)[("rms_norm_qkv_proj", "epilogue")][0] == "together"


def test_rules_give_sibling_contractions_launches_of_their_own_from_four_waves():
    """siblings: the running example's k and v (stored apart, computed from different
    contractions) get tiles of their own where each alone fills 4 waves of persistent blocks
    (M=32768), and share tiles below (M=4096) and with one block per tile (M=512). The knob
    exists only where there are such siblings: not for the layer's q/k/v (one contraction over
    concatenated weights) nor gate/up (one store reads both)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    big = _explained("tools/running_example.py:make", 32768)
    value, reason = big[("rms_norm_qkv_proj", "siblings")]
    assert value == "apart" and "1024 tiles of 128x256, 7.8 waves" in reason
    value, reason = _explained("tools/running_example.py:make", 4096)[("rms_norm_qkv_proj", "siblings")]
    assert value == "paired" and "1.0 waves, under 4" in reason
    assert _explained("tools/running_example.py:make", 512)[("rms_norm_qkv_proj", "siblings")][0] == "paired"
    layer = _explained("Qwen/Qwen3-Embedding-0.6B", 4096)
    assert not any(knob == "siblings" for _, knob in layer)


def test_rules_give_gate_and_up_pingpong_tiles_from_four_tiles_per_sm(tmp_path):
    """epilogue = pingpong for gate and up side by side: 64 x 128 tiles (one 64 x 256 wgmma per
    k16 for both), two consumer warpgroups taking them in turn in persistent blocks, the row
    statistics from a kernel of their own, no clusters; from 4 tiles per SM (Llama-3.2-1B at
    1100 tokens: 18 x 64 = 1152), not below (512 tokens: 8 x 64 = 512 tiles), and never for
    the single contractions (o, down, q/k/v)."""
    from tiny_models import write_real_sized_model

    write_real_sized_model(tmp_path / "llama-3.2-1b", "llama-3.2-1b")
    layer = _explained(str(tmp_path / "llama-3.2-1b"), 1100)
    gu = {knob: v for (k, knob), (v, _) in layer.items() if k == "rms_norm_gate_up_proj_silu"}
    assert {k: gu[k] for k in ("block_m", "block_n", "warps", "schedule", "epilogue", "fusion", "cluster", "split_k", "group_m")} == {
        "block_m": 64, "block_n": 128, "warps": 8, "schedule": "persistent", "epilogue": "pingpong",
        "fusion": "split", "cluster": 1, "split_k": 1, "group_m": 32,
    }
    # the widest groups of row tiles, even where the weights fit in L2 (Qwen3's 12 MB)
    qwen = rules.decide(info_of(L.gate_up(4096, 3072, 1024, target="sm_90a")), SM90A,
                        knob_space_for(info_of(L.gate_up(4096, 3072, 1024, target="sm_90a")), SM90A))
    assert (qwen["epilogue"].value, qwen["group_m"].value) == ("pingpong", 32)
    assert "widest groups" in qwen["group_m"].reason
    value, reason = layer[("rms_norm_gate_up_proj_silu", "epilogue")]
    assert "1152 tiles of 64x128" in reason and "H200: gate/up 6-14% faster" in reason
    assert all(v != "pingpong" for (k, knob), (v, _) in layer.items() if knob == "epilogue" and k != "rms_norm_gate_up_proj_silu")
    small = _explained(str(tmp_path / "llama-3.2-1b"), 512)
    assert small[("rms_norm_gate_up_proj_silu", "epilogue")][0] != "pingpong"
    # gate and up as a loop example: 4 tiles per SM exactly (528 = 132 x 4: 66 x 8 tiles of 64 x 128)
    assert rules_contraction._pingpong_pays(info_of(L.gate_up(64 * 66, 128 * 8, 1024, target="sm_90a")), SM90A, {"workers": "wgmma_ws"})
    assert not rules_contraction._pingpong_pays(info_of(L.gate_up(64 * 65, 128 * 8, 1024, target="sm_90a")), SM90A, {"workers": "wgmma_ws"})
    assert not rules_contraction._pingpong_pays(info_of(L.matmul(8192, 8192, 1024, target="sm_90a")), SM90A, {"workers": "wgmma_ws"})


def test_pingpong_epilogue_legality():
    info = info_of(L.matmul(4096, 4096, 1024, target="sm_90a"))
    ok = dict(GOOD, workers="wgmma_ws", schedule="persistent", copy="tma", cluster=1, epilogue="pingpong",
              block_m=64, block_n=256, warps=8)
    assert check(info, ok, SM90A) == []
    assert check(info, dict(ok, block_m=128, block_n=128), SM90A) == []
    # both warpgroups on each tile need 64 rows each; pingpong's each take whole tiles
    assert check(info, dict(ok, epilogue="together"), SM90A) == [
        "wgmma_ws: block_m=64 does not give each of the 2 warpgroups 64-row slices (block_m must be a multiple of 128)"
    ]
    # one warpgroup holds the whole tile's accumulators: 128 x 256 / 128 threads = 256 per thread
    assert check(info, dict(ok, block_m=128), SM90A) == [
        "registers: block_m=128 x block_n=256 fp32 accumulators over one warpgroup's 128 threads (epilogue=pingpong) "
        "is 256 per thread, over the 192 that fit in 232 registers"
    ]
    assert check(info, dict(ok, schedule="grid"), SM90A) == [
        "epilogue=pingpong takes turns between tiles of a persistent block: it needs schedule=persistent (schedule=grid)"
    ]
    assert "epilogue=pingpong needs two consumer warpgroups (warps=8, not 12)" in check(
        info, dict(ok, warps=12, block_m=192, block_n=64), SM90A)
    assert check(info, dict(ok, cluster=2, block_m=128, block_n=128), SM90A)[-1] == (
        "epilogue=pingpong: each warpgroup takes its own tiles, which a pair of blocks cannot share (cluster=2)"
    )
    norm = info_of(L.rmsnorm_matmul(4096, 4096, 1024, target="sm_90a"))
    assert check(norm, dict(ok, fusion="fused"), SM90A)[-2:] == [
        "epilogue=pingpong: the row statistics would be summed by both consumer warpgroups over one tile's rows; it needs fusion=split",
        # (A = norm weight x x, computed: the consumer warpgroups of a tile would rewrite it in place)
        "epilogue=pingpong: the computed A side is rewritten in the slot by the warpgroups of one tile, which pingpong does not have",
    ]
    assert check(info, dict(ok, workers="mma_sync"), SM90)[-1] == "epilogue=pingpong is not in its domain on sm_90: [together]"


def test_slices_cols_legality():
    """slices=cols: block_n is cut into the warpgroups' 64-row slices and block_m is the wgmma's N
    (so 16 or 32 rows are legal); a whole-tile epilogue, no statistics summed in the kernel, no
    A side rewritten in place; wgmma only (sm_90a)."""
    info = info_of(L.matmul(3000, 1024, 2048, target="sm_90a"))
    ok = dict(GOOD, workers="wgmma_ws", copy="tma", schedule="grid", cluster=1, epilogue="together", slices="cols",
              block_m=192, block_n=128, warps=8, stages=5)
    assert check(info, ok, SM90A) == []
    assert check(info, dict(ok, block_m=32, block_n=64, warps=4), SM90A) == []
    assert check(info, dict(ok, slices="rows", block_m=32, block_n=64, warps=4), SM90A) == [
        "wgmma_ws: block_m=32 is not a multiple of 64 (slices=rows)"
    ]
    assert check(info, dict(ok, block_n=64), SM90A) == [
        "wgmma_ws: block_n=64 does not give each of the 2 warpgroups 64-row slices (block_n must be a multiple of 128) (slices=cols)"
    ]
    assert check(info, dict(ok, schedule="persistent", epilogue="staggered"), SM90A)[-1] == (
        "slices=cols: each warpgroup holds every row of the tile, so they store it together: it needs epilogue=together "
        "(epilogue=staggered)"
    )
    assert check(info, dict(ok, workers="mma_sync", copy="cp_async"), SM90A)[-1] == (
        "slices=cols cuts the wgmma warpgroups' slices along block_n: it needs workers=wgmma or wgmma_ws (workers=mma_sync)"
    )
    norm = info_of(L.rmsnorm_matmul(4096, 4096, 1024, target="sm_90a"))
    assert check(norm, dict(ok, fusion="fused"), SM90A)[-2:] == [
        "slices=cols: each warpgroup holds every row of the tile, none sums a row's statistics alone: it needs fusion=split",
        "slices=cols: the A side is computed from raw tiles, rewritten by the warpgroup holding their rows, which slices=cols does not have",
    ]
    assert "slices=cols is not in its domain on sm_90: [rows]" in check(info, dict(ok, workers="mma_sync", copy="cp_async"), SM90)


def test_staggered_epilogue_legality():
    info = info_of(L.matmul(4096, 4096, 1024, target="sm_90a"))
    ok = dict(GOOD, workers="wgmma_ws", schedule="persistent", copy="tma", cluster=1, epilogue="staggered")
    assert check(info, ok, SM90A) == []
    assert check(info, dict(ok, schedule="grid"), SM90A) == [
        "epilogue=staggered takes turns between tiles of a persistent block: it needs schedule=persistent (schedule=grid)"
    ]
    assert check(info, dict(ok, warps=4, block_m=128), SM90A)[-1] == (
        "epilogue=staggered needs two consumer warpgroups (warps=8, not 4)"
    )
    residual = info_of(matmul_residual(4096, 1024, 2048))
    assert check(residual, ok, SM90A) == [
        "epilogue=staggered: the epilogue reads a tensor (a residual); a warpgroup stores only its own rows where it reads none"
    ]
    # an f32 store (OLMo-2's o_proj, whose result the norm after it reads): the lowering stages
    # only bf16 results per warpgroup; the rules once chose staggered there and the build failed
    wide = info_of(L.matmul(4096, 4096, 1024, target="sm_90a", f32_out=True))
    assert not wide.parts_stage_results and not wide.epilogue_loads
    assert check(wide, ok, SM90A) == [
        "epilogue=staggered: a store is not a bf16 value of the accumulators (here an f32 one), so the whole "
        "tile is staged as f32 and every warpgroup stores any of its rows"
    ]
    assert rules.decide(wide, SM90A, knob_space_for(wide, SM90A))["epilogue"].value == "together"
    assert check(info, dict(ok, workers="wgmma"), SM90A)[0].startswith("schedule=persistent needs workers=wgmma_ws")
    assert "epilogue=staggered needs workers=wgmma_ws, not workers=wgmma" in check(info, dict(ok, workers="wgmma"), SM90A)
    assert check(info, dict(ok, workers="mma_sync", epilogue="staggered"), SM90)[-1] == (
        "epilogue=staggered is not in its domain on sm_90: [together]"
    )


def test_rules_split_the_row_statistics_of_warp_specialized_products():
    """From 128 rows on, with persistent blocks from 1024 rows."""
    def decide(M):
        info = info_of(L.rmsnorm_matmul(M, 4096, 1024, target="sm_90a"))
        return rules.decide(info, SM90A, knob_space_for(info, SM90A))

    big = decide(4096)
    assert big["workers"].value == "wgmma_ws" and big["fusion"].value == "split"
    assert "kernel of their own" in big["fusion"].reason
    assert [(decide(M)["fusion"].value, decide(M)["schedule"].value) for M in (64, 128, 512, 1100)] == [
        ("fused", "grid"), ("split", "grid"), ("split", "grid"), ("split", "persistent")]
    assert "with split row statistics persistent blocks pay from M=1024" in decide(512)["schedule"].reason


def test_rules_respect_fixed_values_and_report_impossible():
    info = info_of(L.matmul(512, 4096, 1024))
    space = knob_space_for(info, SM90A)
    got = rules.decide(info, SM90A, space, {"block_m": 64, "workers": "mma_sync"})
    assert "block_m" not in got and "workers" not in got
    values = {k: c.value for k, c in got.items()} | {"block_m": 64, "workers": "mma_sync"}
    assert check(info, values, SM90A) == []
    assert rules.decide(info, SM90A, space, {"block_m": 16, "workers": "wgmma"}) is None


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


def test_attention_prologue_kernel_from_32_keys():
    """The rules compute the attention's q/k rows (Qwen3's normalized, rotated ones) in a
    prologue kernel from 32 keys on (H200: the layer at 32 tokens 41.1 -> 39.4 us); below,
    inside the flash kernel. With plain Q, K and V rows there is nothing to compute, and the
    reason says so."""
    from test_attention_lowering import attention_ir, parse_kernel

    from emmy.analysis.classify import classify
    from emmy.tuning.rules_attention import SPLIT_ATTENTION_MIN_KEYS, _a_fusion

    assert SPLIT_ATTENTION_MIN_KEYS == 32
    for keys, first in ((16, "fused"), (31, "fused"), (32, "split"), (512, "split")):
        info = classify(parse_kernel(attention_ir(T=keys, qwen=True)))
        prefs = _a_fusion("fusion", info, SM90A, {}, {})
        assert prefs[0][0] == first and f"{keys} keys" in prefs[0][1], prefs
    plain = _a_fusion("fusion", info_of(L.attention(1, 16, 8, 512, 128)), SM90A, {}, {})
    assert plain[0] == ("split", "Q, K and V are plain rows: no prologue kernel either way, the same flash kernel")


def test_rules_take_wide_k_steps_for_few_rows_without_a_prologue():
    """Measured on the H200: at 32 rows the o and down projections (long k, nothing before the
    k loop) run 13-15% faster in 128-wide k-steps; products with RMSNorm's statistics, short k,
    or more rows keep 64. combine: the combine kernel unless split_k > 1 is pinned with
    last_block, which the rules never choose on their own (H200: slower at 512 tokens)."""
    def decided(example, **fixed):
        info = info_of(example)
        return rules.decide(info, SM90A, knob_space_for(info, SM90A), fixed)

    down = decided(matmul_residual(32, 1024, 3072))
    assert down["workers"].value == "mma_sync" and down["block_k"].value == 128
    assert "M=32 rows stream the weights" in down["block_k"].reason
    assert decided(matmul_residual(33, 1024, 3072))["block_k"].value == 64  # more rows
    assert decided(matmul_residual(32, 1024, 1024))["block_k"].value == 64  # short k
    assert decided(L.rmsnorm_matmul(32, 4096, 2048, target="sm_90a"))["block_k"].value == 64  # prologue
    assert down["combine"].value == "kernel" and "split_k=1" in down["combine"].reason
    split = decided(matmul_residual(128, 1024, 3072))
    assert split["split_k"].value > 1 and split["combine"].value == "kernel"
    small = decided(matmul_residual(32, 1024, 3072), combine="last_block")  # the pin makes the rules split
    assert small["split_k"].value > 1
    assert check(info_of(matmul_residual(512, 1024, 3072)), {"split_k": 1, "combine": "last_block"}, SM90A) == [
        "combine=last_block adds the partial sums of split_k's parts: it needs split_k > 1"
    ]


def test_rules_stage_small_tiles_of_copied_rows_in_a_deep_ring():
    """Measured on the H200: o and down at 512 tokens in 64 x 64 tiles ran 8.0 and 9.8 us eight
    deep against 10.6 and 14.5 four deep; 128 x 128 tiles were slower six deep than four, and
    products whose A is computed (a norm's statistics) lost with deeper rings."""
    def decided(example, **fixed):
        info = info_of(example)
        return rules.decide(info, SM90A, knob_space_for(info, SM90A), fixed)

    small = dict(workers="wgmma_ws", block_m=64, block_n=64, block_k=64, split_k=1)
    ring = decided(matmul_residual(512, 1024, 2048), **small)
    assert ring["stages"].value == 8 and "8-deep staging (4096 outputs a tile" in ring["stages"].reason
    assert decided(matmul_residual(512, 1024, 2048), **dict(small, block_n=128))["stages"].value == 8
    assert decided(matmul_residual(512, 1024, 2048), **dict(small, block_n=256))["stages"].value == 4  # large tile
    assert decided(matmul_residual(512, 1024, 256), **small)["stages"].value == 4  # 4 k-steps
    assert decided(matmul_residual(512, 1024, 2048), **dict(small, split_k=8))["stages"].value == 4
    norm = decided(L.rmsnorm_matmul(512, 1024, 2048, target="sm_90a"), **small)  # A computed
    assert norm["stages"].value == 4
    # a ring deeper than shared memory holds is illegal, and the rules take the next deepest
    info = info_of(matmul_residual(512, 1024, 2048))
    assert any("exceeds the 227.0 KB" in r for r in check(info, dict(small, block_m=128, block_n=128, stages=8), SM90A))
    assert decided(matmul_residual(512, 1024, 2048), **dict(small, block_m=128, block_k=128))["stages"].value == 4
    # a warpgroup tile narrower than 64 x 128 takes the deeper k step first (measured faster at
    # 1024 tokens), and the ring is chosen again for it: 48 KB a step, four deep
    o = decided(matmul_residual(1024, 1024, 2048))
    assert [o[k].value for k in ("block_m", "block_n", "block_k", "split_k", "stages")] == [128, 64, 128, 1, 4]
    assert o["stages"].reason == "16 k-step(s) per block: 4-deep staging"


def test_rules_fill_one_wave_with_small_tiles_in_a_deep_ring_rather_than_split_k():
    """Measured, each projection alone: Qwen3's o and down at 512 tokens in 64 x 64 tiles 8 deep,
    not split, 8.0 / 9.8 us on the H200 against 9.3 / 12.0 for 128-row tiles split along k, and
    8.8 / 12.1 on an H100 against 10.1 / 14.7 (7.8 / 10.0 with the row tiles in groups of 4).
    Where 64-row tiles were not one wave more than half full (1024 tokens: two waves; 128
    tokens: a quarter) they lost, and the rules keep their tiles there."""
    def tile(M, N, K):
        info = info_of(matmul_residual(M, N, K))
        d = rules.decide(info, SM90A, knob_space_for(info, SM90A), {})
        return [d[k].value for k in ("block_m", "block_n", "block_k", "split_k", "stages", "warps")], d

    o, d = tile(512, 1024, 2048)
    assert o == [64, 64, 64, 1, 8, 4]  # 64-deep steps keep the ring 8 deep
    assert d["block_m"].reason.endswith("1 wave on 132 SMs (97% busy), in a deep ring")
    # its wave in groups of 4 row tiles: 7.8 / 10.0 us against 8.8 / 11.8 along n (H100)
    assert d["group_m"].value == 4 and "one wave of 64x64 tiles in a deep ring" in d["group_m"].reason
    assert tile(512, 1024, 3072)[0] == [64, 64, 64, 1, 8, 4]
    wide, d = tile(1024, 1024, 2048)
    assert wide == [128, 64, 128, 1, 4, 8] and d["group_m"].value == 1  # two waves of 64 x 64
    assert tile(128, 1024, 2048)[0][:4] == [128, 32, 64, 4]  # a quarter wave without the split
    assert tile(512, 1024, 384)[0] == [128, 32, 64, 1, 4, 8]  # 6 k-steps: no deep ring, no exemption
    # the estimate itself: the narrow-tile penalty goes only for the ring's tile
    info = info_of(matmul_residual(512, 1024, 2048))
    ring = rules_tiles.gemm_estimate(info, SM90A, "wgmma_ws", 64, 64, 1)
    split = rules_tiles.gemm_estimate(info, SM90A, "wgmma_ws", 64, 64, 2)
    assert ring.ring and not split.ring and ring.seconds < split.seconds
    assert not rules_tiles.gemm_estimate(info, SM90A, "wgmma_ws", 64, 128, 1).ring
    # without a producer warpgroup (sm_90: mma.sync) there is no deep ring, and no grouping for it
    on90 = rules.decide(info, SM90, knob_space_for(info, SM90), {"block_m": 64, "block_n": 64, "split_k": 1})
    assert on90["workers"].value == "mma_sync" and on90["group_m"].value == 1


def test_rules_fill_one_wave_with_small_tiles_of_copied_rows_whatever_the_alternative():
    """The one-wave ring also replaces narrow tiles that need no split, where A is copied as it
    is: an RMSNorm whose weight is folded into B (statistics from the staged rows or a kernel of
    their own), or no prologue; products side by side count as one wider tile. Measured on an
    H100, each projection alone, the rules before and after in the same rounds: Qwen3's q/k/v
    and gate/up at 128 tokens 9.3 -> 7.9 and 11.1 -> 10.0 us (128 x 32 tiles 4 deep before),
    Llama-3.2-1B's q/k/v at 128 tokens 12.2 -> 10.6 (128 x 64 split 2 ways before), Mistral-7B's
    q/k/v at 64 tokens 28.3 -> 22.8, Qwen3's q/k/v and gate/up at 64 tokens (64 x 32 tiles) 11.1
    -> 7.1 and 11.8 -> 8.8."""
    def decided(example):
        info = info_of(example)
        d = rules.decide(info, SM90A, knob_space_for(info, SM90A), {})
        return [d[k].value for k in ("block_m", "block_n", "block_k", "split_k", "stages", "warps", "group_m")], d

    qkv, d = decided(L.rmsnorm_matmul_folded(128, 4096, 1024))
    assert qkv == [64, 64, 64, 1, 8, 4, 2]  # both row tiles of a column together
    assert d["block_m"].reason == "M=128 N=4096: 128 tiles of 64x64, 1 wave on 132 SMs (97% busy), in a deep ring"
    assert "groups of 2 row tiles: one wave of 64x64 tiles in a deep ring" in d["group_m"].reason
    assert decided(L.gate_up(128, 3072, 1024, target="sm_90a"))[0] == [64, 64, 64, 1, 8, 4, 2]  # 96 tiles of two products
    # three row tiles: groups of 4 hold them all
    assert decided(L.rmsnorm_matmul_folded(192, 2048, 2048))[0] == [64, 64, 64, 1, 8, 4, 4]
    # A computed from the norm's weight (not folded): the tile the rules had
    assert decided(L.rmsnorm_matmul(128, 4096, 1024, target="sm_90a"))[0][:2] == [128, 32]
    # 256 tiles, two waves: not the ring
    assert decided(L.rmsnorm_matmul_folded(256, 4096, 1024))[0][:2] != [64, 64]
    # rows that fit one 64-row tile take 64 x 32 tiles where 64 x 64 would make half a wave
    # (H100, Qwen3 at 64 tokens: q/k/v 7.1 us against 11.1 for 128 x 32 tiles, half of them
    # padding, and 7.8 for 64 x 64); with more rows 64 x 32 tiles stay charged as narrow
    few, d = decided(L.rmsnorm_matmul_folded(64, 4096, 1024))
    assert few == [64, 32, 64, 1, 8, 4, 1] and d["block_m"].reason.endswith("in a deep ring")
    assert decided(L.rmsnorm_matmul_folded(128, 2048, 1024))[0][:2] != [64, 32]


# ------------------------------------------------------------------------------ launch budget


def _layer_before_decisions(model: str, tokens: int, target: str = "sm_90a"):
    """(ctx, module) of a model's layer 0 at the tile stage, no knob decided yet."""
    from emmy.driver import CompileOptions, compile_model

    seen = {}

    def keep(name, module):
        if name == "convert-loop-to-tile":
            seen["tile"] = module.clone()

    compile_model(CompileOptions(model=model, layer=0, tokens=tokens, target=target, stop_after="tile"), keep)
    return make_context(), seen["tile"]


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
    ctx, free = _layer_before_decisions(model, tokens)
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
    ctx, module = _layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 128)
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
    ctx, module = _layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 128)
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

    ctx, module = _layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 128)
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
    ctx, module = _layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 32)
    with pytest.raises(EmmyError, match=r"decide-forks: max-launches=-1: give 0 \(no budget\) or more"):
        run_passes(ctx, module, parse_pipeline("decide-forks{max-launches=-1}"))


def test_model_pins_apply_where_they_fit():
    """`emmy.model_pins` (a part of a whole model): a pin naming a kernel or knob this module
    lacks is skipped, not an error; `emmy.pins` keeps the strict check; either must be a string."""
    from xdsl.dialects.builtin import IntegerAttr, StringAttr

    ctx, module = _layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 32)
    strict, lenient, bad = module.clone(), module.clone(), module.clone()
    lenient.attributes["emmy.model_pins"] = StringAttr("embedding.threads=128;attention.block_q=32")
    run_passes(ctx, lenient, parse_pipeline("decide-forks"))
    picked = {(d.kernel, d.knob): (d.value, d.tier) for d in decisions(lenient)}
    assert picked[("attention", "block_q")] == (32, "pinned")
    strict.attributes["emmy.pins"] = StringAttr("embedding.threads=128")
    with pytest.raises(EmmyError, match="pin 'embedding.threads=128': no kernel named 'embedding'"):
        run_passes(ctx, strict, parse_pipeline("decide-forks"))
    bad.attributes["emmy.model_pins"] = IntegerAttr(3, 64)
    with pytest.raises(EmmyError, match="decide-forks: the module's emmy.model_pins must be a string of pins"):
        run_passes(ctx, bad, parse_pipeline("decide-forks"))


def test_the_fusion_knob_exists_only_where_row_statistics_can_be_split():
    """`loop-fuse` marks the o and down projections `emmy.fusion = fused` (their residual add
    merged in), but they have no row statistics: `fusion = split` would build the same CUDA, so
    they get no `fusion` knob; the normed q/k/v and gate/up projections and attention keep it."""
    ctx, module = _layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 64)
    spaces = {}
    for op in module.walk():
        if isinstance(op, KernelOp):
            info = classify(op)
            spaces[op.sym_name.data] = (info, knob_space_for(info, get_target("sm_90a")))
    for name in ("o_proj_residual", "down_proj_residual"):
        info, space = spaces[name]
        assert info.kind == "contraction" and not info.prologue and "fusion" not in space, name
    for name in ("rms_norm_qkv_proj", "rms_norm_gate_up_proj_silu"):
        info, space = spaces[name]
        assert info.prologue and space["fusion"] == ("fused", "split"), name
    assert "fusion" in spaces["attention"][1]


def test_a_split_reason_says_what_the_split_trades():
    """A split of k is explained by both sides of its trade: the f32 parts written and added
    after, against the waves the same tiles make unsplit (and how busy they keep the SMs)."""
    info = info_of(matmul_residual(2500, 4096, 14336))  # Mistral-7B's down projection at 2500 tokens
    d = rules.decide(info, SM90A, knob_space_for(info, SM90A))
    sk, bm, bn = d["split_k"].value, d["block_m"].value, d["block_n"].value
    assert sk > 1
    tiles = -(-2500 // bm) * -(-4096 // bn)
    waves = -(-tiles // SM90A.sms)
    parts = sk * 2500 * 4096 * 4 / 1e6
    assert f"its {sk} f32 parts ({parts:.1f} MB) are written and added after" in d["split_k"].reason
    assert f"against {tiles} tiles unsplit, {waves} waves" in d["split_k"].reason
    assert "added after" not in d["block_m"].reason  # the tile's reason stays the estimate's
    whole = rules.decide(info, SM90A, knob_space_for(info, SM90A), {"split_k": 1})  # pinned: not decided
    assert "split_k" not in whole and "added after" not in whole["block_m"].reason


def test_tiles_160_wide_only_where_they_fill_the_waves_better():
    """block_n = 160 is a fill-only width (rules_tiles.FILL_ONLY_WIDTHS): the rules take it
    where its tiles keep the SMs busier than the best-ranked tile of any other width (Llama-3.2-1B's
    down projection at 2500 tokens: 260 tiles of 128 x 160 in 2 waves, 98% busy, no split), never
    where another width fills the waves at least as well (its o projection at 1100 tokens: 132
    tiles of 192 x 96 fill one wave whole)."""
    from emmy.tuning.rules_tiles import FILL_ONLY_WIDTHS

    assert FILL_ONLY_WIDTHS == {160}
    wide = info_of(matmul_residual(2500, 2048, 8192))
    d = rules.decide(wide, SM90A, knob_space_for(wide, SM90A))
    assert (d["block_m"].value, d["block_n"].value, d["split_k"].value) == (128, 160, 1)
    assert "260 tiles of 128x160, 2 waves on 132 SMs (98% busy)" in d["block_n"].reason
    full = info_of(matmul_residual(1100, 2048, 2048))
    d = rules.decide(full, SM90A, knob_space_for(full, SM90A))
    assert (d["block_m"].value, d["block_n"].value) == (192, 96)
    assert 160 in knob_space_for(full, SM90A)["block_n"]  # in the space (the tuner's), not chosen
