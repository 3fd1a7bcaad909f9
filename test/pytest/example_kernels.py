"""The running example's kernels at the tile stage (decided, not lowered), for the plan, space,
prior and evidence tests: `kernels(tokens, target, pins)` by name, and pin sets of its q/k/v
product (QKV) that reach each schedule feature."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from emmy.dialects.tile import KernelOp
from emmy.driver import CompileOptions, compile_traced, trace

EXAMPLE = str(Path(__file__).resolve().parents[2] / "tools" / "running_example.py") + ":make"
QKV = "rms_norm_qkv_proj"  # the running example's kernel: RMSNorm, then q (2048) and k, v (1024 each)


@cache
def traced(tokens: int):
    return trace(CompileOptions(model=EXAMPLE, layer=None, tokens=tokens))


def kernels(tokens: int = 300, target: str = "sm_90a", pins: tuple[str, ...] = ()) -> dict[str, KernelOp]:
    options = CompileOptions(model=EXAMPLE, layer=None, tokens=tokens, target=target, pins=pins, stop_after="tile")
    module = compile_traced(traced(tokens), options).module
    return {k.kernel_name: k for k in module.walk() if isinstance(k, KernelOp)}


PIN_SETS = [
    (),
    ("fusion=split",),
    ("split_k=2", "combine=kernel"),
    ("split_k=2", "combine=last_block"),
    ("split_k=2", "combine=last_block", "siblings=apart"),
    ("workers=wgmma_ws", "schedule=persistent", "fusion=split"),
    ("workers=wgmma_ws", "schedule=stream_k", "fusion=split"),
    ("workers=wgmma_ws", "copy=tma", "fusion=split", "siblings=apart"),
    ("workers=mma_sync", "warps=4", "block_m=64", "block_n=64", "stages=3"),
]
