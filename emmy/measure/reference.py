"""A kernel's inputs and its reference results: what every candidate of it is checked against.

    inputs = task_inputs(task.module, task.kernel, seed=0, device="cuda", cache_dir=home)
    inputs.values                 # argument name -> tensor on `device` (seeded random)
    inputs.reference, inputs.masks  # the kernel's results (float32 numpy); where each holds them
    error, nans = check_outputs(outputs, inputs.reference, inputs.masks)

The inputs are fresh random tensors of the isolated function's argument shapes, seeded (bf16/f16/
f32 standard normal, integers 0 or 1 so that any index is in range). The reference is the
kernel's body evaluated with numpy on them, the schedule playing no part (the loop-stage
evaluator, `emmy.analysis.body`: einsum for the products).

A large kernel is evaluated on **three runs of rows** only, `sample_rows` rows each: the first,
the middle and the last (`sampled_reference`), and checked there (`masks`):
- an attention kernel on runs of queries, the keys a chunk at a time with an online softmax;
- a contraction or a reduction whose rows are independent along a parallel axis (`row_axis`:
  the rows of a contraction's A side, a reduction's rows) of more than `WHOLE_ROWS` rows (8192:
  below it the whole check, which sees a wrong tile anywhere, costs seconds) on runs of that axis, the body
  evaluated with the axis restricted to each run. The evaluator computes every value over a
  run exactly as over the whole axis, whatever the value reads (the weights, or other rows
  through a reduce over an axis of its own, are read whole): only a `loop.reduce` over the axis
  itself mixes its iterations, and a kernel with one is not sampled along it.
At 32768 tokens the whole reference of the Qwen3 layer's projections took 5-26 s of numpy each.

The reference is kept on disk in the kernel cache (`cache_dir`, EMMY_HOME's), keyed by the
module, the kernel, the seed, the sample rows, the generator (PyTorch's version), Emmy's source
and `FORMAT`: the measuring processes of one host compute it once (a file lock per key: the
first computes, the others wait and load it). Written atomically, so no reader sees half a file;
one that cannot be read is computed again. The inputs themselves are regenerated from the seed.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from emmy.diagnostics import EmmyError
from emmy.interp.numeric import element_dtype, round_to

SAMPLE_ROWS = 64
# A row-parallel kernel of up to this many rows is checked whole: kept once per host, its whole
# reference costs seconds (0.3-3 s per projection of the Qwen3 layer at 4096 tokens on 2 cores),
# and only a whole check sees a wrong tile anywhere (three runs of rows hold few of a kernel's
# tiles). Beyond it the runs keep the reference within seconds (at 32768 tokens 5-26 s whole).
WHOLE_ROWS = 8192
# keys per step of the sampled attention reference's online softmax (its memory grows with it)
KEY_CHUNK = 1024
# the version of the kept reference's file format and meaning (bump when either changes)
FORMAT = 1


@dataclass
class TaskInputs:
    """One task's inputs (by argument name, tensors) and reference results (numpy), each with
    the mask of the elements the reference holds (None: all of them)."""

    values: dict[str, object]
    reference: list[np.ndarray]
    masks: list[np.ndarray | None] = field(default_factory=list)


def task_inputs(module_text: str, kernel_name: str, seed: int = 0, device: str = "cuda",
                sample_rows: int = SAMPLE_ROWS, cache_dir: Path | None = None) -> TaskInputs:
    """Random inputs of the isolated function's argument shapes (tensors on `device` by argument
    name) and the kernel's results on them (float32 numpy): whole, or on three runs of
    `sample_rows` rows (`sampled_reference`; 0: always whole). With `cache_dir`, the reference
    is read from the kernel cache where a process computed it before (see the module docstring)."""
    from emmy.context import make_context
    from emmy.dialects.tile import KernelOp
    from emmy.execute import argument_names, entry_function
    from emmy.ir_io import parse_module

    module = parse_module(make_context(), module_text, f"<isolated {kernel_name}>")
    fn = entry_function(module)
    names = argument_names(fn)
    made = _random_inputs(fn.function_type.inputs.data, seed)
    kernel = next(op for op in fn.walk() if isinstance(op, KernelOp))
    index = {arg: i for i, arg in enumerate(fn.body.block.args)}

    def compute() -> tuple[list, list]:  # (the inputs on the host only when it is computed)
        return reference(kernel, [_host(made[index[v]]) for v in kernel.operands], sample_rows)

    if cache_dir is None:
        refs, masks = compute()
    else:
        shapes = [tuple(r.type.get_shape()) for r in kernel.results]
        refs, masks = kept_reference(Path(cache_dir), reference_key(module_text, kernel_name, seed, sample_rows),
                                     shapes, compute)
    return TaskInputs({name: x.to(device) for name, x in zip(names, made)}, refs, masks)


def _random_inputs(types: Sequence, seed: int) -> list:
    """Seeded random CPU tensors of the types: floats standard normal, integers 0 or 1."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in types:
        dtype = _torch_dtype(element_dtype(t))
        shape = tuple(t.get_shape())
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(dtype))
        else:
            out.append(torch.randint(0, 2, shape, generator=gen).to(dtype))
    return out


