"""The `kernel` stage's device ops: the kernel itself (`kernel.func`), thread and block
indices, memory (shared and local buffers, loads, stores, pointer arithmetic, the barrier) and
vectors. Control flow and calls are in kernel_control.py; kernel.py has the overview and the CUDA
C++ each op becomes.

`kernel.func` prints its entry block arguments in the header and hides its terminator, so it
keeps a hand-written syntax; every other op here has a declarative `assembly_format`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    StringAttr,
    VectorType,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    IsolatedFromAbove,
    IsTerminator,
    Pure,
    SingleBlockImplicitTerminator,
    SymbolOpInterface,
    ensure_terminator,
)
from xdsl.utils.exceptions import VerifyException

from emmy.dialects.kernel_types import (
    MAX_CLUSTER_BLOCKS,
    MAX_DYNAMIC_SMEM,
    MAX_THREADS_PER_BLOCK,
    VECTOR_WIDTHS,
    Dim,
    DimAttr,
    PtrType,
    TensorMapType,
    element_bytes,
    is_scalar_type,
)

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def enclosing_func(op: Operation) -> KernelFuncOp | None:
    """The `kernel.func` an op is inside, or None for host code."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, KernelFuncOp):
        parent = parent.parent_op()
    return parent


def _parse_int_list(parser: Parser) -> list[int]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)


def _print_int_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(str(v) for v in values) + "]")


def _i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def _check_access(op: IRDLOperation, ptr_t: Attribute, value_t: Attribute) -> None:
    assert isinstance(ptr_t, PtrType)  # the operand's IRDL constraint
    elt = ptr_t.element_type
    if isinstance(value_t, VectorType):
        shape = value_t.get_shape()
        if len(shape) != 1 or shape[0] not in VECTOR_WIDTHS:
            raise VerifyException(f"{op.name}: vector width must be 2, 4 or 8 elements, got {value_t}")
        if value_t.element_type != elt:
            raise VerifyException(f"{op.name}: vector element type {value_t.element_type} is not the pointer's {elt}")
        if shape[0] * element_bytes(elt) > 16:
            raise VerifyException(f"{op.name}: one access moves at most 16 bytes, {value_t} is larger")
    elif value_t != elt:
        raise VerifyException(f"{op.name}: value type {value_t} is not the pointer's element type {elt}")


