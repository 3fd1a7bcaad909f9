"""The rules for reductions and elementwise kernels (`emmy.tuning.rules`): 16-byte vectors, a warp
or a block per row, enough blocks to fill the SMs; more items per thread for large tensors.
"""

from __future__ import annotations

from math import ceil, prod
from typing import TYPE_CHECKING

from emmy.tuning.rules_common import Prefs, closest_first, dispatch, pow2_floor, vector_prefs

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo


def _r_vector(knob, info, target, chosen, memo) -> Prefs:
    """16-byte vectors, but no wider than a warp's 32 lanes can share along the row: a row of
    128 elements read 8 at a time leaves half the lanes idle (the attention reductions of Qwen3's
    128-wide heads, H200: 2.56 against 1.77 us at 4, 4.86 against 3.22 us)."""
    prefs = vector_prefs(info)
    fits = [(v, why) for v, why in prefs if 32 * int(v) <= info.row_length]
    if not fits or len(fits) == len(prefs):
        return prefs
    lanes = [(v, f"{why}; 32 lanes x {v} = {32 * int(v)} <= a row of {info.row_length}") for v, why in fits]
    return lanes + [(v, f"{why} (leaves lanes of the row's warp idle)") for v, why in prefs if (v, why) not in fits]


def _threads_per_row(info: KernelInfo, vector: int) -> int:
    vectors = ceil(info.row_length / vector)
    return max(32, min(1024, pow2_floor(max(1, vectors / 4)) if vectors > 128 else 32))


def _r_rows(knob, info, target, chosen, memo) -> Prefs:
    tpr = _threads_per_row(info, int(chosen.get("vector", 1)))
    rows = info.rows
    if tpr == 32:
        want = 1
        for r in (8, 4, 2):
            if ceil(rows / r) >= target.sms and 32 * r <= 256:
                want = r
                break
        why = (
            f"one warp per row of {info.row_length}; {want} rows per block leave "
            f"{ceil(rows / want)} blocks for {target.sms} SMs"
        )
    else:
        want = 1
        why = f"a block of {tpr} threads per row of {info.row_length}"
    values = closest_first((1, 2, 4, 8, 16), want)
    return [(v, why if v == want else f"{v} row(s) per block") for v in values]


def _r_threads(knob, info, target, chosen, memo) -> Prefs:
    tpr = _threads_per_row(info, int(chosen.get("vector", 1)))
    rpb = int(chosen.get("rows_per_block", 1))
    want = min(1024, tpr * rpb)
    values = closest_first((32, 64, 128, 256, 512, 1024), want)
    why = f"{tpr} threads per row x {rpb} row(s)"
    return [(v, why if v == want else f"{v} threads (the preferred {want} does not fit)") for v in values]


def _e_vector(knob, info, target, chosen, memo) -> Prefs:
    return vector_prefs(info)


def _e_threads(knob, info, target, chosen, memo) -> Prefs:
    return [(v, f"{v} threads per block") for v in (256, 128, 512, 64, 1024)]


def _e_items(knob, info, target, chosen, memo) -> Prefs:
    numel = prod(info.axes[a] for a in info.parallel_axes)
    per = int(chosen.get("threads", 256)) * int(chosen.get("vector", 1))
    want = 1
    for items in (8, 4, 2):
        if ceil(numel / (per * items)) >= 4 * target.sms:
            want = items
            break
    why = f"{numel} elements: {ceil(numel / (per * want))} blocks of {per * want}"
    values = closest_first((1, 2, 4, 8), want)
    return [(v, why if v == want else f"{v} items per thread") for v in values]


REDUCTION_ORDER = ("vector", "rows_per_block", "threads")
REDUCTION_PREFS = dispatch({"vector": _r_vector, "rows_per_block": _r_rows, "threads": _r_threads})
ELEMENTWISE_ORDER = ("vector", "threads", "items")
ELEMENTWISE_PREFS = dispatch({"vector": _e_vector, "threads": _e_threads, "items": _e_items})
