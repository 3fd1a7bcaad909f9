"""Legality: the one check every decider uses (pins, rules, golden files, tuning, the prior).

    check(info, values, target) -> list[str]

`info` is the kernel's `KernelInfo` (`emmy.analysis.classify`), `values` maps knob names to values
(a full or partial assignment), `target` is a `Target`. The result lists readable reasons the
assignment cannot run on the target; empty means legal. Each rule runs only when the knobs it
reads are all present, so a partial assignment can be checked early (pins alone, a search prefix)
and a full one is checked completely.

    >>> check(info, {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 5, ...}, sm_86)
    ['shared memory: stages=5 x (block_m=128 + block_n=256) x block_k=64 x 2 bytes = 240.0 KB
      exceeds the 99.0 KB a block may use on sm_86', ...]

Limits checked (contraction): threads per block; shared memory (the staged operand tiles while
other knobs are open, then the plan's whole layout: emmy/schedule/contraction_smem.py);
accumulator registers per thread; outputs per thread; the `mma.sync` warp tiling (16x8x16 per
warp); the `wgmma` shape (block_m a multiple of 64 per warpgroup, warps a multiple of 4,
block_n a multiple of 8 up to 256, operands staged in shared memory; with slices = cols the
two the other way round); vector width (at most 16
bytes, dividing the contiguous extent and block_k); split_k (dividing the k-steps; `combine =
last_block` only with split_k > 1); schedule
(`persistent` and `stream_k` only with `wgmma_ws`, split_k = 1, and no pass over the rows'
statistics before the k loop (`KernelInfo.ws_row_stats`); `stream_k` also without clusters,
groups or a staggered epilogue, and with whole-row statistics from a kernel of their own);
epilogue (`staggered` and `pingpong`: persistent, two consumer warpgroups; `staggered` with bf16
results and no row statistics from the producer; `pingpong` without statistics in the kernel or
an A side rewritten in place); slices (`cols`: wgmma workers, block_n the sliced side and block_m
the wgmma's N, the epilogue `together`, no statistics in the kernel, no A side rewritten in
place); copy (`tma` only with `wgmma_ws`); cluster (pairs need `tma` copies and an even number
of row tiles, or with slices = cols of column tiles); group_m (a multiple of a cluster's row
tiles, at most the row tiles rounded up to a power of two); split_tail (a partial wave behind a
full one, split_k = 1, schedule = grid, no clusters or groups, fusion = split, dividing the
k-steps). `wgmma_ws` has the `wgmma` rules, and its producer warpgroup counts in the threads and
registers. Attention, reduction and elementwise kernels have the analogous rules below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import ceil
from typing import TYPE_CHECKING

from emmy.schedule.attention import smem_bytes as attention_smem_bytes, stored_head_dim
from emmy.schedule import qk_epilogue
from emmy.schedule.attention import persistent_illegal as attention_persistent_illegal
from emmy.schedule.attention import split_kv_illegal as attention_split_kv_illegal
from emmy.schedule.attention import ws_illegal as attention_ws_illegal
from emmy.schedule.contraction import (
    MAX_ACC_PER_THREAD,
    STREAM_K_MAX_PARTS,
    accumulators_per_thread,
    block_threads,
    operand_smem_bytes,
    output_tiles,
    register_budget,
    smem_for,
    stats_kernel_needed,
    thread_grid,
    warp_grid,
)
from emmy.schedule.contraction_smem import SmemFacts, most_bytes
from emmy.targets import Target
from emmy.tuning.knobs import (
    WGMMA_WORKERS,
    KnobValue,
    cluster_rows,
    knob_space_for,
    stream_k_blocks,
    stream_k_runs,
    stream_k_whole,
)

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo

# wgmma_ws attention: O, S and P registers a consumer thread holds that fit without spills in
# setmaxnreg's budget, by consumer warpgroups (ptxas 13.0 -v, sm_90a). Two (240 registers): 160
# fit (head dim 128 with 128-key blocks, 256 with 32), 176 spilled (head dim 256 with 64-key
# blocks). Three (160 registers): 112 fit (head dim 128 with 64-key blocks); 128 (head dim 64
# with 128-key blocks, FlashAttention-3's tile) spilled 44 bytes, and 348 with
# schedule = persistent, whose loop keeps the next tile's state besides (WS_MAX_LIVE_PERSISTENT).
WS_MAX_LIVE_REGISTERS = {2: 160, 3: 128}
WS_MAX_LIVE_PERSISTENT = {2: 160, 3: 112}

# Widest global access, in bytes (ld.global.v4.b32 / cp.async 16).
MAX_VECTOR_BYTES = 16


def check(info: KernelInfo, values: Mapping[str, KnobValue], target: Target) -> list[str]:
    """Reasons `values` is illegal for the kernel `info` on `target` (empty list: legal)."""
    reasons = _check_domain(info, values, target)
    if reasons:
        return reasons
    v = _Values(values)
    rules = _RULES.get(info.kind, ())
    for rule in rules:
        rule(info, v, target, reasons)
    return reasons


def is_legal(info: KernelInfo, values: Mapping[str, KnobValue], target: Target) -> bool:
    return not check(info, values, target)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


class _Values:
    """Knob values with `has(*names)` to run a rule only when its inputs are all present."""

    def __init__(self, values: Mapping[str, KnobValue]):
        self.values = values

    def has(self, *names: str) -> bool:
        return all(n in self.values for n in names)

    def __getitem__(self, name: str):
        return self.values[name]


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KB"


def _check_domain(info: KernelInfo, values: Mapping[str, KnobValue], target: Target) -> list[str]:
    space = knob_space_for(info, target)
    reasons = []
    for name, value in values.items():
        if name not in space:
            reasons.append(
                f"'{name}' is not a knob of {info.kind} kernels "
                f"(knobs: {', '.join(space) or 'none'})"
            )
        elif value not in space[name]:
            reasons.append(
                f"{name}={value} is not in its domain on {target.name}: "
                f"{_fmt_domain(space[name])}"
            )
    return reasons


def _fmt_domain(domain) -> str:
    return "[" + ", ".join(str(d) for d in domain) + "]"


def _threads(v: _Values, t: Target, reasons: list[str], threads: int, what: str) -> None:
    if threads > t.max_threads_per_block:
        reasons.append(
            f"threads: {what} = {threads} threads exceeds the {t.max_threads_per_block} a block may have"
        )


def _vector(
    info: KernelInfo, v: _Values, t: Target, reasons: list[str], extra: tuple[str, int] | None = None
) -> None:
    if not v.has("vector"):
        return
    vec = v["vector"]
    nbytes = vec * info.element_bytes
    if nbytes > MAX_VECTOR_BYTES:
        reasons.append(
            f"vector={vec} of {info.element_bytes}-byte elements is {nbytes} bytes; one global "
            f"access moves at most {MAX_VECTOR_BYTES}"
        )
    axis, extent = info.vector_axis, info.vector_extent
    if extent % vec:
        reasons.append(
            f"vector={vec} does not divide the contiguous extent {axis}={extent}"
        )
    if extra is not None and extra[1] % vec:
        reasons.append(f"vector={vec} does not divide {extra[0]}={extra[1]}")


# --------------------------------------------------------------------------------------------
# Contraction
# --------------------------------------------------------------------------------------------


def _workers(v) -> str | None:
    return v["workers"] if v.has("workers") else None


def _c_threads(info, v, t, reasons):
    if v.has("warps"):
        threads = block_threads(v["warps"], _workers(v))
        extra = threads - 32 * v["warps"]
        what = f"warps={v['warps']} x 32" + (f" + a producer warpgroup of {extra}" if extra else "")
        _threads(v, t, reasons, threads, what)


# the knobs the shared-memory layout reads besides the tiles (fusion: with row statistics)
_LAYOUT_KNOBS = ("workers", "warps", "split_k", "schedule")


def _c_smem(info, v, t, reasons):
    """The operand tiles alone while other knobs are open (a bound); the plan's whole layout
    (emmy.schedule.contraction_smem) once every knob it reads is known."""
    if not v.has("stages", "block_m", "block_n", "block_k"):
        return
    st, bm, bn, bk = v["stages"], v["block_m"], v["block_n"], v["block_k"]
    nc = info.n_contractions
    nbytes = operand_smem_bytes(st, bm, bn, bk, nc)
    bn_text = f"{nc} x block_n={bn}" if nc > 1 else f"block_n={bn}"
    tiles = f"stages={st} x (block_m={bm} + {bn_text}) x block_k={bk} x 2 bytes"
    limit = f"exceeds the {_kb(t.smem_per_block)} a block may use on {t.name}"
    if nbytes > t.smem_per_block:
        reasons.append(f"shared memory: {tiles} = {_kb(nbytes)} {limit}")
        return
    facts = SmemFacts.of(info)
    if most_bytes(facts, bm, bn, bk, st, nc) <= t.smem_per_block:
        return  # fits whatever the other knobs say (and reads none of them: cheap for the legal space)
    layout_knobs = _LAYOUT_KNOBS + (("fusion",) if info.prologue else ())
    if not v.has(*layout_knobs):
        return
    split, combine = v["split_k"], v["combine"] if v.has("combine") else "kernel"
    layout = smem_for(
        facts, t, bm=bm, bn=bn, bk=bk, stages=st, nc=nc, workers=v["workers"], warps=v["warps"],
        persistent=v["schedule"] in ("persistent", "stream_k"),
        stats_kernel=stats_kernel_needed(bool(info.prologue), v["fusion"] if info.prologue else "fused", split),
        workspace=split > 1 and combine != "last_block",  # (where the epilogue is staged: not the total)
        pingpong=_pingpong(v),
    )
    if layout.total > t.smem_per_block:
        parts = [tiles]
        if layout.stats_bytes:
            parts.append(f"{len(info.prologue)} row statistics x block_m={bm} x 4 bytes")
        if layout.bars_offset is not None:
            parts.append(f"2 x stages={st} mbarriers x 8 bytes")
        if v["workers"] in WGMMA_WORKERS:
            parts.append("1024 bytes of alignment for wgmma")
        reasons.append(f"shared memory: {' + '.join(parts)} = {_kb(layout.total)} {limit}")


def _c_registers(info, v, t, reasons):
    if not v.has("block_m", "block_n", "warps"):
        return
    bm, bn, threads = v["block_m"], v["block_n"], 32 * v["warps"]
    nc = info.n_contractions
    pingpong = _pingpong(v)
    acc = accumulators_per_thread(info, bm, bn, v["warps"], pingpong)
    workers = "wgmma_ws" if pingpong else _workers(v)  # (pingpong exists only there)
    regs, budget = register_budget(t, block_threads(v["warps"], workers), workers, pingpong)
    if acc > budget:
        what = f"{nc} x " if nc > 1 else ""
        over = "one warpgroup's 128 threads (epilogue=pingpong)" if pingpong else f"{threads} threads"
        reasons.append(
            f"registers: {what}block_m={bm} x block_n={bn} fp32 accumulators over {over} "
            f"is {acc:g} per thread, over the {budget} that fit in "
            f"{regs} registers"
        )
    if bm * bn < threads:
        reasons.append(
            f"block_m={bm} x block_n={bn} = {bm * bn} outputs is fewer than the {threads} threads"
        )


def _c_workers(info, v, t, reasons):
    if not v.has("workers"):
        return
    w = v["workers"]
    if w == "thread" and v.has("block_m", "block_n", "warps"):
        _, ty = thread_grid(v["block_n"], 32 * v["warps"])
        if v["block_m"] % ty:
            reasons.append(
                f"thread workers: block_m={v['block_m']} is not a multiple of the {ty} thread rows "
                f"of warps={v['warps']} with block_n={v['block_n']}"
            )
    if w == "mma_sync":
        if v.has("block_k") and v["block_k"] % 16:
            reasons.append(f"mma_sync: block_k={v['block_k']} is not a multiple of 16")
        if v.has("block_m", "block_n", "warps"):
            bm, bn, wp = v["block_m"], v["block_n"], v["warps"]
            if warp_grid(bm, bn, wp) is None:
                reasons.append(
                    f"mma_sync: block_m={bm} x block_n={bn} cannot be split among warps={wp} "
                    f"into tiles of at least 16x8 (multiples of 16 rows and 8 columns per warp)"
                )
    elif w in WGMMA_WORKERS:
        if v.has("warps") and v["warps"] % 4:
            reasons.append(f"{w}: warps={v['warps']} is not a multiple of 4 (whole warpgroups)")
        # the side cut into 64-row slices (block_m; block_n with slices = cols, where block_m is
        # the wgmma's N); a kernel without the `slices` knob slices block_m
        sliced, wide = ("block_n", "block_m") if _cols(v) else ("block_m", "block_n")
        slices = f" (slices={v['slices']})" if v.has("slices") else ""
        if v.has(sliced) and v[sliced] % 64:
            reasons.append(f"{w}: {sliced}={v[sliced]} is not a multiple of 64{slices}")
        # (with epilogue = pingpong each warpgroup multiplies whole tiles: any multiple of 64;
        # checked once the epilogue is known, so that no completion of a legal one is cut off)
        if v.has(sliced, "warps", "epilogue") and v["warps"] % 4 == 0 and v[sliced] % 64 == 0 and not _pingpong(v):
            groups = v["warps"] // 4
            if v[sliced] % (64 * groups):
                reasons.append(
                    f"{w}: {sliced}={v[sliced]} does not give each of the {groups} "
                    f"warpgroups 64-row slices ({sliced} must be a multiple of {64 * groups}){slices}"
                )
        if v.has(wide):
            n = v[wide]
            if n % 8 or n > 256:
                reasons.append(f"{w}: {wide}={n} (the wgmma's N) must be a multiple of 8 and at most 256{slices}")
            nc = info.n_contractions
            per_slice = nc * n // 2  # a thread's accumulators for one 64-row slice, any warps
            if per_slice > MAX_ACC_PER_THREAD:
                what = f"{nc} x {wide}={n}" if nc > 1 else f"{wide}={n}"
                reasons.append(
                    f"{w}: {what} needs {per_slice} fp32 accumulators per thread for each 64-row "
                    f"slice, over the {MAX_ACC_PER_THREAD} a thread can hold"
                )
        if v.has("block_k") and v["block_k"] % 16:
            reasons.append(f"{w}: block_k={v['block_k']} is not a multiple of 16")
        if v.has("stages") and v["stages"] < 2:
            reasons.append(f"{w} reads its operands from shared memory: stages must be at least 2")


def _c_schedule(info, v, t, reasons):
    if not v.has("schedule") or v["schedule"] == "grid":
        return
    s = v["schedule"]
    if v.has("workers") and v["workers"] != "wgmma_ws":
        reasons.append(
            f"schedule={s} needs workers=wgmma_ws (a producer warpgroup that stages the next "
            f"tile during the epilogue), not workers={v['workers']}"
        )
    if v.has("split_k") and v["split_k"] != 1:
        reasons.append(f"schedule={s} needs split_k=1 (split_k={v['split_k']})")
    if s == "stream_k":
        _c_stream_k(info, v, t, reasons)
    elif info.ws_row_stats == "before" and v.has("fusion") and v["fusion"] == "fused":
        why = (
            "the A side uses row statistics that a fused kernel computes" if info.a_reads_prologue
            else "the row statistics cannot be summed from the staged tiles (a reduction other than a sum or "
            "max over the k axes, or an A side neither a plain copy nor computed from copied rows): a fused "
            "kernel computes them"
        )
        reasons.append(f"schedule=persistent: {why} before its k loop, once per tile; use schedule=grid or fusion=split")


# index arithmetic of the kernel stage is 32-bit: stream_k's block * iterations must fit
STREAM_K_MAX_PRODUCT = 2**31 - 1


def _c_stream_k(info, v, t, reasons):
    for knob, want in (("cluster", 1), ("group_m", 1), ("epilogue", "together")):
        if v.has(knob) and v[knob] != want:
            reasons.append(f"schedule=stream_k needs {knob}={want} ({knob}={v[knob]})")
    if info.prologue and v.has("fusion") and v["fusion"] != "split":
        reasons.append(
            f"schedule=stream_k: a block's run of k-steps covers part of a row; the row statistics "
            f"must come from a kernel of their own (fusion=split, not {v['fusion']})"
        )
    if v.has("block_m", "block_n", "block_k"):
        tiles = output_tiles(info, v["block_m"], v["block_n"])
        steps = ceil(info.K / v["block_k"])  # (as the kernel stage counts them)
        if tiles * steps * t.sms > STREAM_K_MAX_PRODUCT:
            reasons.append(
                f"schedule=stream_k: {tiles} tiles x {steps} k-steps x {t.sms} blocks "
                f"overflow the kernel's 32-bit index arithmetic"
            )
        else:
            most = max(len(runs) for runs in stream_k_runs(tiles, steps, t.sms))
            if most > STREAM_K_MAX_PARTS:
                blocks = stream_k_blocks(tiles, steps, t.sms)
                total = (tiles - stream_k_whole(tiles, t.sms)) * steps  # the k-steps shared out
                lo, hi = total // blocks, -(-total // blocks)
                run = f"{lo} step" + ("s" if lo > 1 else "") if lo == hi else f"{lo} or {hi} steps"
                reasons.append(
                    f"schedule=stream_k: {tiles} tiles x {steps} k-steps on {blocks} blocks give runs of "
                    f"{run}, so up to {most} blocks share a tile (at most {STREAM_K_MAX_PARTS}); use larger "
                    f"tiles or a larger block_k"
                )


def _c_copy(info, v, t, reasons):
    if not v.has("copy") or v["copy"] != "tma":
        return
    if v.has("workers") and v["workers"] != "wgmma_ws":
        reasons.append(
            f"copy=tma needs workers=wgmma_ws (its producer warpgroup issues the copies), not workers={v['workers']}"
        )


def _pingpong(v) -> bool:
    return v.has("epilogue") and v["epilogue"] == "pingpong"


def _cols(v) -> bool:
    return v.has("slices") and v["slices"] == "cols"


def _c_slices(info, v, t, reasons):
    """slices = cols: wgmma warpgroups, each holding every row of the tile (so a whole-tile
    epilogue, no row statistics summed in the kernel, no A side rewritten in place by the
    warpgroup of its rows)."""
    if not _cols(v):
        return
    if v.has("workers") and v["workers"] not in WGMMA_WORKERS:
        reasons.append(f"slices=cols cuts the wgmma warpgroups' slices along block_n: it needs workers=wgmma or wgmma_ws (workers={v['workers']})")
    if v.has("epilogue") and v["epilogue"] != "together":
        reasons.append(f"slices=cols: each warpgroup holds every row of the tile, so they store it together: it needs epilogue=together (epilogue={v['epilogue']})")
    if info.prologue and v.has("fusion") and v["fusion"] != "split":
        reasons.append("slices=cols: each warpgroup holds every row of the tile, none sums a row's statistics alone: it needs fusion=split")
    if info.raw_a_loads:
        reasons.append("slices=cols: the A side is computed from raw tiles, rewritten by the warpgroup holding their rows, which slices=cols does not have")


def _c_epilogue(info, v, t, reasons):
    if not v.has("epilogue") or v["epilogue"] not in ("staggered", "pingpong"):
        return
    e = v["epilogue"]
    if v.has("schedule") and v["schedule"] != "persistent":
        reasons.append(f"epilogue={e} takes turns between tiles of a persistent block: it needs schedule=persistent (schedule={v['schedule']})")
    if v.has("workers") and v["workers"] != "wgmma_ws":
        reasons.append(f"epilogue={e} needs workers=wgmma_ws, not workers={v['workers']}")
    if v.has("warps") and v["warps"] != 8:
        reasons.append(f"epilogue={e} needs two consumer warpgroups (warps=8, not {v['warps']})")
    if e == "staggered":
        if info.epilogue_loads:
            reasons.append("epilogue=staggered: the epilogue reads a tensor (a residual); a warpgroup stores only its own rows where it reads none")
        elif not info.parts_stage_results:
            reasons.append(
                "epilogue=staggered: a store is not a bf16 value of the accumulators (here an f32 one), so the whole "
                "tile is staged as f32 and every warpgroup stores any of its rows"
            )
        if info.ws_row_stats == "producer" and v.has("fusion") and v["fusion"] == "fused":
            reasons.append(
                "epilogue=staggered: the producer warpgroup sums the row statistics while it computes the A "
                "side (from several tensors) and hands them to both consumer warpgroups at once; it needs "
                "fusion=split or epilogue=together"
            )
        return
    if v.has("cluster") and v["cluster"] != 1:
        reasons.append(f"epilogue=pingpong: each warpgroup takes its own tiles, which a pair of blocks cannot share (cluster={v['cluster']})")
    if info.prologue and v.has("fusion") and v["fusion"] != "split":
        reasons.append("epilogue=pingpong: the row statistics would be summed by both consumer warpgroups over one tile's rows; it needs fusion=split")
    if any(full for _, full in info.raw_a_loads):
        reasons.append("epilogue=pingpong: the computed A side is rewritten in the slot by the warpgroups of one tile, which pingpong does not have")


def _c_cluster(info, v, t, reasons):
    if not v.has("cluster") or v["cluster"] == 1:
        return
    c = v["cluster"]
    if v.has("copy") and v["copy"] != "tma":
        reasons.append(f"cluster={c} multicasts tensor-map copies: it needs copy=tma (copy={v['copy']})")
    # pairs along m (blocks with the same columns, sharing B), or with slices = cols along n
    # (blocks with the same rows, sharing A)
    side, what = ("block_n", "column") if _cols(v) else ("block_m", "row")
    if v.has(side):
        tiles = ceil((info.N if _cols(v) else info.M) / v[side])
        if tiles % c:
            reasons.append(f"cluster={c}: the {tiles} {what} tiles of {side}={v[side]} do not pair up")


def _c_group_m(info, v, t, reasons):
    if not v.has("group_m"):
        return
    g = v["group_m"]
    if v.has("cluster") and g % cluster_rows(v["cluster"], "cols" if _cols(v) else "rows"):
        reasons.append(f"group_m={g} is not a multiple of cluster={v['cluster']}")
    if v.has("block_m") and g > 1:
        tiles = ceil(info.M / v["block_m"])
        if g >= 2 * tiles:
            reasons.append(f"group_m={g} groups more row tiles than the {tiles} of block_m={v['block_m']}")


def _c_split_tail(info, v, t, reasons):
    if not v.has("split_tail") or v["split_tail"] == 1:
        return
    s = v["split_tail"]
    for knob, want in (("split_k", 1), ("schedule", "grid"), ("cluster", 1), ("group_m", 1)):
        if v.has(knob) and v[knob] != want:
            reasons.append(f"split_tail={s} needs {knob}={want} ({knob}={v[knob]})")
    if info.batch > 1:
        reasons.append(f"split_tail={s} needs a contraction without batch axes")
    if info.other_reductions:
        reasons.append(f"split_tail={s} needs one product over all columns (not sibling products built as parts)")
    if v.has("fusion") and v["fusion"] != "split":
        reasons.append(f"split_tail={s}: the tail's parts need whole-row statistics from a kernel of their own (fusion=split, not {v['fusion']})")
    if v.has("block_m", "block_n"):
        tiles = output_tiles(info, v["block_m"], v["block_n"])
        if tiles <= t.sms or tiles % t.sms == 0:
            reasons.append(f"split_tail={s}: {tiles} tiles on {t.sms} SMs leave no partial wave behind a full one")
    if v.has("block_k"):
        steps, how = k_steps(info, v["block_k"])
        if steps % s:
            reasons.append(f"split_tail={s} does not divide the {steps} k-steps ({how})")


def _c_split(info, v, t, reasons):
    if not v.has("block_k", "split_k"):
        return
    bk, sk = v["block_k"], v["split_k"]
    steps, how = k_steps(info, bk)
    if sk > steps:
        reasons.append(f"split_k={sk} exceeds the {steps} k-steps ({how})")
    elif steps % sk:
        reasons.append(f"split_k={sk} does not divide the {steps} k-steps ({how})")


def _c_combine(info, v, t, reasons):
    if v.has("combine", "split_k") and v["combine"] == "last_block" and v["split_k"] == 1:
        reasons.append("combine=last_block adds the partial sums of split_k's parts: it needs split_k > 1")


def k_steps(info: KernelInfo, block_k: int) -> tuple[int, str]:
    """The number of block_k steps of a contraction and how it is counted: block_k tiles of the
    innermost k axis, for every index of the outer k axes (if it reduces several)."""
    inner = info.axes[info.k_axes[-1]] if info.k_axes else info.K
    outer = info.extent(info.k_axes[:-1]) if info.k_axes else 1
    steps = outer * ceil(inner / block_k)
    if outer == 1:
        return steps, f"K={inner} / block_k={block_k}"
    return steps, f"{outer} x {info.k_axes[-1]}={inner} / block_k={block_k}"


def _c_vector(info, v, t, reasons):
    extra = ("block_k", v["block_k"]) if v.has("block_k") else None
    _vector(info, v, t, reasons, extra)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


def _a_threads(info, v, t, reasons):
    if v.has("warps", "workers") and v["workers"] == "wgmma_ws":
        # the producer warpgroup besides the computing warps
        _threads(v, t, reasons, 32 * v["warps"] + 128, f"warps={v['warps']} x 32 + a producer warpgroup of 128")
    elif v.has("warps"):
        _threads(v, t, reasons, 32 * v["warps"], f"warps={v['warps']} x 32")


def _a_smem(info, v, t, reasons):
    if not v.has("block_q", "block_kv", "stages"):
        return
    bq, bkv, st = v["block_q"], v["block_kv"], v["stages"]
    d, dv = info.head_dim, info.value_dim
    if st < 2:
        return
    # the flash kernel's tiles (the plan's model): rows of stored_head_dim columns, the tiles'
    # base aligned to 1024 bytes for wgmma
    # (schedule = persistent keeps a second Q tile: the next query block's rows)
    q_tiles = 2 if v.has("schedule") and v["schedule"] == "persistent" else 1
    wgmma = v.has("workers") and v["workers"] in WGMMA_WORKERS
    nbytes = attention_smem_bytes(d, bq, bkv, st, wgmma, q_tiles)
    if nbytes > t.smem_per_block:
        ld = stored_head_dim(d, wgmma)
        pad = "" if ld == d else f" (rows padded to {ld})"
        q = f"block_q={bq} x {d}" if q_tiles == 1 else f"2 x block_q={bq} x {d} (schedule=persistent)"
        reasons.append(
            f"shared memory: {q} + stages={st} x block_kv={bkv} x ({d} + {dv}) "
            f"x {info.element_bytes} bytes{pad} = {_kb(nbytes)} exceeds the "
            f"{_kb(t.smem_per_block)} a block may use on {t.name}"
        )


def _a_registers(info, v, t, reasons):
    if not v.has("block_q", "block_kv", "warps"):
        return
    bq, bkv, threads = v["block_q"], v["block_kv"], 32 * v["warps"]
    per_thread = (bq * info.value_dim + bq * bkv) / threads
    if v.has("workers") and v["workers"] == "mma_sync":
        # The flash kernel gives each warp 16 query rows; more rows per warp, or 128-key
        # steps, spilled registers with computed Q/K (ptxas -v, head dim 128).
        if bq > 16 * v["warps"]:
            reasons.append(
                f"registers: block_q={bq} over {v['warps']} warps is more than 16 query rows per warp"
            )
        if bkv > 64 and info.head_dim >= 128:
            reasons.append(f"registers: block_kv={bkv} with head dim {info.head_dim} spills")
    consumers = v["warps"] // 4 if v.has("workers") and v["workers"] == "wgmma_ws" else 0
    if consumers in WS_MAX_LIVE_REGISTERS:
        # the consumers hold O, S and P in the registers setmaxnreg gives them
        persistent = v.has("schedule") and v["schedule"] == "persistent"
        most = (WS_MAX_LIVE_PERSISTENT if persistent else WS_MAX_LIVE_REGISTERS)[consumers]
        live = info.value_dim // 2 + bkv // 2 + bkv // 4
        if live > most:
            words = {2: "two", 3: "three"}[consumers]
            reasons.append(
                f"registers: wgmma_ws with {words} consumer warpgroups holds O ({info.value_dim // 2}), S ({bkv // 2}) "
                f"and P ({bkv // 4}) in {live} registers a thread, over the {most} that fit without spills"
                + (" with schedule=persistent" if persistent and most != WS_MAX_LIVE_REGISTERS[consumers] else "")
            )
    if per_thread > MAX_ACC_PER_THREAD:
        reasons.append(
            f"registers: block_q={bq} x ({info.value_dim} outputs + block_kv={bkv} scores) fp32 "
            f"over {threads} threads is {per_thread:g} per thread, over the {MAX_ACC_PER_THREAD} "
            f"that fit in {t.regs_per_thread} registers"
        )


def _a_workers(info, v, t, reasons):
    if not v.has("workers"):
        return
    w = v["workers"]
    d, dv = info.head_dim, info.value_dim
    if w in ("mma_sync", *WGMMA_WORKERS):
        if d % 16:
            reasons.append(f"{w}: head dimension {d} is not a multiple of 16")
        if dv % 8:
            reasons.append(f"{w}: value head dimension {dv} is not a multiple of 8")
        if v.has("block_kv") and v["block_kv"] % 16:
            reasons.append(f"{w}: block_kv={v['block_kv']} is not a multiple of 16")
    if w != "wgmma_ws" and v.has("warps") and v["warps"] > 8:
        # 12 warps are wgmma_ws's three consumer warpgroups; the other flash loops are built
        # for at most two warpgroups (the wgmma loop's turns, mma.sync's 8 warps)
        reasons.append(f"{w}: warps={v['warps']} (three warpgroups) runs only as workers=wgmma_ws's three consumers")
    if w == "mma_sync" and v.has("block_q", "warps"):
        bq, wp = v["block_q"], v["warps"]
        if bq % (16 * wp):
            reasons.append(
                f"mma_sync: block_q={bq} does not give each of the warps={wp} 16-row slices "
                f"(block_q must be a multiple of {16 * wp})"
            )
    if w in WGMMA_WORKERS:
        # the wgmma flash kernel: one warpgroup multiplies its 64 query rows by 64-column slabs
        # of the head dimension (emmy/backend/runtime/attention.cuh; wgmma_ws: attention_ws.cuh)
        if v.has("warps") and v["warps"] % 4:
            reasons.append(f"wgmma: warps={v['warps']} is not whole warpgroups (a multiple of 4)")
        if v.has("block_q", "warps") and v["block_q"] != 16 * v["warps"]:
            reasons.append(
                f"wgmma: block_q={v['block_q']} is not 64 rows per warpgroup of warps={v['warps']}"
            )
        if d > 256:
            reasons.append(f"wgmma: head dimension {d} is over 256")
        if v.has("block_kv") and v["block_kv"] > 256:
            reasons.append(f"wgmma: block_kv={v['block_kv']} is over 256")
        if v.has("stages") and v["stages"] < 2:
            reasons.append(f"{w} reads its operands from shared memory: stages must be at least 2")
    if w == "wgmma_ws" and v.has("warps", "copy", "fusion"):
        # the producer warpgroup issues tensor-map copies only; the consumers' Q rows by cp.async
        why = attention_ws_illegal(info, v["warps"], v["copy"], v["fusion"])
        if why:
            reasons.append(why)


def _a_fusion(info, v, t, reasons):
    # fusion = epilogue: the contraction producing the rows computes Q and K in its epilogue.
    # The attention's side here (emmy.schedule.qk_epilogue.attention_illegal: per-head code of
    # its own rows, those rows a contraction kernel's result); the contraction's side (block_n
    # whole heads, ...) is fitted with the pair by decide-forks.
    if v.has("fusion") and v["fusion"] == "epilogue":
        why = qk_epilogue.attention_illegal(info)
        if why:
            reasons.append(f"fusion=epilogue: {why}")


def _a_copy(info, v, t, reasons):
    # tensor-map copies of K and V: issued by one thread on the key block's mbarrier, in the
    # software-pipelined wgmma loop; a ragged last key block is copied from seq_kv - block_kv
    # (its repeated keys masked), so a copy never reads past the keys but needs block_kv of them
    if not v.has("copy") or v["copy"] != "tma":
        return
    if v.has("workers") and v["workers"] not in WGMMA_WORKERS:
        reasons.append(
            f"copy=tma copies K and V for the wgmma flash loop: it needs workers=wgmma or wgmma_ws, not {v['workers']}"
        )
    if v.has("workers", "stages") and v["workers"] == "wgmma" and v["stages"] < 3:
        reasons.append(f"copy=tma needs the pipelined wgmma loop: stages at least 3 (stages={v['stages']})")
    if v.has("block_kv") and v["block_kv"] > info.seq_kv:
        reasons.append(f"copy=tma copies whole key blocks: block_kv={v['block_kv']} is more than the {info.seq_kv} keys")


def _a_schedule(info, v, t, reasons):
    if v.has("schedule", "workers") and v["schedule"] == "persistent":
        why = attention_persistent_illegal(v["workers"])
        if why:
            reasons.append(why)


def _a_split_kv(info, v, t, reasons):
    # the parts of a query block's key blocks: blocks of the warp-specialized kernel's grid, at
    # most SPLIT_KV_MAX_WAVES waves of them (emmy.schedule.attention.split_kv_illegal)
    if v.has("split_kv", "workers", "schedule", "block_q") and v["split_kv"] != 1:
        why = attention_split_kv_illegal(info, v["split_kv"], v["workers"], v["schedule"], v["block_q"], t)
        if why:
            reasons.append(why)


# --------------------------------------------------------------------------------------------
# Reduction and elementwise
# --------------------------------------------------------------------------------------------


def _r_threads(info, v, t, reasons):
    if v.has("threads"):
        _threads(v, t, reasons, v["threads"], "threads")
    if v.has("threads", "rows_per_block"):
        th, rpb = v["threads"], v["rows_per_block"]
        if th % rpb or (th // rpb) % 32:
            reasons.append(
                f"threads={th} over rows_per_block={rpb} does not give each row whole warps "
                f"(threads must be a multiple of {32 * rpb})"
            )


def _r_vector(info, v, t, reasons):
    _vector(info, v, t, reasons)


def _e_threads(info, v, t, reasons):
    if v.has("threads"):
        _threads(v, t, reasons, v["threads"], "threads")


def _e_vector(info, v, t, reasons):
    _vector(info, v, t, reasons)


Rule = Callable[["KernelInfo", _Values, Target, list[str]], None]

_RULES: dict[str, tuple[Rule, ...]] = {
    "contraction": (
        _c_threads, _c_smem, _c_registers, _c_workers, _c_schedule, _c_copy, _c_cluster, _c_group_m, _c_epilogue, _c_slices,
        _c_split, _c_split_tail, _c_combine, _c_vector,
    ),
    "attention": (_a_threads, _a_smem, _a_registers, _a_workers, _a_copy, _a_schedule, _a_split_kv, _a_fusion),
    "reduction": (_r_threads, _r_vector),
    "elementwise": (_e_threads, _e_vector),
}


def rules_for(kind: str) -> tuple[Rule, ...]:
    """The legality rules of a kernel kind, each `rule(info, values, target, reasons)`: what
    `check` runs one after the other, for callers that run them one at a time (the legal
    space); `values` is `RuleValues(mapping)`."""
    return _RULES.get(kind, ())


RuleValues = _Values


__all__ = ["RuleValues", "check", "is_legal", "k_steps", "output_tiles", "rules_for", "warp_grid"]
