"""Targets, knob spaces and legality."""

from __future__ import annotations

import pytest

import loop_examples as L
from emmy.diagnostics import EmmyError
from emmy.tuning.knobs import knob_names, knob_space, knob_space_for
from emmy.tuning.legality import check, warp_grid
from emmy.targets import TARGETS, get_target
from knob_helpers import GOOD, SM80, SM86, SM90, SM90A, info_of


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
    assert knob_names("attention") == ("block_q", "block_kv", "workers", "stages", "warps", "copy", "schedule", "split_kv")
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
