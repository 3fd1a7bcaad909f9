"""GPU targets: the hardware table every schedule decision reads.

A `Target` describes one CUDA architecture (`sm_80`, `sm_86`, `sm_89`, `sm_90`, `sm_90a`) through a
representative card: SM count, shared memory and register limits, memory and L2 bandwidth,
tensor-core and FMA rates, L2 size (the prior's cost model, `emmy.prior`, is built on them), and
the features passes are gated on:

- `mma_sync`: warp-level `mma.sync` tensor-core instructions (from sm_80),
- `cp_async`: asynchronous global -> shared copies (from sm_80),
- `tma`: the tensor memory accelerator (sm_90, sm_90a),
- `pdl`: programmatic dependent launch, a kernel starting while the one before it finishes
  (sm_90, sm_90a),
- `wgmma`: warpgroup matrix multiply (sm_90a only; plain sm_90 code cannot use it).

    >>> get_target("sm_90a").sms
    132
    >>> get_target("sm_70")
    Traceback (most recent call last):
    emmy.diagnostics.EmmyError: unknown target 'sm_70'; valid targets: sm_80, sm_86, sm_89, sm_90, sm_90a

Numbers are per card (bandwidth and FLOP rates for the representative card named in `card`).
The figures for sm_90/sm_90a are H200 measurements (copy bandwidth, dense bf16 matrix product).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

from emmy.diagnostics import EmmyError

KB = 1024
MB = 1024 * 1024

DEFAULT_TARGET = "sm_90"


@dataclass(frozen=True)
class Target:
    """One GPU architecture as the compiler sees it (all sizes in bytes, rates per second)."""

    name: str  # "sm_90a"
    card: str  # representative card the rates describe
    sm: int  # compute capability as an integer, 90 for sm_90/sm_90a
    sms: int  # streaming multiprocessors
    smem_per_sm: int  # shared memory per SM
    smem_per_block: int  # largest dynamic shared memory one block may opt into
    regs_per_sm: int  # 32-bit registers per SM
    regs_per_thread: int  # most registers one thread may use
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    warp_size: int
    l2_bytes: int
    dram_bandwidth: float  # bytes/s (measured copy bandwidth where known)
    l2_bandwidth: float  # bytes/s, L2 hits to the SMs (published microbenchmark figures; the prior's default)
    tensor_flops: float  # dense bf16 tensor-core FLOP/s, fp32 accumulate
    fp32_flops: float  # non-tensor fp32 FLOP/s (FMA = 2)
    features: frozenset[str]

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    def blocks_per_sm(self, smem: int, registers: int, threads: int) -> int:
        """Blocks of `threads` threads with `smem` bytes of shared memory and `registers` per
        thread that fit on one SM at once (at least 1: a launch the plan allows runs)."""
        limits = [self.max_blocks_per_sm, self.max_threads_per_sm // max(1, threads)]
        if smem:
            limits.append(self.smem_per_sm // smem)
        if registers:
            limits.append(self.regs_per_sm // (max(1, registers) * max(1, threads)))
        return max(1, min(limits))


_AMPERE = frozenset({"mma_sync", "cp_async"})
_HOPPER = _AMPERE | {"tma", "pdl"}

# sm_90/sm_90a: measured on an H200 here (PyTorch): 132 SMs, 60 MB L2, ~4.3 TB/s device-to-device
# copy, ~770-790 TFLOP/s dense bf16 (wgmma). Code for plain sm_90 has only mma.sync, roughly half
# that rate. An H100 has the same limits with 50 MB of L2 and 3.35 TB/s.
_SM90 = Target(
    name="sm_90", card="H200 SXM (sm_90 code: no wgmma)", sm=90, sms=132,
    smem_per_sm=228 * KB, smem_per_block=227 * KB,
    regs_per_sm=65536, regs_per_thread=255,
    max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32, warp_size=32,
    l2_bytes=60 * MB, dram_bandwidth=4.3e12, l2_bandwidth=10e12, tensor_flops=400e12, fp32_flops=67e12,
    features=_HOPPER,
)
# The same card compiled for sm_90a: the architecture-specific instructions (wgmma) too.
_SM90A = replace(_SM90, name="sm_90a", card="H200 SXM", tensor_flops=790e12, features=_HOPPER | {"wgmma"})

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            name="sm_80", card="A100-SXM4-80GB", sm=80, sms=108,
            smem_per_sm=164 * KB, smem_per_block=163 * KB,
            regs_per_sm=65536, regs_per_thread=255,
            max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=32, warp_size=32,
            l2_bytes=40 * MB, dram_bandwidth=1.7e12, l2_bandwidth=5e12, tensor_flops=280e12, fp32_flops=19.5e12,
            features=_AMPERE,
        ),
        Target(
            name="sm_86", card="RTX 3090", sm=86, sms=82,
            smem_per_sm=100 * KB, smem_per_block=99 * KB,
            regs_per_sm=65536, regs_per_thread=255,
            max_threads_per_block=1024, max_threads_per_sm=1536, max_blocks_per_sm=16, warp_size=32,
            l2_bytes=6 * MB, dram_bandwidth=0.85e12, l2_bandwidth=2e12, tensor_flops=71e12, fp32_flops=35.6e12,
            features=_AMPERE,
        ),
        Target(
            name="sm_89", card="RTX 4090", sm=89, sms=128,
            smem_per_sm=100 * KB, smem_per_block=99 * KB,
            regs_per_sm=65536, regs_per_thread=255,
            max_threads_per_block=1024, max_threads_per_sm=1536, max_blocks_per_sm=24, warp_size=32,
            l2_bytes=72 * MB, dram_bandwidth=0.9e12, l2_bandwidth=5e12, tensor_flops=165e12, fp32_flops=82.6e12,
            features=_AMPERE,
        ),
        _SM90,
        _SM90A,
    )
}


def target_names() -> list[str]:
    return list(TARGETS)


def get_target(name: str) -> Target:
    """The target called `name`; EmmyError naming the valid targets otherwise."""
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise EmmyError(
            f"unknown target '{name}'; valid targets: {', '.join(TARGETS)}"
        ) from None


def module_target(module: Operation) -> Target:
    """The target named by the module attribute `emmy.target` (DEFAULT_TARGET when absent)."""
    attr = module.attributes.get("emmy.target")
    if attr is None:
        return TARGETS[DEFAULT_TARGET]
    if not isinstance(attr, StringAttr):
        raise EmmyError(
            f"module attribute emmy.target must be a string such as \"sm_90\", got {attr}"
        )
    try:
        return get_target(attr.data)
    except EmmyError as e:
        raise EmmyError(f"module attribute emmy.target: {e}") from None
