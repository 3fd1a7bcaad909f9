"""The deep ring: small warp-specialized tiles staged eight deep, so that one wave of them fills
the card where a taller tile would have to split its k loop (`emmy.tuning.rules_contraction`
asks these questions for its tiles, stages, k-steps and tile order). Each fact says which
measurement it rests on.
"""

from __future__ import annotations

from math import ceil
from typing import TYPE_CHECKING

from emmy.schedule.contraction import output_tiles
from emmy.targets import Target

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo


# A warp-specialized tile of at most this many outputs (products side by side counted) does at
# most 1 MFLOP per 64-deep k-step, about 0.2 us of an H200 SM's tensor cores: too little to cover
# a copy's latency with the 3 copies in flight of a 4-deep ring.
DEEP_RING_OUTPUTS = 64 * 128


def k_steps(info: KernelInfo, chosen) -> int:
    """The k-steps one block runs: K in steps of block_k, shared among split_k parts."""
    return ceil(ceil(info.K / chosen.get("block_k", 64)) / chosen.get("split_k", 1))


def tile_outputs(info: KernelInfo, chosen) -> int:
    """Outputs of one tile, the products side by side counted."""
    return int(chosen.get("block_m", 128)) * int(chosen.get("block_n", 128)) * info.n_contractions


def ring_sized(info: KernelInfo, chosen) -> bool:
    """A warp-specialized tile small enough (`DEEP_RING_OUTPUTS`) over at least 8 k-steps."""
    return (chosen.get("workers") == "wgmma_ws" and k_steps(info, chosen) >= 8
            and tile_outputs(info, chosen) <= DEEP_RING_OUTPUTS)


def deep_ring(info: KernelInfo, chosen) -> bool:
    """A `ring_sized` tile of copied A rows without a prologue: the rules stage it 8 deep
    (`_c_stages`)."""
    return not info.prologue and ring_sized(info, chosen)


# The tile a deep ring lets fill the card's one wave (`one_wave_ring`), per product: the one
# measured so; narrower ones do less per copy.
RING_TILE = (64, 64)
# ... and where all rows fit one 64-row tile (a 128-row tile would be half padding): measured
# faster than 128 x 32 tiles and than half a wave of 64 x 64 ones.
FEW_ROWS_RING_TILE = (64, 32)


# The row tiles grouped together for the one-wave ring (`_c_group_m`), at most.
RING_GROUP_M = 4


def copies_a(info: KernelInfo) -> bool:
    """The k loop copies A as it is: no row prologue, or one whose statistics read only the staged
    A tiles (`ws_row_stats` "a_tiles": RMSNorm once loop-hoist-params folded its weight into B,
    the rows scaled in the epilogue)."""
    return not info.prologue or info.ws_row_stats == "a_tiles"


def one_wave_ring(info: KernelInfo, target: Target, workers, bm: int, bn: int, sk: int, tiles: int) -> bool:
    """A `ring_sized` tile, `RING_TILE` per product or `FEW_ROWS_RING_TILE` where the rows fit
    it, not split, of copied A rows (`copies_a`) in 64-deep steps, its `tiles` one wave more
    than half full: 8 deep (`_c_stages`), the copies stay ahead of the one consumer warpgroup's
    wgmmas, so it is not slower than a taller tile split along k or a narrower one beside it. The
    ring keeps 64-deep steps (`_c_full_step`) and its row tiles go in groups (`_c_group_m`).

    Measured, each projection alone, same rounds: Qwen3's o and down at 512 tokens in 64 x 64
    tiles 8 deep took 8.0 and 9.8 us on the H200 against 9.3 and 12.0 for 128-row tiles split
    along k (docs/bench/h200-deep-stages-2026-12-05.log), and 8.8 and 10.1 on an H100 against
    10.2 and 14.7 (docs/bench/h100-deep-ring-2026-12-05.log). Qwen3's q/k/v and gate/up at 128
    tokens (their norm's statistics in a kernel of their own, A copied) in 64 x 64 tiles per
    product 8 deep, in groups of 2 row tiles: 7.9 and 10.1 us on an H100 against 9.3 and 11.1
    for 128 x 32 tiles 4 deep (docs/bench/h100-ring-2026-12-05b.log). At 64 tokens (one row
    tile) in 64 x 32 tiles 8 deep: 7.1 and 8.8 us against 11.1 and 11.8 for 128 x 32 and 128 x
    64 split 2 ways, 7.8 and 10.3 for half a wave of 64 x 64 tiles, 7.9 and 9.1 12 deep;
    Llama-3.2-1B's q/k/v at 64 tokens 10.5 against 12.0 (128 x 128 split 4 ways; the Qwen3 layer
    at 64 tokens 42.0 -> 34.2 us with the rules' answer, H100, the same log). Not so with a
    quarter wave: at 128 tokens o and down (32 tiles) 7.0 and 9.2 us against 6.7 and 9.0 for the
    split tiles (H100); nor where 64-row tiles only replace taller ones of the same intensity: at
    1024 tokens 64 x 128 tiles 8 deep took 11.5 and 16.4 us against 10.9 and 15.0 for 128 x 64
    ones (H100); nor over several waves (Llama-3.2-1B's o at 1100 tokens, H200: 30.7-39.3 us
    against 19.5)."""
    return (sk == 1 and target.sms < 2 * tiles <= 2 * target.sms
            and ((bm, bn) == RING_TILE or ((bm, bn) == FEW_ROWS_RING_TILE and info.M <= bm))
            and copies_a(info)
            and ring_sized(info, {"workers": workers, "block_m": bm, "block_n": bn, "split_k": sk}))


def chosen_ring(info: KernelInfo, target: Target, chosen) -> bool:
    """`one_wave_ring` for the tile, split and workers chosen so far."""
    bm, bn, sk = int(chosen.get("block_m", 128)), int(chosen.get("block_n", 128)), int(chosen.get("split_k", 1))
    return one_wave_ring(info, target, chosen.get("workers"), bm, bn, sk, output_tiles(info, bm, bn) * sk)


__all__ = [
    "DEEP_RING_OUTPUTS", "FEW_ROWS_RING_TILE", "RING_GROUP_M", "RING_TILE", "chosen_ring", "copies_a", "deep_ring",
    "k_steps", "one_wave_ring", "ring_sized", "tile_outputs",
]
