"""Read a cuda-stage module into a launch plan, and write the whole `.cu` text.

    plan = launch_plan(module)          # module: builtin.module holding cuda.module ops
    plan.source                         # the complete .cu: runtime include, kernels, host entry
    plan.buffers                        # every tensor: name, shape, dtype, role, position
    plan.launches                       # in order: kernel, grid, block, smem, arguments
    cuda_source(module)                 # the .cu text of every cuda.module of the module

The host entry point of each function `f` is

    extern "C" void emmy_launch_f(<one pointer per buffer, in plan.buffers order>, cudaStream_t stream);

It raises the dynamic shared-memory limit of kernels that need more than 48 KB (once) and
launches every forward-phase kernel in order on `stream` (those marked `emmy.overlap` with
cudaLaunchKernelEx and programmatic stream serialization, so they may start while the kernel
before them finishes), encoding the tensor maps of kernels
that copy with the tensor memory accelerator from the buffers' addresses at each call. When the function has prepare-phase
launches (`emmy.phase`: work on parameters alone, such as a norm weight folded into a weight
matrix), a second entry point with the same parameters runs them:

    extern "C" void emmy_prepare_f(<the same pointers>, cudaStream_t stream);

once after the parameters are in place and before the first `emmy_launch_f`; `prepared` buffers
must then be kept (they are read by every call). The caller allocates every buffer (inputs,
params, outputs, temps, prepared and zeroed, `Buffer.nbytes` each; `zeroed` ones filled with
zeros once, at allocation: each call leaves them zero again) and checks `cudaGetLastError()`
afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
)
from xdsl.ir import Attribute

from emmy.diagnostics import EmmyError
from emmy.dialects import cuda as C
from emmy.dtypes import c_type, dtype_bytes, element_dtype
from emmy.phase import is_overlapped, is_prepare

RUNTIME_INCLUDE = '#include "emmy.cuh"'
DEFAULT_SMEM_LIMIT = 48 * 1024

@dataclass(frozen=True)
class Buffer:
    name: str  # C identifier (the host entry's parameter name)
    shape: tuple[int, ...]
    dtype: str  # "bf16", "f32", ...
    role: str  # input | param | output | temp | prepared | zeroed
    position: int | None = None  # function argument (input/param) or result (output) number
    torch_name: str | None = None  # PyTorch name of inputs and params

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class MapView:
    """A tensor map parameter: the view of its buffer (elements `offset + r * stride + c`,
    r < rows, c < cols, in `planes` planes `plane_stride` elements apart) and the box one copy
    moves (emmy/dialects/tensor_map.py). The launch's argument names the buffer; the host encodes
    the map from the buffer's address."""

    rows: int
    cols: int
    stride: int
    offset: int
    box_rows: int
    box_cols: int
    planes: int = 1
    plane_stride: int = 0

    def __str__(self) -> str:
        planes = f"planes {self.planes} x {self.plane_stride}, " if self.planes > 1 else ""
        return (
            f"tensor_map<rows {self.rows}, cols {self.cols}, stride {self.stride}, offset {self.offset}, "
            f"{planes}box {self.box_rows} x {self.box_cols}>"
        )


@dataclass(frozen=True)
class Kernel:
    name: str
    arg_types: tuple[str | MapView, ...]  # "ptr<bf16>", "i32", "f32", ..., or a tensor map
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    source: str


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: tuple[str | int | float, ...]  # buffer names, or scalar values
    prepare: bool = False  # runs once when the parameters are bound (emmy.phase = "prepare")
    overlap: bool = False  # may start while the launch before it finishes (emmy.overlap)


