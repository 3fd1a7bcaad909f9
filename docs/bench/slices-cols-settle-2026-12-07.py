# Run on the device machine from the repository root (carry .whl):  python3 docs/bench/slices-cols-settle-2026-12-07.py
# Written before emmy::wgmma::settle existed: "orig" then was the kernel as generated; since, the generated
# kernel settles its accumulators itself, so orig and P1 are the same kernel (h100-slices-cols-cause-2026-12-07.log).
"""slices = cols: the accumulators read before the last wgmma wait (ptxas). Each cols kernel as
generated, and with the accumulators settled after the wait (P1: add +0.0 in place; P2: a move
onto itself), built here, checked for hazards in its SASS and for its result."""
import copy, os, re, sys
from pathlib import Path
import torch
sys.path.insert(0, "tools"); sys.path.insert(0, "tools/kernel_checks")
from bench import projection_layer
from bench_projections import compiled_projections, random_values, reference, error_of
from emmy.measure.layer import EmmyBuild
from emmy.measure.candidate import lower_candidate
from emmy.backend.run import build_cubin, cubin_path
from emmy.measure.gpu import load
from wgmma_hazards import hazards, disassemble

cache = Path("/tmp/fresh-home")  # built on this machine
PRE = {"P1": 'asm volatile("add.f32 %0, %0, 0f00000000;" : "+f"(a[i]));', "P2": 'asm volatile("mov.b32 %0, %0;" : "+f"(a[i]));'}

def patched(src, how):
    if how == "orig":
        return src
    helper = ("\ntemplate <int R> __device__ __forceinline__ void emmy_settle(float* a) {\n#pragma unroll\n"
              f"  for (int i = 0; i < R; ++i) {PRE[how]}\n}}\n")
    src = src.replace('#include "emmy.cuh"\n', '#include "emmy.cuh"\n' + helper, 1)
    def fix(kernel_src):
        accs = re.findall(r"float (acc_\d+)\[(\d+)\];", kernel_src)
        for name, n in accs:
            kernel_src = kernel_src.replace("emmy::wgmma::wait<0>();", f"emmy::wgmma::wait<0>(); emmy_settle<{n}>({name});", 1) if len(accs) == 1 else kernel_src
        return kernel_src
    parts = src.split('extern "C" __global__')
    return 'extern "C" __global__'.join([parts[0]] + [fix(p) for p in parts[1:]])

def pins(kind):
    b = {"cols": "schedule=grid block_m=128 block_n=128 warps=8 stages=4",
         "cols1": "schedule=grid block_m=128 block_n=64 warps=4 stages=6",
         "colsP": "schedule=persistent block_m=128 block_n=128 warps=8 stages=4",
         "cols192": "schedule=grid block_m=192 block_n=128 warps=8 stages=4"}[kind]
    return tuple(f"{k}.{x}" for k in ("o_proj_residual", "down_proj_residual")
                 for x in (b + " workers=wgmma_ws split_k=1 block_k=64 copy=tma slices=cols").split())

T = int(os.environ.get("T", "1100"))
traced = projection_layer(T)
for kind in ("cols", "cols1", "colsP", "cols192"):
    for p in compiled_projections(traced, "sm_90a", EmmyBuild(pins(kind))):
        if p.kernel not in ("o_proj_residual", "down_proj_residual"):
            continue
        base = lower_candidate(p.module, p.kernel, p.knobs).plan
        values = random_values(p); ref = reference(p, values)
        for how in ("orig", "P1", "P2"):
            plan = copy.copy(base); plan.source = patched(base.source, how)
            try:
                build_cubin(plan.source, "sm_90a", cache)
                hz = hazards(disassemble(cubin_path(plan.source, "sm_90a", cache)))
                outs = []
                for _ in range(3):
                    loaded = load(plan, "sm_90a", cache, values)
                    loaded.bindings[0].launch(); torch.cuda.synchronize()
                    outs.append(list(loaded.bindings[0].outputs)[0].float().clone())
                errs = [error_of(o, ref) for o in outs]
                print(f"{kind:8} {p.kernel:20} {how:5} sass hazards {len(hz):3}  errors {' '.join(f'{e:.2e}' for e in errs)}  identical {all(torch.equal(outs[0], o) for o in outs)}", flush=True)
            except Exception as e:
                print(f"{kind:8} {p.kernel:20} {how:5} FAILED {str(e)[:300]}", flush=True)
