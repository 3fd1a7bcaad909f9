"""First trials that fill the card: other tile shapes for a contraction whose default leaves the
last wave part empty.

    wave_fillers(task, space, default, skip) -> [point, ...]   # enqueued by open_study

A contraction's blocks run in waves of one block per SM; when the default answer's tile count
is a little over or under a multiple of the SM count, the last wave keeps few SMs busy (the
Qwen3 layer's down projection at 3000 tokens: 128 x 256 tiles, 96 blocks on 132 SMs, 45.2 us;
256 x 96 tiles, 132 blocks, 33.5 us on an H200). The default's neighbours change one knob a
step, so they rarely reach a shape that fixes this, and a sampler finds it only by luck. So
where the default's wave quantization (`emmy.prior.features`: `quant`, the busiest SM's blocks
over the average) is above `SLACK`, a study also starts with the `FILLERS` legal points nearest
the default with another (block_m, block_n) whose quantization is lower, keeping at least
`MIN_AREA` of the default's tile (smaller tiles starve the tensor cores on operand traffic):
the lowest quantization first, then the larger tile, each shape first with the default's rows
per warp (warps scaled with block_m), then with the fewest knobs changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from emmy.diagnostics import EmmyError
from emmy.search.points import nearest, point_key

# The default's wave quantization above which fillers are tried (1.0: whole waves).
SLACK = 1.15
# How many fillers a study starts with, and the least tile area they keep (a share of the default's).
FILLERS = 3
MIN_AREA = 0.5


def wave_fillers(task, space, default: Mapping[str, object], skip=frozenset()) -> list[dict]:
    """The `FILLERS` points (module docstring) for a contraction task with a grid-scheduled
    default, best quantization first (then larger tiles); [] where the default fills its waves
    or nothing fills them better. `skip`: point keys already among the first trials."""
    from emmy.prior.features import Kernel

    domains = space.space.domains
    if task.info().kind != "contraction" or not default or "block_m" not in domains or "block_n" not in domains:
        return []
    if default.get("schedule", "grid") != "grid" or default.get("split_k", 1) != 1:
        return []
    kernel = Kernel(task.info(), task.target_object())
    own = _terms(kernel, default)
    if own is None or own[0] <= SLACK:
        return []
    fixed_rest = {k: v for k, v in (("schedule", "grid"), ("split_k", 1)) if k in domains}
    found, seen = [], set(skip)
    for bm in domains["block_m"]:
        for bn in domains["block_n"]:
            if (bm, bn) == (default["block_m"], default["block_n"]):
                continue
            # the same rows per warp as the default first (warps scaled with block_m), then the nearest
            scaled = default.get("warps", 0) * bm // default["block_m"]
            tries = [{"warps": scaled}] if scaled in domains.get("warps", ()) else []
            for rank, extra in enumerate([*tries, {}]):
                point = nearest(space, default, {"block_m": bm, "block_n": bn, **fixed_rest, **extra})
                terms = _terms(kernel, point) if point is not None else None
                if terms is None or terms[0] >= own[0] or terms[1] < MIN_AREA * own[1] or point_key(point) in seen:
                    continue
                seen.add(point_key(point))
                found.append((terms[0], -terms[1], rank, point_key(point), point))
    found.sort(key=lambda f: f[:4])
    return [f[4] for f in found[:FILLERS]]


def _terms(kernel, values: Mapping[str, object]) -> tuple[float, float] | None:
    """(wave quantization, tile area) of a candidate; None where it cannot be planned."""
    try:
        f = kernel.features(values)
    except EmmyError:
        return None
    return f["quant"], f["tile_area"]


__all__ = ["FILLERS", "MIN_AREA", "SLACK", "wave_fillers"]