# ---------------------------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """End of a kernel body; implicit in the custom form of `kernel.func`.

    ```mlir
    kernel.return
    ```
    """

    name = "kernel.return"
    traits = traits_def(IsTerminator())
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), KernelFuncOp):
            raise VerifyException("kernel.return: must end a kernel.func body")


@irdl_op_definition
class KernelFuncOp(IRDLOperation):
    """One GPU kernel: arguments, launch geometry, dynamic shared memory and its body.

    Arguments are global pointers (`!kernel.ptr<T>`) and scalars (integers, floats). `grid` and
    `block` are the launch geometry (x, y, z); `smem` the bytes of dynamic shared memory every
    `kernel.shared` carves from; `min_blocks` (optional) the blocks per multiprocessor promised
    to the register allocator (`__launch_bounds__(threads, min_blocks)`); `cluster` (optional,
    sm_90+) the blocks of a thread block cluster along x, y, z (`__cluster_dims__`), which run
    at once on neighbouring multiprocessors and can reach each other's shared memory.

    ```mlir
    kernel.func @k(%x: !kernel.ptr<bf16>, %n: i32) grid [64, 2, 1] block [256, 1, 1] smem 4096 min_blocks 1 cluster [1, 2, 1] {
      %t = kernel.thread_id x
    }
    ```
    """

    name = "kernel.func"

    sym_name = prop_def(StringAttr)
    grid = prop_def(DenseArrayBase)
    block = prop_def(DenseArrayBase)
    smem = prop_def(IntegerAttr)
    min_blocks = opt_prop_def(IntegerAttr)
    cluster = opt_prop_def(DenseArrayBase)
    body = region_def("single_block")

    traits = traits_def(
        IsolatedFromAbove(),
        SymbolOpInterface(),
        SingleBlockImplicitTerminator(ReturnOp),
    )

    def __init__(
        self,
        name: str,
        arg_types: Sequence[Attribute],
        grid: Sequence[int],
        block: Sequence[int],
        smem: int = 0,
        min_blocks: int | None = None,
        body: Region | None = None,
        cluster: Sequence[int] | None = None,
    ):
        if body is None:
            body = Region(Block(arg_types=arg_types))
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "grid": _i64_array(grid),
            "block": _i64_array(block),
            "smem": IntegerAttr(smem, i64),
        }
        if min_blocks is not None:
            props["min_blocks"] = IntegerAttr(min_blocks, i64)
        if cluster is not None:
            props["cluster"] = _i64_array(cluster)
        super().__init__(properties=props, regions=[body])

    # convenient accessors -------------------------------------------------------------------
    @property
    def grid_dims(self) -> tuple[int, int, int]:
        return tuple(self.grid.get_values())  # type: ignore[return-value]

    @property
    def block_dims(self) -> tuple[int, int, int]:
        return tuple(self.block.get_values())  # type: ignore[return-value]

    @property
    def threads(self) -> int:
        b = self.block_dims
        return b[0] * b[1] * b[2]

    @property
    def cluster_dims(self) -> tuple[int, int, int] | None:
        return tuple(self.cluster.get_values()) if self.cluster is not None else None  # type: ignore[return-value]

    @property
    def smem_bytes(self) -> int:
        return self.smem.value.data

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args)

    @property
    def arg_types(self) -> tuple[Attribute, ...]:
        return tuple(a.type for a in self.body.block.args)

    def verify_(self) -> None:
        name = self.sym_name.data
        for what, attr in (("grid", self.grid), ("block", self.block)):
            vals = attr.get_values()
            if len(vals) != 3 or any(v < 1 for v in vals):
                raise VerifyException(
                    f"kernel.func @{name}: {what} must be three positive integers, got {list(vals)}"
                )
        if self.threads > MAX_THREADS_PER_BLOCK:
            raise VerifyException(
                f"kernel.func @{name}: {self.threads} threads per block exceed {MAX_THREADS_PER_BLOCK}"
            )
        smem = self.smem_bytes
        if smem < 0 or smem > MAX_DYNAMIC_SMEM:
            raise VerifyException(
                f"kernel.func @{name}: dynamic shared memory must be 0..{MAX_DYNAMIC_SMEM} bytes, got {smem}"
            )
        if self.min_blocks is not None and self.min_blocks.value.data < 1:
            raise VerifyException(f"kernel.func @{name}: min_blocks must be positive")
        if self.cluster is not None:
            dims = list(self.cluster.get_values())
            if len(dims) != 3 or any(v < 1 for v in dims) or dims[0] * dims[1] * dims[2] > MAX_CLUSTER_BLOCKS:
                raise VerifyException(
                    f"kernel.func @{name}: cluster must be three positive integers of at most {MAX_CLUSTER_BLOCKS} blocks in all, got {dims}"
                )
            if any(g % c for g, c in zip(self.grid_dims, dims)):
                raise VerifyException(f"kernel.func @{name}: cluster {dims} does not divide grid {list(self.grid_dims)}")
        for i, t in enumerate(self.arg_types):
            if isinstance(t, PtrType):
                if t.space.data != "global":
                    raise VerifyException(
                        f"kernel.func @{name}: argument #{i} must point to global memory, got {t}"
                    )
            elif not is_scalar_type(t) and not isinstance(t, TensorMapType):
                raise VerifyException(
                    f"kernel.func @{name}: argument #{i} must be a global pointer, a scalar or a tensor map, got {t}"
                )
        parent = self.parent_op()
        while parent is not None:
            if isinstance(parent, KernelFuncOp):
                raise VerifyException(f"kernel.func @{name}: kernels cannot be nested")
            parent = parent.parent_op()

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(") grid ")
        _print_int_list(printer, self.grid_dims)
        printer.print_string(" block ")
        _print_int_list(printer, self.block_dims)
        printer.print_string(f" smem {self.smem_bytes}")
        if self.min_blocks is not None:
            printer.print_string(f" min_blocks {self.min_blocks.value.data}")
        if self.cluster_dims is not None:
            printer.print_string(" cluster ")
            _print_int_list(printer, self.cluster_dims)
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=False)

    @classmethod
    def parse(cls, parser: Parser) -> KernelFuncOp:
        name = parser.parse_symbol_name().data
        args = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=True)
        )
        parser.parse_keyword("grid")
        grid = _parse_int_list(parser)
        parser.parse_keyword("block")
        block = _parse_int_list(parser)
        parser.parse_keyword("smem")
        smem = parser.parse_integer()
        min_blocks = None
        if parser.parse_optional_keyword("min_blocks"):
            min_blocks = parser.parse_integer()
        cluster = None
        if parser.parse_optional_keyword("cluster"):
            cluster = _parse_int_list(parser)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region(args)
        op = cls(name, [], grid, block, smem, min_blocks, body, cluster)
        if attrs is not None:
            op.attributes |= attrs.data
        for trait in op.get_traits_of_type(SingleBlockImplicitTerminator):
            ensure_terminator(op, trait)
        return op


class _IdOp(IRDLOperation):
    dim = prop_def(DimAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "$dim attr-dict"

    def __init__(self, dim: str):
        super().__init__(properties={"dim": DimAttr(Dim(dim))}, result_types=[IndexType()])

    def verify_(self) -> None:
        if enclosing_func(self) is None:
            raise VerifyException(f"{self.name}: must be inside a kernel.func")


@irdl_op_definition
class BlockIdOp(_IdOp):
    """The block's index in the grid along x, y or z (`blockIdx.x`).

    ```mlir
    %b = kernel.block_id x
    ```
    """

    name = "kernel.block_id"


@irdl_op_definition
class ThreadIdOp(_IdOp):
    """The thread's index in its block along x, y or z (`threadIdx.x`).

    ```mlir
    %t = kernel.thread_id x
    ```
    """

    name = "kernel.thread_id"


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class SharedOp(IRDLOperation):
    """A shared-memory buffer: `size` elements at byte `offset` of the dynamic shared memory.

    `align` (bytes, a power of two) must divide `offset`; the buffer must end within the
    enclosing kernel's `smem`. Offsets count from the dynamic shared memory's base rounded up to
    the largest `align` of the kernel's buffers (`emmy::align_smem`), so a kernel asking for more
    than 16-byte alignment includes that much slack in `smem`. Buffers may overlap when the
    builder reuses memory (after a barrier).

    ```mlir
    %sa = kernel.shared [8192] offset 0 align 128 : !kernel.ptr<bf16, shared>
    ```
    """

    name = "kernel.shared"

    size = prop_def(IntegerAttr[I64])
    offset = prop_def(IntegerAttr[I64])
    align = prop_def(IntegerAttr[I64])
    result = result_def(PtrType)
    traits = traits_def(Pure())
    assembly_format = "` ` `[` $size `]` `offset` $offset `align` $align attr-dict `:` type($result)"

    def __init__(self, element_type: Attribute, size: int, offset: int, align: int = 16):
        super().__init__(
            properties={
                "size": IntegerAttr(size, i64),
                "offset": IntegerAttr(offset, i64),
                "align": IntegerAttr(align, i64),
            },
            result_types=[PtrType(element_type, "shared")],
        )

    @property
    def bytes(self) -> int:
        return self.size.value.data * element_bytes(self.result.type.element_type)

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, PtrType)
        if t.space.data != "shared":
            raise VerifyException(f"kernel.shared: result must be a shared pointer, got {t}")
        size, offset, align = self.size.value.data, self.offset.value.data, self.align.value.data
        if size < 1:
            raise VerifyException(f"kernel.shared: size must be positive, got {size}")
        if align < 1 or align & (align - 1):
            raise VerifyException(f"kernel.shared: align must be a power of two, got {align}")
        if align < element_bytes(t.element_type):
            raise VerifyException(f"kernel.shared: align {align} is below the element size")
        if offset < 0 or offset % align:
            raise VerifyException(f"kernel.shared: offset {offset} is not a multiple of align {align}")
        func = enclosing_func(self)
        if func is None:
            raise VerifyException("kernel.shared: must be inside a kernel.func")
        if offset + self.bytes > func.smem_bytes:
            raise VerifyException(
                f"kernel.shared: bytes {offset}..{offset + self.bytes} exceed the kernel's "
                f"{func.smem_bytes} bytes of shared memory"
            )


@irdl_op_definition
class LocalOp(IRDLOperation):
    """A per-thread array of `size` elements (`T v[size];`), kept in registers when every access
    uses an index known at compile time (fully unrolled loops).

    ```mlir
    %acc = kernel.local [64] : !kernel.ptr<f32, local>
    ```
    """

    name = "kernel.local"

    size = prop_def(IntegerAttr[I64])
    result = result_def(PtrType)
    assembly_format = "` ` `[` $size `]` attr-dict `:` type($result)"

    def __init__(self, element_type: Attribute, size: int):
        super().__init__(
            properties={"size": IntegerAttr(size, i64)},
            result_types=[PtrType(element_type, "local")],
        )

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, PtrType)
        if t.space.data != "local":
            raise VerifyException(f"kernel.local: result must be a local pointer, got {t}")
        if self.size.value.data < 1:
            raise VerifyException(f"kernel.local: size must be positive, got {self.size.value.data}")
        if enclosing_func(self) is None:
            raise VerifyException("kernel.local: must be inside a kernel.func")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """All threads of the block wait here; shared-memory writes before it are visible after it
    (`__syncthreads()`).

    ```mlir
    kernel.barrier
    ```
    """

    name = "kernel.barrier"
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()

    def verify_(self) -> None:
        if enclosing_func(self) is None:
            raise VerifyException("kernel.barrier: must be inside a kernel.func")


@irdl_op_definition
class LoadOp(IRDLOperation):
    """Read one element, or a vector of 2, 4 or 8 consecutive elements (at most 16 bytes, one
    access), at element index `index` of a pointer. A vector access needs `index` to be a
    multiple of its width and the pointer aligned to the vector's size. With `if %mask`, a false
    mask yields zeros; memory outside the buffer is never read (from a whole buffer, a kernel
    argument or a shared allocation, the CUDA reads its element 0 instead and drops it, so that
    the load needs no branch).

    ```mlir
    %a = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
    %v = kernel.load %x[%j] if %ok : !kernel.ptr<bf16> -> vector<8xbf16>
    ```
    """

    name = "kernel.load"

    ptr = operand_def(PtrType)
    index = operand_def(IndexType)
    mask = opt_operand_def(i1)
    result = result_def()

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = "$ptr `[` $index `]` (`if` $mask^)? attr-dict `:` type($ptr) `->` type($result)"

    def __init__(
        self,
        ptr: SSAValue | Operation,
        index: SSAValue | Operation,
        result_type: Attribute | None = None,
        mask: SSAValue | Operation | None = None,
    ):
        if result_type is None:
            result_type = SSAValue.get(ptr).type.element_type  # type: ignore[attr-defined]
        super().__init__(
            operands=[ptr, index, [mask] if mask is not None else []],
            result_types=[result_type],
        )

    def verify_(self) -> None:
        _check_access(self, self.ptr.type, self.result.type)


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Write one element or a vector (same rules as `kernel.load`); with `if %mask`, only when
    the mask is true (to a kernel argument, as one predicated store: no branch).

    ```mlir
    kernel.store %a, %y[%i] : bf16, !kernel.ptr<bf16>
    kernel.store %v, %s[%j] if %ok : vector<8xbf16>, !kernel.ptr<bf16, shared>
    ```
    """

    name = "kernel.store"

    value = operand_def()
    ptr = operand_def(PtrType)
    index = operand_def(IndexType)
    mask = opt_operand_def(i1)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = "$value `,` $ptr `[` $index `]` (`if` $mask^)? attr-dict `:` type($value) `,` type($ptr)"

    def __init__(
        self,
        value: SSAValue | Operation,
        ptr: SSAValue | Operation,
        index: SSAValue | Operation,
        mask: SSAValue | Operation | None = None,
    ):
        super().__init__(operands=[value, ptr, index, [mask] if mask is not None else []])

    def verify_(self) -> None:
        _check_access(self, self.ptr.type, self.value.type)


