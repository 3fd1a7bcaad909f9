"""Contractions, epilogues: from the f32 accumulators to the stored outputs.

`EpilogueMixin` of the `ContractionBuilder` (emmy/lowering/contraction.py): the loop body's
scalar code after the contractions on the accumulators, staged through shared memory for
16-byte stores (`staged_epilogue`, or with `result_staged_epilogue` the bf16 results, or the bf16
parts computed from the accumulators alone where the stores read a tensor), or
straight from the fragments; split_k's parts written to a workspace and added by the last block
(`last_block_epilogue`) or by `<name>_combine` (`build_combine`). Where the plan's `qk` says so
(an attention's fusion = epilogue), the staged bf16 results of Q's and K's heads are rewritten on
the way out by the attention's own Q/K code (`qk_stores`).
"""

from __future__ import annotations


from xdsl.dialects.builtin import IndexType, VectorType, bf16, f32

from emmy.dialects import kernel as K
from emmy.lowering.common import EPILOGUE_BARRIER, decompose
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter
from emmy.schedule import qk_epilogue
from emmy.schedule.contraction_smem import RESULT_PAD, STAGE_PAD
from emmy.schedule.reduction import largest_divisor_pow2


def _source_loads(body, name: str, source) -> list:
    """The loads of the attention's rows (`source`) in the tree of its operand `name`."""
    p = body.q if name == "q" else body.k
    return [ld for ld in qk_epilogue.tree_loads(p) if ld.tensor is source]


def _packed(kb: KB, vals: list, elem):
    """One value to store: `vals` as a vector, or the one value itself (slices = cols gives
    fragments of one column)."""
    return vals[0] if len(vals) == 1 else kb.pack(vals, VectorType(elem, [len(vals)]))


