"""Kernels whose outputs have different iteration spaces are built as one launch per group.

A fused loop may store several results over different parallel axes: the running example returns
q over n = 2048 and k, v over d2 = 1024, all from one normalized input. `split_by_outputs` makes one
copy of the tile op per group of outputs with the same axes, each keeping only its group's stores
and what they need; `build_parts` builds each with the whole op's knobs (adjusted where a part
needs more registers than the whole was decided for) and `merge_built` joins the launches.
"""

from __future__ import annotations

from emmy.codegen import Built, Launch, Tmp
from emmy.dialects.loop import StoreOp


def build_parts(parts, knobs, target, builder) -> Built:
    from emmy.analysis.classify import classify

    return merge_built([fit_part(p, classify(p), knobs, target, builder) for p in parts])


def fit_part(part, info, knobs, target, builder) -> Built:
    """Build one part with the whole op's knobs. A part may need more than the whole was decided
    for (k and v together: two accumulators against the whole's one): its block_n is halved, then
    its pipeline made shallower, until the legality check passes."""
    from emmy.tuning.legality import check

    values = dict(knobs)
    while check(info, values, target) and int(values.get("block_n", 0)) > 64:
        values["block_n"] = int(values["block_n"]) // 2
    while check(info, values, target) and int(values.get("stages", 1)) > 1:
        values["stages"] = int(values["stages"]) - 1
    return builder(part, info, values, target)


def split_by_outputs(op) -> list:
    """Copies of the tile op, one per group of outputs stored over the same parallel axes, each
    keeping only its group's stores and what they need ([op] itself when there is one group).
    Each copy computes its rows' statistics itself; normalized values still never reach global
    memory."""
    from xdsl.dialects.builtin import StringAttr

    from emmy.analysis.body import domain

    top = list(op.regions[0].block.ops)
    stores = [i for i, o in enumerate(top) if isinstance(o, StoreOp)]
    groups: dict[tuple[str, ...], list[int]] = {}
    for i in stores:
        st = top[i]
        axes = tuple(sorted({a for v in st.operands for a in domain(v)}))
        groups.setdefault(axes, []).append(i)
    if len(groups) < 2:
        return [op]
    name = op.properties["sym_name"].data
    parts = []
    for keep in groups.values():
        part = op.clone()
        ops = list(part.regions[0].block.ops)
        for i in stores:
            if i not in keep:
                ops[i].detach()
                ops[i].erase()
        _erase_dead(part.regions[0].block)
        outs = "_".join(str(top[i].properties["output"].value.data) for i in keep)
        part.properties["sym_name"] = StringAttr(f"{name}_out{outs}")
        parts.append(part)
    return parts


def _erase_dead(block) -> None:
    changed = True
    while changed:
        changed = False
        for o in reversed(list(block.ops)):
            if o is block.last_op or isinstance(o, StoreOp):  # the terminator, the kept stores
                continue
            if all(not r.uses for r in o.results):
                o.detach()
                o.erase()
                changed = True


def merge_built(builts: list[Built]) -> Built:
    """One Built from several (temporary buffer numbers shifted)."""
    out = Built()
    for b in builts:
        shift = len(out.temps)
        out.funcs += b.funcs
        out.temps += b.temps
        for launch in b.launches:
            args = tuple(Tmp(a.index + shift) if isinstance(a, Tmp) else a for a in launch.args)
            out.launches.append(Launch(launch.kernel, args))
    return out


