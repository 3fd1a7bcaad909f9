"""Kernel builder for `tile.kernel` ops of kind "attention": flash attention over the fused body.

    build(kernel_op, info, plan) -> Built      # called by convert-tile-to-kernel

The body's analysis (`analyze`: the roles of its values) lives in
emmy/schedule/attention_body.py, the plan (`plan`: what the decided knobs mean) in
emmy/schedule/attention.py.

The loop body computes, for every (batch/head axes, query q, value column e),

    out = epilogue( sum_kv softmax_kv(S(q, kv)) * V(kv, e) ),   S = score(sum_d Q(q, d) K(kv, d))

as nested `loop.reduce`s: a max over kv of S, a sum over kv of exp(S - max), a sum over kv of
P * V (P = exp(S - max), divided by the sum inside or in the epilogue), each recomputing S with
its own copy of the Q x K contraction. Q, K and V are arbitrary scalar code over loads (Qwen3:
q/k RMSNorm over the head dimension, with a row sum of squares, then rotary embedding).

The builder checks that structure (`analyze`, an EmmyError naming the kernel otherwise) and
emits one `kernel.func` whose body makes device lambdas from the loop body and hands them to
Emmy's flash-attention main loop, `emmy::attention::run` (emmy/backend/runtime/attention.cuh):
one pass over the keys with online softmax, causally dead key blocks skipped, Q staged once per
block and K/V once per key block in shared memory, both products on tensor cores (mma.sync).

Producers (Q rows by query, K and V rows by key; columns = the head dimension):
- `direct` (kDirect): the value is a bf16 load whose flat index is `row * stride + col + outer`
  with stride and outer offset multiples of 8: rows are copied with 16-byte cp.async.
- `rowsum` (kRowSum): the value reads one row statistic, a `loop.reduce sum` whose result
  depends on the row but not the column (RMSNorm's sum of squares): one lambda gives the summed
  term `(i, r) -> f32`, a second the element given the sum `(i, d, s) -> f32`; the statistic is
  computed once per staged row (once per query row, once per key row and key block).
- `elem` (kElem): any other value, one lambda `(i, d) -> f32`.
The score lambda `(q, kv, dot) -> f32` is the max reduction's yielded value with the Q x K
contraction replaced by `dot` (scale and mask); with a causal mask a second one, `free`, the
same with the mask's select (and a sliding window's) replaced by its unmasked operand, which the
main loop uses in every key block wholly below the diagonal, inside the window and inside the
ends (no mask computed there); the output
lambda `(q, e, o)` the stores, with the normalized P x V sum replaced by `o`.

Launch: grid (product of the batch/head axes, query blocks), 32 * warps threads, dynamic shared
memory for Q (block_q rows) and `stages` buffers of K and V (block_kv rows each). Blocks start in
the order of their index, x fastest, so every head's longest (causal) query block starts before
any head's next longest: the longest blocks first, the shortest filling the last wave. Where the
key and value rows of all heads do not fit in L2 together, the heads go in sections that do
(AttentionPlan.section, tile_at): each section's query blocks, longest first, before the next
section's, so its blocks find their K and V rows in L2. With
`schedule = persistent` (wgmma_ws): min(query blocks x rows, SMs) blocks, shared memory for a
second Q tile, and one more argument, the tile counter (a zeroed temp, TILE_COUNTER); each role
passes `ws_tiles` a lambda `tile(t, ring, i)` holding its `run_ws` for query block t of the
same order, and the consumers get `next_block(t)` and `next_q(t)`, t's query block and the
row-0 pointer of its Q rows. With `split_kv` (wgmma_ws, grid): grid y holds query blocks x parts
(a query block's parts side by side), and the main kernel takes two more arguments, the parts'
workspace and their counts per query block (`workspaces`); each block runs its part of the key
blocks, and the last part of a query block to finish merges the others and stores the output.

Variants (the plan's `fusion`, the attention's fusion knob):
- "fused": computed Q/K/V (rowsum/elem producers) are evaluated while staging, in the main
  kernel: Q once per query block, K and V once per key block of every query block.
- "split": a prologue kernel `<name>_prep` (grid: row blocks x batch/head rows x the computed
  ones of {Q, K, V}, 256 threads, `emmy::attention::materialize`) writes the computed rows once
  to bf16 temporaries ([rows x head_dim] per batch/head row; K and V per key head under
  grouped-query attention), and the main kernel copies them as direct rows (V is computed
  where the projection has a bias, as Qwen2's). Same values bit for bit, fewer
  evaluations: on an H200 the Qwen3 layer's attention took 21 us instead of 55 us at 512 tokens,
  126 us instead of 308 us at 2048, the same at 32 (mma_sync, block_q 64/128, block_kv 64).
- "epilogue": the q/k/v projection's epilogue wrote normalized, rotated Q and K in place of their
  raw rows (emmy.schedule.qk_epilogue; emmy.lowering.contraction_epilogue.qk_stores): the main
  kernel copies them as direct rows of that output (`qk_epilogue.direct_rows`), no prologue
  kernel; a computed V stays in the main kernel as with "fused".

    kernel.func @attention(%x: !kernel.ptr<bf16>, ..., %out: !kernel.ptr<bf16>) grid [16, 8, 1] block [128, 1, 1] smem 81920 min_blocks 1 {
      %bid_x = kernel.block_id x
      ...
      %q_a = kernel.lambda (%i: index, %r: index) -> f32 { ... }
      ...
      kernel.call "emmy::attention::run<128, 64, 64, 4, 2, 2, 128, 2, 128, 0, 0>"(%q_a, %q_b, ...) : (...) -> ()
    }
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from math import prod

from xdsl.dialects.builtin import BFloat16Type, Float32Type, IndexType, IntAttr, TensorType, f32, i32
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from emmy.analysis.classify import KernelInfo
from emmy.diagnostics import EmmyError
from emmy.lowering import Built, In, Launch, LaunchArg, Tmp
from emmy.lowering.common import bind_pointers, decompose, io_args, kernel_ident
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter, Scope, row_major_strides
from emmy.dialects import kernel as K
from emmy.schedule import qk_epilogue
from emmy.schedule.attention_body import (
    DIRECT,
    ELEM,
    ROWSUM,
    TMA,
    AttentionBody,
    Producer,
    analyze,
    kv_group,
    score_fold,
    staged_output,
)
from emmy.schedule.attention import (
    PREP_ROWS,
    PREP_WARPS,
    SMEM_ALIGN_WGMMA,
    WS_PRODUCER_THREADS,
    AttentionPlan,
    smem_bytes,
    tile_bytes,
)

TMA_SLAB = 64  # columns per tensor-map box: one 128-byte swizzled slab of the wgmma tiles

# --------------------------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------------------------


def _lambda(kb: KB, arg_types: Sequence[Attribute], names: Sequence[str], result: Attribute | None) -> K.LambdaOp:
    lam = K.LambdaOp(list(arg_types), [result] if result is not None else [])
    for a, n in zip(lam.body.block.args, names):
        a.name_hint = n
    kb.insert(lam)
    return lam


def _f32(kb: KB, v: SSAValue) -> SSAValue:
    return kb.to_f32(v) if not isinstance(v.type, Float32Type) else v


def _producer_args(kb: KB, top: Scope, p: Producer, em: BodyEmitter) -> tuple[SSAValue, SSAValue]:
    """The two run() / materialize() arguments of a producer (see attention.cuh)."""
    idx = IndexType()
    if p.mode == DIRECT:
        assert p.load is not None
        ptr = kb.ptr_add(em.ptrs[p.load.tensor], _row0_offset(kb, top, p))  # the row pointer of row 0
        return ptr, kb.idx(p.stride)
    if p.mode == ELEM:
        lam = _lambda(kb, [idx, idx], ["i", "d"], f32)
        i, d = lam.body.block.args
        with kb.at(lam.body.block):
            s = top.child({p.row_axis: i, p.col_axis: d})
            lam.body.block.add_op(K.YieldOp(_f32(kb, s.one(p.value))))
        return lam.result, kb.idx(0)
    stat = p.stats[0]
    term = _lambda(kb, [idx, idx], ["i", "r"], f32)
    i, r = term.body.block.args
    with kb.at(term.body.block):
        s = top.child({p.row_axis: i, p.stat_axis: r})
        term.body.block.add_op(K.YieldOp(_f32(kb, s.one(stat.yielded))))
    elem = _lambda(kb, [idx, idx, f32], ["i", "d", "sum"], f32)
    i, d, total = elem.body.block.args
    with kb.at(elem.body.block):
        s = top.child({p.row_axis: i, p.col_axis: d}, overrides={st.result: [total] for st in p.stats})
        elem.body.block.add_op(K.YieldOp(_f32(kb, s.one(p.value))))
    return term.result, elem.result


def run_callee(
    plan: AttentionBody, sched: AttentionPlan, materialized: frozenset[str] = frozenset(),
    maps: Mapping[str, int] | None = None, role: int | None = None,
) -> str:
    """The C++ name of the main loop with its template arguments (`materialized`: operands read
    as direct rows from the split variant's temporaries; `maps`: operands copied through tensor
    maps, with the row length of each map's view). With a `role` (schedule = persistent: 0 the
    producer, 1 the consumers) the one query block of `run_ws` instead of `run`."""
    args = [plan.head_dim, sched.block_q, sched.block_kv, sched.warps, sched.stages]
    for p in (plan.q, plan.k, plan.v):
        if maps and p.name in maps:
            args += [TMA, maps[p.name]]
        elif p.name in materialized:
            args += [DIRECT, 0]
        else:
            args += [p.mode, p.stat_len if p.mode == ROWSUM else 0]
    staged = [int(staged_output(plan))] if sched.wgmma else []
    # a sliding window: WINDOW, the last template argument (the defaulted ones before it spelled
    # out); the main loop skips the key blocks before it (AttentionPlan.first_key_block) and masks
    # only the blocks crossing its edge (block_masked), the free score having no window
    window = [sched.window] if sched.window and sched.causal else []
    if role is not None:
        return "emmy::attention::run_ws<" + ", ".join(str(a) for a in [*args, role, *staged, *window]) + ">"
    args.append(2 if sched.warp_specialized else int(sched.wgmma))
    regs = list(sched.register_budgets or ())  # setmaxnreg's budgets: REGS_P, REGS_C
    if window:
        return "emmy::attention::run<" + ", ".join(str(a) for a in [*args, *(staged or [0]), *(regs or [0, 0]), *window]) + ">"
    return "emmy::attention::run<" + ", ".join(str(a) for a in [*args, *staged, *regs]) + ">"


def _linear_index(kb: KB, values: Mapping[str, SSAValue], axes: Sequence[str], extents: Mapping[str, int]) -> SSAValue:
    """Row-major linear index of axis values (the inverse of common.decompose)."""
    idx: SSAValue | int = 0
    for a in axes:
        idx = kb.add(kb.mul(idx, extents[a]), values[a])
    return kb.idx(idx)


def build(kernel_op: Operation, info: KernelInfo, sched: AttentionPlan) -> Built:
    """Kernel-stage ops for one attention `tile.kernel` (see the module docstring). With a
    `prep` launch in the plan (fusion = split, computed Q, K or V) a prologue kernel
    (`<name>_prep`) materializes them once and the main loop runs on the materialized rows.
    """
    plan = analyze(kernel_op, info)
    if sched.fusion == "epilogue":  # Q and K as rows the projection's epilogue rewrote
        facts = qk_epilogue.find(kernel_op, info)
        if isinstance(facts, str):
            raise EmmyError(f"tile.kernel @{sched.name} (attention): fusion=epilogue: {facts}")
        plan = qk_epilogue.direct_rows(plan, facts)
    if sched.prep is not None:
        return _build_split(kernel_op, info, plan, sched)
    func, map_refs = _flash_func(kernel_op, info, plan, sched)
    _, _, refs = io_args(kernel_op)
    built = Built(funcs=[func], launches=[Launch(func.sym_name.data, (*refs, *map_refs))], temps=[])
    return _with_workspaces(built, sched)


TILE_COUNTER = TensorType(i32, [2])  # schedule = persistent: the next tile, the blocks done


def workspaces(sched: AttentionPlan) -> list[tuple[str, TensorType, bool]]:
    """(argument name, type, zeroed) of the temps the main kernel takes last: schedule =
    persistent's tile counter (two ints: the next tile to take, the blocks that took their last;
    the last block zeroes both); split_kv's workspace of the parts' partial results
    (AttentionPlan.split_floats) and its count of finished parts per query block (the part that
    merges zeroes its count)."""
    if sched.persistent:
        return [("tile_counter", TILE_COUNTER, True)]
    if sched.split_kv > 1:
        return [("split_ws", TensorType(f32, [sched.split_floats]), False),
                ("split_counts", TensorType(i32, [sched.tiles]), True)]
    return []


def _with_workspaces(built: Built, sched: AttentionPlan) -> Built:
    """The main kernel's workspaces (`workspaces`) as temps and its last arguments."""
    refs = []
    for _, ty, zeroed in workspaces(sched):
        built.temps.append(ty)
        if zeroed:
            built.zeroed.add(len(built.temps) - 1)
        refs.append(Tmp(len(built.temps) - 1))
    if refs:
        main = built.launches[-1]
        built.launches[-1] = Launch(main.kernel, (*main.args, *refs))
    return built


