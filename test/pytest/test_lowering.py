"""Kernel builders (emmy/lowering), convert-tile-to-kernel, convert-kernel-to-cuda and the launch
plan, on hand-written tile IR (no GPU, no nvcc: see test_nvcc.py for compiling the output)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xdsl.dialects import arith
from xdsl.dialects.builtin import VectorType, bf16, f32

import loop_examples as L
from emmy.backend.plan import cuda_source, launch_plan
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.ir_io import parse_module, parse_pipeline, print_module, run_passes

ROOT = Path(__file__).resolve().parents[2]
LOWER = "convert-tile-to-kernel,convert-kernel-to-cuda"


# ---------------------------------------------------------------------------------------------
# Hand-written tile IR
# ---------------------------------------------------------------------------------------------


def _knobs(values: dict) -> str:
    domains = {
        "block_m": "[16, 32, 64, 128, 192, 256]", "block_n": "[16, 32, 64, 96, 112, 128, 160, 192, 256]",
        "block_k": "[16, 32, 64, 128]", "split_k": "[1, 2, 3, 4, 8, 16]", "stages": "[1, 2, 3, 4, 5, 6, 8, 12, 16]",
        "workers": '["thread", "mma_sync", "wgmma", "wgmma_ws"]', "warps": "[1, 2, 4, 8, 12, 16]",
        "vector": "[1, 2, 4, 8]", "fusion": '["fused", "split"]', "threads": "[32, 64, 128, 256, 512, 1024]",
        "rows_per_block": "[1, 2, 4, 8, 16]", "items": "[1, 2, 4, 8]", "schedule": '["grid", "persistent", "stream_k"]',
        "copy": '["cp_async", "tma"]', "cluster": "[1, 2]", "epilogue": '["together", "staggered", "pingpong"]',
        "combine": '["kernel", "last_block"]', "group_m": "[1, 2, 4, 8, 16, 32]",
        "split_tail": "[1, 2, 3, 4, 8]", "slices": '["rows", "cols"]',
    }
    parts = []
    for k, v in values.items():
        val = f'"{v}"' if isinstance(v, str) else str(v)
        parts.append(f'{k} = #tile.knob<"{k}", {domains[k]} = {val}, "pinned", "test">')
    return "{" + ", ".join(parts) + "}"


def rmsnorm_matmul(M=64, N=64, K=128, target="sm_90a", name="rms_norm_qkv_proj", factored=False, g_role="param", **knobs) -> str:
    """RMSNorm (HF rounding points) fused into x @ w^T: a prologue row reduction, an A side
    computed from x, the row statistic and the norm weight, B a plain weight load. With
    `factored`, loop-fuse's form instead: A = g * x in f32 and the row scale rstd in the
    epilogue."""
    k = dict(block_m=64, block_n=64, block_k=64, split_k=1, stages=2, workers="mma_sync", warps=4, vector=8, fusion="fused")
    k.update(knobs)
    if factored:
        a_side = """%gf = arith.extf %g : bf16 to f32
        %a2f = arith.extf %a2 : bf16 to f32
        %hf = arith.mulf %gf, %a2f : f32"""
        out = """%y = arith.mulf %acc, %r : f32
      %o = arith.truncf %y : f32 to bf16"""
    else:
        a_side = """%a2f = arith.extf %a2 : bf16 to f32
        %xr = arith.mulf %a2f, %r : f32
        %xrb = arith.truncf %xr : f32 to bf16
        %h = arith.mulf %g, %xrb : bf16
        %hf = arith.extf %h : bf16 to f32"""
        out = "%o = arith.truncf %acc : f32 to bf16"
    return f"""builtin.module attributes {{emmy.target = "{target}"}} {{
  func.func @f(%x: tensor<{M}x{K}xbf16> {{emmy.name = "x", emmy.role = "input"}}, %nw: tensor<{K}xbf16> {{emmy.name = "norm.weight", emmy.role = "{g_role}"}}, %w: tensor<{N}x{K}xbf16> {{emmy.name = "proj.weight", emmy.role = "param"}}) -> tensor<{M}x{N}xbf16> {{
    %out = tile.kernel @{name} kind "contraction" axes [m = {M}, n = {N}, k = {K}] knobs {_knobs(k)}
        ins(%x, %nw, %w : tensor<{M}x{K}xbf16>, tensor<{K}xbf16>, tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> attributes {{emmy.fusion = "fused"}} {{
    ^bb0(%xa: tensor<{M}x{K}xbf16>, %nwa: tensor<{K}xbf16>, %wa: tensor<{N}x{K}xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %ss = loop.reduce sum ["k"] : f32 {{
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<{M}x{K}xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %sq = arith.mulf %af, %af : f32
        loop.yield %sq : f32
      }}
      %inv = arith.constant {1.0 / K:e} : f32
      %eps = arith.constant 1.0e-06 : f32
      %mean = arith.mulf %ss, %inv : f32
      %v = arith.addf %mean, %eps : f32
      %r = math.rsqrt %v : f32
      %acc = loop.reduce sum ["k"] : f32 {{
        %k2 = loop.axis "k" : index
        %a2 = loop.load %xa[%m, %k2] : tensor<{M}x{K}xbf16> -> bf16
        %g = loop.load %nwa[%k2] : tensor<{K}xbf16> -> bf16
        %b = loop.load %wa[%n, %k2] : tensor<{N}x{K}xbf16> -> bf16
        {a_side}
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %hf, %bf : f32
        loop.yield %p : f32
      }}
      {out}
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }}
    func.return %out : tensor<{M}x{N}xbf16>
  }}
}}
"""


def gate_up(M=48, N=96, K=128, target="sm_90a", **knobs) -> str:
    """SiLU(x @ wg^T) * (x @ wu^T) with gate and up rows of one concatenated weight: a dual
    contraction sharing A, B rows n and n + N, the epilogue combining both."""
    k = dict(block_m=64, block_n=32, block_k=32, split_k=1, stages=3, workers="mma_sync", warps=4, vector=8)
    k.update(knobs)
    return f"""builtin.module attributes {{emmy.target = "{target}"}} {{
  func.func @f(%x: tensor<{M}x{K}xbf16> {{emmy.name = "x", emmy.role = "input"}}, %w: tensor<{2 * N}x{K}xbf16> {{emmy.name = "gate_up.weight", emmy.role = "param"}}) -> tensor<{M}x{N}xbf16> {{
    %out = tile.kernel @gate_up_silu kind "contraction" axes [m = {M}, n = {N}, k = {K}] knobs {_knobs(k)}
        ins(%x, %w : tensor<{M}x{K}xbf16>, tensor<{2 * N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
    ^bb0(%xa: tensor<{M}x{K}xbf16>, %wa: tensor<{2 * N}x{K}xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %gate = loop.reduce sum ["k"] : f32 {{
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<{M}x{K}xbf16> -> bf16
        %b = loop.load %wa[%n, %k] : tensor<{2 * N}x{K}xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %af, %bf : f32
        loop.yield %p : f32
      }}
      %up = loop.reduce sum ["k"] : f32 {{
        %k2 = loop.axis "k" : index
        %cN = arith.constant {N} : index
        %n2 = arith.addi %n, %cN : index
        %a2 = loop.load %xa[%m, %k2] : tensor<{M}x{K}xbf16> -> bf16
        %b2 = loop.load %wa[%n2, %k2] : tensor<{2 * N}x{K}xbf16> -> bf16
        %af2 = arith.extf %a2 : bf16 to f32
        %bf2 = arith.extf %b2 : bf16 to f32
        %p2 = arith.mulf %af2, %bf2 : f32
        loop.yield %p2 : f32
      }}
      %ng = arith.negf %gate : f32
      %e = math.exp %ng : f32
      %one = arith.constant 1.0 : f32
      %d = arith.addf %e, %one : f32
      %s = arith.divf %gate, %d : f32
      %y = arith.mulf %s, %up : f32
      %o = arith.truncf %y : f32 to bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }}
    func.return %out : tensor<{M}x{N}xbf16>
  }}
}}
"""


def heads_matmul_residual(S=40, H=4, D=64, N=72, target="sm_90", f32_add=False, **knobs) -> str:
    """o_proj style: A read from a [1, H, S, D] tensor with k = h * D + d (div/rem by D), plus a
    residual add in the epilogue: to the product rounded to bf16 (as PyTorch's bf16 linear then
    add), or with `f32_add` to the f32 accumulator, rounded after."""
    K = H * D
    if f32_add:
        add = """%rf = arith.extf %rv : bf16 to f32
      %yf = arith.addf %acc, %rf : f32
      %y = arith.truncf %yf : f32 to bf16"""
    else:
        add = """%t = arith.truncf %acc : f32 to bf16
      %y = arith.addf %rv, %t : bf16"""
    k = dict(block_m=32, block_n=32, block_k=32, split_k=1, stages=2, workers="mma_sync", warps=2, vector=8)
    k.update(knobs)
    return f"""builtin.module attributes {{emmy.target = "{target}"}} {{
  func.func @f(%res: tensor<1x{S}x{N}xbf16> {{emmy.name = "residual", emmy.role = "input"}}, %w: tensor<{N}x{K}xbf16> {{emmy.name = "o.weight", emmy.role = "param"}}, %attn: tensor<1x{H}x{S}x{D}xbf16> {{emmy.name = "attn", emmy.role = "input"}}) -> tensor<1x{S}x{N}xbf16> {{
    %out = tile.kernel @o_proj_residual kind "contraction" axes [m = {S}, n = {N}, k = {K}] knobs {_knobs(k)}
        ins(%res, %w, %attn : tensor<1x{S}x{N}xbf16>, tensor<{N}x{K}xbf16>, tensor<1x{H}x{S}x{D}xbf16>) -> tensor<1x{S}x{N}xbf16> {{
    ^bb0(%r0: tensor<1x{S}x{N}xbf16>, %w0: tensor<{N}x{K}xbf16>, %a0: tensor<1x{H}x{S}x{D}xbf16>):
      %c0 = arith.constant 0 : index
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %rv = loop.load %r0[%c0, %m, %n] : tensor<1x{S}x{N}xbf16> -> bf16
      %cD = arith.constant {D} : index
      %acc = loop.reduce sum ["k"] : f32 {{
        %k = loop.axis "k" : index
        %h = arith.divui %k, %cD : index
        %d = arith.remui %k, %cD : index
        %a = loop.load %a0[%c0, %h, %m, %d] : tensor<1x{H}x{S}x{D}xbf16> -> bf16
        %b = loop.load %w0[%n, %k] : tensor<{N}x{K}xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %af, %bf : f32
        loop.yield %p : f32
      }}
      {add}
      loop.store %y, 0 [%c0, %m, %n] : bf16
      loop.yield
    }}
    func.return %out : tensor<1x{S}x{N}xbf16>
  }}
}}
"""


def silu_mul(M=7, N=3072, target="sm_90", **knobs) -> str:
    k = dict(threads=128, vector=8, items=2)
    k.update(knobs)
    return f"""builtin.module attributes {{emmy.target = "{target}"}} {{
  func.func @f(%g: tensor<{M}x{2 * N}xbf16> {{emmy.name = "g", emmy.role = "input"}}) -> tensor<{M}x{N}xbf16> {{
    %y = tile.kernel @silu_mul kind "elementwise" axes [m = {M}, n = {N}] knobs {_knobs(k)}
        ins(%g : tensor<{M}x{2 * N}xbf16>) -> tensor<{M}x{N}xbf16> {{
    ^bb0(%ga: tensor<{M}x{2 * N}xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %cN = arith.constant {N} : index
      %n2 = arith.addi %n, %cN : index
      %a = loop.load %ga[%m, %n] : tensor<{M}x{2 * N}xbf16> -> bf16
      %b = loop.load %ga[%m, %n2] : tensor<{M}x{2 * N}xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %ng = arith.negf %af : f32
      %e = math.exp %ng : f32
      %one = arith.constant 1.0 : f32
      %d = arith.addf %e, %one : f32
      %s = arith.divf %af, %d : f32
      %p = arith.mulf %s, %bf : f32
      %r = arith.truncf %p : f32 to bf16
      loop.store %r, 0 [%m, %n] : bf16
      loop.yield
    }}
    func.return %y : tensor<{M}x{N}xbf16>
  }}
}}
"""


def rms_norm(M=7, N=1024, target="sm_90", **knobs) -> str:
    k = dict(rows_per_block=2, threads=256, vector=8)
    k.update(knobs)
    return f"""builtin.module attributes {{emmy.target = "{target}"}} {{
  func.func @f(%x: tensor<{M}x{N}xbf16> {{emmy.name = "x", emmy.role = "input"}}, %w: tensor<{N}xbf16> {{emmy.name = "w", emmy.role = "param"}}) -> tensor<{M}x{N}xbf16> {{
    %y = tile.kernel @rms_norm kind "reduction" axes [m = {M}, n = {N}, k = {N}] knobs {_knobs(k)}
        ins(%x, %w : tensor<{M}x{N}xbf16>, tensor<{N}xbf16>) -> tensor<{M}x{N}xbf16> {{
    ^bb0(%xa: tensor<{M}x{N}xbf16>, %wa: tensor<{N}xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %ss = loop.reduce sum ["k"] : f32 {{
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<{M}x{N}xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %sq = arith.mulf %af, %af : f32
        loop.yield %sq : f32
      }}
      %inv = arith.constant {1.0 / N:e} : f32
      %eps = arith.constant 1.0e-06 : f32
      %ms = arith.mulf %ss, %inv : f32
      %v = arith.addf %ms, %eps : f32
      %r = math.rsqrt %v : f32
      %xn = loop.load %xa[%m, %n] : tensor<{M}x{N}xbf16> -> bf16
      %xf = arith.extf %xn : bf16 to f32
      %h = arith.mulf %xf, %r : f32
      %hb = arith.truncf %h : f32 to bf16
      %wn = loop.load %wa[%n] : tensor<{N}xbf16> -> bf16
      %o = arith.mulf %wn, %hb : bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }}
    func.return %y : tensor<{M}x{N}xbf16>
  }}
}}
"""


def lower(text: str, passes: str = LOWER):
    ctx = make_context()
    module = parse_module(ctx, text, "test.mlir")
    run_passes(ctx, module, parse_pipeline(passes))
    return module


def kernel_funcs(module) -> dict[str, K.KernelFuncOp]:
    return {op.sym_name.data: op for op in module.body.block.ops if isinstance(op, K.KernelFuncOp)}


def callees(func: K.KernelFuncOp) -> list[str]:
    return [op.callee.data for op in func.walk() if isinstance(op, K.CallOp)]


# ---------------------------------------------------------------------------------------------
# Contractions
# ---------------------------------------------------------------------------------------------

CONTRACTION_CASES = [
    # (target, knobs, expected compute call)
    ("sm_80", dict(workers="mma_sync", block_m=64, block_n=64, block_k=32, stages=3, warps=4), "emmy::mma::warp_tile<32, 32, 32, 64, 64>"),
    ("sm_90", dict(workers="mma_sync", block_m=32, block_n=64, block_k=16, stages=2, warps=2), "emmy::mma::warp_tile<32, 32, 16, 32, 64>"),
    ("sm_90", dict(workers="mma_sync", block_m=64, block_n=64, block_k=64, stages=1, warps=4), "emmy::mma::warp_tile<32, 32, 64, 64, 64>"),
    ("sm_90a", dict(workers="wgmma", block_m=64, block_n=64, block_k=64, stages=4, warps=4), "emmy::wgmma::tile<64, 64, 64, 64>"),
    ("sm_90a", dict(workers="wgmma", block_m=128, block_n=128, block_k=128, stages=2, warps=4), "emmy::wgmma::tile<128, 128, 128, 128>"),
    ("sm_90a", dict(workers="wgmma", block_m=128, block_n=32, block_k=32, stages=3, warps=8), "emmy::wgmma::tile<32, 32, 128, 32>"),
    ("sm_90", dict(workers="thread", block_m=32, block_n=32, block_k=32, stages=2, warps=4), "emmy::fma::thread_tile<8, 1, 32, 32, 32, 4, 32>"),
]


@pytest.mark.parametrize(
    "target,knobs,staged",
    [
        ("sm_90a", dict(workers="wgmma_ws", block_m=128, block_n=128, block_k=64, stages=4, warps=8), True),
        ("sm_90a", dict(workers="wgmma", block_m=64, block_n=64, block_k=64, stages=4, warps=4), True),
        ("sm_80", dict(workers="mma_sync", block_m=64, block_n=64, block_k=32, stages=3, warps=4), True),
        # the k loop's buffers (2 x (32 + 64) x 16 bf16) hold the bf16 results (not f32 accumulators)
        ("sm_90", dict(workers="mma_sync", block_m=32, block_n=64, block_k=16, stages=2, warps=2), True),
        ("sm_90", dict(workers="thread", block_m=32, block_n=32, block_k=32, stages=2, warps=4), False),
    ],
)
def test_contraction_staged_epilogue(target, knobs, staged):
    """Tensor-core kernels write their outputs through shared memory: the accumulators go to an
    f32 tile there and each thread then stores 8 consecutive bf16 columns (16 bytes) at once."""
    module = lower(rmsnorm_matmul(M=72, N=80, K=192, target=target, **knobs), "convert-tile-to-kernel")
    f = kernel_funcs(module)["rms_norm_qkv_proj"]
    shared = {op.result.name_hint for op in f.walk() if isinstance(op, K.SharedOp)}
    outputs = set(f.body.block.args[-1:])
    out_stores = [op for op in f.walk() if isinstance(op, K.StoreOp) and op.ptr in outputs]
    assert out_stores
    widths = {op.value.type.get_shape()[0] if isinstance(op.value.type, VectorType) else 1 for op in out_stores}
    assert ("sC" in shared) == staged
    assert widths == ({8} if staged else widths - {8})


def test_staged_epilogue_stages_results_or_accumulators():
    """An epilogue that reads no tensor (RMSNorm's row scale) runs on the fragments and stages
    bf16 results; one that adds a residual to the rounded product stages that bf16 product and
    adds the residual 8 columns at a time; one that adds it to the f32 accumulator stages the
    f32 accumulators and evaluates there."""
    f = kernel_funcs(lower(rmsnorm_matmul(M=256, N=256, K=256, workers="wgmma_ws", block_m=128, block_n=128,
                                          warps=8, stages=4, factored=True), "convert-tile-to-kernel"))
    shared = {op.result.name_hint: op for op in f["rms_norm_qkv_proj"].walk() if isinstance(op, K.SharedOp)}
    assert str(shared["sC"].result.type.element_type) == "bf16"
    g = kernel_funcs(lower(heads_matmul_residual(target="sm_90a", workers="wgmma_ws", block_m=64, block_n=64,
                                                 warps=4, stages=3, block_k=64), "convert-tile-to-kernel"))
    (name,) = [n for n in g if not n.endswith("_combine")]
    shared = {op.result.name_hint: op for op in g[name].walk() if isinstance(op, K.SharedOp)}
    assert str(shared["sC"].result.type.element_type) == "bf16"
    residual_reads = [op for op in g[name].walk() if isinstance(op, K.LoadOp) and op.ptr is g[name].body.block.args[0]]
    assert residual_reads and all(isinstance(op.result.type, VectorType) and op.result.type.get_shape() == (8,)
                                  for op in residual_reads)
    h = kernel_funcs(lower(heads_matmul_residual(target="sm_90a", f32_add=True, workers="wgmma_ws", block_m=64,
                                                 block_n=64, warps=4, stages=3, block_k=64), "convert-tile-to-kernel"))
    (name,) = [n for n in h if not n.endswith("_combine")]
    shared = {op.result.name_hint: op for op in h[name].walk() if isinstance(op, K.SharedOp)}
    assert str(shared["sC"].result.type.element_type) == "f32"


@pytest.mark.parametrize("target,knobs,compute", CONTRACTION_CASES)
def test_contraction_workers(target, knobs, compute):
    module = lower(rmsnorm_matmul(M=72, N=80, K=192, target=target, **knobs), "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["rms_norm_qkv_proj"]
    f = funcs["rms_norm_qkv_proj"]
    calls = callees(f)
    assert compute in calls
    # the row statistics are computed once per block (one warp per row) and kept in smem
    assert "emmy::warp_sum<32>" in calls
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    # B (a plain weight load) is copied with cp.async; the tensors A (x * rstd * w) reads are
    # copied raw (x: block_m rows, w: one row), then A is computed from shared memory
    # (sC: the staged epilogue's tiles, where the k loop's buffers leave room; test below)
    assert set(shared) - {"sC"} == {"sA", "sB", "raw0", "raw1", "rs"}
    assert "emmy::cp_async16" in calls
    assert any(isinstance(op, K.PackOp) for op in f.walk())
    bm, bn, bk, st = knobs["block_m"], knobs["block_n"], knobs["block_k"], knobs["stages"]
    assert shared["raw0"].size.value.data == st * bm * bk and shared["raw1"].size.value.data == st * bk
    assert f.grid_dims == (-(-80 // bn), -(-72 // bm), 1)
    assert f.threads == 32 * knobs["warps"]
    up = lambda n: -(-n // 128) * 128  # noqa: E731
    tiles = st * (bm + bn) * bk * 2 + up(st * bm * bk * 2) + up(st * bk * 2)
    assert f.smem_bytes == tiles + bm * 4 + (1024 if knobs["workers"] == "wgmma" else 0)
    if knobs["workers"] == "wgmma":
        assert "emmy::fence_proxy_async" in calls
        assert shared["sA"].align.value.data == 1024


def test_wgmma_pipeline_keeps_one_group_in_flight():
    module = lower(rmsnorm_matmul(workers="wgmma", stages=3, K=512), "convert-tile-to-kernel")
    calls = callees(kernel_funcs(module)["rms_norm_qkv_proj"])
    assert "emmy::wgmma::wait<1>" in calls and calls[-1] != "emmy::wgmma::wait<1>"
    assert calls.count("emmy::wgmma::wait<0>") == 1  # after the main loop only
    # lookahead of stages - 2: cp.async groups waited down to stages - 3 pending
    assert "emmy::cp_async_wait<0>" in calls


@pytest.mark.parametrize("workers,warps", [("wgmma", 4), ("wgmma_ws", 4)])
def test_wgmma_dual_contraction_keeps_a_whole_k_step_in_flight(workers, warps):
    """Gate and up with two 64-row slices per warpgroup are four groups of wgmmas per k-step:
    waiting down to one pending group would wait for the step's gate products; one k-step in
    flight is four groups."""
    text = gate_up(M=128, N=128, K=256, workers=workers, block_m=128, block_n=64, block_k=64, stages=4, warps=warps)
    calls = callees(kernel_funcs(lower(text, "convert-tile-to-kernel"))["gate_up_silu"])
    assert calls.count("emmy::wgmma::tile<64, 64, 128, 64>") == 4
    assert "emmy::wgmma::wait<4>" in calls and "emmy::wgmma::wait<1>" not in calls


@pytest.mark.parametrize("workers", ["wgmma", "wgmma_ws"])
def test_wgmma_dual_contraction_is_one_wide_wgmma(workers):
    """With one 64-row slice per warpgroup, gate's and up's B tiles of a slot lie side by side
    and one wgmma of N = 2 x block_n multiplies both (A read once), into one accumulator array
    whose halves are gate's and up's."""
    text = gate_up(M=128, N=128, K=256, workers=workers, block_m=64, block_n=64, block_k=64, stages=4, warps=4)
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["gate_up_silu"]
    calls = callees(f)
    assert calls.count("emmy::wgmma::tile<128, 64, 64, 128>") == 1
    assert "emmy::wgmma::wait<1>" in calls and "emmy::wgmma::tile<64, 64, 64, 64>" not in calls
    shared = {op.result.name_hint for op in f.walk() if isinstance(op, K.SharedOp)}
    assert "sB" in shared and "sB0" not in shared
    locals_ = [op for op in f.walk() if isinstance(op, K.LocalOp) and op.result.name_hint == "acc"]
    assert len(locals_) == 1


@pytest.mark.parametrize("stages", [2, 4])
def test_warp_specialized_pipeline(stages):
    """workers=wgmma_ws: a producer warpgroup stages, mbarriers hand slots over, no block-wide
    barrier inside the k loop (test_nvcc.py builds such kernels for sm_90a)."""
    text = rmsnorm_matmul(M=200, N=96, K=448, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=stages)
    module = lower(text, "convert-tile-to-kernel")
    f = kernel_funcs(module)["rms_norm_qkv_proj"]
    assert f.threads == 8 * 32 + 128
    calls = callees(f)
    assert calls.count("emmy::mbar_init") == 2 * stages
    assert "emmy::mbar_wait" in calls and "emmy::mbar_arrive" in calls
    assert "emmy::cp_async_mbar_arrive" in calls and "emmy::cp_async_wait<0>" in calls
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    assert set(shared) - {"sC"} == {"sA", "sB", "rs", "bars"}  # A computed by the producer, no raw copies
    # A uses the row statistic (x * rstd * w): the producer computes it from x prefetched a
    # k-step ahead, so the statistics must exist before the k loop: the block's pass over its
    # rows (one warp per row) runs first, nothing is summed during the loop
    assert "emmy::warp_sum<32>" in calls and "emmy::warp_sum<8>" not in calls
    assert "emmy::named_barrier<384>" not in calls
    loops = [op for op in f.walk() if isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "kt"]
    assert len(loops) == 2  # the producer's and the consumers'
    for loop in loops:
        assert not any(isinstance(op, K.BarrierOp) for op in loop.walk())


def weighted_norm_matmul(M=200, N=256, K=1024, **knobs) -> str:
    """The factored RMSNorm projection (A = g * x, rstd in the epilogue) with the norm weight g
    an input, so loop-hoist-params leaves it in A; wgmma_ws 128x128 tiles."""
    k = dict(block_m=128, block_n=128, stages=4, workers="wgmma_ws", warps=8)
    k.update(knobs)
    return rmsnorm_matmul(M, N, K, name="norm_proj", factored=True, g_role="input", **k)


def test_producer_sums_the_statistics_of_an_a_side_computed_from_two_tensors():
    """A = g * (x + r) (`KernelInfo.ws_row_stats` = "producer"): the producer warpgroup computes
    A from x and r, prefetched a k-step ahead, and sums the squares on the way (over 8 lanes; no
    pass over the rows before the k loop, which sums over 32), then hands them to the whole tile
    at barrier 1. A staggered epilogue, whose warpgroups store in turn, is refused by legality
    (decide-forks) before the lowering would."""
    text, _ = L.add_rmsnorm_matmul(4096, 1024, 1024, target="sm_90a")
    pins = "*.workers=wgmma_ws, warps=8, block_m=128, block_n=128, schedule=persistent, fusion=fused"
    module = lower(text, f'convert-loop-to-tile,decide-forks{{pin="{pins}, epilogue=together"}},convert-tile-to-kernel')
    calls = callees(kernel_funcs(module)["add_norm_proj"])
    assert "emmy::warp_sum<8>" in calls and "emmy::warp_sum<32>" not in calls
    assert 1 in _barrier_ids(kernel_funcs(module)["add_norm_proj"], "emmy::named_barrier<384>")
    # the statistics are read once, by the epilogue (A does not use them: no load while staging A)
    for fusion, stats in (("fused", "rs"), ("split", "stats")):
        src = cuda_source(lower(text, f'convert-loop-to-tile,decide-forks{{pin="{pins.replace("fused", fusion)}"}},{LOWER}'))
        assert len(re.findall(rf"= {stats}_\d+\[", src)) == 1, fusion
    with pytest.raises(EmmyError, match="epilogue=staggered: the producer warpgroup sums the row statistics"):
        lower(text, f'convert-loop-to-tile,decide-forks{{pin="{pins}, epilogue=staggered"}}')


def test_warp_specialized_computes_a_in_place():
    """A = g * x with g not a parameter (nothing to fold) reads one block_m-row tensor: the
    producer copies x into the A slot and each consumer warpgroup rewrites its rows in place,
    summing the row statistics on the way."""
    funcs = kernel_funcs(lower(weighted_norm_matmul(), "convert-tile-to-kernel"))
    assert list(funcs) == ["norm_proj"]
    calls = callees(funcs["norm_proj"])
    # after each transform, and before the epilogue
    assert calls.count("emmy::named_barrier<128>") == 2
    assert "emmy::warp_sum<8>" in calls and "emmy::warp_sum<32>" not in calls
    assert "emmy::named_barrier<384>" not in calls


def test_persistent_blocks_loop_over_tiles():
    """schedule=persistent: one block per SM (at most the tile count), both warpgroup roles loop
    over the same tiles, the k-step count (slots, mbarrier phases) goes on across tiles, the
    consumers free each tile's last slot, and the epilogue keeps out of the pipeline's slots."""
    text = weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent")
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["norm_proj"]
    assert f.grid_dims == (64, 1, 1)  # 16 x 4 tiles of 128x128: one block each
    tile_loops = [op for op in f.walk() if isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "t"]
    assert len(tile_loops) == 2  # the producer's and the consumers'
    for loop in tile_loops:
        assert any(isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "kt" for op in loop.walk())
    calls = callees(f)
    # the consumers' warp_arrive per k-step after the first, plus one for the tile's last slot
    consumer = tile_loops[1]
    arrives = [op for op in consumer.walk() if isinstance(op, K.CallOp) and op.callee.data == "emmy::warp_arrive"]
    assert len(arrives) == 2
    # in place A (one barrier per k-step), the statistics written, and rs free again per tile
    assert calls.count("emmy::named_barrier<128>") == 3
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    if "sC" in shared:  # staged epilogue tiles after the mbarriers, never over the slots
        assert shared["sC"].offset.value.data > shared["bars"].offset.value.data
    big = kernel_funcs(lower(weighted_norm_matmul(M=4096, N=4096, K=256, schedule="persistent"), "convert-tile-to-kernel"))
    assert big["norm_proj"].grid_dims == (132, 1, 1)  # 1024 tiles


def test_persistent_schedule_errors():
    with pytest.raises(EmmyError, match="schedule=persistent needs workers=wgmma_ws"):
        lower(rmsnorm_matmul(M=256, workers="wgmma", warps=4, schedule="persistent"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=persistent needs split_k=1"):
        lower(weighted_norm_matmul(schedule="persistent", split_k=2), "convert-tile-to-kernel")
    # A = x * rstd * w: the statistics come before the k loop, per tile, from all warps
    with pytest.raises(EmmyError, match="cannot compute the A side from row statistics"):
        lower(rmsnorm_matmul(M=256, workers="wgmma_ws", block_m=128, warps=8, schedule="persistent"), "convert-tile-to-kernel")


def _barrier_ids(f: K.KernelFuncOp, callee: str) -> list:
    """The id operands of the kernel's calls of `callee` (an int, or the op computing it)."""
    out = []
    for op in f.walk():
        if isinstance(op, K.CallOp) and op.callee.data == callee:
            owner = op.operands[0].owner
            out.append(owner.value.value.data if hasattr(owner, "value") and hasattr(owner.value, "value") else owner)
    return out


def test_staggered_epilogue_takes_turns():
    """epilogue=staggered: each consumer warpgroup syncs only with itself around the staged
    epilogue (barriers 10 and 11), and warpgroup 1 waits at barrier 12 for warpgroup 0, which
    arrives there once it has stored its rows."""
    knobs = dict(M=4096, N=512, K=256, workers="wgmma_ws", block_m=128, block_n=128, warps=8, stages=4,
                 schedule="persistent", fusion="split")
    staggered = kernel_funcs(lower(rmsnorm_matmul(**knobs, epilogue="staggered"), "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    together = kernel_funcs(lower(rmsnorm_matmul(**knobs), "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    assert 12 in _barrier_ids(staggered, "emmy::named_barrier<256>")
    assert _barrier_ids(staggered, "emmy::named_barrier_arrive<256>") == [12]
    own = [i for i in _barrier_ids(staggered, "emmy::named_barrier<128>") if not isinstance(i, int)]
    assert own and all(isinstance(op, arith.AddiOp) for op in own)  # 10 + warpgroup
    assert 8 not in _barrier_ids(staggered, "emmy::named_barrier<256>")  # no barrier of both around the tile
    assert 8 in _barrier_ids(together, "emmy::named_barrier<256>")
    assert not _barrier_ids(together, "emmy::named_barrier_arrive<256>")


def test_pingpong_epilogue_takes_tiles_in_turn():
    """epilogue=pingpong: consumer warpgroup w loops over every other one of the block's tiles
    (from blockIdx.x + w * gridDim.x), waits for its turn at the k loop (barrier 13 + w, the
    first tile of warpgroup 0 without waiting), hands the turn on after its last slot wait only
    where the next tile exists, and stages its epilogue alone (barrier 10 + w) in its own room;
    a slot is freed by the 128 threads of one warpgroup, which hold all 128 x (2 x 64)
    accumulators of gate and up with 232 registers each."""
    knobs = dict(M=4096, N=512, K=256, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4,
                 schedule="persistent", epilogue="pingpong")
    f = kernel_funcs(lower(gate_up(**knobs), "convert-tile-to-kernel"))["gate_up_silu"]
    assert _barrier_ids(f, "emmy::named_barrier<256>") == [13, 14]
    assert _barrier_ids(f, "emmy::named_barrier_arrive<256>") == [14, 13]
    assert set(_barrier_ids(f, "emmy::named_barrier<128>")) == {10, 11}
    assert _init_counts(f)[1::2] == [4] * 4  # the empty barriers: one warpgroup's four warps release a slot
    calls = callees(f)
    assert "emmy::regs_lower<40>" in calls and "emmy::regs_raise<232>" in calls
    # per warpgroup: two 64-row slices of the 128-row A tile against gate's and up's B tiles
    assert calls.count("emmy::wgmma::tile<64, 32, 128, 64>") == 2 * 2 * 2
    src = cuda_source(lower(gate_up(**knobs)))
    staged = sorted({int(m) for m in re.findall(r"sC_\d+ = reinterpret_cast<__nv_bfloat16\*>\(emmy_smem \+ (\d+)\)", src)})
    assert len(staged) == 2 and staged[1] - staged[0] == 128 * (64 + 8) * 2  # one bf16 tile each
    loops = re.findall(r"for \(int t_\d+ = (\w+); t_\d+ < c\d+_\d+; t_\d+ \+= (c\d+)_\d+\)", src)
    assert [step for _, step in loops] == ["c132", "c264", "c264"]  # the producer: every tile


def test_pingpong_epilogue_errors():
    # the row statistics summed in the kernel, or an A side rewritten in place by the tile's warpgroups
    with pytest.raises(EmmyError, match="epilogue=pingpong needs cluster=1 and no row statistics summed in the kernel"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, stages=4, schedule="persistent",
                             epilogue="pingpong"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="epilogue=pingpong needs schedule=persistent and two consumer warpgroups"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, fusion="split", epilogue="pingpong"),
              "convert-tile-to-kernel")
    # stream-K's shared tiles have one epilogue for both warpgroups, like any epilogue but together
    with pytest.raises(EmmyError, match="schedule=stream_k needs cluster=1, group_m=1 and epilogue=together"):
        lower(gate_up(M=4096, N=512, K=256, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4,
                      schedule="stream_k", epilogue="pingpong"), "convert-tile-to-kernel")


def test_slices_cols_swaps_the_wgmma_operands():
    """slices=cols: each warpgroup multiplies its 64 columns of B (the wgmma's A operand, from
    the B tile's rows 64 * w on) by the whole A tile (its B operand: N = block_m), and holds the
    tile transposed: its fragments go to the staged tile one element at a time, rows of a pair
    one apart, then out by rows as with slices=rows."""
    knobs = dict(S=3000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=192, block_n=128,
                 block_k=64, warps=8, stages=5, copy="tma")
    cols = cuda_source(lower(heads_matmul_residual(**knobs, slices="cols")))
    rows = cuda_source(lower(heads_matmul_residual(**dict(knobs, warps=12), slices="rows")))
    assert re.findall(r"emmy::wgmma::tile<([\d, ]+)>", cols) == ["192, 64, 128, 192"]
    assert re.findall(r"emmy::wgmma::tile<([\d, ]+)>", rows) == ["128, 64, 192, 128"]
    assert "float acc_" in cols and re.search(r"float acc_\d+\[96\]", cols)  # 64 x 192 / 128 threads
    assert re.search(r"float acc_\d+\[64\]", rows)
    # one bf16 at a time into the staged tile, then 16-byte rows out (the residual added)
    assert re.search(r"sC_\d+\[v_\d+\] = \w+;", cols)
    assert "Vec<__nv_bfloat16, 2>" not in cols.split("sC_")[1].split("named_barrier")[0]
    assert cols.count("*reinterpret_cast<emmy::Vec<__nv_bfloat16, 8>*>(") == rows.count("*reinterpret_cast<emmy::Vec<__nv_bfloat16, 8>*>(")


@pytest.mark.parametrize("workers,slices,schedule", [
    ("wgmma_ws", "cols", "grid"), ("wgmma_ws", "cols", "persistent"), ("wgmma_ws", "rows", "grid"), ("wgmma", "rows", "grid"),
])
def test_accumulators_settle_after_the_last_wgmma_wait(workers, slices, schedule):
    """Right after the k loop's last wgmma wait, before any read of them, every accumulator is
    written in place (emmy::wgmma::settle): CUDA 13.0's ptxas scheduled reads of them above the
    wait in slices = cols epilogues (tools/kernel_checks/wgmma_hazards.py)."""
    warps = 12 if slices == "rows" and workers == "wgmma_ws" else 8
    src = cuda_source(lower(heads_matmul_residual(
        S=3000, H=16, D=128, N=1024, target="sm_90a", workers=workers, block_m=192, block_n=128, block_k=64,
        warps=warps if workers == "wgmma_ws" else 4 * (192 // 64), stages=4, copy="tma" if workers == "wgmma_ws" else "cp_async",
        slices=slices, schedule=schedule)))
    acc, n = re.search(r"float (acc_\d+)\[(\d+)\];", src).groups()
    settle = f"emmy::wgmma::settle<{n}>({acc});"
    assert src.count(settle) == 1
    before, after = src.split(settle)
    assert before.rstrip().endswith(("emmy::wgmma::wait<0>();", "emmy::cp_async_wait<0>();"))
    last_wait = before.rindex("emmy::wgmma::wait<")
    assert f"{acc}[" not in before[last_wait:]  # nothing reads them between the wait and the settle
    assert f"{acc}[" in after  # the epilogue reads them after


def test_slices_cols_errors():
    with pytest.raises(EmmyError, match="slices=cols needs workers=wgmma or wgmma_ws"):
        lower(heads_matmul_residual(target="sm_90a", workers="mma_sync", slices="cols"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="slices=cols needs fusion=split"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, stages=4, slices="cols"),
              "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match=r"wgmma: block_n=64 must be a multiple of 128"):
        lower(heads_matmul_residual(S=512, N=256, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=64,
                                    warps=8, stages=4, slices="cols"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="slices=cols needs epilogue=together"):
        lower(heads_matmul_residual(S=4096, N=512, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=128,
                                    warps=8, stages=4, schedule="persistent", epilogue="staggered", slices="cols"),
              "convert-tile-to-kernel")
    # (a value outside the domain is refused when the IR is read)
    with pytest.raises(EmmyError, match='knob \'slices\': the chosen value "diagonal" is not in the domain'):
        lower(heads_matmul_residual(target="sm_90a", workers="wgmma_ws", slices="diagonal"), "convert-tile-to-kernel")


def test_staggered_epilogue_errors():
    with pytest.raises(EmmyError, match="epilogue=staggered needs schedule=persistent and two consumer warpgroups"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, epilogue="staggered"), "convert-tile-to-kernel")
    # a residual read in the epilogue: the f32 accumulators are staged, any thread stores any row
    with pytest.raises(EmmyError, match="epilogue=staggered needs an epilogue that stages bf16 results"):
        lower(heads_matmul_residual(S=512, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=64, warps=8,
                                    stages=4, schedule="persistent", epilogue="staggered"), "convert-tile-to-kernel")


def _init_counts(f: K.KernelFuncOp) -> list[int]:
    """The arrival counts of the kernel's mbarrier inits, in order (full, empty per slot)."""
    counts = []
    for op in f.walk():
        if isinstance(op, K.CallOp) and op.callee.data == "emmy::mbar_init":
            counts.append(op.operands[1].owner.value.value.data)
    return counts


@pytest.mark.parametrize("block_k,slabs", [(64, 1), (128, 2)])
def test_tma_copies_whole_operand_tiles(block_k, slabs):
    """copy=tma: x (the raw tile of the in-place A) and w are 2-D views of their tensors; one
    producer thread copies each tile slab with one tensor-map copy, announcing the bytes on the
    slot's full barrier (one arrival), and no thread issues cp.async."""
    text = weighted_norm_matmul(M=200, N=256, K=1024, copy="tma", block_k=block_k, stages=3)
    module = lower(text, "convert-tile-to-kernel")
    f = kernel_funcs(module)["norm_proj"]
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    views = [(t.rows.data, t.cols.data, t.stride.data, t.offset.data, t.box_rows.data, t.box_cols.data) for t in maps]
    assert views == [(200, 1024, 1024, 0, 128, 64), (256, 1024, 1024, 0, 128, 64)]
    calls = callees(f)
    assert calls.count("emmy::tma_load_2d") == 2 * slabs
    assert calls.count("emmy::tma_prefetch") == 2
    assert "emmy::mbar_arrive_expect_tx" in calls
    assert "emmy::cp_async16" not in calls and "emmy::cp_async_mbar_arrive" not in calls
    assert _init_counts(f)[0::2] == [1] * 3  # full: the expect_tx arrival; the bytes do the rest
    text = print_module(module)
    launch = re.search(r"kernel.launch @norm_proj\((.*?)\)", text).group(1).split(", ")
    assert launch[-2:] == ["%x", "%w"]  # the maps are bound to the operands' tensors
    plan = launch_plan(lower(text, "convert-kernel-to-cuda"))  # (text: the kernel stage)
    kernel = next(k for k in plan.kernels if k.name == "norm_proj")
    assert [str(t) for t in kernel.arg_types[-2:]] == [
        "tensor_map<rows 200, cols 1024, stride 1024, offset 0, box 128 x 64>",
        "tensor_map<rows 256, cols 1024, stride 1024, offset 0, box 128 x 64>",
    ]
    assert "emmy::tensor_map_2d((__nv_bfloat16*)x + 0, 200, 1024, 1024, 128, 64)" in plan.source
    assert "const __grid_constant__ CUtensorMap tma_a" in plan.source


def test_tma_leaves_a_computed_a_side_to_the_producer_threads():
    """A = bf16(x * rstd) * w is computed by the producer warpgroup: only the weight goes
    through a tensor map, and the full barrier counts both kinds of arrivals."""
    text = rmsnorm_matmul(M=200, N=96, K=448, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4, copy="tma")
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    assert [(t.rows.data, t.box_rows.data) for t in maps] == [(96, 64)]
    calls = callees(f)
    assert calls.count("emmy::tma_load_2d") == 1
    assert _init_counts(f)[0::2] == [2 * 128 + 1] * 4


def test_cluster_pairs_multicast_their_b_slices():
    """cluster=2: blocks pair up along m (cluster [1, 2, 1]); each copies its half of the B
    tile and multicasts it to both, announcing the whole slot's bytes on its own barrier; a slot
    is free once every consumer warp of both blocks released it (2 x 8 arrivals), and both
    blocks meet before the first copy and before leaving."""
    text = weighted_norm_matmul(M=500, N=256, K=1024, copy="tma", cluster=2)
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["norm_proj"]
    assert f.cluster_dims == (1, 2, 1) and f.grid_dims == (2, 4, 1)
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    assert [t.box_rows.data for t in maps] == [128, 64]  # A whole, B in halves
    calls = callees(f)
    assert calls.count("emmy::tma_load_2d") == 1 and calls.count("emmy::tma_load_2d_multicast") == 1
    assert calls.count("emmy::cluster_sync") == 2 and "emmy::fence_mbarrier_init" in calls
    assert "emmy::cluster_arrive<2>" in calls and "emmy::mbar_arrive" not in calls
    assert _init_counts(f)[1::2] == [2 * 8] * 4
    source = launch_plan(lower(text)).source
    assert "__cluster_dims__(1, 2, 1)" in source


def test_cluster_pairs_along_n_multicast_their_a_slices():
    """slices=cols with cluster=2 (cuBLAS's 2x1 pairs of 128 x 192 tiles): the pair shares the
    tile each warpgroup multiplies whole, A, so blocks pair up along n (cluster [2, 1, 1], the
    grid's neighbours along x); each copies its half of A's rows (a box of block_m / 2 rows of the
    [1, H, S, D] map, multicast) and its whole B tile. In a persistent block's loop the rank in
    the cluster (blockIdx.y) picks its column of the pair."""
    knobs = dict(S=3000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=192, block_n=128,
                 block_k=64, warps=8, stages=5, copy="tma", slices="cols", cluster=2)
    f = kernel_funcs(lower(heads_matmul_residual(**knobs), "convert-tile-to-kernel"))["o_proj_residual"]
    assert f.cluster_dims == (2, 1, 1) and f.grid_dims == (8, 16, 1)
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    assert [t.box_rows.data for t in maps] == [96, 128]  # A in halves, B whole
    calls = callees(f)
    assert calls.count("emmy::tma_load_3d_multicast") == 1 and calls.count("emmy::tma_load_2d") == 1
    assert "emmy::tma_load_3d" not in calls and "emmy::tma_load_2d_multicast" not in calls
    assert "emmy::cluster_arrive<2>" in calls and _init_counts(f)[1::2] == [2 * 8] * 5
    assert "__cluster_dims__(2, 1, 1)" in launch_plan(lower(heads_matmul_residual(**knobs))).source
    # persistent: clusters of two along y, whatever the side they pair along
    f = kernel_funcs(lower(heads_matmul_residual(**knobs, schedule="persistent", group_m=4), "convert-tile-to-kernel"))
    assert f["o_proj_residual"].cluster_dims == (1, 2, 1) and f["o_proj_residual"].grid_dims == (64, 2, 1)  # 128 tiles in 64 pairs
    with pytest.raises(EmmyError, match="the 5 column tiles do not pair up"):
        lower(heads_matmul_residual(**dict(knobs, N=640)), "convert-tile-to-kernel")


# the index arithmetic of a kernel's tile order, evaluated on the CPU
_FOLD = {"arith.addi": int.__add__, "arith.subi": int.__sub__, "arith.muli": int.__mul__,
         "arith.divui": int.__floordiv__, "arith.remui": int.__mod__, "arith.minsi": min, "arith.maxsi": max}


def _block_id(op, bx: int, by: int) -> int:
    return {"#kernel<dim x>": bx, "#kernel<dim y>": by}[str(op.properties["dim"])]


def _grid_origins(f) -> dict[tuple[int, int], tuple[int, int]]:
    """(m0, n0) of every block (blockIdx.x, blockIdx.y) of a schedule = grid kernel: the index
    arithmetic before its first loop, evaluated."""
    gx, gy, _ = f.grid_dims
    out = {}
    for bx in range(gx):
        for by in range(gy):
            env, found = {}, {}
            for op in f.body.block.ops:
                if op.name == "arith.constant" and hasattr(op.value, "value"):
                    env[op.result] = op.value.value.data
                elif op.name == "kernel.block_id":
                    env[op.results[0]] = _block_id(op, bx, by)
                elif op.name in _FOLD:
                    env[op.result] = _FOLD[op.name](env[op.operands[0]], env[op.operands[1]])
                    if op.result.name_hint in ("m0", "n0"):
                        found[op.result.name_hint] = env[op.result]
                elif op.name.startswith(("scf.", "kernel.for", "kernel.if")):
                    break
            out[bx, by] = (found["m0"], found["n0"])
    return out


def test_pairs_along_n_cover_every_tile_once():
    """Pairs along n (slices = cols, cluster = 2): the two blocks of a cluster (neighbours along
    x) take neighbouring column tiles of one row tile, in the plain order and in groups of row
    tiles; every tile once. (Pairs along m: neighbours along y, one column tile.)"""
    knobs = dict(S=1000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=192, block_n=128,
                 block_k=64, warps=8, stages=5, copy="tma", slices="cols", cluster=2)
    every = {(m * 192, n * 128) for m in range(6) for n in range(8)}
    for group in (1, 2, 4):
        f = kernel_funcs(lower(heads_matmul_residual(**knobs, group_m=group), "convert-tile-to-kernel"))["o_proj_residual"]
        origins = _grid_origins(f)
        assert sorted(origins.values()) == sorted(every), group
        for (bx, by), (m0, n0) in origins.items():
            mate = origins[bx ^ 1, by]
            assert mate[0] == m0 and abs(mate[1] - n0) == 128 and min(mate[1], n0) % 256 == 0
    rows = kernel_funcs(lower(heads_matmul_residual(**dict(knobs, slices="rows", warps=12), group_m=4),
                              "convert-tile-to-kernel"))["o_proj_residual"]
    origins = _grid_origins(rows)
    assert sorted(origins.values()) == sorted(every)
    assert all(origins[bx, by ^ 1][1] == n0 and abs(origins[bx, by ^ 1][0] - m0) == 192
               for (bx, by), (m0, n0) in origins.items())


def _persistent_origins(f) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(m0, n0) of the tiles each block (blockIdx.x, blockIdx.y) of a persistent kernel takes, in
    order: the first tile loop (the producer's) run on the index arithmetic of its body."""
    loop = next(op for op in f.walk() if op.name == "kernel.for")
    gx, gy, _ = f.grid_dims
    out = {}
    for bx in range(gx):
        for by in range(gy):
            env = {}
            for op in f.walk():
                if op is loop:
                    break
                if op.name == "arith.constant" and hasattr(op.value, "value"):
                    env[op.result] = op.value.value.data
                elif op.name == "kernel.block_id":
                    env[op.results[0]] = _block_id(op, bx, by)
            lo, hi, step = (env[v] for v in loop.operands)
            tiles = []
            for t in range(lo, hi, step):
                env[loop.regions[0].block.args[0]] = t
                found = {}
                for op in loop.regions[0].block.ops:
                    if op.name == "kernel.block_id":
                        env[op.results[0]] = _block_id(op, bx, by)
                    elif op.name in _FOLD and all(o in env for o in op.operands):
                        env[op.result] = _FOLD[op.name](env[op.operands[0]], env[op.operands[1]])
                        if op.result.name_hint in ("m0", "n0"):
                            found[op.result.name_hint] = env[op.result]
                tiles.append((found["m0"], found["n0"]))
            out[bx, by] = tiles
    return out


def test_persistent_pairs_along_n_take_every_tile_once():
    """Persistent pairs along n: the cluster's two blocks (blockIdx.y 0 and 1) loop over the same
    pairs, each taking its column of the pair; every tile once, in groups of row tiles or not."""
    knobs = dict(S=3000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=64, block_n=128,
                 block_k=64, warps=8, stages=4, copy="tma", slices="cols", cluster=2, schedule="persistent")
    every = sorted((m * 64, n * 128) for m in range(47) for n in range(8))  # 188 pairs, 2 to 3 a cluster
    for group in (1, 4):
        f = kernel_funcs(lower(heads_matmul_residual(**knobs, group_m=group), "convert-tile-to-kernel"))["o_proj_residual"]
        assert f.grid_dims == (66, 2, 1)
        origins = _persistent_origins(f)
        assert sorted(t for tiles in origins.values() for t in tiles) == every, group
        for (bx, by), tiles in origins.items():
            mates = origins[bx, by ^ 1]
            assert [m for m, _ in tiles] == [m for m, _ in mates]
            assert all(abs(n - o) == 128 and min(n, o) % 256 == 0 for (_, n), (_, o) in zip(tiles, mates))


def _tile_origin_ops(f) -> list[str]:
    """The arith ops between the block ids and the first loop: how a block finds its tile."""
    names = []
    for op in f.body.block.ops:
        if op.name in ("scf.for", "scf.if"):
            break
        if op.name.startswith("arith.") and op.name != "arith.constant":
            names.append(op.name)
    return names


def test_group_m_orders_tiles_in_groups_of_rows():
    """group_m beyond the cluster: the block's place in launch order (blockIdx.x along n first)
    becomes the tile of the grouped order; with clusters the order runs over clusters and the
    block's rank among them picks its row. group_m = cluster keeps blockIdx.y and blockIdx.x."""
    plain = kernel_funcs(lower(weighted_norm_matmul(M=1000, N=512, copy="tma"), "convert-tile-to-kernel"))["norm_proj"]
    grouped = kernel_funcs(lower(weighted_norm_matmul(M=1000, N=512, copy="tma", group_m=4), "convert-tile-to-kernel"))["norm_proj"]
    assert plain.grid_dims == grouped.grid_dims == (4, 8, 1)
    assert "arith.divui" not in _tile_origin_ops(plain)
    # 8 row tiles in groups of 4: constant group size, no min
    ops = _tile_origin_ops(grouped)
    assert ops.count("arith.divui") >= 2 and ops.count("arith.remui") >= 1 and "arith.minsi" not in ops
    # 6 row tiles in groups of 4: the last group has 2 rows
    ragged = kernel_funcs(lower(weighted_norm_matmul(M=700, N=512, copy="tma", group_m=4), "convert-tile-to-kernel"))
    assert "arith.minsi" in _tile_origin_ops(ragged["norm_proj"])
    pairs = kernel_funcs(lower(weighted_norm_matmul(M=1000, N=512, copy="tma", cluster=2, group_m=8), "convert-tile-to-kernel"))
    assert pairs["norm_proj"].cluster_dims == (1, 2, 1)
    # persistent blocks: the same arithmetic on the loop's tile index
    def persistent(**k):
        (f,) = kernel_funcs(lower(weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent", **k),
                                  "convert-tile-to-kernel")).values()
        return [op.name for op in f.walk()]

    # (one more division and remainder in each of the producer's and the consumers' loops)
    along_n, in_groups = persistent(), persistent(group_m=8)
    assert in_groups.count("arith.divui") == along_n.count("arith.divui") + 2
    assert in_groups.count("arith.remui") == along_n.count("arith.remui") + 2


def test_split_tail_is_a_second_launch_for_the_last_tiles():
    """split_tail=4 on 16 x 9 = 144 tiles: the first 132 as one launch, a tile per block along
    n; the last 12 as `<name>_tail`, 12 x 4 blocks, the last of each tile's four adding the
    parts (its own workspace for 12 tiles, zeroed counters)."""
    text = weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=128, split_tail=4, fusion="split")
    module = lower(text, "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["norm_proj_stats", "norm_proj", "norm_proj_tail"]  # one statistics kernel for both
    assert funcs["norm_proj"].grid_dims == (132, 1, 1)
    assert funcs["norm_proj_tail"].grid_dims == (12, 1, 4)
    assert "emmy::split_ticket" in callees(funcs["norm_proj_tail"])
    assert "emmy::split_ticket" not in callees(funcs["norm_proj"])
    source = launch_plan(lower(text)).source
    assert "norm_proj_tail<<<" in source or "norm_proj_tail" in source
    with pytest.raises(EmmyError, match="split_tail=4: 72 tiles on 132 SMs leave no partial wave behind a full one"):
        lower(weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=256, split_tail=4, fusion="split"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="split_tail=2 needs split_k=1, schedule=grid, cluster=1 and no batch axes"):
        lower(weighted_norm_matmul(M=1100, N=2048, K=1024, split_tail=2, split_k=2), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="split_tail=2 needs fusion=split"):
        lower(weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=128, split_tail=2), "convert-tile-to-kernel")


def test_stream_k_shares_tiles_among_one_block_per_sm():
    """schedule=stream_k on 9 x 8 = 72 tiles of 128x128 with 16 k-steps: 1152 steps on 132
    blocks (8 or 9 each), so every tile falls to two or three consecutive blocks. One launch of
    132 blocks, zeroed counters (2 per tile), a workspace of two slots per block (the run's
    first tile and its last), and the last block of a shared tile adding at most 3 parts."""
    from emmy.tuning.knobs import stream_k_runs

    runs = stream_k_runs(72, 16, 132)
    assert [len(r) for r in runs[:4]] == [2, 3, 3, 3] and max(map(len, runs)) == 3
    assert all(r[0][0] == 0 and r[-1][1] == 16 for r in runs)  # each tile's steps, in order
    assert all(a[1] == b[0] for r in runs for a, b in zip(r, r[1:]))
    assert stream_k_runs(2, 4, 132) == [[(i, i + 1) for i in range(4)]] * 2  # fewer steps than SMs
    # 300 tiles: the first wave's 132 whole, one to a block; the other 168 tiles' 16 steps shared
    # out (20 or 21 steps per block), at most two blocks to a tile
    hybrid = stream_k_runs(300, 16, 132)
    assert hybrid[:132] == [[(0, 16)]] * 132 and hybrid[132] == [(0, 16)] and hybrid[133] == [(0, 4), (4, 16)]
    assert max(map(len, hybrid)) == 2 and sum(hi - lo for r in hybrid for lo, hi in r) == 300 * 16
    text = weighted_norm_matmul(M=1100, N=1024, K=1024, copy="tma", schedule="stream_k", fusion="split")
    module = lower(text, "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["norm_proj_stats", "norm_proj"]
    f = funcs["norm_proj"]
    assert f.grid_dims == (132, 1, 1)
    assert callees(f).count("emmy::split_ticket") == 1
    empties = {op.result.name_hint: op.result.type for op in module.walk() if isinstance(op, K.EmptyOp) and op.zeroed}
    assert [t.get_shape() for t in empties.values()] == [(144,)]
    ws = [op.result.type.get_shape() for op in module.walk() if isinstance(op, K.EmptyOp) and not op.zeroed
          and op.result.type.element_type == f32]
    assert (264, 1, 128 * 128) in ws
    # both roles loop over the block's tiles; the consumers' loads of up to 3 parts
    loads = [op for op in f.walk() if isinstance(op, K.CallOp) and op.callee.data.startswith("emmy::load_cg")]
    assert len(loads) == 3


def test_stream_k_whole_waves_first():
    """300 tiles of 128x128 over 16 k-steps: each block takes its whole tile of the first wave
    (a loop from blockIdx.x below 132, stored as usual), then its run of the other 168 tiles'
    steps; the tickets only in the second loop."""
    text = weighted_norm_matmul(M=2400, N=2048, K=1024, copy="tma", schedule="stream_k", fusion="split")
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["norm_proj"]
    assert f.grid_dims == (132, 1, 1)
    loops = [op for op in f.walk() if isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "t"]
    assert len(loops) == 4  # whole tiles, then runs: the producer's and the consumers'
    tickets = [op for op in loops[3].walk() if isinstance(op, K.CallOp) and op.callee.data == "emmy::split_ticket"]
    assert len(tickets) == 1
    assert not any(isinstance(op, K.CallOp) and op.callee.data == "emmy::split_ticket" for op in loops[2].walk())


def test_stream_k_errors():
    with pytest.raises(EmmyError, match="schedule=stream_k needs workers=wgmma_ws"):
        lower(rmsnorm_matmul(M=256, workers="wgmma", warps=4, schedule="stream_k", fusion="split"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=stream_k needs split_k=1"):
        lower(weighted_norm_matmul(schedule="stream_k", split_k=2, fusion="split"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=stream_k needs fusion=split"):
        lower(weighted_norm_matmul(schedule="stream_k"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=stream_k needs cluster=1, group_m=1 and epilogue=together"):
        lower(weighted_norm_matmul(M=1000, copy="tma", schedule="stream_k", fusion="split", group_m=4), "convert-tile-to-kernel")


def test_cluster_errors():
    with pytest.raises(EmmyError, match="cluster=2 needs copy=tma"):
        lower(weighted_norm_matmul(M=500, cluster=2), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="the 3 row tiles do not pair up"):
        lower(weighted_norm_matmul(M=300, copy="tma", cluster=2), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="group_m=1 is not a multiple of cluster=2"):
        lower(weighted_norm_matmul(M=500, copy="tma", cluster=2, group_m=1), "convert-tile-to-kernel")


def test_tma_errors():
    with pytest.raises(EmmyError, match="copy=tma needs workers=wgmma_ws"):
        lower(rmsnorm_matmul(M=256, workers="wgmma", warps=4, copy="tma"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="is not in the domain"):
        lower(weighted_norm_matmul(copy="bulk"), "convert-tile-to-kernel")


def test_warp_specialized_sums_statistics_from_the_a_tiles():
    """With the norm weight folded into the weight matrix (loop-hoist-params) the running
    example's A side is x itself: a plain copy; the consumers read their rows of each A tile,
    after issuing the step's wgmmas, for the row statistics (no prologue pass, no rewrite)."""
    from emmy.driver import CompileOptions, compile_traced

    pins = ("*.workers=wgmma_ws", "*.block_m=128", "*.block_n=128", "*.warps=8", "*.split_k=1", "*.fusion=fused")
    opts = CompileOptions(model="example", layer=0, tokens=200, target="sm_90a", pins=pins,
                          stop_after="kernel")
    module = compile_traced(_example_trace(200), opts).module
    funcs = kernel_funcs(module)
    forward = [n for n in funcs if not n.startswith("rms_norm_qkv_proj_weights")]
    assert forward == ["rms_norm_qkv_proj"]  # q, and k with v: two parts side by side, one launch
    assert len(funcs) > 1  # the prepare kernels folding the norm weight into q/k/v weights
    calls = callees(funcs["rms_norm_qkv_proj"])
    # per part: once before the epilogue (the statistics written), never per k-step
    assert calls.count("emmy::named_barrier<128>") == 2
    assert "emmy::warp_sum<8>" in calls and "emmy::warp_sum<32>" not in calls
    text = print_module(module)
    launches = re.findall(r"kernel.launch @(\w+)\([^)]*\)( \{emmy.phase = \"prepare\"\})?", text)
    assert [n for n, ph in launches if not ph] == ["rms_norm_qkv_proj"]
    assert all(n.startswith("rms_norm_qkv_proj_weights") for n, ph in launches if ph)


def _example_trace(tokens: int):
    """The running example (tools/running_example.py) traced at `tokens` rows."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from running_example import make

    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    src = ModelSource(spec="running_example.py:make", kind="factory", model_id="example", factory=lambda: make(tokens))
    return trace_layer(src, 0, tokens)


def _example_plan(tokens: int, pins=()):
    """The launch plan of the running example at `tokens` rows on sm_90a, with `pins`."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_traced

    opts = CompileOptions(model="example", layer=0, tokens=tokens, target="sm_90a", pins=tuple(pins))
    return launch_plan(compile_traced(_example_trace(tokens), opts).module)


def test_one_trace_compiles_again_with_other_pins():
    """compile_traced lowers a copy: the trace stays at the torch stage and compiles again (the
    benchmark's variants compile one trace several times)."""
    from emmy.driver import CompileOptions, compile_traced

    traced = _example_trace(64)
    before = print_module(traced.module)
    first = compile_traced(traced, CompileOptions(model="example", tokens=64, target="sm_90a"))
    second = compile_traced(traced, CompileOptions(model="example", tokens=64, target="sm_90a",
                                                   pins=("*.block_n=32",)))
    assert print_module(traced.module) == before
    assert print_module(first.module) != print_module(second.module)
    assert "emmy.pins" in second.module.attributes and "emmy.pins" not in first.module.attributes


@pytest.mark.parametrize("schedule,siblings,forward", [
    ("grid", "paired", ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj"]),
    ("grid", "apart", ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj"]),
    ("persistent", "paired", ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj_out0", "rms_norm_qkv_proj_out1_2"]),
    ("persistent", "apart",
     ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj_out0", "rms_norm_qkv_proj_out1", "rms_norm_qkv_proj_out2"]),
])
def test_output_groups_share_one_statistics_kernel(schedule, siblings, forward):
    """fusion=split with q and k/v built as two parts (siblings=paired: k and v share each
    tile) or three (apart): all parts' row statistics are the same kernel on the same input,
    launched once, and the parts read its buffer: side by side in one launch, or (persistent
    blocks, each part filling the machine) one launch each."""
    pins = ("*.fusion=split", "*.workers=wgmma_ws", f"*.schedule={schedule}", f"*.siblings={siblings}")
    plan = _example_plan(300, pins)
    names = [launch.kernel for launch in plan.forward_launches]
    assert names == forward
    # paired: k's and v's accumulators are the two halves of one array (columns side by side);
    # apart: every part holds one contraction over its whole block_n
    shares = re.findall(r"float\* const \w+ = acc_\d+ \+", plan.source)
    assert bool(shares) == (siblings == "paired")
    stats_buffer = plan.forward_launches[0].args[-1]
    assert all(stats_buffer in launch.args for launch in plan.forward_launches[1:])


@pytest.mark.parametrize("tokens", [4096, 32768])
def test_parts_are_built_with_the_decided_tiles(tokens):
    """Every part of the running example's projection (q, then k and v paired or apart) is
    built with the decided tile (128x256 in k-steps of 64): the knob that chose the split
    (siblings) is not handed on to the parts, whose legality check would take it for one it
    does not know and shrink the tile."""
    plan = _example_plan(tokens)
    parts = [k for k in plan.kernels if re.fullmatch(r"rms_norm_qkv_proj_out[0-9_]+", k.name)]
    assert len(parts) == (3 if tokens == 32768 else 2)
    for part in parts:
        assert "emmy::wgmma::tile<256, 64, 128, 256>" in part.source, part.name


@pytest.mark.parametrize("workers,early", [("wgmma_ws", True), ("wgmma", True), ("mma_sync", False)])
def test_statistics_kernel_rows_are_loaded_before_the_k_loop(workers, early):
    """fusion=split: the rows a thread's wgmma fragments hold have their statistics loaded into
    registers before the k loop, so the epilogue does not start with a round trip to memory
    (mma.sync fragments keep loading them in the epilogue)."""
    pins = ("*.fusion=split", f"*.workers={workers}", "*.split_k=1")
    plan = _example_plan(300, pins)
    (main,) = [k for k in plan.kernels if k.name == "rms_norm_qkv_proj"]
    text = main.source[main.source.index("rms_norm_qkv_proj("):]
    stats_reads = [m.start() for m in re.finditer(r"= stats_\d+\[", text)]
    mainloops = [m.start() for m in re.finditer(r"emmy::(wgmma::tile<|mma::)", text)]
    assert stats_reads and mainloops
    # in order of the source, per part of the launch: its statistics reads and its k loop
    events = sorted([(i, "s") for i in stats_reads] + [(i, "m") for i in mainloops])
    order = "".join(kind for _, kind in events)
    order = re.sub(r"(.)\1+", r"\1", order)
    if early:
        assert "float row_stats_" in text
        assert order == "sm" * len(order.split("m")[:-1])  # each part reads them before its k loop
    else:
        assert "row_stats" not in text and order.startswith("m") and order.endswith("s")


def test_split_k_parts_load_no_statistics():
    """split_k > 1: the parts write partial sums to the workspace and the combine kernel applies
    the statistics, so the parts load none ahead of their k loop."""
    plan = _example_plan(64, ("*.workers=wgmma_ws", "*.split_k=2"))
    parts = [k for k in plan.kernels if k.name in ("rms_norm_qkv_proj_out0", "rms_norm_qkv_proj_out1_2")]
    assert len(parts) == 2
    for part in parts:
        assert "ws_" in part.source and "stats_" in part.source
        assert "row_stats" not in part.source


@pytest.mark.parametrize("tokens", [5, 64, 300])
@pytest.mark.parametrize("pins", [(), ("*.split_k=2",), ("*.workers=wgmma_ws",), ("*.workers=mma_sync",)], ids=str)
def test_running_example_lowers_at_odd_sizes(tokens, pins):
    """The GPU tests' running-example configurations lower to CUDA on sm_90a (parts side by side
    in one launch, k and v sharing a block's columns where the workers allow it)."""
    plan = _example_plan(tokens, pins)
    kernels = [l.kernel for l in plan.forward_launches]
    assert all(l.kernel.startswith("rms_norm_qkv_proj_weights") for l in plan.prepare_launches)
    # the folded weights stay contiguous along k: read 16 bytes at a time, never element-wise
    forward = [k.source for k in plan.kernels if k.name in kernels]
    assert not any(re.search(r"rms_norm_qkv_proj_weights_\d+\[", src) for src in forward)
    # parts side by side in one launch, after their shared statistics kernel where there is one;
    # split-k parts have statistics and combine kernels: one launch per part then
    body = [k for k in kernels if k != "rms_norm_qkv_proj_out0_stats"]
    assert body == ["rms_norm_qkv_proj"] or all(k.startswith("rms_norm_qkv_proj_out") for k in kernels)


@pytest.mark.parametrize("workers", ["mma_sync", "wgmma", "wgmma_ws", "thread"])
def test_split_k_last_block_combine(workers):
    """combine = last_block: one kernel per contraction and no combine launch; its arguments
    gain the per-tile counters (a zeroed buffer of two ints per output tile) between the
    workspace and the outputs, and the tile's last block runs the epilogue."""
    extra = {"warps": 4, "stages": 3} if workers != "thread" else {"block_m": 32, "block_n": 32, "block_k": 32}
    module = lower(
        rmsnorm_matmul(M=200, N=136, K=512, split_k=4, combine="last_block", workers=workers, **extra),
        "convert-tile-to-kernel",
    )
    funcs = kernel_funcs(module)
    assert list(funcs) == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj"]
    text = print_module(module)
    bm, bn = (32, 32) if workers == "thread" else (64, 64)
    tiles = -(-200 // bm) * -(-136 // bn)
    assert f"kernel.empty : tensor<4x{tiles}x1x{bm * bn}xf32>" in text  # [split, tiles, contractions, tile]
    assert f"kernel.empty zeroed : tensor<{2 * tiles}xi32>" in text
    main = print_module(funcs["rms_norm_qkv_proj"])
    assert "%counters: !kernel.ptr<i32>, %out: !kernel.ptr<bf16>" in main
    assert main.count("emmy::split_ticket") == 1 and main.count("emmy::split_wait") == 1
    assert ("emmy::barrier_or<" in main) == (workers == "wgmma_ws")
    plan = launch_plan(lower(rmsnorm_matmul(M=200, N=136, K=512, split_k=4, combine="last_block", workers=workers, **extra)))
    assert [b.role for b in plan.buffers if b.name.endswith("counters")] == ["zeroed"]


@pytest.mark.parametrize("workers", ["wgmma", "mma_sync"])
def test_last_block_counters_of_every_part_are_zeroed(workers):
    """The running example's q and k/v parts (one launch each, merge_built) keep a counter
    buffer each, and both stay `zeroed` (garbage counters hand out wrong tickets)."""
    plan = _example_plan(300, (f"*.workers={workers}", "*.split_k=2", "*.combine=last_block"))
    counters = [b for b in plan.buffers if b.dtype == "i32"]
    assert len(counters) == 2 and {b.role for b in counters} == {"zeroed"}
    assert not any(k.name.endswith("_combine") for k in plan.kernels)


def test_last_block_combine_needs_split_k():
    with pytest.raises(EmmyError, match="combine=last_block adds split_k's parts: it needs split_k > 1"):
        lower(rmsnorm_matmul(combine="last_block"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="unknown combine 'later'"):
        lower(rmsnorm_matmul(split_k=2, combine="later").replace('["kernel", "last_block"]', '["kernel", "later"]'),
              "convert-tile-to-kernel")


def test_warp_specialized_needs_sm90a():
    with pytest.raises(EmmyError, match="workers=wgmma_ws needs sm_90a"):
        lower(rmsnorm_matmul(target="sm_90", workers="wgmma_ws"), "convert-tile-to-kernel")


def test_split_k_and_split_fusion_launch_sequence():
    module = lower(rmsnorm_matmul(K=512, split_k=4, workers="mma_sync", block_k=64), "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine"]
    assert funcs["rms_norm_qkv_proj"].grid_dims[2] == 4
    text = print_module(module)
    assert "kernel.empty : tensor<1x64xf32>" in text  # statistics: [prologue reductions, rows]
    assert "kernel.empty : tensor<4x1x1x64x64xf32>" in text  # workspace: [split, contractions, batch, M, N]
    launches = re.findall(r"kernel.launch @(\w+)", text)
    assert launches == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine"]

    module = lower(rmsnorm_matmul(fusion="split"), "convert-tile-to-kernel")
    assert list(kernel_funcs(module)) == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj"]
    main = kernel_funcs(module)["rms_norm_qkv_proj"]
    assert not any(op.result.name_hint == "rs" for op in main.walk() if isinstance(op, K.SharedOp))


def test_dual_contraction_shares_the_a_tile():
    module = lower(gate_up(), "convert-tile-to-kernel")
    f = kernel_funcs(module)["gate_up_silu"]
    names = [op.result.name_hint for op in f.walk() if isinstance(op, K.SharedOp)]
    assert [n for n in names if n != "sC"] == ["sA", "sB0", "sB1"]
    locals_ = [op.result.name_hint for op in f.walk() if isinstance(op, K.LocalOp)]
    assert locals_[:2] == ["acc0", "acc1"]
    calls = callees(f)
    assert calls.count("emmy::mma::warp_tile<32, 16, 32, 64, 32>") == 2
    # A, B gate rows, B up rows (rows n + N); once in the pipeline prologue, once in the loop
    assert calls.count("emmy::cp_async16") == 6
    assert any(op.name == "math.exp" for op in f.walk())


def test_index_arithmetic_contiguous_through_div_rem():
    """k = h * D + d read as [h, s, d]: still 16-byte contiguous along k, so A uses cp.async."""
    module = lower(heads_matmul_residual(), "convert-tile-to-kernel")
    f = kernel_funcs(module)["o_proj_residual"]
    calls = callees(f)
    assert calls.count("emmy::cp_async16") == 4  # A and B, prologue and loop
    # nothing computed is stored into the A tile (the only 8-lane bf16 stores are the outputs)
    outs = set(f.body.block.args[-1:])
    packed = [op for op in f.walk() if isinstance(op, K.StoreOp) and isinstance(op.value.owner, K.PackOp)]
    assert packed and all(op.ptr in outs for op in packed if op.value.type == K.VectorType(K.BFloat16Type(), [8]))
    # the staged epilogue reads the residual 8 columns (16 bytes) at a time
    loads = [op for op in f.walk() if isinstance(op, K.LoadOp) and op.ptr.name_hint == "r0"]
    assert loads and all(op.result.type == K.VectorType(K.BFloat16Type(), [8]) for op in loads)


def test_computed_a_without_room_for_raw_copies_is_staged_from_registers():
    """sm_80 has 163 KB: 128x128 tiles, block_k 128, 2 stages fit, their raw copies do not."""
    module = lower(
        rmsnorm_matmul(M=128, N=128, K=256, target="sm_80", block_m=128, block_n=128, block_k=128, stages=2, warps=8),
        "convert-tile-to-kernel",
    )
    f = kernel_funcs(module)["rms_norm_qkv_proj"]
    names = [op.result.name_hint for op in f.walk() if isinstance(op, (K.SharedOp, K.LocalOp))]
    assert "raw0" not in names and "stage_a" in names


def test_wgmma_needs_sm90a():
    with pytest.raises(EmmyError, match="workers=wgmma needs sm_90a"):
        lower(rmsnorm_matmul(target="sm_90", workers="wgmma"), "convert-tile-to-kernel")


def test_shared_memory_over_the_target_limit():
    with pytest.raises(EmmyError, match="bytes of shared memory exceed"):
        lower(
            rmsnorm_matmul(M=256, N=256, K=512, target="sm_80", block_m=256, block_n=256, block_k=128, stages=2, warps=8),
            "convert-tile-to-kernel",
        )


def test_undecided_knobs():
    text = silu_mul().replace('= 128, "pinned", "test"', "")
    with pytest.raises(EmmyError, match="undecided"):
        lower(text, "convert-tile-to-kernel")


def test_unknown_kind_builder():
    from emmy.passes.convert_tile_to_kernel import builder_for

    with pytest.raises(EmmyError, match="no kernel builder for kind 'bogus'"):
        builder_for("bogus")


# ---------------------------------------------------------------------------------------------
# Elementwise and reduction
# ---------------------------------------------------------------------------------------------


def test_elementwise_vectorized():
    module = lower(silu_mul(), "convert-tile-to-kernel")
    f = kernel_funcs(module)["silu_mul"]
    loads = [op for op in f.walk() if isinstance(op, K.LoadOp)]
    stores = [op for op in f.walk() if isinstance(op, K.StoreOp)]
    assert [str(op.result.type) for op in loads] == ["vector<8xbf16>", "vector<8xbf16>"]
    assert [str(op.value.type) for op in stores] == ["vector<8xbf16>"]
    assert f.grid_dims == (-(-7 * 3072 // 8 // 256), 1, 1) and f.block_dims == (128, 1, 1)


def test_elementwise_odd_extent_falls_back_to_scalars():
    module = lower(silu_mul(M=3, N=5, vector=8), "convert-tile-to-kernel")
    f = kernel_funcs(module)["silu_mul"]
    assert all(op.result.type == K.BFloat16Type() for op in f.walk() if isinstance(op, K.LoadOp))


def test_reduction_rows_per_block():
    module = lower(rms_norm(rows_per_block=4, threads=256), "convert-tile-to-kernel")
    f = kernel_funcs(module)["rms_norm"]
    assert "emmy::group_sum<64>" in callees(f)
    assert f.grid_dims == (2, 1, 1)
    module = lower(rms_norm(M=64, rows_per_block=16, threads=256, N=512), "convert-tile-to-kernel")
    assert "emmy::warp_sum<16>" in callees(kernel_funcs(module)["rms_norm"])


# ---------------------------------------------------------------------------------------------
# cuda stage and the launch plan
# ---------------------------------------------------------------------------------------------


def test_launch_plan_of_a_split_k_kernel():
    module = lower(rmsnorm_matmul(K=512, split_k=2, workers="mma_sync", stages=4, block_m=64, block_n=64, block_k=64))
    plan = launch_plan(module)
    assert plan.name == "f" and plan.entry == "emmy_launch_f" and plan.target == "sm_90a"
    roles = [(b.name, b.role, b.position, b.torch_name) for b in plan.buffers]
    assert roles == [
        ("x", "input", 0, "x"),
        ("norm_weight", "param", 1, "norm.weight"),
        ("proj_weight", "param", 2, "proj.weight"),
        ("out", "output", 0, None),
        ("rms_norm_qkv_proj_tmp", "temp", None, None),
        ("rms_norm_qkv_proj_tmp_1", "temp", None, None),
    ]
    assert plan.buffer("rms_norm_qkv_proj_tmp_1").shape == (2, 1, 1, 64, 64)
    assert plan.buffer("rms_norm_qkv_proj_tmp_1").nbytes == 2 * 64 * 64 * 4
    assert [l.kernel for l in plan.launches] == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine"]
    main = plan.launches[1]
    assert main.args == ("x", "norm_weight", "proj_weight", "rms_norm_qkv_proj_tmp", "rms_norm_qkv_proj_tmp_1")
    assert main.grid == (1, 1, 2) and main.smem > 48 * 1024
    src = plan.source
    assert src.startswith("// Generated by Emmy")
    assert '#include "emmy.cuh"' in src
    for k in plan.kernels:
        assert 'extern "C" __global__ void __launch_bounds__(' in k.source and f" {k.name}(" in k.source
    host = src[src.index('extern "C" void emmy_launch_f('):]
    assert "const __nv_bfloat16* x, const __nv_bfloat16* norm_weight, const __nv_bfloat16* proj_weight, __nv_bfloat16* out, float* rms_norm_qkv_proj_tmp, float* rms_norm_qkv_proj_tmp_1, cudaStream_t stream" in host
    assert f"cudaFuncSetAttribute(rms_norm_qkv_proj, cudaFuncAttributeMaxDynamicSharedMemorySize, {main.smem});" in host
    order = [host.index(f"{k}<<<") for k in ("rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine")]
    assert order == sorted(order)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_overlapped_launches_in_the_plan_and_host_code(target):
    """kernel-overlap-launches: on sm_90+ the launches after the first are launched with
    programmatic stream serialization (cudaLaunchKernelEx on the host), their kernels wait for
    the kernel before them first, and each kernel with a successor lets it launch at its end."""
    text = rmsnorm_matmul(K=512, target=target, split_k=2, workers="mma_sync", stages=4, block_m=64, block_n=64, block_k=64)
    passes = LOWER.replace("convert-kernel-to-cuda", "kernel-overlap-launches,convert-kernel-to-cuda")
    assert passes != LOWER
    plan = launch_plan(lower(text, passes))
    names = ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine"]
    assert [la.kernel for la in plan.launches] == names
    host = plan.source[plan.source.index('extern "C" void emmy_launch_f('):]
    kernels = {k.name: k.source for k in plan.kernels}
    if target == "sm_80":
        assert not any(la.overlap for la in plan.launches)
        assert "cudaLaunchKernelEx" not in host and all(f"{n}<<<" in host for n in names)
        assert not any("grid_dependency_wait" in s or "allow_dependents" in s for s in kernels.values())
        return
    assert [la.overlap for la in plan.launches] == [False, True, True]
    assert "rms_norm_qkv_proj_stats<<<" in host
    assert host.count("cudaLaunchKernelEx(&config, ") == 2
    assert "emmy_overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;" in host
    for name in names:
        body = kernels[name][kernels[name].index("{"):]
        waits, allows = "emmy::grid_dependency_wait();" in body, "emmy::allow_dependents();" in body
        assert waits == (name != names[0]) and allows == (name != names[-1])
        if waits:  # before anything else the kernel does
            assert body.index("emmy::grid_dependency_wait();") < body.index("threadIdx")
        if allows:  # the kernel's last statement
            assert body.rstrip().removesuffix("}").rstrip().endswith("emmy::allow_dependents();")


def test_launch_plan_errors():
    module = lower(silu_mul(), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="no cuda.module"):
        launch_plan(module)


def test_cxx_constants_and_types():
    from xdsl.dialects.builtin import BFloat16Type, Float32Type, Float64Type

    from emmy.backend.cxx import c_float

    assert c_float(1.0, Float32Type()) == "1.0f"
    assert c_float(float("-inf"), Float32Type()) == "-INFINITY"
    assert c_float(float("nan"), Float32Type()) == "NAN"
    assert c_float(1e-6, Float32Type()) == "9.99999997e-07f" or c_float(1e-6, Float32Type()) == "1e-06f"
    assert c_float(0.5, BFloat16Type()) == "__float2bfloat16_rn(0.5f)"
    assert c_float(0.1, Float64Type()) == "0.1"


def test_rounded_pairs_pack_with_one_conversion_each():
    """A bf16 vector of f32 values rounded one by one is emitted as packed conversions, two
    values per instruction (the staged epilogue's results, the folded weights); a vector of
    anything else keeps its element list."""
    from emmy.backend.cxx import emit_kernel
    from emmy.lowering.kb import KB

    kb = KB.new_func("pairs", [K.PtrType(bf16), K.PtrType(f32)], (1, 1, 1), (32, 1, 1), 0, arg_names=["out", "x"])
    out, x = kb.func.body.block.args
    vals = [kb.load(x, kb.idx(i)) for i in range(4)]
    rounded = [kb.to_type(v, bf16) for v in vals]
    kb.store(kb.pack(rounded, VectorType(bf16, [4])), out, kb.idx(0))
    kb.store(kb.pack([rounded[0], rounded[0]], VectorType(bf16, [2])), out, kb.idx(8))
    loaded = [kb.load(out, kb.idx(i)) for i in range(2)]
    kb.store(kb.pack(loaded, VectorType(bf16, [2])), out, kb.idx(16))
    text = emit_kernel(kb.finish())
    assert re.search(r"= emmy::bf16_pairs\(ld_\d+, ld_\d+, ld_\d+, ld_\d+\);", text)
    assert len(re.findall(r"emmy::bf16_pairs\(", text)) == 2
    assert re.search(r"emmy::Vec<__nv_bfloat16, 2>\{\{ld_\d+, ld_\d+\}\}", text)


def test_approximate_math_uses_fast_intrinsics():
    """f32 exp and division marked fastmath<afn> (their results are rounded to bf16, see
    convert-tensor-to-loop) use CUDA's fast intrinsics; unmarked ones and f64 stay exact."""
    from xdsl.dialects import arith, math
    from xdsl.dialects.builtin import f64

    from emmy.backend.cxx import emit_kernel
    from emmy.lowering.kb import KB

    afn = arith.FastMathFlagsAttr([arith.FastMathFlag.APPROX_FUNC])
    kb = KB.new_func("m", [K.PtrType(f32), K.PtrType(f64)], (1, 1, 1), (32, 1, 1), 0, arg_names=["x", "y"])
    x, y = kb.func.body.block.args
    a, d = kb.load(x, kb.idx(0)), kb.load(y, kb.idx(0))
    outs = [
        kb.insert(math.ExpOp(a, fastmath=afn)).results[0],
        kb.insert(arith.DivfOp(a, a, flags=afn)).results[0],
        kb.insert(math.ExpOp(a)).results[0],
        kb.insert(arith.DivfOp(a, a)).results[0],
    ]
    for i, v in enumerate(outs):
        kb.store(v, x, kb.idx(i + 1))
    kb.store(kb.insert(arith.DivfOp(d, d, flags=afn)).results[0], y, kb.idx(1))
    kb.store(kb.insert(math.ExpOp(d, fastmath=afn)).results[0], y, kb.idx(2))
    text = emit_kernel(kb.finish())
    assert re.search(r"= __expf\(ld_\d+\);", text)
    assert re.search(r"= __fdividef\(ld_\d+, ld_\d+\);", text)
    assert re.search(r"= expf\(ld_\d+\);", text)
    assert re.search(r"float \w+ = ld_\d+ / ld_\d+;", text)
    assert re.search(r"double \w+ = ld_\d+ / ld_\d+;", text)  # f64: exact
    assert re.search(r"double \w+ = exp\(ld_\d+\);", text)


def test_kernel_ir_round_trips():
    module = lower(rmsnorm_matmul(workers="wgmma", stages=3), "convert-tile-to-kernel")
    text = print_module(module)
    ctx = make_context()
    again = parse_module(ctx, text, "again.mlir")
    assert print_module(again) == text
    generic = print_module(module, generic=True)
    assert print_module(parse_module(make_context(), generic, "generic.mlir")) == text


def test_layer_pipeline_lowers():
    """The whole Qwen3 layer through every pass, then the kernel passes: one output buffer and
    at least five launches in the launch plan."""
    text = (ROOT / "test/filecheck/inputs/torch-layer.mlir").read_text()
    front = "convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile,decide-forks"
    ctx = make_context()
    module = parse_module(ctx, text, "torch-layer.mlir")
    run_passes(ctx, module, parse_pipeline(front))
    run_passes(ctx, module, parse_pipeline(LOWER))
    plan = launch_plan(module)
    assert [b.role for b in plan.buffers].count("output") == 1
    assert len(plan.launches) >= 5


def test_prepare_phase_in_the_launch_plan_and_host_code():
    """The folded norm weights are computed by prepare-phase launches: their buffers are
    `prepared`, the plan keeps them apart from the forward launches, and the .cu has a second
    host entry `emmy_prepare_<f>` that launches them (and only them)."""
    plan = _example_plan(64)
    prepared = [b.name for b in plan.buffers if b.role == "prepared"]
    assert len(prepared) == 3  # q, k and v weights times the norm weight
    assert [l.kernel for l in plan.forward_launches] == ["rms_norm_qkv_proj"]
    assert len(plan.prepare_launches) == 3
    for launch in plan.prepare_launches:  # parameters in, prepared buffers out
        roles = {plan.buffer(a).role for a in launch.args if isinstance(a, str)}
        assert roles <= {"param", "prepared"} and "prepared" in roles
    assert plan.prepare_entry == f"emmy_prepare_{plan.name}"
    src_text = plan.source
    prep = src_text[src_text.index(f'extern "C" void {plan.prepare_entry}('):src_text.index(f'extern "C" void {plan.entry}(')]
    fwd = src_text[src_text.index(f'extern "C" void {plan.entry}('):]
    assert prep.count("<<<") == 3 and "rms_norm_qkv_proj_weights" in prep
    assert fwd.count("<<<") == 1 and "rms_norm_qkv_proj_weights<<<" not in fwd


def test_no_prepare_entry_without_prepare_launches():
    plan = launch_plan(lower(silu_mul(), "convert-tile-to-kernel,convert-kernel-to-cuda"))
    assert plan.prepare_launches == [] and plan.prepare_entry is None
    assert "emmy_prepare_" not in plan.source


def test_kernel_params_and_tensor_maps_on_the_host():
    """The runtime passes cuLaunchKernel an array of pointers to each value (pointers, scalars,
    128-byte tensor maps); without the CUDA driver library a tensor map is a clear error."""
    import ctypes

    from emmy.backend.plan import MapView
    from emmy.backend.run import KernelParams, tensor_map

    params = KernelParams([ctypes.c_void_p(0x1000), ctypes.c_int(7)])
    slots = (ctypes.c_void_p * 2).from_address(params.address)
    assert ctypes.c_void_p.from_address(slots[0]).value == 0x1000
    assert ctypes.c_int.from_address(slots[1]).value == 7
    assert KernelParams([]).address == 0
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        class FakeTensor:
            def data_ptr(self):
                return 0x10000

        view = MapView(rows=64, cols=32, stride=32, offset=0, box_rows=64, box_cols=32)
        with pytest.raises(EmmyError, match=r"tensor maps need the CUDA driver library \(libcuda.so.1\)"):
            tensor_map(view, FakeTensor(), "argument #3 of k")


def test_threads_past_a_computed_a_tile_read_inside_it():
    """LayerNorm -> linear at 13 x 80: a 16 x 16 A tile is 32 chunks of 8 for 64 threads. The
    threads past the tile skip their store, but they still read the raw rows and the row
    statistics in shared memory: their row must stay inside the tile (it read past the dynamic
    shared memory, an illegal address on the H200, before)."""
    from emmy.driver import CompileOptions, compile_model

    block = str(Path(__file__).resolve().parent / "models" / "mlp_block.py") + ":make"
    module = compile_model(CompileOptions(model=block, layer=None, target="sm_90a", stop_after="kernel")).module
    func = next(op for op in module.walk() if isinstance(op, K.KernelFuncOp) and op.sym_name.data == "layer_norm_fc1_gelu")
    clamps = [op for op in func.walk() if isinstance(op, arith.MinSIOp) and isinstance(op.rhs.owner, arith.ConstantOp)
              and op.rhs.owner.value.value.data == 15]
    assert clamps, "no chunk row clamped to the tile's last row (15)"


def test_a_kernel_is_never_named_after_a_function_the_source_sees():
    """A loop named after its one op (`abs`) declared abs a second time with "C" linkage."""
    from emmy.lowering.common import kernel_ident

    assert kernel_ident("abs") == "abs_k" and kernel_ident("exp") == "exp_k"
    assert kernel_ident("attention") == "attention" and kernel_ident("o_proj.residual") == "o_proj_residual"
