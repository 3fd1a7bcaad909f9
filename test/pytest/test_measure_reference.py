"""The measurer's reference (emmy.measure.reference) on the CPU: row-parallel kernels sampled on
three runs of rows and checked there, and the reference kept in the kernel cache, computed once
by one of several processes. The attention kernel's sampling: test_measure.py."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from emmy.measure import reference as R
from emmy.measure.reference import check_outputs, row_axis, sample_runs, sampled_reference, task_inputs

MODEL = "Qwen/Qwen3-Embedding-0.6B"
TOKENS, ROWS = 64, 8  # three runs of 8 of the 64 token rows: sampled


@lru_cache(maxsize=1)
def _layer_tasks() -> dict:
    """The Qwen3 layer's tuning tasks at 64 tokens, by kernel name."""
    from emmy.driver import CompileOptions
    from emmy.search.task import tasks_of

    return {t.kernel: t for t in tasks_of(CompileOptions(model=MODEL, layer=0, target="sm_90a"), [TOKENS])}


@pytest.fixture(autouse=True)
def _sample_small_kernels(monkeypatch):
    """These tests sample kernels of 64 rows: below WHOLE_ROWS (checked whole) by default."""
    monkeypatch.setattr(R, "WHOLE_ROWS", 0)


def test_kernels_up_to_whole_rows_are_checked_whole(monkeypatch):
    """By default a row-parallel kernel of up to WHOLE_ROWS rows is not sampled: the whole
    reference, no masks."""
    monkeypatch.setattr(R, "WHOLE_ROWS", TOKENS)
    task = _layer_tasks()["o_proj_residual"]
    inputs = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS)
    assert inputs.masks == [None]
    monkeypatch.setattr(R, "WHOLE_ROWS", TOKENS - 1)
    inputs = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS)
    assert inputs.masks[0] is not None and not inputs.masks[0].all()


def _sampled_rows() -> np.ndarray:
    rows = np.zeros(TOKENS, dtype=bool)
    for lo, hi in sample_runs(TOKENS, ROWS):
        rows[lo:hi] = True
    return rows


# sampling the rows ------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["o_proj_residual", "rms_norm_qkv_proj", "rms_norm_gate_up_proj_silu"])
def test_row_parallel_reference_is_the_whole_at_three_runs_of_rows(kernel):
    """A projection (with a residual), a norm+projection (the sum of squares a prologue) and the
    gated silu(gate) * up kernel: evaluated on three runs of token rows, equal there to the whole
    evaluation; the masks hold those rows and nothing else."""
    task = _layer_tasks()[kernel]
    assert row_axis(task.info()) == "m"
    whole = task_inputs(task.module, kernel, device="cpu", sample_rows=0)
    sampled = task_inputs(task.module, kernel, device="cpu", sample_rows=ROWS)
    assert all(m is None for m in whole.masks) and len(sampled.masks) == len(whole.reference)
    rows = _sampled_rows()
    assert sample_runs(TOKENS, ROWS) == [(0, 8), (24, 32), (56, 64)]
    for ref, got, mask in zip(whole.reference, sampled.reference, sampled.masks):
        assert mask is not None and mask.shape == ref.shape == got.shape
        by_row = mask.reshape(TOKENS, -1)  # the token axis is the results' first
        assert by_row[rows].all() and not by_row[~rows].any()
        assert np.isfinite(ref).all() and np.abs(ref[mask]).max() > 0
        np.testing.assert_allclose(got[mask], ref[mask], rtol=1e-2, atol=1e-3)


def test_check_with_masks_flags_a_wrong_row_inside_a_run_only():
    """check_outputs with the sampled masks: a wrong element in a sampled row is an error over
    the tolerance; one in a row outside the runs is not looked at (a NaN there still counts)."""
    torch = pytest.importorskip("torch")
    task = _layer_tasks()["o_proj_residual"]
    whole = task_inputs(task.module, task.kernel, device="cpu", sample_rows=0)
    sampled = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS)
    (ref,) = whole.reference
    rows = _sampled_rows()
    inside, outside = int(np.flatnonzero(rows)[9]), int(np.flatnonzero(~rows)[5])

    def check(row: int | None, value: float = 100.0) -> tuple[float, int]:
        out = torch.from_numpy(ref.copy())
        if row is not None:
            out.view(TOKENS, -1)[row, 3] = value
        return check_outputs([out], sampled.reference, sampled.masks)

    # the whole and the sampled references agree up to float32 summation order (the CPU's matrix
    # kernels block a product of all rows and one of a few runs of rows differently): not bit for bit
    error, nans = check(None)
    assert error < 1e-4 and nans == 0
    error, nans = check(inside)
    assert error > 1e-2 and nans == 0
    error, nans = check(outside)
    assert error < 1e-4 and nans == 0
    assert check(outside, float("nan")) == (float("inf"), 1)


