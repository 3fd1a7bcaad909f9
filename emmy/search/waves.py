"""First trials that fill the card: other tile shapes for a contraction whose default leaves the
last wave part empty.

    wave_fillers(task, space, default, skip) -> [point, ...]   # enqueued by open_study

The default's neighbours change one knob a step, so they rarely reach a tile shape that fills
the card's waves, and a sampler finds one only by luck. So where the default's wave
quantization is above `SLACK` (the facts: `emmy.prior.waves`), a study also starts with the
`FILLERS` legal points nearest the default with another (block_m, block_n) that fills the waves
better and keeps at least `MIN_AREA` of the tile: the lowest quantization first, then the
larger tile, each shape first with the default's rows per warp (warps scaled with block_m), then
with the fewest knobs changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from emmy.prior.waves import MIN_AREA, SLACK, fills_better, fills_worse, grid_contraction, shapes, terms
from emmy.search.points import nearest, point_key

# How many fillers a study starts with.
FILLERS = 3


def wave_fillers(task, space, default: Mapping[str, object], skip=frozenset()) -> list[dict]:
    """The `FILLERS` points (module docstring) for a contraction task with a grid-scheduled
    default, best quantization first (then larger tiles); [] where the default fills its waves
    or nothing fills them better. `skip`: point keys already among the first trials."""
    from emmy.prior.features import Kernel

    domains = space.space.domains
    if not default or not grid_contraction(task.info(), domains, default):
        return []
    kernel = Kernel(task.info(), task.target_object())
    own = terms(kernel, default)
    if not fills_worse(own):
        return []
    fixed_rest = {k: v for k, v in (("schedule", "grid"), ("split_k", 1)) if k in domains}
    found, seen = [], set(skip)
    for bm, bn, warps in shapes(domains, default):
        for rank, extra in enumerate([*({"warps": w} for w in warps), {}]):
            point = nearest(space, default, {"block_m": bm, "block_n": bn, **fixed_rest, **extra})
            other = terms(kernel, point) if point is not None else None
            if not fills_better(own, other) or point_key(point) in seen:
                continue
            seen.add(point_key(point))
            found.append((other[0], -other[1], rank, point_key(point), point))
    found.sort(key=lambda f: f[:4])
    return [f[4] for f in found[:FILLERS]]


__all__ = ["FILLERS", "MIN_AREA", "SLACK", "wave_fillers"]
