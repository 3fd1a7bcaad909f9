"""Contractions, which tiles a block computes: grid order, persistent loops, stream-K runs.

`TileOrderMixin` of the `ContractionBuilder` (emmy/lowering/contraction.py): a block's tile with
`schedule = grid` (blockIdx, or the `group_m` order over clusters), the loop of a persistent
block over its tiles, stream-K's whole tiles then its run of k-steps across tile boundaries, and
the fix-up of a tile shared by several blocks (parts published to a workspace, counted on the
tile's counter, added by the last block).
"""

from __future__ import annotations


from xdsl.dialects.builtin import IndexType, VectorType, f32
from xdsl.ir import SSAValue

from emmy.lowering.common import EPILOGUE_BARRIER
from emmy.lowering.kb import KB
from emmy.schedule.reduction import largest_divisor_pow2
from emmy.tuning.knobs import grouped_tile


class TileOrderMixin:
    """Methods of ContractionBuilder (see the module docstring)."""

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
        if g.pairs_along == "n":  # the pairs are neighbours along x, one row of tiles
            if g.group_m == 1:
                return by, bx
            nb, mb, c = -(-self.N // g.bn), -(-self.M // g.bm), g.cluster
            unit = kb.add(kb.mul(by, nb // c), kb.div(bx, c))  # the pair's place in launch order
            m_tile, n_pair = grouped_tile(kb, unit, mb, nb // c, g.group_m)
            return m_tile, kb.add(kb.mul(n_pair, c), kb.rem(bx, c))
        if g.group_m == g.cluster:
            return by, bx
        nb, mb, c = -(-self.N // g.bn), -(-self.M // g.bm), g.cluster
        unit = kb.add(kb.mul(kb.div(by, c), nb), bx)  # the cluster's place in launch order
        mu, n_tile = grouped_tile(kb, unit, mb // c, nb, g.group_m // c)
        return (kb.add(kb.mul(mu, c), kb.rem(by, c)) if c > 1 else mu), n_tile

    def tile_loop(self, kb: KB, origin, body, turn: tuple[int, int] = (0, 1)) -> None:
        """Call body(m0, n0, batch, part, kt0, kt1, base, later, more, run) for the tiles this
        block computes (run: see stream_k_loop; None otherwise). `origin` given (schedule =
        grid): the block's one tile, base 0, later and more None. With schedule = stream_k,
        stream_k_loop. Otherwise (schedule = persistent, split_k = 1) the block takes tiles
        blockIdx.x, blockIdx.x + gridDim.x, ... of the tile order (see grouped_tile); `base` counts the
        k-steps of its earlier tiles (pipeline slots and mbarrier phases go on from there),
        `later` is true past the block's first tile, `more` when another tile follows.
        `turn` = (w, n): only every n-th of the block's tiles from its w-th (epilogue =
        pingpong: consumer warpgroup w of n); `base`, `later` and `more` still count all of
        them (the producer stages them all, in order)."""
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
        w, n = turn
        first = bid if w == 0 else kb.add(bid, w * blocks)
        with kb.for_(first, tiles, n * blocks, name="t") as t:
            if g.pairs_along == "n":
                m0, n0, batch = self.pair_origin(kb, t)
            elif g.group_m > 1:
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

    def pair_origin(self, kb: KB, t) -> tuple[SSAValue, SSAValue, SSAValue | int]:
        """(m0, n0, batch) of this block's tile of pair t (pairs along n, schedule = persistent):
        the pairs of column tiles in the plain order along n or in groups of group_m row tiles
        (grouped_tile over pairs), the block's rank in its cluster (blockIdx.y) picking its
        column of the pair."""
        g = self.g
        nb, mb, c = -(-self.N // g.bn), -(-self.M // g.bm), g.cluster
        units = nb * mb // c
        m_tile, n_pair = grouped_tile(kb, kb.rem(t, units), mb, nb // c, g.group_m)
        n0 = kb.mul(kb.add(kb.mul(n_pair, c), kb.block_id("y")), g.bn)
        m0 = kb.mul(m_tile, g.bm)
        n0.name_hint, m0.name_hint = "n0", "m0"
        return m0, n0, kb.div(t, units) if self.b_axes else 0

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
        vec = largest_divisor_pow2(g.acc_per_thread, 4)
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
        vec = largest_divisor_pow2(self.g.acc_per_thread, 4)
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
        vec = largest_divisor_pow2(self.g.acc_per_thread, 4)
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
