"""emmy.measure on the CPU: isolating a kernel, lowering and building candidates (nvcc, no GPU),
the reference, and the timing helpers' pure parts. The GPU measurer: test_measure_gpu.py."""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp
from emmy.ir_io import print_module
from emmy.measure import Measurement
from emmy.measure.builds import BuildJob, Builder, build_candidate, build_source
from emmy.measure.candidate import lower_candidate, pin_spec
from emmy.measure.isolate import isolate, kernel_names
from emmy.measure.timing import per_call_times, percentile, rotation_count, summarize

ROOT = Path(__file__).resolve().parents[2]
needs_nvcc = pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not on PATH")
KERNEL = "rms_norm_qkv_proj"


@lru_cache(maxsize=1)
def _example_tile():
    """The running example at 64 tokens on sm_90a, at the tile stage (after decide-forks)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from running_example import make

    from emmy.driver import CompileOptions, compile_traced
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    src = ModelSource(spec="running_example.py:make", kind="factory", model_id="example", factory=lambda: make(64))
    traced = trace_layer(src, 0, 64)
    opts = CompileOptions(model="example", tokens=64, target="sm_90a", stop_after="tile", pins=("*.block_m=64",))
    return compile_traced(traced, opts)


def _isolated_text(kernel: str = KERNEL) -> str:
    return print_module(isolate(_example_tile().module, kernel))


# isolate ----------------------------------------------------------------------------------------


def test_isolate_one_kernel_in_a_function_of_its_own():
    from xdsl.dialects import func

    from emmy.context import make_context
    from emmy.ir_io import parse_module

    module = _example_tile().module
    before = print_module(module)
    small = isolate(module, KERNEL)
    small.verify()
    assert print_module(module) == before  # the given module is left as it was
    assert small.attributes["emmy.target"].data == "sm_90a"
    assert "emmy.pins" in module.attributes and "emmy.pins" not in small.attributes
    (fn,) = [op for op in small.ops if isinstance(op, func.FuncOp)]
    assert fn.sym_name.data == KERNEL
    (kernel,) = [op for op in fn.walk() if isinstance(op, KernelOp)]
    assert not any(k.is_decided for k in kernel.knob_dict().values())
    # operands: the layer's input (its own name and role) and the three prepared weights (inputs)
    names = [a.data["emmy.name"].data for a in fn.arg_attrs.data]
    roles = [a.data["emmy.role"].data for a in fn.arg_attrs.data]
    assert names == ["input0", "rms_norm_qkv_proj_weights", "rms_norm_qkv_proj_weights_1", "rms_norm_qkv_proj_weights_2"]
    assert roles == ["input"] * 4
    assert len(fn.function_type.outputs.data) == 3  # q, k and v
    parse_module(make_context(), print_module(small), "<isolated>")  # prints and parses back


def test_isolate_a_prepare_kernel_runs_in_the_forward_phase():
    small = isolate(_example_tile().module, "rms_norm_qkv_proj_weights")
    (kernel,) = [op for op in small.walk() if isinstance(op, KernelOp)]
    assert "emmy.phase" not in kernel.attributes
    roles = [a.data["emmy.role"].data for a in next(iter(small.ops)).arg_attrs.data]
    assert roles == ["param", "param"]


def test_isolate_unknown_kernel_is_a_clear_error():
    with pytest.raises(EmmyError, match=r"isolate: no tile.kernel @nope in the module; kernels: rms_norm_qkv_proj_weights, "):
        isolate(_example_tile().module, "nope")


def test_kernel_names_in_ir_order():
    assert kernel_names(_example_tile().module)[-1] == KERNEL


# a candidate through the pipeline ---------------------------------------------------------------


def test_pin_spec():
    assert pin_spec("k", {"warps": 4, "block_m": 64, "workers": "wgmma"}) == "k.block_m=64;k.warps=4;k.workers=wgmma"


def test_candidate_lowers_with_its_values_pinned():
    lowered = lower_candidate(_isolated_text(), KERNEL, {"block_m": 64, "workers": "wgmma", "warps": 4})
    assert lowered.facts["knobs"]["block_m"] == 64 and lowered.facts["knobs"]["workers"] == "wgmma"
    assert lowered.facts["launches"] == 1
    assert lowered.facts["threads"] == 128 and lowered.facts["smem"] > 0
    assert 'extern "C" __global__' in lowered.plan.source
    roles = sorted({b.role for b in lowered.plan.buffers})
    assert roles == ["input", "output"]


def test_candidate_the_pipeline_rejects_is_a_failed_build(tmp_path):
    built = build_candidate(BuildJob(_isolated_text(), KERNEL, {"block_m": 7}), "sm_90a", str(tmp_path), 60, 128)
    assert built.status == "build_failed"
    assert "the pipeline rejects the candidate" in built.reason and "block_m" in built.reason


# builds -----------------------------------------------------------------------------------------


@needs_nvcc
def test_build_candidate_for_sm_90a_with_ptxas_facts(tmp_path):
    built = build_candidate(BuildJob(_isolated_text(), KERNEL, {"workers": "wgmma", "warps": 4}), "sm_90a",
                            str(tmp_path), 300, 128)
    assert built.status == "ok", built.reason
    assert Path(built.cubin).is_file() and Path(built.cubin).stat().st_size > 0
    assert built.facts["ptxas"][KERNEL]["registers"] > 0
    assert built.facts["spill_bytes"] == 0
    again = build_candidate(BuildJob(_isolated_text(), KERNEL, {"workers": "wgmma", "warps": 4}), "sm_90a",
                            str(tmp_path), 300, 128)
    assert again.cubin == built.cubin and again.facts["ptxas"] == built.facts["ptxas"]  # from the cache


@needs_nvcc
def test_isolated_kernel_builds_like_emmy_run(tmp_path):
    """The cubin lands where emmy run's kernel cache looks for it."""
    from emmy.backend.run import build_cubin, cubin_path

    lowered = lower_candidate(_isolated_text(), KERNEL, {})
    built = build_source(lowered.plan.source, "sm_90a", tmp_path)
    assert built.status == "ok", built.reason
    assert Path(built.cubin) == cubin_path(lowered.plan.source, "sm_90a", tmp_path)
    assert build_cubin(lowered.plan.source, "sm_90a", tmp_path) == Path(built.cubin).read_bytes()


