"""Build, without a GPU, the kernels test/pytest/test_gpu.py will launch, into EMMY_HOME.

    EMMY_HOME=.emmy-cache python tools/prebuild_gpu_tests.py --target sm_90a

Kernels are cached by a hash of their source, so a GPU machine given the same EMMY_HOME skips
nvcc. Useful where GPU time is scarce and CPU time is not.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools"), str(ROOT / "test" / "pytest")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="sm_90a")
    args = ap.parse_args()
    from running_example import make
    from test_gpu import (
        ATTENTION_TMA_CASES, EXAMPLE_PINS, EXAMPLE_TOKENS, FAMILIES_TINY, FAMILY_LAYER_CASES, LAST_BLOCK_EXAMPLE_CASES,
        LAST_BLOCK_LAYER_CASES, LAYER_TOKENS, LAYER_WORKERS, PERSISTENT_CASES, TMA_CASES, layer_pins, wants_sm90a,
    )
    from tiny_models import write_real_sized_model, write_tiny_model

    from emmy.backend.plan import launch_plan
    from emmy.backend.run import build_cubin
    from emmy.driver import CompileOptions, compile_model, compile_traced, compile_whole_model
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    cache = Path(os.environ.get("EMMY_HOME", ROOT / ".emmy-cache"))
    sources = []
    model = "Qwen/Qwen3-Embedding-0.6B"
    for tokens in LAYER_TOKENS + [64]:
        for workers in LAYER_WORKERS:
            pins = layer_pins(workers)
            if wants_sm90a(pins) and args.target != "sm_90a":
                continue
            opts = CompileOptions(model=model, layer=0, tokens=tokens, target=args.target, pins=pins)
            sources.append(launch_plan(compile_model(opts).module).source)
    for tokens, pins in LAST_BLOCK_LAYER_CASES:
        if wants_sm90a(pins) and args.target != "sm_90a":
            continue
        opts = CompileOptions(model=model, layer=0, tokens=tokens, target=args.target, pins=pins)
        sources.append(launch_plan(compile_model(opts).module).source)
    if args.target == "sm_90a":
        for tokens, pins in ATTENTION_TMA_CASES:
            opts = CompileOptions(model=model, layer=0, tokens=tokens, target=args.target, pins=pins)
            sources.append(launch_plan(compile_model(opts).module).source)
    cases = [(t, 1024, p) for t in EXAMPLE_TOKENS for p in EXAMPLE_PINS]
    cases += [(t, 1024, p) for t, p in PERSISTENT_CASES + LAST_BLOCK_EXAMPLE_CASES] + TMA_CASES
    for tokens, hidden, pins in cases:
        if wants_sm90a(pins) and args.target != "sm_90a":
            continue
        src = ModelSource(spec="running_example.py:make", kind="factory", model_id="example",
                          factory=lambda t=tokens, h=hidden: make(t, hidden=h))
        opts = CompileOptions(model="example", layer=0, tokens=tokens, target=args.target, pins=pins)
        sources.append(launch_plan(compile_traced(trace_layer(src, 0, tokens), opts).module).source)
    with tempfile.TemporaryDirectory() as tmp:
        for name, tokens in FAMILY_LAYER_CASES:
            model_dir = write_real_sized_model(Path(tmp) / name, name)
            opts = CompileOptions(model=model_dir, layer=0, tokens=tokens, target=args.target)
            sources.append(launch_plan(compile_model(opts).module).source)
        for family in ("llama", "qwen2"):
            opts = CompileOptions(model=write_tiny_model(Path(tmp) / f"{family}-layer", family), layer=1, tokens=300,
                                  target=args.target)
            sources.append(launch_plan(compile_model(opts).module).source)
        for family in FAMILIES_TINY:
            opts = CompileOptions(model=write_tiny_model(Path(tmp) / family, family), layer=None, tokens=29,
                                  target=args.target)
            sources += [launch_plan(p.result.module).source for p in compile_whole_model(opts).parts]
    for name, tokens in (("mlp_block", 512), ("two_outputs", 512), ("clamp_abs_sum", 512), ("activations", 512),
                         ("handwritten_attention", 21), ("handwritten_attention", 300),
                         ("repeat_kv_attention", 37), ("repeat_kv_attention", 300)):
        block = str(ROOT / "test" / "pytest" / "models" / f"{name}.py") + ":make"
        opts = CompileOptions(model=block, layer=None, tokens=tokens, target=args.target)
        sources.append(launch_plan(compile_model(opts).module).source)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for f in [pool.submit(build_cubin, s, args.target, cache) for s in set(sources)]:
            f.result()
    print(f"built {len(set(sources))} sources into {cache}")


if __name__ == "__main__":
    main()
