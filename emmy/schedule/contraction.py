"""The plan of a contraction kernel: what its decided knobs mean on a target, computed once.

    plan(info, values, target) -> ContractionPlan

`info` is the kernel's (or one part's) `KernelInfo`, `values` its decided knobs (every knob of
the contraction space; `fusion` only where the kernel has a prologue reduction, `siblings` is
the whole kernel's and read by `emmy.schedule.plan`), `target` a `Target`. The plan holds the
tile geometry (block_m x block_n x block_k, the warp grid of mma.sync, the warpgroups of wgmma),
the pipeline depth, the tile order (group_m, clusters), the split of k (split_k with its combine,
split_tail as a head and a tail plan, stream-K's runs), the launches with their grids and the
facts every plan has (`smem_bytes`, `threads`, `blocks`, `waves`, `registers`, `launches`).
Its shared memory is laid out byte by byte in `smem` (`emmy.schedule.contraction_smem`: operand
tiles, raw copies of A's tensors, row statistics, mbarriers, the staged epilogue, alignment);
`smem_bytes` is that layout's total and `a_source` says where a computed A side comes from
("raw_copies" in shared memory, or "global" loads, with `a_source_reason`).

The same functions give legality (`emmy.tuning.legality`) its numbers for partial assignments:
`block_threads`, `operand_smem_bytes`, `accumulators_per_thread`, `register_budget`, `warp_grid`,
and for full ones the layout itself (`smem_for`).
Values the lowering cannot build are an EmmyError naming the kernel (legality keeps deciders
from choosing them; hand-written IR may still hold them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from math import ceil, prod
from typing import TYPE_CHECKING

from emmy.diagnostics import EmmyError
from emmy.schedule.contraction_smem import SmemFacts, SmemLayout, SmemShape, operand_bytes, smem_layout
from emmy.targets import Target
from emmy.tuning.knobs import (
    FEATURE_OFF,
    SLICES,
    WGMMA_WORKERS,
    KnobValue,
    cluster_rows,
    stream_k_blocks,
    stream_k_runs,
    stream_k_whole,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from emmy.analysis.classify import KernelInfo

# Accumulator values (fp32) one thread may hold before registers run out (255 per thread, minus
# addresses, operand fragments and the epilogue).
MAX_ACC_PER_THREAD = 192
REGS_BESIDES_ACCUMULATORS = 40
PRODUCER_THREADS = 128  # workers = wgmma_ws: one more warpgroup only stages operands
PINGPONG_TILE_THREADS = 128  # epilogue = pingpong: one warpgroup computes and stores a whole tile
# workers = wgmma_ws with three consumer warpgroups (512 threads; ptxas starts every thread at
# 128 registers): the producer warpgroup gives registers back with setmaxnreg and the consumers
# take them, 128 * 56 + 384 * 152 = 65536 (emmy/lowering/contraction_ws.py emits both). Two
# consumers (384 threads, 168 each) need no such trade.
WS3_PRODUCER_REGS = 56
WS3_CONSUMER_REGS = 152
# epilogue = pingpong (two consumer warpgroups, each holding a whole tile's accumulators): the
# producer keeps 40 and the consumers take 232, 128 * 40 + 256 * 232 = 64512 (CUTLASS's split)
PINGPONG_PRODUCER_REGS = 40
PINGPONG_CONSUMER_REGS = 232
# the last block of a shared tile adds the others' parts in an unrolled loop over them
STREAM_K_MAX_PARTS = 8
STATS_WARPS = 8  # the row-statistics kernel: one warp per row
COMBINE_THREADS = 256  # the split_k combine kernel


@dataclass(frozen=True)
class LaunchPlan:
    """One launch of a kernel's plan: the kernel's name and its geometry."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    role: str  # "main", "stats", "combine", "tail"


# -- the numbers legality shares --------------------------------------------------------------


def block_threads(warps: int, workers: str | None = None) -> int:
    """Threads of a block: 32 per warp, plus the producer warpgroup of `wgmma_ws`."""
    return 32 * warps + (PRODUCER_THREADS if workers == "wgmma_ws" else 0)


def operand_smem_bytes(stages: int, block_m: int, block_n: int, block_k: int, contractions: int) -> int:
    """Shared memory of the staged operand tiles: stages x (block_m + contractions x block_n)
    rows of block_k bf16 elements, the first part of the layout (`smem_for`) and a bound on it."""
    return operand_bytes(stages, block_m, block_n, block_k, contractions)


