"""`tools/bench.py --cases projections`: each projection of a compiled layer alone, against cuBLAS
on the same product and torch.compile on the same fused job.

    found = compiled_projections(traced, "sm_90a", EmmyBuild())    # the layer's contraction kernels
    found[0].kernel, found[0].m, found[0].n, found[0].k    # "rms_norm_qkv_proj", 3000, 4096, 1024
    found[0].job                                            # "rms_norm -> linear 2048+1024+1024"
    rows = time_projections(name, traced, "sm_90a", cache, builds, ["emmy", "cublas", "compile"])
    print(format_projection_table(rows, ["emmy", "cublas", "compile"]))

The layer is compiled as each Emmy contender compiles it (`EmmyBuild`: pins, store, evidence
tiers), up to decide-forks; each `contraction` kernel of it (`emmy.analysis.classify`) is a
`Projection`: its M, N, K, how many products share its A side (gate and up: 2), and the job
its prologue and epilogue fuse, read from the classified body: an RMS norm of the A rows
(`rms_norm`, its epsilon the constant added before the rsqrt), a bias, silu(gate) * up
(`silu_mul`), a residual added (`residual`). The A side is read by rows ([.., M, K]) or, as the
o projection reads the attention's output, by heads ([1, H, M, D], K = H * D: `heads`).

Contenders, all on the same random bf16 tensors (the kernel's own argument shapes), each over
as many copies of its inputs and outputs as `emmy.measure.timing.rotation_count` says so that
no call finds its data in L2, captured in a CUDA graph and timed in the same rounds:

- Emmy (`emmy`, `emmy-tuned`, ... and `emmy:NAME` variants): the kernel isolated from the layer
  (`emmy.measure.isolate`) and lowered with the values its compile decided
  (`emmy.measure.candidate.lower_candidate`), all its launches (a separate statistics launch,
  a split-K combine): the tuner's way of running one kernel alone (`emmy.measure.gpu.load`).
- `cublas`: `torch.nn.functional.linear(a, w)` on a contiguous [M, K] A and the products'
  weights as one [products * N, K] matrix, in bf16: the kind of GEMM torch.compile hands to
  cuBLAS, on the kernel's whole product at once (one GEMM for q, k and v together, one for gate
  and up: a larger GEMM than each of the model's, so a bar at least as high).
- `compile`, `max-autotune`, `eager`: the whole fused job as a small torch function, as the
  model writes it: the norm with its weight (ones: Emmy has folded the model's into its weight
  when the weights were bound), each product its own `linear` (q, k and v too: `splits`, the
  rows of the weights Emmy's weight preparation concatenated), silu(gate) * up, the residual
  added; compiled with torch.compile (default mode, static shapes, or
  "max-autotune-no-cudagraphs") or run eagerly. The o projection's A, which Emmy reads as its
  attention kernel writes it ([1, H, T, D]), reaches torch as cuDNN's attention leaves it in
  the model ([1, T, H, D] in memory), so that its transpose to [T, H * D] is a view, not a copy.

Correctness first: every contender's result is compared with the job in float32 on the same
inputs (relative error of the norm); one over `tolerance` is reported with its error and never
timed. Times: median seconds per call and spread ((p90 - p10) / median) over the rounds. With
`profile` (`--profile`), each contender's replay is also profiled (`emmy.measure.timing.
kernel_times`): the device time inside its kernels per call, without the gaps between one
launch and the next. That is the figure a profile of a model compares kernel by kernel; the
replay's time is what back-to-back calls of the job cost where nothing overlaps their launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from emmy.measure.layer import EmmyBuild

TORCH_CONTENDERS = ("cublas", "compile", "max-autotune", "eager")


@dataclass(frozen=True)
class Projection:
    """One contraction kernel of a compiled layer and the job it fuses (module docstring).

    `a`, `weights`, `residual`, `bias`: argument names of the isolated function (`module`, the
    kernel alone with its knobs undecided); `weights` in product order (gate before up);
    `knobs`: the values the compile decided; `problem`: why no torch job could be read from the
    kernel (then it is listed, never timed)."""

    kernel: str
    m: int
    n: int
    k: int
    products: int
    dtype: str
    module: str
    knobs: Mapping[str, object] = field(default_factory=dict)
    a: str = ""
    a_layout: str = "rows"  # or "heads": [1, H, M, D] read as [M, H * D]
    weights: tuple[str, ...] = ()
    prologue: str = ""  # "" or "rms_norm"
    eps: float = 0.0
    epilogue: tuple[str, ...] = ()  # in order: "bias", "silu_mul", "residual"
    residual: str = ""
    bias: str = ""
    splits: tuple[int, ...] = ()  # the model's products in the one weight (q, k, v), each its own linear in the job
    problem: str = ""

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.products

    @property
    def job(self) -> str:
        """The fused job in words: `rms_norm -> linear x2 -> silu_mul`, `rms_norm -> linear 2048+1024+1024`."""
        linear = "linear" + (f" x{self.products}" if self.products > 1 else "")
        linear += f" {'+'.join(map(str, self.splits))}" if self.splits else ""
        return " -> ".join([*([self.prologue] if self.prologue else []), linear, *self.epilogue])


# ------------------------------------------------------------------------------------------------
# Finding the projections (no GPU)
# ------------------------------------------------------------------------------------------------


def compiled_projections(traced, target: str, build: EmmyBuild = EmmyBuild()) -> list[Projection]:
    """The contraction kernels of a traced layer compiled as `build` says, up to decide-forks."""
    from emmy.driver import compile_traced

    opts = build.options(model="bench", layer=0, tokens=1, target=target, stop_after="tile")
    return projections(compile_traced(traced, opts).module)


def projections(module) -> list[Projection]:
    """A Projection per `contraction` kernel of a tile-stage module after decide-forks, in IR order."""
    from emmy.analysis.classify import classify
    from emmy.dialects.tile import KernelOp
    from emmy.ir_io import print_module
    from emmy.measure.isolate import isolate

    out = []
    for op in module.walk():
        if isinstance(op, KernelOp) and op.kind.data == "contraction":
            small = isolate(module, op.kernel_name)
            kernel = next(k for k in small.walk() if isinstance(k, KernelOp))
            found = read_projection(kernel, classify(kernel), print_module(small), op.knob_values())
            out.append(_replace(found, splits=_splits(op, found, _operand_names(kernel))))
    return out


def _splits(op, p: Projection, names: list[str]) -> tuple[int, ...]:
    """The rows of the model's weights that a weight preparation concatenated into the kernel's
    one weight (q, k and v: (2048, 1024, 1024) in Qwen3), for a plain product; () otherwise."""
    from emmy.dialects.tile import KernelOp

    if p.problem or p.products != 1 or p.epilogue:
        return ()
    owner = op.operands[names.index(p.weights[0])].owner
    if not isinstance(owner, KernelOp):
        return ()
    rows = tuple(t.get_shape()[0] for t in (v.type for v in owner.inputs)
                 if len(t.get_shape()) == 2 and t.get_shape()[1] == p.k)
    return rows if len(rows) > 1 and sum(rows) == p.n else ()


def read_projection(kernel, info, module_text: str, knobs: Mapping[str, object]) -> Projection:
    """The Projection of one isolated contraction kernel: sizes, operand roles and job."""
    from emmy.interp.numeric import element_dtype

    base = Projection(kernel.kernel_name, info.M, info.N, info.K, info.n_contractions,
                      element_dtype(kernel.results[0].type), module_text, dict(knobs))
    try:
        return _roles(kernel, info, base)
    except _NoJob as e:
        return _replace(base, problem=str(e))


class _NoJob(Exception):
    """The kernel fuses something this benchmark cannot write as a torch job."""


def _replace(p: Projection, **kw) -> Projection:
    from dataclasses import replace

    return replace(p, **kw)


def _roles(kernel, info, p: Projection) -> Projection:
    from xdsl.dialects import arith, math as xmath

    from emmy.dialects.loop import LoadOp

    names = _operand_names(kernel)
    block = kernel.body.block

    def arg_of(load) -> str:
        return names[block.args.index(load.tensor)]

    def numel(load) -> int:
        return math.prod(load.tensor.type.get_shape())

    a_side = {arg_of(ld): ld for c in info.contractions for ld in c.a_loads if numel(ld) == p.m * p.k}
    if len(a_side) != 1:
        raise _NoJob(f"its A side reads {len(a_side)} tensors of M x K elements (expected one)")
    (a, a_load), = a_side.items()
    extra = [arg_of(ld) for c in info.contractions for ld in c.a_loads if arg_of(ld) != a]
    if extra:
        raise _NoJob(f"its A side also reads {', '.join(sorted(set(extra)))}")
    layout = _a_layout(tuple(a_load.tensor.type.get_shape()), p.m, p.k)
    weights = []
    for c in info.contractions:
        b = {arg_of(ld) for ld in c.b_loads}
        if len(b) != 1 or any(numel(ld) != p.n * p.k for ld in c.b_loads):
            raise _NoJob("a product's B side is not one N x K weight")
        weights.append(b.pop())
    eps, prologue = 0.0, ""
    if info.prologue:
        eps, prologue = _rms_eps(info, block, xmath, arith), "rms_norm"
    epilogue, residual, bias = [], "", ""
    for op in info.epilogue:
        if isinstance(op, LoadOp):
            if numel(op) == p.m * p.n:
                residual = arg_of(op)
            elif numel(op) == p.n and p.products == 1:
                bias = arg_of(op)
            else:
                raise _NoJob(f"its epilogue reads {arg_of(op)}, neither a residual nor a bias")
    if bias:
        epilogue.append("bias")
    if p.products == 2:
        weights = _gate_first(info, weights, block, xmath, arith)
        epilogue.append("silu_mul")
    elif p.products > 2:
        raise _NoJob(f"{p.products} products share its A side")
    elif any(isinstance(op, xmath.ExpOp) for op in info.epilogue):
        raise _NoJob("its epilogue has an exp but one product")
    if residual:
        epilogue.append("residual")
    return _replace(p, a=a, a_layout=layout, weights=tuple(weights), prologue=prologue, eps=eps,
                    epilogue=tuple(epilogue), residual=residual, bias=bias)


def _operand_names(kernel) -> list[str]:
    """The isolated function's argument name of each kernel operand, by operand position."""
    from emmy.execute import argument_names

    fn = kernel.parent_op()
    names = argument_names(fn)
    return [names[fn.body.block.args.index(v)] for v in kernel.operands]


