"""The rules for attention kernels (`emmy.tuning.rules`): the flash kernel's workers (the
warp-specialized one from 1000 keys of head dim 65-128 on sm_90a, with three consumer warpgroups
at head dim 64 from 4096 keys), its tiles, warps, stages, copies, schedule (persistent blocks from
three waves of query blocks whose keys and values fit in L2), where its computed Q and K come
from, and the parts its key blocks are cut into (where that shortens the launch's critical path).
"""

from __future__ import annotations

from math import ceil

from emmy.diagnostics import EmmyError
from emmy.schedule.attention import computed_operands, kv_head_bytes
from emmy.schedule.attention import plan as attention_plan
from emmy.tuning.rules_common import Prefs, closest_first, dispatch


# From this many keys the warp-specialized flash kernel (wgmma_ws) is the rules' first choice for
# head dims over 64 up to 128. Measured on the H200, causal attention alone, head dim 128, CUDA-graph
# replay (docs/bench/h200-attention-ws-2026-12-02.log, h200-attention-32-8-2026-12-02.log): two
# consumer warpgroups of 64 rows, 2 stages, against the rules' wgmma kernel, in us, 16 / 8 heads:
# 512 keys 16.4 against 13.7 (slower), 1000: 23.2 / 24.7, 2048: 50.2 / 55.5, 3000: 96.2 / 100.3,
# 4096: 150.5 / 156.5, 8192: 539.9 / 581.3, 16384: 2071 / 2183; 32 / 8 heads: 512: 18.2 / 16.6,
# 1000: 36.2 / 37.8, then 2-7% faster up to 16384. At head dim 64 (32 / 8 heads, 1024-8192 keys)
# two consumers were slower than wgmma but at 8192 (docs/bench/h200-attention-ws-rules-2026-12-02d.log).
WS_ATTENTION_MIN_KEYS = 1000

# The wgmma kernels are the rules' choice from this head dim. Measured on the H200 from 64 up
# (64, 80, 96, 128: docs/bench/h200-attention-head-dims-wgmma-2026-12-04.log and the earlier
# logs above); below it a head fills part of one 64-column slab and the wgmma kernel has passed
# the GPU tests (head dim 48) but was never timed, so the rules keep mma.sync there.
WGMMA_ATTENTION_MIN_HEAD_DIM = 64


# Three consumer warpgroups (block_q 192, 12 warps: FlashAttention-3's tile for head dim 64) from
# this many keys, where the 192-row query blocks give every SM at least WS3_ATTENTION_MIN_WAVES of
# them (one 512-thread block fits an SM: the causal tail of the last wave is then a small share).
# Measured on the H200, causal attention alone, head dim 64, CUDA-graph replay, 128-key blocks,
# 2 stages, against the rules' wgmma kernel (64 x 128 tiles), time ratio by heads and keys
# (docs/bench/h200-attention-ws3-2026-12-05.log): 32 / 8 heads 1.04 at 2048, 1.00 at 3000, 0.99
# at 4096, 0.87 at 6144, 0.89 at 8192, 0.86 at 16384 and 0.84 at 32768; 14 / 2 heads 1.44, 1.14,
# 1.03 (2.3 waves), 0.88, 0.89; 12 / 12 heads 1.61, 1.33, 1.09 (2 waves), 0.92 (2.9 waves: not
# taken), 0.88; 128 / 32 heads 1.02, 0.97 (3000 keys: not taken), 0.97, 0.88, 0.88. At head dim 128
# three consumers (64-key blocks: their registers) were 3-15% slower than two (same log). With
# masking steps and this rule, Emmy over cuDNN at head dim 64 was 0.79-0.97 from 4096 tokens for
# 32 / 8, 14 / 2 and 24 / 8 heads (the old rules' kernel 0.87-1.09;
# docs/bench/h200-attention-d64-rules-2026-12-05.log).
WS3_ATTENTION_MIN_KEYS = 4096
WS3_ATTENTION_MIN_WAVES = 3
WS3_BLOCK_Q = 192

# The persistent schedule from this many query blocks per SM (see _a_schedule).
PERSISTENT_ATTENTION_MIN_WAVES = 3


def _ws_attention(info, target) -> bool:
    """Whether the rules prefer the warp-specialized flash kernel with two consumers
    (WS_ATTENTION_MIN_KEYS)."""
    return (target.has("wgmma") and 64 < info.head_dim <= 128 and info.seq_kv >= WS_ATTENTION_MIN_KEYS
            and info.seq_q >= 128)


