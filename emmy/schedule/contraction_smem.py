"""The shared memory of a contraction's main kernel, laid out byte by byte.

    smem_layout(facts, shape, target) -> SmemLayout

A pure function of the kernel's facts (`SmemFacts.of(info)`: the raw copies a computed A side
can use, the prologue's statistics, the stores), the plan's shape (`SmemShape`: tiles, workers,
pipeline) and the target. The plan keeps the result (`ContractionPlan.smem`), the lowering
places every buffer at its offset and declares `total` as the kernel's dynamic shared memory,
and legality checks `total` against the target's limit: one model of shared memory.

    offset 0                 A tiles      stages x block_m x block_k bf16 (1024-aligned with wgmma)
    stages * a_elems * 2     B tiles      stages x contractions x block_n x block_k bf16
    raw[i].offset            raw copies   stages x rows x block_k bf16 of each tensor a computed
                                          A side reads (rows: block_m, or 1), 128-byte aligned
                                          (a_source = "raw_copies" only)
    stats_offset             statistics   prologue reductions x block_m f32 (when the block
                                          computes its rows' statistics itself)
    bars_offset              mbarriers    workers = wgmma_ws: a full and an empty one per slot,
                                          8 bytes each, 8-byte aligned
    epilogue_offset          staged tile  schedule = persistent: after the barriers, 16-aligned
                                          (its own room: the producer refills the slots during
                                          the epilogue; epilogue = pingpong: one per consumer
                                          warpgroup, epilogue_bytes apart); otherwise at 0, over
                                          the k loop's tiles once they are done (not counted again)
    + 1024                                wgmma: the runtime rounds the base up to 1024 bytes

The staged epilogue holds f32 accumulators (`contractions x block_m x (width + 8)` f32) or, where
the stores read no tensor (`SmemFacts.stages_results`), each store's bf16 results
(`stores x block_m x (width + 8)` bf16), or, where they read one but what they compute from the
accumulators alone is bf16 (`SmemFacts.staged_parts`, a projection's rounded product before a
residual is added), those values (`parts x block_m x (width + 8)` bf16); `width` is block_n, or with wgmma the widest half,
quarter, ... of it that fits (several rounds per tile); None: no room, the epilogue stores
straight from the accumulator fragments.

Raw copies that do not fit are dropped: the plan's `a_source` says "global" (A computed from
global loads while staging) with the reason, instead of the lowering deciding it silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from emmy.targets import Target

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo

OPERAND_BYTES = 2  # operand tiles are staged as bf16
WGMMA_ALIGN = 1024  # wgmma reads its tiles through the swizzle of 1024-byte aligned addresses
RAW_ALIGN = 128
BARRIER_BYTES = 8
STAGE_PAD = 8  # f32 columns of padding per row of a staged epilogue tile (32 bytes)
RESULT_PAD = 8  # bf16 columns of padding per row of a tile of staged results (16 bytes)


@dataclass(frozen=True)
class SmemFacts:
    """What the kernel contributes to its layout (emmy.analysis.operands)."""

    raw_rows: tuple[bool, ...]  # per raw copy a computed A side can use: block_m rows (True) or one
    statistics: int  # prologue reductions (row statistics)
    stores: int
    stages_results: bool  # the staged epilogue holds the stores' bf16 results, not f32 accumulators
    staged_parts: int  # else: bf16 values computed from the accumulators it holds instead (0: f32 accumulators)
    staged_columns: bool  # the innermost output axis splits into 8-column chunks (16-byte stores)

    @classmethod
    def of(cls, info: KernelInfo) -> SmemFacts:
        n_last = info.n_axes[-1] if info.n_axes else None
        return cls(
            raw_rows=tuple(full for _, full in info.raw_a_loads),
            statistics=len(info.prologue),
            stores=len(info.stores),
            stages_results=info.stages_results,
            staged_parts=len(info.staged_parts),
            staged_columns=n_last is not None and info.axes[n_last] % 8 == 0,
        )


@dataclass(frozen=True)
class SmemShape:
    """What the decided knobs contribute to the layout."""

    bm: int
    bn: int
    bk: int
    stages: int
    nc: int  # contractions sharing A (their B tiles side by side)
    wgmma: bool
    tensor_cores: bool  # wgmma or mma_sync: the epilogue may stage through shared memory
    producer: bool  # workers = wgmma_ws
    consumers: int  # threads that run the epilogue
    persistent: bool
    stats_in_smem: bool  # the block computes its rows' statistics (no statistics kernel)
    workspace: bool  # split_k's parts go to a workspace: the epilogue is not staged
    epilogue_tiles: int = 1  # staged tiles side by side (epilogue = pingpong: one per consumer warpgroup)


@dataclass(frozen=True)
class SmemLayout:
    """Byte offsets of a contraction's shared memory and its total (module docstring)."""

    a_elems: int  # A tile elements per stage
    b_elems: int  # B tile elements per stage and contraction
    b_offsets: tuple[int, ...]  # where each contraction's B tiles start (with a joint wgmma: one after the other per slot)
    raw: tuple[tuple[int, int], ...]  # (offset, rows) of each raw copy (a_source = raw_copies)
    stats_offset: int
    stats_bytes: int  # 0: the statistics come from a kernel of their own (or there are none)
    bars_offset: int | None  # None: no producer, no mbarriers
    epilogue_offset: int
    epilogue_width: int | None  # columns a staged epilogue holds per round; None: not staged
    epilogue_bytes: int  # one staged tile (epilogue = pingpong: warpgroup w's at epilogue_offset + w * this)
    total: int  # what the kernel declares as its dynamic shared memory
    a_source: str  # "raw_copies" or "global"
    a_source_reason: str


