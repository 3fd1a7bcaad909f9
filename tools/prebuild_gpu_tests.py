"""Build, without a GPU, the kernels the GPU tests will launch, into EMMY_HOME.

    EMMY_HOME=$PWD/.emmy-cache python tools/prebuild_gpu_tests.py --target sm_90a
    EMMY_HOME=$PWD/.emmy-cache python tools/prebuild_gpu_tests.py --only attention --match T7- --list

The cases are the test modules' own (test_gpu.py, test_attention_gpu.py and test_layer_check.py's
GPU test): their case lists imported, never copied (a test's single case is named beside it). Each case is compiled in a pool of processes (Emmy's pipeline
is CPU-bound Python: one core per compile), and each new kernel source goes to nvcc as soon as its
case is compiled, the nvcc runs in parallel too. Kernels are cached by a hash of their source, so
a GPU machine given the same EMMY_HOME skips nvcc; a case left out or changed costs the test only
its build, never a wrong result. A case that fails to compile or build is named with its error
(the test will fail the same way) and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools"), str(ROOT / "test" / "pytest")]

QWEN = "Qwen/Qwen3-Embedding-0.6B"  # the model the tests name
GROUPS = ("gpu", "attention", "layer_check")  # the test modules: test_gpu.py, test_attention_gpu.py, test_layer_check.py


class Case(NamedTuple):
    """One compile: `kind` names the function of KINDS that makes its kernel sources from `args`."""

    group: str
    name: str
    kind: str
    args: tuple


# ------------------------------------------------------------------------------------------------
# The cases, from the test modules' lists
# ------------------------------------------------------------------------------------------------


def gpu_cases(target: str) -> list[Case]:
    """test_gpu.py's cases, less those its tests skip on `target` (wgmma needs sm_90a)."""
    import test_gpu as t

    def kept(wants_sm90a: bool) -> bool:
        return target == "sm_90a" or not wants_sm90a

    layers = [(f"layer[{w}-{n}]", n, t.layer_pins(w)) for n in t.LAYER_TOKENS for w in t.LAYER_WORKERS]
    layers += [(f"layer_last_block[{n},{','.join(p)}]", n, p) for n, p in t.LAST_BLOCK_LAYER_CASES]
    layers += [("bound_outputs_start_as_nan", 33, ())]  # test_bound_outputs_start_as_nan's layer
    out = [Case("gpu", name, "layer", (QWEN, n, tuple(p), target)) for name, n, p in layers if kept(t.wants_sm90a(p))]
    if target == "sm_90a":
        out += [Case("gpu", f"layer_attention_tma[{n},{','.join(p)}]", "layer", (QWEN, n, tuple(p), target))
                for n, p in t.ATTENTION_TMA_CASES]
        out += [Case("gpu", f"layer_slices_cols[{n},{','.join(p)}]", "layer", (QWEN, n, tuple(p), target))
                for n, p in t.SLICES_COLS_CASES]
    examples = [(n, 1024, p) for n in t.EXAMPLE_TOKENS for p in t.EXAMPLE_PINS]
    examples += [(n, 1024, p) for n, p in t.PERSISTENT_CASES + t.LAST_BLOCK_EXAMPLE_CASES] + t.TMA_CASES
    out += [Case("gpu", f"running_example[{n},{h},{','.join(p)}]", "example", (n, h, tuple(p), target))
            for n, h, p in examples if kept(t.wants_sm90a(p))]
    out += [Case("gpu", f"family_layer[{name}-{n}]", "real_sized_layer", (name, n, target))
            for name, n in t.FAMILY_LAYER_CASES]
    out += [Case("gpu", f"sliding_window_layer[{n}-{w}-{p}-{d}]", "windowed_layer", (n, w, p, d, target))
            for n, w, p, d in t.SLIDING_CASES if kept(t.wants_sm90a(tuple(p.split(";")) if p else ()))]
    # test_one_key_value_head_layer_matches_pytorch (layer 1, 300 tokens), then the whole tiny
    # models of test_family_whole_model_embedding_on_gpu (29 tokens) and of
    # test_whole_model_embedding_on_gpu (Qwen3, 11 tokens)
    out += [Case("gpu", f"one_key_value_head[{f}]", "tiny", (f, 1, 300, target)) for f in t.ONE_KV_HEAD_FAMILIES]
    out += [Case("gpu", f"other_family_layer[{f}]", "tiny", (f, 0, t.OTHER_FAMILY_TOKENS, target))
            for f in sorted(t.OTHER_FAMILIES)]
    out += [Case("gpu", f"family_whole_model[{f}]", "tiny", (f, None, 29, target)) for f in t.FAMILIES_TINY]
    out.append(Case("gpu", "whole_model_embedding", "tiny", ("qwen3", None, 11, target)))
    for argv in [t.RUN_CHECK] + [t.model_run(*r) for r in t.MODEL_RUNS]:
        shown = " ".join(Path(a.rpartition(":")[0]).stem if a.endswith(":make") else a for a in argv)
        out.append(Case("gpu", f"emmy run {shown}", "cli_run", (tuple(argv), target)))
    return out