def _ws3_blocks(info) -> int:
    """Query blocks of three consumers' 192 rows, over every head."""
    return info.batch * ceil(info.seq_q / WS3_BLOCK_Q)


def _ws3_attention(info, target) -> bool:
    """Whether the rules prefer three consumer warpgroups (WS3_ATTENTION_MIN_KEYS). Only with a
    whole 192-row block of queries: fewer (a chunk of queries against a long cache) were not
    measured, and most of a block's rows would be empty."""
    return (target.has("wgmma") and WGMMA_ATTENTION_MIN_HEAD_DIM <= info.head_dim <= 64
            and info.seq_kv >= WS3_ATTENTION_MIN_KEYS and info.seq_q >= WS3_BLOCK_Q
            and _ws3_blocks(info) >= WS3_ATTENTION_MIN_WAVES * target.sms)


def _a_workers(knob, info, target, chosen, memo) -> Prefs:
    sq = info.seq_q
    prefs: Prefs = []
    if _ws3_attention(info, target):
        prefs.append(("wgmma_ws", f"{info.seq_kv} keys of head dim {info.head_dim}, {_ws3_blocks(info)} query "
                                  f"blocks of {WS3_BLOCK_Q}: a producer warpgroup copies K and V while three consumer "
                                  f"warpgroups take turns (H200: 1-16% faster than wgmma from "
                                  f"{WS3_ATTENTION_MIN_KEYS} keys with {WS3_ATTENTION_MIN_WAVES}+ blocks per SM)"))
    elif _ws_attention(info, target):
        prefs.append(("wgmma_ws", f"{info.seq_kv} keys of head dim {info.head_dim}: a producer warpgroup copies K "
                                  f"and V while two consumer warpgroups take turns (H200: 2-7% faster than wgmma "
                                  f"from {WS_ATTENTION_MIN_KEYS} keys, slower at 512)"))
    wgmma = target.has("wgmma") and sq >= 64
    if wgmma and info.head_dim >= WGMMA_ATTENTION_MIN_HEAD_DIM:
        prefs.append(("wgmma", f"{target.name} has wgmma and {sq} queries fill 64-row tiles"))
    if target.has("mma_sync"):
        prefs.append(("mma_sync", "tensor cores through mma.sync, 16 query rows per warp"))
    if wgmma and info.head_dim < WGMMA_ATTENTION_MIN_HEAD_DIM:
        prefs.append(("wgmma", f"head dim {info.head_dim} fills part of one 64-column slab: "
                               "the wgmma kernel was never timed there"))
    prefs.append(("thread", "no tensor-core path fits"))
    return prefs


def _a_block_q(knob, info, target, chosen, memo) -> Prefs:
    sq, heads = info.seq_q, info.batch
    if sq <= 16:
        want, why = 16, f"{sq} queries fit one 16-row tile"
    elif sq <= 32:
        want, why = 32, f"{sq} queries fit one 32-row tile"
    elif chosen.get("workers") == "wgmma_ws" and _ws3_attention(info, target):
        want, why = WS3_BLOCK_Q, f"{sq} queries: three consumer warpgroups of 64 rows sharing each key block"
    elif chosen.get("workers") == "wgmma_ws":
        want, why = 128, f"{sq} queries: two consumer warpgroups of 64 rows sharing each key block"
    elif _wide_wgmma_attention(info, target, chosen):
        want = 128
        why = (f"{sq} queries x {heads} heads: {heads * ceil(sq / 128)} tiles of 128, two warpgroups "
               "sharing each 128-key block copied by tensor maps (H200: faster at 4096 tokens)")
    else:
        # H200, Qwen3 attention at 4096 queries with cp.async copies: 64-row tiles (4 warps) 7%
        # faster than 128-row ones (8 warps); smaller tiles also fill the SMs at shorter sequences
        want = 64
        why = f"{sq} queries x {heads} heads: {heads * ceil(sq / 64)} tiles of 64"
    values = closest_first(sorted({16, 32, 64, 128, want}), want)
    return [(v, why if v == want else f"block_q={v} (the preferred {want} does not fit)") for v in values]


