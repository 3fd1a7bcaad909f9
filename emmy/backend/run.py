"""Running a compiled layer on a CUDA GPU.

The generated `.cu` text is built once with nvcc (cached on disk by a hash of the source and the
architecture), loaded through the CUDA driver into PyTorch's context, and each kernel is launched
on PyTorch's current stream, so a whole layer can be captured in a CUDA graph and replayed.
Buffers are PyTorch CUDA tensors: inputs and weights as given, intermediates and outputs
allocated once per binding.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from pathlib import Path

from emmy.diagnostics import EmmyError

_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i64": "int64", "i32": "int32"}
_SCALAR_CTYPES = {"i32": ctypes.c_int, "i64": ctypes.c_longlong, "f32": ctypes.c_float, "index": ctypes.c_longlong}


def _driver():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError:
            raise EmmyError(
                "running on the GPU needs cuda-python's driver bindings (pip install cuda-python)"
            ) from None
    return driver


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise EmmyError(f"CUDA driver error in {what}: {err}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def build_cubin(source: str, arch: str, cache_dir: Path, kernel_names: list[str]) -> bytes:
    """nvcc once per (source, arch); later calls read the cached cubin."""
    from emmy.backend.nvcc import compile_source

    digest = hashlib.sha256((arch + "\0" + source).encode()).hexdigest()[:24]
    kdir = cache_dir / "kernels"
    cubin = kdir / f"{digest}-{arch}.cubin"
    if cubin.exists():
        return cubin.read_bytes()
    try:
        kdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EmmyError(f"cannot create the kernel cache '{kdir}': {e.strerror}") from None
    built = Path(compile_source(source, arch, kdir / digest, cubin=True))
    data = built.read_bytes()
    tmp = cubin.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(cubin)  # atomic: a concurrent reader never sees half a file
    return data


@dataclass
class _Launch:
    name: str
    function: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: list  # buffer names or (ctype, value)


class GpuLayer:
    """A compiled layer loaded on the GPU. `bind` tensors, then `launch()` (graph-capturable)."""

    def __init__(self, plan, arch: str, cache_dir: Path):
        import torch

        if not torch.cuda.is_available():
            raise EmmyError("no CUDA device found", hint="use '--backend interpret' to run on the CPU")
        torch.cuda.init()
        torch.empty(1, device="cuda")  # make PyTorch's primary context current
        self.plan = plan
        self.driver = _driver()
        names = [k.name for k in plan.kernels]
        cubin = build_cubin(plan.source, arch, cache_dir, names)
        (self.module,) = (_check(self.driver.cuModuleLoadData(cubin), "cuModuleLoadData"),)
        functions = {}
        for k in plan.kernels:
            fn = _check(self.driver.cuModuleGetFunction(self.module, k.name.encode()), f"loading {k.name}")
            functions[k.name] = fn
        self.launches: list[_Launch] = []
        for launch in plan.launches:
            fn = functions[launch.kernel]
            if launch.smem > 48 * 1024:
                attr = self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(self.driver.cuFuncSetAttribute(fn, attr, launch.smem), f"smem limit of {launch.kernel}")
            self.launches.append(
                _Launch(launch.kernel, fn, _dim3(launch.grid), _dim3(launch.block), launch.smem, list(launch.args))
            )
        self.tensors: dict[str, object] = {}
        self._packed: list[tuple] = []

    def bind(self, values: dict[str, object]) -> None:
        """Give every input and parameter buffer its tensor; allocate outputs and temporaries."""
        import torch

        tensors = {}
        for buf in self.plan.buffers:
            dtype = getattr(torch, _TORCH_DTYPES[buf.dtype])
            if buf.role in ("input", "param"):
                if buf.name not in values:
                    raise EmmyError(f"no tensor bound for buffer '{buf.name}'")
                t = values[buf.name]
                if tuple(t.shape) != tuple(buf.shape) or t.dtype != dtype:
                    raise EmmyError(
                        f"buffer '{buf.name}': expected {tuple(buf.shape)} {buf.dtype}, got "
                        f"{tuple(t.shape)} {t.dtype}"
                    )
                tensors[buf.name] = t.contiguous().cuda()
            else:
                tensors[buf.name] = torch.empty(tuple(buf.shape), dtype=dtype, device="cuda")
        self.tensors = tensors
        self._packed = []
        for launch in self.launches:
            values_, types_ = [], []
            for arg in launch.args:
                if isinstance(arg, str):
                    values_.append(tensors[arg].data_ptr())
                    types_.append(ctypes.c_void_p)
                else:
                    kind, value = arg
                    values_.append(value)
                    types_.append(_SCALAR_CTYPES[kind])
            self._packed.append((tuple(values_), tuple(types_)))

    def launch(self, stream=None) -> None:
        import torch

        handle = (stream or torch.cuda.current_stream()).cuda_stream
        for launch, params in zip(self.launches, self._packed):
            _check(
                self.driver.cuLaunchKernel(
                    launch.function, *launch.grid, *launch.block, launch.smem, handle, params, 0
                ),
                f"launching {launch.name}",
            )

    def outputs(self) -> list[object]:
        return [self.tensors[b.name] for b in self.plan.buffers if b.role == "output"]


def _dim3(v) -> tuple[int, int, int]:
    v = tuple(int(x) for x in v)
    return (v + (1, 1, 1))[:3]


def run_on_gpu(options, cache_dir: Path):
    """`emmy run` on the GPU: compile, build, run once on the traced inputs, compare with PyTorch."""
    import torch

    from emmy.backend.plan import launch_plan
    from emmy.driver import compile_model
    from emmy.execute import RunReport
    from emmy.interp.numeric import rel_error

    result = compile_model(options)
    traced = result.traced
    layer = GpuLayer(launch_plan(result.module), options.target, cache_dir)
    values = {k: v.cuda() for k, v in {**traced.inputs, **traced.params}.items()}
    layer.bind(values)
    layer.launch()
    torch.cuda.synchronize()
    (out,) = layer.outputs()
    ref = traced.reference({k: v for k, v in values.items() if k in traced.inputs})
    out_np = out.float().cpu().numpy()
    ref_np = ref.float().cpu().numpy().reshape(out_np.shape)
    return RunReport(output=out_np, reference=ref_np, rel_error=rel_error(out_np, ref_np))
