"""Helpers of the knob, legality, rules and decide-forks tests: a loop-stage example's fused op,
its classification, a module after decide-forks, a legal contraction schedule (GOOD), a
projection with a residual in its epilogue, and a model's layer before any decision."""

from __future__ import annotations

import loop_examples as L
from emmy.analysis.classify import classify
from emmy.context import make_context
from emmy.dialects.loop import FusedOp
from emmy.ir_io import parse_module, parse_pipeline, run_passes
from emmy.targets import get_target


def fused_of(text: str) -> FusedOp:
    module = parse_module(make_context(), text, "example")
    return next(op for op in module.walk() if isinstance(op, FusedOp))


def info_of(example) -> object:
    return classify(fused_of(example[0]))


def decided(text: str, pin: str = ""):
    ctx = make_context()
    module = parse_module(ctx, text, "example")
    run_passes(ctx, module, parse_pipeline(f'convert-loop-to-tile,decide-forks{{pin="{pin}"}}'))
    return module


SM90A, SM90, SM80, SM86 = (get_target(n) for n in ("sm_90a", "sm_90", "sm_80", "sm_86"))

# a legal contraction schedule that tests change one knob of
GOOD = {
    "block_m": 128, "block_n": 128, "block_k": 64, "split_k": 1, "stages": 4,
    "workers": "wgmma", "warps": 8, "vector": 8,
}


def matmul_residual(M, N, K):
    """x @ w^T + r: a projection whose epilogue adds a tensor (o_proj and down_proj's residual)."""
    text, args = L.matmul(M, N, K, target="sm_90a")
    text = text.replace(f"%w: tensor<{N}x{K}xbf16>) ->", f"%w: tensor<{N}x{K}xbf16>, %r: tensor<{M}x{N}xbf16>) ->")
    text = text.replace(f"ins(%x, %w : tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>)",
                        f"ins(%x, %w, %r : tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>, tensor<{M}x{N}xbf16>)")
    text = text.replace(f"%wa: tensor<{N}x{K}xbf16>):", f"%wa: tensor<{N}x{K}xbf16>, %ra: tensor<{M}x{N}xbf16>):")
    text = text.replace("    %o = arith.truncf %acc : f32 to bf16\n", f"""    %rv = loop.load %ra[%m, %n] : tensor<{M}x{N}xbf16> -> bf16
    %rf = arith.extf %rv : bf16 to f32
    %sum = arith.addf %acc, %rf : f32
    %o = arith.truncf %sum : f32 to bf16
""")
    assert "%sum" in text and "%ra" in text
    return text, args + [(M, N)]


def layer_before_decisions(model: str, tokens: int, target: str = "sm_90a"):
    """(ctx, module) of a model's layer 0 at the tile stage, no knob decided yet."""
    from emmy.driver import CompileOptions, compile_model

    seen = {}

    def keep(name, module):
        if name == "convert-loop-to-tile":
            seen["tile"] = module.clone()

    compile_model(CompileOptions(model=model, layer=0, tokens=tokens, target=target, stop_after="tile"), keep)
    return make_context(), seen["tile"]
