"""Kernels whose outputs have different iteration spaces are built as one launch per group.

A fused loop may store several results over different parallel axes: the running example returns
q over n = 2048 and k, v over d2 = 1024, all from one normalized input. `split_by_outputs` makes one
copy of the tile op per group of outputs with the same axes, each keeping only its group's stores
and what they need (`emmy.schedule.plan.split_by_outputs`); `build_parts` builds each with its
plan (`emmy.schedule.plan.plan_kernel`: the whole op's knobs, block_n shared among a part's
contractions where that is legal). Where each part is one kernel with the
same block shape, `one_launch` puts them side by side in one kernel (the blocks of part 0 first,
then part 1's, ...): one launch whose blocks fill the machine together instead of one launch per
part, each with its own tail; parts that first launch the same helper (their row statistics)
keep one launch of it, then theirs as one. Otherwise (and with schedule = persistent, whose blocks each loop
over their part's tiles) `merge_built` joins the launches.
"""

from __future__ import annotations

from emmy.diagnostics import EmmyError
from emmy.lowering import Built, Launch, Out, Tmp
from emmy.lowering.common import kernel_ident


def build_parts(kplan, builder) -> Built:
    """Build each part of a kernel with its plan (`emmy.schedule.plan.plan_kernel`), then merge
    their launches as the plan says."""
    builts = [builder(p.op, p.info, p.plan) for p in kplan.parts]
    name = kernel_ident(kplan.name)
    if kplan.merge == "separate":
        return merge_built(builts)
    merged = (one_launch if kplan.merge == "one_launch" else _one_launch_after_shared_head)(builts, name, kplan.target)
    if merged is None:
        raise EmmyError(f"tile.kernel @{kplan.name}: its parts do not merge as planned ({kplan.merge})")
    return merged


def _one_launch_after_shared_head(builts: list[Built], name: str, target) -> Built | None:
    """Parts that each launch the same helper first (their row statistics, fusion = split) and
    then one kernel reading its buffer: the helper once, then the parts' kernels as one launch."""
    if len(builts) < 2 or any(len(b.launches) != 2 or len(b.funcs) != 2 or len(b.temps) != 1 for b in builts):
        return None
    keys = []
    for b in builts:
        funcs = {f.sym_name.data: f for f in b.funcs}
        keys.append(_producer_key(b.launches[0], funcs[b.launches[0].kernel], b))
    if keys[0] is None or any(k != keys[0] for k in keys):
        return None
    mains = []
    for b in builts:
        funcs = {f.sym_name.data: f for f in b.funcs}
        mains.append(Built(funcs=[funcs[b.launches[1].kernel]], launches=[b.launches[1]]))
    merged = one_launch(mains, name, target)
    if merged is None:
        return None
    head = builts[0]
    head_fn = next(f for f in head.funcs if f.sym_name.data == head.launches[0].kernel)
    return Built(funcs=[head_fn, *merged.funcs], launches=[head.launches[0], *merged.launches], temps=list(head.temps))