def _loop_kernel(sums: tuple[str, ...], M: int, N: int):
    """out[m, n] = x[m, n] minus a sum of x for each of `sums` ("m": over the rows, that is the
    column's sum, in the rows' own axis; "n": the row's sum; "mn": the sum of everything), as a
    `loop.fused`."""
    from emmy.context import make_context
    from emmy.dialects.loop import FusedOp
    from emmy.ir_io import parse_module

    t = f"tensor<{M}x{N}xf32>"
    body, value = [], "%v"
    for i, over in enumerate(sums):
        axes = ", ".join(f'"{a}"' for a in over)
        body.append(f"""    %s{i} = loop.reduce sum [{axes}] : f32 {{
      %m{i} = loop.axis "m" : index
      %n{i} = loop.axis "n" : index
      %a{i} = loop.load %xa[%m{i}, %n{i}] : {t} -> f32
      loop.yield %a{i} : f32
    }}
    %o{i} = arith.subf {value}, %s{i} : f32""")
        value = f"%o{i}"
    text = f"""builtin.module {{
func.func @f(%x: {t}) -> {t} {{
  %out = loop.fused @centre axes [m = {M}, n = {N}] ins(%x : {t}) -> {t} {{
  ^bb0(%xa: {t}):
    %m = loop.axis "m" : index
    %n = loop.axis "n" : index
    %v = loop.load %xa[%m, %n] : {t} -> f32
{chr(10).join(body)}
    loop.store {value}, 0 [%m, %n] : f32
    loop.yield
  }}
  func.return %out : {t}
}}
}}"""
    module = parse_module(make_context(), text, "<test>")
    return next(op for op in module.walk() if isinstance(op, FusedOp))


def _centred(x: np.ndarray, sums: tuple[str, ...]) -> np.ndarray:
    out = x.copy()
    for over in sums:
        out -= x.sum(axis=tuple("mn".index(a) for a in over), keepdims=True)
    return out


@pytest.mark.parametrize("sums, N, axis", [(("m",), 4, "n"), (("m", "n"), 64, None), (("mn",), 64, None)])
def test_rows_mixed_by_a_reduce_are_not_sampled(sums, N, axis):
    """Kernels whose value at row m reads every row through a reduce over m itself: never
    sampled along m (restricting m would sum a run only). The column-centred one (x minus its
    column sums) has independent columns, the axis it may be sampled by: here too few; centred
    both ways (x minus its row and its column sums: both axes reduced) or minus the sum of
    everything, it has none. All evaluated whole, and right."""
    from emmy.analysis.classify import classify

    M = 64
    kernel = _loop_kernel(sums, M, N)
    assert row_axis(classify(kernel)) == axis
    x = np.random.default_rng(0).standard_normal((M, N)).astype(np.float32)
    assert sampled_reference(kernel, [x], ROWS) is None
    (ref,), (mask,) = R.reference(kernel, [x], ROWS)
    assert mask is None
    np.testing.assert_allclose(ref, _centred(x, sums), rtol=1e-5, atol=1e-4)


def test_rows_mixed_along_one_axis_are_sampled_along_the_other():
    """The column-centred kernel with many columns: sampled by runs of columns (n), each whole
    over the rows (m) its sum mixes, and equal there to x minus the column sums."""
    from emmy.analysis.classify import classify

    M, N = 64, 64
    kernel = _loop_kernel(("m",), M, N)
    assert row_axis(classify(kernel)) == "n"
    x = np.random.default_rng(1).standard_normal((M, N)).astype(np.float32)
    (ref,), (mask,) = sampled_reference(kernel, [x], ROWS)
    columns = _sampled_rows()
    assert mask[:, columns].all() and not mask[:, ~columns].any()
    np.testing.assert_allclose(ref[mask], _centred(x, ("m",))[mask], rtol=1e-5, atol=1e-4)


# the reference kept in the kernel cache ---------------------------------------------------------


def _counting(monkeypatch) -> list:
    """Replace the reference's computation by one that records each call."""
    calls: list = []
    real = R.reference

    def counted(*args, **kw):
        calls.append(args[0].properties["sym_name"].data)
        return real(*args, **kw)

    monkeypatch.setattr(R, "reference", counted)
    return calls


