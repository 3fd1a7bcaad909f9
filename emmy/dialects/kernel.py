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

The ops live in three modules by job, re-exported here: kernel_types.py (the types, limits and
`element_bytes`), kernel_device.py (the kernel, indices, memory, vectors), kernel_control.py
(loops, branches, calls and lambdas) and kernel_host.py (`kernel.empty`, `kernel.launch`).

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

from xdsl.dialects.builtin import BFloat16Type, VectorType  # noqa: F401 (tests spell K.VectorType)
from xdsl.ir import Dialect

from emmy.dialects.kernel_control import CallOp, ForOp, IfOp, InvokeOp, LambdaOp, YieldOp
from emmy.dialects.kernel_device import (
    BarrierOp,
    BlockIdOp,
    ExtractOp,
    KernelFuncOp,
    LoadOp,
    LocalOp,
    PackOp,
    PtrAddOp,
    ReturnOp,
    SharedOp,
    StoreOp,
    ThreadIdOp,
    enclosing_func,
)
from emmy.dialects.kernel_host import EmptyOp, LaunchOp
from emmy.dialects.kernel_types import (
    DIMS,
    MAX_CLUSTER_BLOCKS,
    MAX_DYNAMIC_SMEM,
    MAX_THREADS_PER_BLOCK,
    MEMORY_SPACES,
    VECTOR_WIDTHS,
    Dim,
    DimAttr,
    FnType,
    PtrType,
    TensorMapType,
    element_bytes,
    is_scalar_type,
)

__all__ = [
    "DIMS",
    "MAX_CLUSTER_BLOCKS",
    "MAX_DYNAMIC_SMEM",
    "MAX_THREADS_PER_BLOCK",
    "MEMORY_SPACES",
    "VECTOR_WIDTHS",
    "BarrierOp",
    "BlockIdOp",
    "CallOp",
    "Dim",
    "DimAttr",
    "EmptyOp",
    "ExtractOp",
    "FnType",
    "ForOp",
    "IfOp",
    "InvokeOp",
    "Kernel",
    "KernelFuncOp",
    "LambdaOp",
    "LaunchOp",
    "LoadOp",
    "LocalOp",
    "PackOp",
    "PtrAddOp",
    "PtrType",
    "ReturnOp",
    "SharedOp",
    "StoreOp",
    "TensorMapType",
    "ThreadIdOp",
    "YieldOp",
    "element_bytes",
    "enclosing_func",
    "is_scalar_type",
]

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
    [PtrType, TensorMapType, FnType, DimAttr],
)