@dataclass
class LaunchPlan:
    name: str  # the model function
    entry: str  # host entry point: emmy_launch_<name>
    target: str | None
    kernels: list[Kernel] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    source: str = ""

    @property
    def prepare_entry(self) -> str | None:
        """The host entry point of the prepare launches, None when there are none."""
        return f"emmy_prepare_{self.name}" if self.prepare_launches else None

    @property
    def prepare_launches(self) -> list[Launch]:
        return [la for la in self.launches if la.prepare]

    @property
    def forward_launches(self) -> list[Launch]:
        return [la for la in self.launches if not la.prepare]

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def by_role(self, role: str) -> list[Buffer]:
        return sorted((b for b in self.buffers if b.role == role), key=lambda b: b.position or 0)


def _arg_type(t: Attribute) -> str | MapView:
    if isinstance(t, C.TensorMapType):
        return MapView(*(p.data for p in t.parameters[1:]))
    if isinstance(t, C.PtrType):
        return f"ptr<{element_dtype(t.element_type)}>"
    return element_dtype(t)


def _scalar(a: Attribute) -> int | float:
    if isinstance(a, IntegerAttr):
        return a.value.data
    if isinstance(a, FloatAttr):
        return a.value.data
    raise EmmyError(f"plan: unsupported launch argument {a}")


def _plan_of(cm: C.ModuleOp, target: str | None) -> LaunchPlan:
    name = cm.sym_name.data
    plan = LaunchPlan(name=name, entry=f"emmy_launch_{name}", target=target)
    for op in cm.body.block.ops:
        if isinstance(op, C.KernelOp):
            plan.kernels.append(
                Kernel(
                    op.sym_name.data,
                    tuple(_arg_type(t) for t in op.arg_types.data),
                    tuple(op.grid.get_values()),  # type: ignore[arg-type]
                    tuple(op.block.get_values()),  # type: ignore[arg-type]
                    op.smem.value.data,
                    op.source.data,
                )
            )
        elif isinstance(op, C.BufferOp):
            plan.buffers.append(
                Buffer(
                    op.sym_name.data,
                    tuple(op.type.get_shape()),
                    element_dtype(op.type.element_type),
                    op.role.data,
                    op.position.value.data if op.position is not None else None,
                    op.torch_name.data if op.torch_name is not None else None,
                )
            )
        elif isinstance(op, C.LaunchOp):
            args = tuple(
                a.root_reference.data if isinstance(a, SymbolRefAttr) else _scalar(a) for a in op.args.data
            )
            plan.launches.append(
                Launch(
                    op.kernel.root_reference.data,
                    tuple(op.grid.get_values()),  # type: ignore[arg-type]
                    tuple(op.block.get_values()),  # type: ignore[arg-type]
                    op.smem.value.data,
                    args,
                    is_prepare(op),
                    is_overlapped(op),
                )
            )
    plan.source = _source([plan])
    return plan


def launch_plans(module: ModuleOp) -> list[LaunchPlan]:
    """One plan per cuda.module of the module, in order."""
    t = module.attributes.get("emmy.target")
    target = t.data if isinstance(t, StringAttr) else None
    plans = [_plan_of(op, target) for op in module.body.block.ops if isinstance(op, C.ModuleOp)]
    if not plans:
        raise EmmyError("launch_plan: the module holds no cuda.module (run the pipeline to the cuda stage)")
    return plans


def launch_plan(module: ModuleOp, name: str | None = None) -> LaunchPlan:
    """The plan of the module's function `name` (the only one when `name` is None)."""
    plans = launch_plans(module)
    if name is None:
        if len(plans) > 1:
            raise EmmyError(
                f"launch_plan: the module has {len(plans)} functions ({', '.join(p.name for p in plans)}); name one"
            )
        return plans[0]
    for p in plans:
        if p.name == name:
            return p
    raise EmmyError(f"launch_plan: no function '{name}'; functions: {', '.join(p.name for p in plans)}")


def cuda_source(module: ModuleOp) -> str:
    """The complete .cu text of every function of a cuda-stage module."""
    return _source(launch_plans(module))


