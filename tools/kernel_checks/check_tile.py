"""Run Emmy's generated kernels on a GPU against the loop-body reference, and time them.

    PYTHONPATH=. python3 tools/kernel_checks/check_tile.py FILE.mlir [...] [--arch sm_90a]
        [--reps 50] [--whole] [--pin 'KERNEL.KNOB=VALUE;...'] [--passes 'a,b']

FILE.mlir is a tile-stage module (every knob decided), or an earlier stage with --passes naming
the passes that bring it to the tile stage (e.g. 'convert-torch-to-tensor,...,decide-forks').
By default every tile.kernel is checked on its own: a module holding just that kernel is lowered
(convert-tile-to-kernel, convert-kernel-to-cuda), compiled with nvcc into a shared library, run on
random inputs through its `emmy_launch_*` entry (ctypes, torch tensors), and each output compared
with `emmy.analysis.body.evaluate` (numpy) of the same tile op. --whole runs the whole function
instead (outputs compared with the tile-stage interpreter). Prints one line per kernel: relative
error, OK/FAIL, time per call (CUDA events, median of --reps), and GB/s or TFLOP/s.
Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from math import prod
from pathlib import Path

import numpy as np


def _np_to_torch(a: np.ndarray, dtype: str, dev):
    import torch

    t = torch.from_numpy(np.ascontiguousarray(a))
    table = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64,
             "i64": torch.int64, "i32": torch.int32}
    return t.to(dev).to(table[dtype])


def split_modules(module, ctx):
    """One module per tile.kernel: a function taking its operands, returning its results."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp, StringAttr
    from xdsl.ir import Block, Region

    from emmy.dialects.tile import KernelOp

    out = []
    for f in module.body.block.ops:
        if not isinstance(f, func.FuncOp):
            continue
        for op in f.body.block.ops:
            if not isinstance(op, KernelOp):
                continue
            types = [o.type for o in op.operands]
            block = Block(arg_types=types)
            for a, b in zip(block.args, op.regions[0].block.args):
                a.name_hint = b.name_hint
            clone = op.clone()
            clone.operands = list(block.args)
            block.add_op(clone)
            block.add_op(func.ReturnOp(*clone.results))
            fn = func.FuncOp(f"run_{op.kernel_name}", (types, [r.type for r in op.results]), Region(block))
            fn.arg_attrs = ArrayAttr(
                [DictionaryAttr({"emmy.name": StringAttr(a.name_hint or f"in{i}"), "emmy.role": StringAttr("input")})
                 for i, a in enumerate(block.args)]
            )
            m = ModuleOp([fn])
            m.attributes.update(module.attributes)
            out.append((op, m))
    return out


def lower(module, ctx):
    from emmy.backend.plan import launch_plan
    from emmy.ir_io import parse_pipeline, run_passes

    run_passes(ctx, module, parse_pipeline("convert-tile-to-kernel,convert-kernel-to-cuda"))
    return launch_plan(module)


def run_plan(plan, lib_path: Path, inputs: list[np.ndarray], reps: int, dev):
    """Run the plan's entry on numpy inputs; returns (outputs as float32 numpy, median ms)."""
    import torch

    lib = ctypes.CDLL(str(lib_path))
    fn = getattr(lib, plan.entry)
    bufs = []
    ins = iter(inputs)
    for b in plan.buffers:
        if b.role in ("input", "param"):
            bufs.append(_np_to_torch(next(ins), b.dtype, dev))
        else:
            t = _np_to_torch(np.zeros(b.shape, np.float32), b.dtype, dev)
            if b.role == "output":
                t.fill_(float("nan"))
            bufs.append(t)
    fn.argtypes = [ctypes.c_void_p] * (len(bufs) + 1)
    fn.restype = None
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = [ctypes.c_void_p(t.data_ptr()) for t in bufs]
    if plan.prepare_entry is not None:  # once, before the first call
        prep = getattr(lib, plan.prepare_entry)
        prep.argtypes, prep.restype = fn.argtypes, None
        prep(*ptrs, ctypes.c_void_p(stream))
    fn(*ptrs, ctypes.c_void_p(stream))
    torch.cuda.synchronize()
    outs = [t for t, b in zip(bufs, plan.buffers) if b.role == "output"]
    out_pos = [b.position for b in plan.buffers if b.role == "output"]
    results = [o.float().cpu().numpy() for _, o in sorted(zip(out_pos, outs), key=lambda p: p[0])]
    times = []
    for _ in range(3):
        fn(*ptrs, ctypes.c_void_p(stream))
    for _ in range(max(1, reps)):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*ptrs, ctypes.c_void_p(stream))
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return results, float(np.median(times)), bufs