@needs_nvcc
def test_broken_source_fails_with_nvccs_message(tmp_path):
    built = build_source('extern "C" __global__ void k() { this is not cuda; }', "sm_90a", tmp_path)
    assert built.status == "build_failed"
    assert "nvcc failed in kernel k" in built.reason and "error" in built.reason
    assert built.cubin is None


@needs_nvcc
def test_build_past_its_time_limit_is_a_timeout(tmp_path):
    lowered = lower_candidate(_isolated_text(), KERNEL, {})
    built = build_source(lowered.plan.source, "sm_90a", tmp_path, timeout=0.01)
    assert built.status == "build_timeout"
    assert "took more than 0.01 s" in built.reason


@needs_nvcc
def test_spills_over_the_limit(tmp_path):
    """With a limit below zero any kernel "spills": the check reads ptxas's report."""
    lowered = lower_candidate(_isolated_text(), KERNEL, {})
    built = build_source(lowered.plan.source, "sm_90a", tmp_path, spill_limit=-1)
    assert built.status == "spills"
    assert f"kernel {KERNEL} spills 0 bytes" in built.reason and "limit of -1" in built.reason


@needs_nvcc
def test_builder_pool_builds_and_reports_failures(tmp_path):
    text = _isolated_text()
    with Builder("sm_90a", tmp_path, workers=2, timeout=300) as builder:
        futures = builder.submit_all([BuildJob(text, KERNEL, {"workers": "mma_sync"}), BuildJob(text, KERNEL, {"warps": 3})])
        ok, bad = (builder.result(f) for f in futures)
    assert ok.status == "ok", ok.reason
    assert ok.plan is not None and ok.facts["knobs"]["workers"] == "mma_sync"
    assert bad.status == "build_failed" and "warps" in bad.reason