def _a_layout(shape: tuple[int, ...], m: int, k: int) -> str:
    if shape[-1] == k and math.prod(shape[:-1]) == m:
        return "rows"
    if len(shape) == 4 and shape[0] == 1 and shape[2] == m and shape[1] * shape[3] == k:
        return "heads"
    raise _NoJob(f"its A side is a {'x'.join(map(str, shape))} tensor, neither [.., M, K] nor [1, H, M, D]")


def _rms_eps(info, block, xmath, arith) -> float:
    """The epsilon of an RMS norm prologue: the constant added to the mean square before the rsqrt."""
    rsqrt = [op for op in block.ops if isinstance(op, xmath.RsqrtOp)]
    if len(rsqrt) != 1 or not isinstance(rsqrt[0].operand.owner, arith.AddfOp):
        raise _NoJob("its prologue is not an RMS norm (one rsqrt of a sum)")
    consts = [v.owner for v in rsqrt[0].operand.owner.operands if isinstance(v.owner, arith.ConstantOp)]
    if len(consts) != 1:
        raise _NoJob("its RMS norm has no constant epsilon")
    return float(consts[0].value.value.data)


def _gate_first(info, weights: list[str], block, xmath, arith) -> list[str]:
    """The two products' weights, the one silu is applied to (gate) first."""
    neg = [op for op in block.ops if isinstance(op, arith.NegfOp)]
    if len(neg) != 1 or not any(isinstance(op, xmath.ExpOp) for op in block.ops):
        raise _NoJob("two products without one silu in the epilogue")
    reached = _reduces_reached(neg[0].operand)
    gates = [i for i, c in enumerate(info.contractions) if c.reduce in reached]
    if len(gates) != 1:
        raise _NoJob("the silu does not read exactly one of the two products")
    return [weights[gates[0]], weights[1 - gates[0]]]