def _host(x) -> np.ndarray:
    """A CPU tensor as the evaluator takes it: float32 or int64 numpy."""
    return x.float().numpy() if x.dtype.is_floating_point else x.numpy().astype(np.int64)


def reference(kernel, operands: Sequence[np.ndarray], rows: int = SAMPLE_ROWS) -> tuple[list, list]:
    """(results, masks): the kernel's results on `operands`, on three runs of `rows` rows where
    `sampled_reference` samples it, else whole (masks None)."""
    from emmy.analysis.body import evaluate

    sampled = sampled_reference(kernel, operands, rows)
    if sampled is not None:
        return sampled
    results = evaluate(kernel, operands)
    return [np.asarray(r, dtype=np.float32) for r in results], [None] * len(results)


def sample_runs(extent: int, rows: int) -> list[tuple[int, int]]:
    """The three runs of `rows` rows a sampled reference evaluates: first, middle, last."""
    return [(start, start + rows) for start in (0, (extent - rows) // 2 // rows * rows, extent - rows)]


def row_axis(info) -> str | None:
    """The axis along which a contraction or a reduction (`KernelInfo`) computes its rows
    independently, the longest where several are: the rows of a contraction's A side (its m
    axes: the activation's rows, read with whole weights) or of a reduction (`row_axes`) that no
    `loop.reduce` of the body reduces (see the module docstring). None where there is none, for
    attention (sampled by queries) and for elementwise kernels (evaluated whole: that costs
    about what making their inputs does)."""
    from emmy.dialects.loop import ReduceOp

    candidates = {"contraction": info.m_axes, "reduction": info.row_axes}.get(info.kind, ())
    reduced = {a for op in info.op.walk() if isinstance(op, ReduceOp) for a in op.axis_names}
    rows = [a for a in candidates if a in info.parallel_axes and a not in reduced]
    return max(rows, key=lambda a: info.axes[a], default=None)


def sampled_reference(kernel, operands: Sequence[np.ndarray], rows: int,
                      key_chunk: int = KEY_CHUNK) -> tuple[list, list] | None:
    """The kernel's results on three runs of `rows` rows (`sample_runs`), with the masks of
    those elements: for an attention kernel of more than 3 x `rows` queries, runs of queries
    (`_attention_runs`); for a kernel whose rows are independent along an axis (`row_axis`) of
    more than 3 x `rows` and more than `WHOLE_ROWS` rows, runs of that axis, each evaluated with
    the axis restricted to it.
    None for other kernels and small ones, which are evaluated whole."""
    from emmy.analysis.classify import classify
    from emmy.interp.tile_stage import _Kernel

    if rows <= 0:
        return None
    info = classify(kernel)
    if info.attention is not None:
        if info.axes[info.attention.query_axis] <= 3 * rows:
            return None
        return _attention_runs(kernel, info, operands, rows, key_chunk)
    axis = row_axis(info)
    if axis is None or info.axes[axis] <= max(3 * rows, WHOLE_ROWS):
        return None
    k = _Kernel(kernel, info, operands)
    for run in sample_runs(info.axes[axis], rows):
        k.store_block({axis: run}, {})
    return _written(k, kernel)


def _attention_runs(kernel, info, operands: Sequence[np.ndarray], rows: int, key_chunk: int) -> tuple[list, list]:
    """An attention kernel's results on three runs of `rows` queries. The whole attention's cost
    grows with the square of the queries (at 4096 tokens, minutes of numpy).

    The keys are taken `key_chunk` at a time with an online softmax (running max, running sum,
    output rescaled), so that memory stays bounded by the chunk whatever the sequence length
    (whole, the key side alone of the Qwen3 layer's attention held about 20 GB at 32768 tokens);
    the values of a chunk that do not depend on the queries (the keys' norm and rotation, ...)
    are computed once per chunk for all three runs (`_key_side`)."""
    from emmy.interp.tile_stage import _expand, _Kernel, _rescale_factor, _tiles

    att = info.attention
    axis, key = att.query_axis, att.key_axis
    k = _Kernel(kernel, info, operands)
    mx, sm, pv = att.max_reduce.result, att.sum_reduce.result, att.pv.reduce.result
    runs = sample_runs(info.axes[axis], rows)
    state: dict[tuple[int, int], tuple] = {}  # run -> (max, sum, output, their axes)
    for kr in _tiles(info.axes[key], max(1, key_chunk)):
        shared = _key_side(k, att, {key: kr})
        for qr in runs:
            kb = {axis: qr, key: kr}
            s_max, m_axes = k.value(mx, kb, shared)
            m_old, l_old, acc_old, _ = state.get(qr, (None, None, None, None))
            m_new = s_max if m_old is None else np.maximum(m_old, s_max)
            m_safe = np.where(np.isneginf(m_new), np.float32(0), m_new).astype(np.float32)
            over = {**shared, mx: m_safe}
            p_sum, l_axes = k.value(sm, kb, over)
            if att.pv_uses_sum:
                over[sm] = np.ones_like(p_sum)
            part, acc_axes = k.value(pv, kb, over)
            if m_old is not None:
                alpha = _rescale_factor(m_old, m_safe)
                p_sum = l_old * _expand(alpha, m_axes, l_axes) + p_sum
                part = acc_old * _expand(alpha, m_axes, acc_axes) + part
            state[qr] = (m_new, p_sum, part, (l_axes, acc_axes))
    for qr, (m, l, acc, (l_axes, acc_axes)) in state.items():
        m_final = np.where(np.isneginf(m), np.float32(0), m).astype(np.float32)
        if att.pv_uses_sum:
            with np.errstate(invalid="ignore", divide="ignore"):
                acc = acc / _expand(l, l_axes, acc_axes)
        k.store_block({axis: qr}, {mx: m_final, sm: l, pv: acc.astype(np.float32)})
    return _written(k, kernel)


def _written(k, kernel) -> tuple[list, list]:
    """The results a tile-stage `_Kernel` wrote, rounded to their element types where written,
    and the masks of those elements (the rest is never read, and never touched: untouched pages
    of a large result cost no memory)."""
    masks = [w > 0 for w in k.writes]
    refs = []
    for out, mask, r in zip(k.outs, masks, kernel.results):
        ref = np.asarray(out, dtype=np.float32)
        ref[mask] = round_to(ref[mask], element_dtype(r.type))
        refs.append(ref)
    return refs, masks


def _key_side(k, att, ranges: Mapping[str, tuple[int, int]]) -> dict:
    """The values of the attention's body over the keys in `ranges` that do not depend on the
    queries but are used by values that do (the frontier between the key side and the rest),
    as overrides: evaluated once, shared by every run of queries."""
    from xdsl.ir import OpResult

    domains = k.ev.domains
    query, keys = domains.bit[att.query_axis], domains.bit[att.key_axis]
    frontier: list = []
    for op in k.ev.block.walk():
        if not any(domains.mask(r) & query for r in op.results):
            continue
        for v in op.operands:
            mask = domains.mask(v)
            if isinstance(v, OpResult) and mask & keys and not mask & query and v not in frontier:
                frontier.append(v)
    return {v: k.value(v, dict(ranges))[0] for v in frontier}


# ------------------------------------------------------------------------------------------------
# The reference kept on disk
# ------------------------------------------------------------------------------------------------


def reference_key(module_text: str, kernel_name: str, seed: int, sample_rows: int) -> str:
    """The name of a kept reference: a hash of everything it depends on (the module, the kernel,
    the seed, the sample rows, the generator's version, Emmy's source and `FORMAT`)."""
    import torch

    from emmy.measure.gpu import source_hash

    parts = [f"format {FORMAT}", module_text, kernel_name, f"seed {seed}", f"rows {sample_rows}",
             f"whole rows {WHOLE_ROWS}", f"torch {torch.__version__}", source_hash()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def reference_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / "references" / f"{key}.npz"


def kept_reference(cache_dir: Path, key: str, shapes: Sequence[tuple[int, ...]],
                   compute: Callable[[], tuple[list, list]]) -> tuple[list, list]:
    """The reference kept under `key` in the kernel cache, else `compute()`d and kept. Under a
    lock per key, so that of the processes wanting it at once one computes it and the others
    wait and read it. A file that cannot be read (cut short, from another format, with other
    shapes than `shapes`) is computed again; a cache that cannot be written only costs the
    computing again next time."""
    path = reference_path(cache_dir, key)
    kept = _read(path, shapes)
    if kept is not None:
        return kept
    with _key_lock(cache_dir, key):
        kept = _read(path, shapes)  # (computed by another process while this one waited)
        if kept is not None:
            return kept
        refs, masks = compute()
        try:
            from emmy.backend.run import store_atomically

            path.parent.mkdir(parents=True, exist_ok=True)
            store_atomically(path, _encode(refs, masks))
        except OSError:
            pass
    return refs, masks


@contextmanager
def _key_lock(cache_dir: Path, key: str) -> Iterator[None]:
    """An exclusive lock on `locks/reference-KEY.lock` in the kernel cache (none where the
    cache cannot be written: each process then computes on its own)."""
    from emmy.backend.run import cache_lock

    with cache_lock(Path(cache_dir) / "locks" / f"reference-{key}.lock", required=False):
        yield


def _encode(refs: Sequence[np.ndarray], masks: Sequence[np.ndarray | None]) -> bytes:
    """An npz of each result's held values (`values{i}`: all of them, or where its mask is set)
    and its mask as bits (`mask{i}`, absent for none)."""
    arrays: dict[str, np.ndarray] = {"format": np.array(FORMAT), "count": np.array(len(refs))}
    for i, (ref, mask) in enumerate(zip(refs, masks)):
        arrays[f"shape{i}"] = np.array(ref.shape, dtype=np.int64)
        if mask is None:
            arrays[f"values{i}"] = np.ascontiguousarray(ref, dtype=np.float32)
        else:
            arrays[f"values{i}"] = np.asarray(ref[mask], dtype=np.float32)
            arrays[f"mask{i}"] = np.packbits(mask.ravel())
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _read(path: Path, shapes: Sequence[tuple[int, ...]]) -> tuple[list, list] | None:
    """The reference kept in `path`, or None where there is none or it cannot be read whole."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["format"]) != FORMAT or int(z["count"]) != len(shapes):
                return None
            refs, masks = [], []
            for i, shape in enumerate(shapes):
                if tuple(int(n) for n in z[f"shape{i}"]) != tuple(shape):
                    return None
                values = z[f"values{i}"]
                if f"mask{i}" not in z.files:
                    refs.append(values.reshape(shape).astype(np.float32, copy=False))
                    masks.append(None)
                    continue
                size = math.prod(shape)
                mask = np.unpackbits(z[f"mask{i}"], count=size).view(bool).reshape(shape)
                ref = np.zeros(shape, dtype=np.float32)
                ref[mask] = values
                refs.append(ref)
                masks.append(mask)
            return refs, masks
    except Exception:  # noqa: BLE001  (missing, cut short, not an npz, another layout: computed again)
        return None


# ------------------------------------------------------------------------------------------------
# The check
# ------------------------------------------------------------------------------------------------


def check_outputs(outs: Sequence[object], reference: Sequence[np.ndarray],
                  masks: Sequence[np.ndarray | None] | None = None) -> tuple[float, int]:
    """(the largest relative error over the results, NaN elements in them). A result with a mask
    is compared where the mask is set (the NaN count is over every element). Another number of
    results than the reference's is an EmmyError."""
    from emmy.interp.numeric import rel_error

    if len(outs) != len(reference):
        raise EmmyError(f"the kernel returns {len(outs)} results where the reference has {len(reference)}")
    worst, nans = 0.0, 0
    for i, (out, ref) in enumerate(zip(outs, reference)):
        arr = out.float().cpu().numpy().reshape(ref.shape)
        nans += int(np.isnan(arr).sum())
        mask = masks[i] if masks else None
        if mask is not None:
            arr, ref = arr[mask], ref[mask]
        worst = max(worst, math.inf if nans else rel_error(arr, ref))
    return worst, nans


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64,
            "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
            "i1": torch.bool}[name]


__all__ = ["FORMAT", "KEY_CHUNK", "SAMPLE_ROWS", "TaskInputs", "check_outputs", "kept_reference", "reference",
           "reference_key", "row_axis", "sample_runs", "sampled_reference", "task_inputs"]