def operand_bytes(stages: int, bm: int, bn: int, bk: int, nc: int) -> int:
    """The A and B tiles of every stage, in bytes (the layout's first part, and a bound on its
    total that legality can check before the other knobs are known)."""
    return stages * (bm + nc * bn) * bk * OPERAND_BYTES


def most_bytes(facts: SmemFacts, bm: int, bn: int, bk: int, stages: int, nc: int) -> int:
    """The most `smem_layout(...).total` can be with these tiles, whatever the other knobs: the
    operand tiles, every row statistic, the mbarriers and wgmma's alignment (raw copies are left
    out where they do not fit, and a persistent epilogue stages only into what is left)."""
    bars = BARRIER_BYTES - 1 + 2 * stages * BARRIER_BYTES
    return operand_bytes(stages, bm, bn, bk, nc) + facts.statistics * bm * 4 + bars + WGMMA_ALIGN


def smem_layout(facts: SmemFacts, s: SmemShape, target: Target) -> SmemLayout:
    """The layout of the main kernel's shared memory (module docstring)."""
    limit = target.smem_per_block
    tiles = operand_bytes(s.stages, s.bm, s.bn, s.bk, s.nc)
    a_source, why = "global", "A is not computed from tensors that can be copied raw"
    raw: tuple[tuple[int, int], ...] = ()
    if facts.raw_rows and s.producer:
        why = "workers=wgmma_ws: the producer warpgroup stages A itself"
    elif facts.raw_rows:
        raw = _raw_copies(facts, s, tiles)
        with_raw = _layout(facts, s, target, raw, "raw_copies", "A is computed in shared memory from raw copies of the tensors it reads")
        if with_raw.total <= limit:
            return with_raw
        why = (
            f"the raw copies of the tensors A reads need {with_raw.total} bytes of shared memory, over the "
            f"{limit} a block may use on {target.name}: A is computed from global loads while staging"
        )
        raw = ()
    return _layout(facts, s, target, raw, a_source, why)


def _raw_copies(facts: SmemFacts, s: SmemShape, tiles: int) -> tuple[tuple[int, int], ...]:
    out, off = [], tiles
    for full in facts.raw_rows:
        rows = s.bm if full else 1
        out.append((off, rows))
        off += _round_up(s.stages * rows * s.bk * OPERAND_BYTES, RAW_ALIGN)
    return tuple(out)


def _layout(facts: SmemFacts, s: SmemShape, target: Target, raw, a_source: str, why: str) -> SmemLayout:
    tiles = operand_bytes(s.stages, s.bm, s.bn, s.bk, s.nc)
    stats_off = tiles + sum(_round_up(s.stages * rows * s.bk * OPERAND_BYTES, RAW_ALIGN) for _, rows in raw)
    stats_bytes = facts.statistics * s.bm * 4 if s.stats_in_smem else 0
    total = stats_off + stats_bytes
    bars = None
    epilogue_off, room = 0, stats_off  # the k loop's tiles, once they are done
    if s.producer:
        bars = _round_up(total, BARRIER_BYTES)
        total = bars + 2 * s.stages * BARRIER_BYTES
    if s.persistent:  # its own room after the barriers, as much as the block has left
        epilogue_off = _round_up(total, 16)
        room = target.smem_per_block - WGMMA_ALIGN - epilogue_off
    width = _epilogue_width(facts, s, room)
    staged = 0 if width is None else _epilogue_bytes(facts, s, width)
    if s.persistent and width is not None:
        total = epilogue_off + s.epilogue_tiles * staged
    if s.wgmma:
        total += WGMMA_ALIGN
    return SmemLayout(
        a_elems=s.bm * s.bk, b_elems=s.bn * s.bk,
        b_offsets=tuple(s.stages * (s.bm + c * s.bn) * s.bk * OPERAND_BYTES for c in range(s.nc)), raw=raw, stats_offset=stats_off, stats_bytes=stats_bytes,
        bars_offset=bars, epilogue_offset=epilogue_off, epilogue_width=width, epilogue_bytes=staged, total=total,
        a_source=a_source, a_source_reason=why,
    )


def _epilogue_width(facts: SmemFacts, s: SmemShape, room: int) -> int | None:
    """The columns one round of a staged epilogue holds, or None (from the fragments). Staging
    needs tensor-core workers, no split_k workspace, 8-column chunks of the innermost output
    axis and whole chunks per thread; its tiles must fit in `room`: all block_n columns, or with
    wgmma a slice of them (block_n / 2, / 4, ...) in as many rounds."""
    if s.workspace or not s.tensor_cores or not facts.staged_columns:
        return None
    width = s.bn
    while width % 8 == 0 and s.bn % width == 0 and (s.bm * width // 8) % s.consumers == 0:
        if s.epilogue_tiles * _epilogue_bytes(facts, s, width) <= room:
            return width
        if not s.wgmma:
            break
        width //= 2
    return None


def _epilogue_bytes(facts: SmemFacts, s: SmemShape, width: int) -> int:
    """One staged epilogue tile, `width` columns: each store's bf16 results, each staged bf16
    part, or the f32 accumulators of each contraction; in 16-byte units (the next tile, with
    epilogue = pingpong, starts 16-aligned)."""
    if facts.stages_results:
        return _round_up(facts.stores * s.bm * (width + RESULT_PAD) * 2, 16)
    if facts.staged_parts:
        return _round_up(facts.staged_parts * s.bm * (width + RESULT_PAD) * 2, 16)
    return _round_up(s.nc * s.bm * (width + STAGE_PAD) * 4, 16)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


__all__ = ["SmemFacts", "SmemLayout", "SmemShape", "most_bytes", "operand_bytes", "smem_layout"]