def random_inputs(op, seed: int) -> list[np.ndarray]:
    from emmy.interp.numeric import element_dtype, round_to

    rng = np.random.default_rng(seed)
    out = []
    for v in op.operands:
        shape = tuple(v.type.get_shape())
        dt = element_dtype(v.type.element_type)
        a = rng.standard_normal(shape).astype(np.float32)
        if dt in ("bf16", "f16", "f32"):
            a = round_to(a, dt)
        out.append(a)
    return out


def work(op, info) -> tuple[float, float]:
    """(bytes moved at least, flops) of one tile op."""
    nbytes = sum(prod(o.type.get_shape()) * _eb(o.type) for o in op.operands)
    nbytes += sum(prod(r.type.get_shape()) * _eb(r.type) for r in op.results)
    flops = 0.0
    if info.kind == "contraction":
        flops = 2.0 * info.M * info.N * info.K * info.batch * info.n_contractions
    return nbytes, flops


def _eb(t) -> int:
    from emmy.dialects.kernel import element_bytes

    return element_bytes(t.element_type)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--passes", default="")
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--keep", default=None, help="folder to keep sources and libraries in")
    ap.add_argument("--dry", action="store_true", help="lower and compile only (no GPU)")
    ap.add_argument("--only", default=None, help="regex on 'FILE:KERNEL': check only the matching kernels")
    args = ap.parse_args(argv)

    from emmy.analysis.body import evaluate
    from emmy.analysis.classify import classify
    from emmy.backend.nvcc import compile_source
    from emmy.context import make_context
    from emmy.interp.numeric import rel_error
    from emmy.ir_io import parse_module, parse_pipeline, run_passes

    if not args.dry:
        import torch

        dev = torch.device("cuda")
        print(f"device: {torch.cuda.get_device_name()}  arch: {args.arch}", flush=True)
    failures = 0
    work_dir = Path(args.keep or tempfile.mkdtemp(prefix="emmy_check_"))
    jobs = []
    for path in args.files:
        ctx = make_context()
        module = parse_module(ctx, Path(path).read_text(), path)
        if args.passes:
            run_passes(ctx, module, parse_pipeline(args.passes))
        for op, m in split_modules(module, ctx):
            if args.only and not re.search(args.only, f"{Path(path).name}:{op.kernel_name}"):
                continue
            info = classify(op)
            try:
                plan = lower(m, ctx)
            except Exception as e:  # report and go on
                print(f"{op.kernel_name:40s} LOWERING FAILED: {e}", flush=True)
                failures += 1
                continue
            jobs.append((path, op, info, plan))

    def build(indexed):
        n, (path, op, info, plan) = indexed
        d = work_dir / f"{n:03d}_{Path(path).stem}_{op.kernel_name}"
        t0 = time.time()
        try:
            return compile_source(plan.source, args.arch, d, cubin=False, name=op.kernel_name), time.time() - t0
        except Exception as e:
            return e, time.time() - t0

    with ThreadPoolExecutor(max_workers=8) as pool:
        libs = list(pool.map(build, enumerate(jobs)))
    for (path, op, info, plan), (lib, secs) in zip(jobs, libs):
        knobs = ",".join(f"{k}={v}" for k, v in op.knob_values().items())
        if isinstance(lib, Exception):
            print(f"{op.kernel_name:40s} BUILD FAILED ({secs:.1f}s): {lib}", flush=True)
            failures += 1
            continue
        if args.dry:
            print(f"{op.kernel_name:40s} built ({secs:.1f}s) [{knobs}]", flush=True)
            continue
        inputs = random_inputs(op, 0)
        try:
            outs, ms, _ = run_plan(plan, lib, inputs, args.reps, dev)
        except Exception as e:
            print(f"{op.kernel_name:40s} RUN FAILED: {e}", flush=True)
            failures += 1
            continue
        refs = evaluate(op, inputs)
        errs = [rel_error(o, r) for o, r in zip(outs, refs)]
        err = max(errs) if errs else 0.0
        ok = err <= args.tol and all(math.isfinite(e) for e in errs)
        failures += 0 if ok else 1
        nbytes, flops = work(op, info)
        rate = f"{flops / ms / 1e9:7.1f} TFLOP/s" if flops else f"{nbytes / ms / 1e6:7.1f} GB/s"
        print(
            f"{Path(path).stem[:14]:14s} {op.kernel_name:28s} {info.kind:11s} err {err:.2e} {'OK  ' if ok else 'FAIL'} "
            f"{ms * 1000:8.1f} us {rate}  [{knobs}] (nvcc {secs:.0f}s)",
            flush=True,
        )
    print("ALL OK" if not failures else f"FAILURES: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
