"""The o and down projections of the Qwen3 layer, each launched alone a few times, as Emmy's
deploy answer, as a `slices = cols` 192 x 128 tile alone and in pairs along n (cuBLAS's 2x1,
which should halve the copies of A out of L2 but measured slower), and as the cuBLAS GEMM torch
runs for the same product: the program docs/bench/projections-ncu.sh profiles with Nsight
Compute, to see where Emmy's kernel spends the time cuBLAS's does not (issue 24). Run on the device machine from
the repository root with PYTHONPATH holding the carried wheels and the tree; T= tokens (3000)."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, "tools")
from bench import projection_layer  # noqa: E402
from bench_projections import a_matrix, compiled_projections, random_values  # noqa: E402

from emmy.backend.run import build_cubin  # noqa: E402
from emmy.measure.candidate import lower_candidate  # noqa: E402
from emmy.measure.gpu import load  # noqa: E402
from emmy.measure.layer import EmmyBuild  # noqa: E402

KERNELS = ("o_proj_residual", "down_proj_residual")
COLS = tuple(f"{k}.{x}" for k in KERNELS for x in (
    "slices=cols workers=wgmma_ws copy=tma block_m=192 block_n=128 warps=8 stages=5 split_k=1 schedule=grid").split())
PAIRS = (*COLS, *(f"{k}.{x}" for k in KERNELS for x in ("cluster=2", "group_m=1")))


def main() -> None:
    tokens = int(os.environ.get("T", "3000"))
    cache = Path(os.environ.get("EMMY_HOME", "/tmp/emmy-home"))
    traced = projection_layer(tokens)
    for label, build in (("deploy", EmmyBuild()), ("cols192", EmmyBuild(COLS)), ("cols192x2", EmmyBuild(PAIRS))):
        for p in compiled_projections(traced, "sm_90a", build):
            if p.kernel not in KERNELS:
                continue
            plan = lower_candidate(p.module, p.kernel, p.knobs).plan
            build_cubin(plan.source, "sm_90a", cache)
            values = random_values(p)
            loaded = load(plan, "sm_90a", cache, values)
            for _ in range(3):
                loaded.bindings[0].launch()
            torch.cuda.synchronize()
            print(f"{label} {p.kernel}: M={p.m} N={p.n} K={p.k} knobs {dict(p.knobs)}", flush=True)
            if label == "deploy":  # cuBLAS on the same product (no residual), three times
                a = a_matrix(values[p.a], p).contiguous()
                w = values[p.weights[0]]
                for _ in range(3):
                    torch.nn.functional.linear(a, w)
                torch.cuda.synchronize()
                print(f"cublas {p.kernel}: linear {tuple(a.shape)} x {tuple(w.shape)}", flush=True)


if __name__ == "__main__":
    main()
