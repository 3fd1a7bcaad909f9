"""The `torch` dialect's casts and layout ops: to, view, expand, transpose, permute, slice, cat,
embedding. emmy.dialects.torch re-exports them and builds the dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from xdsl.dialects.builtin import (
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)

from emmy.dialects.torch_base import (
    AnyTensor,
    shape_of,
    dtype_of,
    fmt_shape,
    i64_array,
    i64_attr,
    _ints,
    TorchOp,
)

# --------------------------------------------------------------------------------------------
# Casts and layout
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class ToOp(TorchOp):
    """Dtype conversion (`x.to(dtype)`, `.float()`): the result type carries the dtype.

    %f = torch.to %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xf32>
    """

    name = "torch.to"
    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dtype: Attribute):
        super().__init__(operands=[x], result_types=[TensorType(dtype, shape_of(x))])

    def verify_(self) -> None:
        if shape_of(self.result) != shape_of(self.x):
            self._fail(
                f"result shape {fmt_shape(shape_of(self.result))} must equal operand shape "
                f"{fmt_shape(shape_of(self.x))}"
            )


@irdl_op_definition
class ViewOp(TorchOp):
    """A row-major reinterpretation with the same number of elements (view, reshape,
    unsqueeze, squeeze, flatten): the result type carries the shape.

    %v = torch.view %q : (tensor<1x32x2048xbf16>) -> tensor<1x32x16x128xbf16>
    """

    name = "torch.view"
    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[x], result_types=[TensorType(dtype_of(x), list(shape))])

    def verify_(self) -> None:
        xs, rs = shape_of(self.x), shape_of(self.result)
        if prod(xs) != prod(rs):
            self._fail(
                f"element count changes: {fmt_shape(xs)} has {prod(xs)}, {fmt_shape(rs)} has {prod(rs)}"
            )
        if dtype_of(self.x) != dtype_of(self.result):
            self._fail("result element type must equal operand element type")


@irdl_op_definition
class ExpandOp(TorchOp):
    """x repeated along axes of extent 1 and new leading axes (`expand`, `expand_as`), by
    PyTorch's right-aligned broadcasting: the result type carries the shape.

    %k = torch.expand %kv : (tensor<1x8x1x32x128xbf16>) -> tensor<1x8x2x32x128xbf16>
    """

    name = "torch.expand"
    x = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[x], result_types=[TensorType(dtype_of(x), list(shape))])

    def verify_(self) -> None:
        xs, rs = shape_of(self.x), shape_of(self.result)
        lead = len(rs) - len(xs)
        if lead < 0 or any(d not in (1, r) for d, r in zip(xs, rs[lead:])):
            self._fail(f"{fmt_shape(xs)} does not broadcast to {fmt_shape(rs)}")
        _check_layout_dtype(self, self.x, self.result)


def _check_layout_dtype(op: TorchOp, x: SSAValue, result: SSAValue) -> None:
    if dtype_of(x) != dtype_of(result):
        op._fail("result element type must equal operand element type")


@irdl_op_definition
class TransposeOp(TorchOp):
    """Swaps two axes (`dims`, both in [0, rank)).

    %t = torch.transpose %v {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.transpose"
    x = operand_def(AnyTensor)
    dims = prop_def(DenseArrayBase)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dim0: int, dim1: int):
        shape = list(shape_of(x))
        shape[dim0], shape[dim1] = shape[dim1], shape[dim0]
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), shape)],
            properties={"dims": i64_array([dim0, dim1])},
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        dims = _ints(self.dims)
        if len(dims) != 2 or any(not 0 <= d < len(xs) for d in dims):
            self._fail(f"dims must be two axes in [0, {len(xs)}), got {list(dims)}")
        expected = list(xs)
        expected[dims[0]], expected[dims[1]] = expected[dims[1]], expected[dims[0]]
        if shape_of(self.result) != tuple(expected):
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        _check_layout_dtype(self, self.x, self.result)