def attention_cases(target: str) -> list[Case]:
    """test_attention_gpu.py's cases (the pinned ones, tensor-map copies, on sm_90a only, as the
    tests skip them)."""
    import test_attention_gpu as t

    out = [Case("attention", f"attention[{t.case_id(c)}]", "attention", (c, target))
           for c in t.ATTENTION_GPU_CASES if not (c[4] and target != "sm_90a")]
    out += [Case("attention", f"layer_flash[{t.layer_case_id(c)}]", "layer", (QWEN, c[0], tuple(c[1]), target))
            for c in t.LAYER_FLASH_CASES if not (c[1] and target != "sm_90a")]
    return out


def layer_check_cases(target: str) -> list[Case]:
    """test_layer_check.py's GPU test: the sets of the running example's layer it times (on the
    test's own target, whatever --target says)."""
    return [Case("layer_check", "running_example_layer_timed", "layer_check", ())]


CASES = {"gpu": gpu_cases, "attention": attention_cases, "layer_check": layer_check_cases}


# ------------------------------------------------------------------------------------------------
# Compiling one case (in a pool process): its kernel sources, each with its target
# ------------------------------------------------------------------------------------------------


def _plan_source(module) -> str:
    from emmy.backend.plan import launch_plan

    return launch_plan(module).source


def compile_layer(model: str, tokens: int, pins: tuple, target: str) -> list[tuple[str, str]]:
    from emmy.driver import CompileOptions, compile_model

    opts = CompileOptions(model=model, layer=0, tokens=tokens, target=target, pins=pins)
    return [(_plan_source(compile_model(opts).module), target)]


def compile_example(tokens: int, hidden: int, pins: tuple, target: str) -> list[tuple[str, str]]:
    from running_example import make

    from emmy.driver import CompileOptions, compile_traced
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    src = ModelSource(spec="running_example.py:make", kind="factory", model_id="example",
                      factory=lambda: make(tokens, hidden=hidden))
    opts = CompileOptions(model="example", layer=0, tokens=tokens, target=target, pins=pins)
    return [(_plan_source(compile_traced(trace_layer(src, 0, tokens), opts).module), target)]


def compile_real_sized_layer(name: str, tokens: int, target: str) -> list[tuple[str, str]]:
    from tiny_models import write_real_sized_model

    with tempfile.TemporaryDirectory() as tmp:
        return compile_layer(write_real_sized_model(Path(tmp) / name, name), tokens, (), target)


def compile_tiny(family: str, layer: int | None, tokens: int, target: str) -> list[tuple[str, str]]:
    """A tiny model of `family`: one layer, or the whole model (layer None)."""
    from tiny_models import write_tiny_model

    from emmy.driver import CompileOptions, compile_model, compile_whole_model

    with tempfile.TemporaryDirectory() as tmp:
        opts = CompileOptions(model=write_tiny_model(Path(tmp) / family, family), layer=layer, tokens=tokens,
                              target=target)
        if layer is not None:
            return [(_plan_source(compile_model(opts).module), target)]
        return [(_plan_source(p.result.module), target) for p in compile_whole_model(opts).parts]


def compile_cli_run(argv: tuple, target: str) -> list[tuple[str, str]]:
    """What `emmy run ARGV` compiles on a `target` GPU: the CLI's own parser and options (the
    golden and prior tiers, EMMY_HOME's store, EMMY_EVIDENCE), so the sources are the test's."""
    from emmy.cli.main import _is_factory, _options, build_parser
    from emmy.driver import compile_model, compile_whole_model

    args = build_parser().parse_args(["run", *argv, "--target", target])
    opts = _options(args, "cuda")
    if args.layer is None and not _is_factory(args.model):
        return [(_plan_source(p.result.module), target) for p in compile_whole_model(opts).parts]
    return [(_plan_source(compile_model(opts).module), target)]


def compile_attention(case: tuple, target: str) -> list[tuple[str, str]]:
    from test_attention_gpu import compiled

    return [(compiled(case, target)[1].source, target)]


def compile_layer_check() -> list[tuple[str, str]]:
    """The deploy set and the set with one kernel at another answer, as the GPU layer timer
    compiles them (`emmy.measure.layer.emmy_plan`)."""
    from test_layer_check import gpu_layer_sets

    from emmy.frontend import resolve_model, trace_layer
    from emmy.measure.layer import EmmyBuild, emmy_plan
    from emmy.search.layer_check import pins_of

    model, tokens, target, _, _, sets = gpu_layer_sets()
    traced = trace_layer(resolve_model(model), 0, tokens)
    return [(emmy_plan(traced, target, EmmyBuild(pins=pins_of(s)))[0].source, target) for s in sets.values()]


