"""The `cuda` stage: CUDA C++ source per kernel and the host launch sequence (dialect `Cuda`).

One `cuda.module` per model function holds:

| op | meaning |
|---|---|
| `cuda.kernel @k(!cuda.ptr<bf16>, i32) grid [..] block [..] smem N source "..."` | one `__global__` kernel: its parameters, launch geometry, dynamic shared memory and its CUDA C++ text (a complete `extern "C" __global__` definition) |
| `cuda.buffer @x : tensor<...> input 0 "hidden_states"` | a device buffer of the launch sequence: `input N` / `param N` (function argument N, PyTorch name), `output N` (result N), `temp` (intermediates and workspaces) |
| `cuda.launch @k(@x, @w, 3 : i32) grid [..] block [..] smem N` | one kernel launch, in order, on one stream; buffer arguments by symbol (a `!cuda.tensor_map<...>` parameter gets a map of a view of its buffer, encoded by the host), scalars by value |

`emmy/backend/plan.py` reads it into a `LaunchPlan` and writes the whole `.cu` text (the runtime
include, every kernel, and `extern "C" void emmy_launch_<module>(<buffer pointers>, cudaStream_t)`).

```mlir
cuda.module @f {
  cuda.kernel @scale(!cuda.ptr<bf16>, !cuda.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 source "extern \\"C\\" __global__ void scale(...) {...}"
  cuda.buffer @x : tensor<512xbf16> input 0 "x"
  cuda.buffer @y : tensor<512xbf16> output 0
  cuda.launch @scale(@x, @y) grid [4, 1, 1] block [128, 1, 1] smem 0
}
```
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, NoTerminator, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

from emmy.dialects import tensor_map

ROLES = ("input", "param", "output", "temp", "prepared", "zeroed")


def _parse_int_list(parser: Parser) -> list[int]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)


def _i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def _check_geometry(name: str, grid: DenseArrayBase, block: DenseArrayBase, smem: IntegerAttr) -> None:
    for what, attr in (("grid", grid), ("block", block)):
        vals = attr.get_values()
        if len(vals) != 3 or any(v < 1 for v in vals):
            raise VerifyException(f"{name}: {what} must be three positive integers, got {list(vals)}")
    if smem.value.data < 0:
        raise VerifyException(f"{name}: smem must not be negative")


def _print_geometry(printer: Printer, grid: DenseArrayBase, block: DenseArrayBase, smem: IntegerAttr) -> None:
    printer.print_string(
        " grid [" + ", ".join(map(str, grid.get_values())) + "] block ["
        + ", ".join(map(str, block.get_values())) + f"] smem {smem.value.data}"
    )


def _parse_geometry(parser: Parser) -> tuple[list[int], list[int], int]:
    parser.parse_keyword("grid")
    grid = _parse_int_list(parser)
    parser.parse_keyword("block")
    block = _parse_int_list(parser)
    parser.parse_keyword("smem")
    return grid, block, parser.parse_integer()


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """A kernel parameter pointing to device memory holding elements of one type:
    `!cuda.ptr<bf16>`."""

    name = "cuda.ptr"
    element_type: Attribute

    def __init__(self, element_type: Attribute):
        super().__init__(element_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            return [parser.parse_type()]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.element_type)


@irdl_attr_definition
class TensorMapType(tensor_map.TensorMapView):
    """A kernel parameter holding a tensor map of a 2-D view of a buffer (see
    emmy/dialects/tensor_map.py): `!cuda.tensor_map<bf16, rows 4096, cols 1024, stride 1024,
    offset 0, box 128 x 64>`. The launch function encodes it from the buffer argument."""

    name = "cuda.tensor_map"


@irdl_op_definition
class ModuleOp(IRDLOperation):
    """The kernels and launch sequence of one model function (`sym_name`: the function's name).

    ```mlir
    cuda.module @layer {
      cuda.buffer @x : tensor<512xbf16> input 0 "x"
    }
    ```
    """

    name = "cuda.module"

    sym_name = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), SymbolTable(), NoTerminator())

    def __init__(self, name: str, ops: Sequence[Operation] = ()):
        super().__init__(properties={"sym_name": StringAttr(name)}, regions=[Region(Block(ops))])

    def verify_(self) -> None:
        for op in self.body.block.ops:
            if not isinstance(op, (KernelOp, BufferOp, LaunchOp)):
                raise VerifyException(
                    f"cuda.module @{self.sym_name.data}: holds only cuda.kernel, cuda.buffer and cuda.launch, got {op.name}"
                )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=False)

    @classmethod
    def parse(cls, parser: Parser) -> ModuleOp:
        name = parser.parse_symbol_name().data
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        op = cls.create(properties={"sym_name": StringAttr(name)}, regions=[region])
        if attrs is not None:
            op.attributes |= attrs.data
        return op


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One `__global__` kernel: parameter types (`!cuda.ptr<T>` or scalars), launch geometry,
    dynamic shared memory bytes and the CUDA C++ definition (`source`), whose function name is
    the symbol name.

    ```mlir
    cuda.kernel @k(!cuda.ptr<bf16>, i32) grid [4, 1, 1] block [128, 1, 1] smem 0 source "..."
    ```
    """

    name = "cuda.kernel"

    sym_name = prop_def(StringAttr)
    arg_types = prop_def(ArrayAttr)
    grid = prop_def(DenseArrayBase)
    block = prop_def(DenseArrayBase)
    smem = prop_def(IntegerAttr)
    source = prop_def(StringAttr)
    traits = traits_def(SymbolOpInterface())

    def __init__(
        self,
        name: str,
        arg_types: Sequence[Attribute],
        grid: Sequence[int],
        block: Sequence[int],
        smem: int,
        source: str,
    ):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "arg_types": ArrayAttr(list(arg_types)),
                "grid": _i64_array(grid),
                "block": _i64_array(block),
                "smem": IntegerAttr(smem, i64),
                "source": StringAttr(source),
            }
        )

    def verify_(self) -> None:
        name = f"cuda.kernel @{self.sym_name.data}"
        _check_geometry(name, self.grid, self.block, self.smem)
        if not self.sym_name.data.isidentifier():
            raise VerifyException(f"{name}: the name must be a C identifier")
        if f" {self.sym_name.data}(" not in self.source.data:
            raise VerifyException(f"{name}: source does not define {self.sym_name.data}(...)")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")
        printer.print_list(self.arg_types.data, printer.print_attribute)
        printer.print_string(")")
        _print_geometry(printer, self.grid, self.block, self.smem)
        printer.print_string(" source ")
        printer.print_attribute(self.source)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name().data
        types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        grid, block, smem = _parse_geometry(parser)
        parser.parse_keyword("source")
        source = parser.parse_str_literal()
        attrs = parser.parse_optional_attr_dict()
        op = cls(name, types, grid, block, smem, source)
        op.attributes |= attrs
        return op