def _reduces_reached(value) -> set:
    """The top-level ops a value is computed from (through the block's ops, not into regions)."""
    from xdsl.ir import OpResult

    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if isinstance(v, OpResult) and v.owner not in seen:
            seen.add(v.owner)
            if not v.owner.regions:
                todo.extend(v.owner.operands)
    return seen


# ------------------------------------------------------------------------------------------------
# The torch side
# ------------------------------------------------------------------------------------------------


def a_matrix(x, p: Projection):
    """The A operand as the [M, K] matrix the kernel reads."""
    if p.a_layout == "heads":
        return x.transpose(1, 2).reshape(p.m, p.k)
    return x.reshape(p.m, p.k)


def job_inputs(p: Projection, values: Mapping[str, object]) -> list:
    """The fused job's arguments from the kernel's tensors: A, the norm's weight (ones: Emmy has
    folded it into the weights), the weights, the bias, the residual."""
    import torch

    a = values[p.a]
    norm = [torch.ones(p.k, dtype=a.dtype, device=a.device)] if p.prologue else []
    return [a, *norm, *(values[w] for w in p.weights), *([values[p.bias]] if p.bias else []),
            *([values[p.residual]] if p.residual else [])]


def job_function(p: Projection) -> Callable:
    """The fused job as torch computes it, on `job_inputs`' arguments: an [M, N] result, or with
    `splits` the model's products one by one (a tuple: `as_matrix` joins them)."""
    import torch
    import torch.nn.functional as F

    def job(a, *rest):
        rest = list(rest)
        x = a_matrix(a, p)
        if p.prologue:
            x = F.rms_norm(x, (p.k,), rest.pop(0), p.eps)
        if p.splits:
            return tuple(F.linear(x, w) for w in rest.pop(0).split(p.splits))
        outs = [F.linear(x, rest.pop(0)) for _ in p.weights]
        if p.bias:
            outs[0] = outs[0] + rest.pop(0)
        y = torch.nn.functional.silu(outs[0]) * outs[1] if "silu_mul" in p.epilogue else outs[0]
        if p.residual:
            y = y + rest.pop(0).reshape(p.m, p.n)
        return y

    return job