def compile_windowed_layer(tokens: int, window: int, pins: str, head_dim: int, target: str) -> list[tuple[str, str]]:
    from tiny_models import write_windowed_model

    with tempfile.TemporaryDirectory() as tmp:
        model = write_windowed_model(Path(tmp) / "mistral-7b", window, head_dim)
        return compile_layer(model, tokens, tuple(pins.split(";")) if pins else (), target)


KINDS = {"windowed_layer": compile_windowed_layer, "layer": compile_layer, "example": compile_example, "real_sized_layer": compile_real_sized_layer,
         "tiny": compile_tiny, "cli_run": compile_cli_run, "attention": compile_attention,
         "layer_check": compile_layer_check}


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)  # one core per process: the pool is the parallelism


def compile_case(case: Case) -> tuple[list[tuple[str, str]], float, str]:
    """(kernel sources with their targets, seconds, error): in a pool process, never raising."""
    t0 = time.perf_counter()
    try:
        return KINDS[case.kind](*case.args), time.perf_counter() - t0, ""
    except Exception as e:  # noqa: BLE001 - a failed case is reported by name, the others go on
        return [], time.perf_counter() - t0, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


# ------------------------------------------------------------------------------------------------
# The run: compile in a process pool, nvcc each new source as it comes
# ------------------------------------------------------------------------------------------------


def build(source: str, arch: str, cache: Path) -> tuple[float, str]:
    from emmy.backend.run import build_cubin

    t0 = time.perf_counter()
    try:
        build_cubin(source, arch, cache)
        return time.perf_counter() - t0, ""
    except Exception as e:  # noqa: BLE001
        return time.perf_counter() - t0, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def select(cases: list[Case], match: list[str] | None) -> list[Case]:
    return [c for c in cases if not match or any(m in c.name for m in match)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="sm_90a", help="the GPU's architecture (default sm_90a, the H200's)")
    ap.add_argument("--only", default=",".join(GROUPS), metavar="GROUP,...",
                    help=f"the test modules whose cases to build: {', '.join(GROUPS)} (default: all)")
    ap.add_argument("--match", action="append", metavar="TEXT",
                    help="only the cases whose name contains TEXT (repeatable: any of them)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                    help="compiling processes, and nvcc runs at a time (default: the CPU count)")
    ap.add_argument("--list", action="store_true", help="print the cases and stop")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per case compiled and per nvcc run")
    args = ap.parse_args()
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        ap.error(f"unknown group {', '.join(unknown)}: the groups are {', '.join(GROUPS)}")
    if args.jobs < 1:
        ap.error("--jobs: give at least 1")
    cases = select([c for g in groups for c in CASES[g](args.target)], args.match)
    if args.list:
        for c in cases:
            print(f"{c.group:12} {c.name}")
        print(f"{len(cases)} cases")
        return 0
    from emmy.backend.run import cubin_path

    cache = Path(os.environ.get("EMMY_HOME") or ROOT / ".emmy-cache")
    start = time.perf_counter()
    failed: list[str] = []
    seen: set[tuple[str, str]] = set()
    cached = compiled_s = nvcc_s = 0.0
    builds = {}
    ctx = get_context("spawn")  # fresh interpreters: nothing of this process's state is forked
    with ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=_init_worker) as pool, \
            ThreadPoolExecutor(args.jobs) as nvcc:
        compiles = {pool.submit(compile_case, c): c for c in cases}
        pending = set(compiles)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                case = compiles[f]
                sources, seconds, error = f.result()
                compiled_s += seconds
                if args.verbose:
                    print(f"compiled {case.name} in {seconds:.1f} s" + (f": {error}" if error else ""), flush=True)
                if error:
                    failed.append(f"{case.name}: {error}")
                for source, arch in sources:
                    if (source, arch) in seen:
                        continue
                    seen.add((source, arch))
                    if cubin_path(source, arch, cache).exists():
                        cached += 1
                    else:
                        builds[nvcc.submit(build, source, arch, cache)] = case.name
        for f, name in builds.items():
            seconds, error = f.result()
            nvcc_s += seconds
            if args.verbose:
                print(f"nvcc for {name} in {seconds:.1f} s" + (f": {error}" if error else ""), flush=True)
            if error:
                failed.append(f"{name} (nvcc): {error}")
    wall = time.perf_counter() - start
    print(f"{len(cases)} cases compiled ({compiled_s:.0f} s of compiling), {len(seen)} distinct kernel sources: "
          f"{len(builds)} built by nvcc ({nvcc_s:.0f} s of nvcc), {int(cached)} already in {cache}; "
          f"{wall:.1f} s wall with {args.jobs} jobs")
    for line in failed:
        print(f"failed: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
