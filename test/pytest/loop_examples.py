"""Hand-written loop-stage modules (docs/ir.md) of every kernel kind, for the tile-stage tests.

Each function returns MLIR text of a module with one `func.func @f` holding one `loop.fused`,
and the shapes of its arguments.
"""

from __future__ import annotations


def _module(target: str, body: str) -> str:
    return f'builtin.module attributes {{emmy.target = "{target}"}} {{\n{body}\n}}\n'


def matmul(M: int, N: int, K: int, *, target: str = "sm_90", name: str = "proj", f32_out: bool = False) -> tuple[str, list]:
    """out[m, n] = bf16(sum_k x[m, k] * w[n, k]); with `f32_out` that value widened and stored as
    f32 (OLMo-2's o_proj feeding the norm after it)."""
    ot = f"tensor<{M}x{N}x{'f32' if f32_out else 'bf16'}>"
    store = ("    %o32 = arith.extf %o : bf16 to f32\n    loop.store %o32, 0 [%m, %n] : f32" if f32_out
             else "    loop.store %o, 0 [%m, %n] : bf16")
    body = f"""
func.func @f(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> {ot} {{
  %out = loop.fused @{name} axes [m = {M}, n = {N}, k = {K}]
      ins(%x, %w : tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>) -> {ot} {{
  ^bb0(%xa: tensor<{M}x{K}xbf16>, %wa: tensor<{N}x{K}xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %acc = loop.reduce sum ["k"] : f32 {{
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<{M}x{K}xbf16> -> bf16
      %b = loop.load %wa[%n, %k] : tensor<{N}x{K}xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %p = arith.mulf %af, %bf : f32
      loop.yield %p : f32
    }}
    %o = arith.truncf %acc : f32 to bf16
{store}
    loop.yield
  }}
  func.return %out : {ot}
}}"""
    return _module(target, body), [(M, K), (N, K)]


def rmsnorm_matmul(M: int, N: int, K: int, *, target: str = "sm_90") -> tuple[str, list]:
    """The running example: RMSNorm (sum of squares prologue) fused into the q/k/v projection."""
    inv = f"{1.0 / K:e}"
    body = f"""
func.func @f(%x: tensor<{M}x{K}xbf16>, %nw: tensor<{K}xbf16>, %w: tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %out = loop.fused @rms_norm_qkv_proj axes [m = {M}, n = {N}, k = {K}]
      ins(%x, %nw, %w : tensor<{M}x{K}xbf16>, tensor<{K}xbf16>, tensor<{N}x{K}xbf16>)
      -> tensor<{M}x{N}xbf16> attributes {{emmy.fused_from = ["rms_norm", "linear_qkv_proj"], emmy.fusion = "fused"}} {{
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
    %acc = loop.reduce sum ["k"] : f32 {{
      %k2 = loop.axis "k" : index
      %a2 = loop.load %xa[%m, %k2] : tensor<{M}x{K}xbf16> -> bf16
      %g = loop.load %nwa[%k2] : tensor<{K}xbf16> -> bf16
      %b = loop.load %wa[%n, %k2] : tensor<{N}x{K}xbf16> -> bf16
      %a2f = arith.extf %a2 : bf16 to f32
      %gf = arith.extf %g : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %ag = arith.mulf %a2f, %gf : f32
      %p = arith.mulf %ag, %bf : f32
      loop.yield %p : f32
    }}
    %inv_n = arith.constant {inv} : f32
    %eps = arith.constant 1.000000e-06 : f32
    %mean = arith.mulf %ss, %inv_n : f32
    %v = arith.addf %mean, %eps : f32
    %r = math.rsqrt %v : f32
    %y = arith.mulf %acc, %r : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }}
  func.return %out : tensor<{M}x{N}xbf16>
}}"""
    return _module(target, body), [(M, K), (K,), (N, K)]


