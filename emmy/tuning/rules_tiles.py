"""The rules' tile ranking for contractions (`emmy.tuning.rules_contraction` reads it): a small
roofline estimate of each (block_m, block_n, split_k) choice that counts tiles and waves
(`gemm_estimate`), the tiles the rules never propose (`unruled`), the widths they take only to
fill the waves (`FILL_ONLY_WIDTHS`), and the ranking of the legal choices (`gemm_ranking`).
Each correction says which measurement it rests on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import ceil
from typing import TYPE_CHECKING

from emmy.schedule.contraction import output_tiles
from emmy.targets import Target
from emmy.tuning.knobs import WGMMA_WORKERS, KnobValue
from emmy.tuning.legality import check
from emmy.tuning.rules_common import info_space
from emmy.tuning.rules_ring import one_wave_ring

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo

LAUNCH_OVERHEAD_S = 3e-6  # one kernel launch
SPLIT_OVERHEAD_S = 1e-6  # combining split_k partial sums (a small extra pass)


def unruled(workers, bm: int, bn: int) -> bool:
    """Tiles the rules' estimate ranks wrongly, which they never propose: 192 rows (three consumer
    warpgroups, warps = 12) other than warp-specialized ones at most 96 columns wide. Measured
    on the H200 (docs/bench/h200-llama192-2026-12-03g.log, h200-qwen192-2026-12-03g.log):
    Llama-3.2-1B's down projection at 1100 tokens in 192 x 96 tiles (132, one wave, no split k)
    62.4 us against 79.7 for the rules' 128 x 192 split 4 ways and 67.1 for 192 x 192 split 2
    ways; its layer then 278.0 us, torch.compile's 277.5 (h200-llama-layer-2026-12-03g.log; 290.2
    against 276.4 with the rules before, h200-llama-layer192-2026-12-03g.log); the Qwen3 o and down
    projections at 4096 tokens in 192 x 192 tiles 45.7 and 62.6 us against 28.9 and 40.3 for
    128 x 256; at 3000 tokens in 192 x 128 tiles 25.1 and 34.7 us, 2-3% over the 256 x 96 the
    nearest tier gives them (24.4 and 33.7, h200-qwen-proj-stages-2026-12-03g.log). Without a
    producer warpgroup three warpgroups were never measured."""
    return bm == 192 and (workers != "wgmma_ws" or bn > 96)


# Widths the rules take only where their tiles fill the waves better than the best-ranked tile of
# any other width: the estimate ranks them above narrower full waves they lose to. Measured on
# an H100 (docs/bench/h100-n160-2026-12-06c.log): 128 x 160 tiles in 2 to 4 waves 98% busy took
# Mistral-7B's o projection at 2500 tokens 156.2 us against 167.4 for 128 x 256 (81% busy), and
# Llama-3.2-1B's o and down at 2500 46.5 and 136.2 against 50.3 for 128 x 192 and 192.1 for
# 128 x 256 split 4 ways; at 1100 tokens, in one or two waves 89% busy, 73.2 and 22.4 against
# 70.0 and 20.6 for 192 x 96 tiles filling one wave whole (Mistral-7B's and Llama-3.2-1B's o).
FILL_ONLY_WIDTHS = frozenset({160})


def gate_fill_only(ests: list[GemmEstimate], target: Target) -> list[GemmEstimate]:
    """`ests` without the tiles of FILL_ONLY_WIDTHS that keep the SMs no busier than the
    best-ranked tile of another width."""
    others = [e for e in ests if e.block_n not in FILL_ONLY_WIDTHS]
    if not others:
        return ests
    bar = min(others, key=_rank).busy(target)
    return [e for e in ests if e.block_n not in FILL_ONLY_WIDTHS or e.busy(target) > bar]


def _rank(e: GemmEstimate):
    return (e.seconds, e.waste, -e.block_m * e.block_n, e.split_k)


@dataclass(frozen=True)
class GemmEstimate:
    """A rough time for one (block_m, block_n, split_k) choice, with the tile counts behind it."""

    block_m: int
    block_n: int
    split_k: int
    tiles: int
    waves: int
    seconds: float
    waste: float  # fraction of the computed tile area outside the output
    ring: bool = False  # one wave of small tiles in a deep ring (`one_wave_ring`)

    def busy(self, target: Target) -> float:
        """The share of the waves' block slots its tiles fill."""
        return self.tiles / (self.waves * target.sms)

    def describe(self, info: KernelInfo, target: Target) -> str:
        busy = self.busy(target)
        split = f" x split_k={self.split_k}" if self.split_k > 1 else ""
        wave = "wave" if self.waves == 1 else "waves"
        return (
            f"M={info.M} N={info.gemm_n_nc[0]}: {self.tiles} tiles of {self.block_m}x{self.block_n}{split}, "
            f"{self.waves} {wave} on {target.sms} SMs ({busy:.0%} busy)"
            + (", in a deep ring" if self.ring else "")
        )


