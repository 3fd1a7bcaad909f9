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
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from emmy.backend.plan import MapView
from emmy.diagnostics import EmmyError

_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i64": "int64", "i32": "int32"}
_SCALAR_CTYPES = {"i32": ctypes.c_int, "i64": ctypes.c_longlong, "f32": ctypes.c_float, "u32": ctypes.c_uint}


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


def cubin_path(source: str, arch: str, cache_dir: Path) -> Path:
    """Where the kernel cache keeps the cubin of (source, arch, device library)."""
    from emmy.backend.nvcc import runtime_digest

    digest = hashlib.sha256((arch + "\0" + runtime_digest() + "\0" + source).encode()).hexdigest()[:24]
    return cache_dir / "kernels" / f"{digest}-{arch}.cubin"


def store_atomically(path: Path, data: bytes) -> None:
    """Write a cache file so that a concurrent reader never sees half of it. Each writer has a
    temporary file of its own: two threads of one process storing the same cubin at once (a
    benchmark's variants building one kernel alike) once shared a name by process id, and the
    second found its file already renamed away."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def cache_lock(path: Path, required: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on the cache file `path` (created with its folder) while the block
    runs: processes of one host that share a kernel cache take turns. Where the file cannot be
    created, an OSError, unless not `required`: the block then runs unlocked."""
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a")
    except OSError:
        if required:
            raise
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def private_name() -> str:
    """A build's own file name in a source's build folder (`emmy.<pid>-<thread>`): two processes
    or threads building the same source at once never write each other's `.cu` or `.cubin`."""
    return f"emmy.{os.getpid()}-{threading.get_ident()}"


def keep_build(built: Path) -> None:
    """After a build: its source kept as the folder's `emmy.cu` (replaced atomically), its own
    output removed (the cache keeps the cubin under its digest). A failed build keeps its own
    files, which its error message names."""
    built.with_suffix(".cu").replace(built.with_name("emmy.cu"))
    built.unlink(missing_ok=True)


def build_cubin(source: str, arch: str, cache_dir: Path) -> bytes:
    """nvcc once per (source, arch, device library); later calls read the cached cubin."""
    from emmy.backend.nvcc import compile_source

    cubin = cubin_path(source, arch, cache_dir)
    if cubin.exists():
        return cubin.read_bytes()
    kdir = cubin.parent
    try:
        kdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EmmyError(f"cannot create the kernel cache '{kdir}': {e.strerror}") from None
    built = Path(compile_source(source, arch, kdir / cubin.stem.rsplit("-", 1)[0], cubin=True, name=private_name()))
    data = built.read_bytes()
    store_atomically(cubin, data)
    keep_build(built)
    return data


def poisoned(shape: tuple[int, ...], dtype):
    """A CUDA tensor that no kernel result can be mistaken for: NaN (floats) or the largest
    value (integers). Outputs and temporaries start so, so that an element a kernel never
    writes shows up in the comparison instead of passing with whatever memory held."""
    import torch

    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    return torch.full(shape, torch.iinfo(dtype).max, dtype=dtype, device="cuda")


@dataclass
class _Launch:
    name: str
    function: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: list  # buffer names (str), (ctype, value) scalars, or (MapView, buffer name) tensor maps
    prepare: bool = False  # run once by bind(), not by every launch()
    config: object = None  # a CUlaunchConfig with programmatic stream serialization (emmy.overlap)


