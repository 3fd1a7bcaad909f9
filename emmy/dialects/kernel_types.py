"""The `kernel` stage's types, attributes and limits (the ops are in kernel_device.py and
kernel_host.py; the dialect object and the overview are in kernel.py).

| type | meaning | CUDA C++ |
|---|---|---|
| `!kernel.ptr<T>`, `!kernel.ptr<T, shared>`, `!kernel.ptr<T, local>` | a pointer to scalars of type T in global, shared or thread-local memory | `T*` |
| `!kernel.tensor_map<bf16, rows R, cols C, stride S, offset O, box BR x BC>` | a tensor map parameter (the tensor memory accelerator) | `const __grid_constant__ CUtensorMap` |
| `!kernel.fn` | a device callable (`kernel.lambda`, or a callback parameter of one) | `auto&` |

`#kernel<dim x>` (the `dim` of `kernel.block_id` and `kernel.thread_id`) prints as a bare `x`, `y`
or `z` in the ops' custom form.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    StringAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from emmy.dialects import tensor_map
from emmy.dtypes import dtype_bytes, element_dtype

# ---------------------------------------------------------------------------------------------
# Constants and helpers
# ---------------------------------------------------------------------------------------------

MEMORY_SPACES = ("global", "shared", "local")
MAX_CLUSTER_BLOCKS = 8  # the portable cluster size
MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SMEM = 232448  # 227 KiB: sm_90's per-block limit (sm_80: 163 KiB, checked by the builder)
VECTOR_WIDTHS = (2, 4, 8)


def element_bytes(t: Attribute) -> int:
    """Size in bytes of a scalar element type used in kernels (`index` is a 32-bit `int`)."""
    return dtype_bytes(element_dtype(t))


def is_scalar_type(t: Attribute) -> bool:
    return isinstance(
        t, (BFloat16Type, Float16Type, Float32Type, Float64Type, IndexType, IntegerType)
    )


# ---------------------------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------------------------


class Dim(StrEnum):
    X = "x"
    Y = "y"
    Z = "z"


DIMS = tuple(d.value for d in Dim)


@irdl_attr_definition
class DimAttr(EnumAttribute[Dim], SpacedOpaqueSyntaxAttribute):
    """A grid or block dimension: `#kernel<dim x>`, printed `x` inside `kernel.block_id x`."""

    name = "kernel.dim"


# ---------------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------------


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """A pointer to elements of one scalar type in one memory space.

    `!kernel.ptr<bf16>` points to global memory, `!kernel.ptr<f32, shared>` into the block's
    shared memory, `!kernel.ptr<f32, local>` into a thread's own array (registers).
    """

    name = "kernel.ptr"

    element_type: Attribute
    space: StringAttr

    def __init__(self, element_type: Attribute, space: str | StringAttr = "global"):
        if isinstance(space, str):
            space = StringAttr(space)
        super().__init__(element_type, space)

    def verify(self) -> None:
        if self.space.data not in MEMORY_SPACES:
            raise VerifyException(
                f"!kernel.ptr: memory space must be one of {', '.join(MEMORY_SPACES)}, "
                f"got '{self.space.data}'"
            )
        if not is_scalar_type(self.element_type):
            raise VerifyException(
                f"!kernel.ptr: element type must be a scalar type, got {self.element_type}"
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            elt = parser.parse_type()
            space = "global"
            if parser.parse_optional_punctuation(","):
                space = parser.parse_identifier()
        return [elt, StringAttr(space)]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.element_type)
            if self.space.data != "global":
                printer.print_string(", " + self.space.data)


@irdl_attr_definition
class TensorMapType(tensor_map.TensorMapView):
    """A tensor map parameter (the tensor memory accelerator, sm_90+): a 2-D view of the tensor
    the launch passes for it, copied in boxes by `emmy::tma_load_2d` (see
    emmy/dialects/tensor_map.py for the fields).

    `!kernel.tensor_map<bf16, rows 4096, cols 1024, stride 1024, offset 0, box 128 x 64>`
    """

    name = "kernel.tensor_map"


@irdl_attr_definition
class FnType(ParametrizedAttribute, TypeAttribute):
    """A device callable: a `kernel.lambda`, or a callback parameter of one (`auto&` in C++).

    Passed to device-library templates (`kernel.call`) that invoke it per element or row, and
    called in IR with `kernel.invoke`.
    """

    name = "kernel.fn"
