"""convert-kernel-to-cuda: kernel-stage IR becomes CUDA C++ source and a host launch sequence.

For every function (`func.func` holding `kernel.empty` / `kernel.launch`), one `cuda.module`
named after it holds: a `cuda.kernel` per `kernel.func` it launches (the `extern "C"
__global__` definition written by `emmy.backend.cxx`), a `cuda.buffer` per tensor (function
arguments as `input`/`param` with their PyTorch name, returned buffers as `output`, `kernel.empty
zeroed` ones as `zeroed`, the rest as `temp`), and a `cuda.launch` per `kernel.launch`, in order. `kernel.func`s and the functions are
removed; module attributes stay. `emmy.backend.plan` reads the result.

Input invariant: kernel stage (output of convert-tile-to-kernel).
Output IR: `cuda.module`s only (inside the builtin module).
Invariants: launch order, grid, block and shared memory are the kernel stage's; every tensor has
fewer than 2^31 elements (kernels index with 32-bit `int`s).

    // before
    kernel.func @k(%x: !kernel.ptr<bf16>, %y: !kernel.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 {...}
    func.func @f(%x: tensor<512xbf16> {emmy.name = "x", emmy.role = "input"}) -> tensor<512xbf16> {
      %y = kernel.empty : tensor<512xbf16>
      kernel.launch @k(%x, %y) : tensor<512xbf16>, tensor<512xbf16>
      func.return %y : tensor<512xbf16>
    }
    // after
    cuda.module @f {
      cuda.kernel @k(!cuda.ptr<bf16>, !cuda.ptr<bf16>) grid [4, 1, 1] block [128, 1, 1] smem 0 source "..."
      cuda.buffer @x : tensor<512xbf16> input 0 "x"
      cuda.buffer @y : tensor<512xbf16> output 0
      cuda.launch @k(@x, @y) grid [4, 1, 1] block [128, 1, 1] smem 0
    }
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, SymbolRefAttr, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.lowering.common import c_ident
from emmy.backend.cxx import emit_kernel
from emmy.diagnostics import EmmyError
from emmy.dialects import cuda as C
from emmy.dialects import kernel as K
from emmy.passes.stages import require_input_stage
from emmy.phase import is_overlapped, is_prepare, mark_overlapped, mark_prepare

MAX_ELEMENTS = 2**31 - 1


def _arg_attr(f: func.FuncOp, i: int, key: str) -> str | None:
    if f.arg_attrs is None:
        return None
    d = f.arg_attrs.data[i]
    if isinstance(d, DictionaryAttr):
        v = d.data.get(key)
        if isinstance(v, StringAttr):
            return v.data
    return None


class _Names:
    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, name: str) -> str:
        base = c_ident(name)
        n, unique = 1, base
        while unique in self.used:
            unique = f"{base}_{n}"
            n += 1
        self.used.add(unique)
        return unique


def _check_size(t: TensorType, what: str) -> None:
    n = prod(t.get_shape())
    if n > MAX_ELEMENTS:
        raise EmmyError(f"convert-kernel-to-cuda: {what} has {n} elements; kernels index with 32-bit ints (at most {MAX_ELEMENTS})")


def _cuda_type(t: Attribute) -> Attribute:
    if isinstance(t, K.PtrType):
        return C.PtrType(t.element_type)
    if isinstance(t, K.TensorMapType):
        return C.TensorMapType(*t.parameters)
    return t


def kernel_op(kf: K.KernelFuncOp) -> C.KernelOp:
    """The cuda.kernel of one kernel.func (its source written by emmy.backend.cxx)."""
    types: list[Attribute] = [_cuda_type(t) for t in kf.arg_types]
    name = kf.sym_name.data
    if not name.isidentifier():
        raise EmmyError(f"convert-kernel-to-cuda: kernel name '{name}' is not a C identifier")
    return C.KernelOp(name, types, kf.grid_dims, kf.block_dims, kf.smem_bytes, emit_kernel(kf, name))


class LowerFunction(RewritePattern):
    def __init__(self, kernels: dict[str, K.KernelFuncOp]):
        self.kernels = kernels
        self.cache: dict[str, C.KernelOp] = {}

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter) -> None:
        fname = op.sym_name.data
        names = _Names()
        # Buffers and kernels share the cuda.module's symbols: an intermediate named after the
        # kernel that writes it (the usual name hint) must not shadow that kernel.
        names.used.update(self.kernels)
        buffers: list[C.BufferOp] = []
        symbol: dict[SSAValue, str] = {}
        ret = op.body.block.last_op
        returned: list[SSAValue] = list(ret.operands) if isinstance(ret, func.ReturnOp) else []
        for i, a in enumerate(op.body.block.args):
            if not isinstance(a.type, TensorType):
                raise EmmyError(f"convert-kernel-to-cuda: @{fname} argument #{i} is not a tensor ({a.type})")
            _check_size(a.type, f"argument #{i} of @{fname}")
            torch_name = _arg_attr(op, i, "emmy.name") or a.name_hint or f"arg{i}"
            role = _arg_attr(op, i, "emmy.role") or "input"
            if role not in ("input", "param"):
                raise EmmyError(f"convert-kernel-to-cuda: @{fname} argument #{i} has emmy.role '{role}' (input or param expected)")
            sym = names.take(torch_name)
            symbol[a] = sym
            buffers.append(C.BufferOp(sym, a.type, role, i, torch_name))
        for i, v in enumerate(returned):
            if v in symbol or not isinstance(v.owner, K.EmptyOp):
                raise EmmyError(
                    f"convert-kernel-to-cuda: @{fname} result #{i} is not a buffer written by a kernel (a function argument or a repeated result); copy it in a kernel first"
                )
        out_pos = {v: i for i, v in reversed(list(enumerate(returned)))}
        launches: list[C.LaunchOp] = []
        prepared: set[str] = set()  # buffers written by prepare-phase launches
        used_kernels: list[str] = []
        for inner in op.body.block.ops:
            if isinstance(inner, K.EmptyOp):
                t = inner.result.type
                _check_size(t, f"a buffer of @{fname}")
                if inner.result in out_pos and inner.zeroed is not None:
                    raise EmmyError(f"convert-kernel-to-cuda: @{fname} result #{out_pos[inner.result]} is a zeroed buffer (counters); results are plain buffers")
                if inner.result in out_pos:
                    sym = names.take(inner.result.name_hint or f"out{out_pos[inner.result]}")
                    buffers.append(C.BufferOp(sym, t, "output", out_pos[inner.result]))
                else:
                    sym = names.take(inner.result.name_hint or "tmp")
                    buffers.append(C.BufferOp(sym, t, "zeroed" if inner.zeroed is not None else "temp"))
                symbol[inner.result] = sym
            elif isinstance(inner, K.LaunchOp):
                kname = inner.callee.root_reference.data
                kf = self.kernels.get(kname)
                if kf is None:
                    raise EmmyError(f"convert-kernel-to-cuda: @{fname} launches an unknown kernel @{kname}")
                args: list[Attribute] = []
                for a in inner.args:
                    if isinstance(a.type, TensorType):
                        args.append(SymbolRefAttr(symbol[a]))
                    elif isinstance(a.owner, arith.ConstantOp):
                        args.append(a.owner.value)
                    else:
                        raise EmmyError(f"convert-kernel-to-cuda: scalar launch arguments must be constants (@{kname})")
                c_launch = C.LaunchOp(kname, args, kf.grid_dims, kf.block_dims, kf.smem_bytes)
                if is_overlapped(inner):
                    mark_overlapped(c_launch)
                if is_prepare(inner):
                    mark_prepare(c_launch)
                    prepared.update(symbol[a] for a in inner.args if isinstance(a.owner, K.EmptyOp))
                launches.append(c_launch)
                if kname not in used_kernels:
                    used_kernels.append(kname)
            elif isinstance(inner, (arith.ConstantOp, func.ReturnOp)):
                continue
            else:
                raise EmmyError(f"convert-kernel-to-cuda: @{fname} holds '{inner.name}'; the kernel stage's host code has only kernel.empty and kernel.launch")
        for b in buffers:
            if b.role.data == "temp" and b.sym_name.data in prepared:
                b.role = StringAttr("prepared")
        kernels = []
        for kname in used_kernels:
            if kname not in self.cache:
                self.cache[kname] = kernel_op(self.kernels[kname])
            kernels.append(self.cache[kname].clone())
        rewriter.replace(op, C.ModuleOp(fname, [*kernels, *buffers, *launches]), [])


class EraseKernelFuncs(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: K.KernelFuncOp, rewriter: PatternRewriter) -> None:
        rewriter.erase(op)


@dataclass(frozen=True)
class ConvertKernelToCudaPass(ModulePass):
    """Write every kernel as CUDA C++ and every function as a cuda.module launch sequence."""

    name = "convert-kernel-to-cuda"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_input_stage(op, self.name)
        kernels = {o.sym_name.data: o for o in op.body.block.ops if isinstance(o, K.KernelFuncOp)}
        PatternRewriteWalker(
            GreedyRewritePatternApplier([LowerFunction(kernels)], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([EraseKernelFuncs()], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)


__all__ = ["ConvertKernelToCudaPass", "kernel_op"]
