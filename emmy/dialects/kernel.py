r"""The `kernel` stage: explicit GPU code (dialect object `Kernel`).

A module at this stage holds one `kernel.func` per GPU kernel and, for each model function, a
`func.func` that is the host launch sequence: `kernel.empty` buffers and `kernel.launch` ops in
order. Nothing is implicit: a printer can write every op out as CUDA C++ one to one
(`convert-kernel-to-cuda` does).

Device code (inside `kernel.func`):

| op | meaning | CUDA C++ |
|---|---|---|
| `kernel.func @k(%a: !kernel.ptr<bf16>, %n: i32) grid [gx, gy, gz] block [bx, by, bz] smem BYTES [min_blocks N] [cluster [cx, cy, cz]]` | a kernel: arguments (global pointers, scalars, tensor maps `!kernel.tensor_map<...>` for the tensor memory accelerator), launch geometry, dynamic shared memory, thread block clusters | `__global__ void __launch_bounds__(...) __cluster_dims__(...) k(...)` |
| `kernel.return` | end of the kernel body (implicit in the custom form) | |
| `kernel.block_id x`, `kernel.thread_id x` | `blockIdx.x`, `threadIdx.x` as `index` | `(int)blockIdx.x` |
| `kernel.shared [N] offset B align A : !kernel.ptr<T, shared>` | N elements of T at byte offset B of the kernel's dynamic shared memory | `(T*)(emmy_smem + B)` |
| `kernel.local [N] : !kernel.ptr<T, local>` | a per-thread array of N elements (registers when indexed by constants) | `T v[N];` |
| `kernel.barrier` | all threads of the block meet; shared memory writes before it are visible after | `__syncthreads()` |
| `kernel.for %i = %lb to %ub step %s [unroll N \| unroll full] [iter_args(...) -> (...)]` | a counted loop, loop-carried values yielded by `kernel.yield` | `for (...)` with `#pragma unroll` |
| `kernel.if %c [-> (types)] {...} [else {...}]` | a branch, results yielded by `kernel.yield` | `if (...)` |
| `kernel.yield` | terminator of `kernel.for` / `kernel.if` bodies | |
| `kernel.load %p[%i] [if %mask] : !kernel.ptr<T, space> -> T \| vector<NxT>` | one element, or N consecutive elements in one access (N = 2, 4, 8; at most 16 bytes; `%i` must be a multiple of N); a false mask gives zeros without touching memory | `p[i]`, `*(uint4*)(p + i)` |
| `kernel.store %v, %p[%i] [if %mask] : T \| vector<NxT>, !kernel.ptr<T, space>` | the same for writing | |
| `kernel.ptr_add %p, %i : !kernel.ptr<T, space>` | `p + i` (elements) | |
| `kernel.extract %v[j] : vector<NxT>`, `kernel.pack %a, %b, ... : vector<NxT>` | one lane of a vector; a vector from scalars | |
| `kernel.call "emmy::fn<...>"(%args) : (types) -> (types)` | a building block of Emmy's device library (`emmy/backend/runtime/*.cuh`): cp.async tile copies, ldmatrix + mma.sync warp tiles, wgmma warpgroup tiles, warp and block reductions, fences | `emmy::fn<...>(args)` |
| `%f = kernel.lambda (%i: index, %cb: !kernel.fn) [-> T] {...}` | a device callable capturing the enclosing values by reference (passed to library templates) | `auto f = [&](int i, auto& cb) -> T {...};` |
| `kernel.invoke %f(%args) : (types) -> T` | call a `!kernel.fn` | `f(args)` |

Scalar code uses upstream `arith` and `math` ops; `index` is a 32-bit signed integer in C++
(`convert-kernel-to-cuda` checks that every buffer fits).

Host code (inside the `func.func` of the model function):

| op | meaning |
|---|---|
| `%t = kernel.empty [zeroed] : tensor<...>` | a device buffer: an output when the function returns it, else an intermediate or workspace (`zeroed`: all zeros before the first call, left zero by every call) |
| `kernel.launch @k(%a, %b, %c) : tensor<...>, tensor<...>, i32` | run kernel `@k` once; tensor operands are passed as pointers to their buffers (or, for a `!kernel.tensor_map` parameter, as a map of a 2-D view of the buffer), scalars by value; launches run in order on one stream |

Example:
```mlir
kernel.func @scale(%x: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {
  %t = kernel.thread_id x
  %b = kernel.block_id x
  %c128 = arith.constant 128 : index
  %base = arith.muli %b, %c128 : index
  %i = arith.addi %base, %t : index
  %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
  kernel.store %v, %y[%i] : bf16, !kernel.ptr<bf16>
}
func.func @f(%x: tensor<512xbf16>) -> tensor<512xbf16> {
  %y = kernel.empty : tensor<512xbf16>
  kernel.launch @scale(%x, %y) : tensor<512xbf16>, tensor<512xbf16>
  func.return %y : tensor<512xbf16>
}
```
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    VectorType,
    i1,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
    AttrSizedOperandSegments,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import (
    IsolatedFromAbove,
    IsTerminator,
    Pure,
    RecursiveMemoryEffect,
    SingleBlockImplicitTerminator,
    SymbolOpInterface,
    ensure_terminator,
)
from xdsl.utils.exceptions import VerifyException

from emmy.dialects import tensor_map

# ---------------------------------------------------------------------------------------------
# Constants and helpers
# ---------------------------------------------------------------------------------------------

MEMORY_SPACES = ("global", "shared", "local")
MAX_CLUSTER_BLOCKS = 8  # the portable cluster size
DIMS = ("x", "y", "z")
MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SMEM = 232448  # 227 KiB: sm_90's per-block limit (sm_80: 163 KiB, checked by the builder)
VECTOR_WIDTHS = (2, 4, 8)


def element_bytes(t: Attribute) -> int:
    """Size in bytes of a scalar element type used in kernels."""
    if isinstance(t, (BFloat16Type, Float16Type)):
        return 2
    if isinstance(t, Float32Type):
        return 4
    if isinstance(t, Float64Type):
        return 8
    if isinstance(t, IndexType):
        return 4
    if isinstance(t, IntegerType):
        return max(1, t.width.data // 8)
    raise VerifyException(f"unsupported element type {t}")


def is_scalar_type(t: Attribute) -> bool:
    return isinstance(
        t, (BFloat16Type, Float16Type, Float32Type, Float64Type, IndexType, IntegerType)
    )


def _enclosing_func(op: Operation) -> KernelFuncOp | None:
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


def _parse_dim(parser: Parser) -> StringAttr:
    dim = parser.parse_identifier()
    if dim not in DIMS:
        parser.raise_error(f"expected one of x, y, z, got '{dim}'")
    return StringAttr(dim)


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


# ---------------------------------------------------------------------------------------------
# Device ops
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
    dim = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())

    def __init__(self, dim: str):
        super().__init__(properties={"dim": StringAttr(dim)}, result_types=[IndexType()])

    def verify_(self) -> None:
        if self.dim.data not in DIMS:
            raise VerifyException(f"{self.name}: dimension must be x, y or z, got '{self.dim.data}'")
        if _enclosing_func(self) is None:
            raise VerifyException(f"{self.name}: must be inside a kernel.func")

    def print(self, printer: Printer) -> None:
        printer.print_string(" " + self.dim.data)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser):
        dim = _parse_dim(parser)
        op = cls(dim.data)
        attrs = parser.parse_optional_attr_dict()
        op.attributes |= attrs
        return op


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

    size = prop_def(IntegerAttr)
    offset = prop_def(IntegerAttr)
    align = prop_def(IntegerAttr)
    result = result_def(PtrType)
    traits = traits_def(Pure())

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
        func = _enclosing_func(self)
        if func is None:
            raise VerifyException("kernel.shared: must be inside a kernel.func")
        if offset + self.bytes > func.smem_bytes:
            raise VerifyException(
                f"kernel.shared: bytes {offset}..{offset + self.bytes} exceed the kernel's "
                f"{func.smem_bytes} bytes of shared memory"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(
            f" [{self.size.value.data}] offset {self.offset.value.data} align {self.align.value.data}"
        )
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> SharedOp:
        (size,) = _parse_int_list(parser)
        parser.parse_keyword("offset")
        offset = parser.parse_integer()
        parser.parse_keyword("align")
        align = parser.parse_integer()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if not isinstance(t, PtrType):
            parser.raise_error(f"expected !kernel.ptr<T, shared>, got {t}")
        op = cls.create(
            properties={
                "size": IntegerAttr(size, i64),
                "offset": IntegerAttr(offset, i64),
                "align": IntegerAttr(align, i64),
            },
            result_types=[t],
            attributes=attrs,
        )
        return op


@irdl_op_definition
class LocalOp(IRDLOperation):
    """A per-thread array of `size` elements (`T v[size];`), kept in registers when every access
    uses an index known at compile time (fully unrolled loops).

    ```mlir
    %acc = kernel.local [64] : !kernel.ptr<f32, local>
    ```
    """

    name = "kernel.local"

    size = prop_def(IntegerAttr)
    result = result_def(PtrType)

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
        if _enclosing_func(self) is None:
            raise VerifyException("kernel.local: must be inside a kernel.func")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" [{self.size.value.data}]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> LocalOp:
        (size,) = _parse_int_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if not isinstance(t, PtrType):
            parser.raise_error(f"expected !kernel.ptr<T, local>, got {t}")
        op = cls.create(properties={"size": IntegerAttr(size, i64)}, result_types=[t], attributes=attrs)
        return op


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
        if _enclosing_func(self) is None:
            raise VerifyException("kernel.barrier: must be inside a kernel.func")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of `kernel.for` (the next loop-carried values) and `kernel.if` (its results).

    ```mlir
    kernel.yield %acc : f32
    ```
    """

    name = "kernel.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[list(values)])

    def verify_(self) -> None:
        parent = self.parent_op()
        if not isinstance(parent, (ForOp, IfOp, LambdaOp)):
            raise VerifyException("kernel.yield: must end a kernel.for, kernel.if or kernel.lambda body")


