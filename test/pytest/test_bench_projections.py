"""tools/bench.py --cases projections (tools/bench_projections.py): the layer's projections found
from Emmy's compile with their sizes and fused jobs, the torch job checked against the kernel's
own body on the CPU, the build-only path, the table; on a GPU, one small run (no time asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import bench_projections as bp  # noqa: E402

QWEN3 = "Qwen/Qwen3-Embedding-0.6B"
needs_nvcc = pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not on PATH")


@lru_cache(maxsize=4)
def _traced(tokens: int):
    from emmy.frontend import resolve_model, trace_layer

    return trace_layer(resolve_model(QWEN3), 0, tokens)


@lru_cache(maxsize=4)
def _projections(tokens: int) -> tuple:
    return tuple(bp.compiled_projections(_traced(tokens), "sm_90a"))


def test_the_qwen3_layer_has_four_projections_at_3000_tokens():
    """q/k/v (RMS norm fused, one product on the weight Emmy concatenated from q's, k's and v's),
    o (the attention's output read by heads, residual added), gate/up (two products sharing A,
    silu * up) and down."""
    found = {p.kernel: p for p in _projections(3000)}
    want = {
        "rms_norm_qkv_proj": (3000, 4096, 1024, 1, "rms_norm -> linear 2048+1024+1024", "rows"),
        "o_proj_residual": (3000, 1024, 2048, 1, "linear -> residual", "heads"),
        "rms_norm_gate_up_proj_silu": (3000, 3072, 1024, 2, "rms_norm -> linear x2 -> silu_mul", "rows"),
        "down_proj_residual": (3000, 1024, 3072, 1, "linear -> residual", "rows"),
    }
    assert {k: (p.m, p.n, p.k, p.products, p.job, p.a_layout) for k, p in found.items()} == want
    assert all(not p.problem and p.dtype == "bf16" and p.knobs for p in found.values())
    assert found["rms_norm_qkv_proj"].eps == pytest.approx(1e-6)
    assert found["rms_norm_qkv_proj"].splits == (2048, 1024, 1024)
    assert found["o_proj_residual"].residual == "hidden_states" and not found["o_proj_residual"].splits
    assert found["rms_norm_gate_up_proj_silu"].flops == 2 * 2 * 3000 * 3072 * 1024


def _body_result(p: bp.Projection, values) -> np.ndarray:
    """The kernel's result by the loop-stage evaluator (its own body, no schedule) on `values`."""
    from emmy.analysis.body import evaluate
    from emmy.context import make_context
    from emmy.dialects.tile import KernelOp
    from emmy.execute import argument_names, entry_function
    from emmy.ir_io import parse_module

    fn = entry_function(parse_module(make_context(), p.module, p.kernel))
    kernel = next(op for op in fn.walk() if isinstance(op, KernelOp))
    names, index = argument_names(fn), {a: i for i, a in enumerate(fn.body.block.args)}
    operands = [values[names[index[v]]].float().numpy() for v in kernel.operands]
    return np.asarray(evaluate(kernel, operands)[0], dtype=np.float32).reshape(p.m, p.n)


def _error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize("kernel", ["rms_norm_qkv_proj", "o_proj_residual", "rms_norm_gate_up_proj_silu",
                                    "down_proj_residual"])
def test_the_torch_job_computes_what_the_kernel_does(kernel):
    """The job read from the kernel (operand roles, A layout, epsilon, gate before up), written
    in torch and run in float32, matches the kernel's body on the same random inputs."""
    p = next(p for p in _projections(64) if p.kernel == kernel)
    values = bp.random_values(p, device="cpu")
    assert _error(bp.reference(p, values).numpy(), _body_result(p, values)) < 1e-2


def test_a_misread_job_does_not_match():
    """The comparison above can fail: gate and up swapped, or the o projection's A read by rows."""
    by_name = {p.kernel: p for p in _projections(64)}
    gate_up = by_name["rms_norm_gate_up_proj_silu"]
    swapped = replace(gate_up, weights=gate_up.weights[::-1])
    values = bp.random_values(gate_up, device="cpu")
    assert _error(bp.reference(swapped, values).numpy(), _body_result(gate_up, values)) > 0.1
    o = by_name["o_proj_residual"]
    values = bp.random_values(o, device="cpu")
    assert _error(bp.reference(replace(o, a_layout="rows"), values).numpy(), _body_result(o, values)) > 0.1


def test_torch_reads_the_o_projections_input_as_the_model_has_it():
    """The o projection's A reaches torch's job as cuDNN's attention leaves it ([1, T, H, D] in
    memory: its transpose to [T, H * D] a view), with the same values; cuBLAS gets it as [M, K]."""
    o = next(p for p in _projections(64) if p.kernel == "o_proj_residual")
    values = bp.random_values(o, device="cpu")
    job, inputs = bp._torch_contender("eager", o, values)
    a = inputs[0]
    assert a.shape == values[o.a].shape and a.transpose(1, 2).is_contiguous()
    assert bp.a_matrix(a, o).data_ptr() == a.data_ptr()
    assert _error(job(*inputs).float().numpy(), bp.reference(o, values).numpy()) < 1e-2
    gemm, (a2, w) = bp._torch_contender("cublas", o, values)
    assert a2.shape == (64, 2048) and a2.is_contiguous() and w.shape == (1024, 2048)


def test_a_kernel_without_a_torch_job_is_listed_with_why():
    """An A operand that is neither [.., M, K] nor [1, H, M, D]: the projection says so (its row
    reports it, nothing is timed)."""
    with pytest.raises(bp._NoJob, match="neither"):
        bp._a_layout((2, 64, 48), 64, 96)
    row = {"case": "T=64", "kernel": "odd", "m": 64, "n": 96, "k": 96, "products": 1,
           "error": "no torch job: its A side is a 2x64x48 tensor, neither [.., M, K] nor [1, H, M, D]"}
    assert bp.format_projection_row(row, ["emmy", "cublas"]).endswith("| " + row["error"])


def test_the_projection_table():
    row = {"case": "T=3000", "kernel": "down_proj_residual", "m": 3000, "n": 1024, "k": 3072, "products": 1,
           "job": "linear -> residual", "flops": 2 * 3000 * 1024 * 3072, "emmy_s": 40e-6, "emmy_err": 3e-3,
           "cublas_s": 32e-6, "cublas_err": 2e-3, "compile_error": "relative error 5.00e-01 over 1.0e-02: not timed"}
    table = bp.format_projection_table([row], ["emmy", "cublas", "compile"])
    head, _, line = table.splitlines()
    assert head == ("| case | kernel | M | N | K | job | emmy us | cublas us | compile us | emmy TFLOP/s | "
                    "cublas TFLOP/s | compile TFLOP/s | emmy/cublas | emmy/compile |")
    assert line == ("| T=3000 | down_proj_residual | 3000 | 1024 | 3072 | linear -> residual | 40.0 | 32.0 | fail | "
                    "472 | 590 | - | 1.25 | - |")


def _bench(tmp_path, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "EMMY_HOME": str(tmp_path)})


