"""The prior's features: what one candidate schedule of a kernel costs, in physical terms.

    features(info, values, target, facts=None) -> Features     # a frozen mapping name -> float

A candidate is a kernel (`KernelInfo`) with decided knob values on a `Target`; its plan
(`emmy.schedule.plan.plan_for`) says what the knobs mean. The terms, all from the plan and the
target's hardware table (`emmy.targets`), none fitted:

    flops            useful arithmetic (2 per multiply-add), padded tiles included
    peak_flops       the rate of the units that do it: tensor cores (wgmma on sm_90a; mma.sync,
                     half of that rate where wgmma exists) or FMA units (workers = thread)
    intensity        multiply-adds per element staged, per k (block_m * block_n * nc /
                     (block_m + nc * block_n)): how well a tile feeds the tensor cores
    unique_bytes     the kernel's operands and results, once (from its tensor types)
    reread_bytes     operand tiles read again by other tiles (A once per column of tiles, B once
                     per row of tiles; K and V once per query block), of them
    l2_fraction      the share of re-read bytes L2 serves: 1 where the operands fit in L2, else
                     the share that fits; contractions: of the operand rows and columns the tiles
                     running at once read (the wave's working set, by the tile order)
    occupancy        blocks per SM, from shared memory, registers, threads and the block limit
    waves            rounds of one block per SM the main launch takes (the plan's waves)
    quant            wave quantization: the busiest SM's blocks over the average (>= 1)
    warps_resident   warps an SM holds at once (latency hiding)
    tensor           1 where tensor cores do the arithmetic (then `intensity` matters)
    busy             the share of the SMs the main launch keeps busy (1 from one full wave)
    rounds           rounds of blocks an SM runs one after another (each fills its pipeline
                     and stores its results); schedule = persistent: the tiles its busiest block
                     loops over (and `waves`, `quant`, `serial_steps` count them too)
    stages / steps   pipeline depth (0 for kernels without a k loop) and k-steps per tile;
                     `unstaged` = 1 without staging;
                     `serial_steps`: the k-steps one SM runs one after another (each pays a
                     barrier and a wait, however small the step); `softmax_steps`: the same
                     for attention's key blocks (each an online-softmax update; with split_kv
                     scaled by the plan's critical path against the whole query blocks')
    workspace_bytes  split_k's, stream-K's and split_kv's partial sums written and read back (fp32)
    stats_bytes      fusion = split: what the row-statistics launch reads and writes (the rows
                     once, two floats per row; one launch for all the parts that share it)
    ticket_bytes     the partial sums one block reads back alone after the others finished
                     (combine = last_block: a tile's split_k - 1 other parts; stream-K: the
                     parts of the blocks sharing a tile): serial, at one SM's share of L2;
    tickets          1 where such a block exists: its fence, its ticket and its wait for the
                     other parts' flags, in series after the k loop (H100, 2026-12-06: the
                     wait alone about 2 us for the down projection at 512 tokens)
    recompute_bytes  what fusion recomputes: a fused row statistic re-read for every column of
                     output tiles (the norm of x recomputed per output tile), and
    recompute_flops  its arithmetic (FMA units), and `recompute_chain`: the elements of its rows
                     one consumer thread folds one after another (a tile's rows x k over the
                     consumer threads, between its MMAs) in the tiles the busiest SM runs;
                     `recompute_rows`: the computed key and value
                     rows one SM works through one after another in fused attention (every
                     query block computes them all again, each a row reduction with barriers:
                     latency, not throughput, at small shapes)
    inflight_bytes   reductions and elementwise kernels: the bytes of loads an SM's resident
                     threads keep in flight (threads with nothing to load count none; Little's
                     law: too few pull less than the bandwidth)
    idle_rounds      reductions: rounds times the share of a block's threads with no element
                     of their row to load (threads x vector past the row's length): their
                     block-wide reductions and barriers span the idle threads all the same
    launches         kernel launches (helpers included: statistics, combine, tail, prep)
    spill_bytes      spilled bytes per thread where a build reported them (else 0), and
    reg_overflow     accumulator registers past the thread's budget (the plan's estimate)
    single_slice / multi_slice   wgmma_ws with one consumer warpgroup of 64-row slices (nothing
                     else to issue while it waits) / with several slices per warpgroup: what
                     the hand-written rules learnt on the H200, kept as terms the fit weighs

A term a kind does not have is 0 (1 for factors). `emmy.prior.model` turns the terms into a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from math import ceil, prod
from typing import TYPE_CHECKING

from emmy.diagnostics import EmmyError
from emmy.schedule.attention import stored_head_dim

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo
    from emmy.targets import Target
    from emmy.tuning.knobs import KnobValue

# The names of the terms, in a fixed order (JSON and tables use it).
NAMES = (
    "flops", "peak_flops", "intensity", "unique_bytes", "reread_bytes", "l2_fraction", "occupancy",
    "waves", "busy", "stages", "steps", "unstaged", "workspace_bytes",
    "recompute_bytes", "launches", "spill_bytes", "reg_overflow", "single_slice", "multi_slice",
    "blocks", "threads", "smem_bytes", "tile_area", "tensor", "quant", "warps_resident", "serial_steps",
    "recompute_flops", "rounds", "softmax_steps", "inflight_bytes", "recompute_rows", "ticket_bytes",
    "tickets", "idle_rounds", "thread_ops", "warp_ops", "stats_bytes", "recompute_chain", "prologue_loads",
)

Features = dict[str, float]

# FMA-unit operations per element of a computed key or value row (a norm's scale, a rotation)
RECOMPUTE_FLOPS = 8


def features(info: KernelInfo, values: Mapping[str, KnobValue], target: Target,
             facts: Mapping[str, object] | None = None) -> Features:
    """The terms of one candidate (module docstring); `facts` what its build reported (a trial's
    `facts`: `spill_bytes`), where known. An EmmyError where the values cannot be planned."""
    return Kernel(info, target).features(values, facts)


class Kernel:
    """One kernel on one target, for costing many candidates: what does not depend on the
    knobs (its bytes, whether attention is causal, the parts it is built as) is found once."""

    def __init__(self, info: KernelInfo, target: Target):
        self.info, self.target = info, target
        self.unique_bytes = float(io_bytes(info))
        self.a_reads_prologue = info.kind == "contraction" and info.a_reads_prologue
        self.stats_before = info.kind == "contraction" and info.ws_row_stats == "before"
        self.causal, self.computed_kv = False, 0
        self.row_ops = _row_ops(info) if info.kind == "reduction" else ()
        self._parts: dict[bool, tuple[Kernel, ...]] = {}
        if info.kind == "attention":
            from emmy.schedule.attention_body import DIRECT, analyze

            body = analyze(kernel_op(info), info)
            self.causal = body.causal
            self.computed_kv = sum(p.mode != DIRECT for p in (body.k, body.v))

    def parts(self, apart: bool) -> tuple[Kernel, ...]:
        """The parts the kernel is built as (`emmy.schedule.plan.split_by_outputs`: one per group
        of outputs; with `apart`, k apart from v), each a Kernel of its own; () for one part."""
        if apart not in self._parts:
            from emmy.analysis.classify import classify
            from emmy.schedule.plan import split_by_outputs

            op = self.info.op
            ops = split_by_outputs(op, apart) if op is not None and self.info.kind != "attention" else []
            self._parts[apart] = tuple(Kernel(classify(p), self.target) for p in ops) if len(ops) > 1 else ()
        return self._parts[apart]

    def features(self, values: Mapping[str, KnobValue], facts: Mapping[str, object] | None = None) -> Features:
        """The terms of what runs (`emmy.schedule.plan.plan_kernel`): a kernel built as parts is
        costed part by part, each with its own plan, and the parts' terms combined as their
        launches run (`combine`)."""
        from emmy.schedule.plan import Part, merge_of, part_values, plan_for

        values = dict(values)
        apart = values.pop("siblings", None) == "apart"  # used up by the split into parts
        parts = self.parts(apart)
        if not parts:
            plan = plan_for(self.info, values, self.target)
            f = self.terms(plan)
            f["launches"] = float(len(plan.launches))
        else:
            planned = []
            for k in parts:
                own, reasons = part_values(k.info, values, self.target)
                if reasons:
                    raise EmmyError(f"tile.kernel @{self.info.name}: its part @{k.info.name} cannot run "
                                    f"with these knobs: {'; '.join(reasons)}")
                planned.append(Part(k.info.op, k.info, own, plan_for(k.info, own, self.target, k.info.name)))
            merge = merge_of(planned)
            f = combine([k.terms(p.plan) for k, p in zip(parts, planned)], merge == "separate", self.target)
            # launches: each part's, their shared row statistics once, side by side as one where merged
            f["launches"] = float(len(planned[0].plan.launches) if merge != "separate" else
                                  sum(len(p.plan.launches) for p in planned) - _shared_stats(planned))
        spill = (facts or {}).get("spill_bytes")
        if isinstance(spill, (int, float)) and not isinstance(spill, bool) and spill > 0:
            f["spill_bytes"] = float(spill)
        return f

    def terms(self, plan) -> Features:
        """The terms of this kernel (or part) run as `plan` says, launches and spills aside."""
        info, target = self.info, self.target
        f = {n: 0.0 for n in NAMES}
        f.update(occupancy=1.0, busy=1.0, steps=1.0)  # stages 0: no k pipeline
        f["unique_bytes"] = self.unique_bytes
        f["l2_fraction"] = l2_fraction(self.unique_bytes, target)
        f["blocks"], f["threads"], f["smem_bytes"] = float(plan.blocks), float(plan.threads), float(plan.smem_bytes)
        occ = target.blocks_per_sm(plan.smem_bytes, plan.registers, plan.threads)
        f["occupancy"] = float(occ)
        resident = min(occ, ceil(plan.blocks / target.sms))  # blocks an SM holds at once
        f["warps_resident"] = float(min(resident * plan.threads, target.max_threads_per_sm) / target.warp_size)
        f["rounds"] = float(ceil(plan.blocks / (target.sms * occ)))
        f["serial_steps"] = f["rounds"]  # x the k-steps of a block, below
        _waves(f, plan.blocks, target)
        if info.kind == "contraction":
            _contraction(f, info, plan, target, self.a_reads_prologue, self.stats_before)
        elif info.kind == "attention":
            _attention(f, plan, target, self.causal, self.computed_kv)
        else:  # reductions and elementwise kernels: memory, a little FMA arithmetic
            _one_launch(f, info, plan, target, resident, self.row_ops)
        return f


# Terms of parts that add up (work and traffic), and terms that are the most of any part (what
# one block, tile or SM holds or waits for); per round of blocks: `PER_ROUND` (a part's term
# over its rounds), counted again over the rounds of the launch the parts share.
SUMMED = ("flops", "unique_bytes", "reread_bytes", "workspace_bytes", "recompute_bytes", "recompute_flops",
          "blocks", "spill_bytes", "warp_ops")
MOST = ("threads", "smem_bytes", "tile_area", "steps", "unstaged", "reg_overflow", "single_slice",
        "multi_slice", "ticket_bytes", "tickets", "recompute_rows", "tensor", "inflight_bytes", "stats_bytes")
PER_ROUND = ("serial_steps", "idle_rounds", "thread_ops", "softmax_steps", "recompute_chain", "prologue_loads")


def combine(fs: list[Features], separate: bool, target: Target) -> Features:
    """The terms of a kernel built as parts, from each part's (`Kernel.terms`).

    Side by side in one launch (`separate` False: `emmy.lowering.split.one_launch`): the
    launch's blocks are all the parts' (its waves, quantization, rounds from their sum, the
    occupancy the least of any part's), work and traffic add up, per-block terms are the
    largest part's, and what a round of blocks waits for (k-steps, idle threads, a thread's
    loads) is the slowest part's per round times the shared launch's rounds. One after another
    (`separate`): the parts' rounds, waves and serial terms add up, and quantization and the
    busy share are the flop-weighted (else byte-weighted) mean of the parts'."""
    f = {n: 0.0 for n in NAMES}
    for n in SUMMED:
        f[n] = sum(p[n] for p in fs)
    for n in MOST:
        f[n] = max(p[n] for p in fs)
    weight = [p["flops"] or p["unique_bytes"] or 1.0 for p in fs]
    total = sum(weight)

    def mean(n: str) -> float:
        return sum(w * p[n] for w, p in zip(weight, fs)) / total

    f["intensity"] = mean("intensity")
    f["peak_flops"] = total / sum(w / p["peak_flops"] for w, p in zip(weight, fs)) if all(p["peak_flops"] for p in fs) else 0.0
    f["stages"] = min(p["stages"] for p in fs)
    f["l2_fraction"] = min(min(p["l2_fraction"] for p in fs), l2_fraction(f["unique_bytes"], target))
    f["occupancy"] = min(p["occupancy"] for p in fs)
    f["warps_resident"] = min(p["warps_resident"] for p in fs)
    if separate:
        for n in ("rounds", "waves", *PER_ROUND):
            f[n] = sum(p[n] for p in fs)
        f["quant"], f["busy"] = mean("quant"), mean("busy")
    else:
        blocks = int(f["blocks"])
        _waves(f, blocks, target)
        f["rounds"] = float(ceil(blocks / (target.sms * f["occupancy"])))
        for n in PER_ROUND:
            f[n] = f["rounds"] * max(p[n] / max(p["rounds"], 1.0) for p in fs)
    return f


