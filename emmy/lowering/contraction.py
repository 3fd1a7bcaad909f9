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
     loads (`KernelInfo.raw_a_loads`), where the plan's `a_source` is "raw_copies" (they fit):
     those tensors' tiles (x: block_m rows, norm_w: one row) are copied raw with cp.async,
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
   B tile and multicast it to both (with `slices = cols`, pairs along n, their common A tile).
   A computed A side that
   reads one block_m-row tensor (RMSNorm's `w * x`) is copied raw into the A slot and rewritten
   in place by each consumer warpgroup (`InPlaceA`); otherwise the producer loads it a k-step
   ahead into registers and stores it computed. Either way the row statistics are summed from
   those values (`RowStats`), so there is no prologue pass (step 1) over the block's rows.
   When A is a plain copy and the statistics read only its tensor (RMSNorm once loop-hoist-params
   folded the norm weight into B), each consumer warpgroup reads its rows of the A tile,
   read-only, after issuing the step's wgmmas (`a_stats_leaf`, `AStatistics`). Which of these
   applies is the kernel's fact `KernelInfo.ws_row_stats` (emmy.analysis.operands), which
   legality reads too. With
   `epilogue = pingpong` (persistent blocks) the two consumer warpgroups do not share a tile:
   each multiplies and stores whole tiles of its own, taking the block's tiles in turn.
3. epilogue: the loop body's scalar code after the contractions (row scale, residual add,
   SiLU(gate) * up, ...) on the f32 accumulators, then the bf16 stores, predicated at the
   edges. Tensor-core kernels stage through shared memory first (`staged_epilogue`) so each
   thread stores 8 consecutive columns (16 bytes): the accumulators, evaluated there, or, where
   the stores read no tensor, the bf16 results evaluated on the fragments (`stages_results`),
   or, where they read one, their bf16 parts computed from the accumulators alone (the rounded
   product a residual is added to: `staged_parts`); otherwise two columns per access straight from the fragments. Where an attention reading the
   result has fusion = epilogue (the plan's `qk`), its Q and K heads are rewritten from the
   staged results by the attention's own per-head code (`qk_stores`: RMSNorm, rotary
   embedding). With `split_k > 1` the block writes its f32 partial sums to a workspace instead and `<name>_combine` adds the parts and
   runs the epilogue (`combine = kernel`), or the last block of each output tile to finish adds
   the others' parts to its own and runs the epilogue itself (`combine = last_block`,
   last_block_epilogue). With `schedule = stream_k` a block's k-steps run across tile
   boundaries (stream_k_loop): a tile whose steps it shares with other blocks is finished
   the same way by the last of them (stream_k_fixup), a tile wholly its own as usual.

Every number comes from the kernel's plan (`emmy.schedule.contraction.ContractionPlan`: tiles,
warp grid, pipeline, tile order, split, launches, and the shared-memory layout `smem`: every
buffer's offset and the total the kernel declares). This module assembles the kernels (the
statistics kernel, the main kernel's buffers and body); the jobs inside live in
modules of their own: contraction_compute.py (row prologue, one k-step on tensor cores),
contraction_ws.py (the warp-specialized producer/consumer loop), contraction_order.py (grid
order, persistent loops, stream-K runs and their fix-up), contraction_epilogue.py (epilogues,
split_k's combine). How operand tiles are filled (cp.async copies, computed A sides, the
in-place A of wgmma_ws) lives in emmy/lowering/staging.py.

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


from xdsl.dialects.builtin import TensorType, bf16, f32, i32, i64
from xdsl.ir import SSAValue

from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.loop import StoreOp
from emmy.lowering import Built, In, Launch, Out, Peer, Tmp
from emmy.lowering.common import decompose, io_args, kernel_ident
from emmy.lowering.kb import KB
from emmy.lowering.reduction import reduce_rows
from emmy.lowering.scalar import BodyEmitter
from emmy.lowering.staging import Stager, direct_source, same_expr
from emmy.lowering.tma import MapOperand
from emmy.schedule.contraction import ContractionPlan
from emmy.schedule.reduction import largest_divisor_pow2
from emmy.lowering.contraction_compute import ComputeMixin
from emmy.lowering.contraction_epilogue import EpilogueMixin
from emmy.lowering.contraction_order import TileOrderMixin
from emmy.lowering.contraction_ws import WarpSpecializedMixin


