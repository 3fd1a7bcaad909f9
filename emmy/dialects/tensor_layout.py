"""The `tensor` dialect's layout ops: broadcast, transpose, reshape, slice, concat.
emmy.dialects.tensor re-exports them and builds the dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    TensorType,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
)





from emmy.dialects.tensor_base import (
    AnyTensor,
    _shape,
    _fmt_shape,
    i64_array,
    _ints,
    TensorOp,
)
from emmy.dialects.tensor_compute import (
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    MaxOp,
    MinOp,
    NegOp,
    ExpOp,
    RsqrtOp,
    SqrtOp,
    TanhOp,
    ErfOp,
    SigmoidOp,
    RecipOp,
)

# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


class LayoutOp(TensorOp):
    """One-operand layout op: the element type is kept."""

    def _check_element_type(self) -> None:
        a, r = self.operands[0].type, self.results[0].type
        if a.element_type != r.element_type:
            raise self._error(
                f"result element type {r.element_type} must equal the operand's {a.element_type}"
            )


@irdl_op_definition
class BroadcastOp(LayoutOp):
    """Broadcast: operand axis i becomes result axis `dims[i]`; the other result axes are new.

    A size-1 operand axis may be expanded to any size.

        %y = tensor.broadcast %x {dims = array<i64: 0>} : tensor<512xf32> -> tensor<512x1024xf32>
    """

    name = "tensor.broadcast"
    input = operand_def(AnyTensor)
    dims = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(
        self, x: SSAValue | Operation, shape: Sequence[int], dims: Sequence[int], attributes=None
    ):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, list(shape))],
            properties={"dims": i64_array(dims)},
            attributes=attributes,
        )

    @property
    def dims_list(self) -> tuple[int, ...]:
        return _ints(self.dims)

    def verify_(self) -> None:
        self._check_element_type()
        a, r, dims = _shape(self.input.type), _shape(self.result.type), self.dims_list
        if len(dims) != len(a):
            raise self._error(f"dims must have one entry per operand axis ({len(a)}), got {list(dims)}")
        if any(d < 0 or d >= len(r) for d in dims) or any(y <= x for x, y in zip(dims, dims[1:])):
            raise self._error(
                f"dims must be strictly increasing result axes (< {len(r)}), got {list(dims)}"
            )
        for i, d in enumerate(dims):
            if a[i] != r[d] and a[i] != 1:
                raise self._error(
                    f"operand axis {i} (size {a[i]}) cannot broadcast to result axis {d} "
                    f"(size {r[d]})"
                )


@irdl_op_definition
class TransposeOp(LayoutOp):
    """Permute axes: result axis i is operand axis `perm[i]`.

        %y = tensor.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x32x16x128xbf16> -> tensor<1x16x32x128xbf16>
    """

    name = "tensor.transpose"
    input = operand_def(AnyTensor)
    perm = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue | Operation, perm: Sequence[int], attributes=None):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        shape = x.type.get_shape()
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, [shape[p] for p in perm])],
            properties={"perm": i64_array(perm)},
            attributes=attributes,
        )

    @property
    def perm_list(self) -> tuple[int, ...]:
        return _ints(self.perm)

    def verify_(self) -> None:
        self._check_element_type()
        a, r, perm = _shape(self.input.type), _shape(self.result.type), self.perm_list
        if sorted(perm) != list(range(len(a))):
            raise self._error(f"perm must be a permutation of 0..{len(a) - 1}, got {list(perm)}")
        expected = tuple(a[p] for p in perm)
        if r != expected:
            raise self._error(f"result shape must be {_fmt_shape(expected)}, got {_fmt_shape(r)}")


@irdl_op_definition
class ReshapeOp(LayoutOp):
    """Same elements in row-major order, new shape.

        %y = tensor.reshape %x : tensor<1x32x1024xbf16> -> tensor<32x1024xbf16>
    """

    name = "tensor.reshape"
    input = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue | Operation, shape: Sequence[int], attributes=None):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, list(shape))],
            attributes=attributes,
        )

    def verify_(self) -> None:
        self._check_element_type()
        a, r = _shape(self.input.type), _shape(self.result.type)
        if prod(a) != prod(r):
            raise self._error(
                f"element count must be kept: {_fmt_shape(a)} has {prod(a)}, "
                f"{_fmt_shape(r)} has {prod(r)}"
            )


@irdl_op_definition
class SliceOp(LayoutOp):
    """Strided slice: result[i...] = x[starts + i * strides]; the result shape is `sizes`.

        %y = tensor.slice %x {starts = array<i64: 0, 64>, sizes = array<i64: 32, 64>, strides = array<i64: 1, 1>} : tensor<32x128xbf16> -> tensor<32x64xbf16>
    """

    name = "tensor.slice"
    input = operand_def(AnyTensor)
    starts = prop_def(DenseArrayBase.constr(i64))
    sizes = prop_def(DenseArrayBase.constr(i64))
    strides = prop_def(DenseArrayBase.constr(i64))
    result = result_def(AnyTensor)

    def __init__(
        self,
        x: SSAValue | Operation,
        starts: Sequence[int],
        sizes: Sequence[int],
        strides: Sequence[int] | None = None,
        attributes=None,
    ):
        x = SSAValue.get(x)
        assert isinstance(x.type, TensorType)
        strides = [1] * len(sizes) if strides is None else strides
        super().__init__(
            operands=[x],
            result_types=[TensorType(x.type.element_type, list(sizes))],
            properties={
                "starts": i64_array(starts),
                "sizes": i64_array(sizes),
                "strides": i64_array(strides),
            },
            attributes=attributes,
        )

    @property
    def starts_list(self) -> tuple[int, ...]:
        return _ints(self.starts)

    @property
    def sizes_list(self) -> tuple[int, ...]:
        return _ints(self.sizes)

    @property
    def strides_list(self) -> tuple[int, ...]:
        return _ints(self.strides)

    def verify_(self) -> None:
        self._check_element_type()
        a, r = _shape(self.input.type), _shape(self.result.type)
        starts, sizes, strides = self.starts_list, self.sizes_list, self.strides_list
        if not (len(starts) == len(sizes) == len(strides) == len(a)):
            raise self._error(
                f"starts, sizes and strides must have one entry per axis ({len(a)}), got "
                f"{len(starts)}, {len(sizes)}, {len(strides)}"
            )
        if r != sizes:
            raise self._error(
                f"result shape {_fmt_shape(r)} must equal sizes {_fmt_shape(sizes)}"
            )
        for i, (s, n, st) in enumerate(zip(starts, sizes, strides)):
            if s < 0 or n < 0 or st < 1 or (n > 0 and s + (n - 1) * st >= a[i]):
                raise self._error(
                    f"axis {i}: start {s}, size {n}, stride {st} do not fit in extent {a[i]}"
                )


@irdl_op_definition
class ConcatOp(TensorOp):
    """Concatenation along `axis`; all other dims and the element type equal.

        %w = tensor.concat %wq, %wk, %wv {axis = 0 : i64} : (tensor<2048x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<4096x1024xbf16>
    """

    name = "tensor.concat"
    inputs = var_operand_def(AnyTensor)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(AnyTensor)

    def __init__(self, xs: Sequence[SSAValue | Operation], axis: int, attributes=None):
        vals = [SSAValue.get(x) for x in xs]
        shapes = [_shape(v.type) for v in vals]
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        super().__init__(
            operands=[vals],
            result_types=[TensorType(vals[0].type.element_type, out)],
            properties={"axis": IntegerAttr(axis, i64)},
            attributes=attributes,
        )

    @property
    def axis_value(self) -> int:
        return self.axis.value.data

    def verify_(self) -> None:
        if not self.inputs:
            raise self._error("needs at least one operand")
        r = _shape(self.result.type)
        axis = self.axis_value
        if axis < 0 or axis >= len(r):
            raise self._error(f"axis {axis} out of range for rank {len(r)}")
        total = 0
        for i, x in enumerate(self.inputs):
            s = _shape(x.type)
            if x.type.element_type != self.result.type.element_type:
                raise self._error(
                    f"operand {i} element type {x.type.element_type} must equal the result's "
                    f"{self.result.type.element_type}"
                )
            if len(s) != len(r) or any(s[d] != r[d] for d in range(len(r)) if d != axis):
                raise self._error(
                    f"operand {i} shape {_fmt_shape(s)} must match the result "
                    f"{_fmt_shape(r)} except on axis {axis}"
                )
            total += s[axis]
        if total != r[axis]:
            raise self._error(
                f"result axis {axis} has size {r[axis]}, but the operands sum to {total}"
            )


@irdl_op_definition
class CausalMaskOp(TensorOp):
    """Causal mask on scores [..., Sq, Sk]: entries with key index > query index + `offset`
    become -inf; the others are kept. With `window`, entries with key index <= query index +
    `offset` - `window` become -inf too (a sliding window: each query sees its last `window`
    keys).

        %m = tensor.causal_mask %s : tensor<1x16x32x32xf32>
        %m = tensor.causal_mask %s {offset = 4 : i64} : tensor<1x16x32x36xf32>
        %m = tensor.causal_mask %s {window = 8 : i64} : tensor<1x16x32x32xf32>
    """

    name = "tensor.causal_mask"
    input = operand_def(AnyTensor)
    offset = opt_prop_def(IntegerAttr[I64])
    window = opt_prop_def(IntegerAttr[I64])
    result = result_def(AnyTensor)
    SAME_TYPE_SYNTAX: ClassVar[bool] = True

    def __init__(self, x: SSAValue | Operation, offset: int = 0, attributes=None, window: int | None = None):
        x = SSAValue.get(x)
        properties = {"offset": IntegerAttr(offset, i64)} if offset else {}
        if window is not None:
            properties["window"] = IntegerAttr(window, i64)
        super().__init__(operands=[x], result_types=[x.type], properties=properties, attributes=attributes)

    @property
    def offset_value(self) -> int:
        return 0 if self.offset is None else self.offset.value.data

    @property
    def window_value(self) -> int | None:
        return None if self.window is None else self.window.value.data

    def verify_(self) -> None:
        a = _shape(self.input.type)
        if len(a) < 2:
            raise self._error(f"operand must have rank >= 2 ([..., Sq, Sk]), got {_fmt_shape(a)}")
        if self.result.type != self.input.type:
            raise self._error(
                f"result type must equal the operand type, got {self.input.type} -> "
                f"{self.result.type}"
            )
        if self.window_value is not None and self.window_value < 1:
            raise self._error(f"window must be at least 1 key, got {self.window_value}")


@irdl_op_definition
class GatherRowsOp(TensorOp):
    """Embedding lookup: table [V, H], integer ids [...] -> [..., H].

        %e = tensor.gather_rows %table, %ids : (tensor<151669x1024xbf16>, tensor<1x32xi64>) -> tensor<1x32x1024xbf16>
    """

    name = "tensor.gather_rows"
    table = operand_def(AnyTensor)
    ids = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, table: SSAValue | Operation, ids: SSAValue | Operation, attributes=None):
        table, ids = SSAValue.get(table), SSAValue.get(ids)
        out = [*_shape(ids.type), _shape(table.type)[-1]]
        super().__init__(
            operands=[table, ids],
            result_types=[TensorType(table.type.element_type, out)],
            attributes=attributes,
        )

    def verify_(self) -> None:
        t, ids, r = _shape(self.table.type), _shape(self.ids.type), _shape(self.result.type)
        if len(t) != 2:
            raise self._error(f"table must be 2-D [V, H], got {_fmt_shape(t)}")
        if not isinstance(self.ids.type.element_type, IntegerType):
            raise self._error(f"ids must be integers, got {self.ids.type.element_type}")
        expected = (*ids, t[1])
        if r != expected:
            raise self._error(f"result shape must be {_fmt_shape(expected)}, got {_fmt_shape(r)}")
        if self.result.type.element_type != self.table.type.element_type:
            raise self._error(
                f"result element type {self.result.type.element_type} must equal the table's "
                f"{self.table.type.element_type}"
            )


BINARY_OPS = (AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp)
UNARY_OPS = (NegOp, ExpOp, RsqrtOp, SqrtOp, TanhOp, ErfOp, SigmoidOp, RecipOp)