# elements per load of a fused kernel's statistics pass over its rows (16 bytes of bf16:
# `emmy.lowering.contraction_compute.emit_prologue`; the prior costs its loads)
PROLOGUE_VECTOR = 8


def stats_kernel_needed(prologue: bool, fusion: str, split: int) -> bool:
    """The row statistics come from a kernel of their own (fusion = split, or split_k's parts,
    which each see only part of a row)."""
    return prologue and (fusion == "split" or split > 1)


def smem_for(
    facts: SmemFacts, target: Target, *, bm: int, bn: int, bk: int, stages: int, nc: int, workers: str, warps: int,
    persistent: bool, stats_kernel: bool, workspace: bool, pingpong: bool = False,
) -> SmemLayout:
    """The shared-memory layout of a contraction's main kernel with these values (the plan's
    `smem`; legality checks its total). `pingpong`: epilogue = pingpong, each consumer
    warpgroup stages its own tiles' epilogue (two staged tiles, 128 threads each)."""
    threads = block_threads(warps, workers)
    producer = workers == "wgmma_ws"
    consumers = threads - PRODUCER_THREADS if producer else threads
    shape = SmemShape(
        bm=bm, bn=bn, bk=bk, stages=stages, nc=nc, wgmma=workers in WGMMA_WORKERS,
        tensor_cores=workers in WGMMA_WORKERS or workers == "mma_sync", producer=producer,
        consumers=PINGPONG_TILE_THREADS if pingpong else consumers, persistent=persistent,
        stats_in_smem=facts.statistics > 0 and not stats_kernel, workspace=workspace,
        epilogue_tiles=consumers // PINGPONG_TILE_THREADS if pingpong else 1,
    )
    return smem_layout(facts, shape, target)


def accumulators_per_thread(info: KernelInfo, block_m: int, block_n: int, warps: int, pingpong: bool = False) -> float:
    """fp32 accumulators each computing thread holds (all contractions of the tile; with
    epilogue = pingpong one warpgroup holds the whole tile)."""
    return info.n_contractions * block_m * block_n / (PINGPONG_TILE_THREADS if pingpong else 32 * warps)


def ws_register_budgets(workers: str | None, threads: int, pingpong: bool = False) -> tuple[int, int] | None:
    """(producer, consumer) registers per thread that setmaxnreg sets in a warp-specialized block
    of three consumer warpgroups (WS3_*) or of two that take turns (epilogue = pingpong,
    PINGPONG_*), else None (ptxas's even share for the whole block)."""
    if workers == "wgmma_ws" and threads == 3 * 128 + PRODUCER_THREADS:
        return WS3_PRODUCER_REGS, WS3_CONSUMER_REGS
    if workers == "wgmma_ws" and pingpong and threads == 2 * 128 + PRODUCER_THREADS:
        return PINGPONG_PRODUCER_REGS, PINGPONG_CONSUMER_REGS
    return None