def _wide_wgmma_attention(info, target, chosen) -> bool:
    """128 query rows (two warpgroups) by 128-key blocks: where wgmma runs it, the keys come in
    whole 128-row blocks (tensor-map copies), and the 128-row tiles still give every SM two.
    Measured on the H200 (tools/bench.py, Qwen3 layer at T=4096, same run, tensor-map copies):
    the layer 464.8 us against 475.5 with 64 x 64 tiles (against 483.7 with 128 x 64); the
    shared memory (Q, 3 stages of K and V: 225 KB) leaves one block per SM. Not for head dims of
    64 and less, where the softmax of a 128 x 128 block outweighs its two 64-deep products:
    Llama-3.2-1B's layer at 4096 tokens on the H200 (`--model` with its sizes, same run), the
    attention alone 300.3 us in 128 x 128 tiles against 266.9 in 64 x 128 and 265.6 in 128 x 64
    (cuDNN 211); docs/bench/h200-family-llama-3.2-1b-tiles.*. Ragged lengths too (the last key
    block copied from seq_kv - 128): the attention alone at 3000 tokens, 98.3 us against 107.7 in
    64 x 64 tiles with tensor maps and 115.8 with cp.async (16 / 8 heads; 32 / 8: 192.1, 207.1,
    222.1); in the Qwen3 layer at 3000 tokens the attention kernel 100.4 us against 120.3 with
    the old 64 x 64 cp.async tiles (layer 308.7 against 328.1);
    docs/bench/h200-attention-ragged-2026-12-01.log and h200-attention-ragged-rules-2026-12-01.log."""
    return (
        chosen.get("workers") == "wgmma" and 64 < info.head_dim <= 128 and info.seq_kv >= 128
        and info.batch * ceil(info.seq_q / 128) >= 2 * target.sms
    )


def _a_block_kv(knob, info, target, chosen, memo) -> Prefs:
    want = 128 if info.head_dim <= 64 and info.seq_kv >= 128 else 64
    if chosen.get("block_q") == 128 and _wide_wgmma_attention(info, target, chosen):
        want = 128
    if chosen.get("workers") == "wgmma_ws" and chosen.get("block_q") == 128 and info.seq_kv >= 128:
        # what emmy tune chose for Qwen3's attention (head dim 128) in the layer at 2048, 4096 and
        # 32768 tokens on the H200 (golden/sm_90a/qwen3-embedding-0.6b.json): 128-key blocks
        want = 128
    want = min(want, max(16, 1 << (max(info.seq_kv, 1) - 1).bit_length()))
    values = closest_first((16, 32, 64, 128), want)
    return [
        (v, f"keys in steps of {v} (head dim {info.head_dim}, {info.seq_kv} keys)") for v in values
    ]