def _host_value(plan: LaunchPlan, kernel: Kernel, i: int, arg: str | int | float) -> str:
    t = kernel.arg_types[i]
    if isinstance(t, MapView):
        if not isinstance(arg, str):
            raise EmmyError(f"plan: {kernel.name} argument #{i} must be a buffer")
        b = plan.buffer(arg)
        return (
            f"emmy::tensor_map_2d(({c_type(b.dtype)}*){b.name} + {t.offset}, {t.rows}, {t.cols}, {t.stride}, "
            f"{t.box_rows}, {t.box_cols}" + (f", {t.planes}, {t.plane_stride})" if t.planes > 1 else ")")
        )
    if t.startswith("ptr<"):
        if not isinstance(arg, str):
            raise EmmyError(f"plan: {kernel.name} argument #{i} must be a buffer")
        b = plan.buffer(arg)
        return f"({c_type(b.dtype)}*){b.name}"
    if t in ("f32", "f64", "bf16", "f16"):
        v = float(arg)
        lit = repr(v) if t == "f64" else f"{v:.9g}f"
        if t == "bf16":
            return f"__float2bfloat16_rn({lit})"
        if t == "f16":
            return f"__float2half_rn({lit})"
        return lit
    return f"({c_type(t)}){int(arg)}"


def _host_function(plan: LaunchPlan, entry: str, launches: list[Launch]) -> str:
    kernels = {k.name: k for k in plan.kernels if any(la.kernel == k.name for la in launches)}
    params = []
    for b in plan.buffers:
        const = "const " if b.role in ("input", "param") else ""
        params.append(f"{const}{c_type(b.dtype)}* {b.name}")
    params.append("cudaStream_t stream")
    lines = [f'extern "C" void {entry}({", ".join(params)}) {{']
    big = [k for k in kernels.values() if k.smem > DEFAULT_SMEM_LIMIT]
    if big:
        lines.append("  static bool emmy_smem_ready = false;")
        lines.append("  if (!emmy_smem_ready) {")
        for k in big:
            lines.append(f"    cudaFuncSetAttribute({k.name}, cudaFuncAttributeMaxDynamicSharedMemorySize, {k.smem});")
        lines.append("    emmy_smem_ready = true;")
        lines.append("  }")
    if any(la.overlap for la in launches):
        lines.append("  cudaLaunchAttribute emmy_overlap[1];")
        lines.append("  emmy_overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;")
        lines.append("  emmy_overlap[0].val.programmaticStreamSerializationAllowed = 1;")
    for launch in launches:
        k = kernels[launch.kernel]
        args = ", ".join(_host_value(plan, k, i, a) for i, a in enumerate(launch.args))
        g, b = launch.grid, launch.block
        if launch.overlap:
            lines += [
                "  {",
                f"    cudaLaunchConfig_t config = {{dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}), {launch.smem}, stream, emmy_overlap, 1}};",
                f"    cudaLaunchKernelEx(&config, {k.name}, {args});",
                "  }",
            ]
            continue
        lines.append(
            f"  {k.name}<<<dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}), {launch.smem}, stream>>>({args});"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _source(plans: list[LaunchPlan]) -> str:
    parts = [
        "// Generated by Emmy. Compile with: nvcc -std=c++17 -O3 -I <emmy/backend/runtime> ...",
        RUNTIME_INCLUDE,
        "#include <cuda_runtime.h>",
        "",
    ]
    seen: set[str] = set()
    for p in plans:
        for k in p.kernels:
            if k.name in seen:
                continue
            seen.add(k.name)
            parts.append(k.source)
    for p in plans:
        if p.prepare_entry is not None:
            parts.append(_host_function(p, p.prepare_entry, p.prepare_launches))
        parts.append(_host_function(p, p.entry, p.forward_launches))
    return "\n".join(parts)


__all__ = ["Buffer", "Kernel", "Launch", "LaunchPlan", "MapView", "cuda_source", "launch_plan", "launch_plans"]
