"""Contractions (matmuls with a fused prologue and epilogue) on tensor cores.

One block computes a `block_m x block_n` tile of every contraction of the loop (one, or several
sharing their A side: gate and up) for one batch index and one `split_k` part of k:

1. prologue (knob `fusion = fused`, `split_k = 1`): the row statistics of the block's rows (the
   loop's prologue reductions, e.g. RMSNorm's sum of squares), one warp per row, 16-byte loads,
   warp shuffles; kept in shared memory (`rs`) for the staging and the epilogue. With
   `fusion = split` or `split_k > 1` a separate kernel `<name>_stats` writes them to a buffer.
2. main loop over k-steps of `block_k`: operand tiles are staged in shared memory, `stages`
   deep, in the swizzled K-major layout of `emmy_core.cuh` (`tile_offset`):
   - an operand that is a plain bf16 load, contiguous along k (or a select between such loads,
     e.g. concatenated weights) is copied with `cp.async` 16 bytes at a time (zero-filled past
     the edges);
   - a computed A side (RMSNorm's `bf16(bf16(x * rstd) * norm_w)`) whose reads are all such bf16
     loads: those tensors' tiles (x: block_m rows, norm_w: one row) are copied raw with cp.async,
     stages deep, and after the step's barrier the A tile is computed from shared memory (the
     loop body's scalar code in f32, rounded to bf16, out-of-range elements zero), then a
     second barrier;
   - any other operand is computed from global loads while staging (16-byte loads issued before
     the tensor-core step, stored to shared memory after it);
   then the block multiplies the tiles: `workers = wgmma` (sm_90a: warpgroups along m, 64-row
   slices, `emmy::wgmma::tile`), `mma_sync` (`emmy::mma::warp_tile`, ldmatrix + mma.sync
   m16n8k16, warps arranged by `emmy.schedule.contraction.warp_grid`) or `thread` (plain FMA).
   `workers = wgmma_ws` (warp-specialized, `specialized_loop`): one more warpgroup only stages
   (cp.async, arriving on a `full` mbarrier per slot when its copies land), the wgmma
   warpgroups only multiply and free slots through `empty` mbarriers. With `copy = tma` the
   operand tiles that are plain 2-D views of a tensor (emmy/lowering/tma.py) are copied by one
   producer thread, one tensor-map copy per tile and 64-element slab, the bytes counted on the
   slot's `full` barrier; with `cluster = 2` block pairs along m each copy half of their common
   B tile and multicast it to both. A computed A side that
   reads one block_m-row tensor (RMSNorm's `w * x`) is copied raw into the A slot and rewritten
   in place by each consumer warpgroup (`InPlaceA`); otherwise the producer loads it a k-step
   ahead into registers and stores it computed. Either way the row statistics are summed from
   those values (`RowStats`), so there is no prologue pass (step 1) over the block's rows.
   When A is a plain copy and the statistics read only its tensor (RMSNorm once loop-hoist-params
   folded the norm weight into B), each consumer warpgroup reads its rows of the A tile,
   read-only, after issuing the step's wgmmas (`a_stats_leaf`, `AStatistics`).
3. epilogue: the loop body's scalar code after the contractions (row scale, residual add,
   SiLU(gate) * up, ...) on the f32 accumulators, then the bf16 stores, predicated at the
   edges. Tensor-core kernels stage through shared memory first (`staged_epilogue`) so each
   thread stores 8 consecutive columns (16 bytes): the accumulators, evaluated there, or, where
   the stores read no tensor, the bf16 results evaluated on the fragments (`stages_results`);
   otherwise two columns per access straight from the fragments. With `split_k > 1` the block
   writes its f32 partial sums to a workspace instead and `<name>_combine` adds the parts and
   runs the epilogue (`combine = kernel`), or the last block of each output tile to finish adds
   the others' parts to its own and runs the epilogue itself (`combine = last_block`,
   last_block_epilogue). With `schedule = stream_k` a block's k-steps run across tile
   boundaries (stream_k_loop): a tile whose steps it shares with other blocks is finished
   the same way by the last of them (stream_k_fixup), a tile wholly its own as usual.

How operand tiles are filled (cp.async copies, computed A sides, the in-place A of wgmma_ws)
lives in emmy/lowering/staging.py.

Kernels and buffers: `<name>_stats` (optional) -> temp `[prologue reductions, batch * M]` f32;
`<name>` -> outputs (or temp workspace `[split_k, contractions, batch, M, N]` f32), its tensor
maps (`copy = tma`) last among its arguments, each bound to the tile op input it views;
`<name>_combine` (split_k > 1) -> outputs. With `combine = last_block`: `<name>` -> workspace
`[split_k, tiles, contractions, block_m * block_n]` f32 (each thread's accumulators, interleaved),
zeroed counters `[2 * tiles]` i32, outputs; with `schedule = stream_k` the same, the workspace
`[2 * blocks, contractions, block_m * block_n]` (a slot for the first and the last tile of each
block's run: the only ones it may share).
"""

from __future__ import annotations

from math import prod

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, IndexType, TensorType, VectorType, bf16, f32, i32, i64
from xdsl.ir import Operation, SSAValue

from emmy.analysis.body import value_tree
from emmy.lowering import Built, In, Launch, Out, Tmp
from emmy.lowering.common import c_ident, decompose, io_args
from emmy.schedule.reduction import largest_divisor_pow2
from emmy.lowering.kb import KB
from emmy.lowering.reduction import reduce_rows
from emmy.lowering.scalar import BodyEmitter
from emmy.lowering.staging import AStatistics, InPlaceA, Leaf, Stager, direct_source, round_up, same_expr
from emmy.lowering.tma import MapOperand, tensor_view
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.loop import AxisOp, LoadOp, ReduceOp, StoreOp
from emmy.schedule.contraction import ContractionPlan
from emmy.tuning.knobs import grouped_tile

STAGE_PAD = 8  # f32 columns of padding per row of a staged epilogue tile (32 bytes)
RESULT_PAD = 8  # bf16 columns of padding per row of a tile of staged results (16 bytes)
EPILOGUE_BARRIER = 8  # named barrier of wgmma_ws's computing warpgroups around the staged epilogue
PERSISTENT_BARRIER = 9  # schedule = persistent: the consumers have read the row statistics of a tile
OWN_EPILOGUE_BARRIER = 10  # + warpgroup: epilogue = staggered, one warpgroup around its own rows
ORDER_BARRIER = 12  # epilogue = staggered: warpgroup 1 stores a tile after warpgroup 0 has


# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------


def build(op, info, plan: ContractionPlan) -> Built:
    """The kernels of a contraction `tile.kernel` (or part) `op` as its plan says."""
    return ContractionBuilder(op, info, plan).build()


def fragment_row(kb: KB, base_row, gq, mi, row_step: int, h) -> SSAValue:
    """The tile row of a thread's accumulator fragment: m16 tile `mi` (row_step rows apart from
    base_row), fragment half `h` (rows gq and gq + 8 of the tile)."""
    return kb.add(kb.add(base_row, kb.mul(mi, row_step)), kb.add(gq, kb.mul(h, 8)))