def _a_warps(knob, info, target, chosen, memo) -> Prefs:
    bq = chosen.get("block_q", 64)
    if chosen.get("workers") in ("wgmma", "wgmma_ws"):
        want = 4 * max(1, bq // 64)
        producer = " (and the producer's 4 besides)" if chosen["workers"] == "wgmma_ws" else ""
        why = f"one {'consumer ' if producer else ''}warpgroup per 64 rows of block_q={bq}{producer}"
    elif chosen.get("workers") == "mma_sync":
        want = max(1, min(8, bq // 16))
        why = f"one warp per 16 rows of block_q={bq}"
    else:
        want = 4
        why = "4 warps"
    values = closest_first(sorted({1, 2, 4, 8, want}), want)
    return [(v, why if v == want else f"{v} warps (the preferred {want} does not fit)") for v in values]


def _a_stages(knob, info, target, chosen, memo) -> Prefs:
    steps = ceil(info.seq_kv / chosen.get("block_kv", 64))
    if chosen.get("workers") == "wgmma_ws":
        # H200, head dim 128: 3 stages within 1-3% of 2 (docs/bench/h200-attention-ws-2026-12-02.log)
        return [
            (2, f"{steps} key steps: K and V each double-buffered, the producer one block ahead"),
            (3, f"{steps} key steps: 3-deep staging of K and V"),
        ]
    if chosen.get("workers") == "wgmma" and steps >= 3:
        # 3 stages: the software-pipelined wgmma loop (softmax of one key block while the
        # previous block's P x V runs); Qwen3 layer at 4096 tokens on an H200: see
        # docs/running-and-benchmarking.md
        return [
            (3, f"{steps} key steps: 3-deep staging, softmax overlapped with the previous block's P x V"),
            (2, f"{steps} key steps: 2-deep staging of K and V"),
            (1, f"{steps} key steps: 1-deep staging of K and V"),
        ]
    if chosen.get("workers") == "thread":
        order = [1, 2, 3]
    else:
        order = [2, 3, 1] if steps > 1 else [2, 1, 3]
    return [(v, f"{steps} key step(s): {v}-deep staging of K and V") for v in order]


def _a_copy(knob, info, target, chosen, memo) -> Prefs:
    # Measured on the H200 (tools/bench.py, Qwen3 layer at T=4096, same run): the attention
    # kernel with tensor-map K and V copies 209.6 us, with cp.async 250.1 us (ncu showed it
    # bound by instruction issue: the copies were instructions of every thread). At ragged
    # lengths (the last key block copied from seq_kv - block_kv), the attention alone in 64 x 64
    # tiles: 24.8 us against 26.8 at 1000 tokens, 107.7 against 115.8 at 3000 (16 / 8 heads);
    # docs/bench/h200-attention-ragged-2026-12-01.log.
    cp = ("cp_async", "K and V rows by 16-byte cp.async from every thread")
    bkv = chosen.get("block_kv", 64)
    if chosen.get("workers") == "wgmma_ws":
        return [("tma", f"K and V blocks of {bkv} rows by tensor-map copies from the producer warpgroup")]
    if chosen.get("workers") != "wgmma" or chosen.get("stages", 1) < 3 or bkv > info.seq_kv:
        return [cp]
    why = (f"K and V blocks of {bkv} rows by tensor-map copies from one thread, the others only "
           "wait (H200: 16% faster)")
    return [("tma", why), cp]


def _a_schedule(knob, info, target, chosen, memo) -> Prefs:
    # Persistent blocks (wgmma_ws only) take the query blocks from a counter as they free up, the
    # next one's Q rows copied during the last; the grid leaves the handing out to the hardware's
    # block scheduler. Persistent first with two consumer warpgroups (the kernel measured so)
    # where every SM gets PERSISTENT_ATTENTION_MIN_WAVES query blocks or more and the key and
    # value rows of every head fit in L2 together (one L2 section): with fewer blocks there is
    # little to overlap and the counter's order costs; where the rows do not fit, the grid's
    # sections read them better. Causal, head dim 128, 2 stages, CUDA-graph replay, persistent
    # against grid: H200 (h200-attention-persistent-uniform-2026-12-04.log, two runs) 2-4% faster
    # for 32 / 8 heads at 2048-8192 tokens (4-16 waves), 7% slower for 16 / 8 at 2048 (2 waves)
    # and 2-4% slower from 16384 (K and V 64 MiB); H100 (h100-attention-persistent-2026-12-07.log,
    # two runs) 3-5% faster for 32 / 8 at 2048, 3000 and 4096, 1% at 8192, 1-2% for 16 / 8 at
    # 3000 (3 waves), 4096 and 8192; slower for 16 / 8 at 1000 (1 wave, 3%) and 2048 (6%), for
    # 32 / 8 at 1000 (2 waves, 10%), and 1% at 32768.
    grid = ("grid", "a block per query block and head: the block scheduler hands out the causal "
                    "query blocks, longest first, as SMs free up")
    if chosen.get("workers") != "wgmma_ws":
        return [("grid", "a block per query block and head")]
    bq = chosen.get("block_q", 128)
    tiles = info.batch * ceil(info.seq_q / bq)
    waves = ceil(tiles / target.sms)
    gqa = info.attention.gqa
    kv_heads = info.batch // (gqa[1] if gqa else 1)
    kv_bytes = kv_heads * kv_head_bytes(info.seq_kv, info.head_dim, wgmma=True, tma=chosen.get("copy") == "tma")
    persistent = ("persistent", f"{tiles} query blocks ({waves} waves) on {min(tiles, target.sms)} blocks taking "
                  "them from a counter as they free up, the next one's Q rows copied during the last")
    two_consumers = chosen.get("warps") == 8  # what was measured (three: head dim 64, not timed persistent)
    if two_consumers and waves >= PERSISTENT_ATTENTION_MIN_WAVES and kv_bytes <= target.l2_bytes:
        why = persistent[1] + f"; K and V of every head ({kv_bytes / 2**20:.0f} MiB) fit in L2"
        return [("persistent", why), grid]
    return [grid, persistent]


# A split of the key blocks (split_kv) only where it shortens critical_path by this share: the
# estimate was within 0.86-1.21x of the 13 split times it was fitted to (H100; 2-4 parts were
# 1.2-1.9x slower than whole query blocks for 16 / 8 and 32 / 8 heads at 256-1000 tokens:
# docs/bench/h100-split-kv-2026-12-07.log), and a split adds a workspace. 15% at first; 8 / 8
# heads (H100, docs/bench/h100-s75-split-8-8-2026-12-07.log) then measured 2 parts 17% faster at
# 1500 tokens and 9.5% at 2000 (estimated 15% and 11%; cuDNN was 1.10x and 1.13x faster than
# whole query blocks there, 0.92x and 1.02x of 2 parts), 2% slower at 2500 (estimated 10% slower).
SPLIT_KV_MIN_GAIN = 0.10


def _a_split_kv(knob, info, target, chosen, memo) -> Prefs:
    # Parts of a query block's key blocks run as blocks of their own and the last merges them
    # (wgmma_ws, grid). Where the query blocks are fewer than the SMs, or one long causal query
    # block is most of the launch's time, the parts spread its key blocks over idle SMs; where
    # every SM already has query blocks the parts only add their merge. Ranked by the plan's
    # estimate of the launch's critical path (AttentionPlan.critical_path: each block's key
    # blocks and fixed cost, started on the first free SM in the grid's order).
    whole = (1, "each query block's key blocks in one block")
    if chosen.get("workers") != "wgmma_ws" or chosen.get("schedule") != "grid":
        return [whole]
    paths = {}
    for split in (1, 2, 3, 4):
        try:
            p = attention_plan(info, {**chosen, "split_kv": split}, target)
        except EmmyError:
            continue
        paths[split] = (p.critical_path(target.sms * target.blocks_per_sm(p.smem_bytes, p.registers, p.threads)),
                        p.tiles)
    if 1 not in paths:
        return [whole]
    base, tiles = paths[1]
    best = min(paths, key=lambda s: (paths[s][0], s))
    if paths[best][0] > base * (1 - SPLIT_KV_MIN_GAIN):
        why = (f"{tiles} query blocks: their key blocks in one block each, a critical path of {base:.1f} key blocks "
               f"(no split shortens it by {SPLIT_KV_MIN_GAIN:.0%})")
        return [(1, why)] + [(s, f"{s} parts a query block") for s in sorted(paths) if s != 1]
    why = (f"{tiles} query blocks, their key blocks in up to {best} parts merged by the last: a critical path of "
           f"{paths[best][0]:.1f} key blocks against {base:.1f} whole")
    return [(best, why), (1, whole[1])] + [(s, f"{s} parts a query block") for s in sorted(paths) if s not in (1, best)]


SPLIT_ATTENTION_MIN_KEYS = 32  # from here the attention's q/k rows come from a prologue kernel


def _a_fusion(knob, info, target, chosen, memo) -> Prefs:
    # Measured on an H200 (Qwen3 attention, head dim 128): computing the normalized, rotated Q and
    # K rows inside the flash kernel costs each query block the K rows of every key block it
    # visits; a prologue kernel computing them once was 1.7x faster at 100 tokens and 2.6x at
    # 512. At 32 tokens (same run, replays timed round-robin) the layer took 39.4 us split against
    # 41.1 fused: attention 3.5 + 2.6 us of prologue against 11.5, its 16 blocks of one or two
    # warps computing every K row themselves. Below 32 keys it was not measured.
    if not computed_operands(info):
        return [
            ("split", "Q, K and V are plain rows: no prologue kernel either way, the same flash kernel"),
            ("fused", "Q, K and V are plain rows: the same flash kernel"),
        ]
    if info.seq_kv >= SPLIT_ATTENTION_MIN_KEYS:
        return [
            ("split", f"{info.seq_kv} keys: K rows computed once by a prologue kernel, not per query block"),
            ("fused", "Q and K computed inside the flash kernel"),
        ]
    return [
        ("fused", f"{info.seq_kv} keys: one kernel, each K row is computed by few query blocks"),
        ("split", "Q and K computed once by a prologue kernel"),
    ]


ORDER = ("workers", "block_q", "block_kv", "warps", "stages", "copy", "schedule", "fusion", "split_kv")
PREFS = dispatch({
    "workers": _a_workers,
    "block_q": _a_block_q,
    "block_kv": _a_block_kv,
    "warps": _a_warps,
    "stages": _a_stages,
    "copy": _a_copy,
    "schedule": _a_schedule,
    "fusion": _a_fusion,
    "split_kv": _a_split_kv,
})