@irdl_op_definition
class PermuteOp(TorchOp):
    """Reorders axes: result axis i is operand axis perm[i].

    %p = torch.permute %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.permute"
    x = operand_def(AnyTensor)
    perm = prop_def(DenseArrayBase)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, perm: Sequence[int]):
        xs = shape_of(x)
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), [xs[p] for p in perm])],
            properties={"perm": i64_array(perm)},
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        perm = _ints(self.perm)
        if sorted(perm) != list(range(len(xs))):
            self._fail(f"perm {list(perm)} must be a permutation of [0, {len(xs)})")
        expected = tuple(xs[p] for p in perm)
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        _check_layout_dtype(self, self.x, self.result)


@irdl_op_definition
class SliceOp(TorchOp):
    """`x[..., start:end:step, ...]` along `dim`; normalized: 0 <= dim < rank,
    0 <= start <= end <= size, step >= 1.

    %s = torch.slice %q {dim = 3 : i64, start = 0 : i64, end = 64 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    """

    name = "torch.slice"
    x = operand_def(AnyTensor)
    dim = prop_def(IntegerAttr)
    start = prop_def(IntegerAttr)
    end = prop_def(IntegerAttr)
    step = prop_def(IntegerAttr)
    result = result_def(AnyTensor)

    def __init__(self, x: SSAValue, dim: int, start: int, end: int, step: int = 1):
        shape = list(shape_of(x))
        shape[dim] = max(0, -(-(end - start) // step))
        super().__init__(
            operands=[x],
            result_types=[TensorType(dtype_of(x), shape)],
            properties={
                "dim": i64_attr(dim),
                "start": i64_attr(start),
                "end": i64_attr(end),
                "step": i64_attr(step),
            },
        )

    def verify_(self) -> None:
        xs = shape_of(self.x)
        dim = self.dim.value.data
        start, end, step = self.start.value.data, self.end.value.data, self.step.value.data
        if not 0 <= dim < len(xs):
            self._fail(f"dim {dim} must be in [0, {len(xs)})")
        if step < 1:
            self._fail(f"step {step} must be at least 1")
        if not 0 <= start <= end <= xs[dim]:
            self._fail(f"need 0 <= start <= end <= {xs[dim]}, got start {start}, end {end}")
        expected = list(xs)
        expected[dim] = -(-(end - start) // step)
        if shape_of(self.result) != tuple(expected):
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        _check_layout_dtype(self, self.x, self.result)


@irdl_op_definition
class CatOp(TorchOp):
    """Concatenates tensors along `dim` (0 <= dim < rank); all other dims and dtypes equal.

    %c = torch.cat %n, %a {dim = 3 : i64} : (tensor<1x16x32x64xbf16>, tensor<1x16x32x64xbf16>) -> tensor<1x16x32x128xbf16>
    """

    name = "torch.cat"
    xs = var_operand_def(AnyTensor)
    dim = prop_def(IntegerAttr)
    result = result_def(AnyTensor)

    def __init__(self, xs: Sequence[SSAValue], dim: int):
        shape = list(shape_of(xs[0]))
        shape[dim] = sum(shape_of(x)[dim] for x in xs)
        super().__init__(
            operands=[list(xs)],
            result_types=[TensorType(dtype_of(xs[0]), shape)],
            properties={"dim": i64_attr(dim)},
        )

    def verify_(self) -> None:
        if not self.xs:
            self._fail("needs at least one operand")
        shapes = [shape_of(x) for x in self.xs]
        rank = len(shapes[0])
        dim = self.dim.value.data
        if not 0 <= dim < rank:
            self._fail(f"dim {dim} must be in [0, {rank})")
        for s in shapes:
            if len(s) != rank or s[:dim] + s[dim + 1 :] != shapes[0][:dim] + shapes[0][dim + 1 :]:
                self._fail(
                    f"operand shapes {', '.join(fmt_shape(s) for s in shapes)} differ outside dim {dim}"
                )
        expected = list(shapes[0])
        expected[dim] = sum(s[dim] for s in shapes)
        if shape_of(self.result) != tuple(expected):
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        dtypes = {dtype_of(x) for x in self.xs} | {dtype_of(self.result)}
        if len(dtypes) != 1:
            self._fail("operands and result must share one element type")


@irdl_op_definition
class EmbeddingOp(TorchOp):
    """Row lookup: weight [V, H], integer ids [...] -> [..., H].

    %e = torch.embedding %table, %ids : (tensor<151669x1024xbf16>, tensor<1x32xi64>) -> tensor<1x32x1024xbf16>
    """

    name = "torch.embedding"
    weight = operand_def(AnyTensor)
    ids = operand_def(AnyTensor)
    result = result_def(AnyTensor)

    def __init__(self, weight: SSAValue, ids: SSAValue):
        shape = shape_of(ids) + shape_of(weight)[1:]
        super().__init__(operands=[weight, ids], result_types=[TensorType(dtype_of(weight), shape)])

    def verify_(self) -> None:
        ws = shape_of(self.weight)
        if len(ws) != 2:
            self._fail(f"weight must be 2-D [V, H], got {fmt_shape(ws)}")
        if not isinstance(dtype_of(self.ids), IntegerType):
            self._fail(f"ids must have an integer element type, got {dtype_of(self.ids)}")
        expected = shape_of(self.ids) + ws[1:]
        if shape_of(self.result) != expected:
            self._fail(f"result shape {fmt_shape(shape_of(self.result))} must be {fmt_shape(expected)}")
        if dtype_of(self.result) != dtype_of(self.weight):
            self._fail("result element type must equal weight's")