def as_matrix(out):
    """A job's result as one [M, N] matrix (a split job's products side by side)."""
    import torch

    return torch.cat(out, dim=-1) if isinstance(out, tuple) else out


def reference(p: Projection, values: Mapping[str, object]):
    """The job in float32 on the kernel's tensors: what every contender is checked against."""
    return as_matrix(job_function(p)(*[v.float() for v in job_inputs(p, values)]))


def random_values(p: Projection, seed: int = 0, device: str = "cuda") -> dict[str, object]:
    """Random tensors (standard normal) of the isolated kernel's argument shapes, by name."""
    import torch

    from emmy.context import make_context
    from emmy.execute import argument_names, entry_function
    from emmy.interp.numeric import element_dtype
    from emmy.ir_io import parse_module

    fn = entry_function(parse_module(make_context(), p.module, f"<isolated {p.kernel}>"))
    gen = torch.Generator().manual_seed(seed)
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    out = {}
    for name, t in zip(argument_names(fn), fn.function_type.inputs.data):
        dtype = dtypes.get(element_dtype(t))
        if dtype is None:
            raise ValueError(f"argument {name} is {element_dtype(t)}: not a floating-point tensor")
        out[name] = torch.randn(tuple(t.get_shape()), generator=gen).to(dtype).to(device)
    return out


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------