def _same(a, b) -> None:
    assert len(a.reference) == len(b.reference) == len(a.masks) == len(b.masks)
    for ra, rb, ma, mb in zip(a.reference, b.reference, a.masks, b.masks):
        assert (ma is None) == (mb is None)
        if ma is None:
            np.testing.assert_array_equal(ra, rb)
        else:
            np.testing.assert_array_equal(ma, mb)
            np.testing.assert_array_equal(ra[ma], rb[mb])


@pytest.mark.parametrize("rows", [ROWS, 0])
def test_reference_is_kept_and_read_back(tmp_path, monkeypatch, rows):
    """The first call computes the reference and keeps it in the cache; the second reads it
    (never computing), with the same inputs (from the seed), results and masks."""
    task = _layer_tasks()["o_proj_residual"]
    calls = _counting(monkeypatch)
    first = task_inputs(task.module, task.kernel, device="cpu", sample_rows=rows, cache_dir=tmp_path)
    assert calls == [task.kernel]
    assert len(list((tmp_path / "references").glob("*.npz"))) == 1
    second = task_inputs(task.module, task.kernel, device="cpu", sample_rows=rows, cache_dir=tmp_path)
    assert calls == [task.kernel]  # read, not computed
    _same(first, second)
    assert (first.masks[0] is None) == (rows == 0)
    for name, value in first.values.items():
        assert bool((value == second.values[name]).all())
    other_seed = task_inputs(task.module, task.kernel, seed=1, device="cpu", sample_rows=rows, cache_dir=tmp_path)
    assert len(calls) == 2 and not np.array_equal(other_seed.reference[0], first.reference[0])


@pytest.mark.parametrize("damage", ["cut short", "not an npz", "empty"])
def test_a_damaged_kept_reference_is_computed_again(tmp_path, monkeypatch, damage):
    """A kept reference that cannot be read (cut short by a killed writer, overwritten, empty)
    is computed again and kept afresh, never a crash."""
    task = _layer_tasks()["o_proj_residual"]
    calls = _counting(monkeypatch)
    first = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS, cache_dir=tmp_path)
    (path,) = (tmp_path / "references").glob("*.npz")
    data = path.read_bytes()
    path.write_bytes({"cut short": data[: len(data) // 2], "not an npz": b"\x00garbage" * 100, "empty": b""}[damage])
    again = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS, cache_dir=tmp_path)
    assert len(calls) == 2
    _same(first, again)
    task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS, cache_dir=tmp_path)
    assert len(calls) == 2  # the recomputed one was kept whole


def test_a_cache_that_cannot_be_written_only_costs_computing(tmp_path, monkeypatch):
    task = _layer_tasks()["o_proj_residual"]
    calls = _counting(monkeypatch)
    blocked = tmp_path / "a file"
    blocked.write_text("not a folder")
    one = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS, cache_dir=blocked)
    two = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS, cache_dir=blocked)
    assert len(calls) == 2
    _same(one, two)


def _inputs_in_a_process(text: str, kernel: str, cache: str, log: str, out: str, barrier) -> None:
    """(In a process of its own) the task's inputs from the shared cache, its computations of the
    reference logged (each held a second, so that the others arrive meanwhile), the results
    saved to `out`."""
    import os
    import time

    from emmy.measure import reference as ref

    real = ref.reference

    def logged(*args, **kw):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        return real(*args, **kw)

    ref.reference = logged
    ref.WHOLE_ROWS = 0  # (a spawned process: the parent's monkeypatch does not reach it)
    barrier.wait()
    inputs = ref.task_inputs(text, kernel, device="cpu", sample_rows=ROWS, cache_dir=Path(cache))
    np.savez(out, *inputs.reference, *inputs.masks)


def test_concurrent_processes_compute_the_reference_once(tmp_path):
    """Three processes (as `emmy tune --workers 3`'s) wanting the same reference at once: one
    computes it, the others wait for it and read it; all three hold the same."""
    import multiprocessing

    task = _layer_tasks()["o_proj_residual"]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3)
    log = tmp_path / "computed"
    outs = [tmp_path / f"out{i}.npz" for i in range(3)]
    procs = [ctx.Process(target=_inputs_in_a_process,
                         args=(task.module, task.kernel, str(tmp_path / "cache"), str(log), str(o), barrier))
             for o in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(log.read_text().split()) == 1
    mine = task_inputs(task.module, task.kernel, device="cpu", sample_rows=ROWS)
    for o in outs:
        with np.load(o) as z:
            ref, mask = z["arr_0"], z["arr_1"]
        np.testing.assert_array_equal(mask, mine.masks[0])
        np.testing.assert_array_equal(ref[mask], mine.reference[0][mask])
