"""Operand staging for contraction kernels: what an operand tile is made of, and the code that
fills the pipeline slots with it.

- Operand analysis: `direct_source` finds operands that are plain bf16 loads contiguous along k
  (or selects between such loads, e.g. concatenated weights: `Leaf`, `Pick`), which are copied
  with cp.async; `same_expr` (emmy.analysis.operands) compares loop-body values structurally.
- `Stager` stages the A and B tiles of one k-step into a slot: cp.async for direct sources,
  computed values otherwise (from global loads, from raw copies in shared memory, or, for the
  producer warpgroup of `wgmma_ws`, from registers loaded a k-step ahead).
- `InPlaceA` (wgmma_ws): each consumer warpgroup computes its rows of the A tile in place from
  the raw copy the producer made; `RowStats` sums the row statistics on the way.

The `ContractionBuilder` of emmy/lowering/contraction.py owns the kernels; these classes read its
fields (`cb.g`, the kernel's `ContractionPlan` from emmy/schedule/contraction.py; `cb.cs`,
extents, axes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, IndexType, TensorType, VectorType, bf16, f32
from xdsl.ir import SSAValue

from emmy.analysis.operands import same_expr
from emmy.lowering.common import decompose
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter, Scope
from emmy.diagnostics import EmmyError
from emmy.dialects.loop import LoadOp

if TYPE_CHECKING:
    from emmy.lowering.contraction import ContractionBuilder

# ---------------------------------------------------------------------------------------------
# Operand analysis
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    load: LoadOp


@dataclass(frozen=True)
class Pick:
    cond: SSAValue
    a: object  # Leaf | Pick
    b: object


def _strip_ext(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, arith.ExtFOp):
        v = v.owner.input
    return v


def direct_source(em: BodyEmitter, v: SSAValue, k_axes: frozenset[str], k_last: str):
    """A tree of selects over bf16 loads contiguous along k (copyable with cp.async), or None."""
    v = _strip_ext(v)
    op = v.owner
    if isinstance(op, LoadOp):
        t = op.tensor.type
        if not isinstance(t, TensorType) or not isinstance(t.element_type, BFloat16Type):
            return None
        contiguous, aligned = em.access(t, op.indices, k_last, 8)
        return Leaf(op) if contiguous and aligned else None
    if isinstance(op, arith.SelectOp):
        # e.g. concatenated weights: row n of the first tensor, or row n - N0 of the second
        if em.dom(op.cond) & k_axes:
            return None
        a = direct_source(em, op.lhs, k_axes, k_last)
        b = direct_source(em, op.rhs, k_axes, k_last) if a is not None else None
        if a is None or b is None:
            return None
        return Pick(op.cond, a, b)
    return None


# ---------------------------------------------------------------------------------------------
# Staging operand tiles into shared memory
# ---------------------------------------------------------------------------------------------


class Stager:
    """Stages the A tile and the B tile(s) of one k-step into a pipeline slot.

    Chunks of `chunk` consecutive k (16 bytes) are spread over the block's threads; the chunk
    loop is unrolled here, so register-staged values computed before the tensor-core step can be
    stored after it (`finish`)."""

    def __init__(
        self, cb: ContractionBuilder, kb: KB, em: BodyEmitter, tid, m0, n0, batch, stat, raw_bufs=(),
        threads: int | None = None, leaves: list | None = None, a_copy: LoadOp | None = None,
        skip: set | frozenset = frozenset(),
    ):
        self.threads = threads or cb.g.threads  # the threads that stage (tid counts among them)
        self.skip = skip  # ("a", 0) / ("b", c): tiles copied by someone else (tensor maps)
        # (load, rows) of a computed A side: with `leaves`, stage() leaves the A side to the
        # caller, which loads a k-step ahead (prefetch_a) and computes it later (store_a)
        self.leaves = list(leaves or ())
        self.partials = None  # row-statistic partial sums (start_stats)
        self.a_copy = a_copy  # copy this tensor's tile into the A slot (A is computed in place)
        self.raw_bufs = list(raw_bufs)  # (load, rows, shared buffer): raw copies for a computed A
        self.cb = cb
        self.kb = kb
        self.em = em
        self.tid = tid
        self.m0, self.n0, self.batch = m0, n0, batch
        self.stat = stat
        kset = frozenset(cb.k_axes)
        c0 = cb.cs[0]
        for c in cb.cs[1:]:
            if len(c.a_factors) != len(c0.a_factors) or not all(
                same_expr(x, y) for x, y in zip(c.a_factors, c0.a_factors)
            ):
                raise EmmyError(
                    f"tile.kernel @{cb.info.name}: the contractions do not share their A side; only shared-A (dual) contractions are supported"
                )
        self.a_value = c0.a_value
        self.b_values = [c.b_value for c in cb.cs]
        direct_ok = cb.chunk == 8
        self.a_src = direct_source(em, self.a_value, kset, cb.k_last) if direct_ok and self.a_value is not None else None
        self.b_srcs = [
            direct_source(em, v, kset, cb.k_last) if direct_ok and v is not None else None for v in self.b_values
        ]

    def stage(self, kt, slot, sa, sbs, pred, a_elems, b_elems, *, deferred: bool):
        """Issue the copies of k-step `kt` into `slot`. Register-staged operands: with
        deferred=True their values are computed now (into a register array) and stored to shared
        memory by finish(pending), after the tensor-core step."""
        cb, kb = self.cb, self.kb
        g = cb.g
        pending: list = []
        ops = []
        if self.raw_bufs:
            for load, rows, buf in self.raw_bufs:
                ops.append(("a", buf, rows * g.bk, rows, Leaf(load), cb.cs[0], None))
        elif ("a", 0) in self.skip:
            pass
        elif self.a_copy is not None:
            ops.append(("a", sa, a_elems, g.bm, Leaf(self.a_copy), cb.cs[0], None))
        else:
            ops.append(("a", sa, a_elems, g.bm, self.a_src, cb.cs[0], self.a_value))
        for c, (sb, src, v) in enumerate(zip(sbs, self.b_srcs, self.b_values)):
            if ("b", c) not in self.skip:
                ops.append(("b", sb, b_elems, g.bn, src, cb.cs[c], v))
        for side, sbuf, elems, rows, src, contraction, value in ops:
            base = kb.ptr_add(sbuf, kb.mul(slot, elems))
            if side == "a" and src is None and self.leaves:
                continue  # the caller stages it: prefetch_a, then store_a
            p = self._stage_operand(side, base, rows, src, contraction, value, kt, pred, deferred)
            if p is not None:
                pending.append(p)
        return pending

    def compute_a(self, kt, slot, sa, a_elems) -> None:
        """A tile of k-step `kt` from the raw copies in `slot`: the loop body's A side on 8
        consecutive k per thread and chunk, rounded to bf16, stored in the A tile of `slot`."""
        cb, kb = self.cb, self.kb
        g = cb.g
        chunk = cb.chunk
        steps = self._a_steps()
        base = kb.ptr_add(sa, kb.mul(slot, a_elems))
        raw_slots = [(load, rows, kb.ptr_add(buf, kb.mul(slot, rows * g.bk))) for load, rows, buf in self.raw_bufs]
        vt = VectorType(bf16, [chunk])
        with kb.for_(0, steps, 1, unroll=0, name="c") as it:
            in_tile, r, e, grow, gk, ok = self._a_place(it, kt, None)

            def hook_for(ptr, rows):
                def hook(scope):
                    idx = kb.call(f"emmy::tile_offset<{g.bk}, {rows}>", [r if rows > 1 else kb.idx(0), e], IndexType())
                    vec = kb.load(kb.ptr_add(ptr, idx), 0, vt)
                    return [kb.extract(vec, j) for j in range(chunk)]

                return hook

            hooks = _hooks(cb, [(load, hook_for(ptr, rows)) for load, rows, ptr in raw_slots])
            overrides = self.stat_overrides(r)
            scope = self.em.scope(
                self._coords("a", grow, gk), lane_axis=cb.k_last, lanes=chunk, overrides=overrides, load_hooks=hooks
            )
            vals = self._lanes(scope, self.a_value, cb.cs[0].a_factors)
            zero = kb.fconst(0.0, bf16)
            vals = [kb.select(ok, kb.to_type(v, bf16), zero) if ok is not None else kb.to_type(v, bf16) for v in vals]
            soff = kb.call(f"emmy::tile_offset<{g.bk}, {g.bm}>", [r, e], IndexType())
            kb.store(kb.pack(vals, vt), kb.ptr_add(base, soff), 0, in_tile)

    def finish(self, pending) -> None:
        """Store the register-staged chunks computed by a deferred stage()."""
        kb = self.kb
        g = self.cb.g
        chunk = self.cb.chunk
        for base, rows, regs, steps in pending:
            per_row = g.bk // chunk
            total = rows * per_row
            vt = VectorType(bf16, [chunk]) if chunk > 1 else bf16
            with kb.for_(0, steps, 1, unroll=0, name="c") as it:
                _, in_tile, r, e = self.place(it, per_row, total)
                soff = kb.call(f"emmy::tile_offset<{g.bk}, {rows}>", [r, e], IndexType())
                vec = kb.load(regs, kb.mul(it, chunk), vt)
                kb.store(vec, kb.ptr_add(base, soff), 0, in_tile)

    def place(self, it, per_row: int, total: int):
        """Chunk `it` of this thread's share of a tile of `total` chunks, `per_row` chunks (of
        the chunk's k) per row: (chunk index, in-tile mask or None, row, k offset)."""
        kb = self.kb
        cidx = kb.add(kb.mul(it, self.threads), self.tid)
        in_tile = None if total % self.threads == 0 else kb.lt(cidx, total)
        return cidx, in_tile, kb.div(cidx, per_row), kb.mul(kb.rem(cidx, per_row), self.cb.chunk)

    def _stage_operand(self, side, base, rows, src, contraction, value, kt, pred, deferred):
        cb, kb = self.cb, self.kb
        g = cb.g
        chunk = cb.chunk
        per_row = g.bk // chunk
        total = rows * per_row
        steps = -(-total // self.threads)
        R_total = cb.M if side == "a" else cb.N
        origin = self.m0 if side == "a" else self.n0
        regs = None
        if src is None and deferred:
            regs = kb.local(bf16, steps * chunk, f"stage_{side}")
        vt = VectorType(bf16, [chunk]) if chunk > 1 else bf16
        with kb.for_(0, steps, 1, unroll=0, name="c") as it:
            _, in_tile, r, e = self.place(it, per_row, total)
            grow = kb.add(origin, r)
            gk = kb.add(kb.mul(kt, g.bk), e)
            ok = kb.and_(kb.and_(cb.inside(kb, grow, R_total, rows), cb.inside(kb, gk, cb.K, g.bk)), pred)
            if src is not None:
                # cp.async: addresses from clamped coordinates (always valid), zero-fill when !ok
                soff = kb.call(f"emmy::tile_offset<{g.bk}, {rows}>", [r, e], IndexType())
                dst = kb.ptr_add(base, soff)
                crow = cb.clamp(kb, grow, R_total - 1, R_total, rows)
                ck = cb.clamp(kb, gk, cb.K - chunk, cb.K, g.bk)
                scope = self.em.scope(self._coords(side, crow, ck))
                gptr = self._address(scope, src)
                always = ok is None or kb.is_true(ok)
                copy = ("emmy::cp_async16", [dst, gptr] if always else [dst, gptr, ok])
                if in_tile is not None:
                    with kb.if_(in_tile):
                        kb.call(*copy)
                else:
                    kb.call(*copy)
            else:
                overrides = self.stat_overrides(r) if side == "a" else {}
                mask = kb.and_(ok, in_tile)
                scope = self.em.scope(
                    self._coords(side, grow, gk),
                    lane_axis=cb.k_last if chunk > 1 else None,
                    lanes=chunk,
                    mask=mask,
                    overrides=overrides,
                )
                vals = self._lanes(scope, value, contraction.a_factors if side == "a" else contraction.b_factors)
                zero = kb.fconst(0.0, bf16)
                vals = [kb.select(mask, kb.to_type(v, bf16), zero) if mask is not None else kb.to_type(v, bf16) for v in vals]
                vec = kb.pack(vals, vt) if chunk > 1 else vals[0]
                if regs is not None:
                    kb.store(vec, regs, kb.mul(it, chunk))
                else:
                    soff = kb.call(f"emmy::tile_offset<{g.bk}, {rows}>", [r, e], IndexType())
                    kb.store(vec, kb.ptr_add(base, soff), 0, in_tile)
        if regs is not None:
            return (base, rows, regs, steps)
        return None

    # -- a computed A side, loads first (the producer warpgroup of wgmma_ws) ---------------------------
    def a_registers(self) -> list:
        """Register arrays holding one k-step of the tensors a computed A side reads."""
        steps = self._a_steps()
        return [self.kb.local(bf16, steps * self.cb.chunk, f"raw{i}") for i in range(len(self.leaves))]

    def _a_place(self, it, kt, pred):
        """Where chunk `it` of this thread's share of an A tile lies: (in_tile mask, row and k
        offset in the tile, global row and k, whether the chunk is inside the operand)."""
        cb, kb = self.cb, self.kb
        g, chunk = cb.g, cb.chunk
        per_row = g.bk // chunk
        total = g.bm * per_row
        _, in_tile, r, e = self.place(it, per_row, total)
        if in_tile is not None:
            # a thread whose chunk lies past the tile still reads the raw copies and the row
            # statistics in shared memory (only its store is masked): keep its row in the tile
            r = kb.min(r, g.bm - 1)
        grow = kb.add(self.m0, r)
        gk = kb.add(kb.mul(kt, g.bk), e)
        ok = kb.and_(kb.and_(kb.and_(cb.inside(kb, grow, cb.M, g.bm), cb.inside(kb, gk, cb.K, g.bk)), pred), in_tile)
        return in_tile, r, e, grow, gk, ok

    def _a_steps(self) -> int:
        g = self.cb.g
        return -(-g.bm * (g.bk // self.cb.chunk) // self.threads)

    def prefetch_a(self, regs, kt, pred) -> None:
        """Issue every 16-byte load of k-step `kt`'s A side into `regs` (nothing waits here)."""
        cb, kb = self.cb, self.kb
        chunk = cb.chunk
        vt = VectorType(bf16, [chunk])
        with kb.for_(0, self._a_steps(), 1, unroll=0, name="c") as it:
            _, r, e, grow, gk, ok = self._a_place(it, kt, pred)
            scope = self.em.scope(self._a_coords(grow, gk))
            for (load, _rows), reg in zip(self.leaves, regs):
                kb.store(kb.load(self._address(scope, Leaf(load)), 0, vt, ok), reg, kb.mul(it, chunk))

    def start_stats(self) -> None:
        """Per-thread partial row statistics, summed while storing A (store_a)."""
        self.partials = RowStats(self.kb, self.cb.prologue, self._a_steps())

    def finish_stats(self, rs) -> None:
        """Combine the partials of a row's threads (consecutive lanes) and write them to `rs`."""
        cb, kb = self.cb, self.kb
        g = cb.g
        per_row = g.bk // cb.chunk
        total = g.bm * per_row
        with kb.for_(0, self._a_steps(), 1, unroll=0, name="c") as it:
            cidx, in_tile, r, _ = self.place(it, per_row, total)
            first = kb.and_(kb.cmp("eq", kb.rem(cidx, per_row), 0), in_tile)
            self.partials.write(it, per_row, r, first, rs, g.bm)

    def copy_registers(self, dst, src) -> None:
        kb, chunk = self.kb, self.cb.chunk
        vt = VectorType(bf16, [chunk])
        with kb.for_(0, self._a_steps(), 1, unroll=0, name="c") as it:
            for d, s_ in zip(dst, src):
                kb.store(kb.load(s_, kb.mul(it, chunk), vt), d, kb.mul(it, chunk))

    def store_a(self, regs, slot, sa, a_elems, kt, pred) -> None:
        """The A tile of k-step `kt` from the prefetched `regs`: the loop body's A side in f32,
        rounded to bf16, out-of-range elements zero, into the A tile of `slot`."""
        cb, kb = self.cb, self.kb
        g, chunk = cb.g, cb.chunk
        vt = VectorType(bf16, [chunk])
        base = kb.ptr_add(sa, kb.mul(slot, a_elems))
        with kb.for_(0, self._a_steps(), 1, unroll=0, name="c") as it:
            in_tile, r, e, grow, gk, ok = self._a_place(it, kt, pred)

            def hook_for(reg):
                def hook(scope):
                    vec = kb.load(reg, kb.mul(it, chunk), vt)
                    return [kb.extract(vec, j) for j in range(chunk)]

                return hook

            hooks = _hooks(cb, [(load, hook_for(reg)) for (load, _rows), reg in zip(self.leaves, regs)])
            overrides = self.stat_overrides(r)
            vals = self.a_chunk(it, grow, gk, ok, hooks, overrides, self.partials)
            soff = kb.call(f"emmy::tile_offset<{g.bk}, {g.bm}>", [r, e], IndexType())
            kb.store(kb.pack(vals, vt), kb.ptr_add(base, soff), 0, in_tile)

    def a_chunk(self, it, grow, gk, ok, hooks, overrides=None, partials: RowStats | None = None) -> list:
        """The A side of chunk `it` at global row `grow`, k `gk`, its tensors read through
        `hooks`: bf16 lanes, zero where `ok` is false; the row statistics of its lanes are folded
        into `partials`. Coordinates are clamped rather than masked (a masked scope predicates
        every load and halved the producer's speed on an H200)."""
        cb, kb = self.cb, self.kb
        scope = self.em.scope(
            self._a_coords(grow, gk), lane_axis=cb.k_last, lanes=cb.chunk, overrides=overrides, load_hooks=hooks
        )
        if partials is not None:
            partials.add(scope, it, ok)
        vals = self._lanes(scope, self.a_value, cb.cs[0].a_factors)
        zero = kb.fconst(0.0, bf16)
        return [kb.select(ok, kb.to_type(v, bf16), zero) if ok is not None else kb.to_type(v, bf16) for v in vals]

    def _a_coords(self, grow, gk) -> dict:
        """The A side's coordinates of the chunk at global row `grow` and k `gk`, clamped into
        the operand: the loads of chunks past the edges stay valid addresses."""
        cb, kb = self.cb, self.kb
        row = cb.clamp(kb, grow, cb.M - 1, cb.M, cb.g.bm)
        return self._coords("a", row, cb.clamp(kb, gk, cb.K - cb.chunk, cb.K, cb.g.bk))

    def stat_overrides(self, r) -> dict:
        """The row statistics of tile row `r` for computing A, where A reads them."""
        return self.cb.stat_overrides(self.stat, r, self.cb.info.a_reads_prologue)

    def _coords(self, side, row, k) -> dict:
        cb, kb = self.cb, self.kb
        c = cb._k_coords(kb, k)
        if side == "a":
            c.update(cb._row_coords(kb, row, self.batch))
        else:
            c.update(cb._col_coords(kb, row))
            if cb.b_axes:
                c.update(decompose(kb, self.batch, cb.b_axes, cb.ext))
        return c

    def _address(self, scope: Scope, src) -> SSAValue:
        kb = self.kb
        if isinstance(src, Leaf):
            t = src.load.tensor.type
            ptr = self.em.ptrs[src.load.tensor]
            off = scope._offset(t, [scope.value(i) for i in src.load.indices], 0)
            return kb.ptr_add(ptr, off)
        a = self._address(scope, src.a)
        b = self._address(scope, src.b)
        return kb.select(scope.one(src.cond), a, b)

    def _lanes(self, scope: Scope, value, factors) -> list[SSAValue]:
        kb = self.kb
        if value is not None:
            return scope.value(value)
        out = None
        for f in factors:
            v = [kb.to_f32(x) for x in scope.value(f)]
            out = v if out is None else [kb.mulf(a, b) for a, b in zip(out, v)]
        return out


def _hooks(cb: ContractionBuilder, pairs) -> dict:
    """Load hooks for a computed A side: each (load, hook) pair, and every load of the A side or
    the prologue reductions equal to one of those loads, read through its hook."""
    others = _loads_in(cb.cs[0]) + [o for r in cb.prologue for o in r.walk() if isinstance(o, LoadOp)]
    hooks = {}
    for load, hook in pairs:
        hooks[load] = hook
        for other in others:
            if other is not load and same_expr(other.result, load.result):
                hooks[other] = hook
    return hooks


class RowStats:
    """Partial row statistics of one thread: for each prologue reduction (a sum or max over k)
    and each of the thread's `steps` chunk rows, a register folded over the k-steps (`add`), then
    combined across the row's threads and written to shared memory (`write`)."""

    def __init__(self, kb: KB, prologue, steps: int):
        self.kb, self.prologue, self.steps = kb, list(prologue), steps
        self.regs = kb.local(f32, steps * len(self.prologue), "part")
        for p, r in enumerate(self.prologue):
            init = kb.fconst(0.0 if r.kind_name == "sum" else float("-inf"))
            with kb.for_(0, steps, 1, unroll=0, name="i") as i:
                kb.store(init, self.regs, kb.add(kb.mul(p, steps), i))

    def add(self, scope, it, ok) -> None:
        """Fold chunk `it`'s lanes (the reductions' bodies evaluated in `scope`) into the
        partials; lanes where `ok` is false contribute the identity."""
        kb = self.kb
        for p, red in enumerate(self.prologue):
            init = kb.fconst(0.0 if red.kind_name == "sum" else float("-inf"))
            part = None
            for v in scope.value(red.yielded):
                v = kb.to_f32(v)
                if ok is not None:
                    v = kb.select(ok, v, init)
                part = v if part is None else (kb.addf(part, v) if red.kind_name == "sum" else kb.maxf(part, v))
            idx = kb.add(kb.mul(p, self.steps), it)
            old = kb.load(self.regs, idx)
            kb.store(kb.addf(old, part) if red.kind_name == "sum" else kb.maxf(old, part), self.regs, idx)

    def write(self, it, per_row: int, r, first, rs, bm: int) -> None:
        """Combine chunk row `it` over its `per_row` threads (consecutive lanes); the `first`
        of them writes row `r` of `rs` (one block of `bm` rows per reduction)."""
        kb = self.kb
        for p, red in enumerate(self.prologue):
            v = kb.load(self.regs, kb.add(kb.mul(p, self.steps), it))
            fn = "warp_sum" if red.kind_name == "sum" else "warp_max"
            v = kb.call(f"emmy::{fn}<{per_row}>", [v], f32)
            kb.store(v, rs, kb.add(kb.mul(p, bm), r), first)


class InPlaceA:
    """A consumer warpgroup's in-place A transform (wgmma_ws): its rows of the A slot hold the
    raw tile of the one tensor A reads (copied by the producer); each thread rewrites a fixed
    set of 16-byte chunks (same rows, same k offsets every step) with the A side computed from
    them, and sums the row statistics of those rows on the way."""

    write = True  # rewrite the chunks (AStatistics only reads them)

    def __init__(self, cb: ContractionBuilder, kb: KB, em: BodyEmitter, tid, m0, batch, leaf: LoadOp, rs):
        g = cb.g
        self.cb, self.kb, self.em = cb, kb, em
        self.m0, self.batch, self.leaf, self.rs = m0, batch, leaf, rs
        self.wg = kb.div(tid, 128)
        self.lt = kb.rem(tid, 128)
        self.rows = 64 * g.mi  # rows of the A tile this warpgroup multiplies
        self.per_row = g.bk // cb.chunk
        self.steps = self.rows * self.per_row // 128
        self.stager = Stager(cb, kb, em, self.lt, m0, None, batch, None, (), threads=128)
        self.partials = RowStats(kb, cb.prologue, self.steps) if rs is not None else None

    def _place(self, it):
        kb, cb = self.kb, self.cb
        cidx = kb.add(kb.mul(it, 128), self.lt)
        r = kb.add(kb.mul(self.wg, self.rows), kb.div(cidx, self.per_row))
        e = kb.mul(kb.rem(cidx, self.per_row), cb.chunk)
        return cidx, r, e

    def step(self, sa, slot, a_elems, kt) -> None:
        kb, cb, g = self.kb, self.cb, self.cb.g
        chunk = cb.chunk
        vt = VectorType(bf16, [chunk])
        base = kb.ptr_add(sa, kb.mul(slot, a_elems))
        with kb.for_(0, self.steps, 1, unroll=0, name="c") as it:
            _, r, e = self._place(it)
            grow = kb.add(self.m0, r)
            gk = kb.add(kb.mul(kt, g.bk), e)
            ok = kb.and_(cb.inside(kb, grow, cb.M, g.bm), cb.inside(kb, gk, cb.K, g.bk))
            ptr = kb.ptr_add(base, kb.call(f"emmy::tile_offset<{g.bk}, {g.bm}>", [r, e], IndexType()))
            raw = kb.load(ptr, 0, vt)
            lanes = [kb.extract(raw, j) for j in range(chunk)]
            hooks = _hooks(cb, [(self.leaf, lambda scope, lanes=lanes: lanes)])
            if self.write:
                vals = self.stager.a_chunk(it, grow, gk, ok, hooks, None, self.partials)
                kb.store(kb.pack(vals, vt), ptr, 0)
            else:
                scope = self.em.scope(
                    self.stager._a_coords(grow, gk), lane_axis=cb.k_last, lanes=chunk, load_hooks=hooks
                )
                self.partials.add(scope, it, ok)
        if self.write:
            kb.call("emmy::fence_proxy_async")
            kb.call("emmy::named_barrier<128>", [kb.add(self.wg, 2)])

    def finish_stats(self) -> None:
        """Combine the partials of a row's threads and write the warpgroup's rows of `rs`."""
        kb, g = self.kb, self.cb.g
        with kb.for_(0, self.steps, 1, unroll=0, name="c") as it:
            cidx, r, _ = self._place(it)
            first = kb.cmp("eq", kb.rem(cidx, self.per_row), 0)
            self.partials.write(it, self.per_row, r, first, self.rs, g.bm)
        kb.call("emmy::named_barrier<128>", [kb.add(self.wg, 2)])


class AStatistics(InPlaceA):
    """A consumer warpgroup's row statistics from the A tiles (wgmma_ws, A a plain copy of the
    one tensor the statistics read): the same chunks as InPlaceA, only read (no store, fence or
    barrier), so `step` can run while the step's wgmmas do."""

    write = False


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _loads_in(contraction) -> list:
    return [o for o in contraction.reduce.walk() if isinstance(o, LoadOp)]


__all__ = ["AStatistics", "InPlaceA", "Leaf", "Pick", "RowStats", "Stager", "direct_source", "same_expr"]