def test_builder_survives_a_dead_worker(tmp_path):
    """A build worker killed mid-build: the pool is started afresh and the builds it held are
    built again; the builder keeps working."""
    import os
    import signal

    text = _isolated_text()
    with Builder("sm_90a", tmp_path, workers=1, timeout=300) as builder:
        futures = builder.submit_all([BuildJob(text, KERNEL, {"block_m": 7}), BuildJob(text, KERNEL, {"warps": 3})])
        pool = builder._pool
        pids = list(pool._processes)  # the worker this test started
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        first, second = (builder.result(f) for f in futures)
        assert builder._pool is not pool  # the dead pool was replaced
        (third,) = (builder.result(f) for f in builder.submit_all([BuildJob(text, KERNEL, {"split_k": 5})]))
    # each built again in the fresh pool: the pipeline's own verdict on the candidate
    assert first.status == "build_failed" and "block_m" in first.reason
    assert second.status == "build_failed" and "warps" in second.reason
    assert third.status == "build_failed" and "split_k" in third.reason


def test_a_lowering_is_kept_and_read_back(tmp_path, monkeypatch):
    """A candidate lowered once is read from the kernel cache after (re-measuring a study's top
    candidates lowers nothing again); a damaged entry is lowered afresh."""
    import emmy.measure.candidate as candidate
    from emmy.measure.builds import lower_cached, lowered_path

    job = BuildJob(_isolated_text(), KERNEL, {"block_m": 64})
    first = lower_cached(job, tmp_path)
    assert lowered_path(job, tmp_path).exists()

    def never(*args):
        raise AssertionError("lowered again")

    monkeypatch.setattr(candidate, "lower_candidate", never)
    again = lower_cached(job, tmp_path)
    assert again.plan.source == first.plan.source and again.facts == first.facts
    monkeypatch.undo()
    lowered_path(job, tmp_path).write_bytes(b"half a pick")
    assert lower_cached(job, tmp_path).plan.source == first.plan.source
    other = BuildJob(_isolated_text(), KERNEL, {"block_m": 128})
    assert lowered_path(other, tmp_path) != lowered_path(job, tmp_path)


def _own_a_builder(conn, cache: str) -> None:
    """(In a process of its own) start a Builder's pool, send its workers' pids, wait."""
    import time

    builder = Builder("sm_90a", Path(cache), workers=2)
    builder.result(builder.submit(BuildJob("not a module", "k", {})))
    conn.send([p.pid for p in builder._pool._processes.values()])
    time.sleep(3600)


def test_build_workers_die_with_the_process_that_started_them(tmp_path):
    """A measuring child killed past its deadline leaves no build worker behind."""
    import multiprocessing
    import os
    import time

    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    owner = ctx.Process(target=_own_a_builder, args=(theirs, str(tmp_path)))
    owner.start()
    pids = mine.recv()
    assert pids
    owner.kill()
    owner.join()
    for _ in range(100):
        if not any(os.path.exists(f"/proc/{p}") for p in pids):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"build workers {pids} outlived the process that started them")


def test_builder_needs_a_worker(tmp_path):
    with pytest.raises(EmmyError, match="at least one worker process"):
        Builder("sm_90a", tmp_path, workers=0)


# the reference ----------------------------------------------------------------------------------


def test_reference_matches_the_tile_interpreter():
    """The measurer's reference (the kernel's body evaluated whole) against the tile-stage
    interpreter running the rules' schedule on the same inputs."""
    from emmy.context import make_context
    from emmy.interp import tile_stage
    from emmy.ir_io import parse_module, run_passes
    from emmy.measure.candidate import candidate_passes
    from emmy.measure.reference import task_inputs

    text = _isolated_text()
    inputs = task_inputs(text, KERNEL, seed=3, device="cpu")
    ctx = make_context()
    module = parse_module(ctx, text, "<isolated>")
    run_passes(ctx, module, candidate_passes("")[:1])  # decide-forks only
    outs = tile_stage.run_function(module, [v.float().numpy() for v in inputs.values.values()])
    assert len(outs) == len(inputs.reference) == 3
    for out, ref in zip(outs, inputs.reference):
        assert np.isfinite(ref).all()
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