def _flash_func(
    kernel_op: Operation,
    info: KernelInfo,
    plan: AttentionBody,
    sched: AttentionPlan,
    temps: Sequence[tuple[str, Producer, tuple[str, int] | None]] = (),
    temp_types: Sequence[TensorType] = (),
) -> tuple[K.KernelFuncOp, list[LaunchArg]]:
    """The main kernel and the launch arguments of its tensor maps. `temps`: (name, producer,
    gqa) of operands read from materialized rows (one extra pointer argument each, after the
    tile op's inputs and results; `temp_types` their buffers). With copy = tma, every direct K
    or V operand also gets a tensor map argument (after those), bound to its tensor."""
    axes = info.axes
    n_qblocks = sched.query_blocks
    types, names, _ = io_args(kernel_op)
    types = types + [K.PtrType(BFloat16Type())] * len(temps)
    names = names + [t[0] for t in temps]
    maps = _tma_maps(kernel_op, plan, sched, temps, temp_types)
    if sched.warp_specialized:
        _check_ws_operands(plan, {t[0] for t in temps}, {m[0] for m in maps})
    types = types + [m[1] for m in maps]
    names = names + [f"tma_{m[0]}" for m in maps]
    extra = workspaces(sched)  # the tile counter, or split_kv's workspace and counts
    types = types + [K.PtrType(ty.element_type) for _, ty, _ in extra]
    names = names + [n for n, _, _ in extra]
    smem = sched.smem_bytes
    kb = KB.new_func(
        kernel_ident(plan.name), types, grid=sched.grid, block=(sched.threads, 1, 1),
        smem=smem, min_blocks=1, arg_names=names,
    )
    ptrs, outs = bind_pointers(kb, kernel_op)
    em = BodyEmitter(kb, kernel_op, ptrs, outs)
    n_args = len(kb.func.body.block.args) - len(extra)
    temp_args = kb.func.body.block.args[n_args - len(maps) - len(temps):n_args - len(maps)]
    map_args = dict(zip((m[0] for m in maps), kb.func.body.block.args[n_args - len(maps):n_args]))

    # the tiles without the alignment
    tiles = tile_bytes(plan.head_dim, sched.block_q, sched.block_kv, sched.stages, sched.wgmma, sched.q_tiles)
    sbuf = kb.shared(BFloat16Type(), tiles // 2, 0, SMEM_ALIGN_WGMMA if sched.wgmma else 16, "smem")
    materialized = {p.name: (arg, p, gqa) for arg, (_, p, gqa) in zip(temp_args, temps)}
    bid_x = kb.block_id("x")
    idx = IndexType()
    callee = partial(run_callee, plan, sched, frozenset(materialized), {m[0]: m[2] for m in maps})

    def query_block(row: SSAValue | int, q_block: SSAValue, role: int | None = None,
                    ring: SSAValue | None = None, after: Sequence[SSAValue] = ()) -> SSAValue | None:
        """The main loop's call for one query block of batch x head row `row` (its lambdas and
        operands bound to that row); with a `role`, run_ws's: `ring` before the shared memory,
        `after` it (the loop's count, the next query block's and the next Q rows' lambdas; with
        split_kv the part, the parts, the slot row and the workspaces)."""
        outer = decompose(kb, row, plan.batch_axes, axes) if plan.batch_axes else {}
        top = em.scope(outer)
        args = _operand_args(kb, em, top, plan, outer, axes, materialized, map_args)
        score = _score_lambda(kb, top, plan, masked=True)
        free = _score_lambda(kb, top, plan, masked=False) if plan.mask is not None else score
        out = _lambda(kb, [idx, idx, f32], ["q", "e", "o"], None)
        q, e, o = out.body.block.args
        with kb.at(out.body.block):
            s = top.child({plan.query_axis: q, plan.v.col_axis: e}, overrides={plan.out_override: [o]})
            s.store(plan.store)
            out.body.block.add_op(K.YieldOp())
        return kb.call(
            callee(role=role),
            [
                *args, score.result, free.result, kb.fconst(score_fold(plan)), out.result, q_block,
                kb.idx(plan.seq_q), kb.idx(plan.seq_kv), kb.idx(int(plan.causal)),
                kb.idx(plan.causal_offset), *([] if ring is None else [ring]), sbuf, *after,
            ],
            None if role is None else idx,
        )

    if not sched.persistent:
        # the longest (causal) query blocks of all heads start first (x, the head, varies fastest);
        # with split_kv the parts of a query block side by side along y
        rank, after = kb.block_id("y"), []
        if sched.split_kv > 1:
            rank, part = kb.div(rank, sched.split_kv), kb.rem(rank, sched.split_kv)
            slot_row = kb.add(bid_x, kb.mul(rank, sched.batch))
            after = [part, kb.idx(sched.split_kv), slot_row, *kb.func.body.block.args[n_args:]]
        if sched.section >= sched.batch:
            row, q_block = bid_x, kb.sub(n_qblocks - 1, rank)
        else:  # ... of the heads of an L2 section, section after section (AttentionPlan.tile_at)
            row, q_block = sched.tile_at(kb, kb.add(bid_x, kb.mul(rank, sched.batch)))
        q_block.name_hint = "q_block"
        query_block(row, q_block, after=after)
        return kb.finish(), [m[3] for m in maps]

    # schedule = persistent: each block takes query blocks t = 0, 1, ... of the grid's order (head
    # fastest within an L2 section, the longest first: AttentionPlan.tile_at) from the tile
    # counter as it frees up (ws_tiles in attention.cuh); each role loops on its own after the
    # barriers' setup, calling `tile(t, ring, i)` per query block, the ring's count going from
    # call to call. `next_block(t)` and `next_q(t)`: tile t's query block and the row-0 pointer
    # of its Q rows, which the consumers copy during the tile before.
    shape = f"{plan.head_dim}, {sched.block_q}, {sched.block_kv}, {sched.warps}, {sched.stages}"
    counter = kb.func.body.block.args[n_args]
    kb.call(f"emmy::attention::ws_begin<{shape}>", [sbuf])
    next_block = _lambda(kb, [idx], ["t"], idx)
    with kb.at(next_block.body.block):
        (t,) = next_block.body.block.args
        next_block.body.block.add_op(K.YieldOp(sched.tile_block(kb, t)))
    next_q = _lambda(kb, [idx], ["t"], K.PtrType(BFloat16Type()))
    with kb.at(next_q.body.block):
        (t,) = next_q.body.block.args
        outer = decompose(kb, sched.tile_row(kb, t), plan.batch_axes, axes) if plan.batch_axes else {}
        q_rows = _operand_args(kb, em, em.scope(outer), plan, outer, axes, materialized, map_args)[0]
        next_q.body.block.add_op(K.YieldOp(q_rows))
    tid = kb.thread_id()
    for role, cond in ((0, kb.lt(tid, WS_PRODUCER_THREADS)), (1, kb.cmp("sge", tid, WS_PRODUCER_THREADS))):
        with kb.if_(cond):
            regs = "".join(f", {r}" for r in sched.register_budgets or ())  # REGS_P, REGS_C
            kb.call(f"emmy::attention::ws_role<{shape}, {role}{regs}>")
            tile = _lambda(kb, [idx, idx, idx], ["t", "ring", "i"], idx)
            with kb.at(tile.body.block):
                t, ring, i = tile.body.block.args
                row, q_block = sched.tile_at(kb, t)
                q_block.name_hint = "q_block"
                done = query_block(row, q_block, role, ring, [i, next_block.result, next_q.result])
                assert done is not None
                tile.body.block.add_op(K.YieldOp(done))
            kb.call(f"emmy::attention::ws_tiles<{shape}, {role}>", [tile.result, kb.idx(sched.tiles), counter, sbuf])
    return kb.finish(), [m[3] for m in maps]


def _operand_args(
    kb: KB, em: BodyEmitter, top: Scope, plan: AttentionBody, outer: Mapping[str, SSAValue],
    axes: Mapping[str, int], materialized: Mapping[str, tuple[SSAValue, Producer, tuple[str, int] | None]],
    map_args: Mapping[str, SSAValue],
) -> list[SSAValue]:
    """The (a, b) arguments of Q, K and V for the batch x head row at `outer`: rows of the split
    variant's temporaries (per key head under grouped-query attention), a tensor map and its row
    offset, or the producer's own arguments (_producer_args)."""
    args: list[SSAValue] = []
    for p in (plan.q, plan.k, plan.v):
        if p.name in materialized:
            arg, _, gqa = materialized[p.name]
            rows = plan.seq_q if p is plan.q else plan.seq_kv
            vals = dict(outer)
            ext = dict(axes)
            if gqa is not None:
                vals[gqa[0]] = kb.div(outer[gqa[0]], gqa[1])
                ext[gqa[0]] = axes[gqa[0]] // gqa[1]
            row_set = _linear_index(kb, vals, plan.batch_axes, ext) if plan.batch_axes else kb.idx(0)
            offset = kb.mul(row_set, rows * plan.head_dim)
            if p.name in map_args:
                args += [map_args[p.name], offset]
            else:
                args += [kb.ptr_add(arg, offset), kb.idx(plan.head_dim)]
        elif p.name in map_args:
            args += [map_args[p.name], _row0_offset(kb, top, p)]
        else:
            args += list(_producer_args(kb, top, p, em))
    return args


def _check_ws_operands(plan: AttentionBody, materialized: set[str], mapped: set[str]) -> None:
    """workers = wgmma_ws: its consumers copy Q as plain rows and its producer copies K and V
    through tensor maps only (the plan's legality sees to both; this names what slipped)."""
    if plan.q.mode != DIRECT and "q_rows" not in materialized:
        raise EmmyError(f"tile.kernel @{plan.name} (attention): workers=wgmma_ws needs plain Q rows (fusion=split)")
    missing = [p.name.upper() for p in (plan.k, plan.v) if p.name not in mapped]
    if missing:
        raise EmmyError(
            f"tile.kernel @{plan.name} (attention): workers=wgmma_ws copies K and V through tensor maps, "
            f"and {' and '.join(missing)} has none (a computed operand needs fusion=split, a plain one "
            "a whole number of rows in its tensor)"
        )


def _score_lambda(kb: KB, top: Scope, plan: AttentionBody, masked: bool) -> K.LambdaOp:
    """The score lambda `(q, kv, dot) -> f32` of the main loop: the max reduction's yielded value
    with the Q x K contraction replaced by `dot`; unless `masked`, also its causal mask's select
    and a sliding window's replaced by their unmasked operands (`free`: the key blocks wholly
    below the diagonal and inside the window, block_masked in attention.cuh)."""
    idx = IndexType()
    lam = _lambda(kb, [idx, idx, f32], ["q", "kv", "dot"], f32)
    q, kv, dot = lam.body.block.args
    axes = {plan.query_axis: q, plan.key_axis: kv}
    with kb.at(lam.body.block):
        overrides: dict[SSAValue, list[SSAValue]] = {plan.dot: [dot]}
        if not masked:
            assert plan.mask is not None
            for sel, operand in reversed(plan.free_overrides()):  # the window's inside the causal one
                overrides = {**overrides, sel: [top.child(axes, overrides=overrides).one(operand)]}
        s = top.child(axes, overrides=overrides)
        lam.body.block.add_op(K.YieldOp(_f32(kb, s.one(plan.score))))
    return lam


def _tma_maps(
    kernel_op: Operation, plan: AttentionBody, sched: AttentionPlan,
    temps: Sequence[tuple[str, Producer, tuple[str, int] | None]], temp_types: Sequence[TensorType],
) -> list[tuple[str, K.TensorMapType, int, LaunchArg]]:
    """copy = tma: (operand name, map type, row length of the view, launch argument) of every
    K or V operand read as direct rows. The map views the whole tensor as rows of the operand's
    row stride, boxes of block_kv rows by one 64-column slab."""
    if not sched.tma:
        return []
    materialized = {t[0]: i for i, t in enumerate(temps)}
    out = []
    for p in (plan.k, plan.v):
        temp = f"{p.name}_rows"
        if temp in materialized:
            numel, stride = temp_types[materialized[temp]].get_shape()[0], plan.head_dim
            ref: LaunchArg = Tmp(materialized[temp])
        elif p.mode == DIRECT and p.load is not None:
            t = p.load.tensor.type
            assert isinstance(t, TensorType) and isinstance(p.load.tensor, BlockArgument)
            numel, stride = prod(t.get_shape()), p.stride
            ref = In(p.load.tensor.index)
        else:
            continue
        if numel % stride:
            continue
        params = (numel // stride, stride, stride, 0, sched.block_kv, TMA_SLAB, 1, 0)
        out.append((p.name, K.TensorMapType(BFloat16Type(), *(IntAttr(v) for v in params)), stride, ref))
    return out


def _row0_offset(kb: KB, top: Scope, p: Producer) -> SSAValue:
    """The element offset of a direct producer's row 0 (column 0) in its tensor."""
    assert p.load is not None
    at0 = top.child({p.row_axis: 0, p.col_axis: 0})
    t = p.load.tensor.type
    assert isinstance(t, TensorType)
    off: SSAValue | int = 0
    for i, st in zip(p.load.indices, row_major_strides(t.get_shape())):
        off = kb.add(off, kb.mul(at0.one(i), st))
    return off if isinstance(off, SSAValue) else kb.idx(off)


def _build_split(kernel_op: Operation, info: KernelInfo, plan: AttentionBody, sched: AttentionPlan) -> Built:
    """A prologue kernel materializing the computed Q, K and V rows (those that are not plain
    loads), then the main kernel."""
    axes = info.axes
    D = plan.head_dim
    n_batch = sched.batch
    gqa = kv_group(plan, info)
    todo: list[tuple[Producer, int, int, tuple[str, int] | None]] = []  # producer, rows, row sets, gqa
    if plan.q.mode != DIRECT:
        todo.append((plan.q, plan.seq_q, n_batch, None))
    for p in (plan.k, plan.v):
        if p.mode != DIRECT:
            todo.append((p, plan.seq_kv, n_batch // gqa[1] if gqa else n_batch, gqa))
    temps = [TensorType(BFloat16Type(), [sets * rows * D]) for _, rows, sets, _ in todo]

    types, names, refs = io_args(kernel_op)
    per_block = PREP_WARPS * PREP_ROWS
    kb = KB.new_func(
        kernel_ident(plan.name) + "_prep",
        types + [K.PtrType(BFloat16Type())] * len(todo),
        grid=sched.prep,
        block=(32 * PREP_WARPS, 1, 1),
        smem=0,
        arg_names=names + [f"{p.name}_rows" for p, *_ in todo],
    )
    ptrs, outs = bind_pointers(kb, kernel_op)
    em = BodyEmitter(kb, kernel_op, ptrs, outs)
    args = kb.func.body.block.args
    temp_args = args[len(args) - len(todo):]
    bid_x, bid_y, bid_z = kb.block_id("x"), kb.block_id("y"), kb.block_id("z")
    row0 = kb.mul(bid_x, per_block)
    for z, ((p, rows, sets, g), dst) in enumerate(zip(todo, temp_args)):
        cond = kb.cmp("eq", bid_z, z)
        if sets < n_batch:
            cond = kb.and_(cond, kb.lt(bid_y, sets))
        with kb.if_(cond):
            ext = dict(axes)
            if g is not None:
                ext[g[0]] = axes[g[0]] // g[1]
            outer = decompose(kb, bid_y, plan.batch_axes, ext) if plan.batch_axes else {}
            if g is not None:
                outer[g[0]] = kb.mul(outer[g[0]], g[1])  # a query head of the key head's group
            top = em.scope(outer)
            a, b = _producer_args(kb, top, p, em)
            out_rows = kb.ptr_add(dst, kb.mul(bid_y, rows * D))
            red = p.stat_len if p.mode == ROWSUM else 0
            kb.call(
                f"emmy::attention::materialize<{D}, {p.mode}, {red}, {PREP_WARPS}, {PREP_ROWS}>",
                [a, b, out_rows, row0, kb.idx(rows)],
            )
    prep = kb.finish()
    main, map_refs = _flash_func(
        kernel_op, info, plan, sched, [(f"{p.name}_rows", p, g) for p, _, _, g in todo], temps
    )
    tmp_refs = tuple(Tmp(i) for i in range(len(todo)))
    built = Built(
        funcs=[prep, main],
        launches=[
            Launch(prep.sym_name.data, tuple(refs) + tmp_refs),
            Launch(main.sym_name.data, tuple(refs) + tmp_refs + tuple(map_refs)),
        ],
        temps=temps,
    )
    return _with_workspaces(built, sched)


__all__ = ["TILE_COUNTER", "AttentionBody", "AttentionPlan", "Producer", "analyze", "build", "run_callee", "smem_bytes"]
