"""Tile shapes that fill the card's waves: a fact of the cost model shared by the search (a
study's first trials, `emmy.search.waves`) and the nearest tier (a borrowed tile reshaped for
this shape, `emmy.evidence.reshape`).

    terms(kernel, values) -> (quant, tile_area) | None
    fills_worse(kernel, values) -> bool          # quant above SLACK: worth trying other shapes
    shapes(domains, values) -> [(block_m, block_n, [warps, ...]), ...]

A contraction's blocks run in waves of one block per SM; when a tile count is a little over or
under a multiple of the SM count, the last wave keeps few SMs busy (the Qwen3 layer's down
projection at 3000 tokens: 128 x 256 tiles, 96 blocks on 132 SMs, 45.2 us; 256 x 96 tiles, 132
blocks, 33.5 us on an H200). `quant` (`emmy.prior.features`) is the busiest SM's blocks over
the average. Where it is above `SLACK`, other (block_m, block_n) whose quantization is lower and
that keep at least `MIN_AREA` of the tile are worth a look (smaller tiles starve the tensor
cores on operand traffic), each first with the same rows per warp (warps scaled with block_m).

A narrower tile also does less per k-step: each step's barrier wait and wgmma issue is paid
for fewer multiply-adds. `deeper_step` gives the block_k that keeps a warpgroup's multiply-adds
per step where a shape has fewer of them (the o and down projections at 1024 tokens, 128 x 128
tiles from 2048 tokens narrowed to 128 x 64: with block_k 64, 15.19 and 17.68 us on an H200;
with 128, which keeps the step's work, 12.77 and 15.49 us).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from emmy.diagnostics import EmmyError

# The wave quantization above which other tile shapes are worth a look (1.0: whole waves).
SLACK = 1.15
# The least tile area another shape keeps (a share of the one it replaces).
MIN_AREA = 0.5
# A consumer warpgroup's multiply-adds per k-step (`step_work`) that the rules give a
# warp-specialized tile where its block_k can reach it exactly: 64 rows x 128 columns x 64 deep,
# the step of the H200's best tiles (128 x 128, 64 deep, two consumer warpgroups).
FULL_STEP_WORK = 64 * 128 * 64


def terms(kernel, values: Mapping[str, object]) -> tuple[float, float] | None:
    """(wave quantization, tile area) of an assignment (`kernel`: `emmy.prior.features.Kernel`);
    None where it cannot be planned."""
    try:
        f = kernel.features(values)
    except EmmyError:
        return None
    return f["quant"], f["tile_area"]


def grid_contraction(info, domains: Mapping[str, Sequence[object]], values: Mapping[str, object]) -> bool:
    """Whether the assignment is one whose waves a tile shape decides: a contraction (`info`: its
    KernelInfo) scheduled as a grid without split-k, with block_m and block_n to change."""
    return (info.kind == "contraction" and "block_m" in domains and "block_n" in domains
            and values.get("schedule", "grid") == "grid" and values.get("split_k", 1) == 1)


def fills_worse(own: tuple[float, float] | None) -> bool:
    """Whether an assignment's (quant, area) leaves enough of its last wave empty to look further."""
    return own is not None and own[0] > SLACK


def fills_better(own: tuple[float, float], other: tuple[float, float] | None) -> bool:
    """Whether another shape's (quant, area) fills the waves better and keeps enough of the tile."""
    return other is not None and other[0] < own[0] and other[1] >= MIN_AREA * own[1]


