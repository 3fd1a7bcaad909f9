"""Contractions, warp-specialized main loop (`workers = wgmma_ws`): producer and consumers.

`WarpSpecializedMixin` of the `ContractionBuilder` (emmy/lowering/contraction.py): one producer
warpgroup fills the pipeline slots (cp.async, or tensor-map copies with `copy = tma`, multicast
to a cluster's pair with `cluster = 2`), the consumer warpgroups multiply and free the slots
through full/empty mbarriers (`specialized_loop`); computed A sides rewritten in place in the A
slot (`InPlaceA`) or from registers, and the row statistics summed from the staged values. With
`epilogue = pingpong` the two consumer warpgroups take the persistent block's tiles in turn,
each a whole tile (see specialized_loop).
"""

from __future__ import annotations


from xdsl.dialects.builtin import IndexType

from emmy.diagnostics import EmmyError
from emmy.dialects.loop import LoadOp
from emmy.lowering.common import (
    EPILOGUE_BARRIER,
    ORDER_BARRIER,
    OWN_EPILOGUE_BARRIER,
    PERSISTENT_BARRIER,
    TURN_BARRIER,
)
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter
from emmy.lowering.staging import AStatistics, InPlaceA, Leaf, Stager, direct_source
from emmy.lowering.tma import MapOperand, tensor_view


