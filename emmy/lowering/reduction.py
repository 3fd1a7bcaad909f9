"""Row reductions (RMSNorm, softmax statistics, ...): each block handles `rows_per_block` rows.

A row is one point of the row axes (the axes the reduce results depend on); `threads /
rows_per_block` consecutive threads (TPR, a power of two) cooperate on it:

1. every top-level `loop.reduce` whose result depends only on row axes, in body order: each
   thread reduces a strided part of the reduced range, `vector` consecutive elements per access
   (16-byte loads), then `emmy::group_sum<TPR>` / `group_max<TPR>` (warp shuffles, plus shared
   memory when TPR > 32) gives every thread of the row the result;
2. the stores: the row's output elements (the non-row parallel axes, `vector` per access),
   spread over the TPR threads, computed from loads, scalar code and the reduce results.

Reductions that depend on other axes too (rare) are computed serially per output element.

    kernel.func @rms(...) grid [ceil(rows / rows_per_block), 1, 1] block [threads, 1, 1] smem (threads/32 * 4)
"""

from __future__ import annotations

from math import prod

from xdsl.dialects.builtin import f32

from emmy.lowering import Built, Launch
from emmy.lowering.common import bind_pointers, decompose, io_args, kernel_ident
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter, Scope
from emmy.dialects.loop import ReduceOp, StoreOp
from emmy.schedule.reduction import ReductionPlan, largest_divisor_pow2


def _order_inner_last(axes, inner: str) -> list[str]:
    out = [a for a in axes if a != inner]
    if inner in axes:
        out.append(inner)
    return out


def reduce_rows(
    kb: KB,
    em: BodyEmitter,
    row_scope: Scope,
    reduces: list[ReduceOp],
    t: object,
    tpr: int,
    vector: int,
    inner_axis: str,
    scratch,
) -> dict:
    """Cooperative reductions of one row by TPR threads (`t` is the thread's index within the
    row). Returns {reduce result: [kernel value]} (every thread of the row gets the result)."""
    ext = em.extents
    results = {}
    for r in reduces:
        axes = _order_inner_last(list(r.axis_names), inner_axis)
        inner = axes[-1]
        V = largest_divisor_pow2(ext[inner], vector)
        virt = {a: ext[a] for a in axes}
        virt[inner] = ext[inner] // V
        L = prod(virt.values())
        steps = -(-L // tpr)
        init = kb.fconst(0.0 if r.kind_name == "sum" else float("-inf"), r.result.type)

        def body(iv, carried, r=r, axes=axes, inner=inner, V=V, virt=virt, L=L):
            pos = kb.add(kb.mul(iv, tpr), t)
            mask = None if L % tpr == 0 else kb.lt(pos, L)
            coords = decompose(kb, pos, axes, virt)
            coords[inner] = kb.mul(coords[inner], V)
            s = row_scope.child(coords, mask=mask)
            s.lane_axis, s.lanes = (inner, V) if V > 1 else (None, 1)
            vals = s.value(r.yielded)
            acc = carried[0]
            part = None
            for v in vals[: (V if s.lanes > 1 else 1)]:
                v = kb.to_type(v, acc.type)
                if mask is not None:
                    # masked-out positions contribute the identity
                    v = kb.select(mask, v, init)
                part = v if part is None else (kb.addf(part, v) if r.kind_name == "sum" else kb.maxf(part, v))
            return [kb.addf(acc, part) if r.kind_name == "sum" else kb.maxf(acc, part)]

        (acc,) = kb.for_iter(0, steps, 1, [init], body, unroll=4 if steps > 1 else None, name="chunk")
        if tpr <= 32:
            fn = "emmy::warp_sum" if r.kind_name == "sum" else "emmy::warp_max"
            total = kb.call(f"{fn}<{tpr}>", [kb.to_f32(acc)], f32)
        else:
            fn = "emmy::group_sum" if r.kind_name == "sum" else "emmy::group_max"
            total = kb.call(f"{fn}<{tpr}>", [kb.to_f32(acc), scratch], f32)
        total = kb.to_type(total, r.result.type)
        total.name_hint = r.result.name_hint or "red"
        row_scope.memo[r.result] = [total]
        results[r.result] = [total]
    return results


def build(op, info, plan: ReductionPlan) -> Built:
    """The kernel of a reduction `tile.kernel` as its plan says."""
    name = kernel_ident(op.properties["sym_name"].data)
    ext = dict(info.axes)
    vector, rpb, tpr, rows = plan.vector, plan.rows_per_block, plan.threads_per_row, plan.rows
    threads, blocks, warps, smem = plan.threads, plan.blocks, plan.warps, plan.smem_bytes
    row_axes = list(info.row_axes)

    types, names, refs = io_args(op)
    kb = KB.new_func(name, types, (blocks, 1, 1), (threads, 1, 1), smem, arg_names=names)
    ptrs, outs = bind_pointers(kb, op)
    em = BodyEmitter(kb, op, ptrs, outs)
    scratch = kb.shared(f32, warps, 0, 16, "scratch")
    tid = kb.thread_id()
    bid = kb.block_id()
    row_local = kb.div(tid, tpr) if rpb > 1 else kb.idx(0)
    t = kb.rem(tid, tpr) if rpb > 1 else tid
    row = kb.add(kb.mul(bid, rpb), row_local)
    row_mask = None if rows % rpb == 0 else kb.lt(row, rows)
    coords = decompose(kb, row, row_axes, ext) if row_axes else {}
    top = list(op.regions[0].block.ops)
    row_set = frozenset(row_axes)
    reduces = [o for o in top if isinstance(o, ReduceOp) and em.dom(o.result) <= row_set]
    scope = em.scope(coords, mask=row_mask)
    inner = info.vector_axis
    reduce_rows(kb, em, scope, reduces, t, tpr, vector, inner, scratch)

    # outputs: the non-row parallel axes of each store, spread over the row's threads
    stores = [o for o in top if isinstance(o, StoreOp)]
    for s in stores:
        col_axes = [a for a in info.parallel_axes if a in em.dom.of_op(s) and a not in row_set]
        if not col_axes:
            with kb.if_(kb.cmp("eq", t, 0)):
                scope.child({}).store(s)
            continue
        store_inner = _store_inner_axis(em, s, col_axes)
        axes = _order_inner_last(col_axes, store_inner)
        V = largest_divisor_pow2(ext[store_inner], vector)
        virt = {a: ext[a] for a in axes}
        virt[store_inner] = ext[store_inner] // V
        L = prod(virt.values())
        steps = -(-L // tpr)
        with kb.for_(0, steps, 1, unroll=4 if steps > 1 else None, name="col") as iv:
            pos = kb.add(kb.mul(iv, tpr), t)
            mask = None if L % tpr == 0 else kb.lt(pos, L)
            c = decompose(kb, pos, axes, virt)
            c[store_inner] = kb.mul(c[store_inner], V)
            cs = scope.child(c, mask=mask)
            cs.lane_axis, cs.lanes = (store_inner, V) if V > 1 else (None, 1)
            cs.store(s)
    func = kb.finish()
    return Built(funcs=[func], launches=[Launch(name, tuple(refs))], temps=[])


def _store_inner_axis(em: BodyEmitter, s: StoreOp, axes: list[str]) -> str:
    """The axis the store's last index moves with (contiguous in memory), among `axes`."""
    for idx in reversed(list(s.indices)):
        d = em.dom(idx)
        cands = [a for a in axes if a in d]
        if cands:
            return cands[-1]
    return axes[-1]