class ContractionBuilder:
    def __init__(self, op, info, plan: ContractionPlan):
        self.op = op
        self.info = info
        self.g = plan
        self.target = plan.target
        self.name = c_ident(op.properties["sym_name"].data) + plan.suffix
        # tiles lo <= t < hi of the order along n (split_tail's two launches), or every tile
        self.tile_range = plan.tile_range
        self.ext: dict[str, int] = dict(info.axes)
        self.cs = list(info.contractions)
        if not self.cs:
            raise EmmyError(f"tile.kernel @{info.name}: no contraction found")
        self.m_axes = list(info.m_axes)
        self.n_axes = list(info.n_axes)
        self.k_axes = list(info.k_axes)
        self.b_axes = list(info.batch_axes)
        self.M = prod(self.ext[a] for a in self.m_axes)
        self.N = prod(self.ext[a] for a in self.n_axes)
        self.K = prod(self.ext[a] for a in self.k_axes)
        self.B = prod(self.ext[a] for a in self.b_axes) if self.b_axes else 1
        self.k_last = info.k_axis
        self.prologue = list(info.prologue)
        self.stats_kernel = plan.stats_kernel
        top = list(op.regions[0].block.ops)
        self.stores = [o for o in top if isinstance(o, StoreOp)]
        others = [r for r in info.other_reductions]
        if others:
            raise EmmyError(
                f"tile.kernel @{info.name}: reductions other than the contraction and its row prologue are not supported in a contraction kernel"
            )
        # chunk: elements per staged access along k (8 = 16 bytes of bf16)
        self.chunk = largest_divisor_pow2(self.ext[self.k_last], 8)
        if self.g.bk % self.chunk:
            self.chunk = largest_divisor_pow2(self.g.bk, self.chunk)
        self._maps: list[MapOperand] | None = None  # tma_operands()
        self._stages_results: bool | None = None  # stages_results()
        self.map_args: list[SSAValue] = []  # their kernel arguments (build_main)
        self.counters: SSAValue | None = None  # combine = last_block: the per-tile counters (build_main)
        # fragments(): the row of each wgmma fragment -> its slot among the thread's rows
        self._fragment_slots: dict[SSAValue, SSAValue] = {}

    # -- kernels ------------------------------------------------------------------------------------
    def build(self) -> Built:
        if self.g.split_tail is not None:
            return self.build_with_tail()
        types, names, refs = io_args(self.op)
        built = Built()
        n_in = len(self.op.operands)
        stats_ref = None
        if self.stats_kernel:
            built.temps.append(TensorType(f32, [len(self.prologue), self.B * self.M]))
            stats_ref = Tmp(len(built.temps) - 1)
            fn = self.build_stats(types[:n_in], names[:n_in])
            built.funcs.append(fn)
            built.launches.append(Launch(fn.sym_name.data, (*[In(i) for i in range(n_in)], stats_ref)))
        ws_ref = counters_ref = None
        if self.g.ticketed:
            # last_block: per (part, tile, contraction); stream_k: per (block, first or last run,
            # contraction); each thread's accumulators, interleaved (last_block_epilogue)
            slots = [2 * self.stream_k_plan[2]] if self.g.stream_k else [self.g.split, self.tiles()]
            built.temps.append(TensorType(f32, [*slots, self.g.nc, self.g.bm * self.g.bn]))
            ws_ref = Tmp(len(built.temps) - 1)
            built.temps.append(TensorType(i32, [2 * self.tiles()]))
            counters_ref = Tmp(len(built.temps) - 1)
            built.zeroed.add(counters_ref.index)
        elif self.g.split > 1:
            built.temps.append(TensorType(f32, [self.g.split, self.g.nc, self.B, self.M, self.N]))
            ws_ref = Tmp(len(built.temps) - 1)
        main = self.build_main(types, names, stats=stats_ref is not None, workspace=ws_ref is not None)
        built.funcs.append(main)
        args: list = [In(i) for i in range(n_in)]
        if stats_ref is not None:
            args.append(stats_ref)
        if ws_ref is not None:
            args.append(ws_ref)
        if counters_ref is not None:
            args.append(counters_ref)
        if not self.g.combine_kernel:
            args += [r for r in refs if isinstance(r, Out)]
        args += [In(m.operand) for m in self.tma_operands()]
        built.launches.append(Launch(main.sym_name.data, tuple(args)))
        if self.g.combine_kernel:
            comb = self.build_combine(types, names, stats=stats_ref is not None)
            built.funcs.append(comb)
            cargs: list = [In(i) for i in range(n_in)]
            if stats_ref is not None:
                cargs.append(stats_ref)
            cargs.append(ws_ref)
            cargs += [r for r in refs if isinstance(r, Out)]
            built.launches.append(Launch(comb.sym_name.data, tuple(cargs)))
        return built

    def build_with_tail(self) -> Built:
        """split_tail = s: the whole waves of tiles as one launch with a tile per block, then
        the tiles of the last, partial wave as a launch of their own (`<name>_tail`) with
        their k range split s ways, the last block of each tile adding the parts
        (combine = last_block). Every multiprocessor then has work till the end."""
        head_plan, tail_plan = self.g.split_tail
        head = ContractionBuilder(self.op, self.info, head_plan).build()
        tail = ContractionBuilder(self.op, self.info, tail_plan).build()
        # With a row prologue both builds begin with the same statistics kernel (fusion = split,
        # legality), whose buffer is their first temporary: the tail uses the head's.
        shared = 1 if self.prologue else 0
        shift = len(head.temps) - shared

        def moved(arg):
            if not isinstance(arg, Tmp):
                return arg
            return Tmp(arg.index) if arg.index < shared else Tmp(arg.index + shift)

        return Built(
            funcs=head.funcs + tail.funcs[shared:],
            launches=head.launches + [Launch(la.kernel, tuple(moved(a) for a in la.args)) for la in tail.launches[shared:]],
            temps=head.temps + tail.temps[shared:],
            zeroed=head.zeroed | {i + shift for i in tail.zeroed},
        )

    # -- shared helpers -------------------------------------------------------------------------------
    def all_tiles(self) -> int:
        """Output tiles of the whole grid (every batch index)."""
        return self.g.all_tiles

    @property
    def stream_k_plan(self) -> tuple[int, int, int, int, int]:
        """schedule = stream_k: the plan's (tiles, k-steps, blocks, most blocks sharing a tile, whole tiles)."""
        return self.g.stream_k_plan

    def tiles(self) -> int:
        """Output tiles this launch computes (its tile range, or all), one counter pair each with
        last_block."""
        return self.g.tiles

    def inside(self, kb: KB, g_index, extent: int, tile: int) -> SSAValue | None:
        """g_index < extent, for an index `origin + r` with origin a multiple of `tile` and
        r < tile; None (always true) when the tiles divide the extent."""
        return None if extent % tile == 0 else kb.lt(g_index, extent)

    def clamp(self, kb: KB, g_index, hi: int, extent: int, tile: int) -> SSAValue:
        """min(g_index, hi), or g_index itself when the tiles divide the extent."""
        return g_index if extent % tile == 0 else kb.min(g_index, hi)

    def _row_coords(self, kb: KB, row, batch) -> dict:
        c = decompose(kb, row, self.m_axes, self.ext) if self.m_axes else {}
        if self.b_axes:
            c.update(decompose(kb, batch, self.b_axes, self.ext))
        return c

    def _col_coords(self, kb: KB, col) -> dict:
        return decompose(kb, col, self.n_axes, self.ext) if self.n_axes else {}

    def _k_coords(self, kb: KB, k) -> dict:
        return decompose(kb, k, self.k_axes, self.ext)

    # -- stats kernel ---------------------------------------------------------------------------------
    def build_stats(self, in_types, in_names) -> K.KernelFuncOp:
        rows = self.B * self.M
        warps = 8
        blocks = -(-rows // warps)
        kb = KB.new_func(
            f"{self.name}_stats", [*in_types, K.PtrType(f32)], (blocks, 1, 1), (warps * 32, 1, 1), 16,
            arg_names=[*in_names, "stats"],
        )
        args = kb.func.body.block.args
        block = self.op.regions[0].block
        ptrs = {a: args[i] for i, a in enumerate(block.args)}
        stats = args[len(block.args)]
        em = BodyEmitter(kb, self.op, ptrs, [])
        scratch = kb.shared(f32, 4, 0, 16, "scratch")
        tid = kb.thread_id()
        lane = kb.rem(tid, 32)
        row = kb.add(kb.mul(kb.block_id(), warps), kb.div(tid, 32))
        mask = None if rows % warps == 0 else kb.lt(row, rows)
        batch = kb.div(row, self.M) if self.b_axes else 0
        r_in = kb.rem(row, self.M) if self.b_axes else row
        scope = em.scope(self._row_coords(kb, r_in, batch), mask=mask)
        res = reduce_rows(kb, em, scope, self.prologue, lane, 32, 8, self.k_last, scratch)
        ok = kb.and_(kb.cmp("eq", lane, 0), mask)
        for p, r in enumerate(self.prologue):
            kb.store(kb.to_f32(res[r.result][0]), stats, kb.add(kb.mul(p, rows), row), ok)
        return kb.finish()

    # -- main kernel ------------------------------------------------------------------------------------
    def smem_layout(self, stats_in_smem: bool, raw: list | None = None) -> tuple[int, int, int, int]:
        """(A tile elements per stage, B tile elements per stage, stats offset, total bytes).
        Raw copies (`raw`: (load, rows) pairs) follow the B tiles, then the row statistics."""
        g = self.g
        a_elems = g.bm * g.bk
        b_elems = g.bn * g.bk
        tiles = g.stages * (a_elems + g.nc * b_elems) * 2
        for _, rows in raw or ():
            tiles += round_up(g.stages * rows * g.bk * 2, 128)
        stats_off = tiles
        stats_bytes = len(self.prologue) * g.bm * 4 if stats_in_smem else 0
        total = tiles + stats_bytes
        if g.producer:  # full and empty mbarriers per slot, 8 bytes each
            total = self.bars_offset(stats_off, stats_in_smem) + 2 * g.stages * 8
        if g.persistent:  # the epilogue's own staging tiles, when they fit after the barriers
            off, room = self.staging_room(self.bars_offset(stats_off, stats_in_smem))
            width = self.staging_width(room, None)
            if width is not None:
                total = off + self.staging_bytes(width)
        if g.wgmma:
            total += 1024  # the runtime rounds the shared-memory base up to 1024 bytes
        return a_elems, b_elems, stats_off, total

    def staging_room(self, bars_off: int) -> tuple[int, int]:
        """schedule = persistent: the producer fills the k loop's slots with the next tile while
        the consumers run the epilogue, so a staged epilogue gets shared memory of its own,
        after the mbarriers: (its offset, the bytes a block has left there)."""
        off = round_up(bars_off + 2 * self.g.stages * 8, 16)
        return off, self.target.smem_per_block - 1024 - off

    def staging_bytes(self, width: int | None = None) -> int:
        """Shared memory of the staged epilogue's tiles, `width` columns (block_n) each: f32
        accumulators, or the bf16 results of each store (stages_results)."""
        g = self.g
        if self.stages_results():
            return len(self.stores) * g.bm * ((width or g.bn) + RESULT_PAD) * 2
        return g.nc * g.bm * ((width or g.bn) + STAGE_PAD) * 4

    def stages_results(self) -> bool:
        """Whether the staged epilogue evaluates the loop body on the accumulator fragments and
        stages its bf16 results rather than the f32 accumulators: every store is bf16 and its
        value reads nothing but the contractions, the row statistics, axes and constants (no
        tensor, so nothing to gather in the fragments' layout; RMSNorm's row scale). Half the
        shared-memory traffic, and the rounding at the same point."""
        if self._stages_results is None:
            self._stages_results = bool(self.stores) and all(self._register_only(st) for st in self.stores)
        return self._stages_results

    def _register_only(self, store: StoreOp) -> bool:
        t = self.op.results[store.output_index].type
        if not isinstance(t, TensorType) or not isinstance(t.element_type, BFloat16Type):
            return False
        given = {c.result for c in self.cs} | {r.result for r in self.prologue}
        for v in value_tree([store.value], stop=given):
            op = v.owner
            if not isinstance(op, Operation) or isinstance(op, LoadOp) or op.regions:
                return False
        return True

    def bars_offset(self, stats_off: int, stats_in_smem: bool) -> int:
        """Where wgmma_ws's mbarriers start: after the row statistics, 8-byte aligned."""
        return round_up(stats_off + (len(self.prologue) * self.g.bm * 4 if stats_in_smem else 0), 8)

    def build_main(self, types, names, *, stats: bool, workspace: bool) -> K.KernelFuncOp:
        g = self.g
        n_in = len(self.op.operands)
        arg_types = list(types[:n_in])
        arg_names = list(names[:n_in])
        if stats:
            arg_types.append(K.PtrType(f32))
            arg_names.append("stats")
        if workspace:
            arg_types.append(K.PtrType(f32))
            arg_names.append("ws")
        if g.ticketed:
            arg_types.append(K.PtrType(i32))
            arg_names.append("counters")
        if not g.combine_kernel:
            arg_types += types[n_in:]
            arg_names += names[n_in:]
        maps = self.tma_operands()
        arg_types += [m.view for m in maps]
        arg_names += [f"tma_{m.side}{m.index if m.side == 'b' and g.nc > 1 else ''}" for m in maps]
        stats_in_smem = bool(self.prologue) and not stats
        a_loads = self.raw_a_loads()
        raw = None if g.producer else a_loads
        if raw is not None and self.smem_layout(stats_in_smem, raw)[3] > self.target.smem_per_block:
            raw = None  # no room for the raw copies: compute A from global loads instead
        a_elems, b_elems, stats_off, smem = self.smem_layout(stats_in_smem, raw)
        if smem > self.target.smem_per_block:
            raise EmmyError(
                f"tile.kernel @{self.info.name}: {smem} bytes of shared memory exceed the {self.target.smem_per_block} a block may use on {self.target.name}"
            )
        grid = g.grid
        if grid[1] > 65535 or grid[2] > 65535:
            raise EmmyError(f"tile.kernel @{self.info.name}: grid {grid} is too large")
        if grid[1] % g.cluster:
            raise EmmyError(
                f"tile.kernel @{self.info.name}: cluster={g.cluster}: the {grid[1]} row tiles do not pair up"
            )
        kb = KB.new_func(
            self.name, arg_types, grid, (g.threads, 1, 1), smem, self.min_blocks(smem), arg_names=arg_names,
            cluster=(1, g.cluster, 1) if g.cluster > 1 else None,
        )
        args = kb.func.body.block.args
        block = self.op.regions[0].block
        ptrs = {a: args[i] for i, a in enumerate(block.args)}
        pos = n_in
        stats_ptr = ws_ptr = None
        if stats:
            stats_ptr = args[pos]
            pos += 1
        n_args = len(args) - len(maps)
        self.counters = None
        if workspace:
            ws_ptr = args[pos]
            pos += 1
        if g.ticketed:
            self.counters = args[pos]
            pos += 1
        outs = [] if g.combine_kernel else list(args[pos:n_args])
        self.map_args = list(args[n_args:])
        em = BodyEmitter(kb, self.op, ptrs, outs)
        # wgmma reads tiles through the swizzle of absolute addresses: 8-row groups aligned
        align_a = 1024 if g.wgmma else 128
        align_b = 8 * 2 * g.slab if g.wgmma else 128
        sa = kb.shared(bf16, g.stages * a_elems, 0, align_a, "sA")
        if g.joint:  # slot s: the nc B tiles one after the other
            sb = kb.shared(bf16, g.stages * g.nc * b_elems, g.stages * a_elems * 2, align_b, "sB")
            sbs = [kb.ptr_add(sb, c * b_elems) for c in range(g.nc)]
        else:
            sbs = [
                kb.shared(
                    bf16, g.stages * b_elems, g.stages * (a_elems + c * b_elems) * 2,
                    min(align_b, _pow2_dividing(g.stages * (a_elems + c * b_elems) * 2, 1024)),
                    f"sB{c}" if g.nc > 1 else "sB",
                )
                for c in range(g.nc)
            ]
        raw_bufs = []
        off = g.stages * (a_elems + g.nc * b_elems) * 2
        for i, (load, rows) in enumerate(raw or ()):
            raw_bufs.append((load, rows, kb.shared(bf16, g.stages * rows * g.bk, off, 128, f"raw{i}")))
            off += round_up(g.stages * rows * g.bk * 2, 128)
        rs = kb.shared(f32, len(self.prologue) * g.bm, stats_off, 16, "rs") if stats_in_smem else None
        tid = kb.thread_id()

        # statistics of the rows of the tile at row m0 of batch index `batch`
        def stat_at(m0, batch):
            def stat(p: int, r_local) -> SSAValue:
                if rs is not None:
                    return kb.load(rs, kb.add(kb.mul(p, g.bm), r_local))
                row = kb.min(kb.add(m0, r_local), self.M - 1)
                return kb.load(stats_ptr, kb.add(kb.mul(p, self.B * self.M), kb.add(kb.mul(batch, self.M), row)))

            return stat

        def early_stat_at(m0, batch):
            """stat_at, with the loads of a statistics kernel's rows issued now (before the k
            loop) where the fragment layout allows and the epilogue reads them (not into the
            split-k workspace): the epilogue then does not start with a round trip to memory."""
            stat = stat_at(m0, batch)
            if rs is None and stats_ptr is not None and ws_ptr is None and self.prologue and g.wgmma:
                return self.preload_stats(kb, tid, stat)
            return stat

        # wgmma_ws with a computed A side: the row statistics are summed from the tiles loaded
        # anyway (by the producer, or by the consumers transforming A in place), instead of a
        # pass over the block's rows before the k loop
        inplace = self.inplace_a_leaf(a_loads) if g.producer else None
        producer_stats = g.producer and rs is not None and self.producer_stats_ok(a_loads)
        stats_leaf = self.a_stats_leaf() if g.producer and rs is not None and inplace is None else None
        producer_stats = producer_stats or stats_leaf is not None

        if g.persistent:
            if rs is not None and not producer_stats:
                raise EmmyError(
                    f"tile.kernel @{self.info.name}: schedule=persistent cannot compute the A side from row statistics summed before the k loop; use schedule=grid"
                )
            accs = self.accumulators(kb)
            bars_off = self.bars_offset(stats_off, stats_in_smem)
            bars = kb.shared(i64, 2 * g.stages, bars_off, 8, "bars")
            self.specialized_loop(
                kb, em, tid, None, stat_at, sa, sbs, bars, accs, a_elems, g.b_stride, ws_ptr,
                self.staging_room(bars_off), rs if producer_stats else None, inplace, a_loads, stats_leaf,
                early_stat_at,
            )
            return kb.finish()
        m_tile, n_tile = self.grid_tile(kb)
        n0 = kb.mul(n_tile, g.bn)
        m0 = kb.mul(m_tile, g.bm)
        z = kb.block_id("z")
        batch = kb.div(z, g.split) if self.b_axes else 0
        part = kb.rem(z, g.split) if g.split > 1 else 0
        n0.name_hint, m0.name_hint = "n0", "m0"
        stat = stat_at(m0, batch) if g.producer else early_stat_at(m0, batch)

        if rs is not None and not producer_stats:
            self.emit_prologue(kb, em, rs, tid, m0, batch)
            kb.barrier()

        # the k range of this block
        kt_total = -(-self.K // g.bk)
        per = -(-kt_total // g.split)
        kt0 = kb.mul(part, per)
        if g.split == 1:
            kt1 = kt_total
        elif kt_total % g.split == 0:  # (legality's rule) every part has `per` k-steps
            kt1 = kb.add(kt0, per)
        else:
            kt1 = kb.min(kb.add(kt0, per), kt_total)
        nacc = g.acc_per_thread
        accs = self.accumulators(kb)
        zero = kb.fconst(0.0)
        with kb.for_(0, nacc, 1, unroll=0, name="i") as i:
            for acc in accs:
                kb.store(zero, acc, i)

        if g.producer:
            bars = kb.shared(i64, 2 * g.stages, self.bars_offset(stats_off, stats_in_smem), 8, "bars")
            self.specialized_loop(
                kb, em, tid, (m0, n0, batch, part, kt0, kt1), stat_at, sa, sbs, bars, accs, a_elems, g.b_stride,
                ws_ptr, (0, stats_off), rs if producer_stats else None, inplace, a_loads, stats_leaf,
                early_stat_at,
            )
            return kb.finish()
        stager = Stager(self, kb, em, tid, m0, n0, batch, stat, raw_bufs)
        S = g.stages
        if S >= 2:
            # lookahead L: k-steps in flight ahead of the one computed. wgmma with 3+ stages keeps
            # one group of wgmmas in flight (wait<1>), so a slot is refilled two steps after use.
            overlap = g.wgmma and S >= 3
            L = S - 2 if overlap else S - 1
            with kb.for_(0, L, 1, unroll=0, name="s") as s:
                kt = kb.add(kt0, s)
                pred = kb.lt(kt, kt1)
                stager.stage(kt, s, sa, sbs, pred, a_elems, g.b_stride, deferred=False)
                kb.call("emmy::cp_async_commit")
            with kb.for_(kt0, kt1, 1, name="kt") as kt:
                kb.call(f"emmy::cp_async_wait<{L - 1}>")
                if g.wgmma:
                    kb.call("emmy::fence_proxy_async")
                kb.barrier()
                nk = kb.add(kt, L)
                pred = kb.lt(nk, kt1)
                slot_n = kb.rem(kb.sub(nk, kt0), S)
                pending = stager.stage(nk, slot_n, sa, sbs, pred, a_elems, g.b_stride, deferred=True)
                kb.call("emmy::cp_async_commit")
                slot = kb.rem(kb.sub(kt, kt0), S)
                if raw_bufs:
                    stager.compute_a(kt, slot, sa, a_elems)
                    if g.wgmma:
                        kb.call("emmy::fence_proxy_async")
                    kb.barrier()
                self.compute(kb, tid, sa, sbs, slot, a_elems, g.b_stride, accs, wgmma_pending=1 if overlap else 0)
                stager.finish(pending)
            if overlap:
                kb.call("emmy::wgmma::wait<0>")
        else:
            with kb.for_(kt0, kt1, 1, name="kt") as kt:
                stager.stage(kt, 0, sa, sbs, kb.true(), a_elems, g.b_stride, deferred=False)
                kb.call("emmy::cp_async_commit")
                kb.call("emmy::cp_async_wait<0>")
                if raw_bufs:
                    kb.barrier()
                    stager.compute_a(kt, 0, sa, a_elems)
                if g.wgmma:
                    kb.call("emmy::fence_proxy_async")
                kb.barrier()
                self.compute(kb, tid, sa, sbs, 0, a_elems, g.b_stride, accs)
                kb.barrier()
        kb.call("emmy::cp_async_wait<0>")

        self.epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, ws_ptr, (0, stats_off), kb.barrier)
        return kb.finish()

    def preload_stats(self, kb: KB, tid, stat):
        """Load now, into registers, the row statistics of the rows this thread's wgmma
        fragments hold (2 per 64-row slice: fragment rows g and g + 8 of its warp), and return a
        stat(p, r_local) that reads them back for the epilogue, whose r_local is one of those rows
        (see fragments(); the index folds to a constant once its loops are unrolled)."""
        g = self.g
        per = 2 * g.mi
        pre = kb.local(f32, len(self.prologue) * per, "row_stats")
        gq = kb.div(kb.rem(tid, 32), 4)
        base_row = self.wgmma_base_row(kb, tid)
        for p in range(len(self.prologue)):
            with kb.for_(0, g.mi, 1, unroll=0, name="mi") as mi:
                with kb.for_(0, 2, 1, unroll=0, name="h") as h:
                    r_local = fragment_row(kb, base_row, gq, mi, 64, h)
                    kb.store(stat(p, r_local), pre, kb.add(p * per, kb.add(kb.mul(mi, 2), h)))

        def early(p: int, r_local) -> SSAValue:
            slot = self._fragment_slots.get(r_local)
            if slot is None:  # not a fragment row (the f32 staged epilogue's rows): load it now
                return stat(p, r_local)
            return kb.load(pre, kb.add(p * per, slot))

        return early

    def accumulators(self, kb: KB) -> list:
        """The accumulator array of each contraction (views into one array with g.joint)."""
        g = self.g
        if g.joint:
            acc = kb.local(f32, g.nc * g.acc_per_thread, "acc")
            return [kb.ptr_add(acc, c * g.acc_per_thread) for c in range(g.nc)]
        return [kb.local(f32, g.acc_per_thread, f"acc{c}" if g.nc > 1 else "acc") for c in range(g.nc)]

    def tma_operands(self) -> list[MapOperand]:
        """copy = tma: the operand tiles the producer copies with tensor maps (see
        emmy/lowering/tma.py): the A tile when A is a plain copy or the raw tile of an in-place
        A, and each plain B tile; the others stay on cp.async. Empty otherwise."""
        if self._maps is None:
            self._maps = self._find_tma_operands()
        return self._maps

    def _find_tma_operands(self) -> list[MapOperand]:
        if not self.g.tma or self.b_axes or len(self.k_axes) != 1 or self.chunk != 8:
            return []
        if len(self.m_axes) != 1 or len(self.n_axes) != 1:
            return []
        g = self.g
        em = BodyEmitter(None, self.op, {}, [])  # analysis only
        kset = frozenset(self.k_axes)
        k, (m_axis,), (n_axis,) = self.k_last, self.m_axes, self.n_axes
        out = []
        a_load = self.inplace_a_leaf(self.raw_a_loads())
        if a_load is None and self.cs[0].a_value is not None:
            src = direct_source(em, self.cs[0].a_value, kset, k)
            a_load = src.load if isinstance(src, Leaf) else None
        if a_load is not None:
            view = tensor_view(a_load, m_axis, k, self.ext, g.bm, g.slab)
            if view is not None:
                out.append(MapOperand("a", 0, a_load, view, a_load.tensor.index))
        for c, contraction in enumerate(self.cs):
            if contraction.b_value is None:
                continue
            src = direct_source(em, contraction.b_value, kset, k)
            if isinstance(src, Leaf):
                view = tensor_view(src.load, n_axis, k, self.ext, g.bn // g.cluster, g.slab)
                if view is not None:
                    out.append(MapOperand("b", c, src.load, view, src.load.tensor.index))
        return out

    def tma_issue(self, kb: KB, kt, slot, m0, n0, bar, sa, sbs, a_elems) -> None:
        """One producer thread: announce the bytes of k-step `kt`'s tensor-map copies on the
        slot's `full` barrier, then issue them (one per operand tile and 64-element slab)."""
        g = self.g
        maps = self.tma_operands()
        # the slot's bytes, whoever copies them (with clusters the peers multicast B slices)
        nbytes = sum((g.bm if m.side == "a" else g.bn) * g.bk * 2 for m in maps)
        kb.call("emmy::mbar_arrive_expect_tx", [bar, kb.idx(nbytes)])
        rank = kb.call("emmy::cluster_rank", [], IndexType()) if g.cluster > 1 else None
        for m, map_arg in zip(maps, self.map_args):
            if m.side == "a":
                base, rows, row0 = kb.ptr_add(sa, kb.mul(slot, a_elems)), g.bm, m0
            else:
                base, rows, row0 = kb.ptr_add(sbs[m.index], kb.mul(slot, g.b_stride)), g.bn, n0
            part = None
            if m.side == "b" and rank is not None:  # this block's slice of the shared B tile
                part = g.bn // g.cluster
                row0 = kb.add(row0, kb.mul(rank, part))
                base = kb.ptr_add(base, kb.mul(rank, part * g.slab))
            for s_ in range(g.bk // g.slab):
                col = kb.add(kb.mul(kt, g.bk), s_ * g.slab)
                dst = kb.ptr_add(base, s_ * rows * g.slab)
                if part is None:
                    kb.call("emmy::tma_load_2d", [dst, map_arg, col, row0, bar])
                else:
                    mask = kb.idx((1 << g.cluster) - 1)
                    kb.call("emmy::tma_load_2d_multicast", [dst, map_arg, col, row0, bar, mask])

    def inplace_a_leaf(self, a_loads: list | None) -> LoadOp | None:
        """The one block_m-row tensor a computed A side reads, when A can be computed in place:
        the producer copies that tensor's tile into the A slot (cp.async) and each consumer
        warpgroup rewrites its own rows of it (other tensors A reads have one row, e.g. a norm
        weight, and are read through L1); A must not use the row statistics. None otherwise.
        `a_loads`: raw_a_loads()."""
        big = [ld for ld, rows in a_loads or () if rows > 1]
        if len(big) != 1 or self.info.a_reads_prologue:
            return None
        return big[0]

    def a_stats_leaf(self) -> LoadOp | None:
        """When A is a plain copy of one tensor and every prologue reduction is a sum or max over
        exactly the contraction's k axes of that tensor's elements (RMSNorm's sum of squares
        once its weight is folded into B, see loop-hoist-params): that load. The consumer
        warpgroups then sum the row statistics from the A tiles in shared memory, read-only,
        while their wgmmas run. None otherwise."""
        c0 = self.cs[0]
        value = c0.a_value
        if value is None or self.chunk != 8 or not self.prologue or self.info.a_reads_prologue:
            return None
        if not all(r.kind_name in ("sum", "max") and set(r.axis_names) == set(self.k_axes) for r in self.prologue):
            return None
        em = BodyEmitter(None, self.op, {}, [])  # analysis only
        src = direct_source(em, value, frozenset(self.k_axes), self.k_last)
        if not isinstance(src, Leaf):
            return None
        loads = [o for r in self.prologue for o in r.walk() if isinstance(o, LoadOp)]
        if not loads or not all(same_expr(o.result, src.load.result) for o in loads):
            return None
        return src.load

    def producer_stats_ok(self, a_loads: list | None) -> bool:
        """Whether the row statistics can be summed while staging A: each prologue reduction is a
        sum or max over exactly the contraction's k axes, A is computed from prefetched
        block_m-row tensors (`a_loads`: raw_a_loads()), and A itself does not use the statistics."""
        if not any(rows > 1 for _, rows in a_loads or ()):
            return False
        if self.info.a_reads_prologue:
            return False
        return all(
            r.kind_name in ("sum", "max") and set(r.axis_names) == set(self.k_axes) for r in self.prologue
        )

    def specialized_loop(self, kb, em, tid, origin, stat_at, sa, sbs, bars, accs, a_elems, b_elems, ws_ptr, room, rs=None, inplace=None, a_loads=None, stats_leaf=None, consumer_stat_at=None) -> None:
        """`workers = wgmma_ws`: the last warpgroup stages k-steps into the slots, the others
        multiply and run the epilogue; per slot a `full` and an `empty` mbarrier hand the slot
        back and forth (emmy_core.cuh), so neither side waits on a block-wide barrier.

        Each producer thread arrives on a slot's `full` barrier twice: when its cp.async copies
        of the slot land (the hardware arrives; the thread goes on) and after its own stores of
        a computed A tile. So the producer runs up to `stages` k-steps ahead of the consumers,
        and a computed A side is loaded one k-step before it is computed. A consumer keeps one
        group of wgmmas in flight and frees slot j - 1 once step j's group is issued and step
        j - 1's has completed.

        With `inplace` (the tensor a computed A side reads, see inplace_a_leaf) the producer
        only copies: that tensor's tile goes into the A slot, and each consumer warpgroup
        computes A over its own rows in place (and sums the row statistics into `rs`) while its
        previous wgmma group runs. With `stats_leaf` (A is a plain copy, see a_stats_leaf) each
        consumer warpgroup reads its rows of the A tile after issuing the step's wgmmas and sums
        the row statistics into `rs`.

        `origin`: (m0, n0, batch, part, kt0, kt1) of the block's one tile, or None with
        schedule = persistent, where both sides loop over the tiles (tile_loop) and the k-steps
        count on across tiles: the producer stages the next tile's first steps while the
        consumers run the epilogue of the last one, which then frees its last slot too."""
        g = self.g
        S = g.stages
        consumers = g.consumers
        consumer_rs, rs = (rs, None) if inplace is not None or stats_leaf is not None else (None, rs)

        def full(slot):
            return kb.ptr_add(bars, slot)

        def empty(slot):
            return kb.ptr_add(bars, kb.add(slot, S))

        maps = self.tma_operands()
        # every operand through tensor maps: one producer thread does all the staging
        tma_only = len(maps) == 1 + len(self.cs)
        arrivals = (0 if tma_only else 2 * 128) + (1 if maps else 0)
        # a slot is free once every consumer thread (with clusters: every consumer warp of
        # every block of the cluster, whose B slices it also receives) has released it
        releases = consumers if g.cluster == 1 else g.cluster * consumers // 32
        with kb.if_(kb.cmp("eq", tid, 0)):
            for s_ in range(S):
                kb.call("emmy::mbar_init", [full(kb.idx(s_)), kb.idx(arrivals)])
                kb.call("emmy::mbar_init", [empty(kb.idx(s_)), kb.idx(releases)])
            if g.cluster > 1:
                kb.call("emmy::fence_mbarrier_init")
        if g.cluster > 1:
            kb.call("emmy::cluster_sync")
        else:
            kb.barrier()

        def release(slot):
            if g.cluster > 1:
                kb.call(f"emmy::cluster_arrive<{g.cluster}>", [empty(slot)])
            else:
                kb.call("emmy::mbar_arrive", [empty(slot)])
        with kb.if_(kb.cmp("sge", tid, consumers)):
            ptid = kb.sub(tid, consumers)
            first = kb.cmp("eq", ptid, 0)
            if maps:
                with kb.if_(first):
                    for map_arg in self.map_args:
                        kb.call("emmy::tma_prefetch", [map_arg])
            if tma_only and g.cluster > 1:  # idle till the end: leave rather than wait there
                kb.call("emmy::exit_unless", [first])

            def produce_tma(m0, n0, batch, part, kt0, kt1, base, later, more, run=None):
                with kb.if_(first):
                    with kb.for_(kt0, kt1, 1, name="kt") as kt:
                        j = kb.add(base, kb.sub(kt, kt0))
                        slot = kb.rem(j, S)
                        kb.call("emmy::mbar_wait", [empty(slot), kb.xor(kb.rem(kb.div(j, S), 2), 1)])
                        self.tma_issue(kb, kt, slot, m0, n0, full(slot), sa, sbs, a_elems)

            def produce(m0, n0, batch, part, kt0, kt1, base, later, more, run=None):
                stat = stat_at(m0, batch)
                # tensors with block_m rows are prefetched; one-row ones (a norm weight) stay in L1
                leaves = [] if inplace is not None else [(ld, rows) for ld, rows in a_loads or () if rows > 1]
                stager = Stager(
                    self, kb, em, ptid, m0, n0, batch, stat, (), threads=128, leaves=leaves, a_copy=inplace,
                    skip={(m.side, m.index) for m in maps},
                )
                if stager.leaves:  # a computed A side: its loads run one k-step ahead
                    cur, nxt = stager.a_registers(), stager.a_registers()
                    stager.prefetch_a(cur, kt0, kb.lt(kt0, kt1))
                if rs is not None:
                    stager.start_stats()
                with kb.for_(kt0, kt1, 1, name="kt") as kt:
                    j = kb.add(base, kb.sub(kt, kt0))
                    slot = kb.rem(j, S)
                    kb.call("emmy::mbar_wait", [empty(slot), kb.xor(kb.rem(kb.div(j, S), 2), 1)])
                    if maps:
                        with kb.if_(first):
                            self.tma_issue(kb, kt, slot, m0, n0, full(slot), sa, sbs, a_elems)
                    stager.stage(kt, slot, sa, sbs, kb.true(), a_elems, b_elems, deferred=False)
                    kb.call("emmy::cp_async_mbar_arrive", [full(slot)])
                    if stager.leaves:
                        stager.prefetch_a(nxt, kb.add(kt, 1), kb.lt(kb.add(kt, 1), kt1))
                        stager.store_a(cur, slot, sa, a_elems, kt, kb.true())
                        stager.copy_registers(cur, nxt)
                    kb.call("emmy::fence_proxy_async")
                    kb.call("emmy::mbar_arrive", [full(slot)])
                if rs is not None:
                    if later is not None:  # the consumers are done reading rs for the last tile
                        with kb.if_(later):
                            kb.call(f"emmy::named_barrier<{g.threads}>", [kb.idx(PERSISTENT_BARRIER)])
                    stager.finish_stats(rs)
                    kb.call(f"emmy::named_barrier<{g.threads}>", [kb.idx(1)])

            if tma_only:
                self.tile_loop(kb, origin, produce_tma)
            else:
                self.tile_loop(kb, origin, produce)
                kb.call("emmy::cp_async_wait<0>")
        with kb.if_(kb.lt(tid, consumers)):

            def consume(m0, n0, batch, part, kt0, kt1, base, later, more, run=None):
                stat = (consumer_stat_at or stat_at)(m0, batch)
                if g.persistent:
                    zero = kb.fconst(0.0)
                    with kb.for_(0, g.acc_per_thread, 1, unroll=0, name="i") as i:
                        for acc in accs:
                            kb.store(zero, acc, i)
                transform = reader = None
                if inplace is not None:
                    transform = InPlaceA(self, kb, em, tid, m0, batch, inplace, consumer_rs)
                if stats_leaf is not None:
                    reader = AStatistics(self, kb, em, tid, m0, batch, stats_leaf, consumer_rs)
                with kb.for_(kt0, kt1, 1, name="kt") as kt:
                    i = kb.sub(kt, kt0)
                    j = kb.add(base, i)
                    slot = kb.rem(j, S)
                    kb.call("emmy::mbar_wait", [full(slot), kb.rem(kb.div(j, S), 2)])
                    if transform is not None:
                        transform.step(sa, slot, a_elems, kt)
                    elif not tma_only:
                        kb.call("emmy::fence_proxy_async")  # the copies landed through the generic proxy
                    during = (lambda: reader.step(sa, slot, a_elems, kt)) if reader is not None else None
                    self.compute(kb, tid, sa, sbs, slot, a_elems, b_elems, accs, wgmma_pending=1, during=during)
                    with kb.if_(kb.cmp("sgt", i, 0)):
                        release(kb.rem(kb.add(j, S - 1), S))
                kb.call("emmy::wgmma::wait<0>")
                if g.persistent:  # the tile's last slot
                    release(kb.rem(kb.add(base, kb.sub(kb.sub(kt1, kt0), 1)), S))
                if rs is not None:  # the producer's row statistics
                    kb.call(f"emmy::named_barrier<{g.threads}>", [kb.idx(1)])
                for stats in (transform, reader):
                    if stats is not None and consumer_rs is not None:
                        if g.persistent:  # the warpgroup is done reading rs for the last tile
                            kb.call("emmy::named_barrier<128>", [kb.add(kb.div(tid, 128), 2)])
                        stats.finish_stats()
                # epilogue = staggered: each warpgroup stores its own rows (its own barrier), and
                # warpgroup 1 starts after warpgroup 0 has finished the tile
                staggered = g.staggered
                if staggered and not (self.stages_results() and rs is None):
                    raise EmmyError(
                        f"tile.kernel @{self.info.name}: epilogue=staggered needs an epilogue that stages bf16 results "
                        "(stores that read no tensor) and no row statistics from the producer; use epilogue=together"
                    )
                if staggered:
                    wg = kb.div(tid, 128)
                    sync = lambda: kb.call("emmy::named_barrier<128>", [kb.add(wg, OWN_EPILOGUE_BARRIER)])  # noqa: E731
                    with kb.if_(kb.cmp("eq", wg, 1)):
                        kb.call(f"emmy::named_barrier<{consumers}>", [kb.idx(ORDER_BARRIER)])
                else:
                    sync = lambda: kb.call(f"emmy::named_barrier<{consumers}>", [kb.idx(EPILOGUE_BARRIER)])  # noqa: E731
                if run is not None:  # stream_k: a tile shared with other blocks is finished by the last
                    go = self.stream_k_fixup(kb, tid, kt0, kt1, run, accs, ws_ptr, sync)
                    with kb.if_(go):
                        staged = self.epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, None, room, sync)
                        if staged:  # sC is read before the next tile writes it
                            sync()
                else:  # (stream_k's whole tiles: its workspace is not split_k's)
                    staged = self.epilogue(
                        kb, em, tid, m0, n0, batch, part, accs, stat, None if g.stream_k else ws_ptr, room, sync,
                    )
                    if g.persistent and staged:  # sC is read before the next tile writes it
                        sync()
                if staggered:
                    with kb.if_(kb.cmp("eq", wg, 0)):
                        kb.call(f"emmy::named_barrier_arrive<{consumers}>", [kb.idx(ORDER_BARRIER)])
                if rs is not None and more is not None:  # rs is read: the producer may write the next
                    with kb.if_(more):
                        kb.call(f"emmy::named_barrier_arrive<{g.threads}>", [kb.idx(PERSISTENT_BARRIER)])

            self.tile_loop(kb, origin, consume)
        if g.cluster > 1:  # no block leaves while its peers may still arrive on its barriers
            kb.call("emmy::cluster_sync")

    def grid_tile(self, kb: KB) -> tuple[SSAValue, SSAValue]:
        """(row tile, column tile) of this block with schedule = grid: blockIdx.y and blockIdx.x,
        or with group_m beyond the cluster, the cluster's place in the grouped order
        (grouped_tile over clusters; the block's rank in its cluster picks its row)."""
        g = self.g
        bx, by = kb.block_id("x"), kb.block_id("y")
        if self.tile_range is not None:  # tile lo + blockIdx.x of the order along n
            nb = -(-self.N // g.bn)
            t = kb.add(bx, self.tile_range[0])
            return kb.div(t, nb), kb.rem(t, nb)
        if g.group_m == g.cluster:
            return by, bx
        nb, mb, c = -(-self.N // g.bn), -(-self.M // g.bm), g.cluster
        unit = kb.add(kb.mul(kb.div(by, c), nb), bx)  # the cluster's place in launch order
        mu, n_tile = grouped_tile(kb, unit, mb // c, nb, g.group_m // c)
        return (kb.add(kb.mul(mu, c), kb.rem(by, c)) if c > 1 else mu), n_tile

    def tile_loop(self, kb: KB, origin, body) -> None:
        """Call body(m0, n0, batch, part, kt0, kt1, base, later, more, run) for the tiles this
        block computes (run: see stream_k_loop; None otherwise). `origin` given (schedule =
        grid): the block's one tile, base 0, later and more None. With schedule = stream_k,
        stream_k_loop. Otherwise (schedule = persistent, split_k = 1) the block takes tiles
        blockIdx.x, blockIdx.x + gridDim.x, ... of the tile order (see grouped_tile); `base` counts the
        k-steps of its earlier tiles (pipeline slots and mbarrier phases go on from there),
        `later` is true past the block's first tile, `more` when another tile follows."""
        if origin is not None:
            body(*origin, 0, None, None)
            return
        if self.g.stream_k:
            self.stream_k_loop(kb, body)
            return
        g = self.g
        nb, mb, c = -(-self.N // g.bn), -(-self.M // g.bm), g.cluster
        tiles = nb * mb * self.B // c  # (with clusters, tiles of the whole cluster)
        blocks = min(tiles, self.target.sms // c)
        steps = -(-self.K // g.bk)
        bid = kb.block_id("x")
        with kb.for_(bid, tiles, blocks, name="t") as t:
            if g.group_m > 1:
                units = nb * mb // c
                m_tile, n_tile = grouped_tile(kb, kb.rem(t, units), mb // c, nb, g.group_m // c)
                if c > 1:
                    m_tile = kb.add(kb.mul(m_tile, c), kb.block_id("y"))
                n0, m0 = kb.mul(n_tile, g.bn), kb.mul(m_tile, g.bm)
                batch = kb.div(t, units) if self.b_axes else 0
                n0.name_hint, m0.name_hint = "n0", "m0"
            else:
                m0, n0, batch = self.tile_origin(kb, t)
            done = kb.div(kb.sub(t, bid), blocks)  # tiles this block finished before
            base = kb.mul(done, steps)
            later = kb.cmp("sgt", t, bid)
            more = kb.lt(kb.add(t, blocks), tiles)
            body(m0, n0, batch, 0, 0, steps, base, later, more)

    def tile_origin(self, kb: KB, t) -> tuple[SSAValue, SSAValue, SSAValue | int]:
        """(m0, n0, batch) of tile t of the order along n (batch after batch, row after row)."""
        g = self.g
        nb, mb = -(-self.N // g.bn), -(-self.M // g.bm)
        rest = kb.div(t, nb)
        n0 = kb.mul(kb.rem(t, nb), g.bn)
        m0 = kb.mul(kb.rem(rest, mb), g.bm)
        n0.name_hint, m0.name_hint = "n0", "m0"
        return m0, n0, kb.div(rest, mb) if self.b_axes else 0

    def stream_k_loop(self, kb: KB, body) -> None:
        """schedule = stream_k (stream_k_plan): first the block's whole tiles (blockIdx.x,
        blockIdx.x + gridDim.x, ... below `whole`), then its run of iterations [start, end)
        over the shared-out tiles it touches, per tile the k-steps [kt0, kt1) inside the run.
        `base` counts the block's earlier k-steps (pipeline slots and mbarrier phases go on from
        there); `run` is (tile index t, start) for the epilogue of a shared-out tile
        (stream_k_fixup), None for a whole one."""
        tiles, steps, blocks, _, whole = self.stream_k_plan
        total = (tiles - whole) * steps
        bid = kb.block_id("x")
        tile_origin = lambda t: self.tile_origin(kb, t)  # noqa: E731
        start = kb.div(kb.mul(bid, total), blocks)
        start.name_hint = "run_start"
        if whole:
            with kb.for_(bid, whole, blocks, name="t") as t:
                base = kb.mul(kb.div(kb.sub(t, bid), blocks), steps)
                body(*tile_origin(t), 0, 0, steps, base, kb.cmp("sgt", t, bid), kb.true(), None)
        end = kb.div(kb.mul(kb.add(bid, 1), total), blocks)
        end.name_hint = "run_end"
        t_first = kb.div(start, steps)
        t_end = kb.add(kb.div(kb.sub(end, 1), steps), 1)
        done = whole // blocks * steps  # the k-steps of the block's whole tiles
        with kb.for_(t_first, t_end, 1, name="t") as t:
            at = kb.mul(t, steps)
            kt0 = kb.sub(kb.max(start, at), at)
            kt1 = kb.sub(kb.min(end, kb.add(at, steps)), at)
            kt0.name_hint, kt1.name_hint = "kt0", "kt1"
            base = kb.add(kb.sub(kb.add(at, kt0), start), done)
            later = kb.cmp("sgt", t, t_first) if not whole else kb.true()
            more = kb.lt(kb.add(t, 1), t_end)
            t_all = kb.add(t, whole)
            body(*tile_origin(t_all), 0, kt0, kt1, base, later, more, (t_all, start))

    def stream_k_fixup(self, kb: KB, tid, kt0, kt1, run, accs, ws_ptr, sync) -> SSAValue:
        """schedule = stream_k, after a tile's k-steps [kt0, kt1) of this block: a tile whose
        steps all fell to this block is stored as usual. A shared one: thread 0 takes a ticket
        on the tile's counters (emmy_core.cuh, split_ticket); every block but the last writes
        its accumulators to its workspace slot for this run (2 per block: the run's first tile,
        or its last one), fences them and publishes; the last waits for the others, adds
        every block's part in block order (its own from registers) and goes on to the
        epilogue. Returns whether this block stores the tile (the same on every computing
        thread)."""
        g = self.g
        T = g.consumers
        vec = _pow2_dividing(g.acc_per_thread, 4)
        tiles, steps, blocks, most, whole = self.stream_k_plan
        total = (tiles - whole) * steps
        t, start = run
        bid = kb.block_id("x")

        def first_block(it):  # the block whose run holds iteration `it`
            return kb.div(kb.sub(kb.mul(kb.add(it, 1), blocks), 1), total)

        def run_start(b):
            return kb.div(kb.mul(b, total), blocks)

        at = kb.mul(kb.sub(t, whole), steps)  # (the iteration of its first k-step, for a shared tile)
        b0 = first_block(at)
        parts = kb.add(kb.sub(first_block(kb.add(at, steps - 1)), b0), 1)
        parts.name_hint = "parts"
        shared = kb.cmp("ne", kb.sub(kt1, kt0), steps)
        tile = t  # (the tile's counters: tile t of the order along n is also its row-major index)
        leader = kb.cmp("eq", tid, 0)
        ticket = kb.call("emmy::split_ticket", [self.counters, tile, parts, kb.and_(leader, shared)], IndexType())
        last = kb.call(f"emmy::barrier_or<{T}>", [kb.idx(EPILOGUE_BARRIER), ticket], IndexType())
        last.name_hint = "last"

        def part_at(b):  # block b's workspace slot for this tile: its run's first tile, or its last
            side = kb.select(kb.lt(run_start(b), at), kb.idx(1), kb.idx(0))
            return kb.mul(kb.add(kb.mul(b, 2), side), g.nc * g.bm * g.bn)

        def slot(part, c: int, i):  # element index of the first of `vec` values
            return kb.add(kb.add(part, c * g.bm * g.bn), kb.add(kb.mul(kb.div(i, vec), T * vec), kb.mul(tid, vec)))

        with kb.if_(kb.and_(shared, kb.cmp("eq", last, 0))):
            mine = part_at(bid)
            self.publish_part(kb, accs, ws_ptr, lambda c, i: slot(mine, c, i), tile, leader, sync)
        with kb.if_(kb.and_(shared, kb.cmp("ne", last, 0))):
            with kb.if_(leader):
                kb.call("emmy::split_wait", [self.counters, tile, parts])
            sync()
            own = kb.sub(bid, b0)
            parts_at = [part_at(kb.add(b0, p)) for p in range(most)]
            self.add_parts(
                kb, accs, ws_ptr, most, lambda p, c, i: slot(parts_at[p], c, i), own,
                lambda p: kb.and_(kb.cmp("ne", own, p), kb.lt(p, parts)),
            )
        return kb.or_(kb.cmp("eq", kb.sub(kt1, kt0), steps), kb.cmp("ne", last, 0))

    def publish_part(self, kb: KB, accs, ws_ptr, slot, tile, leader, sync) -> None:
        """A block that is not its tile's last: write its accumulators to its part of the
        workspace (`slot(c, i)`: the element index of the first of the `vec` values of
        contraction c's accumulators i.., each thread's interleaved with the others'), fence them
        and publish the part on the tile's counters (emmy_core.cuh, split_publish)."""
        vec = _pow2_dividing(self.g.acc_per_thread, 4)
        vt = VectorType(f32, [vec]) if vec > 1 else f32
        for c, acc in enumerate(accs):
            with kb.for_(0, self.g.acc_per_thread, vec, unroll=0, name="i") as i:
                vals = [kb.load(acc, kb.add(i, j)) for j in range(vec)]
                kb.store(kb.pack(vals, vt) if vec > 1 else vals[0], ws_ptr, slot(c, i))
        kb.call("emmy::fence_gpu")
        sync()
        with kb.if_(leader):  # thread 0
            kb.call("emmy::split_publish", [self.counters, tile])

    def add_parts(self, kb: KB, accs, ws_ptr, count: int, slot, own, present) -> None:
        """The tile's last block: its accumulators become the sum of the tile's `count` parts
        in part order, whichever block came last: part `own` from its own registers, part p
        from the workspace at `slot(p, c, i)` where `present(p)` (zero elsewhere)."""
        vec = _pow2_dividing(self.g.acc_per_thread, 4)
        vt = VectorType(f32, [vec]) if vec > 1 else f32
        for c, acc in enumerate(accs):
            with kb.for_(0, self.g.acc_per_thread, vec, unroll=0, name="i") as i:
                mine = [kb.load(acc, kb.add(i, j)) for j in range(vec)]
                total = None
                for p in range(count):
                    here = kb.cmp("eq", own, p)
                    at = [kb.ptr_add(ws_ptr, slot(p, c, i)), present(p)]
                    if vec > 1:
                        other = kb.call(f"emmy::load_cg<{vec}>", at, vt)
                        theirs = [kb.extract(other, j) for j in range(vec)]
                    else:
                        theirs = [kb.call("emmy::load_cg1", at, f32)]
                    vals = [kb.select(here, mine[j], theirs[j]) for j in range(vec)]
                    total = vals if total is None else [kb.addf(a, b) for a, b in zip(total, vals)]
                for j in range(vec):
                    kb.store(total[j], acc, kb.add(i, j))

    def min_blocks(self, smem: int) -> int:
        """Blocks per multiprocessor promised to the register allocator: as many as shared memory
        and the thread limit allow, but never below ~64 registers beyond the accumulators."""
        g, t = self.g, self.target
        by_smem = t.smem_per_sm // max(smem + 1024, 1)
        by_threads = t.max_threads_per_sm // g.threads
        regs = min(t.regs_per_thread, g.acc_per_thread * g.nc + 64)
        by_regs = t.regs_per_sm // (g.threads * regs)
        return max(1, min(by_smem, by_threads, by_regs, 4))

    def raw_a_loads(self) -> list | None:
        """When the A side is computed (not a plain copy) and every tensor element it reads is a
        bf16 load contiguous along k indexed by m-side/batch/k axes only: those loads with the rows
        their copies need (block_m, or 1 for loads without m-side axes). Their tiles are then
        copied raw with cp.async, stages deep, and A is computed from shared memory."""
        c0 = self.cs[0]
        em = BodyEmitter(None, self.op, {}, [])  # analysis only
        kset = frozenset(self.k_axes)
        value = c0.a_value
        if self.chunk != 8:
            return None
        if value is not None and direct_source(em, value, kset, self.k_last) is not None:
            return None  # a plain copy already
        roots = [value] if value is not None else list(c0.a_factors)
        allowed = frozenset(self.m_axes) | frozenset(self.b_axes) | kset
        side = frozenset(self.m_axes) | frozenset(self.b_axes)
        prologue = {r.result for r in self.prologue}
        loads: list = []
        for v in value_tree(roots, stop=prologue, leaves=(ReduceOp, LoadOp)):  # a load's indices are not A
            op = v.owner
            if isinstance(op, LoadOp):
                t = op.tensor.type
                if not isinstance(t.element_type, BFloat16Type) or not (em.dom(v) <= allowed):
                    return None
                contiguous, aligned = em.access(t, op.indices, self.k_last, 8)
                if not (contiguous and aligned):
                    return None
                if not any(same_expr(op.result, l.result) for l, _ in loads):
                    loads.append((op, self.g.bm if em.dom(v) & side else 1))
                continue
            if isinstance(op, (AxisOp, arith.ConstantOp)):
                continue
            if not isinstance(op, Operation) or op.regions or op.dialect_name() not in ("arith", "math"):
                return None
        return loads or None

    # -- prologue: row statistics in shared memory ---------------------------------------------------
    def emit_prologue(self, kb: KB, em: BodyEmitter, rs, tid, m0, batch) -> None:
        g = self.g
        warps = g.threads // 32
        warp = kb.div(tid, 32)
        lane = kb.rem(tid, 32)
        steps = -(-g.bm // warps)
        with kb.for_(0, steps, 1, name="rr") as rr:
            r_local = kb.add(kb.mul(rr, warps), warp)
            row = kb.add(m0, r_local)
            mask = kb.and_(kb.lt(row, self.M), None if g.bm % warps == 0 else kb.lt(r_local, g.bm))
            scope = em.scope(self._row_coords(kb, row, batch), mask=mask)
            res = reduce_rows(kb, em, scope, self.prologue, lane, 32, 8, self.k_last, None)
            ok = kb.cmp("eq", lane, 0)
            if g.bm % warps:
                ok = kb.and_(ok, kb.lt(r_local, g.bm))
            for p, r in enumerate(self.prologue):
                kb.store(kb.to_f32(res[r.result][0]), rs, kb.add(kb.mul(p, g.bm), r_local), ok)

    # -- tensor-core / FMA step -------------------------------------------------------------------------
    def compute(self, kb: KB, tid, sa, sbs, slot, a_elems, b_elems, accs, wgmma_pending: int = 0, during=None) -> None:
        """One k-step's products from the tiles in `slot`; with wgmma, returns once at most
        `wgmma_pending` k-steps of wgmmas are still running, after emitting `during()` (work
        that overlaps the step's wgmmas) between issuing them and waiting."""
        g = self.g
        a_stage = kb.ptr_add(sa, kb.mul(slot, a_elems))
        b_stages = [kb.ptr_add(sb, kb.mul(slot, b_elems)) for sb in sbs]
        if g.wgmma:
            wgi = kb.div(tid, 128)
            n_wg = g.bn
            for mi in range(g.mi):
                row0 = kb.mul(kb.add(kb.mul(wgi, g.mi), mi), 64)
                a_ptr = kb.ptr_add(a_stage, kb.mul(row0, g.slab))
                if g.joint:  # one wgmma over the nc tiles side by side
                    n = g.nc * n_wg
                    kb.call(f"emmy::wgmma::tile<{n}, {g.bk}, {g.bm}, {n}>", [a_ptr, b_stages[0], accs[0]])
                    continue
                for c, (b_stage, acc) in enumerate(zip(b_stages, accs)):
                    acc_ptr = kb.ptr_add(acc, mi * n_wg // 2)
                    kb.call(f"emmy::wgmma::tile<{n_wg}, {g.bk}, {g.bm}, {g.bn}>", [a_ptr, b_stage, acc_ptr])
            if during is not None:
                during()
            # each tile() commits one group: a k-step is mi * nc groups (mi with joint), and
            # wgmma_pending counts k-steps left in flight
            groups = g.mi * (1 if g.joint else len(accs))
            kb.call(f"emmy::wgmma::wait<{wgmma_pending * groups}>")
        elif g.workers == "mma_sync":
            warp = kb.div(tid, 32)
            wmi = kb.div(warp, g.wn)
            wni = kb.rem(warp, g.wn)
            WM, WN = g.bm // g.wm, g.bn // g.wn
            a_ptr = kb.ptr_add(a_stage, kb.mul(kb.mul(wmi, WM), g.slab))
            for b_stage, acc in zip(b_stages, accs):
                b_ptr = kb.ptr_add(b_stage, kb.mul(kb.mul(wni, WN), g.slab))
                kb.call(f"emmy::mma::warp_tile<{WM}, {WN}, {g.bk}, {g.bm}, {g.bn}>", [a_ptr, b_ptr, acc])
        else:
            ty = kb.div(tid, g.tx)
            tx = kb.rem(tid, g.tx)
            TM, TN = g.bm // g.ty, g.bn // g.tx
            for b_stage, acc in zip(b_stages, accs):
                kb.call(
                    f"emmy::fma::thread_tile<{TM}, {TN}, {g.bk}, {g.bm}, {g.bn}, {g.ty}, {g.tx}>",
                    [a_stage, b_stage, ty, tx, acc],
                )

    # -- accumulator fragments: (row in tile, col in tile, acc index, lanes) --------------------------
    def wgmma_base_row(self, kb: KB, tid) -> SSAValue:
        """The first tile row of this thread's warp in its warpgroup's wgmma fragments (each
        warpgroup owns mi slices of 64 rows, each warp 16 rows of a slice)."""
        warp_in = kb.rem(kb.div(tid, 32), 4)
        wgi = kb.div(tid, 128)
        return kb.add(kb.mul(kb.mul(wgi, self.g.mi), 64), kb.mul(warp_in, 16))

    def fragments(self, kb: KB, tid, body, cols: tuple[int, int] | None = None) -> None:
        """Call body(row_local, col_local, acc_index, lanes) for every accumulator group of this
        thread (lanes consecutive columns at acc_index, acc_index + 1, ...), inside unrolled loops;
        with wgmma, `cols` = (lo, hi) keeps the tile's columns lo <= c < hi (multiples of 8)."""
        g = self.g
        if g.wgmma or g.workers == "mma_sync":
            lane = kb.rem(tid, 32)
            gq = kb.div(lane, 4)
            tq = kb.rem(lane, 4)
            if g.wgmma:
                mt, nt, WN = g.mi, g.bn // 8, g.bn
                base_row = self.wgmma_base_row(kb, tid)
                row_step = 64
                base_col = kb.idx(0)
            else:
                warp = kb.div(tid, 32)
                WM, WN = g.bm // g.wm, g.bn // g.wn
                mt, nt = WM // 16, WN // 8
                base_row = kb.mul(kb.div(warp, g.wn), WM)
                base_col = kb.mul(kb.rem(warp, g.wn), WN)
                row_step = 16
            ni_lo, ni_hi = (0, nt) if cols is None else (cols[0] // 8, cols[1] // 8)
            with kb.for_(0, mt, 1, unroll=0, name="mi") as mi:
                with kb.for_(ni_lo, ni_hi, 1, unroll=0, name="ni") as ni:
                    with kb.for_(0, 2, 1, unroll=0, name="h") as h:
                        row = fragment_row(kb, base_row, gq, mi, row_step, h)
                        if g.wgmma:  # which of the thread's rows (see preload_stats)
                            self._fragment_slots[row] = kb.add(kb.mul(mi, 2), h)
                        col = kb.add(kb.add(base_col, kb.mul(ni, 8)), kb.mul(tq, 2))
                        idx = kb.add(kb.mul(kb.add(kb.mul(mi, nt), ni), 4), kb.mul(h, 2))
                        body(row, col, idx, 2)
        else:
            ty = kb.div(tid, g.tx)
            tx = kb.rem(tid, g.tx)
            TM, TN = g.bm // g.ty, g.bn // g.tx
            with kb.for_(0, TM, 1, unroll=0, name="i") as i:
                with kb.for_(0, TN, 1, unroll=0, name="j") as j:
                    row = kb.add(ty, kb.mul(i, g.ty))
                    col = kb.add(tx, kb.mul(j, g.tx))
                    body(row, col, kb.add(kb.mul(i, TN), j), 1)

    def staging_width(self, free_bytes: int, ws_ptr) -> int | None:
        """The columns of the tile one round of a staged epilogue (staged_epilogue) holds, or None
        for an epilogue straight from the fragments. Staging needs tensor-core workers, no
        split-k workspace, 8-column chunks that never straddle the innermost output axis, and
        whole chunks per thread; the f32 tiles must fit in `free_bytes`: all block_n columns,
        or with wgmma a slice of them (block_n / 2, / 4, ...) in as many rounds."""
        g = self.g
        n_last = self.n_axes[-1] if self.n_axes else None
        if ws_ptr is not None or not (g.wgmma or g.workers == "mma_sync"):
            return None
        if n_last is None or self.ext[n_last] % 8:
            return None
        width = g.bn
        while width % 8 == 0 and g.bn % width == 0 and (g.bm * width // 8) % g.consumers == 0:
            if self.staging_bytes(width) <= free_bytes:
                return width
            if not g.wgmma:
                break
            width //= 2
        return None

    def staged_epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, accs, stat, sync, offset: int = 0, width: int | None = None) -> None:
        """The epilogue through shared memory: the accumulators go to f32 tiles there (rows
        padded by STAGE_PAD floats, so the fragments' rows fall in different banks), then each
        thread takes 8 consecutive columns of a row at a time and evaluates the stored values
        for all 8 at once: 16-byte stores, and 16-byte loads of what the epilogue reads (a
        residual), where a thread's fragments would give 4-byte ones. `sync` waits for all
        computing threads (the k loop's buffers are reused). With `width` < block_n the tiles
        hold that many columns, and the tile goes through them in block_n / width rounds."""
        g = self.g
        width = width or g.bn
        if self.stages_results():
            self.result_staged_epilogue(kb, em, tid, m0, n0, batch, accs, stat, sync, offset, width)
            return
        pitch = width + STAGE_PAD
        per_acc = g.bm * pitch
        tiles = kb.shared(f32, g.nc * per_acc, offset, 16, "sC")
        per_row = width // 8
        for c0 in range(0, g.bn, width):
            sync()

            def put(r_local, c_local, idx, lanes, c0=c0):
                for c, acc in enumerate(accs):
                    pair = kb.pack([kb.load(acc, kb.add(idx, j)) for j in range(lanes)], VectorType(f32, [lanes]))
                    at = kb.add(kb.mul(r_local, pitch), kb.sub(c_local, c0))
                    kb.store(pair, tiles, kb.add(at, c * per_acc))

            self.fragments(kb, tid, put, None if width == g.bn else (c0, c0 + width))
            sync()
            with kb.for_(0, g.bm * per_row // g.consumers, 1, unroll=0, name="c") as it:
                cidx = kb.add(kb.mul(it, g.consumers), tid)
                r_local = kb.div(cidx, per_row)
                s_local = kb.mul(kb.rem(cidx, per_row), 8)  # column in the staged slice
                row, col = kb.add(m0, r_local), kb.add(n0, kb.add(s_local, c0))
                mask = kb.and_(
                    kb.lt(row, self.M) if self.M % g.bm else None, kb.lt(col, self.N) if self.N % g.bn else None
                )
                overrides = {}
                for c, con in enumerate(self.cs):
                    at = kb.add(kb.add(kb.mul(r_local, pitch), s_local), c * per_acc)
                    vals = []
                    for h in range(2):
                        v = kb.load(tiles, kb.add(at, 4 * h), VectorType(f32, [4]))
                        vals += [kb.extract(v, j) for j in range(4)]
                    overrides[con.result] = vals
                for p, r in enumerate(self.prologue):
                    overrides[r.result] = [stat(p, r_local)]
                self.emit_stores(kb, em, row, col, batch, mask, 8, overrides)

    def result_staged_epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, accs, stat, sync, offset: int, width: int) -> None:
        """staged_epilogue when stages_results(): each thread evaluates the stores' values on its
        fragments (two columns at a time), rounds them to bf16 into one tile per store (rows
        padded by 8 bf16: a warp's 4-byte writes of 8 rows x 4 column pairs hit 32 banks), then takes 8 consecutive columns of a row at a time for 16-byte
        stores."""
        g = self.g
        pitch = width + RESULT_PAD
        per_store = g.bm * pitch
        tiles = kb.shared(bf16, len(self.stores) * per_store, offset, 16, "sC")
        per_row = width // 8
        n_last = self.n_axes[-1]
        for c0 in range(0, g.bn, width):
            sync()

            def put(r_local, c_local, idx, lanes, c0=c0):
                overrides = {
                    c.result: [kb.load(acc, kb.add(idx, j)) for j in range(lanes)] for c, acc in zip(self.cs, accs)
                }
                for p, r in enumerate(self.prologue):
                    overrides[r.result] = [stat(p, r_local)]
                coords = self._row_coords(kb, kb.add(m0, r_local), batch)
                coords.update(self._col_coords(kb, kb.add(n0, c_local)))
                scope = em.scope(coords, lane_axis=n_last, lanes=lanes, overrides=overrides)
                at = kb.add(kb.mul(r_local, pitch), kb.sub(c_local, c0))
                for k, st in enumerate(self.stores):
                    vals = [kb.to_type(v, bf16) for v in scope.value(st.value)]
                    kb.store(kb.pack(vals, VectorType(bf16, [lanes])), tiles, kb.add(at, k * per_store))

            self.fragments(kb, tid, put, None if width == g.bn else (c0, c0 + width))
            sync()
            # epilogue = staggered: each warpgroup stores the rows its fragments hold (64 * mi)
            own_rows = g.staggered
            rows, threads = (64 * g.mi, 128) if own_rows else (g.bm, g.consumers)
            first_row = kb.mul(kb.div(tid, 128), rows) if own_rows else 0
            ltid = kb.rem(tid, 128) if own_rows else tid
            with kb.for_(0, rows * per_row // threads, 1, unroll=0, name="c") as it:
                cidx = kb.add(kb.mul(it, threads), ltid)
                r_local = kb.add(first_row, kb.div(cidx, per_row))
                s_local = kb.mul(kb.rem(cidx, per_row), 8)
                row, col = kb.add(m0, r_local), kb.add(n0, kb.add(s_local, c0))
                mask = kb.and_(
                    kb.lt(row, self.M) if self.M % g.bm else None, kb.lt(col, self.N) if self.N % g.bn else None
                )
                at = kb.add(kb.mul(r_local, pitch), s_local)
                overrides = {}
                for k, st in enumerate(self.stores):
                    vec = kb.load(tiles, kb.add(at, k * per_store), VectorType(bf16, [8]))
                    overrides[st.value] = [kb.extract(vec, j) for j in range(8)]
                self.emit_stores(kb, em, row, col, batch, mask, 8, overrides)

    def epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, part, accs, stat, ws_ptr, room, sync) -> bool:
        """The epilogue of the computing threads: staged through shared memory where its tiles
        fit in `room` ((offset, bytes) free there; `sync` waits for all computing threads),
        else straight from the fragments. Returns whether it was staged."""
        if ws_ptr is not None and self.g.last_block:
            self.last_block_epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, ws_ptr, room, sync)
            return False
        offset, free_bytes = room
        width = self.staging_width(free_bytes, ws_ptr)
        if width is not None:
            self.staged_epilogue(kb, em, tid, m0, n0, batch, accs, stat, sync, offset, width)
            return True
        else:
            self.fragment_epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, ws_ptr)
            return False

    def last_block_epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, part, accs, stat, ws_ptr, room, sync) -> None:
        """split_k with `combine = last_block` (emmy_core.cuh, split_ticket ...): thread 0 takes
        the block's ticket on its tile's counters and the computing threads learn whether it was
        the last (a barrier that ors their flags). Any other block writes its accumulators to
        its part's slot of the workspace (each thread's values interleaved with the other
        threads', `vec` floats per access), fences them and publishes the part; the last block
        waits until the others have published, adds the parts in part order (its own from
        registers) into its accumulators and runs the ordinary epilogue on them: staged
        through shared memory where it fits, like a kernel without split_k."""
        g = self.g
        T = g.consumers
        A = g.acc_per_thread
        vec = _pow2_dividing(A, 4)
        mb, nb = -(-self.M // g.bm), -(-self.N // g.bn)
        tile = kb.add(kb.mul(kb.add(kb.mul(batch, mb), kb.div(m0, g.bm)), nb), kb.div(n0, g.bn))
        if self.tile_range is not None:  # counters and workspace for this launch's tiles only
            tile = kb.sub(tile, self.tile_range[0])
        tile.name_hint = "tile"
        leader = kb.cmp("eq", tid, 0)
        ticket = kb.call("emmy::split_ticket", [self.counters, tile, kb.idx(g.split), leader], IndexType())
        if g.producer:
            last = kb.call(f"emmy::barrier_or<{T}>", [kb.idx(EPILOGUE_BARRIER), ticket], IndexType())
        else:
            last = kb.call("emmy::block_or", [ticket], IndexType())
        last.name_hint = "last"

        def slot(p, c: int, i):  # element index of the first of `vec` values
            base = kb.mul(kb.add(kb.mul(kb.add(kb.mul(p, self.tiles()), tile), g.nc), c), g.bm * g.bn)
            return kb.add(base, kb.add(kb.mul(kb.div(i, vec), T * vec), kb.mul(tid, vec)))

        with kb.if_(kb.cmp("eq", last, 0)):
            self.publish_part(kb, accs, ws_ptr, lambda c, i: slot(part, c, i), tile, leader, sync)
        with kb.if_(kb.cmp("ne", last, 0)):
            with kb.if_(leader):
                kb.call("emmy::split_wait", [self.counters, tile, kb.idx(g.split)])
            sync()
            self.add_parts(kb, accs, ws_ptr, g.split, slot, part, lambda p: kb.cmp("ne", part, p))
            self.epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, None, room, sync)

    def fragment_epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, part, accs, stat, ws_ptr) -> None:
        """The epilogue straight from each thread's accumulator fragments (two columns per
        access), or the partial sums into the split-k workspace."""
        n_last = self.n_axes[-1] if self.n_axes else None

        def body(r_local, c_local, idx, lanes):
            row = kb.add(m0, r_local)
            col = kb.add(n0, c_local)
            if lanes == 2 and (n_last is None or self.ext[n_last] % 2):
                # odd innermost extent: two single columns
                for j in range(2):
                    self._epilogue_point(kb, em, row, kb.add(col, j), r_local, [kb.add(idx, j)], 1, batch, part, accs, stat, ws_ptr)
                return
            self._epilogue_point(kb, em, row, col, r_local, [idx], lanes, batch, part, accs, stat, ws_ptr)

        self.fragments(kb, tid, body)

    def _epilogue_point(self, kb, em, row, col, r_local, idxs, lanes, batch, part, accs, stat, ws_ptr) -> None:
        g = self.g
        mask = kb.and_(kb.lt(row, self.M), kb.lt(col, self.N))
        vals = [[kb.load(acc, kb.add(idxs[0], j)) for j in range(lanes)] for acc in accs]
        if ws_ptr is not None:
            for c, v in enumerate(vals):
                base = kb.add(
                    kb.mul(kb.add(kb.mul(kb.add(kb.mul(part, g.nc), c), self.B), batch), self.M * self.N),
                    kb.add(kb.mul(row, self.N), col),
                )
                if lanes == 2:
                    kb.store(kb.pack(v, VectorType(f32, [2])), ws_ptr, base, mask)
                else:
                    kb.store(v[0], ws_ptr, base, mask)
            return
        overrides = {c.result: v for c, v in zip(self.cs, vals)}
        for p, r in enumerate(self.prologue):
            overrides[r.result] = [stat(p, r_local)]
        self.emit_stores(kb, em, row, col, batch, mask, lanes, overrides)

    def emit_stores(self, kb, em, row, col, batch, mask, lanes, overrides) -> None:
        coords = self._row_coords(kb, row, batch)
        coords.update(self._col_coords(kb, col))
        n_last = self.n_axes[-1] if self.n_axes else None
        scope = em.scope(coords, lane_axis=n_last if lanes > 1 else None, lanes=lanes, mask=mask, overrides=overrides)
        for s in self.stores:
            scope.store(s)

    # -- split-k combine kernel ---------------------------------------------------------------------------
    def build_combine(self, types, names, *, stats: bool) -> K.KernelFuncOp:
        g = self.g
        n_in = len(self.op.operands)
        arg_types = list(types[:n_in])
        arg_names = list(names[:n_in])
        if stats:
            arg_types.append(K.PtrType(f32))
            arg_names.append("stats")
        arg_types.append(K.PtrType(f32))
        arg_names.append("ws")
        arg_types += types[n_in:]
        arg_names += names[n_in:]
        n_last = self.n_axes[-1] if self.n_axes else None
        lanes = 2 if n_last is not None and self.ext[n_last] % 2 == 0 else 1
        total = self.B * self.M * (self.N // lanes)
        threads = 256
        blocks = -(-total // threads)
        kb = KB.new_func(f"{self.name}_combine", arg_types, (blocks, 1, 1), (threads, 1, 1), 0, arg_names=arg_names)
        args = kb.func.body.block.args
        block = self.op.regions[0].block
        ptrs = {a: args[i] for i, a in enumerate(block.args)}
        pos = n_in
        stats_ptr = None
        if stats:
            stats_ptr = args[pos]
            pos += 1
        ws = args[pos]
        outs = list(args[pos + 1:])
        em = BodyEmitter(kb, self.op, ptrs, outs)
        i = kb.add(kb.mul(kb.block_id(), threads), kb.thread_id())
        mask = None if total % threads == 0 else kb.lt(i, total)
        npairs = self.N // lanes
        col = kb.mul(kb.rem(i, npairs), lanes)
        rest = kb.div(i, npairs)
        row = kb.rem(rest, self.M)
        batch = kb.div(rest, self.M) if self.b_axes else 0
        vals = []
        for c in range(g.nc):
            sums = None
            for p in range(g.split):
                base = kb.add(
                    kb.mul(kb.add(kb.mul(kb.add(kb.mul(p, g.nc), c), self.B), batch), self.M * self.N),
                    kb.add(kb.mul(row, self.N), col),
                )
                if lanes == 2:
                    v = kb.load(ws, base, VectorType(f32, [2]), mask)
                    v = [kb.extract(v, 0), kb.extract(v, 1)]
                else:
                    v = [kb.load(ws, base, f32, mask)]
                sums = v if sums is None else [kb.addf(a, b) for a, b in zip(sums, v)]
            vals.append(sums)
        overrides = {c.result: v for c, v in zip(self.cs, vals)}
        for p, r in enumerate(self.prologue):
            idx = kb.add(kb.mul(p, self.B * self.M), kb.add(kb.mul(batch, self.M), row))
            overrides[r.result] = [kb.load(stats_ptr, idx, f32, mask)]
        self.emit_stores(kb, em, row, col, batch, mask, lanes, overrides)
        return kb.finish()


def _pow2_dividing(n: int, cap: int) -> int:
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


__all__ = ["build", "direct_source", "same_expr"]
