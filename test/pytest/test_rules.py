"""The default rules: a legal, complete schedule for every shape and target, and the
shapes' answers (tiles, steps, rings, fusion, prologue kernels, 160-wide tiles)."""

from __future__ import annotations

import pytest

import loop_examples as L
from emmy.analysis.classify import classify
from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp
from emmy.ir_io import parse_pipeline, run_passes
from emmy.passes.decide_forks import decisions
from emmy.tuning import rules, rules_attention, rules_tiles
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check
from emmy.targets import get_target
from knob_helpers import SM80, SM90, SM90A, info_of, layer_before_decisions, matmul_residual


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


@pytest.mark.parametrize("heads,tokens,schedule", [
    (16, 1000, "grid"),         # 128 query blocks: one wave
    (16, 2048, "grid"),         # 256: two waves
    (32, 1000, "grid"),         # 256
    (16, 3000, "persistent"),   # 384: three waves, K and V 12 MiB
    (32, 2048, "persistent"),
    (16, 8192, "persistent"),   # K and V 32 MiB
    (16, 16384, "grid"),        # K and V 64 MiB: more than the L2
])
def test_rules_take_persistent_attention_blocks_from_three_waves_whose_keys_fit_in_l2(heads, tokens, schedule):
    """Two consumer warpgroups (head dim 128): persistent blocks where every SM gets three query
    blocks and all heads' K and V fit in L2 (h100-attention-persistent-2026-12-07.log), else the
    grid; the reason says which."""
    att = info_of(L.attention(1, heads, 8, tokens, 128))
    d = rules.decide(att, SM90A, knob_space_for(att, SM90A))
    assert (d["workers"].value, d["warps"].value, d["schedule"].value) == ("wgmma_ws", 8, schedule)
    assert check(att, {k: c.value for k, c in d.items()}, SM90A) == []
    if schedule == "persistent":
        assert "waves)" in d["schedule"].reason and "fit in L2" in d["schedule"].reason
    else:
        assert "block scheduler" in d["schedule"].reason


@pytest.mark.parametrize("heads,kv_heads,tokens,parts", [
    (4, 4, 1000, 4),     # 32 query blocks for 132 SMs: the longest's 8 key blocks in 4 parts
    (4, 2, 3000, 2),     # 96 query blocks, up to 24 key blocks: halves
    (16, 8, 2048, 1),    # 256 query blocks, two waves: parts only add their merge
    (32, 8, 1000, 1),
    (16, 8, 3000, 1),    # persistent blocks (split_kv is the grid's)
])
def test_rules_split_the_keys_where_the_critical_path_falls(heads, kv_heads, tokens, parts):
    """split_kv: the parts that give the launch the shortest estimated critical path
    (AttentionPlan.critical_path), where it is SPLIT_KV_MIN_GAIN shorter than the whole query
    blocks'; the reason gives both paths."""
    att = info_of(L.attention(1, heads, kv_heads, tokens, 128))
    d = rules.decide(att, SM90A, knob_space_for(att, SM90A))
    values = {k: c.value for k, c in d.items()}
    assert values["workers"] == "wgmma_ws" and values["split_kv"] == parts
    assert check(att, values, SM90A) == []
    if parts > 1:
        assert f"up to {parts} parts merged by the last" in d["split_kv"].reason and "whole" in d["split_kv"].reason
    elif values["schedule"] == "grid":
        assert "no split shortens it" in d["split_kv"].reason
    else:
        assert d["split_kv"].reason == "each query block's key blocks in one block"


def test_attention_prologue_kernel_from_32_keys():
    """The rules compute the attention's q/k rows (Qwen3's normalized, rotated ones) in a
    prologue kernel from 32 keys on (H200: the layer at 32 tokens 41.1 -> 39.4 us); below,
    inside the flash kernel. With plain Q, K and V rows there is nothing to compute, and the
    reason says so."""
    from attention_examples import attention_ir, parse_kernel

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


def test_model_pins_apply_where_they_fit():
    """`emmy.model_pins` (a part of a whole model): a pin naming a kernel or knob this module
    lacks is skipped, not an error; `emmy.pins` keeps the strict check; either must be a string."""
    from xdsl.dialects.builtin import IntegerAttr, StringAttr

    ctx, module = layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 32)
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
    ctx, module = layer_before_decisions("Qwen/Qwen3-Embedding-0.6B", 64)
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