@irdl_op_definition
class BufferOp(IRDLOperation):
    """A device buffer of the launch sequence: shape and dtype (`type`), `role`, `position` (the
    function argument number for inputs and params, the result number for outputs) and
    `torch_name` (the PyTorch name of inputs and params).

    ```mlir
    cuda.buffer @w : tensor<4096x1024xbf16> param 2 "self_attn.q_proj.weight"
    cuda.buffer @out : tensor<512x1024xbf16> output 0
    cuda.buffer @ws : tensor<2x512x1024xf32> temp
    cuda.buffer @w_folded : tensor<4096x1024xbf16> prepared
    ```

    A `prepared` buffer is written by prepare-phase launches only (from parameters; see
    `emmy.phase`) and keeps its contents from one call to the next. A `zeroed` buffer holds
    zeros when the caller allocates it, and every call leaves it zero again (the per-tile
    counters of split_k with `combine = last_block`):

    ```mlir
    cuda.buffer @counters : tensor<64xi32> zeroed
    ```
    """

    name = "cuda.buffer"

    sym_name = prop_def(StringAttr)
    type = prop_def(TensorType)
    role = prop_def(StringAttr)
    position = opt_prop_def(IntegerAttr)
    torch_name = opt_prop_def(StringAttr)
    traits = traits_def(SymbolOpInterface())

    def __init__(
        self,
        name: str,
        tensor_type: TensorType,
        role: str,
        position: int | None = None,
        torch_name: str | None = None,
    ):
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "type": tensor_type,
            "role": StringAttr(role),
        }
        if position is not None:
            props["position"] = IntegerAttr(position, i64)
        if torch_name is not None:
            props["torch_name"] = StringAttr(torch_name)
        super().__init__(properties=props)

    def verify_(self) -> None:
        name = f"cuda.buffer @{self.sym_name.data}"
        role = self.role.data
        if role not in ROLES:
            raise VerifyException(f"{name}: role must be one of {', '.join(ROLES)}, got '{role}'")
        if not self.sym_name.data.isidentifier():
            raise VerifyException(f"{name}: the name must be a C identifier")
        if (self.position is None) != (role in ("temp", "prepared", "zeroed")):
            raise VerifyException(f"{name}: inputs, params and outputs have a position, temps, prepared and zeroed buffers none")
        if self.torch_name is not None and role not in ("input", "param"):
            raise VerifyException(f"{name}: only inputs and params have a PyTorch name")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(" : ")
        printer.print_attribute(self.type)
        printer.print_string(" " + self.role.data)
        if self.position is not None:
            printer.print_string(f" {self.position.value.data}")
        if self.torch_name is not None:
            printer.print_string(" ")
            printer.print_attribute(self.torch_name)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> BufferOp:
        name = parser.parse_symbol_name().data
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if not isinstance(t, TensorType):
            parser.raise_error(f"cuda.buffer: expected a tensor type, got {t}")
        role = parser.parse_identifier()
        position = parser.parse_optional_integer()
        torch_name = parser.parse_optional_str_literal()
        attrs = parser.parse_optional_attr_dict()
        op = cls(name, t, role, position, torch_name)
        op.attributes |= attrs
        return op


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Launch `cuda.kernel @kernel` once, after every earlier launch of the module, with buffer
    arguments (symbols of `cuda.buffer`s) and scalar arguments (integer or float attributes).

    ```mlir
    cuda.launch @k(@x, @y, 512 : i32) grid [4, 1, 1] block [128, 1, 1] smem 0
    cuda.launch @fold(@g, @w, @w_folded) grid [1024, 1, 1] block [256, 1, 1] smem 0 {emmy.phase = "prepare"}
    ```

    Launches with `emmy.phase = "prepare"` run once when the parameters are bound (in order,
    before the first call); they take `param` and `prepared` buffers only. The others run on
    every call. A forward launch with the unit attribute `emmy.overlap` is launched with
    programmatic dependent launch: it may start while the launch before it finishes, and its
    kernel waits for that one before touching global memory (`kernel-overlap-launches`).

    ```mlir
    cuda.launch @proj(@x, @w, @y) grid [16, 32, 1] block [384, 1, 1] smem 197696 {emmy.overlap}
    ```
    """

    name = "cuda.launch"

    kernel = prop_def(SymbolRefAttr)
    args = prop_def(ArrayAttr)
    grid = prop_def(DenseArrayBase)
    block = prop_def(DenseArrayBase)
    smem = prop_def(IntegerAttr)

    def __init__(
        self,
        kernel: str,
        args: Sequence[Attribute],
        grid: Sequence[int],
        block: Sequence[int],
        smem: int,
    ):
        super().__init__(
            properties={
                "kernel": SymbolRefAttr(kernel),
                "args": ArrayAttr(list(args)),
                "grid": _i64_array(grid),
                "block": _i64_array(block),
                "smem": IntegerAttr(smem, i64),
            }
        )

    def verify_(self) -> None:
        kname = self.kernel.root_reference.data
        name = f"cuda.launch @{kname}"
        _check_geometry(name, self.grid, self.block, self.smem)
        module = self.parent_op()
        if not isinstance(module, ModuleOp):
            raise VerifyException(f"{name}: must be inside a cuda.module")
        symbols = {
            op.sym_name.data: op for op in module.body.block.ops if isinstance(op, (KernelOp, BufferOp))
        }
        kernel = symbols.get(kname)
        if not isinstance(kernel, KernelOp):
            raise VerifyException(f"{name}: no cuda.kernel named @{kname}")
        if len(kernel.arg_types.data) != len(self.args.data):
            raise VerifyException(
                f"{name}: the kernel takes {len(kernel.arg_types.data)} arguments, {len(self.args.data)} given"
            )
        phase = self.attributes.get("emmy.phase")
        if phase is not None and phase != StringAttr("prepare"):
            raise VerifyException(f'{name}: emmy.phase must be "prepare" (or absent for the forward phase)')
        prepare = phase is not None
        overlap = self.attributes.get("emmy.overlap")
        if overlap is not None and not isinstance(overlap, UnitAttr):
            raise VerifyException(f"{name}: emmy.overlap is a unit attribute (no value), got {overlap}")
        if overlap is not None and prepare:
            raise VerifyException(f"{name}: a prepare-phase launch does not overlap the one before it (emmy.overlap)")
        for i, (t, a) in enumerate(zip(kernel.arg_types.data, self.args.data)):
            if isinstance(t, (PtrType, TensorMapType)):
                if not isinstance(a, SymbolRefAttr):
                    raise VerifyException(f"{name}: argument #{i} must be a buffer")
                buf = symbols.get(a.root_reference.data)
                if not isinstance(buf, BufferOp):
                    raise VerifyException(f"{name}: no cuda.buffer named @{a.root_reference.data}")
                if isinstance(t, TensorMapType):
                    why = tensor_map.view_fits(t, buf.type)
                    if why is not None:
                        raise VerifyException(f"{name}: argument #{i} (a tensor map of @{a.root_reference.data}) {why}")
                elif buf.type.element_type != t.element_type:
                    raise VerifyException(
                        f"{name}: argument #{i} must hold {t.element_type}, @{a.root_reference.data} holds {buf.type.element_type}"
                    )
                if prepare and buf.role.data not in ("param", "prepared"):
                    raise VerifyException(
                        f"{name}: a prepare-phase launch reads parameters and writes prepared buffers only; @{a.root_reference.data} is {buf.role.data}"
                    )
            else:
                if not isinstance(a, (IntegerAttr, FloatAttr)) or a.type != t:
                    raise VerifyException(f"{name}: argument #{i} must be a {t} value")
        for what in ("grid", "block", "smem"):
            if getattr(self, what) != getattr(kernel, what):
                raise VerifyException(f"{name}: {what} differs from the kernel's")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.kernel)
        printer.print_string("(")
        printer.print_list(self.args.data, printer.print_attribute)
        printer.print_string(")")
        _print_geometry(printer, self.grid, self.block, self.smem)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> LaunchOp:
        kernel = parser.parse_attribute()
        if not isinstance(kernel, SymbolRefAttr):
            parser.raise_error("cuda.launch: expected @kernel")
        args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_attribute)
        grid, block, smem = _parse_geometry(parser)
        attrs = parser.parse_optional_attr_dict()
        op = cls(kernel.root_reference.data, args, grid, block, smem)
        op.attributes |= attrs
        return op


Cuda = Dialect("cuda", [ModuleOp, KernelOp, BufferOp, LaunchOp], [PtrType, TensorMapType])