def _shared_stats(parts) -> int:
    """Row-statistics launches beyond the first among separately launched parts (launched once)."""
    stats = sum(1 for p in parts for la in p.plan.launches if la.role == "stats")
    return max(0, stats - 1)


def _row_ops(info: KernelInfo) -> tuple[tuple[object, int], ...]:
    """A reduction's top-level reduces, each with the operations its body makes per element
    (loads, arithmetic, index computations): what a thread runs for every element of its share
    of the row."""
    return tuple((r, _ops_per_element(info, r)) for r in info.reductions)


def _ops_per_element(info: KernelInfo, r) -> int:
    """The operations of a reduce's body per element of its axes, its yield left out; a reduce
    nested in it runs its own body once per element of its own axes, all by the one thread
    (a score recomputed inside a softmax over keys: the head dimension's sum for every key)."""
    from emmy.dialects.loop import ReduceOp, YieldOp

    n = 0
    for o in r.body.block.ops:
        if isinstance(o, YieldOp):
            continue
        if isinstance(o, ReduceOp):
            n += 1 + info.extent(o.axis_names) * _ops_per_element(info, o)
        else:
            n += sum(1 for _ in o.walk())
    return n


def io_bytes(info: KernelInfo) -> int:
    """Bytes of the kernel's operands and results, each once (from the tile op's tensor types):
    the operands its body reads and the results it stores (a part, `Kernel.parts`, keeps every
    operand and result of the kernel it was split from, but reads and stores only its own)."""
    from xdsl.dialects.builtin import TensorType

    from emmy.dtypes import dtype_bytes, element_dtype

    op = kernel_op(info)
    args = op.regions[0].block.args
    stored = {int(s.properties["output"].value.data) for s in info.stores}  # type: ignore[union-attr]
    used = [v for v, a in zip(op.inputs, args) if a.uses]  # type: ignore[attr-defined]
    total = 0
    for v in (*used, *(r for i, r in enumerate(op.outputs) if i in stored)):  # type: ignore[attr-defined]
        t = v.type
        if isinstance(t, TensorType):
            total += prod(t.get_shape()) * dtype_bytes(element_dtype(t.element_type))
    return total