@irdl_op_definition
class ForOp(IRDLOperation):
    """A counted loop over `index` values `lb, lb + step, ... < ub` (step > 0 at run time).

    Loop-carried values start at the `iter_args` operands and take the `kernel.yield` operands
    of each iteration; the results are their final values. `unroll` asks the CUDA compiler to
    unroll: `unroll full` (0) or `unroll N`; absent, it decides.

    ```mlir
    %sum = kernel.for %i = %lb to %ub step %c1 unroll 4 iter_args(%acc = %zero) -> (f32) {
      %v = kernel.load %x[%i] : !kernel.ptr<f32> -> f32
      %a = arith.addf %acc, %v : f32
      kernel.yield %a : f32
    }
    ```
    """

    name = "kernel.for"

    lb = operand_def(IndexType)
    ub = operand_def(IndexType)
    step = operand_def(IndexType)
    iter_args = var_operand_def()
    unroll = opt_prop_def(IntegerAttr)
    res = var_result_def()
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp), RecursiveMemoryEffect())

    def __init__(
        self,
        lb: SSAValue | Operation,
        ub: SSAValue | Operation,
        step: SSAValue | Operation,
        iter_args: Sequence[SSAValue | Operation] = (),
        body: Region | Block | None = None,
        unroll: int | None = None,
    ):
        iter_types = [SSAValue.get(a).type for a in iter_args]
        if body is None:
            body = Region(Block(arg_types=[IndexType(), *iter_types]))
        elif isinstance(body, Block):
            body = Region(body)
        props = {} if unroll is None else {"unroll": IntegerAttr(unroll, i64)}
        super().__init__(
            operands=[lb, ub, step, list(iter_args)],
            result_types=[iter_types],
            regions=[body],
            properties=props,
        )

    @property
    def induction_var(self) -> SSAValue:
        return self.body.block.args[0]

    def verify_(self) -> None:
        args = self.body.block.args
        if not args or not isinstance(args[0].type, IndexType):
            raise VerifyException("kernel.for: the body's first argument must be the index induction variable")
        carried = args[1:]
        if len(carried) != len(self.iter_args) or any(
            b.type != v.type for b, v in zip(carried, self.iter_args)
        ):
            raise VerifyException("kernel.for: body arguments must match the iter_args types")
        if len(self.res) != len(self.iter_args) or any(
            r.type != v.type for r, v in zip(self.res, self.iter_args)
        ):
            raise VerifyException("kernel.for: results must match the iter_args types")
        last = self.body.block.last_op
        if isinstance(last, YieldOp):
            if [v.type for v in last.values] != [v.type for v in self.iter_args]:
                raise VerifyException("kernel.for: kernel.yield must give one value per iter_arg, of its type")
        if self.unroll is not None and self.unroll.value.data < 0:
            raise VerifyException("kernel.for: unroll must be 'full' or a positive count")

    def print(self, printer: Printer) -> None:
        indvar, *carried = self.body.block.args
        printer.print_string(" ")
        printer.print_ssa_value(indvar)
        printer.print_string(" = ")
        printer.print_ssa_value(self.lb)
        printer.print_string(" to ")
        printer.print_ssa_value(self.ub)
        printer.print_string(" step ")
        printer.print_ssa_value(self.step)
        if self.unroll is not None:
            n = self.unroll.value.data
            printer.print_string(" unroll " + ("full" if n == 0 else str(n)))
        if carried:
            printer.print_string(" iter_args(")
            printer.print_list(
                zip(carried, self.iter_args),
                lambda p: (
                    printer.print_ssa_value(p[0]),
                    printer.print_string(" = "),
                    printer.print_ssa_value(p[1]),
                ),
            )
            printer.print_string(") -> (")
            printer.print_list([a.type for a in carried], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(
            self.body,
            print_entry_block_args=False,
            print_empty_block=False,
            print_block_terminators=bool(carried),
        )
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForOp:
        indvar = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        lb = parser.parse_operand(IndexType())
        parser.parse_keyword("to")
        ub = parser.parse_operand(IndexType())
        parser.parse_keyword("step")
        step = parser.parse_operand(IndexType())
        unroll = None
        if parser.parse_optional_keyword("unroll"):
            unroll = 0 if parser.parse_optional_keyword("full") else parser.parse_integer()
        carried_args: list[Parser.UnresolvedArgument] = []
        inits: list[SSAValue] = []
        if parser.parse_optional_keyword("iter_args"):

            def one():
                a = parser.parse_argument(expect_type=False)
                parser.parse_punctuation("=")
                v = parser.parse_unresolved_operand()
                return a, v

            pairs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, one)
            parser.parse_punctuation("->")
            types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
            carried_args = [a for a, _ in pairs]
            if len(types) != len(pairs):
                parser.raise_error("kernel.for: one type per iter_arg expected")
            inits = [parser.resolve_operand(v, t) for (_, v), t in zip(pairs, types)]
            resolved = [a.resolve(t) for a, t in zip(carried_args, types)]
        else:
            resolved = []
        body = parser.parse_region([indvar.resolve(IndexType()), *resolved])
        attrs = parser.parse_optional_attr_dict()
        op = cls(lb, ub, step, inits, body, unroll)
        op.attributes |= attrs
        if not inits:
            for trait in op.get_traits_of_type(SingleBlockImplicitTerminator):
                ensure_terminator(op, trait)
        return op


