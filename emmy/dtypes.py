"""Element types by name: the one switch from an xDSL element type to Emmy's dtype name, and
what each name means in bytes and in CUDA C++.

    >>> from xdsl.dialects.builtin import BFloat16Type, TensorType, i32
    >>> element_dtype(TensorType(BFloat16Type(), [4])), element_dtype(i32)
    ('bf16', 'i32')
    >>> dtype_bytes("bf16"), c_type("bf16")
    (2, '__nv_bfloat16')

Names: "bf16", "f16", "f32", "f64", "i1", "i8", "i16", "i32", "i64" and "index" (a 32-bit
`int` in kernels, an int64 in the reference interpreters). Every layer may import this module.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    ShapedType,
)
from xdsl.ir import Attribute, SSAValue

from emmy.diagnostics import EmmyError

_BYTES = {
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8,
    "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "index": 4,
}
_C_TYPES = {
    "bf16": "__nv_bfloat16", "f16": "__half", "f32": "float", "f64": "double",
    "i1": "bool", "i8": "signed char", "i16": "short", "i32": "int", "i64": "long long", "index": "int",
}


def element_dtype(t: Attribute | SSAValue) -> str:
    """The dtype name of an element type, of a shaped type's element type, or of an SSA
    value's type."""
    if isinstance(t, SSAValue):
        t = t.type
    if isinstance(t, ShapedType):
        t = t.get_element_type()
    if isinstance(t, BFloat16Type):
        return "bf16"
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float64Type):
        return "f64"
    if isinstance(t, IntegerType):
        return f"i{t.width.data}"
    if isinstance(t, IndexType):
        return "index"
    raise EmmyError(f"unsupported element type {t}")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name ("bf16" -> 2)."""
    if dtype not in _BYTES:
        raise EmmyError(f"unsupported dtype '{dtype}'")
    return _BYTES[dtype]


def c_type(dtype: str) -> str:
    """The CUDA C++ type of a dtype name ("bf16" -> "__nv_bfloat16")."""
    if dtype not in _C_TYPES:
        raise EmmyError(f"no CUDA C++ type for dtype '{dtype}'")
    return _C_TYPES[dtype]