def build(op, info, plan: ContractionPlan) -> Built:
    """The kernels of a contraction `tile.kernel` (or part) `op` as its plan says."""
    return ContractionBuilder(op, info, plan).build()


class ContractionBuilder(ComputeMixin, WarpSpecializedMixin, TileOrderMixin, EpilogueMixin):
    """The kernels of one contraction: the statistics kernel, the main kernel (its shared-memory
    layout and assembly here; compute, the warp-specialized loop, the tile order and the
    epilogues in the mixins' modules) and the combine kernel."""

    def __init__(self, op, info, plan: ContractionPlan):
        self.op = op
        self.info = info
        self.g = plan
        self.target = plan.target
        self.name = kernel_ident(op.properties["sym_name"].data) + plan.suffix
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
        self.M, self.N, self.K, self.B = plan.M, plan.N, plan.K, plan.B
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
        self.map_args: list[SSAValue] = []  # their kernel arguments (build_main)
        self.counters: SSAValue | None = None  # combine = last_block: the per-tile counters (build_main)
        self.qk_ptrs: list[SSAValue] = []  # the pointers of qk_inputs() (build_main)
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
        args += [Peer(i) for i, _ in self.qk_inputs()]
        built.launches.append(Launch(main.sym_name.data, tuple(args)))
        if self.g.qk is not None:
            built.peer = self.g.qk.attention
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

    def qk_inputs(self) -> list[tuple[int, TensorType]]:
        """fusion = epilogue of an attention reading this kernel's rows (the plan's `qk`): the
        attention's inputs its Q/K code reads besides the rows (index, type), kernel arguments
        after the tensor maps."""
        task = self.g.qk
        if task is None:
            return []
        return [(i, task.attention.operands[i].type) for i in task.inputs]

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
    def stages_results(self) -> bool:
        """Whether the staged epilogue evaluates the stores on the accumulator fragments and stages
        their bf16 results (a fact of the kernel: KernelInfo.stages_results)."""
        return self.info.stages_results

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
        peers = self.qk_inputs()
        arg_types += [K.PtrType(t.element_type) for _, t in peers]
        arg_names += [f"qk_in{i}" for i, _ in peers]
        layout = g.smem  # every offset below, and whether A is computed from raw copies (a_source)
        a_loads = self.raw_a_loads()
        raw = list(zip(a_loads or (), layout.raw)) if layout.a_source == "raw_copies" else []
        a_elems, b_elems, stats_off, smem = layout.a_elems, layout.b_elems, layout.stats_offset, layout.total
        if smem > self.target.smem_per_block:
            raise EmmyError(
                f"tile.kernel @{self.info.name}: {smem} bytes of shared memory exceed the {self.target.smem_per_block} a block may use on {self.target.name}"
            )
        grid = g.grid
        if grid[1] > 65535 or grid[2] > 65535:
            raise EmmyError(f"tile.kernel @{self.info.name}: grid {grid} is too large")
        # pairs along n (slices = cols) of a grid are neighbours along x; persistent pairs, and pairs
        # along m, along y (a persistent block's rank in y picks its tile of the pair's)
        along_x = g.pairs_along == "n" and not g.persistent
        paired = -(-self.N // g.bn) if g.pairs_along == "n" else -(-self.M // g.bm)
        if paired % g.cluster:
            what = "column" if g.pairs_along == "n" else "row"
            raise EmmyError(f"tile.kernel @{self.info.name}: cluster={g.cluster}: the {paired} {what} tiles do not pair up")
        kb = KB.new_func(
            self.name, arg_types, grid, (g.threads, 1, 1), smem, self.g.min_blocks(smem), arg_names=arg_names,
            cluster=((g.cluster, 1, 1) if along_x else (1, g.cluster, 1)) if g.cluster > 1 else None,
        )
        args = kb.func.body.block.args
        block = self.op.regions[0].block
        ptrs = {a: args[i] for i, a in enumerate(block.args)}
        pos = n_in
        stats_ptr = ws_ptr = None
        if stats:
            stats_ptr = args[pos]
            pos += 1
        n_args = len(args) - len(maps) - len(peers)
        self.counters = None
        if workspace:
            ws_ptr = args[pos]
            pos += 1
        if g.ticketed:
            self.counters = args[pos]
            pos += 1
        outs = [] if g.combine_kernel else list(args[pos:n_args])
        self.map_args = list(args[n_args:n_args + len(maps)])
        self.qk_ptrs = list(args[n_args + len(maps):])
        em = BodyEmitter(kb, self.op, ptrs, outs)
        # wgmma reads tiles through the swizzle of absolute addresses: 8-row groups aligned
        align_a = 1024 if g.wgmma else 128
        align_b = 8 * 2 * g.slab if g.wgmma else 128
        sa = kb.shared(bf16, g.stages * a_elems, 0, align_a, "sA")
        if g.joint:  # slot s: the nc B tiles one after the other
            sb = kb.shared(bf16, g.stages * g.nc * b_elems, layout.b_offsets[0], align_b, "sB")
            sbs = [kb.ptr_add(sb, c * b_elems) for c in range(g.nc)]
        else:
            sbs = [
                kb.shared(
                    bf16, g.stages * b_elems, off, min(align_b, largest_divisor_pow2(off, 1024)),
                    f"sB{c}" if g.nc > 1 else "sB",
                )
                for c, off in enumerate(layout.b_offsets)
            ]
        raw_bufs = [
            (load, rows, kb.shared(bf16, g.stages * rows * g.bk, off, 128, f"raw{i}"))
            for i, ((load, _), (off, rows)) in enumerate(raw)
        ]
        rs = kb.shared(f32, len(self.prologue) * g.bm, stats_off, 16, "rs") if layout.stats_bytes else None
        tid = kb.thread_id()

        # statistics of the rows of the tile at row m0 of batch index `batch`
        def stat_at(m0, batch):
            def stat(p: int, r_local) -> SSAValue:
                if rs is not None:
                    return kb.load(rs, kb.add(kb.mul(p, g.bm), r_local))
                row = kb.min(kb.add(m0, r_local), self.M - 1)
                return kb.load(stats_ptr, kb.add(kb.mul(p, self.B * self.M), kb.add(kb.mul(batch, self.M), row)))

            return stat

        def early_stat_at(m0, batch, tid=tid):
            """stat_at, with the loads of a statistics kernel's rows issued now (before the k
            loop) where the fragment layout allows and the epilogue reads them (not into the
            split-k workspace): the epilogue then does not start with a round trip to memory."""
            stat = stat_at(m0, batch)
            if rs is None and stats_ptr is not None and ws_ptr is None and self.info.epilogue_reads_prologue and g.wgmma and not g.cols:
                return self.preload_stats(kb, tid, stat)
            return stat

        # wgmma_ws with a computed A side: the row statistics are summed from the tiles loaded
        # anyway (by the producer, or by the consumers transforming A in place), instead of a
        # pass over the block's rows before the k loop
        # (where: KernelInfo.ws_row_stats, the fact legality reads too)
        inplace = self.inplace_a_leaf(a_loads) if g.producer else None
        where = self.info.ws_row_stats if g.producer and rs is not None else "before"
        stats_leaf = self.a_stats_leaf() if where == "a_tiles" else None
        producer_stats = where in ("in_place", "producer") or stats_leaf is not None

        if g.persistent:
            if rs is not None and not producer_stats:
                raise EmmyError(
                    f"tile.kernel @{self.info.name}: schedule=persistent cannot compute the A side from row statistics summed before the k loop; use schedule=grid"
                )
            accs = self.accumulators(kb)
            bars = kb.shared(i64, 2 * g.stages, layout.bars_offset, 8, "bars")
            self.specialized_loop(
                kb, em, tid, None, stat_at, sa, sbs, bars, accs, a_elems, g.b_stride, ws_ptr,
                rs if producer_stats else None, inplace, a_loads, stats_leaf, early_stat_at,
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
            bars = kb.shared(i64, 2 * g.stages, layout.bars_offset, 8, "bars")
            self.specialized_loop(
                kb, em, tid, (m0, n0, batch, part, kt0, kt1), stat_at, sa, sbs, bars, accs, a_elems, g.b_stride,
                ws_ptr, rs if producer_stats else None, inplace, a_loads, stats_leaf, early_stat_at,
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
        self.settle(kb, accs)

        self.epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, ws_ptr, kb.barrier)
        return kb.finish()


__all__ = ["ContractionBuilder", "build", "direct_source", "same_expr"]