def kernel_op(info: KernelInfo):
    """The `tile.kernel` a KernelInfo was classified from."""
    from emmy.dialects.tile import KernelOp

    if not info.stores:
        raise EmmyError(f"tile.kernel @{info.name}: no stores to cost")
    op = info.stores[0].parent_op()
    while op is not None and not isinstance(op, KernelOp):
        op = op.parent_op()
    if op is None:
        raise EmmyError(f"tile.kernel @{info.name}: its stores are not inside a tile.kernel")
    return op


def l2_fraction(unique_bytes: float, target: Target) -> float:
    """The share of re-read tiles L2 serves: all where the operands fit in L2, else what fits."""
    if unique_bytes <= target.l2_bytes:
        return 1.0
    return target.l2_bytes / unique_bytes


def _waves(f: Features, blocks: int, target: Target) -> None:
    f["waves"] = float(ceil(blocks / target.sms))
    f["busy"] = min(1.0, blocks / target.sms)
    f["quant"] = ceil(blocks / target.sms) * target.sms / max(1, blocks)


def _one_launch(f: Features, info: KernelInfo, plan, target: Target, resident: int, row_ops=()) -> None:
    """A reduction or elementwise kernel: FMA arithmetic (a reduction's: each reduce over its own
    axes, once per row; the axes of two reduces are not nested), the loads its threads keep in
    flight (threads of a row with no element to load keep none), and a reduction's
    `thread_ops`: the operations one thread runs one after another (each reduce: its share of
    the row, `vector` lanes per step on the steps of the lowering's chunk loop, times the
    operations its body makes per element), per round of blocks, and `warp_ops`: those
    operations issued by every warp the busiest SM runs."""
    f["peak_flops"] = target.fp32_flops
    f["intensity"] = 1.0
    f["tile_area"] = float(plan.threads)
    if info.kind == "reduction":
        per_row = sum(info.extent(r.axis_names) for r in info.reductions) or 1
        f["flops"] = 2.0 * plan.rows * per_row
        row = info.extent(info.reduced_axes) if info.reduced_axes else 1
        active = plan.rows_per_block * min(plan.threads_per_row, ceil(row / plan.vector))
        per_thread = plan.vector
        # rounds of blocks whose block-wide reductions span idle threads (barriers, slots)
        f["idle_rounds"] = f["rounds"] * (1.0 - active / plan.threads)
        chain = sum(ceil(info.extent(r.axis_names) / lanes / plan.threads_per_row) * lanes * ops
                    for r, ops in row_ops for lanes in [_lanes(info, r, plan.vector)])
        f["thread_ops"] = f["rounds"] * chain
        # ... and every warp of a block issues them, its idle threads' warps too (masked, not
        # skipped): the busiest SM's warp instructions, at its schedulers' issue rate
        f["warp_ops"] = float(ceil(plan.blocks / target.sms) * ceil(plan.threads / target.warp_size) * chain)
    else:
        f["flops"] = 2.0 * (prod(info.axes.values()) if info.axes else 1)
        active = plan.threads
        per_thread = plan.vector * plan.items
    f["warps_resident"] = float(min(resident * ceil(active / target.warp_size),
                                    target.max_threads_per_sm // target.warp_size))
    f["inflight_bytes"] = float(resident * active * per_thread * info.element_bytes)


def _lanes(info: KernelInfo, r, vector: int) -> int:
    """Elements per access of a reduce's chunk loop (`emmy.lowering.reduction.reduce_rows`): the
    largest power of two up to `vector` dividing its innermost reduced axis."""
    from emmy.schedule.reduction import largest_divisor_pow2

    axes = [a for a in r.axis_names if a != info.vector_axis] + [a for a in r.axis_names if a == info.vector_axis]
    return largest_divisor_pow2(info.axes[axes[-1]], vector)


def _tensor_rate(target: Target, workers: str) -> float:
    if workers == "thread":
        return target.fp32_flops
    if workers.startswith("wgmma"):
        return target.tensor_flops
    return target.tensor_flops * (0.5 if target.has("wgmma") else 1.0)  # mma.sync


def _contraction(f: Features, info: KernelInfo, plan, target: Target, a_reads_prologue: bool, stats_before: bool) -> None:
    from emmy.schedule.contraction import PROLOGUE_VECTOR
    from emmy.schedule.reduction import largest_divisor_pow2

    (N, nc), M, K, B = info.gemm_n_nc, info.M, info.K, info.batch
    bm, bn, bk, split = plan.bm, plan.bn, plan.bk, plan.split
    elt = info.element_bytes
    f["peak_flops"] = _tensor_rate(target, plan.workers)
    rows, cols = ceil(M / bm), ceil(N / bn)
    f["flops"] = 2.0 * B * rows * bm * cols * bn * nc * ceil(K / bk) * bk
    f["intensity"] = bm * bn * nc / (bm + nc * bn)
    f["tensor"] = 0.0 if plan.workers == "thread" else 1.0
    f["tile_area"] = float(bm * bn * nc)
    f["reread_bytes"] = float(B * ((cols - 1) * M * K + (rows - 1) * nc * N * K) * elt)
    f["l2_fraction"] = l2_fraction(_wave_bytes(plan, rows, cols, ceil(K / split) * elt, f["occupancy"], target), target)
    f["stages"] = float(plan.stages)
    steps = ceil(ceil(K / split) / bk)
    f["steps"] = float(steps)
    if plan.stream_k:  # whole tiles a block each, then an equal share of the rest's k-steps
        tiles, _, blocks, _, whole = plan.stream_k_plan
        run = ceil((tiles - whole) * steps / blocks)
        _looping(f, whole // blocks * steps + run, whole // blocks + ceil(run / steps), tiles * steps, target)
    elif plan.persistent:  # the busiest block's share of the tiles (times split_k's parts), in turn
        per_block = ceil(plan.tiles * split / plan.blocks)
        _looping(f, per_block * steps, per_block, plan.tiles * split * steps, target)
    else:
        f["serial_steps"] *= steps
    f["unstaged"] = 1.0 if plan.stages < 2 else 0.0
    workspace = 0.0
    if split > 1:
        workspace += 2.0 * split * B * M * N * nc * 4
    tile_bytes = bm * bn * nc * 4.0  # one fp32 partial tile
    if plan.last_block and split > 1:  # a tile's last block reads the other parts back alone
        f["ticket_bytes"] = (split - 1) * tile_bytes
        f["tickets"] = 1.0
    if plan.stream_k:  # tiles shared by blocks: their partial sums written and read (about two parts)
        tiles, _, _, most, whole = plan.stream_k_plan
        workspace += 2.0 * 2 * (tiles - whole) * tile_bytes
        if tiles > whole:  # ... the finishing block waits for and reads the others' parts
            f["ticket_bytes"] = (most - 1) * tile_bytes
            f["tickets"] = 1.0
    if plan.stats_kernel:  # the statistics pass reads the rows once (one pass for all parts)
        f["stats_bytes"] = B * M * K * elt + 2.0 * B * M * 4
    f["workspace_bytes"] = workspace
    if plan.prologue and not plan.stats_kernel:
        # every column of tiles computes its rows' statistics (a sum of squares over k) again
        f["recompute_flops"] = 2.0 * B * cols * M * K
        if prologue_pass(plan, stats_before):
            # ... in a pass over the tile's rows before its k loop: each warp takes its rows one
            # after another, and each lane waits for its 16-byte loads of a row one by one (the
            # loads sit behind the row's bounds check), in every tile the busiest SM runs
            rows = ceil(bm / max(1, plan.threads // target.warp_size))
            loads = ceil(K / (target.warp_size * largest_divisor_pow2(K, PROLOGUE_VECTOR)))
            f["prologue_loads"] = f["rounds"] * rows * loads
        else:
            # ... each consumer thread its share of the tile's rows, element after element
            # between its MMAs (summed from the staged tiles), in every tile the busiest SM runs
            f["recompute_chain"] = f["rounds"] * ceil(bm * ceil(K / split) / plan.consumers)
        if a_reads_prologue:  # ... before its k loop: A read again
            f["recompute_bytes"] = float(B * cols * M * K * elt)
    _, acc_budget = _budget(target, plan.threads, plan.workers, plan.pingpong)
    f["reg_overflow"] = float(max(0, plan.acc_per_thread * plan.nc - acc_budget))
    if plan.workers == "wgmma_ws":
        f["single_slice"] = 1.0 if bm < 128 else 0.0
        f["multi_slice"] = 1.0 if plan.mi > 1 else 0.0


def prologue_pass(plan, stats_before: bool) -> bool:
    """Whether a fused kernel computes its rows' statistics in a pass before its k loop
    (`emmy.lowering.contraction`, emit_prologue): every worker but wgmma_ws, and wgmma_ws where
    the kernel's `ws_row_stats` is "before" (the A side reads the statistics, or they cannot be
    summed from the staged tiles); wgmma_ws otherwise sums them from the staged tiles."""
    return not plan.producer or stats_before


def _wave_bytes(plan, rows: int, cols: int, k_bytes: int, occ: float, target: Target) -> float:
    """The operand bytes the tiles running at once read (the share of re-read tiles L2 can serve
    depends on these fitting in it, not the whole operands: a tile's A rows and B columns are
    read again by the tiles beside it while they are still in L2). The concurrent tiles
    (`occ` blocks an SM, a looping block's current tile) follow the tile order: along n, a
    wave spans min(cols, W) columns of tiles and ceil(W / cols) rows; with group_m = g, the
    tiles go down a group's g rows first: the full groups' rows, and of the last group as many
    rows as its tiles (at most g)."""
    conc = min(plan.blocks, int(target.sms * occ)) if not plan.persistent else plan.blocks
    conc = max(1, min(conc, rows * cols))
    g = max(1, min(plan.group_m, rows))
    full, rest = divmod(conc, g * cols)
    r = min(rows, g * full + min(g, rest))
    c = cols if full else ceil(conc / g)
    return float((r * plan.bm + c * plan.bn * plan.nc) * k_bytes)


def _looping(f: Features, serial: int, rounds: int, total: int, target: Target) -> None:
    """schedule = persistent or stream_k: at most one block per SM, each looping over its share
    of the work (`total` k-steps of all tiles): the busiest block runs `serial` k-steps over
    `rounds` tiles or pieces of tiles one after another (each fills its pipeline and stores),
    its rounds and waves, and the wave quantization is its k-steps over the average per SM
    (the grid schedule's figure for as many blocks as tiles), not the launch's blocks over the
    SMs (1 for a full machine, whatever the tiles)."""
    f["serial_steps"] = float(serial)
    f["rounds"] = f["waves"] = float(max(1, rounds))
    f["quant"] = max(1.0, serial * target.sms / max(1, total))


def _budget(target: Target, threads: int, workers: str | None = None, pingpong: bool = False) -> tuple[int, int]:
    from emmy.schedule.contraction import register_budget

    return register_budget(target, threads, workers, pingpong)


def _attention(f: Features, plan, target: Target, causal: bool, computed_kv: int) -> None:
    B, D, Sq, Skv = plan.batch, plan.head_dim, plan.seq_q, plan.seq_kv
    bq, bkv = plan.block_q, plan.block_kv
    if plan.persistent:  # a block per SM looping over the query blocks: the grid's rounds of them
        f["rounds"] = f["serial_steps"] = float(ceil(plan.tiles / target.sms))
        _waves(f, plan.tiles, target)
    qb = ceil(Sq / bq)
    kv_steps = ceil(Skv / bkv)
    share = 0.5 + 0.5 / qb if causal else 1.0  # the key blocks a causal query block visits
    longest = kv_steps  # ... and the longest one's
    if causal and plan.window:  # a sliding window: each query block's counted (first_key_block on)
        visited = [plan.key_blocks(b) - plan.first_key_block(b) for b in range(qb)]
        share, longest = sum(visited) / (qb * kv_steps), max(visited)
    f["peak_flops"] = target.tensor_flops if plan.wgmma else _tensor_rate(target, "mma_sync")
    f["flops"] = 4.0 * B * qb * bq * kv_steps * bkv * D * share
    f["intensity"] = bq * bkv / (bq + bkv)
    f["tensor"] = 1.0
    f["tile_area"] = float(bq * bkv)
    # tensor-map copies move whole 64-column slabs of K and V rows (stored_head_dim)
    copied = stored_head_dim(D, plan.wgmma) if plan.tma else D
    f["reread_bytes"] = float(B * (qb - 1) * Skv * 2 * copied * 2 * share)
    f["stages"] = float(plan.stages)
    f["steps"] = float(kv_steps)
    f["softmax_steps"] = f["serial_steps"] * longest  # the longest query block's key blocks, one by one
    if plan.split_kv > 1:  # parts of the key blocks: the launch's critical path against the whole blocks'
        slots = target.sms * int(f["occupancy"])
        whole = replace(plan, split_kv=1)
        f["softmax_steps"] = (ceil(whole.blocks / slots) * longest * plan.critical_path(slots)
                              / whole.critical_path(slots))
        f["workspace_bytes"] += 2.0 * 4 * plan.split_floats  # each part's output rows written, read by the merge
    f["serial_steps"] = 0.0
    f["unstaged"] = 1.0 if plan.stages < 2 else 0.0
    if plan.prep is not None:
        rows = plan.prep[0] * 32 * plan.prep[2]
        f["workspace_bytes"] = 2.0 * B * rows * D * 2
    elif computed_kv:  # fused: every query block computes its key and value rows (in its loop)
        f["recompute_flops"] = RECOMPUTE_FLOPS * B * qb * Skv * D * computed_kv * share
        # ... one row after another on the critical path (each a row reduction and its barriers)
        f["recompute_rows"] = f["rounds"] * Skv * computed_kv * share
    _, acc_budget = _budget(target, plan.threads)
    held = (bq * D + bq * bkv) / plan.threads  # output rows and scores a thread holds (fp32)
    f["reg_overflow"] = float(max(0.0, held - acc_budget))


__all__ = ["MOST", "NAMES", "PER_ROUND", "SUMMED", "Features", "Kernel", "combine", "features", "io_bytes", "kernel_op", "l2_fraction"]
