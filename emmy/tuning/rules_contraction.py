"""The rules for contractions (`emmy.tuning.rules`): tensor-core workers; block_m, block_n and
split_k ranked by a small roofline estimate that counts tiles and waves (`emmy.tuning.rules_tiles`);
block_k, stages, warps, the tile order, pairs of blocks, persistent blocks, the epilogue
(pingpong tiles for gate and up side by side), split statistics; the deep ring's facts are in
`emmy.tuning.rules_ring`. Each preference says which H200 measurement it rests on.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import ceil
from typing import TYPE_CHECKING

from emmy.schedule.contraction import output_tiles, warp_grid
from emmy.targets import MB, Target
from emmy.tuning.knobs import GROUP_M, WGMMA_WORKERS, KnobValue, cluster_rows, tile_at
from emmy.tuning.legality import check
from emmy.tuning.rules_common import Prefs, closest_first, dispatch, divides_first, info_space, pow2_floor, vector_prefs
from emmy.tuning.rules_ring import RING_GROUP_M, chosen_ring, deep_ring, k_steps, tile_outputs
from emmy.tuning.rules_tiles import (
    WIDE_K_MAX_ROWS, WIDE_K_MIN_K, GemmEstimate, gemm_estimate, gemm_ranking, streams_after_stats,
)

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo


def _c_workers(knob, info, target, chosen, memo) -> Prefs:
    prefs: Prefs = []
    if target.has("wgmma") and info.M >= 64:
        prefs.append((
            "wgmma_ws",
            f"{target.name} has wgmma and M={info.M} fills 64-row warpgroup tiles; a producer "
            f"warpgroup stages the operands (H200: up to 2.4x faster than wgmma)",
        ))
        prefs.append(("wgmma", f"{target.name} has wgmma and M={info.M} fills 64-row warpgroup tiles"))
    if target.has("mma_sync"):
        why = (
            f"M={info.M} is below wgmma's 64-row tile"
            if target.has("wgmma")
            else f"{target.name} has tensor cores through mma.sync (no wgmma)"
        )
        prefs.append(("mma_sync", why))
    prefs.append(("thread", "no tensor-core path fits"))
    return prefs


# epilogue = pingpong for two contractions sharing A (gate and up): each consumer warpgroup
# multiplies whole 64 x (2 x 128) tiles, one 64 x 256 wgmma per k16, and stores them while the
# other multiplies its next tile. Measured on the H200 (same run, gate/up alone, CUDA-graph
# replay, docs/bench/h200-pingpong-{qwen,llama}-proj-2026-12-04.log) against the tiles the layer
# ran before: Qwen3 at 3000 tokens 80.8 -> 69.3 us, at 4096 99.6 -> 93.6; Llama-3.2-1B at 1100
# 143.2 -> 122.7, at 2048 232.5 -> 215.5 (cuBLAS 60.8, 80.8, 113.8, 203.8 without the SiLU;
# the pingpong tiles in groups of 2 to 32 row tiles: along n they are slow, see _c_group_m).
# Then, with this rule, on a model it was not fitted to (h200-pingpong-mistral-proj-2026-12-04.log):
# Mistral-7B's gate/up at 512 tokens 209.9 -> 197.1 us, at 4096 1600.2 -> 1488.4 (over pairs of
# blocks); Llama-3.2-1B's layer at 1100 / 2048 / 4096 tokens 279.6 / 460.0 / 1006.5 -> 270.8 /
# 450.6 / 957.1 us (torch.compile 285.0 / 507.0 / 1042.6; h200-pingpong-llama-layer-2026-12-04.log).
# Single contractions (o, down, q/k/v) in pingpong tiles lost or tied, along n or in groups (o
# and down at 3000 tokens 34-47 us against 23-32; h200-pingpong-single-2026-12-04.log), and
# wider tiles (128 x 96 per contraction, 192 accumulators a thread) were slower than 64 x 128.
PINGPONG_TILE = (64, 128)
# Each warpgroup takes at least two tiles. Below, the H200 measured both ways (gate/up alone,
# pingpong tiles in groups against the rules' tiles then, h200-pingpong-few-tiles-2026-12-04.log):
# Llama-3.2-1B at 512 tokens (3.9 tiles an SM) 61.8 against 67.3 us, Qwen3 at 1024 (2.9) 26.8
# against 28.7, but Qwen3 at 1100 (3.3) 33.0 against 31.4 and at 512 (1.5) 18.7 against 15.6.
PINGPONG_MIN_TILES_PER_SM = 4


def _pingpong_pays(info: KernelInfo, target: Target, chosen: Mapping[str, KnobValue]) -> bool:
    """Whether the rules give a contraction pingpong tiles (PINGPONG_TILE, warps = 8, epilogue
    = pingpong, persistent blocks): gate and up side by side on sm_90a's wgmma_ws, enough tiles
    that every block takes several, no tensor read in the epilogue, and the pingpong block legal
    with what is chosen or pinned already (legality says what pingpong needs: A copied as it
    is, split statistics, no pairs, ...)."""
    bm, bn = PINGPONG_TILE
    if not (
        target.has("wgmma") and chosen.get("workers") == "wgmma_ws" and info.n_contractions == 2
        and not info.epilogue_loads and not info.a_reads_prologue and info.batch == 1
        and output_tiles(info, bm, bn) >= PINGPONG_MIN_TILES_PER_SM * target.sms
    ):
        return False
    block = {"block_m": bm, "block_n": bn, "warps": 8, "split_k": 1, "schedule": "persistent", "cluster": 1,
             "epilogue": "pingpong", **({"fusion": "split"} if info.prologue else {})}
    return not check(info, {**block, **chosen}, target)


def _pingpong_tile(info: KernelInfo, target: Target, chosen: Mapping[str, KnobValue]) -> bool:
    """The chosen tile is the pingpong tile the rules give (see _pingpong_pays)."""
    return _pingpong_pays(info, target, chosen) and (chosen.get("block_m"), chosen.get("block_n")) == PINGPONG_TILE


def _pingpong_block(info: KernelInfo, target: Target, chosen: Mapping[str, KnobValue]) -> bool:
    """The pingpong tile with its two consumer warpgroups chosen (warps = 8): the knobs decided
    after warps (fusion, schedule, cluster, group_m, epilogue) follow it."""
    return _pingpong_tile(info, target, chosen) and int(chosen.get("warps", 0)) == 8


def _pingpong_why(info: KernelInfo, target: Target) -> str:
    tiles = output_tiles(info, *PINGPONG_TILE)
    return (f"gate and up side by side, {tiles} tiles of {PINGPONG_TILE[0]}x{PINGPONG_TILE[1]}: each consumer "
            f"warpgroup multiplies and stores whole tiles in turn (H200: gate/up 6-14% faster from 1100 tokens)")


def _c_tiles(knob, info, target, chosen, memo) -> Prefs:
    if knob in ("block_m", "block_n") and _pingpong_pays(info, target, chosen):
        bm, bn = PINGPONG_TILE
        if knob == "block_m":
            first: Prefs = [(bm, _pingpong_why(info, target))]
        else:
            first = [(bn, _pingpong_why(info, target))] if chosen.get("block_m") == bm else []
        return first + [p for p in _c_tiles_ranked(knob, info, target, chosen, memo) if p[0] not in {v for v, _ in first}]
    return _c_tiles_ranked(knob, info, target, chosen, memo)


def _c_tiles_ranked(knob, info, target, chosen, memo) -> Prefs:
    ranking = gemm_ranking(info, target, chosen, memo)
    out: Prefs = []
    seen: set[int] = set()
    for e in ranking:
        if knob == "block_m":
            value = e.block_m
        elif knob == "block_n":
            if e.block_m != chosen.get("block_m"):
                continue
            value = e.block_n
        else:  # split_k
            if e.block_m != chosen.get("block_m") or e.block_n != chosen.get("block_n"):
                continue
            value = e.split_k
        if value not in seen:
            seen.add(value)
            out.append((value, e.describe(info, target)))
    return out


def _split_trade(info: KernelInfo, target: Target, e: GemmEstimate) -> str:
    """What a split of k trades, for its reason: the f32 parts written and added after, against
    the same tiles unsplit (their waves and how busy those keep the SMs)."""
    (N, nc), M = info.gemm_n_nc, info.M
    parts = e.split_k * info.batch * M * N * nc * 4
    tiles = output_tiles(info, e.block_m, e.block_n)
    waves = ceil(tiles / target.sms)
    return (f"; its {e.split_k} f32 parts ({parts / 1e6:.1f} MB) are written and added after, against "
            f"{tiles} tiles unsplit, {waves} wave{'s' if waves > 1 else ''} ({tiles / (waves * target.sms):.0%} busy)")


def _c_warps(knob, info, target, chosen, memo) -> Prefs:
    bm, bn = int(chosen.get("block_m", 64)), int(chosen.get("block_n", 64))
    nc = info.n_contractions
    workers = chosen.get("workers")
    if _pingpong_tile(info, target, chosen):  # two warpgroups taking the tiles in turn
        want = 8
    elif workers in WGMMA_WORKERS:
        # a 64-row slice per warpgroup; two slices each from 256 rows; three warpgroups for 192
        want = 12 if bm == 192 else 4 * max(1, min(2, bm // 64))
    elif workers == "mma_sync":
        want = max(1, min(8, pow2_floor(bm * bn / 1024)))  # about 32x32 outputs per warp
        if info.M <= 64:  # memory-bound: more warps keep more loads in flight
            want = max(want, min(4, pow2_floor(bm * bn / (16 * 8))))
    else:
        want = max(1, min(8, pow2_floor(bm * bn / (16 * 32))))  # about 16 outputs per thread

    def why(v: int) -> str:
        acc = nc * bm * bn // (32 * v) if bm * bn >= 32 * v else 0
        if workers == "wgmma_ws":
            return (f"{v // 4 or 1} consumer warpgroup(s) for {bm}x{bn}, {acc} accumulators per thread, "
                    f"plus a producer warpgroup")
        if workers == "wgmma":
            return f"{v // 4 or 1} warpgroup(s) for {bm}x{bn}, {acc} accumulators per thread"
        grid = warp_grid(bm, bn, v) if workers == "mma_sync" else None
        if grid is not None:
            wm, wn = grid
            return f"{v} warp(s) as {wm}x{wn}, {bm // wm}x{bn // wn} outputs per warp"
        return f"{32 * v} threads for {bm}x{bn}, {acc} accumulators per thread"

    return [(v, why(v)) for v in closest_first(tuple(info_space(info, target)["warps"]), want)]


def _c_block_k(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (same run, each kernel alone): the layer at 32 tokens with k-steps of
    # 128 against 64, o 6.00 -> 5.22 us and down 7.88 -> 6.86 (the layer 37.8 -> 35.8), while
    # q/k/v (K=1024, RMSNorm's statistics before the k loop) went 7.21 -> 7.75 and the running
    # example at 32 rows 8.4 -> 8.8. A few rows' tiles are weight-streaming: a wider step keeps
    # twice the bytes in flight per block.
    want = 64 if info.element_bytes == 2 else (32 if info.element_bytes >= 4 else 128)
    why = ""
    wide = (
        info.element_bytes == 2 and chosen.get("workers") == "mma_sync" and info.M <= WIDE_K_MAX_ROWS
        and not info.prologue and info.K >= WIDE_K_MIN_K
    )
    if wide:
        want = 128
        why = f"; M={info.M} rows stream the weights: twice the bytes in flight per step (H200: o and down 13-15% faster at 32 rows)"
    values = divides_first(closest_first((16, 32, 64, 128), want), info.K)
    return [
        (v, f"K={info.K} in steps of {v} ({v * info.element_bytes}-byte rows){why if v == want else ''}") for v in values
    ]


def _c_stages(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (docs/bench/h200-deep-stages-2026-12-05.log): Qwen3's o and down
    # projections at 512 tokens in 64 x 64 tiles (128 blocks, no split) took 10.6 and 14.5 us 4
    # deep, 9.1 and 12.5 6 deep, 8.0 and 9.8 8 deep, 8.7 and 11.4 12 deep; in 64 x 128 tiles
    # 11.4 / 9.5 / 8.6 us (o) 4 / 6 / 8 deep; in 128 x 64 tiles 10.1 (6 deep) against 8.5 (8).
    # Larger tiles lost with more stages: 128 x 128 tiles at 3000 and 4096 tokens 6 deep
    # against 4 deep: o 34.1 / 33.5 and 32.6 / 31.3 us, down 46.4 / 44.9 and 46.3 / 43.7. The
    # kernels that compute their A side (a norm's prologue) were measured deeper only in larger
    # tiles, and lost (q/k/v and gate/up at 512 tokens 6 deep: 13.8 and 21.7 us against 11.4 and
    # 15.6), so the deep ring stays with A sides copied as they are.
    # (values left out of an order follow it: `emmy.tuning.rules.decide` appends the domain's rest)
    steps, workers = k_steps(info, chosen), chosen.get("workers")
    deep = deep_ring(info, chosen) or chosen_ring(info, target, chosen)
    if workers == "thread":
        order = [1, 2, 3]
    elif deep:
        order = [8, 6, 5, 4, 3, 2]
    elif steps >= 4:
        order = [4, 3, 2, 5, 1] if target.smem_per_block >= 160 * 1024 else [3, 2, 4, 1, 5]
    elif steps >= 2:
        order = [2, 3, 1, 4, 5]
    else:
        order = [2, 1, 3, 4, 5] if workers in WGMMA_WORKERS else [1, 2, 3, 4, 5]
    outputs = tile_outputs(info, chosen)
    why = (f" ({outputs} outputs a tile: about {2 * outputs * chosen.get('block_k', 64) / 1e6:.2g} MFLOP a k-step,"
           " too little to hide a copy's latency with fewer in flight; H200: o and down at 512 tokens 8.0 and"
           " 9.8 us against 10.6 and 14.5 4-deep)") if deep else ""
    return [
        (v, f"{steps} k-step(s) per block: {v}-deep staging{why if v == 8 else ''}" if v > 1 else
         f"{steps} k-step(s) per block: operands straight to registers")
        for v in order
    ]


def _c_schedule(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (same run, one fresh machine): persistent blocks against one block
    # per tile, from M=4096 rows where the epilogue only converts the accumulators (its bf16
    # results fit the shared memory the 4-deep pipeline leaves): the running example 59.6 ->
    # 56.6 us at M=4096 and 495 -> 486 at M=32768; in the layer at T=4096 q/k/v 55.8 -> 51.4
    # and gate/up 108.1 -> 100.5. Where the epilogue adds a residual (its f32 tiles staged a
    # column slice per round) persistent blocks lost: down 53.3 -> 56.5, o 29.7 -> 31.1; and
    # with 3 stages (room for one round) everything lost (example 495 -> 501).
    # stream_k (runs of k-steps shared out among one block per SM) is never chosen: on the H200 (same
    # run, docs/bench/h200-stream-k.log) Qwen3's o and down at 1100 tokens took 20.6 and 24.3 us
    # as 128x128 stream-K tiles against 19.3 and 21.2 as 72 whole tiles on 72 SMs and 18.0 and
    # 16.8 + 3.7 with the rules' tiles; the products were bound by what all blocks read
    # together, so more busy SMs did not make them faster (Llama-3.2-1B and Qwen3's q/k/v and
    # gate/up alike; 128x256 tiles, 3-4 blocks per tile, were 2-3x slower). With whole waves
    # first and only the rest shared out, q/k/v and gate/up at 1100 and 2048 tokens were 19-84%
    # slower than the rules' persistent blocks (the Llama-3.2-1B layer 343.8 against 300.8 us).
    workers, sk = chosen.get("workers"), chosen.get("split_k", 1)
    if workers != "wgmma_ws" or sk != 1 or info.ws_row_stats == "before":
        return [("grid", "one block per output tile")]
    bm, bn = int(chosen.get("block_m", 128)), int(chosen.get("block_n", 128))
    tiles = output_tiles(info, bm, bn)
    per = ceil(tiles / target.sms)
    persistent = ("persistent", f"{tiles} tiles: one block per SM takes up to {per}")
    if _pingpong_block(info, target, chosen):
        return [("persistent", f"{tiles} tiles: one block per SM takes up to {per}, its two consumer "
                               "warpgroups taking them in turn (epilogue = pingpong)"),
                ("grid", "one block per output tile")]
    split_stats = bool(info.prologue) and chosen.get("fusion") == "split"
    from_rows = PERSISTENT_SPLIT_MIN_ROWS if split_stats else PERSISTENT_MIN_ROWS
    persistent_pays = info.M >= from_rows and not info.epilogue_loads and int(chosen.get("stages", 1)) >= 4
    if _pairs_pay(info, chosen):
        # Measured on the H200 (same run, docs/bench/h200-pairs-persistent.log), gate/up alone:
        # pairs of persistent blocks against pairs of blocks with a tile each, Llama-3.2-1B
        # 450.9 -> 418.9 us and Mistral-7B 1551.8 -> 1533.0 at 4096 tokens (layers 1066.1 ->
        # 1031.5 and 3231.8 -> 3172.5); at 512 tokens Llama level (61.0/60.7), Mistral slower
        # (241.5 -> 257.7).
        # With the row statistics from a kernel of their own, from PERSISTENT_SPLIT_MIN_ROWS as
        # below (H200, gate/up alone, the best of each in one tuning study: pairs with a tile
        # each against persistent pairs, Llama-3.2-1B 235.1 -> 223.2 us at 2048 tokens and
        # 351.6 -> 340.5 at 3000, Mistral-7B 1148.4 -> 1108.0 at 3000).
        pairs_grid = ("grid", "one block per output tile, in pairs sharing B (see cluster)")
        if persistent_pays:
            why = (f"M={info.M}, {tiles} tiles: pairs of blocks sharing B (see cluster), one pair per two SMs "
                   f"taking up to {per} tiles each, staging the next while storing the last "
                   f"(H200: gate/up 1-7% faster than a pair per tile at 4096 tokens, 3-5% at 2048-3000 with "
                   f"the row statistics from a kernel of their own)")
            return [("persistent", why), pairs_grid]
        return [pairs_grid, persistent]
    if persistent_pays:
        if info.M >= PERSISTENT_MIN_ROWS:
            what, evidence = "", "2-5% faster from M=4096 when the epilogue reads no tensor"
        else:
            what, evidence = ", row statistics from a kernel of their own", "layers 0.3-4% faster from 1100 tokens"
        why = (f"M={info.M}, {tiles} tiles{what}: one block per SM takes up to {per}, staging the next tile "
               f"while it stores the last (H200: {evidence})")
        return [("persistent", why), ("grid", "one block per output tile")]
    why = "one block per output tile"
    if info.epilogue_loads:
        why += " (H200: faster than persistent blocks where the epilogue adds a tensor)"
    elif info.M < from_rows:
        with_split = "with split row statistics " if split_stats else ""
        why += f" (H200: {with_split}persistent blocks pay from M={from_rows})"
    return [("grid", why), persistent]


def _c_epilogue(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (same run, two replays each): staggered against together, the running
    # example at M=32768 472.5/473.4 -> 461.6/458.7 us (torch.compile 459.2), at M=4096 57.3 ->
    # 55.9, the layer's q/k/v at T=4096 50.6 -> 49.1; where two contractions share the tile
    # (gate and up, side by side) it lost: 98.7 -> 118.2 us.
    together = ("together", "both consumer warpgroups store each tile between shared barriers")
    if _pingpong_block(info, target, chosen):
        return [("pingpong", _pingpong_why(info, target)), together]
    persistent_pair = (
        chosen.get("schedule") == "persistent" and chosen.get("workers") == "wgmma_ws"
        and int(chosen.get("warps", 0)) == 8 and not info.epilogue_loads
    )
    if not persistent_pair:
        return [together]
    staggered = ("staggered", "each consumer warpgroup stores its own rows, warpgroup 1 after warpgroup 0, so one "
                              "stores while the other multiplies (H200: 2% faster on the q/k/v projections)")
    if info.gemm_n_nc[1] == 1:
        return [staggered, together]
    return [("together", together[1] + " (H200: staggered was slower where gate and up share the tile)"), staggered]


def _c_combine(knob, info, target, chosen, memo) -> Prefs:
    split = int(chosen.get("split_k", 1))
    if split == 1:
        return [("kernel", "split_k=1: no partial sums to add")]
    kernel = ("kernel", f"a kernel of its own adds the {split} parts and runs the epilogue")
    last = ("last_block", f"the last of each tile's {split} blocks adds the parts and runs the epilogue, no extra launch")
    return [kernel, last]


def _c_split_tail(knob, info, target, chosen, memo) -> Prefs:
    """The tiles past the last full wave split along k, as a launch of their own (knobs.py).
    Measured on the H200 (same run, docs/bench/h200-split-tail.log), it cost more than it
    saved: the tail's parts go through the workspace and its last block adds them while the
    others wait, so Llama-3.2-1B's gate/up at 1100 tokens took 123.4 us for 4 full waves plus
    26.8 for the 48 tail tiles split in two (and 2.3 for the row statistics it needs), against
    153.6 in one launch (the layer 329.8 against 327.3); its down projection as 128 x 128 tiles
    with a tail split 8 ways 54.5 + 22.1 against 67.0 + 10.4 with split_k = 4; Qwen3's o and
    down at 1100 tokens the layer 160.3 against 139.6. The rules leave it at 1; it stays a
    knob (pins, the interpreter, and a search that measures)."""
    return [(1, "no split tail (H200: the tail launch adding its parts cost more than the idle SMs it fills)")]


SIBLINGS_APART_WAVES = 4  # waves of tiles each sibling needs alone before it gets launches of its own


def _c_siblings(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (same run, replays timed round-robin): the running example's k and v
    # with tiles of their own against paired in one tile, persistent blocks: at M=32768 459.5
    # against 469.5 us (k and v 113.4 us each against 234.5 together; q alone 218), at M=4096
    # 59.8 against 58.3 (k and v 15.8 each against 28.9: one wave each, two tails).
    paired = ("paired", "each tile holds a column share of every sibling contraction")
    if chosen.get("schedule") != "persistent":
        return [paired, ("apart", "each sibling contraction with tiles of its own")]
    bm, bn = int(chosen.get("block_m", 128)), int(chosen.get("block_n", 128))
    tiles = info.batch * ceil(info.M / bm) * ceil(min(info.contraction_widths) / bn)
    waves = tiles / target.sms
    apart = ("apart", f"each sibling contraction alone: {tiles} tiles of {bm}x{bn}, {waves:.1f} waves on "
                      f"{target.sms} SMs, a persistent launch each (H200: 2% faster at M=32768)")
    if waves >= SIBLINGS_APART_WAVES:
        return [apart, paired]
    return [("paired", f"{paired[1]} (apart: {tiles} tiles each, {waves:.1f} waves, under "
                       f"{SIBLINGS_APART_WAVES}; H200: apart lost at M=4096)"), apart]


def _c_copy(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (tools/bench.py, same run): the layer's contractions at T=4096 with
    # tensor-map copies against cp.async: q/k/v 57.1 against 62.6 us, gate/up 107.2 against
    # 116.0, down 36.9 against 41.3, o 28.3 against 30.2; the running example at M=32768 507.8
    # against 559.9 us.
    if chosen.get("workers") != "wgmma_ws":
        return [("cp_async", "16-byte cp.async copies (tensor-map copies need workers=wgmma_ws)")]
    cp = ("cp_async", "16-byte cp.async copies from every producer thread")
    why = "one tensor-memory-accelerator copy per operand tile from one producer thread (H200: 5-10% faster)"
    return [("tma", why), cp]


def _c_slices(knob, info, target, chosen, memo) -> Prefs:
    # Not measured yet on a GPU: the rules keep the 64-row slices along block_m that every
    # measurement so far used; slices = cols (cuBLAS's orientation for narrow outputs) is
    # reached by tuning or a pin.
    rows = ("rows", "each wgmma warpgroup multiplies 64-row slices of block_m by the whole block_n")
    if str(chosen.get("workers")) not in WGMMA_WORKERS:
        return [("rows", "no wgmma warpgroups to slice")]
    return [rows, ("cols", "each wgmma warpgroup multiplies 64-column slices of block_n by the whole block_m")]


def _c_cluster(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (tools/bench.py, same run): pairs multicasting their B slices were
    # slower than lone blocks, the running example's projection 60.4 against 56.2 us at M=4096
    # and 495.5 against 476.3 us at M=32768 (its L2 traffic was not what held it back: ncu
    # showed L2 at 41% of its peak without clusters).
    if chosen.get("copy") != "tma":
        return [(1, "no thread block clusters")]
    one = (1, "no thread block clusters (H200: faster than pairs multicasting B)")
    two = (2, "pairs of blocks along n share each A tile (multicast tensor-map copies)" if chosen.get("slices") == "cols"
           else "pairs of blocks along m share each B tile (multicast tensor-map copies)")
    if _pingpong_block(info, target, chosen):
        return [(1, "no thread block clusters: pingpong's warpgroups each take tiles of their own"), two]
    if _pairs_pay(info, chosen):
        why = (f"gate and up side by side over K={info.K}: pairs of blocks along m share each B tile "
               "(multicast tensor-map copies; H200: gate/up 7-10% faster from K=2048)")
        return [(2, why), one]
    return [one, two]


def _c_group_m(knob, info, target, chosen, memo) -> Prefs:
    """The order tiles are handed out. Along n (group_m = 1, or the cluster) every wave of tiles
    running at once reads nearly all of B; once B is too large to stay in L2 between waves, each
    wave reads it again from memory. Grouping row tiles makes a wave's tiles share columns:
    the group is chosen to read the fewest distinct A rows and B columns per wave.

    Measured on the H200 (same run, docs/bench/h200-family-*-group.log), each kernel alone:
    Mistral-7B's gate/up (224 MB of weights) in groups against along n, 231.7 against 244.3 us
    at 512 tokens and 1538 against 1565 at 4096; the layers 450.1/448.7 and 3250.9/3261.6 us,
    Llama-3.2-1B's 145.9/148.6 and 1056.5/1060.0: a few percent on the one kernel, within
    noise on the layer."""
    c = cluster_rows(int(chosen.get("cluster", 1)), str(chosen.get("slices", "rows")))
    bm, bn = int(chosen.get("block_m", 128)), int(chosen.get("block_n", 128))
    mb, (n, nc) = ceil(info.M / bm), info.gemm_n_nc
    nb = ceil(n / bn)
    row_bytes = info.K * info.element_bytes  # one row of A, one column of B
    b_bytes = n * nc * row_bytes
    domain = [g for g in GROUP_M if g % c == 0 and g < 2 * max(mb, c)]
    along_n = (c, "tiles along n" if c == 1 else f"tiles along n, clusters of {c} row tiles")
    if mb <= c or int(chosen.get("split_k", 1)) > 1:
        return [along_n] + [(g, f"groups of {g} row tiles") for g in domain if g != c]
    ring_group = min((g for g in domain if g >= min(RING_GROUP_M, mb)), default=1)  # every row tile, if fewer
    if ring_group > 1 and chosen_ring(info, target, chosen):
        # Measured on an H100 (same rounds): Qwen3's o and down at 512 tokens, 64 x 64 tiles 8
        # deep, 7.8 and 10.0 us in groups of 4 row tiles against 8.8 and 11.8 along n (cuBLAS 7.5
        # and 9.9; docs/bench/h100-deep-ring-2026-12-05.log, call 5); q/k/v and gate/up at 128
        # tokens (2 row tiles) 7.9 and 10.1 in groups of 2 against 8.1 and 11.0 along n
        # (docs/bench/h100-ring-2026-12-05b.log). The wave reads the same bytes in either
        # order; the order decides which tiles run side by side. Other one-wave tiles gained
        # nothing from groups (q/k/v and gate/up at 512 tokens in 128-row tiles, o and down at
        # 4096 in 128 x 256: within 2% either way, the same log).
        return [(ring_group, f"groups of {ring_group} row tiles: one wave of {bm}x{bn} tiles in a deep ring "
                             "(H100: 2-15% faster than along n)")] + [
            along_n if g == c else (g, f"groups of {g} row tiles") for g in domain if g != ring_group]
    if _pingpong_block(info, target, chosen):
        # pingpong tiles (64 rows) want the widest groups, B in L2 or not. Measured on the H200
        # (same run, gate/up alone, docs/bench/h200-pingpong-group-2026-12-04.log), groups of
        # 1 / 2 / 4 / 8 / 32 row tiles: Qwen3 at 2048 tokens 61.3 / 50.0 / 49.2 / 48.0 / 46.1 us,
        # at 3000 87.3 / 70.6 / 68.9 / 68.0 / 66.5, at 4096 116.1 / 94.9 / 93.2 / 92.2 / 89.7;
        # Llama-3.2-1B at 1100 238.5 / 170.2 / 143.8 / 137.9 / 130.8, at 4096 739.3 / 603.2 /
        # 491.7 / 464.8 / 450.6
        widest = sorted(domain, reverse=True)
        return [(widest[0], f"groups of {widest[0]} row tiles of {bm}: pingpong tiles read the fewest "
                            "A rows and B columns per wave in the widest groups (H200: 13-82% faster than along n)")] + [
            (g, f"groups of {g} row tiles") for g in widest[1:]]
    if b_bytes <= target.l2_bytes // 2:
        why = f"{along_n[1]}: B ({b_bytes / MB:.0f} MB) stays in the {target.l2_bytes // MB} MB L2 between waves"
        return [(c, why)] + [(g, f"groups of {g} row tiles") for g in domain if g != c]
    wave = min(target.sms, mb * nb)

    def per_wave(g: int) -> int:  # bytes the first wave's tiles read
        tiles = [tile_at(t, mb, nb, g, c) for t in range(wave)]
        rows, cols = {m for m, _ in tiles}, {j for _, j in tiles}
        return len(rows) * bm * row_bytes + len(cols) * bn * nc * row_bytes

    cost = {g: per_wave(g) for g in domain}
    best = min(domain, key=lambda g: (cost[g], g))
    base = cost[c]
    def why(g: int) -> str:
        head = along_n[1] if g == c else f"groups of {g} row tiles"
        return f"{head}: the {wave} tiles of a wave read {cost[g] / MB:.0f} MB"
    if best == c or cost[best] > 0.8 * base:
        return [(c, why(c) + f"; B ({b_bytes / MB:.0f} MB) exceeds half of L2 but no order reads 20% less")] + [
            (g, why(g)) for g in domain if g != c]
    lead = (best, why(best) + f" instead of {base / MB:.0f} MB along n (B, {b_bytes / MB:.0f} MB, "
                              f"does not stay in the {target.l2_bytes // MB} MB L2)")
    return [lead] + [(g, why(g)) for g in sorted(domain, key=lambda g: cost[g]) if g != best]


PAIRS_MIN_K = 2048  # from here pairs of blocks multicasting B pay for two contractions side by side


def _pairs_pay(info: KernelInfo, chosen) -> bool:
    """Two contractions side by side (gate and up) over a long k, whose row tiles pair up: pairs
    of blocks multicasting their B tiles. Measured on the H200 (tools/bench.py --model, same
    run, gate/up alone, `docs/bench/h200-family-*-gateup.*`): Llama-3.2-1B (K=2048) 68.9 -> 64.0
    us at 512 tokens and 517.0 -> 481.9 at 4096; Mistral-7B (K=4096) 1778.6 -> 1609.7 at 4096
    tokens, 260.5 -> 263.4 at 512. Their B tiles (two 128 x 64 weight slices per k-step) are
    twice a single product's, so each block's L2 traffic halves; a single product over K=1024
    (the running example) was slower in pairs (see _c_cluster)."""
    bm = int(chosen.get("block_m", 128))
    return (
        chosen.get("workers") == "wgmma_ws" and int(chosen.get("split_k", 1)) == 1
        and info.gemm_n_nc[1] == 2 and info.K >= PAIRS_MIN_K and not info.a_reads_prologue
        and ceil(info.M / bm) % 2 == 0
    )


def _c_vector(knob, info, target, chosen, memo) -> Prefs:
    return vector_prefs(info)


def _c_final(info, target, chosen, reasons) -> None:
    """Tile reasons describe the final block_m x block_n x split_k, not a ranking step."""
    if not all(k in chosen for k in ("block_m", "block_n", "split_k", "workers")):
        return
    e = gemm_estimate(
        info, target, str(chosen["workers"]), int(chosen["block_m"]), int(chosen["block_n"]),
        int(chosen["split_k"]),
    )
    for k in ("block_m", "block_n", "split_k"):
        if k in reasons:
            reasons[k] = e.describe(info, target)
    if "split_k" in reasons and e.split_k > 1:
        reasons["split_k"] += _split_trade(info, target, e)
    _c_full_step(info, target, chosen, reasons)


def _c_full_step(info, target, chosen, reasons) -> None:
    """A warp-specialized tile with fewer columns per consumer warpgroup than the best tiles
    (128 x 64 against 128 x 128) takes the deeper k step that keeps their work per step, where
    block_k was not pinned and the deeper pipeline is legal. Each step pays a barrier wait and
    the issue of its wgmmas whatever its size. H200, each kernel alone, 128 x 64 tiles with 8
    warps: the Qwen3 layer's o and down projections at 1024 tokens 15.19 -> 12.77 and 17.68 ->
    15.49 us with 128-deep steps, o at 512 tokens (wgmma) 0.76x; the layer in deploy mode at
    1024 tokens 114.9 -> 100.2 us."""
    from emmy.prior.waves import full_step, step_work, warpgroup_rows

    if "block_k" not in reasons or chosen.get("workers") != "wgmma_ws":
        return
    if chosen_ring(info, target, chosen):
        return  # 64-deep steps keep the ring 8 deep in shared memory: 0.93x the 128-deep steps' time six deep
    bk = full_step(info_space(info, target), chosen)
    if bk is None:
        return
    deeper = {**chosen, "block_k": bk}
    if "stages" in reasons and deep_ring(info, chosen):  # the rules' deep ring: choose its depth again
        deeper["stages"] = next((v for v, _ in _c_stages("stages", info, target, deeper, {})
                                 if not check(info, {**deeper, "stages": v}, target)), chosen.get("stages"))
    if check(info, deeper, target):
        return
    was = chosen["block_k"]
    chosen.update(deeper)
    reasons["block_k"] = (f"K={info.K} in steps of {bk} ({bk * info.element_bytes}-byte rows), not {was}: each consumer "
                          f"warpgroup's {warpgroup_rows(chosen)}x{chosen['block_n']} tile then does {step_work(chosen)} "
                          f"multiply-adds per step, as 128x128 tiles with 64-deep steps do (H200: o and down 13-16% "
                          f"faster at 128x64)")
    if "stages" in reasons:  # its reason counts the k-steps, which the deeper step halves
        reasons["stages"] = dict(_c_stages("stages", info, target, chosen, {}))[chosen["stages"]]


# wgmma_ws contractions take their row statistics from a kernel of their own: summed from the A
# tiles in the kernel, the reads compete with the wgmmas for shared memory on every k-step. First
# measured from 4096 rows (H200, Qwen3 layer at T=4096: q/k/v 68.4 -> 62.4 us plus 4.1 us of
# statistics, gate/up 127.8 -> 116.6 plus 2.5; running example at M=32768: 595 -> 583 us with
# the statistics computed twice, once per output group), then at every size from 128 tokens
# (same rounds, docs/bench/h200-split-stats.log, the layers with split statistics against fused):
# Qwen3 at 128/256/512/1100/2048 tokens 43.2/56.3/72.7/139.3/197.5 -> 42.6/54.5/70.6/130.1/188.4
# us, Llama-3.2-1B at 256/512/1100/2048 99.6/148.4/324.1/510.6 -> 94.4/139.3/303.2/478.3,
# Mistral-7B at 512/1100 453.7/963.0 -> 396.7/900.1.
SPLIT_STATS_MIN_ROWS = 128
PERSISTENT_MIN_ROWS = 4096  # from here persistent blocks pay (_c_schedule)
# ... and from this many rows where the row statistics come from a kernel of their own (same
# rounds as above, split statistics with persistent blocks against one block per tile: Qwen3 at
# 1100/2048 tokens 130.1/188.4 -> 129.7/183.9 us, Llama-3.2-1B 303.2/478.3 -> 298.3/461.0,
# Mistral-7B at 1100 900.1 -> 895.2; level from 128 to 512 tokens)
PERSISTENT_SPLIT_MIN_ROWS = 1024


def _c_fusion(knob, info, target, chosen, memo) -> Prefs:
    if info.prologue and _pingpong_block(info, target, chosen):
        return [("split", "the row statistics in a kernel of their own: pingpong's warpgroups each take whole tiles"),
                ("fused", "the row statistics are computed from the rows each block loads anyway")]
    if info.prologue and chosen.get("workers") == "wgmma_ws" and info.M >= SPLIT_STATS_MIN_ROWS:
        return [
            ("split", f"M={info.M}: the row statistics in a kernel of their own, so the k loop's shared "
                      f"memory serves only the wgmmas (H200: 1-14% faster from M={SPLIT_STATS_MIN_ROWS})"),
            ("fused", "the row statistics are computed from the rows each block loads anyway"),
        ]
    if streams_after_stats(info, str(chosen.get("workers"))):
        # Measured on the H200 (docs/bench/h200-few-rows-stats.log), q/k/v alone at 32 tokens:
        # Mistral-7B (K=4096) 39.0 -> 22.5 + 3.0 us (statistics kernel), Llama-3.2-1B (K=2048)
        # 18.0 -> 9.6 + 2.1, and with split_k (which the statistics kernel allows) 16.2 + 3.1 +
        # 1.7 and 6.3 + 2.0 + 1.4. Next call, these rules against the ones before, same rounds:
        # gate/up 69.6 -> 60.8 + 2.0 (Mistral) and 26.3 -> 20.6 + 1.4 (Llama); the layers 163.0
        # -> 137.2 us (torch.compile 161.8) and 69.2 -> 55.9 (82.0).
        return [
            ("split", f"M={info.M} rows over K={info.K}: the row statistics in a kernel of their own, the k loop "
                      f"only streams the weights (H200: q/k/v 1.5-1.9x, gate/up 1.1-1.6x faster at 32 tokens)"),
            ("fused", "the row statistics are computed from the rows each block loads anyway"),
        ]
    if info.prologue:
        return [
            ("fused", "the row statistics are computed from the rows each block loads anyway"),
            ("split", "the row statistics in a kernel of their own"),
        ]
    return [
        ("fused", "the merged producers cost no extra pass over memory"),
        ("split", "the merged producers in kernels of their own"),
    ]


ORDER = ("workers", "block_k", "block_m", "block_n", "split_k", "warps", "stages", "vector", "fusion")
PREFS = dispatch({
    "workers": _c_workers,
    "block_m": _c_tiles,
    "block_n": _c_tiles,
    "split_k": _c_tiles,
    "combine": _c_combine,
    "split_tail": _c_split_tail,
    "warps": _c_warps,
    "block_k": _c_block_k,
    "stages": _c_stages,
    "schedule": _c_schedule,
    "copy": _c_copy,
    "cluster": _c_cluster,
    "group_m": _c_group_m,
    "epilogue": _c_epilogue,
    "slices": _c_slices,
    "vector": _c_vector,
    "siblings": _c_siblings,
    "fusion": _c_fusion,
})
FINAL = _c_final