def _torch_contender(who: str, p: Projection, values: Mapping[str, object]):
    """(a function of one input set, the input set) of a torch contender."""
    import torch
    import torch.nn.functional as F

    if who == "cublas":
        a = a_matrix(values[p.a], p).contiguous()
        w = torch.cat([values[name] for name in p.weights]) if p.products > 1 else values[p.weights[0]]
        return F.linear, [a, w]
    job, inputs = job_function(p), job_inputs(p, values)
    if p.a_layout == "heads":  # as cuDNN's attention leaves it in the model: [1, T, H, D] in memory,
        inputs[0] = inputs[0].transpose(1, 2).contiguous().transpose(1, 2)  # so the job's transpose is a view
    # static shapes, as torch.compile first compiles a model at one token count (every job here
    # shares one code object: without it, the second shape seen would be compiled dynamic)
    if who == "compile":
        job = torch.compile(job, dynamic=False)
    elif who == "max-autotune":
        job = torch.compile(job, mode="max-autotune-no-cudagraphs", dynamic=False)
    return job, inputs


def _rotated(fn, inputs: list, out_bytes: int) -> tuple[Callable[[], object], int, object]:
    """A call of `fn` on each of enough copies of `inputs` to keep them out of L2: (the call, how
    many calls it makes, the first copy's result)."""
    from emmy.measure.timing import l2_bytes, rotation_count

    size = sum(x.numel() * x.element_size() for x in inputs) + out_bytes
    copies = [inputs] + [[x.clone() for x in inputs] for _ in range(rotation_count(size, l2_bytes()) - 1)]
    first = as_matrix(fn(*inputs))

    def call():  # each copy's result kept to the end of the call: its own buffer, as each input's
        return [fn(*c) for c in copies]

    return call, len(copies), first


def error_of(out, ref) -> float:
    from emmy.measure.layer import rel_err

    return rel_err(out.reshape(ref.shape), ref)


def time_projection(p: Projection, emmys: Mapping[str, tuple[Mapping[str, object], object]],
                    contenders: Sequence[str], target: str, cache, tolerance: float, reps: int = 50,
                    inner: int = 10, profile: bool = False) -> dict:
    """One projection's row: every contender checked, then the right ones timed in the same rounds.
    `emmys`: each Emmy contender's (decided knobs, launch plan) of this kernel (`lower_emmys`).
    With `profile`, each timed contender's kernels too (`<key>_kernels_us`: device microseconds
    per call of each kernel; `<key>_busy_s`: their sum, the call's time without launch gaps)."""
    import torch

    from emmy.measure.gpu import load
    from emmy.measure.timing import kernel_times, sample_replays, summarize, warm_up

    row = {"kernel": p.kernel, "m": p.m, "n": p.n, "k": p.k, "products": p.products, "job": p.job,
           "flops": p.flops, "allowed_err": tolerance}
    if p.problem:
        row["error"] = f"no torch job: {p.problem}"
        return row
    try:
        values = random_values(p)
        ref = reference(p, values)
    except Exception as e:  # (an argument that is no floating-point tensor)
        row["error"] = f"no inputs: {error_line(e)}"
        return row
    out_bytes = p.m * p.n * p.products * 2
    runs, calls, keep = {}, {}, []
    with torch.no_grad():
        for key, (knobs, plan) in emmys.items():
            row[f"{key}_knobs"] = dict(knobs)
            try:
                if isinstance(plan, Exception):
                    raise plan
                loaded = load(plan, target, cache, values)
                keep.append(loaded)
                loaded.bindings[0].launch()
                torch.cuda.synchronize()
                first = list(loaded.bindings[0].outputs)[0]

                def call(bindings=loaded.bindings):
                    for b in bindings:
                        b.launch()

                _checked(key, call, len(loaded.bindings), first, ref, tolerance, row, runs, calls)
            except Exception as e:  # reported, the others timed
                row[f"{key}_error"] = error_line(e)
        torch._dynamo.reset()  # each projection's jobs compiled afresh (dynamo's cache limit per code object)
        for who in (c for c in contenders if c in TORCH_CONTENDERS):
            try:
                fn, inputs = _torch_contender(who, p, values)
                want = ref
                if who == "cublas":
                    want = torch.nn.functional.linear(inputs[0].float(), inputs[1].float())
                call, n, first = _rotated(fn, inputs, out_bytes)
                _checked(who, call, n, first, want, tolerance, row, runs, calls)
            except Exception as e:
                row[f"{who}_error"] = error_line(e)
        if runs:
            warm_up(runs)
            for key, samples in sample_replays(runs, reps, inner, calls=calls).items():
                row[f"{key}_s"], row[f"{key}_spread"] = summarize(samples)
            for key in runs if profile else ():
                kernels = profiled(row, key, lambda: kernel_times(runs[key], calls=calls[key]))
                if kernels:
                    row[f"{key}_kernels_us"], row[f"{key}_busy_s"] = kernels, sum(kernels.values()) / 1e6
    del keep
    return row