# Tile heights the prior's fit has no measurement of: 192 rows (three consumer warpgroups) came
# after it. Neither a reshape nor the prior tier's neighbourhood (emmy.prior.choose) moves a
# tile there (the rules may: emmy.tuning.rules_tiles.unruled): the fitted model ranked 192 x 128 first for the
# Qwen3 o and down projections at 3000 tokens, which ran 2-3% slower on the H200 than the 256 x 96
# it replaced (docs/bench/h200-qwen-proj-stages-2026-12-03g.log against h200-qwen192-2026-12-03g.log).
UNFITTED_BLOCK_M: frozenset[int] = frozenset({192})
# Knob values the model has no term for: epilogue = pingpong (each consumer warpgroup takes whole
# tiles, one's epilogue beside the other's k loop) would read as `together` with twice the
# accumulators a thread. Nor has it seen attention with three consumer warpgroups (block_q =
# 192, the only block_q with warps = 12: their turns and 160 registers a consumer), which no
# record measured when it was fitted; nor tiles 160 columns wide, which came after it. The prior
# tier's neighbourhood leaves them out unless its anchor has them, and a reshape never moves a
# tile there: reshaping the Qwen3 o projection's borrowed tile to 64 x 160 at 1100 tokens,
# predicted 17.68 us against 21.03, ran 17.6 us on an H100 against 15.5 for the 128 x 96 it
# replaced (docs/bench/h100-n160-deploy-2026-12-06c.log). Nor, for now, warpgroups slicing the
# columns (slices = cols): no record measured one when it was fitted.
UNFITTED_VALUES: frozenset[tuple[str, object]] = frozenset(
    {("epilogue", "pingpong"), ("block_q", 192), ("block_n", 160), ("slices", "cols")}
)
_UNFITTED_WIDTHS = frozenset(v for k, v in UNFITTED_VALUES if k == "block_n")  # for `shapes`


def shapes(domains: Mapping[str, Sequence[object]], values: Mapping[str, object],
           heights_left_out: frozenset[int] = frozenset(),
           widths_left_out: frozenset[int] = frozenset()) -> Iterator[tuple[int, int, list]]:
    """Every other (block_m, block_n) of the domains (block_m not in `heights_left_out`, block_n
    not in `widths_left_out`: the reshape leaves out the tile heights and widths the fit has not
    seen, a tuning study's first trials nothing), with the warps to try: the same rows per warp
    as `values` first (warps scaled with block_m) where the domain has it."""
    bm0, bn0, w0 = values["block_m"], values["block_n"], values.get("warps", 0)
    for bm in domains["block_m"]:
        if bm in heights_left_out:
            continue
        for bn in domains["block_n"]:
            if (bm, bn) == (bm0, bn0) or bn in widths_left_out:
                continue
            scaled = w0 * bm // bm0
            yield bm, bn, [scaled] if scaled in domains.get("warps", ()) else []


def warpgroup_rows(values: Mapping[str, object]) -> int:
    """The rows of the tile one consumer warpgroup computes (block_m over warps / 4)."""
    return int(values["block_m"]) // max(1, int(values["warps"]) // 4)


def step_work(values: Mapping[str, object]) -> int | None:
    """Multiply-adds per k-step of one consumer warpgroup (its rows x block_n x block_k) of a
    wgmma assignment; None for other workers (their warps split a tile otherwise)."""
    from emmy.tuning.knobs import WGMMA_WORKERS

    if values.get("workers") not in WGMMA_WORKERS or not values.get("warps"):
        return None
    return warpgroup_rows(values) * int(values["block_n"]) * int(values["block_k"])