def rmsnorm_matmul_folded(M: int, N: int, K: int, *, target: str = "sm_90a") -> tuple[str, list]:
    """The running example once loop-hoist-params folded the norm weight into B: A = x, a plain
    copy of the tensor the sum of squares reads."""
    text, args = rmsnorm_matmul(M, N, K, target=target)
    return text.replace("%p = arith.mulf %ag, %bf : f32", "%p = arith.mulf %a2f, %bf : f32"), args


def rmsnorm_matmul_reading_stats(M: int, N: int, K: int, *, target: str = "sm_90a") -> tuple[str, list]:
    """The running example with A = x * (sum of squares): A needs the row statistics before the
    k loop, as a LayerNorm that could not be folded would."""
    text, args = rmsnorm_matmul(M, N, K, target=target)
    return text.replace("%ag = arith.mulf %a2f, %gf : f32", "%ag = arith.mulf %a2f, %ss : f32"), args


def add_rmsnorm_matmul(M: int, N: int, K: int, *, target: str = "sm_90") -> tuple[str, list]:
    """The running example after a residual add: A = g * (x + r) is computed from two tensors of
    M rows, and the sum of squares reads both."""
    text, _ = rmsnorm_matmul(M, N, K, target=target)
    T = f"tensor<{M}x{K}xbf16>"
    for old, new in (
        (f"%x: {T}, ", f"%x: {T}, %res: {T}, "),
        ("ins(%x, ", "ins(%x, %res, "),
        (f" : {T}, ", f" : {T}, {T}, "),
        (f"^bb0(%xa: {T}, ", f"^bb0(%xa: {T}, %ra: {T}, "),
        (f"%a = loop.load %xa[%m, %k] : {T} -> bf16\n      %af = arith.extf %a",
         f"%a0 = loop.load %xa[%m, %k] : {T} -> bf16\n      %r0 = loop.load %ra[%m, %k] : {T} -> bf16\n"
         "      %a = arith.addf %a0, %r0 : bf16\n      %af = arith.extf %a"),
        (f"%a2 = loop.load %xa[%m, %k2] : {T} -> bf16",
         f"%x2 = loop.load %xa[%m, %k2] : {T} -> bf16\n      %r2 = loop.load %ra[%m, %k2] : {T} -> bf16\n"
         "      %a2 = arith.addf %x2, %r2 : bf16"),
        ("@rms_norm_qkv_proj", "@add_norm_proj"),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text, [(M, K), (M, K), (K,), (N, K)]


def gate_up(M: int, N: int, K: int, *, target: str = "sm_90") -> tuple[str, list]:
    """Dual contraction sharing A: out[m, n] = silu(x @ wg^T) * (x @ wu^T), weights concatenated."""
    N2 = 2 * N
    body = f"""
func.func @f(%x: tensor<{M}x{K}xbf16>, %w: tensor<{N2}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %out = loop.fused @gate_up_silu_mul axes [m = {M}, n = {N}, k = {K}]
      ins(%x, %w : tensor<{M}x{K}xbf16>, tensor<{N2}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  ^bb0(%xa: tensor<{M}x{K}xbf16>, %wa: tensor<{N2}x{K}xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %g = loop.reduce sum ["k"] : f32 {{
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<{M}x{K}xbf16> -> bf16
      %b = loop.load %wa[%n, %k] : tensor<{N2}x{K}xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %p = arith.mulf %af, %bf : f32
      loop.yield %p : f32
    }}
    %u = loop.reduce sum ["k"] : f32 {{
      %k2 = loop.axis "k" : index
      %cN = arith.constant {N} : index
      %nu = arith.addi %n, %cN : index
      %a2 = loop.load %xa[%m, %k2] : tensor<{M}x{K}xbf16> -> bf16
      %b2 = loop.load %wa[%nu, %k2] : tensor<{N2}x{K}xbf16> -> bf16
      %a2f = arith.extf %a2 : bf16 to f32
      %b2f = arith.extf %b2 : bf16 to f32
      %p2 = arith.mulf %a2f, %b2f : f32
      loop.yield %p2 : f32
    }}
    %gb = arith.truncf %g : f32 to bf16
    %ub = arith.truncf %u : f32 to bf16
    %gf = arith.extf %gb : bf16 to f32
    %ng = arith.negf %gf : f32
    %e = math.exp %ng : f32
    %one = arith.constant 1.000000e+00 : f32
    %den = arith.addf %e, %one : f32
    %s = arith.divf %gf, %den : f32
    %uf = arith.extf %ub : bf16 to f32
    %y = arith.mulf %s, %uf : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }}
  func.return %out : tensor<{M}x{N}xbf16>
}}"""
    return _module(target, body), [(M, K), (N2, K)]


def attention(
    B: int, H: int, Hkv: int, S: int, D: int, *, causal: bool = True, normalize_inside: bool = True,
    target: str = "sm_90",
) -> tuple[str, list]:
    """Fused attention with GQA: o[b, q, h, e] = softmax(q.k * scale (+ causal mask)) @ v."""
    group = H // Hkv
    scale = f"{D ** -0.5:e}"
    qt = f"tensor<{B}x{H}x{S}x{D}xbf16>"
    kt = f"tensor<{B}x{Hkv}x{S}x{D}xbf16>"
    ot = f"tensor<{B}x{S}x{H}x{D}xbf16>"

    def scores(sfx: str) -> str:
        mask = (
            f"""
      %ok{sfx} = arith.cmpi ule, %kv{sfx}, %qi : index
      %ninf{sfx} = arith.constant 0xFF800000 : f32
      %sc{sfx} = arith.select %ok{sfx}, %s{sfx}, %ninf{sfx} : f32"""
            if causal
            else f"""
      %sc{sfx} = arith.addf %s{sfx}, %zero : f32"""
        )
        return f"""
      %kv{sfx} = loop.axis "kv" : index
      %dot{sfx} = loop.reduce sum ["d"] : f32 {{
        %d{sfx} = loop.axis "d" : index
        %x{sfx} = loop.load %qa[%b, %h, %qi, %d{sfx}] : {qt} -> bf16
        %y{sfx} = loop.load %ka[%b, %hk, %kv{sfx}, %d{sfx}] : {kt} -> bf16
        %xf{sfx} = arith.extf %x{sfx} : bf16 to f32
        %yf{sfx} = arith.extf %y{sfx} : bf16 to f32
        %p{sfx} = arith.mulf %xf{sfx}, %yf{sfx} : f32
        loop.yield %p{sfx} : f32
      }}
      %s{sfx} = arith.mulf %dot{sfx}, %scale : f32{mask}"""

    pv_p = (
        """
      %pn = arith.divf %ex3, %l : f32"""
        if normalize_inside
        else """
      %pn = arith.addf %ex3, %zero : f32"""
    )
    epi = (
        """
    %o = arith.truncf %acc : f32 to bf16"""
        if normalize_inside
        else """
    %on = arith.divf %acc, %l : f32
    %o = arith.truncf %on : f32 to bf16"""
    )
    body = f"""
func.func @f(%q: {qt}, %k: {kt}, %v: {kt}) -> {ot} {{
  %out = loop.fused @attention axes [b = {B}, h = {H}, q = {S}, kv = {S}, d = {D}, e = {D}]
      ins(%q, %k, %v : {qt}, {kt}, {kt}) -> {ot} {{
  ^bb0(%qa: {qt}, %ka: {kt}, %va: {kt}):
    %b = loop.axis "b" : index
    %h = loop.axis "h" : index
    %qi = loop.axis "q" : index
    %e = loop.axis "e" : index
    %grp = arith.constant {group} : index
    %hk = arith.divui %h, %grp : index
    %scale = arith.constant {scale} : f32
    %zero = arith.constant 0.000000e+00 : f32
    %mx = loop.reduce max ["kv"] : f32 {{{scores("1")}
      loop.yield %sc1 : f32
    }}
    %l = loop.reduce sum ["kv"] : f32 {{{scores("2")}
      %t2 = arith.subf %sc2, %mx : f32
      %ex2 = math.exp %t2 : f32
      loop.yield %ex2 : f32
    }}
    %acc = loop.reduce sum ["kv"] : f32 {{{scores("3")}
      %t3 = arith.subf %sc3, %mx : f32
      %ex3 = math.exp %t3 : f32{pv_p}
      %vv = loop.load %va[%b, %hk, %kv3, %e] : {kt} -> bf16
      %vf = arith.extf %vv : bf16 to f32
      %pv = arith.mulf %pn, %vf : f32
      loop.yield %pv : f32
    }}{epi}
    loop.store %o, 0 [%b, %qi, %h, %e] : bf16
    loop.yield
  }}
  func.return %out : {ot}
}}"""
    return _module(target, body), [(B, H, S, D), (B, Hkv, S, D), (B, Hkv, S, D)]


def rmsnorm(M: int, N: int, *, target: str = "sm_90") -> tuple[str, list]:
    """A reduction: out[m, n] = bf16(x * rsqrt(mean_k x^2 + eps)) * w[n]."""
    inv = f"{1.0 / N:e}"
    body = f"""
func.func @f(%x: tensor<{M}x{N}xbf16>, %w: tensor<{N}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %out = loop.fused @rms_norm axes [m = {M}, n = {N}, k = {N}]
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
    %inv_n = arith.constant {inv} : f32
    %eps = arith.constant 1.000000e-06 : f32
    %mean = arith.mulf %ss, %inv_n : f32
    %v = arith.addf %mean, %eps : f32
    %r = math.rsqrt %v : f32
    %xv = loop.load %xa[%m, %n] : tensor<{M}x{N}xbf16> -> bf16
    %xf = arith.extf %xv : bf16 to f32
    %y = arith.mulf %xf, %r : f32
    %yb = arith.truncf %y : f32 to bf16
    %wv = loop.load %wa[%n] : tensor<{N}xbf16> -> bf16
    %o = arith.mulf %yb, %wv : bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }}
  func.return %out : tensor<{M}x{N}xbf16>
}}"""
    return _module(target, body), [(M, N), (N,)]


def softmax(M: int, N: int, *, target: str = "sm_90") -> tuple[str, list]:
    """A reduction with two dependent reduces: out = softmax(x) over the last axis (f32)."""
    body = f"""
func.func @f(%x: tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %out = loop.fused @softmax axes [m = {M}, n = {N}, k = {N}]
      ins(%x : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  ^bb0(%xa: tensor<{M}x{N}xf32>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %mx = loop.reduce max ["k"] : f32 {{
      %k = loop.axis "k" : index
      %a = loop.load %xa[%m, %k] : tensor<{M}x{N}xf32> -> f32
      loop.yield %a : f32
    }}
    %sum = loop.reduce sum ["k"] : f32 {{
      %k2 = loop.axis "k" : index
      %a2 = loop.load %xa[%m, %k2] : tensor<{M}x{N}xf32> -> f32
      %t = arith.subf %a2, %mx : f32
      %ex = math.exp %t : f32
      loop.yield %ex : f32
    }}
    %xv = loop.load %xa[%m, %n] : tensor<{M}x{N}xf32> -> f32
    %t3 = arith.subf %xv, %mx : f32
    %e3 = math.exp %t3 : f32
    %o = arith.divf %e3, %sum : f32
    loop.store %o, 0 [%m, %n] : f32
    loop.yield
  }}
  func.return %out : tensor<{M}x{N}xf32>
}}"""
    return _module(target, body), [(M, N)]


def silu_mul(M: int, N: int, *, target: str = "sm_90") -> tuple[str, list]:
    """Elementwise: out[m, n] = silu(g[m, n]) * g[m, n + N] (gate and up halves of one tensor)."""
    N2 = 2 * N
    body = f"""
func.func @f(%g: tensor<{M}x{N2}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %out = loop.fused @silu_mul axes [m = {M}, n = {N}]
      ins(%g : tensor<{M}x{N2}xbf16>) -> tensor<{M}x{N}xbf16> {{
  ^bb0(%ga: tensor<{M}x{N2}xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %cN = arith.constant {N} : index
    %nu = arith.addi %n, %cN : index
    %a = loop.load %ga[%m, %n] : tensor<{M}x{N2}xbf16> -> bf16
    %b = loop.load %ga[%m, %nu] : tensor<{M}x{N2}xbf16> -> bf16
    %af = arith.extf %a : bf16 to f32
    %na = arith.negf %af : f32
    %e = math.exp %na : f32
    %one = arith.constant 1.000000e+00 : f32
    %den = arith.addf %e, %one : f32
    %s = arith.divf %af, %den : f32
    %bf = arith.extf %b : bf16 to f32
    %y = arith.mulf %s, %bf : f32
    %o = arith.truncf %y : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }}
  func.return %out : tensor<{M}x{N}xbf16>
}}"""
    return _module(target, body), [(M, N2)]


def matmul_two_k(M: int, N: int, H: int, D: int, *, target: str = "sm_90") -> tuple[str, list]:
    """A contraction over two axes (heads and head dim, as an o_proj over unflattened heads):
    out[m, n] = bf16(sum_{h,d} x[m, h, d] * w[n, h * D + d])."""
    K = H * D
    body = f"""
func.func @f(%x: tensor<{M}x{H}x{D}xbf16>, %w: tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %out = loop.fused @o_proj axes [m = {M}, n = {N}, h = {H}, d = {D}]
      ins(%x, %w : tensor<{M}x{H}x{D}xbf16>, tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  ^bb0(%xa: tensor<{M}x{H}x{D}xbf16>, %wa: tensor<{N}x{K}xbf16>):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %acc = loop.reduce sum ["h", "d"] : f32 {{
      %h = loop.axis "h" : index
      %d = loop.axis "d" : index
      %cD = arith.constant {D} : index
      %hd = arith.muli %h, %cD : index
      %kk = arith.addi %hd, %d : index
      %a = loop.load %xa[%m, %h, %d] : tensor<{M}x{H}x{D}xbf16> -> bf16
      %b = loop.load %wa[%n, %kk] : tensor<{N}x{K}xbf16> -> bf16
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %p = arith.mulf %af, %bf : f32
      loop.yield %p : f32
    }}
    %o = arith.truncf %acc : f32 to bf16
    loop.store %o, 0 [%m, %n] : bf16
    loop.yield
  }}
  func.return %out : tensor<{M}x{N}xbf16>
}}"""
    return _module(target, body), [(M, H, D), (N, K)]


def rope_like(B: int, S: int, H: int, D: int, *, target: str = "sm_90") -> tuple[str, list]:
    """Elementwise over four axes with a transposed store: o[b, h, s, d] = x[b, s, h, d] * c[s, d]."""
    body = f"""
func.func @f(%x: tensor<{B}x{S}x{H}x{D}xbf16>, %c: tensor<{S}x{D}xbf16>) -> tensor<{B}x{H}x{S}x{D}xbf16> {{
  %out = loop.fused @rope axes [b = {B}, h = {H}, s = {S}, d = {D}]
      ins(%x, %c : tensor<{B}x{S}x{H}x{D}xbf16>, tensor<{S}x{D}xbf16>) -> tensor<{B}x{H}x{S}x{D}xbf16> {{
  ^bb0(%xa: tensor<{B}x{S}x{H}x{D}xbf16>, %ca: tensor<{S}x{D}xbf16>):
    %b = loop.axis "b" : index
    %h = loop.axis "h" : index
    %s = loop.axis "s" : index
    %d = loop.axis "d" : index
    %v = loop.load %xa[%b, %s, %h, %d] : tensor<{B}x{S}x{H}x{D}xbf16> -> bf16
    %cv = loop.load %ca[%s, %d] : tensor<{S}x{D}xbf16> -> bf16
    %o = arith.mulf %v, %cv : bf16
    loop.store %o, 0 [%b, %h, %s, %d] : bf16
    loop.yield
  }}
  func.return %out : tensor<{B}x{H}x{S}x{D}xbf16>
}}"""
    return _module(target, body), [(B, S, H, D), (S, D)]