def profiled(row: dict, key: str, profile: Callable[[], dict]) -> dict | None:
    """`profile()`'s kernel times, or None with `<key>_profile_error` in the row where the profiler
    fails or records no kernel: the times already measured stand whatever the profiler does."""
    try:
        kernels = profile()
    except Exception as e:
        row[f"{key}_profile_error"] = error_line(e)
        return None
    if not kernels:
        row[f"{key}_profile_error"] = "the profiler recorded no kernel"
        return None
    return kernels


def error_line(e: Exception) -> str:
    """An exception on one line (a message's hint joined to it), for a row."""
    return " ".join(f"{type(e).__name__}: {e}".split())[:500]


def _checked(key, call, n, first, want, tolerance, row, runs, calls) -> None:
    """Correctness first: the result against `want`; a right one is captured for timing."""
    from emmy.measure.timing import replayable

    row[f"{key}_err"] = error_of(first, want)
    if not row[f"{key}_err"] <= tolerance:
        row[f"{key}_error"] = f"relative error {row[f'{key}_err']:.2e} over {tolerance:.1e}: not timed"
        return
    runs[key], calls[key] = replayable(call), n


def time_projections(name: str, traced, target: str, cache, builds: Mapping[str, EmmyBuild],
                     contenders: Sequence[str], tolerance: float = 1e-2, profile: bool = False) -> list[dict]:
    """A row per projection of the layer, named `name`: the kernels as the first Emmy build (or,
    with none, Emmy's default compile) finds them; each build lowers its own decided knobs.
    `profile`: each contender's kernels too (time_projection)."""
    found = {key: {p.kernel: p for p in compiled_projections(traced, target, build)} for key, build in builds.items()}
    listing = next(iter(found.values())) if found else {p.kernel: p for p in compiled_projections(traced, target)}
    lowered = lower_emmys(found, target, cache)
    rows = []
    for kernel, p in listing.items():
        mine = {key: plans[kernel] for key, plans in lowered.items() if kernel in plans}
        rows.append({"case": name, **time_projection(p, mine, contenders, target, cache, tolerance, profile=profile)})
    return rows


def lower_emmys(found: Mapping[str, Mapping[str, Projection]], target: str, cache):
    """Each Emmy contender's projections lowered with their decided knobs and built, the nvcc runs
    in parallel ahead of the GPU: {contender: {kernel: (knobs, launch plan, or the exception that
    stopped it)}}."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from emmy.backend.run import build_cubin
    from emmy.measure.candidate import lower_candidate

    out: dict[str, dict[str, tuple]] = {}
    for key, projections_ in found.items():
        out[key] = {}
        for kernel, p in projections_.items():
            try:
                out[key][kernel] = (p.knobs, lower_candidate(p.module, p.kernel, p.knobs).plan)
            except Exception as e:  # reported on the kernel's row
                out[key][kernel] = (p.knobs, e)
    plans = [(key, kernel, plan) for key, d in out.items() for kernel, (_, plan) in d.items()
             if not isinstance(plan, Exception)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = [(key, kernel, pool.submit(build_cubin, plan.source, target, cache)) for key, kernel, plan in plans]
        for key, kernel, future in futures:
            try:
                future.result()
            except Exception as e:  # a failed build: that contender's error on the row
                out[key][kernel] = (out[key][kernel][0], e)
    return out


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------


def contender_parts(row: Mapping, contenders: Sequence[str]) -> list[str]:
    """Each contender's part of a progress line (bench.py's rows too): its time and error, or
    why it failed; nothing for one the row does not hold."""
    parts = []
    for c in contenders:
        if f"{c}_s" in row:
            parts.append(f"{c} {row[f'{c}_s'] * 1e6:8.1f} us (err {row[f'{c}_err']:.1e}{_profile_part(row, c)})")
        elif f"{c}_error" in row:
            parts.append(f"{c} FAILED: {row[f'{c}_error'][:200]}")
    return parts


def _profile_part(row: Mapping, c: str) -> str:
    """What a contender's line adds from its profile: its time in its kernels, or why there is none."""
    if f"{c}_busy_s" in row:
        return f", kernels {row[f'{c}_busy_s'] * 1e6:.1f} us"
    if f"{c}_profile_error" in row:
        return f", no profile: {row[f'{c}_profile_error'][:120]}"
    return ""


