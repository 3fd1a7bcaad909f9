"""The nearest tier's reshape: a borrowed tile that leaves this shape's last wave part empty.

A tile measured best at 4096 tokens (the Qwen3 layer's o projection: 128 x 256, 32 x 4 = 128
blocks on 132 SMs) leaves 36 SMs idle at 3000 tokens (24 x 4 = 96 blocks) where another shape
fills the card (256 x 96: 12 x 11 = 132 blocks); the H200 ran them 33.7 and 24.8 us.
What was measured elsewhere says which values are good for this kernel's structure; what the
shape changes (the tile count against the SM count) is what the prior's physical model counts.
So where the borrowed assignment is a grid contraction whose wave quantization here is above
`emmy.prior.waves.SLACK`, the tile shapes that fill the waves better (`emmy.prior.waves.shapes`,
each with the borrowed warps per tile row or the borrowed warps, every other knob as borrowed)
are ranked by the physical model (the fitted coefficients without the learned correction, as
the vet does: `emmy.evidence.prior.NearestVet`), and the fastest replaces the borrowed tile when
predicted at least `RESHAPE_MARGIN` faster. Tile heights and widths the fit has not seen
(`emmy.prior.waves.UNFITTED_BLOCK_M`: 192 rows; `UNFITTED_VALUES`: 160 columns) are not among them. A narrower tile gets the
deeper k step that keeps each warpgroup's multiply-adds per step as borrowed
(`emmy.prior.waves.deeper_step`), where
that is legal and block_k is not pinned: the physical model prices the two steps alike, the
H200 does not (15.19 against 12.77 us for the o projection at 1024 tokens). Pinned tile knobs
are never changed, and every reshaped assignment is legal here (`emmy.tuning.legality.check`).
The work is `emmy.prior.waves.fill_waves`, which the prior tier applies to the rules' answer
and `emmy prior evaluate` to the anchor it judges.

    reshape = Reshape(prior)
    reshape(problem, fixed, values) -> (values', detail) | None   # detail: JSON-able, for --explain
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from emmy.prior.waves import RESHAPE_MARGIN, fill_waves
from emmy.tuning.deciders import Answer, Problem


@dataclass(frozen=True)
class Reshape:
    prior: object  # emmy.prior.store.Prior (fitted)

    def __call__(self, problem: Problem, fixed: Mapping[str, Answer],
                 values: Mapping[str, object]) -> tuple[dict, dict] | None:
        return fill_waves(problem.info, problem.target, problem.space, values, self.prior.coeffs, fixed)


def describe(detail: Mapping[str, object]) -> str:
    """One line for a reshape's detail (the reason --explain prints)."""
    a, b = detail["from"], detail["to"]
    qa, qb = detail["quant"]
    deeper = (f"; k steps {b['block_k']} deep instead of {a['block_k']}, to keep each warpgroup's multiply-adds per step"
              if a.get("block_k") != b.get("block_k") else "")
    return (f"reshaped from {a['block_m']} x {a['block_n']} ({a.get('warps', '?')} warps) to {b['block_m']} x "
            f"{b['block_n']} ({b.get('warps', '?')} warps) to fill the waves here (wave quantization {qa:.2f} -> {qb:.2f}; "
            f"the prior's physical model predicts {detail['predicted_s'] * 1e6:.2f} us against "
            f"{detail['borrowed_predicted_s'] * 1e6:.2f} us{deeper})")


__all__ = ["RESHAPE_MARGIN", "Reshape", "describe"]
