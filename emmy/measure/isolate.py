"""One `tile.kernel` of a tile-stage module in a function of its own, to be built and timed alone.

    small = isolate(module, "o_proj_residual")     # module: tile stage, one or more functions
    print(small)                                   # one func.func running just that kernel

The result keeps the module's attributes (`emmy.target`, ...) except recorded pins and launch
budgets (`emmy.pins`, `emmy.model_pins`, `emmy.max_launches`: they were about the whole
function), and holds one function `@<kernel>` whose arguments are the kernel's operands (deduplicated, in
operand order) and whose results are the kernel's results:

    func.func @o_proj_residual(%attn: tensor<1x512x2048xbf16> {emmy.name = "attn", emmy.role = "input"},
                               %w: tensor<1024x2048xbf16> {emmy.name = "o_proj.weight", emmy.role = "param"}, ...)
        -> tensor<1x512x1024xbf16> {
      %0 = tile.kernel @o_proj_residual kind "contraction" ... knobs {block_m = #tile.knob<"block_m", [16, ...]>, ...}
      func.return %0 : tensor<1x512x1024xbf16>
    }

An operand that was a function argument keeps its argument attributes (name and role); one
computed by another kernel becomes an input named after that kernel's result. Every knob is
undecided (name and domain kept), and a prepare-phase kernel runs in the forward phase (so that
a timed call runs it). The module then goes through the pipeline from `decide-forks` on with a
candidate's values pinned (`decide-forks{pin="KERNEL.KNOB=VALUE;..."}`).
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import Block, BlockArgument, Region, SSAValue

from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp, KnobAttr

# module attributes that speak about the whole function and do not carry over to one kernel
_DROPPED_MODULE_ATTRS = ("emmy.pins", "emmy.model_pins", "emmy.max_launches")
_DROPPED_KERNEL_ATTRS = ("emmy.phase",)


def kernel_names(module: ModuleOp) -> list[str]:
    """The name of every `tile.kernel` of the module, in IR order."""
    return [k.kernel_name for k in module.walk() if isinstance(k, KernelOp)]


def find_kernel(module: ModuleOp, kernel_name: str) -> KernelOp:
    """The `tile.kernel` named `kernel_name`; EmmyError listing the kernels when there is none."""
    found = [k for k in module.walk() if isinstance(k, KernelOp) and k.kernel_name == kernel_name]
    if not found:
        names = kernel_names(module)
        raise EmmyError(
            f"isolate: no tile.kernel @{kernel_name} in the module; kernels: {', '.join(names) or 'none'}"
        )
    if len(found) > 1:
        raise EmmyError(f"isolate: {len(found)} tile.kernel ops are named @{kernel_name}")
    return found[0]


def isolate(module: ModuleOp, kernel_name: str) -> ModuleOp:
    """A new module (the given one is left unchanged) whose one function runs only the kernel."""
    kernel = find_kernel(module, kernel_name)
    operands: list[SSAValue] = []
    for v in kernel.operands:
        if v not in operands:
            operands.append(v)
    used: set[str] = set()
    arg_attrs = [_arg_attrs(v, kernel_name, used) for v in operands]
    block = Block(arg_types=[v.type for v in operands])
    for arg, attrs in zip(block.args, arg_attrs):
        arg.name_hint = _ssa_name(attrs["emmy.name"].data)
    copy = kernel.clone()
    for i, v in enumerate(kernel.operands):
        copy.operands[i] = block.args[operands.index(v)]
    copy.with_knobs({name: KnobAttr(k.knob_name, k.domain) for name, k in kernel.knob_dict().items()})
    for name in _DROPPED_KERNEL_ATTRS:
        copy.attributes.pop(name, None)
    block.add_op(copy)
    block.add_op(func.ReturnOp(*copy.results))
    fn = func.FuncOp(
        kernel_name,
        ([v.type for v in operands], [r.type for r in kernel.results]),
        Region(block),
        arg_attrs=ArrayAttr([DictionaryAttr(a) for a in arg_attrs]),
    )
    out = ModuleOp([fn])
    for name, value in module.attributes.items():
        if name not in _DROPPED_MODULE_ATTRS:
            out.attributes[name] = value
    return out


def _arg_attrs(value: SSAValue, kernel_name: str, used: set[str]) -> dict[str, StringAttr]:
    """A function argument's attributes for one operand: the enclosing function's own, or an
    input named after the result that computed it."""
    if isinstance(value, BlockArgument) and isinstance(value.owner.parent_op(), func.FuncOp):
        fn = value.owner.parent_op()
        assert isinstance(fn, func.FuncOp)
        attrs = dict(fn.arg_attrs.data[value.index].data) if fn.arg_attrs is not None else {}
        name = attrs.get("emmy.name")
        base = name.data if isinstance(name, StringAttr) else f"arg{value.index}"
    else:
        attrs = {}
        owner = value.owner
        if isinstance(owner, KernelOp):
            base = owner.kernel_name if len(owner.results) == 1 else f"{owner.kernel_name}_{value.index}"
        else:
            base = value.name_hint or f"{kernel_name}_in"
        attrs["emmy.role"] = StringAttr("input")
    name = base
    n = 1
    while name in used:
        name, n = f"{base}_{n}", n + 1
    used.add(name)
    attrs["emmy.name"] = StringAttr(name)
    return attrs


def _ssa_name(name: str) -> str | None:
    """An SSA name hint from a PyTorch name (`q_proj.weight` is a valid one too)."""
    return name if SSAValue.is_valid_name(name) else None


__all__ = ["find_kernel", "isolate", "kernel_names"]