class WarpSpecializedMixin:
    """Methods of ContractionBuilder (see the module docstring)."""

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
        # the shared tile's box is this block's share of it (pairs along m share B, along n A)
        a_box, b_box = (g.bm // g.cluster, g.bn) if g.pairs_along == "n" else (g.bm, g.bn // g.cluster)
        if a_load is not None:
            view = tensor_view(a_load, m_axis, k, self.ext, a_box, g.slab, planes=True)
            if view is not None:
                out.append(MapOperand("a", 0, a_load, view, a_load.tensor.index))
        for c, contraction in enumerate(self.cs):
            if contraction.b_value is None:
                continue
            src = direct_source(em, contraction.b_value, kset, k)
            if isinstance(src, Leaf):
                view = tensor_view(src.load, n_axis, k, self.ext, b_box, g.slab)
                if view is not None:
                    out.append(MapOperand("b", c, src.load, view, src.load.tensor.index))
        return out

    def tma_issue(self, kb: KB, kt, slot, m0, n0, bar, sa, sbs, a_elems) -> None:
        """One producer thread: announce the bytes of k-step `kt`'s tensor-map copies on the
        slot's `full` barrier, then issue them (one per operand tile and 64-element slab)."""
        g = self.g
        maps = self.tma_operands()
        # the slot's bytes, whoever copies them (with clusters the peers multicast slices of the shared tile)
        nbytes = sum((g.bm if m.side == "a" else g.bn) * g.bk * 2 for m in maps)
        kb.call("emmy::mbar_arrive_expect_tx", [bar, kb.idx(nbytes)])
        rank = kb.call("emmy::cluster_rank", [], IndexType()) if g.cluster > 1 else None
        shared = "a" if g.pairs_along == "n" else "b"  # the side whose tile the pair shares
        for m, map_arg in zip(maps, self.map_args):
            if m.side == "a":
                base, rows, row0 = kb.ptr_add(sa, kb.mul(slot, a_elems)), g.bm, m0
            else:
                base, rows, row0 = kb.ptr_add(sbs[m.index], kb.mul(slot, g.b_stride)), g.bn, n0
            part = None
            if m.side == shared and rank is not None:  # this block's slice of the shared tile
                part = rows // g.cluster
                row0 = kb.add(row0, kb.mul(rank, part))
                base = kb.ptr_add(base, kb.mul(rank, part * g.slab))
            mask = kb.idx((1 << g.cluster) - 1) if part is not None else None
            for s_ in range(g.bk // g.slab):
                col = kb.add(kb.mul(kt, g.bk), s_ * g.slab)
                dst = kb.ptr_add(base, s_ * rows * g.slab)
                if m.view.planes.data > 1:  # (the A side only: a column within its plane)
                    width = m.view.cols.data
                    at = [dst, map_arg, kb.rem(col, width), row0, kb.div(col, width), bar]
                    if part is None:
                        kb.call("emmy::tma_load_3d", at)
                    else:
                        kb.call("emmy::tma_load_3d_multicast", [*at, mask])
                elif part is None:
                    kb.call("emmy::tma_load_2d", [dst, map_arg, col, row0, bar])
                else:
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
        """The tensor whose staged A tiles the consumer warpgroups sum the row statistics from,
        read-only, while their wgmmas run (`KernelInfo.ws_row_stats` is "a_tiles": A is a plain
        copy of it and every prologue reduction sums or maxes its elements over the k axes,
        RMSNorm's sum of squares once its weight is folded into B, see loop-hoist-params).
        None otherwise."""
        if self.info.ws_row_stats != "a_tiles" or self.chunk != 8:
            return None
        em = BodyEmitter(None, self.op, {}, [])  # analysis only
        src = direct_source(em, self.cs[0].a_value, frozenset(self.k_axes), self.k_last)
        return src.load if isinstance(src, Leaf) else None

    def specialized_loop(self, kb, em, tid, origin, stat_at, sa, sbs, bars, accs, a_elems, b_elems, ws_ptr, rs=None, inplace=None, a_loads=None, stats_leaf=None, consumer_stat_at=None) -> None:
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
        consumers run the epilogue of the last one, which then frees its last slot too.

        With epilogue = pingpong (persistent, two consumer warpgroups) warpgroup w takes every
        other one of the block's tiles from its w-th (`tile_loop(turn=(w, 2))`, the code emitted
        once per warpgroup with its own thread index), multiplies the whole tile and stores it
        through its own staged room (barrier OWN_EPILOGUE_BARRIER + w). Before its k loop it
        waits for its turn (barrier TURN_BARRIER + w; warpgroup 0's first tile does not wait) and
        after its last slot wait hands the turn to the other, where a next tile exists: the
        slots' full barriers are waited on in the order they are filled, so that no parity
        wait can pass on an older phase, and one warpgroup's epilogue runs beside the other's
        wgmmas. A slot is then freed by one warpgroup's four warps."""
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
        # a slot is free once every consumer warp (with clusters: of every block of the
        # cluster, whose slices of the shared tile it also receives) has released it, one arrival a warp
        releases = g.cluster * g.tile_threads // 32
        if g.pingpong and (rs is not None or inplace is not None or stats_leaf is not None):
            raise EmmyError(
                f"tile.kernel @{self.info.name}: epilogue=pingpong needs A copied as it is and no row statistics "
                "summed in the kernel (each consumer warpgroup takes whole tiles); use epilogue=together"
            )
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
                kb.call("emmy::warp_arrive", [empty(slot)])
        budgets = g.register_budgets  # (three consumers: the producer hands registers over)
        with kb.if_(kb.cmp("sge", tid, consumers)):
            if budgets is not None:
                kb.call(f"emmy::regs_lower<{budgets[0]}>")
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
            if budgets is not None:
                kb.call(f"emmy::regs_raise<{budgets[1]}>")

            def consume(m0, n0, batch, part, kt0, kt1, base, later, more, run=None, tid=tid, w=None):
                """One tile; `w`: epilogue = pingpong, the warpgroup whose tile it is (`tid`
                then counts within it)."""
                stat = consumer_stat_at(m0, batch, tid) if consumer_stat_at else stat_at(m0, batch)
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
                if w is not None:  # pingpong: wait for the other warpgroup to have waited on its slots
                    turn = lambda: kb.call(f"emmy::named_barrier<{consumers}>", [kb.idx(TURN_BARRIER + w)])  # noqa: E731
                    if w == 0:
                        with kb.if_(later):
                            turn()
                    else:
                        turn()
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
                if w is not None:  # its turn is over: the next tile's warpgroup may wait on the slots
                    with kb.if_(more):
                        kb.call(f"emmy::named_barrier_arrive<{consumers}>", [kb.idx(TURN_BARRIER + 1 - w)])
                kb.call("emmy::wgmma::wait<0>")
                self.settle(kb, accs)
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
                if w is not None:  # pingpong: the warpgroup's own tile, staged in its own room
                    sync = lambda: kb.call("emmy::named_barrier<128>", [kb.idx(OWN_EPILOGUE_BARRIER + w)])  # noqa: E731
                elif staggered:
                    wg = kb.div(tid, 128)
                    sync = lambda: kb.call("emmy::named_barrier<128>", [kb.add(wg, OWN_EPILOGUE_BARRIER)])  # noqa: E731
                    with kb.if_(kb.cmp("eq", wg, 1)):
                        kb.call(f"emmy::named_barrier<{consumers}>", [kb.idx(ORDER_BARRIER)])
                else:
                    sync = lambda: kb.call(f"emmy::named_barrier<{consumers}>", [kb.idx(EPILOGUE_BARRIER)])  # noqa: E731
                if run is not None:  # stream_k: a tile shared with other blocks is finished by the last
                    go = self.stream_k_fixup(kb, tid, kt0, kt1, run, accs, ws_ptr, sync)
                    with kb.if_(go):
                        staged = self.epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, None, sync)
                        if staged:  # sC is read before the next tile writes it
                            sync()
                else:  # (stream_k's whole tiles: its workspace is not split_k's)
                    staged = self.epilogue(
                        kb, em, tid, m0, n0, batch, part, accs, stat, None if g.stream_k else ws_ptr, sync, w or 0,
                    )
                    if g.persistent and staged:  # sC is read before the next tile writes it
                        sync()
                if staggered:
                    with kb.if_(kb.cmp("eq", wg, 0)):
                        kb.call(f"emmy::named_barrier_arrive<{consumers}>", [kb.idx(ORDER_BARRIER)])
                if rs is not None and more is not None:  # rs is read: the producer may write the next
                    with kb.if_(more):
                        kb.call(f"emmy::named_barrier_arrive<{g.threads}>", [kb.idx(PERSISTENT_BARRIER)])

            if g.pingpong:  # each warpgroup its own tiles, in turn (its thread index within it)
                for w in range(2):
                    with kb.if_(kb.cmp("eq", kb.div(tid, 128), w)):
                        own = kb.sub(tid, 128 * w) if w else tid
                        self.tile_loop(kb, origin, lambda *a, own=own, w=w: consume(*a, tid=own, w=w), turn=(w, 2))
            else:
                self.tile_loop(kb, origin, consume)
        if g.cluster > 1:  # no block leaves while its peers may still arrive on its barriers
            kb.call("emmy::cluster_sync")