def format_projection_row(row: Mapping, contenders: Sequence[str]) -> str:
    n = f"{row['n']}x{row['products']}" if row["products"] > 1 else str(row["n"])
    head = f"{row['case']} {row['kernel']:<28} M {row['m']:<5} N {n:<7} K {row['k']:<5}"
    if "error" in row:
        return head + f" | {row['error']}"
    return " | ".join([head, *contender_parts(row, contenders)])


def format_projection_table(rows: Sequence[Mapping], contenders: Sequence[str]) -> str:
    """Per (size, kernel): M N K, each contender's time (us) and TFLOP/s, each Emmy over cuBLAS and
    over torch.compile (the fused job). Where the rows were profiled, each contender's time in
    its kernels (`kernels us`, launch gaps left out) and the same ratios of those."""
    emmys = [c for c in contenders if c.startswith("emmy")]
    others = [c for c in contenders if c in ("cublas", "compile")]
    busy = any(f"{c}_busy_s" in r for r in rows for c in contenders)
    ratios = [(e, o) for e in emmys for o in others]
    head = (["case", "kernel", "M", "N", "K", "job"] + [f"{c} us" for c in contenders]
            + [f"{c} TFLOP/s" for c in contenders] + [f"{e}/{o}" for e, o in ratios])
    if busy:
        head += [f"{c} kernels us" for c in contenders] + [f"{e}/{o} kernels" for e, o in ratios]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        n = f"{r['n']}x{r['products']}" if r["products"] > 1 else str(r["n"])
        cells = [r["case"], r["kernel"], str(r["m"]), n, str(r["k"]), r["job"]]
        cells += [f"{r[f'{c}_s'] * 1e6:.1f}" if f"{c}_s" in r else "fail" for c in contenders]
        cells += [f"{r['flops'] / r[f'{c}_s'] / 1e12:.0f}" if f"{c}_s" in r else "-" for c in contenders]
        cells += [ratio_cell(r, e, o) for e, o in ratios]
        if busy:
            cells += [f"{r[f'{c}_busy_s'] * 1e6:.1f}" if f"{c}_busy_s" in r else "-" for c in contenders]
            cells += [ratio_cell(r, e, o, "busy_s") for e, o in ratios]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_cell(row: Mapping, a: str, b: str, field: str = "s") -> str:
    """A table cell: contender `a`'s `field` (a time) over `b`'s, or "-" where either is missing."""
    x, y = row.get(f"{a}_{field}"), row.get(f"{b}_{field}")
    return f"{x / y:.2f}" if x is not None and y else "-"


def build_projections(traced, target: str, builds: Mapping[str, EmmyBuild]) -> list[tuple[str, object]]:
    """(label, launch plan) of every projection of the layer as each build lowers it (no GPU)."""
    from emmy.measure.candidate import lower_candidate

    plans = []
    for key, build in builds.items():
        for p in compiled_projections(traced, target, build):
            label = p.kernel if key == "emmy" else f"{key} {p.kernel}"
            plans.append((label, lower_candidate(p.module, p.kernel, p.knobs).plan))
    return plans


__all__ = ["TORCH_CONTENDERS", "Projection", "a_matrix", "as_matrix", "build_projections", "compiled_projections",
           "format_projection_row", "format_projection_table", "job_function", "job_inputs", "lower_emmys",
           "profiled", "projections", "random_values", "ratio_cell", "read_projection", "reference", "time_projection",
           "time_projections"]