def test_check_outputs_counts_results_and_nans():
    torch = pytest.importorskip("torch")
    from emmy.measure.reference import check_outputs

    ref = [np.ones((2, 3), dtype=np.float32)]
    assert check_outputs([torch.ones(2, 3)], ref) == (0.0, 0)
    bad = torch.ones(2, 3)
    bad[1, 2] = float("nan")
    error, nans = check_outputs([bad], ref)
    assert error == float("inf") and nans == 1
    with pytest.raises(EmmyError, match="the kernel returns 2 results where the reference has 1"):
        check_outputs([bad, bad], ref)


# timing's pure parts and the contract -----------------------------------------------------------


def test_percentile_and_summarize():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 90) == pytest.approx(1.9)
    median, spread = summarize([1.0, 1.0, 1.0, 1.0])
    assert (median, spread) == (1.0, 0.0)
    median, spread = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert median == 3.0 and spread == pytest.approx((4.6 - 1.4) / 3.0)


def test_per_call_times():
    # 20 replays of a graph making 4 calls: totals divided by 80, launch and copy events left out
    totals = [("stats", 160.0), ("product", 800.0), ("cudaGraphLaunch", 50.0), ("Memset (Device)", 8.0),
              ("idle", 0.0)]
    assert per_call_times(totals, replays=20, calls=4) == {"product": 10.0, "stats": 2.0}
    assert list(per_call_times([("a", 1.0), ("b", 3.0)], replays=1)) == ["b", "a"]  # longest first


def test_rotation_count():
    l2 = 50 << 20
    assert rotation_count(200 << 20, l2) == 1  # larger than L2 on its own
    assert rotation_count(25 << 20, l2) == 4  # four copies make twice the L2
    assert rotation_count(1000, l2) == 64  # a tiny kernel: as many copies as allowed
    assert rotation_count(1000, l2, cap=8) == 8


def test_measurement_status_is_checked():
    assert Measurement("ok", time_s=1e-5, spread=0.01, error=1e-3).ok
    assert not Measurement("wrong", error=0.5, reason="relative error 0.5").ok
    with pytest.raises(ValueError, match="unknown measurement status 'fast'"):
        Measurement("fast")


def test_gpu_measurer_without_a_gpu_is_a_clear_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from emmy.measure.gpu import GpuMeasurer

    with pytest.raises(EmmyError, match="measuring needs a CUDA GPU and PyTorch finds none here"):
        GpuMeasurer(tmp_path)


def test_bench_without_a_gpu_says_so(tmp_path):
    """tools/bench.py on a machine without a GPU: a message and exit status 1, no traceback."""
    import subprocess

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "error: tools/bench.py times on a CUDA GPU and PyTorch finds none here" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bench_table_shows_errors():
    sys.path.insert(0, str(ROOT / "tools"))
    import bench

    row = {"case": "layer T=32", "floor_s": 1e-6, "emmy_s": 2e-6, "emmy_err": 1e-3, "eager_err": 0.5,
           "eager_error": "relative error 5.00e-01 over the allowed 1.0e-02: not timed"}
    table = bench.format_table([row], ["emmy", "eager"])
    assert "| layer T=32 | 1.0 | 2.0 (1.0e-03) | fail (5.0e-01) |" in table


