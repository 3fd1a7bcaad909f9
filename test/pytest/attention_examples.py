"""Hand-written attention `tile.kernel`s (the fused Qwen3 attention loop: q/k RMSNorm over the
head dim and rotary embedding on a fused qkv buffer, grouped-query heads, causal softmax, P x V;
and plain attention) and the helpers that build them and compile their CUDA with nvcc, for the
attention tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from xdsl.parser import Parser

from emmy.analysis.classify import classify
from emmy.backend.cxx import emit_kernel
from emmy.context import make_context
from emmy.dialects.tile import KernelOp
from emmy.lowering import attention as A
from emmy.schedule.plan import plan_for
from emmy.targets import get_target

def build_attention(op, info, knobs, target):
    """The attention builder on the plan of `knobs` (decided values, possibly overridden)."""
    return A.build(op, info, plan_for(info, knobs, target))


ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "emmy" / "backend" / "runtime"

# --------------------------------------------------------------------------------------------
# Attention bodies
# --------------------------------------------------------------------------------------------


class _Body:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def v(self, text: str, hint: str = "v") -> str:
        self.n += 1
        name = f"%{hint}{self.n}x"
        self.lines.append(f"{name} = {text}")
        return name

    def raw(self, text: str) -> None:
        self.lines.append(text)


def attention_knobs(block_q=64, block_kv=64, workers="mma_sync", stages=2, warps=4) -> str:
    def k(name, dom, val):
        vals = ", ".join(f'"{d}"' if isinstance(d, str) else str(d) for d in dom)
        v = f'"{val}"' if isinstance(val, str) else str(val)
        return f'{name} = #tile.knob<"{name}", [{vals}] = {v}, "pinned", "test">'

    return "{" + ", ".join(
        [
            k("block_q", (16, 32, 64, 128), block_q),
            k("block_kv", (16, 32, 64, 128), block_kv),
            k("workers", ("thread", "mma_sync", "wgmma"), workers),
            k("stages", (1, 2, 3), stages),
            k("warps", (1, 2, 4, 8), warps),
        ]
    ) + "}"


def attention_ir(
    T: int = 64,
    H: int = 4,
    HKV: int = 2,
    D: int = 128,
    *,
    qwen: bool = True,
    causal: bool = True,
    divide_in_pv: bool = True,
    break_softmax: bool = False,
    knobs: str | None = None,
    target: str = "sm_90",
    scale: float | None = None,
    round_score: bool = False,
    out_scale: float | None = None,
) -> str:
    """A module holding one attention tile.kernel.

    scale: the score's factor (default 1 / sqrt(D)); round_score: the scaled score rounded to
    bf16 and back (no longer exactly dot * scale in f32); out_scale: the normalized output
    multiplied by it before it is rounded and stored.

    qwen=True: inputs qkv [T, (H + 2 HKV) D], q_norm/k_norm weights [D], cos/sin [1, T, D];
    Q/K = rope(rmsnorm(x)) as Qwen3 computes them (bf16 roundings), V plain; output [T, H D].
    qwen=False: q [H, T, D], k/v [HKV, T, D], output [H, T, D].
    """
    scale = 1.0 / D**0.5 if scale is None else scale
    G = H // HKV
    W = (H + 2 * HKV) * D
    b = _Body()
    c = {}

    def ci(n: int) -> str:
        if n not in c:
            c[n] = b.v(f"arith.constant {n} : index", "c")
        return c[n]

    for n in sorted({0, G, D, D // 2, H * D, (H + HKV) * D}):  # index constants, defined up front
        ci(n)
    h = b.v('loop.axis "h" : index', "h")
    q = b.v('loop.axis "q" : index', "q")
    e = b.v('loop.axis "e" : index', "e")
    inv_d = b.v(f"arith.constant {1.0 / D:e} : f32", "cf")
    eps = b.v("arith.constant 1.000000e-06 : f32", "cf")
    cscale = b.v(f"arith.constant {scale:e} : f32", "cf")
    ninf = b.v("arith.constant 0xFF800000 : f32", "cf")

    def col(head: str, base: int, d: str) -> str:
        hd = b.v(f"arith.muli {head}, {ci(D)} : index", "i")
        x = b.v(f"arith.addi {hd}, {d} : index", "i")
        return b.v(f"arith.addi {x}, {ci(base)} : index", "i") if base else x

    def sumsq(head: str, base: int, row: str, axis: str) -> str:
        b.raw(f"%ss{b.n + 1}x = loop.reduce sum [\"{axis}\"] : f32 {{")
        name = f"%ss{b.n + 1}x"
        b.n += 1
        r = b.v(f'loop.axis "{axis}" : index', "r")
        x = b.v(f"loop.load %X[{row}, {col(head, base, r)}] : tensor<{T}x{W}xbf16> -> bf16", "x")
        xf = b.v(f"arith.extf {x} : bf16 to f32", "f")
        sq = b.v(f"arith.mulf {xf}, {xf} : f32", "f")
        b.raw(f"loop.yield {sq} : f32")
        b.raw("}")
        return name

    def rope(head: str, base: int, row: str, d: str, ss: str, w: str) -> str:
        ms = b.v(f"arith.mulf {ss}, {inv_d} : f32", "f")
        ve = b.v(f"arith.addf {ms}, {eps} : f32", "f")
        rs = b.v(f"math.rsqrt {ve} : f32", "f")

        def norm(dd: str) -> str:
            x = b.v(f"loop.load %X[{row}, {col(head, base, dd)}] : tensor<{T}x{W}xbf16> -> bf16", "x")
            xf = b.v(f"arith.extf {x} : bf16 to f32", "f")
            y = b.v(f"arith.mulf {xf}, {rs} : f32", "f")
            yb = b.v(f"arith.truncf {y} : f32 to bf16", "b")
            wv = b.v(f"loop.load {w}[{dd}] : tensor<{D}xbf16> -> bf16", "w")
            return b.v(f"arith.mulf {wv}, {yb} : bf16", "b")

        n = norm(d)
        dp = b.v(f"arith.addi {d}, {ci(D // 2)} : index", "i")
        pd = b.v(f"arith.remui {dp}, {ci(D)} : index", "i")
        npart = norm(pd)
        lt = b.v(f"arith.cmpi ult, {d}, {ci(D // 2)} : index", "p")
        neg = b.v(f"arith.negf {npart} : bf16", "b")
        rot = b.v(f"arith.select {lt}, {neg}, {npart} : bf16", "b")
        cs = b.v(f"loop.load %COS[{ci(0)}, {row}, {d}] : tensor<1x{T}x{D}xbf16> -> bf16", "b")
        sn = b.v(f"loop.load %SIN[{ci(0)}, {row}, {d}] : tensor<1x{T}x{D}xbf16> -> bf16", "b")
        t1 = b.v(f"arith.mulf {n}, {cs} : bf16", "b")
        t2 = b.v(f"arith.mulf {rot}, {sn} : bf16", "b")
        return b.v(f"arith.addf {t1}, {t2} : bf16", "b")

    hk = b.v(f"arith.divui {h}, {ci(G)} : index", "hk") if G > 1 else h
    qss = sumsq(h, 0, q, "r") if qwen else None

    def score(kv: str) -> str:
        kss = sumsq(hk, H * D, kv, "r2") if qwen else None
        b.raw(f"%dot{b.n + 1}x = loop.reduce sum [\"d\"] : f32 {{")
        dot = f"%dot{b.n + 1}x"
        b.n += 1
        d = b.v('loop.axis "d" : index', "d")
        if qwen:
            qv = rope(h, 0, q, d, qss, "%QW")
            kv_ = rope(hk, H * D, kv, d, kss, "%KW")
        else:
            qv = b.v(f"loop.load %Q[{h}, {q}, {d}] : tensor<{H}x{T}x{D}xbf16> -> bf16", "b")
            kv_ = b.v(f"loop.load %K[{hk}, {kv}, {d}] : tensor<{HKV}x{T}x{D}xbf16> -> bf16", "b")
        qf = b.v(f"arith.extf {qv} : bf16 to f32", "f")
        kf = b.v(f"arith.extf {kv_} : bf16 to f32", "f")
        pr = b.v(f"arith.mulf {qf}, {kf} : f32", "f")
        b.raw(f"loop.yield {pr} : f32")
        b.raw("}")
        s = b.v(f"arith.mulf {dot}, {cscale} : f32", "s")
        if round_score:
            sb = b.v(f"arith.truncf {s} : f32 to bf16", "b")
            s = b.v(f"arith.extf {sb} : bf16 to f32", "s")
        if causal:
            gt = b.v(f"arith.cmpi ugt, {kv}, {q} : index", "p")
            s = b.v(f"arith.select {gt}, {ninf}, {s} : f32", "s")
        return s

    b.raw('%mx = loop.reduce max ["kv"] : f32 {')
    kv = b.v('loop.axis "kv" : index', "kv")
    b.raw(f"loop.yield {score(kv)} : f32")
    b.raw("}")
    b.raw('%sm = loop.reduce sum ["kv"] : f32 {')
    kv = b.v('loop.axis "kv" : index', "kv")
    s = score(kv)
    sh = b.v(f"arith.subf {s}, %mx : f32", "f")
    ex = b.v(f"math.exp {sh} : f32", "f")
    b.raw(f"loop.yield {ex} : f32")
    b.raw("}")
    b.raw('%pv = loop.reduce sum ["kv"] : f32 {')
    kv = b.v('loop.axis "kv" : index', "kv")
    s = score(kv)
    sh = b.v(f"arith.subf {s}, {'%sm' if break_softmax else '%mx'} : f32", "f")
    ex = b.v(f"math.exp {sh} : f32", "f")
    p = b.v(f"arith.divf {ex}, %sm : f32", "f") if divide_in_pv else ex
    pb = b.v(f"arith.truncf {p} : f32 to bf16", "b")
    pf = b.v(f"arith.extf {pb} : bf16 to f32", "f")
    if qwen:
        vv = b.v(f"loop.load %X[{kv}, {col(hk, (H + HKV) * D, e)}] : tensor<{T}x{W}xbf16> -> bf16", "b")
    else:
        vv = b.v(f"loop.load %V[{hk}, {kv}, {e}] : tensor<{HKV}x{T}x{D}xbf16> -> bf16", "b")
    vf = b.v(f"arith.extf {vv} : bf16 to f32", "f")
    pvv = b.v(f"arith.mulf {pf}, {vf} : f32", "f")
    b.raw(f"loop.yield {pvv} : f32")
    b.raw("}")
    o = "%pv" if divide_in_pv else b.v("arith.divf %pv, %sm : f32", "f")
    if out_scale is not None:
        k = b.v(f"arith.constant {out_scale:e} : f32", "cf")
        o = b.v(f"arith.mulf {o}, {k} : f32", "f")
    ob = b.v(f"arith.truncf {o} : f32 to bf16", "b")
    if qwen:
        b.raw(f"loop.store {ob}, 0 [{q}, {col(h, 0, e)}] : bf16")
        out_t = f"tensor<{T}x{H * D}xbf16>"
        ins = (
            f"ins(%x, %qw, %kw, %cos, %sin : tensor<{T}x{W}xbf16>, tensor<{D}xbf16>, tensor<{D}xbf16>, "
            f"tensor<1x{T}x{D}xbf16>, tensor<1x{T}x{D}xbf16>)"
        )
        bb = (
            f"^bb0(%X: tensor<{T}x{W}xbf16>, %QW: tensor<{D}xbf16>, %KW: tensor<{D}xbf16>, "
            f"%COS: tensor<1x{T}x{D}xbf16>, %SIN: tensor<1x{T}x{D}xbf16>):"
        )
        fargs = (
            f"%x: tensor<{T}x{W}xbf16>, %qw: tensor<{D}xbf16>, %kw: tensor<{D}xbf16>, "
            f"%cos: tensor<1x{T}x{D}xbf16>, %sin: tensor<1x{T}x{D}xbf16>"
        )
        axes = f"[h = {H}, q = {T}, e = {D}, kv = {T}, d = {D}, r = {D}, r2 = {D}]"
    else:
        b.raw(f"loop.store {ob}, 0 [{h}, {q}, {e}] : bf16")
        out_t = f"tensor<{H}x{T}x{D}xbf16>"
        ins = f"ins(%q, %k, %v : tensor<{H}x{T}x{D}xbf16>, tensor<{HKV}x{T}x{D}xbf16>, tensor<{HKV}x{T}x{D}xbf16>)"
        bb = f"^bb0(%Q: tensor<{H}x{T}x{D}xbf16>, %K: tensor<{HKV}x{T}x{D}xbf16>, %V: tensor<{HKV}x{T}x{D}xbf16>):"
        fargs = f"%q: tensor<{H}x{T}x{D}xbf16>, %k: tensor<{HKV}x{T}x{D}xbf16>, %v: tensor<{HKV}x{T}x{D}xbf16>"
        axes = f"[h = {H}, q = {T}, e = {D}, kv = {T}, d = {D}]"
    b.raw("loop.yield")
    body = "\n      ".join(b.lines)
    return f"""builtin.module attributes {{emmy.target = "{target}"}} {{
  func.func @f({fargs}) -> {out_t} {{
    %o = tile.kernel @attention kind "attention" axes {axes}
        knobs {knobs or attention_knobs()}
        {ins} -> {out_t} {{
      {bb}
      {body}
    }}
    func.return %o : {out_t}
  }}
}}
"""


def parse_kernel(text: str) -> KernelOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    (op,) = [o for o in module.walk() if isinstance(o, KernelOp)]
    return op


def build_text(text: str, target: str = "sm_90"):
    op = parse_kernel(text)
    info = classify(op)
    built = build_attention(op, info, op.knob_values(), get_target(target))
    return op, info, built


_ARCH = {
    "sm_80": ["-arch=sm_80"],
    "sm_90": ["-arch=sm_90"],
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
}


def cuda_source(built) -> str:
    kernels = "\n".join(emit_kernel(f) for f in built.funcs)
    return f'#include "emmy.cuh"\n\n{kernels}'


def nvcc_compile(src: str, arch: str, tmp_path: Path) -> tuple[str, Path]:
    cu = tmp_path / f"attn_{arch}.cu"
    cu.write_text(src)
    obj = tmp_path / f"attn_{arch}.o"
    cmd = ["nvcc", "-c", "-O3", "-std=c++17", *_ARCH[arch], "-Xptxas", "-v", f"-I{RUNTIME}", str(cu), "-o", str(obj)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stderr, obj


def check_ptxas(log: str) -> None:
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, log
    assert "bytes stack frame" in log


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