def one_launch(builts: list[Built], name: str, target) -> Built | None:
    """One kernel `name` running the parts' kernels side by side along the grid's x axis, or
    None where they differ in arguments, block shape, grid y/z, or need more shared memory
    together than a block may have. Each part's body runs in a branch on blockIdx.x, with
    blockIdx.x counted from the part's first block. Tensor maps (the trailing arguments of
    kernels that copy with the tensor memory accelerator) may differ: the kernel takes each
    distinct one once."""
    from emmy.lowering.kb import KB
    from emmy.dialects import kernel as K

    if len(builts) < 2 or any(len(b.funcs) != 1 or len(b.launches) != 1 or b.temps for b in builts):
        return None
    funcs = [b.funcs[0] for b in builts]
    first = funcs[0]
    n = _plain_args(first)
    arg_types = [a.type for a in first.body.block.args][:n]
    for f, b in zip(funcs, builts):
        if (
            _plain_args(f) != n
            or [a.type for a in f.body.block.args][:n] != arg_types
            or f.block_dims != first.block_dims
            or f.grid_dims[1:] != first.grid_dims[1:]
            or f.cluster_dims != first.cluster_dims
            or b.launches[0].args[:n] != builts[0].launches[0].args[:n]
        ):
            return None
    smem = max(f.smem_bytes for f in funcs)
    if smem > target.smem_per_block:
        return None
    # the distinct tensor maps, and where each part's maps are among the merged arguments
    names = [a.name_hint or f"arg{i}" for i, a in enumerate(first.body.block.args)][:n]
    launch_args = list(builts[0].launches[0].args[:n])
    slots: dict = {}
    positions = []
    for f, b in zip(funcs, builts):
        pos = list(range(n))
        for a, la in zip(f.body.block.args[n:], b.launches[0].args[n:]):
            key = (a.type, la)
            if key not in slots:
                slots[key] = len(arg_types)
                arg_types.append(a.type)
                names.append(a.name_hint or f"map{len(slots)}")
                launch_args.append(la)
            pos.append(slots[key])
        positions.append(pos)
    bounds = [f.min_blocks.value.data for f in funcs if f.min_blocks is not None]
    grid = (sum(f.grid_dims[0] for f in funcs), *first.grid_dims[1:])
    kb = KB.new_func(
        name, arg_types, grid, first.block_dims, smem, min(bounds) if bounds else None, arg_names=names,
        cluster=first.cluster_dims,
    )
    bid = kb.block_id("x")
    start = 0
    for i, f in enumerate(funcs):
        end = start + f.grid_dims[0]
        inside = kb.and_(kb.cmp("sge", bid, start) if i else None, kb.lt(bid, end) if i < len(funcs) - 1 else None)
        with kb.if_(inside):
            args = kb.func.body.block.args
            _inline(kb, f, kb.sub(bid, start), [args[p] for p in positions[i]])
        start = end
    assert all(isinstance(t, K.TensorMapType) for t in arg_types[n:])
    return Built(funcs=[kb.finish()], launches=[Launch(name, tuple(launch_args))])


def _plain_args(f) -> int:
    """The number of f's arguments before its trailing tensor maps."""
    from emmy.dialects import kernel as K

    n = len(f.body.block.args)
    while n and isinstance(f.body.block.args[n - 1].type, K.TensorMapType):
        n -= 1
    return n


def _inline(kb, f, bid_x, args) -> None:
    """Clone f's body at kb's insertion point, f's arguments read as `args` (kb's function's),
    and its blockIdx.x as `bid_x`."""
    from emmy.dialects import kernel as K

    mapper = dict(zip(f.body.block.args, args))
    for op in f.body.block.ops:
        if isinstance(op, K.ReturnOp):
            continue
        if isinstance(op, K.BlockIdOp) and op.dim.data == "x":
            mapper[op.result] = bid_x
            continue
        new = op.clone(mapper)
        kb.insert(new)
        for inner in list(new.walk()):
            if inner is not new and isinstance(inner, K.BlockIdOp) and inner.dim.data == "x":
                inner.result.replace_by(bid_x)
                inner.detach()
                inner.erase()


def merge_built(builts: list[Built]) -> Built:
    """One Built from several (temporary buffer numbers shifted, zeroed ones staying zeroed). A helper launch that only reads
    inputs and writes one temporary buffer (a part's row statistics, `<part>_stats`) and does
    exactly what an earlier part's does is dropped: the later part reads the earlier buffer."""
    out = Built()
    done: dict[tuple, int] = {}  # (kernel text, inputs, buffer type) -> the buffer in out.temps
    for b in builts:
        funcs = {f.sym_name.data: f for f in b.funcs}
        remap: dict[int, int] = {}
        for launch in b.launches:
            key = _producer_key(launch, funcs[launch.kernel], b)
            if key is not None and key in done:
                remap[launch.args[-1].index] = done[key]
                continue
            for a in launch.args:
                if isinstance(a, Tmp) and a.index not in remap:
                    remap[a.index] = len(out.temps)
                    if a.index in b.zeroed:
                        out.zeroed.add(len(out.temps))
                    out.temps.append(b.temps[a.index])
            if key is not None:
                done[key] = remap[launch.args[-1].index]
            out.funcs.append(funcs[launch.kernel])
            args = tuple(Tmp(remap[a.index]) if isinstance(a, Tmp) else a for a in launch.args)
            out.launches.append(Launch(launch.kernel, args))
    return out


def _producer_key(launch: Launch, func, built: Built) -> tuple | None:
    """For a launch whose last argument is a temporary buffer it writes and whose others are the
    op's inputs: what it computes, independent of its name. None for any other launch."""
    *reads, last = launch.args
    if not isinstance(last, Tmp) or any(isinstance(a, (Tmp, Out)) for a in reads):
        return None
    text = str(func).replace(f"@{func.sym_name.data}", "@_")
    return (text, tuple(reads), str(built.temps[last.index]))