def test_an_unknown_case_is_a_message(tmp_path):
    p = _bench(tmp_path, "--build-only", "--cases", "layer,projection")
    assert p.returncode == 1, p.stderr
    assert ("error: --cases 'layer,projection': unknown case projection; the cases are example, layer, model, "
            "attention, projections") in p.stderr
    assert "Traceback" not in p.stderr


@needs_nvcc
def test_build_only_builds_every_projection(tmp_path):
    """--build-only compiles the layer, isolates each projection with its decided knobs and builds
    its cubin (no GPU): one line per projection, one kernel source each."""
    p = _bench(tmp_path, "--build-only", "--cases", "projections", "--layer-sizes", "64")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"built T=64 {k}" for k in ("rms_norm_qkv_proj", "o_proj_residual",
                                                                 "rms_norm_gate_up_proj_silu", "down_proj_residual")]
    assert len(list((tmp_path / "kernels").glob("*/emmy.cu"))) == 4


@needs_nvcc
def test_the_projections_case_takes_a_factory_model(tmp_path):
    """A path.py:fn model has no config to count a layer's FLOPs from, but each projection counts
    its own: the projections case takes it, the layer case says what it needs."""
    model = str(ROOT / "tools" / "running_example.py") + ":make"
    p = _bench(tmp_path, "--build-only", "--cases", "projections", "--layer-sizes", "64", "--model", model)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["built running_example.py:make T=64 rms_norm_qkv_proj"]
    p = _bench(tmp_path, "--build-only", "--cases", "layer", "--layer-sizes", "64", "--model", model)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "the layer and model cases need a Hugging Face config" in p.stderr