def _step_for(domains: Mapping[str, Sequence[object]], values: Mapping[str, object], want: int | None) -> int | None:
    """The block_k of the domain that brings `values`' step work up to `want` exactly, where its
    own falls short by a whole factor; else None."""
    own = step_work(values)
    if own is None or want is None or own >= want or want % own:
        return None
    bk = int(values["block_k"]) * (want // own)
    return bk if bk in domains.get("block_k", ()) else None


def full_step(domains: Mapping[str, Sequence[object]], values: Mapping[str, object]) -> int | None:
    """The block_k of the domain that brings a wgmma assignment's step work up to
    `FULL_STEP_WORK` exactly, where its own falls short by a whole factor; else None."""
    return _step_for(domains, values, FULL_STEP_WORK)


def deeper_step(domains: Mapping[str, Sequence[object]], borrowed: Mapping[str, object],
                candidate: Mapping[str, object]) -> int | None:
    """The block_k of the domain that gives `candidate` (another tile shape for `borrowed`'s
    values) the step work `borrowed` has, where that is a deeper step than its own; None where
    the candidate's steps are no smaller, the scale is not exact or the domain lacks it."""
    return _step_for(domains, candidate, step_work(borrowed))


# How much faster the physical model must predict another tile shape than the one it reshapes. The
# model's ranking of tile shapes alone errs less than its held-out margin over every knob
# (Prior.margin: 1.26 for contractions, mostly from copies and workers it mispredicts); on the
# H200 the fillers it ranks first measured 1.08x-1.36x faster where it predicted 1.16x-1.25x
# (the o and down projections at 2560 and 3000 tokens).
RESHAPE_MARGIN = 1.05
TILE_KNOBS = ("block_m", "block_n", "warps", "block_k")


def fill_waves(info, target, domains: Mapping[str, Sequence[object]], values: Mapping[str, object],
               coeffs: Mapping[str, float], fixed: Collection[str] = ()) -> tuple[dict, dict] | None:
    """`values` (a grid contraction's assignment) with the tile shape that fills the waves
    better, where the physical model (`coeffs`: fitted coefficients, no learned correction)
    predicts it at least `RESHAPE_MARGIN` faster, and its detail (JSON-able); None where the
    tile stays. The candidates are `shapes` (no tile height in `UNFITTED_BLOCK_M`, no width in
    `UNFITTED_VALUES`), each with
    the scaled warps or its own, every one legal; a narrower tile gets the deeper k step of
    `deeper_step` where that is legal. Knobs in `fixed` (pins) never change. What the nearest
    tier does to a borrowed tile and the prior tier to the rules' (`emmy.evidence.reshape`)."""
    from emmy.prior.features import Kernel
    from emmy.prior.model import score
    from emmy.tuning.legality import check

    if any(k in fixed for k in ("block_m", "block_n")) or not grid_contraction(info, domains, values):
        return None
    kernel = Kernel(info, target)
    own = terms(kernel, values)
    if not fills_worse(own):
        return None
    own_s = score(kernel, values, coeffs, penalized=False)
    if own_s is None:
        return None
    best = None
    for bm, bn, scaled in shapes(domains, values, UNFITTED_BLOCK_M, _UNFITTED_WIDTHS):
        warps = [values.get("warps")] if "warps" in fixed else [*scaled, values.get("warps")]
        for w in dict.fromkeys(warps):
            candidate = {**values, "block_m": bm, "block_n": bn, **({"warps": w} if w is not None else {})}
            if check(info, candidate, target):
                continue
            other = terms(kernel, candidate)
            if not fills_better(own, other):
                continue
            t = score(kernel, candidate, coeffs, penalized=False)
            if t is not None and (best is None or t < best[0]):
                best = (t, candidate, other)
    if best is None or best[0] * RESHAPE_MARGIN > own_s:
        return None
    t, candidate, other = best
    bk = None if "block_k" in fixed else deeper_step(domains, values, candidate)
    if bk is not None and not check(info, deeper := {**candidate, "block_k": bk}, target):
        candidate = deeper
        t = score(kernel, candidate, coeffs, penalized=False) or t
    detail = {"from": {k: values[k] for k in TILE_KNOBS if k in values},
              "to": {k: candidate[k] for k in TILE_KNOBS if k in candidate},
              "quant": [round(own[0], 3), round(other[0], 3)],
              "predicted_s": t, "borrowed_predicted_s": own_s, "margin": RESHAPE_MARGIN}
    return candidate, detail


__all__ = ["FULL_STEP_WORK", "MIN_AREA", "RESHAPE_MARGIN", "SLACK", "TILE_KNOBS", "deeper_step", "fill_waves", "fills_better",
           "fills_worse", "full_step", "grid_contraction", "shapes", "step_work", "terms", "warpgroup_rows"]