@irdl_op_definition
class IfOp(IRDLOperation):
    """A branch on an `i1`. With results, both regions end in `kernel.yield` of those types.

    ```mlir
    kernel.if %ok {
      kernel.store %v, %y[%i] : bf16, !kernel.ptr<bf16>
    }
    %r = kernel.if %c -> (f32) {
      kernel.yield %a : f32
    } else {
      kernel.yield %b : f32
    }
    ```
    """

    name = "kernel.if"

    cond = operand_def(i1)
    output = var_result_def()
    then_region = region_def("single_block")
    else_region = region_def()

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp), RecursiveMemoryEffect())

    def __init__(
        self,
        cond: SSAValue | Operation,
        result_types: Sequence[Attribute] = (),
        then_region: Region | None = None,
        else_region: Region | None = None,
    ):
        super().__init__(
            operands=[cond],
            result_types=[list(result_types)],
            regions=[then_region or Region(Block()), else_region or Region()],
        )

    def verify_(self) -> None:
        types = [r.type for r in self.output]
        if types and not self.else_region.blocks:
            raise VerifyException("kernel.if: an if with results needs an else region")
        for region in (self.then_region, self.else_region):
            if not region.blocks:
                continue
            last = region.block.last_op
            if isinstance(last, YieldOp) and [v.type for v in last.values] != types:
                raise VerifyException("kernel.if: kernel.yield must give one value per result, of its type")

    @staticmethod
    def _parse_body(parser: Parser) -> Region:
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        last = region.block.last_op
        if last is None or not last.has_trait(IsTerminator):
            region.block.add_op(YieldOp())
        return region

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.cond)
        has_results = bool(self.output)
        if has_results:
            printer.print_string(" -> (")
            printer.print_list([r.type for r in self.output], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(self.then_region, print_entry_block_args=False, print_block_terminators=has_results)
        if self.else_region.blocks:
            printer.print_string(" else ")
            printer.print_region(
                self.else_region, print_entry_block_args=False, print_block_terminators=has_results
            )
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> IfOp:
        cond = parser.parse_operand(i1)
        types: list[Attribute] = []
        if parser.parse_optional_punctuation("->"):
            types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        then_region = cls._parse_body(parser)
        else_region = cls._parse_body(parser) if parser.parse_optional_keyword("else") else Region()
        attrs = parser.parse_optional_attr_dict()
        op = cls(cond, types, then_region, else_region)
        op.attributes |= attrs
        return op


def _check_access(op: IRDLOperation, ptr_t: Attribute, value_t: Attribute) -> None:
    if not isinstance(ptr_t, PtrType):
        raise VerifyException(f"{op.name}: expected a !kernel.ptr, got {ptr_t}")
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


def _print_access(printer: Printer, op: Operation) -> None:
    """`%ptr[%index] if %mask {attrs}`, shared by kernel.load and kernel.store."""
    printer.print_operand(op.ptr)
    printer.print_string("[")
    printer.print_operand(op.index)
    printer.print_string("]")
    if op.mask is not None:
        printer.print_string(" if ")
        printer.print_operand(op.mask)
    printer.print_op_attributes(op.attributes)


def _parse_access(parser: Parser):
    """What `_print_access` prints: (unresolved pointer, index, mask or None, attributes)."""
    ptr = parser.parse_unresolved_operand()
    parser.parse_punctuation("[")
    index = parser.parse_operand(IndexType())
    parser.parse_punctuation("]")
    mask = parser.parse_operand(i1) if parser.parse_optional_keyword("if") else None
    return ptr, index, mask, parser.parse_optional_attr_dict()


@irdl_op_definition
class LoadOp(IRDLOperation):
    """Read one element, or a vector of 2, 4 or 8 consecutive elements (at most 16 bytes, one
    access), at element index `index` of a pointer. A vector access needs `index` to be a
    multiple of its width and the pointer aligned to the vector's size. With `if %mask`, a false
    mask yields zeros and does not touch memory.

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

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        _print_access(printer, self)
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        ptr, index, mask, attrs = _parse_access(parser)
        parser.parse_punctuation(":")
        ptr_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        op = cls(parser.resolve_operand(ptr, ptr_t), index, res_t, mask)
        op.attributes |= attrs
        return op


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Write one element or a vector (same rules as `kernel.load`); with `if %mask`, only when
    the mask is true.

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

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.value)
        printer.print_string(", ")
        _print_access(printer, self)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)
        printer.print_string(", ")
        printer.print_attribute(self.ptr.type)

    @classmethod
    def parse(cls, parser: Parser) -> StoreOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        ptr, index, mask, attrs = _parse_access(parser)
        parser.parse_punctuation(":")
        value_t = parser.parse_type()
        parser.parse_punctuation(",")
        ptr_t = parser.parse_type()
        op = cls(parser.resolve_operand(value, value_t), parser.resolve_operand(ptr, ptr_t), index, mask)
        op.attributes |= attrs
        return op


@irdl_op_definition
class PtrAddOp(IRDLOperation):
    """Pointer arithmetic in elements: `p + i`, same type and memory space.

    ```mlir
    %q = kernel.ptr_add %p, %i : !kernel.ptr<bf16, shared>
    ```
    """

    name = "kernel.ptr_add"

    ptr = operand_def(PtrType)
    offset = operand_def(IndexType)
    result = result_def(PtrType)
    traits = traits_def(Pure())

    def __init__(self, ptr: SSAValue | Operation, offset: SSAValue | Operation):
        super().__init__(operands=[ptr, offset], result_types=[SSAValue.get(ptr).type])

    def verify_(self) -> None:
        if self.result.type != self.ptr.type:
            raise VerifyException("kernel.ptr_add: result type must equal the pointer type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(", ")
        printer.print_operand(self.offset)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)

    @classmethod
    def parse(cls, parser: Parser) -> PtrAddOp:
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        off = parser.parse_operand(IndexType())
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        op = cls(parser.resolve_operand(ptr, t), off)
        op.attributes |= attrs
        return op


@irdl_op_definition
class ExtractOp(IRDLOperation):
    """One lane of a vector value (lane index known at compile time).

    ```mlir
    %e = kernel.extract %v[3] : vector<8xbf16>
    ```
    """

    name = "kernel.extract"

    vector = operand_def(VectorType)
    lane = prop_def(IntegerAttr)
    result = result_def()
    traits = traits_def(Pure())

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
        if self.result.type != vt.element_type:
            raise VerifyException("kernel.extract: result type must be the vector's element type")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.vector)
        printer.print_string(f"[{self.lane.value.data}]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.vector.type)

    @classmethod
    def parse(cls, parser: Parser) -> ExtractOp:
        v = parser.parse_unresolved_operand()
        (lane,) = _parse_int_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        op = cls(parser.resolve_operand(v, t), lane)
        op.attributes |= attrs
        return op


@irdl_op_definition
class PackOp(IRDLOperation):
    """A vector made of scalars, lane 0 first.

    ```mlir
    %v = kernel.pack %a, %b : vector<2xbf16>
    ```
    """

    name = "kernel.pack"

    elements = var_operand_def()
    result = result_def(VectorType)
    traits = traits_def(Pure())

    def __init__(self, elements: Sequence[SSAValue | Operation], vector_type: VectorType):
        super().__init__(operands=[list(elements)], result_types=[vector_type])

    def verify_(self) -> None:
        vt = self.result.type
        assert isinstance(vt, VectorType)
        if len(vt.get_shape()) != 1 or vt.get_shape()[0] != len(self.elements):
            raise VerifyException(f"kernel.pack: {len(self.elements)} elements do not make a {vt}")
        if any(e.type != vt.element_type for e in self.elements):
            raise VerifyException(f"kernel.pack: every element must be {vt.element_type}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.elements, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> PackOp:
        elts = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if not isinstance(t, VectorType):
            parser.raise_error(f"expected a vector type, got {t}")
        op = cls([parser.resolve_operand(e, t.element_type) for e in elts], t)
        op.attributes |= attrs
        return op


@irdl_op_definition
class CallOp(IRDLOperation):
    """Call a building block of Emmy's device library (`emmy/backend/runtime/*.cuh`).

    `callee` is the C++ name with its template arguments (`emmy::warp_sum`,
    `emmy::mma::warp_tile<64, 32, 64, 72>`); it must start with `emmy::`. Pointers pass as
    pointers, scalars by value; zero or one result (a scalar, a pointer, or a vector of scalars
    as `emmy::Vec`).

    ```mlir
    %s = kernel.call "emmy::warp_sum"(%x) : (f32) -> f32
    %v = kernel.call "emmy::load_cg<4>"(%p, %ok) : (!kernel.ptr<f32>, i1) -> vector<4xf32>
    kernel.call "emmy::cp_async_wait<1>"() : () -> ()
    ```
    """

    name = "kernel.call"

    callee = prop_def(StringAttr)
    args = var_operand_def()
    res = var_result_def()

    def __init__(
        self,
        callee: str,
        args: Sequence[SSAValue | Operation] = (),
        result_types: Sequence[Attribute] = (),
    ):
        super().__init__(
            operands=[list(args)],
            result_types=[list(result_types)],
            properties={"callee": StringAttr(callee)},
        )

    def verify_(self) -> None:
        callee = self.callee.data
        if not callee.startswith("emmy::") or any(c in callee for c in "();{}\n\"'"):
            raise VerifyException(
                f"kernel.call: callee must be a device-library name starting with 'emmy::', got '{callee}'"
            )
        if len(self.res) > 1:
            raise VerifyException("kernel.call: at most one result")
        for r in self.res:
            t = r.type
            vector = isinstance(t, VectorType) and t.get_num_dims() == 1 and is_scalar_type(t.element_type)
            if not (is_scalar_type(t) or isinstance(t, PtrType) or vector):
                raise VerifyException(f"kernel.call: result must be a scalar, a vector of scalars or a pointer, got {t}")
        if _enclosing_func(self) is None:
            raise VerifyException("kernel.call: must be inside a kernel.func")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.callee)
        printer.print_string("(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : (")
        printer.print_list([a.type for a in self.args], printer.print_attribute)
        printer.print_string(") -> ")
        if len(self.res) == 1:
            printer.print_attribute(self.res[0].type)
        else:
            printer.print_string("(")
            printer.print_list([r.type for r in self.res], printer.print_attribute)
            printer.print_string(")")

    @classmethod
    def parse(cls, parser: Parser) -> CallOp:
        callee = parser.parse_str_literal()
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        arg_types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        parser.parse_punctuation("->")
        if parser.parse_optional_punctuation("("):
            if parser.parse_optional_punctuation(")"):
                res_types = []
            else:
                res_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
                parser.parse_punctuation(")")
        else:
            res_types = [parser.parse_type()]
        if len(arg_types) != len(args):
            parser.raise_error("kernel.call: one type per argument expected")
        op = cls(callee, parser.resolve_operands(args, arg_types, parser.pos), res_types)
        op.attributes |= attrs
        return op


@irdl_op_definition
class LambdaOp(IRDLOperation):
    """A device callable defined in the kernel body (`auto f = [&](int i, ...) -> float {...};`).

    Its body sees every value defined before it (captured by reference) and its own arguments:
    scalars (`index`, integers, floats) and `!kernel.fn` callbacks (`auto&` parameters, called with
    `kernel.invoke`). It returns the operands of its `kernel.yield` (none or one value). Device
    library templates take lambdas through `kernel.call` (e.g. a row producer that computes one
    staged element from the loop body's index arithmetic and scalar code).

    ```mlir
    %row = kernel.lambda (%i: index, %st: !kernel.fn) {
      %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
      kernel.invoke %st(%i, %v) : (index, bf16) -> ()
    }
    %sq = kernel.lambda (%a: f32) -> f32 {
      %b = arith.mulf %a, %a : f32
      kernel.yield %b : f32
    }
    ```
    """

    name = "kernel.lambda"

    result = result_def(FnType)
    ret_types = prop_def(ArrayAttr)
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))

    def __init__(
        self,
        arg_types: Sequence[Attribute],
        result_types: Sequence[Attribute] = (),
        body: Region | None = None,
    ):
        if body is None:
            body = Region(Block(arg_types=arg_types))
        super().__init__(
            result_types=[FnType()],
            properties={"ret_types": ArrayAttr(list(result_types))},
            regions=[body],
        )

    @property
    def returns(self) -> tuple[Attribute, ...]:
        return tuple(self.ret_types.data)

    def verify_(self) -> None:
        if len(self.returns) > 1:
            raise VerifyException("kernel.lambda: at most one result")
        for a in self.body.block.args:
            if not (is_scalar_type(a.type) or isinstance(a.type, (FnType, PtrType))):
                raise VerifyException(f"kernel.lambda: argument type {a.type} is not a scalar, pointer or !kernel.fn")
        last = self.body.block.last_op
        if isinstance(last, YieldOp) and tuple(v.type for v in last.values) != self.returns:
            raise VerifyException("kernel.lambda: kernel.yield must give one value per result, of its type")
        if _enclosing_func(self) is None:
            raise VerifyException("kernel.lambda: must be inside a kernel.func")

    def print(self, printer: Printer) -> None:
        printer.print_string(" (")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(")")
        if self.returns:
            printer.print_string(" -> ")
            printer.print_attribute(self.returns[0])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(
            self.body, print_entry_block_args=False, print_block_terminators=bool(self.returns)
        )

    @classmethod
    def parse(cls, parser: Parser) -> LambdaOp:
        args = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=True)
        )
        returns: list[Attribute] = []
        if parser.parse_optional_punctuation("->"):
            returns = [parser.parse_type()]
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region(args)
        op = cls([], returns, body)
        if attrs is not None:
            op.attributes |= attrs.data
        if not returns:
            for trait in op.get_traits_of_type(SingleBlockImplicitTerminator):
                ensure_terminator(op, trait)
        return op


@irdl_op_definition
class InvokeOp(IRDLOperation):
    """Call a `!kernel.fn` value (a lambda or a callback argument of one).

    ```mlir
    kernel.invoke %st(%i, %v) : (index, bf16) -> ()
    %y = kernel.invoke %sq(%x) : (f32) -> f32
    ```
    """

    name = "kernel.invoke"

    fn = operand_def(FnType)
    args = var_operand_def()
    res = var_result_def()

    def __init__(
        self,
        fn: SSAValue | Operation,
        args: Sequence[SSAValue | Operation] = (),
        result_types: Sequence[Attribute] = (),
    ):
        super().__init__(operands=[fn, list(args)], result_types=[list(result_types)])

    def verify_(self) -> None:
        if len(self.res) > 1:
            raise VerifyException("kernel.invoke: at most one result")
        owner = self.fn.owner
        if isinstance(owner, LambdaOp):
            if len(owner.body.block.args) != len(self.args) or any(
                a.type != v.type for a, v in zip(owner.body.block.args, self.args)
            ):
                raise VerifyException("kernel.invoke: arguments do not match the lambda's parameters")
            if tuple(r.type for r in self.res) != owner.returns:
                raise VerifyException("kernel.invoke: results do not match the lambda's")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.fn)
        printer.print_string("(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : (")
        printer.print_list([a.type for a in self.args], printer.print_attribute)
        printer.print_string(") -> ")
        if len(self.res) == 1:
            printer.print_attribute(self.res[0].type)
        else:
            printer.print_string("()")

    @classmethod
    def parse(cls, parser: Parser) -> InvokeOp:
        fn = parser.parse_operand(FnType())
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        arg_types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        parser.parse_punctuation("->")
        res_types: list[Attribute] = []
        if parser.parse_optional_punctuation("("):
            parser.parse_punctuation(")")
        else:
            res_types = [parser.parse_type()]
        if len(arg_types) != len(args):
            parser.raise_error("kernel.invoke: one type per argument expected")
        op = cls(fn, parser.resolve_operands(args, arg_types, parser.pos), res_types)
        op.attributes |= attrs
        return op


# ---------------------------------------------------------------------------------------------
# Host ops
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class EmptyOp(IRDLOperation):
    """A device buffer for one tensor, written by later launches: a function output when the
    function returns it, else an intermediate or a workspace. A `zeroed` buffer holds zeros
    before the first call and every call leaves it zero again (the per-tile counters of split_k
    with `combine = last_block`); the caller clears it once, when it allocates it.

    ```mlir
    %t = kernel.empty : tensor<512x4096xbf16>
    %counters = kernel.empty zeroed : tensor<64xi32>
    ```
    """

    name = "kernel.empty"
    result = result_def(TensorType)
    zeroed = opt_prop_def(UnitAttr)
    assembly_format = "(`zeroed` $zeroed^)? attr-dict `:` type($result)"

    def __init__(self, tensor_type: TensorType, zeroed: bool = False):
        super().__init__(result_types=[tensor_type], properties={"zeroed": UnitAttr()} if zeroed else {})

    def verify_(self) -> None:
        if _enclosing_func(self) is not None:
            raise VerifyException("kernel.empty: is host code; it cannot be inside a kernel.func")


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Run `kernel.func @callee` once on the function's stream, after every earlier launch.

    Tensor operands pass their buffers (the kernel's `!kernel.ptr<T>` argument of the same element
    type), scalar operands their value; the launch geometry is the kernel's.

    ```mlir
    kernel.launch @scale(%x, %y) : tensor<512xbf16>, tensor<512xbf16>
    kernel.launch @proj(%y, %w, %z) {emmy.overlap} : tensor<512xbf16>, tensor<64x512xbf16>, tensor<64xbf16>
    ```

    Discardable attributes: `emmy.phase = "prepare"` (run once when the weights are bound) and
    `emmy.overlap` (set by `kernel-overlap-launches`: launched with programmatic dependent
    launch, the kernel may start while the launch before it finishes; it waits for it first).
    """

    name = "kernel.launch"

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()

    def __init__(self, callee: str | SymbolRefAttr, args: Sequence[SSAValue | Operation]):
        if isinstance(callee, str):
            callee = SymbolRefAttr(callee)
        super().__init__(operands=[list(args)], properties={"callee": callee})

    def kernel(self) -> KernelFuncOp | None:
        """The launched kernel.func, looked up among the module's top-level ops."""
        op: Operation | None = self
        while op is not None and op.parent_op() is not None:
            op = op.parent_op()
        if op is None:
            return None
        name = self.callee.root_reference.data
        for candidate in op.regions[0].block.ops if op.regions else ():
            if isinstance(candidate, KernelFuncOp) and candidate.sym_name.data == name:
                return candidate
        return None

    def verify_(self) -> None:
        name = self.callee.root_reference.data
        if _enclosing_func(self) is not None:
            raise VerifyException("kernel.launch: is host code; it cannot be inside a kernel.func")
        func = self.kernel()
        if func is None:
            raise VerifyException(f"kernel.launch: no kernel.func named @{name}")
        types = func.arg_types
        if len(types) != len(self.args):
            raise VerifyException(
                f"kernel.launch: @{name} takes {len(types)} arguments, {len(self.args)} given"
            )
        for i, (t, a) in enumerate(zip(types, self.args)):
            at = a.type
            if isinstance(t, PtrType):
                if not isinstance(at, TensorType) or at.element_type != t.element_type:
                    raise VerifyException(
                        f"kernel.launch: argument #{i} of @{name} must be a tensor of {t.element_type}, got {at}"
                    )
            elif isinstance(t, TensorMapType):
                why = tensor_map.view_fits(t, at) if isinstance(at, TensorType) else f"must be a tensor, got {at}"
                if why is not None:
                    raise VerifyException(f"kernel.launch: argument #{i} of @{name} (a tensor map) {why}")
            elif at != t:
                raise VerifyException(f"kernel.launch: argument #{i} of @{name} must be {t}, got {at}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.callee)
        printer.print_string("(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        if self.args:
            printer.print_string(" : ")
            printer.print_list([a.type for a in self.args], printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> LaunchOp:
        callee = parser.parse_attribute()
        if not isinstance(callee, SymbolRefAttr):
            parser.raise_error("kernel.launch: expected @kernel name")
        pos = parser.pos
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        types: list[Attribute] = []
        if args:
            parser.parse_punctuation(":")
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        if len(types) != len(args):
            parser.raise_error("kernel.launch: one type per argument expected")
        op = cls(callee, parser.resolve_operands(args, types, pos))
        op.attributes |= attrs
        return op


Kernel = Dialect(
    "kernel",
    [
        KernelFuncOp,
        ReturnOp,
        BlockIdOp,
        ThreadIdOp,
        SharedOp,
        LocalOp,
        BarrierOp,
        ForOp,
        IfOp,
        YieldOp,
        LoadOp,
        StoreOp,
        PtrAddOp,
        ExtractOp,
        PackOp,
        CallOp,
        LambdaOp,
        InvokeOp,
        EmptyOp,
        LaunchOp,
    ],
    [PtrType, TensorMapType, FnType],
)