# From this K few-row products take their row statistics from a kernel of their own (_c_fusion).
# Measured on the H200: K = 2048 and 4096 (Llama-3.2-1B, Mistral-7B; docs/bench/h200-few-rows-stats.log),
# and K = 1024, Qwen3's q/k/v and gate/up at 32 tokens in the tuning store (the 32 x 32 mma.sync
# tile, docs/bench/h200-records-2026-12-03c.json.gz): q/k/v 6.33 us split against 11.36 fused,
# gate/up 8.02 against 12.87. Not with sibling outputs (the running example's q/k/v at 32 tokens,
# docs/bench/h200-records-2026-12-03d.json.gz: fused 11.22 us against 15.02 split at best; the
# rules' split answer there cost 1.59x in `emmy prior evaluate`'s leave-one-model-out).
FEW_ROWS_STATS_MIN_K = 1024
WIDE_K_MAX_ROWS = 32  # mma.sync products of this many rows or fewer take 128-wide k-steps ...
WIDE_K_MIN_K = 2048  # ... over a long k with no row prologue (o and down; rules_contraction's block_k)


def streams_after_stats(info: KernelInfo, workers: str) -> bool:
    """A few-row product (mma.sync, at most WIDE_K_MAX_ROWS rows) with a row prologue over a
    long k and one output per column: it streams the weights, and the rules compute its row
    statistics first (_c_fusion)."""
    return (
        bool(info.prologue) and workers == "mma_sync" and info.M <= WIDE_K_MAX_ROWS
        and info.K >= FEW_ROWS_STATS_MIN_K and not info.has_siblings_fork
    )


