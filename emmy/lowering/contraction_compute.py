"""Contractions, compute: the row prologue, the accumulators, one k-step on tensor cores.

`ComputeMixin` of the `ContractionBuilder` (emmy/lowering/contraction.py): the prologue's row
statistics (kept in shared memory, or preloaded into registers for wgmma's rows), where a
computed A side's raw tiles come from (`raw_a_loads`), and the product of one staged k-step:
`wgmma` warpgroups (64-row slices, `emmy::wgmma::tile`), `mma_sync` warps (`emmy::mma::warp_tile`,
the plan's warp grid) or plain threads, plus the accumulator fragments' rows and columns that
the epilogues walk (`fragments`).
"""

from __future__ import annotations

from contextlib import nullcontext

from xdsl.dialects.builtin import f32
from xdsl.ir import SSAValue

from emmy.lowering.common import fragment_row
from emmy.lowering.kb import KB
from emmy.lowering.reduction import reduce_rows
from emmy.lowering.scalar import BodyEmitter
from emmy.schedule.contraction import PROLOGUE_VECTOR


class ComputeMixin:
    """Methods of ContractionBuilder (see the module docstring)."""

    def stat_overrides(self, stat, r_local, used: bool) -> dict:
        """The statistics of tile row `r_local` as the prologue reductions' values, where the
        code evaluated with them reads them (`used`: `KernelInfo.a_reads_prologue` for the A
        side, `epilogue_reads_prologue` for the stores), else none: no statistic is loaded
        that nothing uses."""
        if not used:
            return {}
        return {r.result: [stat(p, r_local)] for p, r in enumerate(self.prologue)}

    def preload_stats(self, kb: KB, tid, stat):
        """Load now, into registers, the row statistics of the rows this thread's wgmma
        fragments hold (2 per 64-row slice: fragment rows g and g + 8 of its warp; not with
        slices = cols, whose fragments hold every row), and return a
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



    def raw_a_loads(self) -> list | None:
        """The loads a computed A side reads whose tiles can be copied raw, with the rows their
        copies need (block_m, or 1 for a load without m-side or batch axes): the kernel's fact
        `KernelInfo.raw_a_loads` (emmy.analysis.operands); None when there are none. Whether
        the copies are made is the plan's `a_source`."""
        return [(load, self.g.bm if full else 1) for load, full in self.info.raw_a_loads] or None

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
            res = reduce_rows(kb, em, scope, self.prologue, lane, 32, PROLOGUE_VECTOR, self.k_last, None)
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
            # the warpgroup's 64-row slices: of the A tile, or with slices = cols of each B tile,
            # which then goes first (the wgmma's A) and the A tile second (its B: N = block_m)
            n_wg = g.bm if g.cols else g.bn
            for mi in range(g.mi):
                row0 = kb.mul(kb.add(kb.mul(wgi, g.mi), mi), 64)
                a_ptr = None if g.cols else kb.ptr_add(a_stage, kb.mul(row0, g.slab))
                if g.joint:  # one wgmma over the nc tiles side by side
                    n = g.nc * n_wg
                    kb.call(f"emmy::wgmma::tile<{n}, {g.bk}, {g.bm}, {n}>", [a_ptr, b_stages[0], accs[0]])
                    continue
                for b_stage, acc in zip(b_stages, accs):
                    if g.cols:
                        operands, rows = [kb.ptr_add(b_stage, kb.mul(row0, g.slab)), a_stage], (g.bn, g.bm)
                    else:
                        operands, rows = [a_ptr, b_stage], (g.bm, g.bn)
                    acc_ptr = kb.ptr_add(acc, mi * n_wg // 2)
                    kb.call(f"emmy::wgmma::tile<{n_wg}, {g.bk}, {rows[0]}, {rows[1]}>", [*operands, acc_ptr])
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

    def settle(self, kb: KB, accs) -> None:
        """After the k loop's last wgmma wait, before the epilogue reads the accumulators: each
        written in place (emmy::wgmma::settle), so that ptxas cannot read one before the wait."""
        if self.g.wgmma:
            for acc in accs:
                kb.call(f"emmy::wgmma::settle<{self.g.acc_per_thread}>", [acc])

    # -- accumulator fragments: (row in tile, col in tile, acc index, lanes) --------------------------
    def wgmma_base_row(self, kb: KB, tid) -> SSAValue:
        """The first tile row of this thread's warp in its warpgroup's wgmma fragments (each
        warpgroup owns mi slices of 64 rows, each warp 16 rows of a slice; with slices = cols,
        the first tile column)."""
        warp_in = kb.rem(kb.div(tid, 32), 4)
        wgi = kb.div(tid, 128)
        return kb.add(kb.mul(kb.mul(wgi, self.g.mi), 64), kb.mul(warp_in, 16))

    def _transposed_fragments(self, kb: KB, tid, body, cols: tuple[int, int] | None) -> None:
        """fragments() with slices = cols: the wgmma's rows are the tile's columns (64 * mi of them
        per warpgroup) and its columns the tile's rows (all block_m), so each accumulator is one
        column of its own: body(row_local, col_local, acc_index, 1) for each, the two of a pair on
        consecutive rows. `cols` = (lo, hi): a thread's columns are known only at run time, so the
        calls outside them are skipped by a branch."""
        g = self.g
        lane = kb.rem(tid, 32)
        gq, tq = kb.div(lane, 4), kb.rem(lane, 4)
        nt = g.bm // 8
        base_col = self.wgmma_base_row(kb, tid)  # the wgmma's row of the warp: a tile column
        with kb.for_(0, g.mi, 1, unroll=0, name="mi") as mi:
            with kb.for_(0, 2, 1, unroll=0, name="h") as h:
                col = fragment_row(kb, base_col, gq, mi, 64, h)
                inside = None if cols is None else kb.and_(kb.cmp("sge", col, cols[0]), kb.lt(col, cols[1]))
                with kb.if_(inside) if inside is not None else nullcontext():
                    with kb.for_(0, nt, 1, unroll=0, name="ni") as ni:
                        for j in range(2):
                            row = kb.add(kb.add(kb.mul(ni, 8), kb.mul(tq, 2)), j)
                            idx = kb.add(kb.add(kb.mul(kb.add(kb.mul(mi, nt), ni), 4), kb.mul(h, 2)), j)
                            body(row, col, idx, 1)

    def fragments(self, kb: KB, tid, body, cols: tuple[int, int] | None = None) -> None:
        """Call body(row_local, col_local, acc_index, lanes) for every accumulator group of this
        thread (lanes consecutive columns at acc_index, acc_index + 1, ...), inside unrolled loops;
        with wgmma, `cols` = (lo, hi) keeps the tile's columns lo <= c < hi (multiples of 8). With
        slices = cols each group is one column (`_transposed_fragments`)."""
        g = self.g
        if g.wgmma and g.cols:
            self._transposed_fragments(kb, tid, body, cols)
        elif g.wgmma or g.workers == "mma_sync":
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
