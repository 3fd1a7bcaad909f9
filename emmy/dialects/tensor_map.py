"""What the `kernel` and `cuda` stages share about tensor maps (`!kernel.tensor_map`,
`!cuda.tensor_map`): the view of a tensor that the tensor memory accelerator copies boxes of.

A tensor map kernel parameter is bound, at launch, to a tensor argument: the host encodes a map
of the view `offset + r * stride + c` (r < rows, c < cols, in elements) of that tensor, with
boxes of box_rows x box_cols elements and the swizzle of box_cols * 2 bytes (32, 64 or 128), and
passes it by value (`const __grid_constant__ CUtensorMap`). The syntax lists the fields by name:

    !kernel.tensor_map<bf16, rows 4096, cols 1024, stride 1024, offset 0, box 128 x 64>

A view may also have `planes`: P copies of that rows x cols view, `plane_stride` elements apart,
read as one view of P * cols columns (column c of row r is element `offset + r * stride +
(c / cols) * plane_stride + c % cols`; a box never crosses a plane, so cols is a multiple of
box_cols). This is how a tensor stored head by head (attention's output, [heads, tokens, head
dim]) is read as the rows x (heads * head dim) operand of the projection after it; the map is
three-dimensional, and a copy names its column and plane apart:

    !kernel.tensor_map<bf16, rows 3000, cols 128, stride 128, offset 0, planes 16 x 384000, box 128 x 64>
"""

from __future__ import annotations

from math import prod

from xdsl.dialects.builtin import BFloat16Type, IntAttr, TensorType
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

FIELDS = ("rows", "cols", "stride", "offset")
SWIZZLE_BYTES = (32, 64, 128)
MAX_BOX_ROWS = 256


class TensorMapView(ParametrizedAttribute, TypeAttribute):
    """The parameters, syntax and verifier of both stages' tensor map types (each stage's
    dialect defines its own, named, subclass)."""

    element_type: Attribute
    rows: IntAttr
    cols: IntAttr
    stride: IntAttr
    offset: IntAttr
    box_rows: IntAttr
    box_cols: IntAttr
    planes: IntAttr
    plane_stride: IntAttr

    def verify(self) -> None:
        verify_view(self)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        return parse_view(parser)

    def print_parameters(self, printer: Printer) -> None:
        print_view(self, printer)


def parse_view(parser: AttrParser) -> list[Attribute]:
    """`<elt, rows R, cols C, stride S, offset O[, planes P x PS], box BR x BC>` -> the type's
    parameters (no `planes`: one plane, stride 0)."""
    with parser.in_angle_brackets():
        elt = parser.parse_type()
        values = []
        for name in FIELDS:
            parser.parse_punctuation(",")
            parser.parse_keyword(name)
            values.append(IntAttr(parser.parse_integer(allow_boolean=False, allow_negative=False)))
        parser.parse_punctuation(",")
        planes, plane_stride = 1, 0
        if parser.parse_optional_keyword("planes") is not None:
            planes = parser.parse_integer(allow_boolean=False, allow_negative=False)
            parser.parse_keyword("x")
            plane_stride = parser.parse_integer(allow_boolean=False, allow_negative=False)
            parser.parse_punctuation(",")
        parser.parse_keyword("box")
        box_rows = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_keyword("x")
        box_cols = parser.parse_integer(allow_boolean=False, allow_negative=False)
    return [elt, *values, IntAttr(box_rows), IntAttr(box_cols), IntAttr(planes), IntAttr(plane_stride)]


def print_view(t, printer: Printer) -> None:
    with printer.in_angle_brackets():
        printer.print_attribute(t.element_type)
        printer.print_string(
            f", rows {t.rows.data}, cols {t.cols.data}, stride {t.stride.data}, offset {t.offset.data}, "
            + (f"planes {t.planes.data} x {t.plane_stride.data}, " if t.planes.data > 1 else "")
            + f"box {t.box_rows.data} x {t.box_cols.data}"
        )


def verify_view(t) -> None:
    name = t.name
    if not isinstance(t.element_type, BFloat16Type):
        raise VerifyException(f"!{name}: element type must be bf16, got {t.element_type}")
    rows, cols, stride, offset = (t.rows.data, t.cols.data, t.stride.data, t.offset.data)
    br, bc = t.box_rows.data, t.box_cols.data
    if rows < 1 or cols < 1:
        raise VerifyException(f"!{name}: the view must have rows and columns, got {rows} x {cols}")
    if cols > stride:
        raise VerifyException(f"!{name}: rows of {cols} elements cannot be {stride} elements apart")
    if (stride * 2) % 16 or (offset * 2) % 16:
        raise VerifyException(
            f"!{name}: stride and offset must be multiples of 16 bytes (8 bf16), got stride {stride}, offset {offset}"
        )
    if bc * 2 not in SWIZZLE_BYTES:
        raise VerifyException(f"!{name}: box rows must be 32, 64 or 128 bytes (16, 32 or 64 bf16), got {bc} elements")
    if not 1 <= br <= MAX_BOX_ROWS:
        raise VerifyException(f"!{name}: a box has 1 to {MAX_BOX_ROWS} rows, got {br}")
    planes, plane_stride = t.planes.data, t.plane_stride.data
    if planes < 1:
        raise VerifyException(f"!{name}: a view has at least one plane, got {planes}")
    if planes > 1 and ((plane_stride * 2) % 16 or cols % bc):
        raise VerifyException(
            f"!{name}: with planes, the plane stride must be a multiple of 16 bytes (8 bf16) and the columns "
            f"a multiple of the box's, got plane stride {plane_stride}, {cols} columns, boxes of {bc}"
        )
    if planes == 1 and plane_stride:
        raise VerifyException(f"!{name}: one plane has no plane stride, got {plane_stride}")


def view_fits(t, tensor: TensorType) -> str | None:
    """Why the view of map type `t` does not fit in `tensor` (None when it does)."""
    if tensor.element_type != t.element_type:
        return f"must be a tensor of {t.element_type}, got {tensor}"
    last = t.offset.data + (t.rows.data - 1) * t.stride.data + (t.planes.data - 1) * t.plane_stride.data + t.cols.data
    n = prod(tensor.get_shape())
    if last > n:
        return f"the view ends at element {last}, past the {n} elements of {tensor}"
    return None


__all__ = ["FIELDS", "TensorMapView", "parse_view", "print_view", "verify_view", "view_fits"]