class GpuModule:
    """A compiled function loaded on the GPU: every kernel built and loaded once. `bind` gives it
    tensors (any number of bindings share the loaded kernels, e.g. 28 decoder layers)."""

    def __init__(self, plan, arch: str, cache_dir: Path):
        import torch

        if not torch.cuda.is_available():
            raise EmmyError("no CUDA device found", hint="use '--backend interpret' to run on the CPU")
        torch.cuda.init()
        torch.empty(1, device="cuda")  # make PyTorch's primary context current
        try:  # pycuda shares that context (it must not create its own: "invalid resource handle")
            import pycuda.autoprimaryctx  # noqa: F401
        except ImportError:
            pass
        self.plan = plan
        self.driver = _driver()
        cubin = build_cubin(plan.source, arch, cache_dir)
        import numpy as np

        self._image = np.frombuffer(cubin, dtype=np.uint8).copy()  # kept alive with the module
        self.module = _check(self.driver.cuModuleLoadData(self._image.ctypes.data), "cuModuleLoadData")
        kernels = {k.name: k for k in plan.kernels}
        functions = {}
        for k in plan.kernels:
            functions[k.name] = _check(
                self.driver.cuModuleGetFunction(self.module, k.name.encode()), f"loading kernel {k.name}"
            )
            if k.smem > 48 * 1024:
                attr = self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(self.driver.cuFuncSetAttribute(functions[k.name], attr, k.smem), f"shared memory of {k.name}")
        self.launches: list[_Launch] = []
        for launch in plan.launches:
            kernel = kernels[launch.kernel]
            args = []
            for i, arg in enumerate(launch.args):
                t = kernel.arg_types[i]
                if isinstance(t, MapView):
                    args.append((t, arg))
                elif isinstance(arg, str):
                    args.append(arg)
                else:
                    args.append((_scalar_ctype(t), arg))
            smem = launch.smem
            if smem > 48 * 1024 and smem > kernel.smem:
                attr = self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(self.driver.cuFuncSetAttribute(functions[launch.kernel], attr, smem), "shared memory")
            grid, block = _dim3(launch.grid), _dim3(launch.block)
            config = self._overlap_config(grid, block, smem) if launch.overlap else None
            self.launches.append(
                _Launch(launch.kernel, functions[launch.kernel], grid, block, smem, args, launch.prepare, config)
            )

    def _overlap_config(self, grid, block, smem: int):
        """The cuLaunchKernelEx configuration of an `emmy.overlap` launch: programmatic stream
        serialization, so the kernel may start while the one before it finishes (it waits for
        that one itself, see kernel-overlap-launches). The stream is set at each launch."""
        drv = self.driver
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = smem
        config.attrs = [attr]
        config.numAttrs = 1
        return config

    def bind(self, values: dict[str, object], outputs: dict[str, object] | None = None) -> "Binding":
        """Tensors for every input and parameter (by PyTorch name); outputs, temporaries and
        prepared buffers are allocated here, filled with NaN (see `poisoned`), unless `outputs`
        (by buffer name) supplies them. The
        prepare-phase kernels (parameters folded together, see loop-hoist-params) run here, once."""
        import torch

        tensors = {}
        for buf in self.plan.buffers:
            dtype = getattr(torch, _TORCH_DTYPES[buf.dtype])
            if buf.role in ("input", "param"):
                key = buf.torch_name or buf.name
                if key not in values:
                    raise EmmyError(f"no tensor bound for '{key}'")
                t = values[key]
                if tuple(t.shape) != tuple(buf.shape) or t.dtype != dtype:
                    raise EmmyError(
                        f"'{key}': expected {tuple(buf.shape)} {buf.dtype}, got {tuple(t.shape)} {t.dtype}"
                    )
                tensors[buf.name] = t.contiguous() if t.is_cuda else t.cuda().contiguous()
            elif outputs and buf.name in outputs:
                tensors[buf.name] = outputs[buf.name]
            elif buf.role == "zeroed":  # counters: zero now, and every call leaves them zero
                tensors[buf.name] = torch.zeros(tuple(buf.shape), dtype=dtype, device="cuda")
            else:  # outputs, temporaries, prepared buffers: poisoned until a kernel writes them
                tensors[buf.name] = poisoned(tuple(buf.shape), dtype)
        packed = []
        for launch in self.launches:
            values = []
            for i, arg in enumerate(launch.args):
                if isinstance(arg, str):
                    values.append(ctypes.c_void_p(tensors[arg].data_ptr()))
                elif isinstance(arg[0], MapView):
                    values.append(tensor_map(arg[0], tensors[arg[1]], f"argument #{i} of {launch.name}"))
                else:
                    values.append(arg[0](arg[1]))
            packed.append(KernelParams(values))
        outs = sorted((b for b in self.plan.buffers if b.role == "output"), key=lambda b: b.position or 0)
        binding = Binding(self, tensors, packed, [tensors[b.name] for b in outs])
        if any(launch.prepare for launch in self.launches):
            # prepared buffers: computed from the parameters once, and finished before any
            # forward call, whatever stream it runs on (bind again after changing a parameter)
            binding.run(prepare=True)
            torch.cuda.current_stream().synchronize()
        return binding