@pytest.mark.gpu
def test_projections_on_a_gpu(tmp_path):
    """One small run: every projection checked and timed against cuBLAS and torch.compile of its
    fused job (what is asserted: each contender was right and got a time and its kernels' times, not how
    fast)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from emmy.measure.layer import EmmyBuild

    cache = Path(os.environ["EMMY_HOME"]) if os.environ.get("EMMY_HOME") else tmp_path
    contenders = ["emmy", "cublas", "compile", "eager"]
    rows = bp.time_projections("T=128", _traced(128), "sm_90a", cache, {"emmy": EmmyBuild()}, contenders,
                               profile=True)
    assert [r["kernel"] for r in rows] == ["rms_norm_qkv_proj", "o_proj_residual", "rms_norm_gate_up_proj_silu",
                                           "down_proj_residual"]
    for r in rows:
        for c in contenders:
            assert f"{c}_error" not in r, (r["kernel"], c, r.get(f"{c}_error"))
            assert r[f"{c}_err"] <= r["allowed_err"] and r[f"{c}_s"] > 0 and f"{c}_spread" in r
            assert r[f"{c}_kernels_us"] and r[f"{c}_busy_s"] == pytest.approx(sum(r[f"{c}_kernels_us"].values()) / 1e6)
        assert r["kernel"] in " ".join(r["emmy_kernels_us"])  # Emmy's product among its kernels
    assert "emmy/cublas kernels" in bp.format_projection_table(rows, contenders)


@pytest.mark.gpu
def test_the_projections_case_on_a_gpu(tmp_path):
    """tools/bench.py --cases projections end to end: a line per projection, the table and the
    JSON rows (no time asserted)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import json

    out = tmp_path / "proj.json"
    p = _bench(tmp_path, "--cases", "projections", "--layer-sizes", "64", "--contenders", "emmy,cublas,compile",
               "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "| case | kernel | M | N | K | job | emmy us | cublas us | compile us |" in p.stdout
    rows = json.loads(out.read_text())["projections"]
    assert [r["kernel"] for r in rows] == ["rms_norm_qkv_proj", "o_proj_residual", "rms_norm_gate_up_proj_silu",
                                           "down_proj_residual"]
    assert all(f"{c}_s" in r for r in rows for c in ("emmy", "cublas", "compile")), rows


def test_the_projection_table_with_kernel_times():
    row = {"case": "T=512", "kernel": "o_proj_residual", "m": 512, "n": 1024, "k": 2048, "products": 1,
           "job": "linear -> residual", "flops": 2 * 512 * 1024 * 2048, "emmy_s": 8e-6, "emmy_err": 2e-3,
           "emmy_busy_s": 7e-6, "emmy_kernels_us": {"o_proj_residual": 7.0},
           "cublas_s": 7.5e-6, "cublas_err": 2e-3, "cublas_busy_s": 7e-6}
    table = bp.format_projection_table([row], ["emmy", "cublas"])
    head, _, line = table.splitlines()
    assert head.endswith("| emmy/cublas | emmy kernels us | cublas kernels us | emmy/cublas kernels |")
    assert line.endswith("| 1.07 | 7.0 | 7.0 | 1.00 |")
    assert "kernels 7.0 us" in bp.format_projection_row(row, ["emmy", "cublas"])
    failed = {**row, "cublas_profile_error": "RuntimeError: CUPTI unavailable"}
    del failed["cublas_busy_s"]
    assert "cublas      7.5 us (err 2.0e-03, no profile: RuntimeError: CUPTI unavailable)" in bp.format_projection_row(
        failed, ["emmy", "cublas"])
    assert bp.format_projection_table([failed], ["emmy", "cublas"]).splitlines()[2].endswith("| 7.0 | - | - |")
    # without a profile the table has no kernel columns
    plain = {k: v for k, v in row.items() if "busy" not in k and "kernels" not in k}
    assert "kernels" not in bp.format_projection_table([plain], ["emmy", "cublas"])


def test_a_failed_profile_is_recorded_and_the_times_stand():
    row = {"emmy_s": 8e-6}

    def broken():
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED\n  while starting the profiler")

    assert bp.profiled(row, "emmy", broken) is None
    assert row == {"emmy_s": 8e-6, "emmy_profile_error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED while starting "
                                                         "the profiler"}
    assert bp.profiled(row, "compile", dict) is None
    assert row["compile_profile_error"] == "the profiler recorded no kernel"
    assert bp.profiled(row, "cublas", lambda: {"nvjet": 7.0}) == {"nvjet": 7.0}
    assert "cublas_profile_error" not in row
