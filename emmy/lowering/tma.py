"""Operand tiles copied by the tensor memory accelerator (contraction knob `copy = tma`).

An operand whose tile is a plain bf16 load (a `Leaf` of emmy/lowering/staging.py) addressed as
`offset + row * stride + k` — one row axis of the operand's side, the one k axis with unit
stride — is a 2-D view of its tensor, and a tensor map over that view copies a whole
`rows x slab` piece of the tile per instruction, in the swizzled layout the tensor cores read
(emmy/backend/runtime/emmy_tma.cuh). The kernel gets one `!kernel.tensor_map` argument per such
operand, bound at launch to the operand's tensor.

    tensor_view(load, row_axis, k_axis, extents, box_rows, box_cols) -> TensorMapType | None
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.dialects.builtin import BFloat16Type, IntAttr, TensorType, bf16

from emmy.analysis.indexing import affine_form
from emmy.lowering.scalar import row_major_strides
from emmy.dialects import kernel as K
from emmy.dialects.loop import LoadOp
from emmy.dialects.tensor_map import MAX_BOX_ROWS


@dataclass(frozen=True)
class MapOperand:
    """One operand tile copied through a tensor map: side "a" (index 0) or "b" (contraction
    `index`), the load it copies, the map's type, and the tile op operand it is bound to."""

    side: str
    index: int
    load: LoadOp
    view: K.TensorMapType
    operand: int


def tensor_view(
    load: LoadOp, row_axis: str, k_axis: str, extents: dict[str, int], box_rows: int, box_cols: int
) -> K.TensorMapType | None:
    """The tensor map type of `load` as a view with one row per value of `row_axis` and one
    column per value of `k_axis`, boxes of box_rows x box_cols; None when the load is not such
    a view (other axes, k not contiguous, rows not 16-byte aligned, a box too tall)."""
    t = load.tensor.type
    if not isinstance(t, TensorType) or not isinstance(t.element_type, BFloat16Type):
        return None
    if box_rows > MAX_BOX_ROWS:
        return None
    coeffs: dict[str, int] = {}
    const = 0
    for index, stride in zip(load.indices, row_major_strides(t.get_shape())):
        form = affine_form(index)
        if form is None:
            return None
        const += form.constant * stride
        for axis, c in form.coeffs.items():
            coeffs[axis] = coeffs.get(axis, 0) + c * stride
    coeffs = {a: c for a, c in coeffs.items() if c}
    if set(coeffs) != {row_axis, k_axis} or coeffs[k_axis] != 1:
        return None
    stride, rows, cols = coeffs[row_axis], extents[row_axis], extents[k_axis]
    if stride < cols or (2 * stride) % 16 or (2 * const) % 16 or const < 0:
        return None
    if const + (rows - 1) * stride + cols > prod(t.get_shape()):
        return None
    params = (rows, cols, stride, const, box_rows, box_cols)
    return K.TensorMapType(bf16, *(IntAttr(p) for p in params))


__all__ = ["MapOperand", "tensor_view"]