def gemm_estimate(
    info: KernelInfo, target: Target, workers: str, bm: int, bn: int, sk: int
) -> GemmEstimate:
    """Roofline-style time of a contraction tiled block_m x block_n with split_k parts.

    Whole waves count: tiles that fill the last wave better win. Measured on the H200 (same
    run, docs/bench/h200-tiles-112.log): Mistral-7B's gate/up at 512 tokens in tiles of 112
    columns (512 tiles, 3.9 waves) against 128 (448 tiles, the fourth wave 39% full), the
    layer 435.5 against 448.2 us; Qwen3's layer at 1100 tokens 138.7 against 140.3; Qwen2-0.5B's
    down at 512 tokens level (69.5 against 69.8)."""
    (N, nc), M, K = info.gemm_n_nc, info.M, info.K
    batch = info.batch
    tiles = output_tiles(info, bm, bn) * sk
    waves = ceil(tiles / target.sms)
    kpart = ceil(K / sk)
    if workers == "thread":
        rate = target.fp32_flops / target.sms * 0.5
    elif workers == "mma_sync" and target.has("wgmma"):
        rate = target.tensor_flops / target.sms * 0.6
    else:
        rate = target.tensor_flops / target.sms
    intensity = bm * nc * bn / (bm + nc * bn)  # FMAs per loaded element, per k
    if workers in WGMMA_WORKERS:
        # one wgmma reads a 64-row slice of A and block_n rows of B from shared memory, per
        # contraction: narrow tiles starve the tensor cores (H200, dual gate/up at M=512:
        # 128x128 tiles 1.5x faster than 128x64 ones). Counting gate and up side by side as
        # one wider wgmma instead chose 96-column tiles for Llama-3.2-1B's gate/up at 128 and
        # 1100 tokens, which measured 4% and 1% slower (docs/bench/h200-tiles-112.log).
        intensity = min(intensity, 64 * bn / (64 + bn))
    rate *= min(1.0, intensity / 64)
    compute = waves * 2 * bm * bn * nc * kpart / rate
    elt = info.element_bytes
    unique = batch * (M * K + nc * N * K + M * N * nc) * elt
    reread = batch * (ceil(N / bn) * M * K + ceil(M / bm) * nc * N * K) * elt  # mostly from L2
    # about half the SMs can already pull the whole memory bandwidth; not so few rows whose
    # row statistics come from a kernel of their own (the k loop then only streams the weights):
    # Mistral-7B's q/k/v at 32 tokens pulled 2.2 TB/s from 96 blocks, 3.0-3.1 from 192
    busy = min(1.0, (1 if streams_after_stats(info, workers) else 2) * tiles / target.sms)
    memory = unique / (target.dram_bandwidth * busy) + reread / (3 * target.dram_bandwidth * busy)
    # Loads and arithmetic overlap, not perfectly.
    seconds = max(compute, memory) + 0.1 * min(compute, memory) + LAUNCH_OVERHEAD_S
    if sk > 1:  # partial sums written, read back and added
        seconds += 2 * sk * batch * M * N * nc * 4 / target.dram_bandwidth + SPLIT_OVERHEAD_S
    ring = one_wave_ring(info, target, workers, bm, bn, sk, tiles)
    if workers == "wgmma_ws" and bm < 128 and not ring:
        # one consumer warpgroup waits on its own wgmmas with nothing else to issue (H200, dual
        # gate/up at M=512: 64x128 tiles 32.6 us against 22.0 us for 128x128 ones, the same
        # waves; 64x192 21.7 us against 19.5 us for 128x96)
        seconds *= 1.4
    if workers == "wgmma_ws" and bm == 256:
        # each consumer warpgroup multiplies one 64-row slice best (H200: 128x256 tiles beat
        # 256x128 ones); taller tiles give a warpgroup two slices and twice the accumulators
        seconds *= 1.15
    padded = ceil(M / bm) * bm * ceil(N / bn) * bn
    waste = 1 - M * N / padded
    if waste:  # prefer tiles that divide the extents
        seconds *= 1.02
    return GemmEstimate(bm, bn, sk, tiles, waves, seconds, waste, ring)


def gemm_ranking(info: KernelInfo, target: Target, chosen: Mapping[str, KnobValue], memo: dict):
    workers = chosen.get("workers", "mma_sync")
    key = ("gemm", workers, chosen.get("block_k"))
    if key in memo:
        return memo[key]
    space = info_space(info, target)
    base = {"workers": workers}
    if "block_k" in chosen:
        base["block_k"] = chosen["block_k"]
    ests = [
        gemm_estimate(info, target, str(workers), bm, bn, sk)
        for bm in space["block_m"]
        for bn in space["block_n"]
        if not unruled(workers, bm, bn)
        for sk in space["split_k"]
        if not check(info, {**base, "block_m": bm, "block_n": bn, "split_k": sk}, target)
    ]
    ranking = sorted(gate_fill_only(ests, target), key=_rank)
    memo[key] = ranking
    return ranking


__all__ = ["FEW_ROWS_STATS_MIN_K", "FILL_ONLY_WIDTHS", "LAUNCH_OVERHEAD_S", "SPLIT_OVERHEAD_S", "WIDE_K_MAX_ROWS", "WIDE_K_MIN_K",
           "GemmEstimate",
           "gate_fill_only", "gemm_estimate", "gemm_ranking", "streams_after_stats", "unruled"]
