"""The GPU measurer on a CUDA device: a right kernel measured "ok", a wrong one detected, an
unwritten tile caught by the NaN fill, failed builds reported, interleaved remeasuring."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from test_measure import KERNEL, _isolated_text  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@dataclasses.dataclass(frozen=True)
class _Task:  # the fields of emmy.search.task.TuneTask the measurer reads
    kernel: str
    module: str
    target: str = "sm_90a"


def _cache(tmp_path):
    import os
    from pathlib import Path

    return Path(os.environ["EMMY_HOME"]) if os.environ.get("EMMY_HOME") else tmp_path


def _measurer(tmp_path, **kw):
    from emmy.measure.gpu import GpuMeasurer

    return GpuMeasurer(_cache(tmp_path), workers=4, reps=10, **kw)


def test_right_kernels_are_ok_and_failed_builds_reported(tmp_path):
    task = _Task(KERNEL, _isolated_text())
    with _measurer(tmp_path) as m:
        env = m.environment()
        results = m.measure(task, [{}, {"workers": "mma_sync"}, {"block_m": 7}, {"workers": "wgmma", "warps": 4}])
    assert set(env) == {"card", "driver", "cuda", "torch", "emmy", "source_hash"} and "H" in env["card"] or env["card"]
    ok = [results[i] for i in (0, 1, 3)]
    for r in ok:
        assert r.status == "ok", r.reason
        assert r.time_s > 0 and r.spread >= 0 and r.error <= 1e-2
        assert r.facts["copies"] >= 1 and r.facts["knobs"]
    assert results[1].facts["knobs"]["workers"] == "mma_sync"
    assert results[2].status == "build_failed" and "block_m" in results[2].reason


def test_a_wrong_kernel_is_detected(tmp_path):
    """A test hook corrupts one candidate's output after its call (one 16 x 64 tile of v zeroed,
    as a kernel storing a tile's wrong content would): that one is "wrong"."""

    def corrupt(index, outputs):
        if index == 1:
            outputs[2][0, 16:32, 64:128] = 0.0

    task = _Task(KERNEL, _isolated_text())
    with _measurer(tmp_path, check_hook=corrupt) as m:
        right, wrong = m.measure(task, [{}, {}])
    assert right.status == "ok", right.reason
    assert wrong.status == "wrong" and wrong.time_s is None
    assert wrong.error > 1e-2 and "relative error" in wrong.reason