@dataclass
class Binding:
    module: GpuModule
    tensors: dict
    packed: list
    outputs: list

    def launch(self, stream=None, overlap: bool = True) -> None:
        """Launch every forward-phase kernel in order on PyTorch's current stream (capturable in
        a CUDA graph). The prepare phase ran when the tensors were bound. With overlap=False
        every kernel waits for the one before it to finish before it starts (the `emmy.overlap`
        launches too: their grid-dependency wait is then a no-op), so a profiler's time of each
        kernel is its own and not partly its predecessor's tail."""
        self.run(prepare=False, stream=stream, overlap=overlap)

    def run(self, prepare: bool, stream=None, overlap: bool = True) -> None:
        """Launch the kernels of one phase in order on `stream` (PyTorch's current one)."""
        import torch

        handle = (stream or torch.cuda.current_stream()).cuda_stream
        drv = self.module.driver
        for launch, params in zip(self.module.launches, self.packed):
            if launch.prepare != prepare:
                continue
            if launch.config is not None and overlap:
                launch.config.hStream = drv.CUstream(handle)
                result = drv.cuLaunchKernelEx(launch.config, launch.function, params.address, 0)
            else:
                result = drv.cuLaunchKernel(
                    launch.function, *launch.grid, *launch.block, launch.smem, handle, params.address, 0
                )
            _check(result, f"launching {launch.name}")


class GpuLayer:
    """One loaded function with one binding (the common case: one layer)."""

    def __init__(self, plan, arch: str, cache_dir: Path):
        self.module = GpuModule(plan, arch, cache_dir)
        self.binding: Binding | None = None

    def bind(self, values: dict[str, object]) -> None:
        self.binding = self.module.bind(values)

    def launch(self, stream=None, overlap: bool = True) -> None:
        assert self.binding is not None, "bind() first"
        self.binding.launch(stream, overlap)

    def outputs(self) -> list[object]:
        assert self.binding is not None, "bind() first"
        return self.binding.outputs


class KernelParams:
    """One launch's parameters as cuLaunchKernel takes them: an array of pointers to the values
    (ctypes objects kept alive here: pointers, scalars, 128-byte tensor maps)."""

    def __init__(self, values: list):
        self.values = values
        self.array = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array) if self.values else 0


_MAP_BYTES = 128  # sizeof(CUtensorMap), aligned to 128 bytes (cuda.h)
_BF16, _SWIZZLE, _L2_256B = 9, {32: 1, 64: 2, 128: 3}, 3  # CUtensorMap* enum values of cuda.h


