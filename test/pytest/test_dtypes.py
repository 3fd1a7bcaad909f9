"""emmy.dtypes: the one element type -> dtype name switch, and each name's bytes and C++ type."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import BFloat16Type, Float32Type, IndexType, IntegerType, TensorType, VectorType, i1, i32

from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dtypes import c_type, dtype_bytes, element_dtype


def test_names_bytes_and_cxx_types_agree_for_every_scalar():
    for t, name, size, cxx in [
        (BFloat16Type(), "bf16", 2, "__nv_bfloat16"),
        (Float32Type(), "f32", 4, "float"),
        (i1, "i1", 1, "bool"),
        (IntegerType(16), "i16", 2, "short"),
        (i32, "i32", 4, "int"),
        (IndexType(), "index", 4, "int"),
    ]:
        assert element_dtype(t) == name
        assert dtype_bytes(name) == size == K.element_bytes(t)  # the kernel stage reads the same table
        assert c_type(name) == cxx


def test_shaped_types_and_values_name_their_element_type():
    assert element_dtype(TensorType(BFloat16Type(), [2, 3])) == "bf16"
    assert element_dtype(VectorType(Float32Type(), [4])) == "f32"


def test_unsupported_types_and_names_are_errors():
    with pytest.raises(EmmyError, match=r"unsupported element type !kernel.fn"):
        element_dtype(K.FnType())
    with pytest.raises(EmmyError, match=r"unsupported dtype 'i4'"):
        dtype_bytes("i4")
    with pytest.raises(EmmyError, match=r"no CUDA C\+\+ type for dtype 'f8'"):
        c_type("f8")
