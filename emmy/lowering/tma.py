"""Operand tiles copied by the tensor memory accelerator (contraction knob `copy = tma`).

An operand whose tile is a plain bf16 load (a `Leaf` of emmy/lowering/staging.py) addressed as
`offset + row * stride + k` — one row axis of the operand's side, the one k axis with unit
stride — is a 2-D view of its tensor, and a tensor map over that view copies a whole
`rows x slab` piece of the tile per instruction, in the swizzled layout the tensor cores read
(emmy/backend/runtime/emmy_tma.cuh). The kernel gets one `!kernel.tensor_map` argument per such
operand, bound at launch to the operand's tensor.

With `planes`, a load that reads the k axis as `k / D` in one dimension and `k % D` in the
contiguous last one (attention's output [heads, tokens, head dim] read as the o projection's
rows x (heads * head dim) A side) is a view of D columns in k / D planes (a three-dimensional
map, `emmy/dialects/tensor_map.py`), where D is a multiple of the box's columns.

    tensor_view(load, row_axis, k_axis, extents, box_rows, box_cols, planes=False) -> TensorMapType | None
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, IntAttr, TensorType, bf16
from xdsl.ir import SSAValue

from emmy.analysis.indexing import affine_form, constant_int
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
    load: LoadOp, row_axis: str, k_axis: str, extents: dict[str, int], box_rows: int, box_cols: int,
    planes: bool = False,
) -> K.TensorMapType | None:
    """The tensor map type of `load` as a view with one row per value of `row_axis` and one
    column per value of `k_axis`, boxes of box_rows x box_cols; None when the load is not such
    a view (other axes, k not contiguous, rows not 16-byte aligned, a box too tall). With
    `planes`, also a view in planes (module docstring)."""
    t = load.tensor.type
    if not isinstance(t, TensorType) or not isinstance(t.element_type, BFloat16Type):
        return None
    if box_rows > MAX_BOX_ROWS:
        return None
    coeffs: dict[str, int] = {}
    const = 0
    split: dict[str, tuple[int, int]] = {}  # "div" / "rem" -> (D, the dimension's stride)
    for index, stride in zip(load.indices, row_major_strides(t.get_shape())):
        form = affine_form(index)
        if form is None:
            part = _k_part(index, k_axis) if planes else None
            if part is None or part[0] in split:
                return None
            split[part[0]] = (part[1], stride)
            continue
        const += form.constant * stride
        for axis, c in form.coeffs.items():
            coeffs[axis] = coeffs.get(axis, 0) + c * stride
    coeffs = {a: c for a, c in coeffs.items() if c}
    n = prod(t.get_shape())
    if split:
        return _planes_view(split, coeffs, const, row_axis, k_axis, extents, box_rows, box_cols, n)
    if set(coeffs) != {row_axis, k_axis} or coeffs[k_axis] != 1:
        return None
    return _map_type(extents[row_axis], extents[k_axis], coeffs[row_axis], const, box_rows, box_cols, n)


def _k_part(index: SSAValue, k_axis: str) -> tuple[str, int] | None:
    """("div", D) for `k / D`, ("rem", D) for `k % D` (D a constant > 1, k the bare axis)."""
    op = index.owner
    if not isinstance(op, (arith.DivUIOp, arith.RemUIOp)):
        return None
    d, k = constant_int(op.rhs), affine_form(op.lhs)
    if d is None or d < 2 or k is None or k.coeffs != {k_axis: 1} or k.constant:
        return None
    return ("div" if isinstance(op, arith.DivUIOp) else "rem", d)


def _planes_view(split, coeffs, const, row_axis, k_axis, extents, box_rows, box_cols, n) -> K.TensorMapType | None:
    """The view in planes of a load reading k as `k / D` (plane) and `k % D` (contiguous column)."""
    if set(split) != {"div", "rem"} or set(coeffs) != {row_axis}:
        return None
    (d, plane_stride), (d2, col_stride) = split["div"], split["rem"]
    k = extents[k_axis]
    if d != d2 or col_stride != 1 or k % d or d % box_cols:
        return None
    return _map_type(extents[row_axis], d, coeffs[row_axis], const, box_rows, box_cols, n, k // d, plane_stride)


def _map_type(rows: int, cols: int, stride: int, const: int, box_rows: int, box_cols: int, n: int,
              planes: int = 1, plane_stride: int = 0) -> K.TensorMapType | None:
    """The map type of a view, or None where its rows overlap, it is not 16-byte aligned, or it
    runs past the tensor's `n` elements."""
    if stride < cols or (2 * stride) % 16 or (2 * plane_stride) % 16 or (2 * const) % 16 or const < 0:
        return None
    if const + (rows - 1) * stride + (planes - 1) * plane_stride + cols > n:
        return None
    params = (rows, cols, stride, const, box_rows, box_cols, planes, plane_stride)
    return K.TensorMapType(bf16, *(IntAttr(p) for p in params))


__all__ = ["MapOperand", "tensor_view"]