def test_attention_reference_sampled_on_three_runs_of_queries():
    """A large attention kernel's reference covers three runs of queries (first, middle, last),
    equal there to the whole evaluation up to float32 order; a NaN anywhere still fails the check."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "test" / "pytest" / "models"))
    from handwritten_attention import make

    from emmy.driver import CompileOptions, compile_traced
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer
    from emmy.measure.reference import check_outputs, task_inputs

    src = ModelSource(spec="handwritten_attention.py:make", kind="factory", model_id="att", factory=lambda: make(300))
    result = compile_traced(trace_layer(src, 0, 300), CompileOptions(model="att", tokens=300, target="sm_90a",
                                                                      stop_after="tile"))
    (name,) = [k.kernel_name for k in result.module.walk() if isinstance(k, KernelOp) and k.kind_name == "attention"]
    text = print_module(isolate(result.module, name))
    whole = task_inputs(text, name, device="cpu", sample_rows=0)
    sampled = task_inputs(text, name, device="cpu", sample_rows=64)
    assert whole.masks == [None] and sampled.masks[0] is not None
    mask = sampled.masks[0]
    assert 0 < mask.sum() < mask.size
    # (the keys in chunks with an online softmax: equal up to float32 order and bf16 rounding)
    np.testing.assert_allclose(sampled.reference[0][mask], whole.reference[0][mask], rtol=1e-2, atol=1e-2)
    out = torch.from_numpy(whole.reference[0].copy())
    error, nans = check_outputs([out], sampled.reference, sampled.masks)
    assert error < 1e-4 and nans == 0  # (float32 order: the CPU blocks the two evaluations differently)
    out.view(-1)[np.flatnonzero(~mask.ravel())[0]] = float("nan")  # outside the sampled queries
    assert check_outputs([out], sampled.reference, sampled.masks) == (float("inf"), 1)


def test_attention_reference_memory_is_bounded_by_the_key_chunk():
    """The sampled attention reference takes the keys a chunk at a time: its peak memory is
    bounded by the chunk, not by the sequence (at 32768 tokens the whole key side of the Qwen3
    layer's attention held about 20 GB), and the chunks agree with one step over all keys."""
    import tracemalloc

    sys.path.insert(0, str(ROOT / "test" / "pytest" / "models"))
    from handwritten_attention import make

    from emmy.driver import CompileOptions, compile_traced
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer
    from emmy.measure.reference import sampled_reference

    tokens = 1024
    src = ModelSource(spec="handwritten_attention.py:make", kind="factory", model_id="att",
                      factory=lambda: make(tokens))
    result = compile_traced(trace_layer(src, 0, tokens), CompileOptions(model="att", tokens=tokens, target="sm_90a",
                                                                        stop_after="tile"))
    (kernel,) = [k for k in result.module.walk() if isinstance(k, KernelOp) and k.kind_name == "attention"]
    rng = np.random.default_rng(0)
    operands = [rng.standard_normal(v.type.get_shape()).astype(np.float32) for v in kernel.operands]
    peaks, refs = {}, {}
    for chunk in (tokens, 64):
        tracemalloc.start()
        refs[chunk], masks = sampled_reference(kernel, operands, 64, key_chunk=chunk)
        peaks[chunk] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks[64] * 3 < peaks[tokens], peaks
    mask = masks[0]
    np.testing.assert_allclose(refs[64][0][mask], refs[tokens][0][mask], rtol=1e-2, atol=1e-2)


def test_gpu_lock_lets_one_process_measure_at_a_time(tmp_path):
    """While one holder has a GPU's lock, another open of the same lock cannot take it; the
    lock is free again afterwards, and other GPUs have locks of their own."""
    import fcntl

    from emmy.measure.gpu import gpu_lock, lock_path

    def free(device: str) -> bool:
        path = lock_path(tmp_path, device)
        if not path.exists():
            return True
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(f, fcntl.LOCK_UN)
            return True

    with gpu_lock(tmp_path, "GPU-a"):
        assert not free("GPU-a")
        assert free("GPU-b")
    assert free("GPU-a")


def test_a_captured_replay_keeps_what_it_captured_alive():
    """A replay holds the captured function (and so the tensors it closes over) as well as the
    graph: a caller that drops its function does not free the memory the graph reads and writes."""
    import gc
    import weakref

    from emmy.measure.timing import Captured

    class Graph:
        replays = 0

        def replay(self):
            Graph.replays += 1

    class Buffers:  # what a captured call closes over
        pass

    held = Buffers()

    def call(held=held):
        return held

    seen = weakref.ref(held)
    run = Captured(Graph(), call)
    del held, call
    gc.collect()
    assert seen() is not None
    run()
    assert Graph.replays == 1
    del run
    gc.collect()
    assert seen() is None
