# Run on the device machine from the repository root (carry .whl; EMMY_HOME a kernel cache), with
# legality refusing nothing (it refused slices = cols when this ran):  python3 docs/bench/slices-cols-diag-2026-12-07.py
# It found the fault of slices = cols: only the last k-block of A was wrong, and not the same twice
# (h100-slices-cols-cause-2026-12-07.log).
"""Where slices = cols goes wrong: the o and down kernels (cols v1 and the rows control) on
inputs that are zero outside one k-block, the residual zero; then the full error's pattern."""
import os, sys
from pathlib import Path
import torch
sys.path.insert(0, "tools")
from bench import projection_layer
from bench_projections import compiled_projections, random_values, reference, error_of
from emmy.measure.layer import EmmyBuild
from emmy.measure.candidate import lower_candidate
from emmy.backend.run import build_cubin, cubin_path
import shutil, subprocess
from emmy.measure.gpu import load

T = int(os.environ.get("T", "1100"))
cache = Path(os.environ["EMMY_HOME"])
traced = projection_layer(T)

def pins(kind):
    s = []
    for k in ("o_proj_residual", "down_proj_residual"):
        base = f"workers=wgmma_ws schedule=grid split_k=1 block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=tma slices={kind}"
        if kind == "cols1":
            base = "workers=wgmma_ws schedule=grid split_k=1 block_m=128 block_n=64 warps=4 block_k=64 stages=6 copy=tma slices=cols"
        s += [f"{k}.{x}" for x in base.split()]
    return tuple(s)

def run(p, plan, values):
    loaded = load(plan, "sm_90a", cache, values)
    loaded.bindings[0].launch(); torch.cuda.synchronize()
    return list(loaded.bindings[0].outputs)[0].float().reshape(p.m, p.n).clone()

def a_from_matrix(amat, p, like):
    if p.a_layout == "heads":
        H = like.shape[1]; D = like.shape[3]
        return amat.reshape(p.m, H, D).transpose(0, 1).unsqueeze(0).contiguous().to(like.dtype)
    return amat.reshape(like.shape).contiguous().to(like.dtype)

for kind in ("rows", "cols", "cols1"):
    for p in compiled_projections(traced, "sm_90a", EmmyBuild(pins(kind))):
        if p.kernel not in ("o_proj_residual", "down_proj_residual"):
            continue
        plan = lower_candidate(p.module, p.kernel, p.knobs).plan
        build_cubin(plan.source, "sm_90a", cache)
        cu = shutil.which("cuobjdump")
        if cu and os.environ.get("OUT") and p.kernel == "o_proj_residual":
            sass = subprocess.run([cu, "-sass", str(cubin_path(plan.source, "sm_90a", cache))], capture_output=True, text=True).stdout
            Path(os.environ["OUT"], f"sass_{kind}_{p.kernel}.txt").write_text(sass)
        values = random_values(p)
        ref = reference(p, values)
        out = run(p, plan, values)
        out2 = run(p, plan, values)
        print(f"\n## {kind} {p.kernel} M={p.m} N={p.n} K={p.k}: err {error_of(out, ref):.3e}, rerun identical: {torch.equal(out, out2)}, max|diff| between runs {float((out - out2).abs().max()):.3e}")
        # the error's pattern over the tile
        err = (out - ref).abs()
        big = err > 0.1 * ref.abs().mean()
        tok = big.float().mean(1); feat = big.float().mean(0)
        print("  wrong fraction:", f"{float(big.float().mean()):.3f}",
              "| by token % 128 (16 groups of 8):", [round(float(tok.reshape(-1)[: (p.m // 128) * 128].reshape(-1, 128).mean(0).reshape(16, 8).mean(1)[i]), 2) for i in range(16)],
              "| by feature % 128 (16 groups):", [round(float(feat.reshape(-1, 128).mean(0).reshape(16, 8).mean(1)[i]), 2) for i in range(16)])
        print("  by token tile:", [round(float(x), 2) for x in tok[: (p.m // 128) * 128].reshape(-1, 128).mean(1)],
              "| by feature tile:", [round(float(x), 2) for x in feat.reshape(-1, 128).mean(1)])
        # one k-block at a time (residual zero)
        amat = torch.randn(p.m, p.k, generator=torch.Generator().manual_seed(1)).cuda()
        w = values[p.weights[0]].float()
        v = dict(values)
        if p.residual:
            v[p.residual] = torch.zeros_like(values[p.residual])
        line = []
        for j in range(p.k // 64):
            mask = torch.zeros(p.k, device="cuda"); mask[j * 64:(j + 1) * 64] = 1
            a = amat * mask
            v[p.a] = a_from_matrix(a, p, values[p.a])
            want = torch.nn.functional.linear(a.to(torch.bfloat16).float(), w)
            got = run(p, plan, v)
            e = float((got - want).norm() / want.norm())
            line.append(f"{j}:{e:.2f}")
        print("  per k-block error:", " ".join(line))