@irdl_op_definition
class PtrAddOp(IRDLOperation):
    """Pointer arithmetic in elements: `p + i`, same type and memory space.

    ```mlir
    %q = kernel.ptr_add %p, %i : !kernel.ptr<bf16, shared>
    ```
    """

    name = "kernel.ptr_add"

    POINTER: ClassVar = VarConstraint("POINTER", base(PtrType))
    ptr = operand_def(POINTER)
    offset = operand_def(IndexType)
    result = result_def(POINTER)
    traits = traits_def(Pure())
    assembly_format = "$ptr `,` $offset attr-dict `:` type($ptr)"

    def __init__(self, ptr: SSAValue | Operation, offset: SSAValue | Operation):
        super().__init__(operands=[ptr, offset], result_types=[SSAValue.get(ptr).type])


# ---------------------------------------------------------------------------------------------
# Vectors
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class ExtractOp(IRDLOperation):
    """One lane of a vector value (lane index known at compile time).

    ```mlir
    %e = kernel.extract %v[3] : vector<8xbf16>
    ```
    """

    name = "kernel.extract"

    ELEMENT: ClassVar = VarConstraint("ELEMENT", base(Attribute))
    vector = operand_def(VectorType.constr(ELEMENT))
    lane = prop_def(IntegerAttr[I64])
    result = result_def(ELEMENT)
    traits = traits_def(Pure())
    assembly_format = "$vector `[` $lane `]` attr-dict `:` type($vector)"

    def __init__(self, vector: SSAValue | Operation, lane: int):
        vt = SSAValue.get(vector).type
        super().__init__(
            operands=[vector],
            properties={"lane": IntegerAttr(lane, i64)},
            result_types=[vt.element_type],  # type: ignore[attr-defined]
        )

    def verify_(self) -> None:
        vt = self.vector.type
        assert isinstance(vt, VectorType)
        n = vt.get_shape()[0]
        if not 0 <= self.lane.value.data < n:
            raise VerifyException(f"kernel.extract: lane {self.lane.value.data} is outside {vt}")


@irdl_op_definition
class PackOp(IRDLOperation):
    """A vector made of scalars, lane 0 first.

    ```mlir
    %v = kernel.pack %a, %b : vector<2xbf16>
    ```
    """

    name = "kernel.pack"

    ELEMENT: ClassVar = VarConstraint("ELEMENT", base(Attribute))
    elements = var_operand_def(ELEMENT)
    result = result_def(VectorType.constr(ELEMENT))
    traits = traits_def(Pure())
    assembly_format = "$elements attr-dict `:` type($result)"

    def __init__(self, elements: Sequence[SSAValue | Operation], vector_type: VectorType):
        super().__init__(operands=[list(elements)], result_types=[vector_type])

    def verify_(self) -> None:
        vt = self.result.type
        assert isinstance(vt, VectorType)
        if len(vt.get_shape()) != 1 or vt.get_shape()[0] != len(self.elements):
            raise VerifyException(f"kernel.pack: {len(self.elements)} elements do not make a {vt}")