def test_nan_fill_catches_an_unwritten_tile(tmp_path):
    """The kernel launched on half its grid: the tiles never written stay NaN and fail the check."""
    from emmy.measure.candidate import lower_candidate
    from emmy.measure.gpu import load
    from emmy.measure.reference import check_outputs, task_inputs

    text = _isolated_text()
    lowered = lower_candidate(text, KERNEL, {"workers": "mma_sync", "schedule": "grid"})
    plan = lowered.plan
    half = [dataclasses.replace(la, grid=(max(1, la.grid[0] // 2), *la.grid[1:])) for la in plan.launches]
    assert any(la.grid != h.grid for la, h in zip(plan.launches, half))
    inputs = task_inputs(text, KERNEL)
    for launches, broken in ((plan.launches, False), (half, True)):
        plan.launches = launches
        loaded = load(plan, "sm_90a", _cache(tmp_path), inputs.values)
        loaded.bindings[0].launch()
        torch.cuda.synchronize()
        error, nans = check_outputs(loaded.bindings[0].outputs, inputs.reference)
        assert (nans > 0) == broken and (error == float("inf")) == broken, (error, nans)


def test_remeasure_interleaved(tmp_path):
    task = _Task(KERNEL, _isolated_text())
    with _measurer(tmp_path) as m:
        a, b = m.remeasure(task, [{}, {"workers": "mma_sync"}], rounds=6)
    assert a.status == b.status == "ok"
    assert a.facts["samples"] == b.facts["samples"] == 6


# Three kernels of the Qwen3 layer at 512 tokens, the rules' answer and a few pinned neighbours
# each: the rules' answer must measure "ok"; every figure is printed (run with -s).
QWEN_CANDIDATES = {
    "rms_norm_qkv_proj": [{}, {"block_n": 64}, {"workers": "wgmma", "warps": 4}, {"copy": "cp_async"}],
    "attention": [{}, {"fusion": "split"}, {"block_kv": 128}, {"block_q": 128, "warps": 8, "block_kv": 128}],
    "down_proj_residual": [{}, {"split_k": 1}, {"schedule": "persistent"}, {"workers": "mma_sync"}],
}


@pytest.fixture(scope="module")
def qwen_tasks():
    from emmy.driver import CompileOptions, compile_model
    from emmy.ir_io import print_module
    from emmy.measure.isolate import isolate

    result = compile_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", tokens=512, target="sm_90a",
                                          stop_after="tile"))
    return {k: _Task(k, print_module(isolate(result.module, k))) for k in QWEN_CANDIDATES}


@pytest.mark.parametrize("kernel", list(QWEN_CANDIDATES))
def test_qwen3_layer_kernels_at_512_tokens(kernel, qwen_tasks, tmp_path):
    task = qwen_tasks[kernel]
    with _measurer(tmp_path) as m:
        results = m.measure(task, QWEN_CANDIDATES[kernel])
        ok = [i for i, r in enumerate(results) if r.ok]
        best = sorted(ok, key=lambda i: results[i].time_s)[:3]
        again = m.remeasure(task, [QWEN_CANDIDATES[kernel][i] for i in best], rounds=20)
        print(f"\n{kernel} on {m.environment()}")
    for cand, r in zip(QWEN_CANDIDATES[kernel], results):
        t = f"{r.time_s * 1e6:8.2f} us +-{r.spread:.1%}" if r.ok else " " * 20
        print(f"  {str(cand):40} {r.status:13} {t} err {r.error if r.error is None else f'{r.error:.1e}'} "
              f"copies {r.facts.get('copies')} regs {r.facts.get('registers')} smem {r.facts.get('smem')} {r.reason[:150]}")
    for i, r in zip(best, again):
        print(f"  remeasured {str(QWEN_CANDIDATES[kernel][i]):40} {r.status} {r.time_s * 1e6:8.2f} us +-{r.spread:.1%}")
    assert results[0].status == "ok", results[0].reason
    assert all(r.status in ("ok", "build_failed", "spills") for r in results), [r.reason for r in results]


def test_measurers_share_the_kept_sampled_reference(qwen_tasks, tmp_path, monkeypatch):
    """The down projection at 512 tokens: its reference is sampled (three runs of 64 token rows)
    and computed once, by the first measurer; a second measurer on the same kernel cache reads
    it. An element corrupted in a sampled row makes the candidate "wrong"; one in a row outside
    the runs is not looked at."""
    from emmy.measure import reference as R
    from emmy.measure.gpu import GpuMeasurer

    calls: list = []
    real = R.reference
    monkeypatch.setattr(R, "reference", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(R, "WHOLE_ROWS", 0)  # sampled at 512 rows (by default checked whole up to 8192)
    inside, outside = 200, 100  # the runs: rows 0-63, 192-255, 448-511

    def corrupt(index, outputs):
        if index:
            outputs[0].view(512, -1)[inside if index == 1 else outside, 7] += 1e5  # (relative error ~4 over a run)

    task = qwen_tasks["down_proj_residual"]
    with GpuMeasurer(tmp_path, workers=2, reps=3, check_hook=corrupt) as m:
        right, wrong, unseen = m.measure(task, [{}, {}, {}])
    assert calls == [1]
    assert right.status == "ok" and unseen.status == "ok", (right.reason, unseen.reason)
    assert wrong.status == "wrong" and "relative error" in wrong.reason
    with GpuMeasurer(tmp_path, workers=2, reps=3) as other:
        (again,) = other.measure(task, [{}])
    assert calls == [1] and again.status == "ok", again.reason
    assert len(list((tmp_path / "references").glob("*.npz"))) == 1


def test_the_gpu_measurer_in_its_child_process(tmp_path):
    """What `emmy tune` runs: the GPU measurer in a child process with a deadline per
    candidate (emmy.measure.child), answers as the measurer itself does."""
    from functools import partial

    from emmy.measure.child import ChildMeasurer
    from emmy.measure.gpu import pinned_measurer

    task = _Task(KERNEL, _isolated_text())
    with ChildMeasurer(partial(pinned_measurer, _cache(tmp_path), 0), deadline_s=60.0) as m:
        env = m.environment()
        results = m.measure(task, [{}, {"block_m": 7}])
        again = m.remeasure(task, [{}], rounds=3)
        assert m.replaced == []
    assert env["card"]
    assert results[0].status == "ok" and results[0].time_s > 0, results[0].reason
    assert results[1].status == "build_failed"
    assert again[0].status == "ok" and again[0].time_s > 0