def register_budget(target: Target, threads: int, workers: str | None = None, pingpong: bool = False) -> tuple[int, int]:
    """(registers a computing thread of a `threads`-thread block may use, of them for
    accumulators): a block's threads share the SM's register file (512 threads get at most 128
    each, unless the producer of a warp-specialized block hands some to the consumers:
    `ws_register_budgets`), of which about 40 go to addresses, staging and the epilogue (ptxas,
    sm_90a)."""
    budgets = ws_register_budgets(workers, threads, pingpong)
    regs = budgets[1] if budgets else min(target.regs_per_thread, target.regs_per_sm // threads)
    return regs, min(MAX_ACC_PER_THREAD, regs - REGS_BESIDES_ACCUMULATORS)


def thread_grid(block_n: int, threads: int) -> tuple[int, int]:
    """The thread arrangement (threads along n, along m) of `workers = thread` tiles: up to 32
    along n (a power of two dividing block_n and the threads), the rest along m; block_m must be
    a multiple of the second."""
    tx = 1
    while tx * 2 <= min(block_n, 32) and block_n % (tx * 2) == 0 and threads % (tx * 2) == 0:
        tx *= 2
    return tx, threads // tx


def warp_grid(block_m: int, block_n: int, warps: int) -> tuple[int, int] | None:
    """The warp arrangement (warps along m, warps along n) for `mma.sync` tiles: each warp
    owns a (block_m / wm) x (block_n / wn) piece, a multiple of 16 x 8. Prefers square-ish
    pieces; None when no arrangement fits."""
    best = None
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if block_m % (16 * wm) or block_n % (8 * wn):
            continue
        pm, pn = block_m // wm, block_n // wn
        score = abs(pm - pn)
        if best is None or score < best[0]:
            best = (score, (wm, wn))
    return None if best is None else best[1]


def output_tiles(info: KernelInfo, block_m: int, block_n: int) -> int:
    """Output tiles of a contraction (every batch index) in block_m x block_n tiles."""
    return info.batch * ceil(info.M / block_m) * ceil(info.gemm_n_nc[0] / block_n)


# -- the plan -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContractionPlan:
    name: str  # the kernel (or part) the plan is for, as the kernel stage names it
    bm: int
    bn: int
    bk: int
    stages: int
    workers: str
    warps: int
    split: int
    nc: int  # contractions sharing A
    threads: int
    M: int
    N: int
    K: int
    B: int  # batch
    fusion: str  # "fused" or "split" (row statistics in a kernel of their own); "fused" without a prologue
    prologue: bool  # the kernel has a prologue reduction (row statistics)
    combine_lanes: int  # outputs per thread of the split_k combine kernel along the last n axis
    # mma_sync
    wm: int = 1
    wn: int = 1
    # wgmma
    groups: int = 1
    mi: int = 1  # 64-row slices per warpgroup: of block_m, or with `cols` of block_n
    cols: bool = False  # slices = cols: the warpgroups slice block_n; wgmma N = block_m, accumulators transposed
    producer: bool = False  # wgmma_ws: one more warpgroup only stages operands
    persistent: bool = False  # schedule = persistent or stream_k: one block per SM loops over the tiles
    stream_k: bool = False  # schedule = stream_k: whole tiles, then an equal run of the other tiles' k-steps per block
    tma: bool = False  # copy = tma: the producer copies plain operand tiles with tensor maps
    cluster: int = 1  # blocks per cluster, sharing (multicasting) one operand tile (see pairs_along)
    group_m: int = 1  # tile order: groups of group_m row tiles, down a group's rows first (1: along n)
    tail: int = 1  # split_tail: the tiles past the last full wave, split along k into this many parts
    staggered: bool = False  # epilogue = staggered: each consumer warpgroup stores its own rows, in turn
    pingpong: bool = False  # epilogue = pingpong: each consumer warpgroup computes whole tiles, taking turns
    last_block: bool = False  # combine = last_block: the tile's last block adds the split_k parts
    # thread
    tx: int = 1
    ty: int = 1
    # split_tail: this plan's tiles lo <= t < hi of the order along n, and its kernel's suffix
    tile_range: tuple[int, int] | None = None
    suffix: str = ""
    target: Target | None = field(default=None, repr=False)
    facts: SmemFacts | None = field(default=None, repr=False)  # the kernel's part in its shared-memory layout
    # an attention's Q and K computed in the staged epilogue (emmy.schedule.qk_epilogue.QkTask: its
    # fusion = epilogue; set by emmy.schedule.plan.plan_kernel, which sees the kernel's readers)
    qk: object | None = field(default=None, repr=False)

    # -- geometry ---------------------------------------------------------------------------------
    @property
    def slab(self) -> int:
        return self.bk if self.bk < 64 else 64

    @property
    def ticketed(self) -> bool:
        """Tiles whose parts are added by the last block to finish one (per-tile counters)."""
        return self.last_block or self.stream_k

    @property
    def combine_kernel(self) -> bool:
        """split_k's parts go to a workspace that `<name>_combine` adds up (combine = kernel)."""
        return self.split > 1 and not self.last_block

    @property
    def stats_kernel(self) -> bool:
        """The row statistics come from a kernel of their own (fusion = split, or split_k's
        parts, which each see only part of a row)."""
        return stats_kernel_needed(self.prologue, self.fusion, self.split)

    @property
    def wgmma(self) -> bool:
        return self.workers in WGMMA_WORKERS

    @property
    def pairs_along(self) -> str:
        """The side a cluster's blocks line up along: "m" (blocks with the same columns, sharing
        their B tile), or with slices = cols "n" (blocks with the same rows, sharing their A tile).
        Either way the pair shares the tile each warpgroup multiplies whole, the wgmma's B operand
        (cuBLAS's `2x1` pairs of its 128 x 192 tiles for a narrow output)."""
        return "n" if self.cols and self.cluster > 1 else "m"

    @property
    def joint(self) -> bool:
        """wgmma with several contractions sharing A (gate and up) whose B tiles of a slot lie
        side by side as one block_n * nc-row tile: one wgmma of N = nc * block_n per k16 reads
        the A slice once for all of them, into one accumulator array (a 64-row slice per
        warpgroup, one slab of k)."""
        return self.wgmma and not self.cols and self.nc > 1 and self.mi == 1 and self.nc * self.bn <= 256 and self.bk <= 64

    @property
    def b_stride(self) -> int:
        """Elements from one slot's B tile to the next slot's (all nc tiles of a slot with joint)."""
        return self.bn * self.bk * (self.nc if self.joint else 1)

    @property
    def consumers(self) -> int:
        """Threads that compute (all of them unless a producer warpgroup stages)."""
        return self.threads - PRODUCER_THREADS if self.producer else self.threads

    @property
    def tile_threads(self) -> int:
        """Threads that compute one tile and run its epilogue: every consumer, or with
        epilogue = pingpong one warpgroup."""
        return PINGPONG_TILE_THREADS if self.pingpong else self.consumers

    @property
    def register_budgets(self) -> tuple[int, int] | None:
        """(producer, consumer) registers per thread set by setmaxnreg, or None (ws_register_budgets)."""
        return ws_register_budgets(self.workers, self.threads, self.pingpong)

    @property
    def acc_per_thread(self) -> int:
        if self.wgmma:
            return self.mi * (self.bm if self.cols else self.bn) // 2
        return self.bm * self.bn // self.threads

    # -- tiles and launches ------------------------------------------------------------------------
    @property
    def all_tiles(self) -> int:
        """Output tiles of the whole grid (every batch index)."""
        return self.B * -(-self.M // self.bm) * -(-self.N // self.bn)

    @property
    def tiles(self) -> int:
        """Output tiles this launch computes (its tile range, or all)."""
        if self.tile_range is not None:
            return self.tile_range[1] - self.tile_range[0]
        return self.all_tiles

    @property
    def steps(self) -> int:
        """k-steps of a tile."""
        return -(-self.K // self.bk)

    @cached_property
    def stream_k_runs(self) -> list[list[tuple[int, int]]]:
        """schedule = stream_k: per tile, the [lo, hi) k-steps each block computes."""
        return stream_k_runs(self.all_tiles, self.steps, self._target.sms)

    @cached_property
    def stream_k_plan(self) -> tuple[int, int, int, int, int]:
        """schedule = stream_k: (tiles, k-steps per tile, blocks, most blocks sharing a tile,
        whole tiles). The first `whole` tiles (whole waves but the last, knobs.stream_k_whole)
        take a block each; the k-steps of the rest, in tile order, form one run of I
        iterations of which block b takes [b * I // blocks, (b + 1) * I // blocks), so such a
        tile's steps fall to one block or to a few consecutive ones (knobs.stream_k_runs)."""
        tiles, steps, sms = self.all_tiles, self.steps, self._target.sms
        blocks = stream_k_blocks(tiles, steps, sms)
        most = max(len(runs) for runs in self.stream_k_runs)
        if most > STREAM_K_MAX_PARTS:
            raise EmmyError(
                f"tile.kernel @{self.name}: schedule=stream_k: up to {most} blocks share a tile "
                f"(at most {STREAM_K_MAX_PARTS}); use larger tiles or a larger block_k"
            )
        return tiles, steps, blocks, most, stream_k_whole(tiles, sms)

    @property
    def _target(self) -> Target:
        assert self.target is not None
        return self.target

    @property
    def grid(self) -> tuple[int, int, int]:
        """The main kernel's grid."""
        grid = (-(-self.N // self.bn), -(-self.M // self.bm), self.B * self.split)
        if self.tile_range is not None:  # (no batch axes: legality)
            grid = (self.tiles, 1, self.split)
        if self.stream_k:
            grid = (self.stream_k_plan[2], 1, 1)
        elif self.persistent:  # (with clusters: clusters of blocks, each block one row of the cluster's tiles)
            c = self.cluster
            grid = (min(prod(grid) // c, self._target.sms // c), c, 1)
        return grid

    @property
    def split_tail(self) -> tuple[ContractionPlan, ContractionPlan] | None:
        """split_tail = s: (the whole waves' plan, one tile per block; the last partial wave's
        plan, `<name>_tail`, its k range split s ways and added by the last block of a tile)."""
        if self.tail == 1 or self.tile_range is not None:
            return None
        total = self.all_tiles
        full = total // self._target.sms * self._target.sms
        if not 0 < full < total:
            raise EmmyError(
                f"tile.kernel @{self.name}: split_tail={self.tail}: {total} tiles on {self._target.sms} "
                f"SMs leave no partial wave behind a full one"
            )
        head = replace(self, tail=1, tile_range=(0, full))
        tail = replace(self, tail=1, tile_range=(full, total), suffix="_tail", split=self.tail, last_block=True)
        return head, tail

    @property
    def launches(self) -> tuple[LaunchPlan, ...]:
        """The launches of this plan, in order (as the kernel stage makes them)."""
        parts = self.split_tail
        if parts is not None:
            head, tail = parts
            shared = 1 if self.prologue else 0  # the tail reads the head's row statistics
            return head.launches + tail.launches[shared:]
        name = self.name + self.suffix
        out = []
        if self.stats_kernel:
            rows = self.B * self.M
            out.append(LaunchPlan(f"{name}_stats", (-(-rows // STATS_WARPS), 1, 1), (STATS_WARPS * 32, 1, 1), "stats"))
        out.append(LaunchPlan(name, self.grid, (self.threads, 1, 1), "tail" if self.suffix else "main"))
        if self.combine_kernel:
            blocks = -(-(self.B * self.M * (self.N // self.combine_lanes)) // COMBINE_THREADS)
            out.append(LaunchPlan(f"{name}_combine", (blocks, 1, 1), (COMBINE_THREADS, 1, 1), "combine"))
        return tuple(out)

    # -- the facts every plan has ------------------------------------------------------------------
    @property
    def blocks(self) -> int:
        """Blocks of the main launch (all blocks of its grid)."""
        return prod(self.grid)

    @property
    def waves(self) -> int:
        """Rounds of one block per multiprocessor the main launch takes."""
        return -(-self.blocks // self._target.sms)

    @cached_property
    def smem(self) -> SmemLayout:
        """The main kernel's shared memory, byte by byte (emmy.schedule.contraction_smem)."""
        assert self.facts is not None
        return smem_for(
            self.facts, self._target, bm=self.bm, bn=self.bn, bk=self.bk, stages=self.stages, nc=self.nc,
            workers=self.workers, warps=self.warps, persistent=self.persistent, stats_kernel=self.stats_kernel,
            workspace=self.combine_kernel, pingpong=self.pingpong,
        )

    @property
    def smem_bytes(self) -> int:
        """Shared memory of a block of the main kernel: the layout's total."""
        return self.smem.total

    @property
    def a_source(self) -> str:
        """Where a computed A side comes from: "raw_copies" (shared memory) or "global" loads."""
        return self.smem.a_source

    @property
    def a_source_reason(self) -> str:
        return self.smem.a_source_reason

    def min_blocks(self, smem: int) -> int:
        """Blocks per multiprocessor promised to the register allocator (`__launch_bounds__`) for
        a kernel of `smem` bytes of shared memory: as many as shared memory and the thread limit
        allow, but never below ~64 registers beyond the accumulators."""
        t = self._target
        by_smem = t.smem_per_sm // max(smem + 1024, 1)
        by_threads = t.max_threads_per_sm // self.threads
        regs = min(t.regs_per_thread, self.acc_per_thread * self.nc + 64)
        by_regs = t.regs_per_sm // (self.threads * regs)
        return max(1, min(by_smem, by_threads, by_regs, 4))

    @property
    def registers(self) -> int:
        """Registers per computing thread, estimated: the accumulators plus what addresses,
        staging and the epilogue take, at most what a thread may use."""
        budgets = self.register_budgets
        cap = budgets[1] if budgets else self._target.regs_per_thread
        return min(cap, self.acc_per_thread * self.nc + REGS_BESIDES_ACCUMULATORS)


def plan(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> ContractionPlan:
    """The plan of a contraction kernel (or part) `info` with decided `values` on `target`."""
    where = f"tile.kernel @{info.name}"
    v = Decided(values, where)
    bm, bn, bk = int(v["block_m"]), int(v["block_n"]), int(v["block_k"])
    stages, workers, warps, split = int(v["stages"]), str(v["workers"]), int(v["warps"]), int(v["split_k"])
    if stages < 1 or split < 1 or warps < 1:
        raise EmmyError(f"{where}: stages={stages}, split_k={split} and warps={warps} must be at least 1")
    nc = info.n_contractions
    epilogue = str(v["epilogue"])
    pingpong = epilogue == "pingpong"
    g: dict = dict(
        name=name or info.name, bm=bm, bn=bn, bk=bk, stages=stages, workers=workers, warps=warps, split=split,
        nc=nc, threads=block_threads(warps, workers), M=info.M, N=info.extent(info.n_axes), K=info.K,
        B=info.batch, prologue=bool(info.prologue),
        combine_lanes=2 if info.n_axes and info.axes[info.n_axes[-1]] % 2 == 0 else 1, fusion=str(v["fusion"]), target=target,
        facts=SmemFacts.of(info),
    )
    if bk % 16 or (bk > 64 and bk % 64):
        raise EmmyError(f"{where}: block_k={bk} must be 16, 32 or a multiple of 64")
    if bm % 8 or bn % 8:
        raise EmmyError(f"{where}: block_m={bm} and block_n={bn} must be multiples of 8")
    slices = str(v["slices"])
    if slices not in SLICES:
        raise EmmyError(f"{where}: unknown slices '{slices}'")
    cols = g["cols"] = slices == "cols"
    if cols:
        if workers not in WGMMA_WORKERS:
            raise EmmyError(f"{where}: slices=cols needs workers=wgmma or wgmma_ws (workers={workers})")
        if info.prologue and g["fusion"] != "split":
            raise EmmyError(f"{where}: slices=cols needs fusion=split (a warpgroup holds every row of the tile: "
                            "no row statistics summed in the kernel)")
        if epilogue != "together":
            raise EmmyError(f"{where}: slices=cols needs epilogue=together (epilogue={epilogue})")
        if info.raw_a_loads:
            raise EmmyError(f"{where}: slices=cols needs an A side that is no rewrite of raw tiles (each warpgroup "
                            "would read rows another one rewrites)")
    if workers in WGMMA_WORKERS:
        if not target.has("wgmma"):
            raise EmmyError(f"{where}: workers={workers} needs sm_90a (target is {target.name})")
        g["producer"] = workers == "wgmma_ws"
        if warps % 4:
            raise EmmyError(f"{where}: wgmma needs whole warpgroups (warps={warps})")
        g["groups"] = warps // 4
        rows_split = 1 if pingpong else g["groups"]  # (pingpong: each warpgroup multiplies whole tiles)
        sliced, n_side = ("block_n", "block_m") if cols else ("block_m", "block_n")
        side, n = (bn, bm) if cols else (bm, bn)
        if side % (64 * rows_split):
            raise EmmyError(f"{where}: wgmma: {sliced}={side} must be a multiple of {64 * rows_split}")
        g["mi"] = side // (64 * rows_split)
        if n > 256:
            raise EmmyError(f"{where}: wgmma: {n_side}={n} is over 256")
        if stages < 2:
            raise EmmyError(f"{where}: {workers} reads its operands from shared memory: stages must be at least 2")
    elif workers == "mma_sync":
        if not target.has("mma_sync"):
            raise EmmyError(f"{where}: workers=mma_sync needs sm_80 or newer")
        grid = warp_grid(bm, bn, warps)
        if grid is None:
            raise EmmyError(f"{where}: mma_sync: block {bm}x{bn} cannot be split among {warps} warps")
        g["wm"], g["wn"] = grid
    elif workers == "thread":
        tx, ty = thread_grid(bn, g["threads"])
        if bm % ty:
            raise EmmyError(f"{where}: thread workers: block_m={bm} is not a multiple of {ty} thread rows")
        g["tx"], g["ty"] = tx, ty
    else:
        raise EmmyError(f"{where}: unknown workers '{workers}'")
    schedule = str(v["schedule"])
    if schedule in ("persistent", "stream_k"):
        if workers != "wgmma_ws":
            raise EmmyError(f"{where}: schedule={schedule} needs workers=wgmma_ws (workers={workers})")
        if split > 1:
            raise EmmyError(f"{where}: schedule={schedule} needs split_k=1 (split_k={split})")
        g["persistent"] = True
        g["stream_k"] = schedule == "stream_k"
    elif schedule != "grid":
        raise EmmyError(f"{where}: unknown schedule '{schedule}'")
    copy = str(v["copy"])
    if copy == "tma":
        if workers != "wgmma_ws":  # (wgmma_ws already needs sm_90a, which has the TMA)
            raise EmmyError(f"{where}: copy=tma needs workers=wgmma_ws (workers={workers})")
        g["tma"] = True
    elif copy != "cp_async":
        raise EmmyError(f"{where}: unknown copy '{copy}'")
    cluster = g["cluster"] = int(v["cluster"])
    if cluster > 1 and not g.get("tma"):
        raise EmmyError(f"{where}: cluster={cluster} needs copy=tma")
        # (every block_n of the domain splits into 8-row halves, as the swizzle needs)
    tail = g["tail"] = int(v["split_tail"])
    if tail > 1 and (split > 1 or g.get("persistent") or cluster > 1 or info.batch > 1):
        raise EmmyError(f"{where}: split_tail={tail} needs split_k=1, schedule=grid, cluster=1 and no batch axes")
    if tail > 1 and info.prologue and g["fusion"] != "split":
        raise EmmyError(f"{where}: split_tail={tail} needs fusion=split (row statistics for the tail's parts)")
    row_pairs = cluster_rows(cluster, slices)
    # without a group_m knob: the plain order of the clusters (knobs.FEATURE_OFF)
    group_m = g["group_m"] = int(values["group_m"]) if "group_m" in values else row_pairs
    if tail > 1 and group_m > 1:
        raise EmmyError(f"{where}: split_tail={tail} needs group_m=1")
    if group_m % row_pairs:
        raise EmmyError(f"{where}: group_m={group_m} is not a multiple of cluster={cluster}")
    if epilogue in ("staggered", "pingpong"):
        if not g.get("persistent") or g.get("groups") != 2 or not g.get("producer"):  # (stream_k: below)
            raise EmmyError(
                f"{where}: epilogue={epilogue} needs schedule=persistent and two consumer warpgroups (warps=8) of workers=wgmma_ws"
            )
        g[epilogue] = True
        if pingpong and (cluster > 1 or (info.prologue and g["fusion"] != "split")):
            raise EmmyError(f"{where}: epilogue=pingpong needs cluster=1 and no row statistics summed in the kernel (fusion=split)")
    elif epilogue != "together":
        raise EmmyError(f"{where}: unknown epilogue '{epilogue}'")
    combine = str(v["combine"])
    if combine == "last_block":
        if split == 1:
            raise EmmyError(f"{where}: combine=last_block adds split_k's parts: it needs split_k > 1")
        g["last_block"] = True
    elif combine != "kernel":
        raise EmmyError(f"{where}: unknown combine '{combine}'")
    if g.get("stream_k"):
        if cluster > 1 or group_m > 1 or g.get("staggered") or g.get("pingpong"):
            raise EmmyError(f"{where}: schedule=stream_k needs cluster=1, group_m=1 and epilogue=together")
        if info.prologue and g["fusion"] != "split":
            raise EmmyError(f"{where}: schedule=stream_k needs fusion=split (whole-row statistics for runs of k-steps)")
    return ContractionPlan(**g)


class Decided:
    """Decided knob values; a missing feature knob reads as off (knobs.FEATURE_OFF), any other
    missing one is an EmmyError naming the kernel and the knob."""

    def __init__(self, values: Mapping[str, KnobValue], where: str):
        self.values, self.where = values, where

    def __getitem__(self, name: str) -> KnobValue:
        if name in self.values:
            return self.values[name]
        if name in FEATURE_OFF:  # a feature knob the kernel does not have: the feature is off
            return FEATURE_OFF[name]
        raise EmmyError(f"{self.where}: knob '{name}' is missing")