class EpilogueMixin:
    """Methods of ContractionBuilder (see the module docstring)."""

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
        if self.stages_results() or self.info.staged_parts:
            values = [st.value for st in self.stores] if self.stages_results() else list(self.info.staged_parts)
            self.result_staged_epilogue(kb, em, tid, m0, n0, batch, accs, stat, sync, offset, width, values)
            return
        pitch = width + STAGE_PAD
        per_acc = g.bm * pitch
        tiles = kb.shared(f32, g.nc * per_acc, offset, 16, "sC")
        per_row = width // 8
        for c0 in range(0, g.bn, width):
            sync()

            def put(r_local, c_local, idx, lanes, c0=c0):
                for c, acc in enumerate(accs):
                    vals = [kb.load(acc, kb.add(idx, j)) for j in range(lanes)]
                    at = kb.add(kb.mul(r_local, pitch), kb.sub(c_local, c0))
                    kb.store(_packed(kb, vals, f32), tiles, kb.add(at, c * per_acc))

            self.fragments(kb, tid, put, None if width == g.bn else (c0, c0 + width))
            sync()
            with kb.for_(0, g.bm * per_row // g.tile_threads, 1, unroll=0, name="c") as it:
                cidx = kb.add(kb.mul(it, g.tile_threads), tid)
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
                overrides.update(self.stat_overrides(stat, r_local, self.info.epilogue_reads_prologue))
                self.emit_stores(kb, em, row, col, batch, mask, 8, overrides)

    def stage_fragments(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, accs, stat, values, room, c0: int, width: int) -> None:
        """Evaluate `values` (loop-body values of the accumulators, row statistics, axes and
        constants) on this thread's accumulator fragments, two columns at a time, and store each,
        rounded to bf16, into its tile of `room` = (tiles, pitch, per): value k's tile starts k * per
        elements in, its rows pitch apart, and holds columns c0 to c0 + width of the block's tile."""
        tiles, pitch, per = room
        n_last = self.n_axes[-1]

        def put(r_local, c_local, idx, lanes):
            overrides = {c.result: [kb.load(acc, kb.add(idx, j)) for j in range(lanes)] for c, acc in zip(self.cs, accs)}
            overrides.update(self.stat_overrides(stat, r_local, self.info.epilogue_reads_prologue))
            coords = self._row_coords(kb, kb.add(m0, r_local), batch)
            coords.update(self._col_coords(kb, kb.add(n0, c_local)))
            scope = em.scope(coords, lane_axis=n_last, lanes=lanes, overrides=overrides)
            at = kb.add(kb.mul(r_local, pitch), kb.sub(c_local, c0))
            for k, value in enumerate(values):
                vals = [kb.to_type(v, bf16) for v in scope.value(value)]
                kb.store(_packed(kb, vals, bf16), tiles, kb.add(at, k * per))

        self.fragments(kb, tid, put, None if width == self.g.bn else (c0, c0 + width))

    def result_staged_epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, accs, stat, sync, offset: int, width: int, values) -> None:
        """staged_epilogue with bf16 `values` staged: the stores' values (stages_results()) or,
        where the stores read a tensor, their parts computed from the accumulators alone
        (KernelInfo.staged_parts: a projection's rounded product, before the residual is added).
        Each thread evaluates them on its fragments (two columns at a time) into one bf16 tile
        per value (rows padded by 8 bf16: a warp's 4-byte writes of 8 rows x 4 column pairs hit
        32 banks), then takes 8 consecutive columns of a row at a time and evaluates the stores
        with the values read back: 16-byte stores, and 16-byte reads of a residual. Staged parts
        are half the shared-memory bytes of the f32 accumulators, and give the same values."""
        g = self.g
        pitch = width + RESULT_PAD
        per_store = g.bm * pitch
        tiles = kb.shared(bf16, len(values) * per_store, offset, 16, "sC")
        per_row = width // 8
        for c0 in range(0, g.bn, width):
            sync()
            self.stage_fragments(kb, em, tid, m0, n0, batch, accs, stat, values, (tiles, pitch, per_store), c0, width)
            sync()
            # epilogue = staggered: each warpgroup stores the rows its fragments hold (64 * mi)
            own_rows = g.staggered
            rows, threads = (64 * g.mi, 128) if own_rows else (g.bm, g.tile_threads)
            first_row = kb.mul(kb.div(tid, 128), rows) if own_rows else 0
            ltid = kb.rem(tid, 128) if own_rows else tid
            def each_row(body, skip=(), rows=rows, threads=threads, first_row=first_row, ltid=ltid, c0=c0):
                """The loop over this thread's pieces of 8 columns: body(row, col, mask, overrides,
                room) for each (room: the staged tiles and where its row is in them; the staged
                values in `skip`, which the body computes otherwise, are not read back)."""
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
                    for k, value in enumerate(values):
                        if value not in skip:
                            vec = kb.load(tiles, kb.add(at, k * per_store), VectorType(bf16, [8]))
                            overrides[value] = [kb.extract(vec, j) for j in range(8)]
                    body(row, col, mask, overrides, (tiles, r_local, kb.add(n0, c0), pitch, per_store))

            if self.g.qk is None:
                each_row(lambda row, col, mask, overrides, room: self.emit_stores(kb, em, row, col, batch, mask, 8, overrides))
            elif threads % per_row == 0:  # a thread's columns are the same in every round
                col = kb.add(n0, kb.add(kb.mul(kb.rem(ltid, per_row), 8), c0))
                self.qk_loops(kb, em, col, batch, each_row)
            else:
                each_row(lambda row, col, mask, overrides, room: self.qk_stores(kb, em, row, col, batch, mask, overrides, room))

    def qk_stores(self, kb: KB, em: BodyEmitter, row, col, batch, mask, overrides, rows) -> None:
        """The stores of 8 columns of one row (result_staged_epilogue) where the plan's `qk` has an
        attention's Q and K computed here (emmy.schedule.qk_epilogue): columns of a Q or K head
        get the attention's Q/K code evaluated on this tile's bf16 results in shared memory (its
        loads of the rows read the tile: a head's row sum and its rotary partners are in it, as
        the plan's legality saw to), with the attention's other inputs (norm weights, rotary
        tables) from the kernel's extra arguments; other columns their plain results: qk_loops'
        branches, each around this one row."""
        self.qk_loops(kb, em, col, batch, lambda body, skip=(): body(row, col, mask, overrides, rows))

    def qk_loops(self, kb: KB, em: BodyEmitter, col, batch, each_row) -> None:
        """qk_stores where a thread's 8 columns `col` are the same in every round of the epilogue's
        loop (its threads a multiple of a row's pieces): the branch on which operand's head they
        are in (a Q head, a K head: `_qk_row`; else V's plain columns) is taken once, around a
        loop of its own (`each_row(body, skip)` emits the loop, or one row), so that no
        round's loads sit behind a branch of their own: the norm weights (the same columns every
        round) load once, and the rotary tables of several rows can be in flight together. The
        fifteenth session's epilogue, a branch each round, took 145 us for the q/k/v product at
        3000 tokens against 38 without it (docs/02-passes-and-rewrite-rules.md)."""
        aem, heads = self._qk_heads(kb, col)
        handled = None
        for o, p, inside, coords, d0 in heads:
            handled = inside if handled is None else kb.or_(handled, inside)
            with kb.if_(inside):  # (the operand's values replace the staged raw ones it reads)
                each_row(lambda row, c, mask, overrides, room, o=o, p=p, coords=coords, d0=d0:
                         self._qk_row(kb, em, aem, o, p, coords, d0, row, c, batch, mask, overrides, room),
                         skip=(self.stores[self._qk_store()].value,))
        assert handled is not None
        with kb.if_(kb.cmp("eq", kb.select(handled, kb.idx(1), kb.idx(0)), 0)):  # V's columns, plain
            each_row(lambda row, c, mask, overrides, room: self.emit_stores(kb, em, row, c, batch, mask, 8, overrides))

    def _qk_store(self) -> int:
        """Which of the kernel's stores writes the rows the attention reads (the plan's `qk`)."""
        (k_store,) = [k for k, st in enumerate(self.stores) if st.output_index == self.g.qk.result]
        return k_store

    def _qk_heads(self, kb: KB, col):
        """The attention's emitter (its side inputs bound to the kernel's extra arguments) and, per
        computed operand of the plan's `qk`, what the head holding column `col` says: (operand,
        its producer, whether the column is in one of the operand's heads, the batch/head
        coordinates of a row reading that head, the column within the head)."""
        task = self.g.qk
        epi = task.facts
        D = epi.head_dim
        att = task.attention
        block = att.regions[0].block
        aem = BodyEmitter(kb, att, {block.args[i]: p for (i, _), p in zip(self.qk_inputs(), self.qk_ptrs)}, [])
        head = kb.div(col, D)
        producers = {"q": task.body.q, "k": task.body.k}
        heads = []
        for o in epi.operands:
            first, group = o.progression
            inside = kb.and_(kb.cmp("sge", head, first), kb.lt(head, first + len(o.written)))
            b = kb.mul(kb.sub(head, first), group)  # a batch/head row reading this head (when inside)
            coords = decompose(kb, b, list(epi.batch_axes), aem.extents) if epi.batch_axes else {}
            heads.append((o, producers[o.name], inside, coords, kb.sub(col, kb.mul(head, D))))
        return aem, heads

    def _qk_row(self, kb: KB, em: BodyEmitter, aem: BodyEmitter, o, p, coords, d0, row, col, batch, mask, overrides, rows) -> None:
        """The stores of 8 columns of one row inside a head of operand `o` (the caller branched on
        it): the operand's code on the staged tile, stored where the raw values would have gone.

        A row statistic over the head (RMSNorm's sum of squares) is summed by the D / 8 threads
        that hold the head's row, 8 columns each, then added across them with shuffles among
        those lanes alone (`emmy::lane_group_sum<D / 8>`: consecutive threads take consecutive
        8-column pieces of a row, and block_n is whole heads, so a head's pieces lie in D / 8
        aligned lanes of one warp, which all take this branch). A read of the rows takes its
        column within the thread's own head of the tile (its offset modulo D), so that no read
        leaves the tile."""
        task = self.g.qk
        D = task.facts.head_dim
        source = task.attention.regions[0].block.args[task.facts.source]
        tiles, r_local, n0, pitch, per_store = rows
        k_store = self._qk_store()
        row_ok = kb.lt(row, self.M) if self.M % self.g.bm else None
        head_col = kb.sub(col, d0)  # the head's first column
        row_base = kb.add(kb.add(kb.mul(r_local, pitch), k_store * per_store), kb.sub(head_col, n0))

        def from_tile(ld):
            def hook(scope):
                cols = scope.value(ld.indices[1])
                if scope.lane_axis is not None and len(cols) == scope.lanes == 8:
                    a, m = aem.lane_form(ld.indices[1], scope.lane_axis, 8)
                    if a == 1 and m % 8 == 0:  # 8 consecutive columns: one 16-byte read
                        vec = kb.load(tiles, kb.add(row_base, kb.rem(cols[0], D)), VectorType(bf16, [8]))
                        return [kb.extract(vec, j) for j in range(8)]
                return [kb.load(tiles, kb.add(row_base, kb.rem(c, D)), bf16) for c in cols]
            return hook

        hooks = {ld: from_tile(ld) for ld in _source_loads(task.body, o.name, source)}
        coords = {**coords, o.row_axis: row}
        guards = frozenset((o.row_axis,))  # row_ok is for rows past M: the norm weights load unmasked
        group_lanes = D // 8
        sums = {}
        if p.stats and group_lanes in (1, 2, 4, 8, 16, 32) and self.g.threads % group_lanes == 0 and p.stat_len == D:
            s = aem.scope({**coords, p.stat_axis: d0}, lane_axis=p.stat_axis, lanes=8, mask=row_ok, load_hooks=hooks,
                          guards=guards)
            terms = [kb.to_f32(v) for v in s.value(p.stats[0].yielded)]
            part = terms[0]
            for t in terms[1:]:
                part = kb.addf(part, t)
            total = kb.call(f"emmy::lane_group_sum<{group_lanes}>", [part], f32)
            sums = {st.result: [total] for st in p.stats}
        scope = aem.scope({**coords, o.col_axis: d0}, lane_axis=o.col_axis, lanes=8, mask=row_ok,
                          overrides=sums, load_hooks=hooks, guards=guards)
        vals = [kb.to_type(v, bf16) for v in scope.value(p.value)]
        self.emit_stores(kb, em, row, col, batch, mask, 8, {**overrides, self.stores[k_store].value: vals})

    def epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, part, accs, stat, ws_ptr, sync, region: int = 0) -> bool:
        """The epilogue of the computing threads: staged through shared memory where the plan's
        layout gives it room (`epilogue_width` columns at `epilogue_offset`, or with epilogue =
        pingpong warpgroup `region`'s tile after it; `sync` waits for all threads of the
        tile), else straight from the fragments (or, with `ws_ptr`, into split_k's workspace).
        Returns whether it was staged."""
        if ws_ptr is not None and self.g.last_block:
            self.last_block_epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, ws_ptr, sync)
            return False
        layout = self.g.smem
        width = layout.epilogue_width if ws_ptr is None else None
        if width is not None:
            offset = layout.epilogue_offset + region * layout.epilogue_bytes
            self.staged_epilogue(kb, em, tid, m0, n0, batch, accs, stat, sync, offset, width)
            return True
        else:
            self.fragment_epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, ws_ptr)
            return False

    def last_block_epilogue(self, kb: KB, em: BodyEmitter, tid, m0, n0, batch, part, accs, stat, ws_ptr, sync) -> None:
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
        vec = largest_divisor_pow2(A, 4)
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
            self.epilogue(kb, em, tid, m0, n0, batch, part, accs, stat, None, sync)

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
        overrides.update(self.stat_overrides(stat, r_local, self.info.epilogue_reads_prologue))
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
