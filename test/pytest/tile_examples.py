"""Hand-written tile-stage modules of the kernel kinds (contractions with their epilogues,
elementwise, reductions) and the helpers that lower them, for the kernel-builder tests."""

from __future__ import annotations

from pathlib import Path

from emmy.backend.plan import launch_plan
from emmy.context import make_context
from emmy.dialects import kernel as K
from emmy.ir_io import parse_module, parse_pipeline, run_passes

LOWER = "convert-tile-to-kernel,convert-kernel-to-cuda"


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


def weighted_norm_matmul(M=200, N=256, K=1024, **knobs) -> str:
    """The factored RMSNorm projection (A = g * x, rstd in the epilogue) with the norm weight g
    an input, so loop-hoist-params leaves it in A; wgmma_ws 128x128 tiles."""
    k = dict(block_m=128, block_n=128, stages=4, workers="wgmma_ws", warps=8)
    k.update(knobs)
    return rmsnorm_matmul(M, N, K, name="norm_proj", factored=True, g_role="input", **k)


def example_trace(tokens: int):
    """The running example (tools/running_example.py) traced at `tokens` rows."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from running_example import make

    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    src = ModelSource(spec="running_example.py:make", kind="factory", model_id="example", factory=lambda: make(tokens))
    return trace_layer(src, 0, tokens)


def example_plan(tokens: int, pins=()):
    """The launch plan of the running example at `tokens` rows on sm_90a, with `pins`."""
    from emmy.driver import CompileOptions, compile_traced

    opts = CompileOptions(model="example", layer=0, tokens=tokens, target="sm_90a", pins=tuple(pins))
    return launch_plan(compile_traced(example_trace(tokens), opts).module)
