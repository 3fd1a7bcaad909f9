"""The `kernel` stage's host ops: what the model function's `func.func` does, buffers
(`kernel.empty`) and launches in order (`kernel.launch`). See kernel.py for the overview.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import SymbolRefAttr, TensorType, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

from emmy.dialects import tensor_map
from emmy.dialects.kernel_device import KernelFuncOp, enclosing_func
from emmy.dialects.kernel_types import PtrType, TensorMapType


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
        if enclosing_func(self) is not None:
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
    assembly_format = "$callee `(` $args `)` attr-dict (`:` type($args)^)?"

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
        if enclosing_func(self) is not None:
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
