"""Elementwise kernels: every output element from loads and scalar code, no reduction.

Schedule (knobs `threads`, `vector`, `items`):
- the iteration space is the loop's axes, the stores' innermost axis fastest, cut into vectors of
  `vector` consecutive elements along it (16-byte accesses for 8 bf16);
- thread `tid` of block `b` handles vectors `(b * items + i) * threads + tid` for i < items
  (consecutive threads on consecutive vectors: coalesced), a tail mask guards the last block;
- loads contiguous along the vector axis become one vector load, stores one vector store.

    kernel.func @k(...) grid [ceil(vectors / (threads * items)), 1, 1] block [threads, 1, 1] smem 0
      for i in 0..items (unrolled): slot -> coordinates -> loads, scalar code, stores
"""

from __future__ import annotations


from emmy.lowering import Built, Launch
from emmy.lowering.common import bind_pointers, decompose, io_args, kernel_ident
from emmy.lowering.kb import KB
from emmy.lowering.scalar import BodyEmitter
from emmy.dialects.loop import StoreOp
from emmy.schedule.elementwise import ElementwisePlan


def axis_order(op, info) -> list[str]:
    """Iteration order: by first appearance in the stores' indices, the vector axis last."""
    from emmy.analysis.classify import Domains

    dom = Domains(op)
    order = sorted(info.axes, key=lambda a: _store_pos(info, dom, a))
    if info.vector_axis in order:
        order.remove(info.vector_axis)
        order.append(info.vector_axis)
    return order


def _store_pos(info, dom, axis: str) -> tuple[int, int]:
    n = 0
    for s in info.stores:
        for idx in s.indices:
            if axis in dom(idx):
                return (0, n)
            n += 1
    return (1, list(info.axes).index(axis))


def build(op, info, plan: ElementwisePlan) -> Built:
    """The kernel of an elementwise `tile.kernel` as its plan says."""
    name = kernel_ident(op.properties["sym_name"].data)
    threads, items, V, vaxis, slots, blocks = plan.threads, plan.items, plan.vector, plan.vector_axis, plan.slots, plan.blocks
    axes = axis_order(op, info)
    virt = dict(info.axes)
    if vaxis:
        virt[vaxis] = info.axes[vaxis] // V
    per_block = threads * items

    types, names, refs = io_args(op)
    kb = KB.new_func(name, types, (blocks, 1, 1), (threads, 1, 1), 0, arg_names=names)
    ptrs, outs = bind_pointers(kb, op)
    em = BodyEmitter(kb, op, ptrs, outs)
    tid = kb.thread_id()
    bid = kb.block_id()
    stores = [o for o in op.regions[0].block.ops if isinstance(o, StoreOp)]
    with kb.for_(0, items, 1, unroll=0, name="item") as it:
        slot = kb.add(kb.mul(kb.add(kb.mul(bid, items), it), threads), tid)
        mask = None if slots % per_block == 0 else kb.lt(slot, slots)
        coords = decompose(kb, slot, axes, virt) if axes else {}
        if vaxis:
            coords[vaxis] = kb.mul(coords[vaxis], V)
        scope = em.scope(coords, lane_axis=vaxis or None, lanes=V, mask=mask)
        for s in stores:
            scope.store(s)
    func = kb.finish()
    return Built(funcs=[func], launches=[Launch(name, tuple(refs))], temps=[])
