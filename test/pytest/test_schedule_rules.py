"""Schedules (persistent, stream k, TMA copies, group_m, split tails, clusters, epilogues,
slices): their legality and where the rules choose them."""

from __future__ import annotations

import pytest

import loop_examples as L
from emmy.dialects.tile import KernelOp
from emmy.tuning import rules, rules_contraction, rules_tiles
from emmy.tuning.knobs import knob_space_for, tile_at
from emmy.tuning.legality import check
from knob_helpers import GOOD, SM80, SM90, SM90A, info_of, matmul_residual


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