def tensor_map(view: MapView, tensor, what: str):
    """The CUtensorMap of `view` over `tensor` (a CUDA bf16 tensor), encoded by the driver
    (cuTensorMapEncodeTiled) into a 128-byte aligned ctypes buffer."""
    base = tensor.data_ptr() + 2 * view.offset
    raw = ctypes.create_string_buffer(2 * _MAP_BYTES)
    offset = -ctypes.addressof(raw) % _MAP_BYTES
    buf = (ctypes.c_ubyte * _MAP_BYTES).from_buffer(raw, offset)  # keeps `raw` alive
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    rank = 3 if view.planes > 1 else 2  # (columns, rows[, planes])
    dims = (u64 * 3)(view.cols, view.rows, view.planes)
    strides = (u64 * 2)(2 * view.stride, 2 * view.plane_stride)
    box = (u32 * 3)(view.box_cols, view.box_rows, 1)
    steps = (u32 * 3)(1, 1, 1)
    encode = _libcuda().cuTensorMapEncodeTiled
    encode.restype = ctypes.c_int
    err = encode(
        ctypes.byref(buf), _BF16, rank, ctypes.c_void_p(base), dims, strides, box, steps, 0,
        _SWIZZLE[2 * view.box_cols], _L2_256B, 0,
    )
    if err != 0:
        raise EmmyError(f"CUDA driver error {err} encoding the tensor map of {what} ({view}) at address {base:#x}")
    return buf


def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise EmmyError(f"tensor maps need the CUDA driver library (libcuda.so.1): {e}") from None


def _scalar_ctype(arg_type: str):
    for key, ct in _SCALAR_CTYPES.items():
        if arg_type == key:
            return ct
    raise EmmyError(f"kernel argument type '{arg_type}' cannot be passed from the host")


def _dim3(v) -> tuple[int, int, int]:
    v = tuple(int(x) for x in v)
    return (v + (1, 1, 1))[:3]


def run_on_gpu(options, cache_dir: Path):
    """`emmy run` on the GPU: compile, build, run once on the traced inputs, compare with PyTorch."""
    import torch

    from emmy.backend.plan import launch_plan
    from emmy.driver import compile_model
    from emmy.execute import check

    result = compile_model(options)
    traced = result.traced
    layer = GpuLayer(launch_plan(result.module), options.target, cache_dir)
    values = {k: v.cuda() for k, v in {**traced.inputs, **traced.params}.items()}
    layer.bind(values)
    layer.launch()
    torch.cuda.synchronize()
    outs = [out.float().cpu() for out in layer.outputs()]
    return check(outs, traced)  # PyTorch on the CPU


class GpuModel:
    """A whole compiled model on the GPU (`emmy.driver.ModelCompileResult`): each distinct part
    built and loaded once, every decoder layer bound to its own weights, the layers chained
    through their hidden-state buffers. `launch()` runs it all on PyTorch's current stream."""

    def __init__(self, result, target: str, cache_dir: Path, input_ids=None):
        from emmy.backend.plan import launch_plan

        traced = result.traced
        ids = traced.ids(input_ids)
        modules = {p.name: GpuModule(launch_plan(p.result.module), target, cache_dir) for p in result.parts}
        self.bindings = []

        def bind(part, traced_part, values):  # each part bound once, chained through its output buffer
            params = {k: v.cuda() for k, v in traced_part.params.items()}
            b = modules[part.name].bind({**values, **params})
            self.bindings.append(b)
            return b.outputs[0]

        self.output = result.chain(ids.cuda(), traced.cos.cuda(), traced.sin.cuda(), bind)

    def launch(self, overlap: bool = True) -> None:
        for b in self.bindings:
            b.launch(overlap=overlap)

    def embedding(self):
        """Qwen3-Embedding's pooled embedding (`emmy.frontend.whole_model.pool`)."""
        from emmy.frontend.whole_model import pool

        return pool(self.output)


def run_model_on_gpu(options, cache_dir: Path, input_ids=None):
    """`emmy run MODEL` (no --layer) on the GPU: the pooled, L2-normalized embedding against
    PyTorch's in float32, with PyTorch's own bf16 error (`emmy.execute.model_report`)."""
    import torch

    from emmy.driver import compile_whole_model
    from emmy.execute import model_report

    result = compile_whole_model(options)
    traced = result.traced
    if traced is None:
        return run_on_gpu(options, cache_dir)
    ids = traced.ids(input_ids)
    model = GpuModel(result, options.target, cache_dir, ids)
    model.launch()
    torch.cuda.synchronize()
    emb_out = model.embedding()
    return model_report(traced, emb_out.float().cpu().numpy(), ids.cpu())
