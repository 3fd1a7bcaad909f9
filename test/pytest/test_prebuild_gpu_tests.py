"""tools/prebuild_gpu_tests.py: its cases are the GPU test modules' own, it builds the very kernels
a test then finds in EMMY_HOME, and a case that fails is named, with exit status 1. No GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "prebuild_gpu_tests.py"


def prebuild(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          env={**os.environ, "EMMY_HOME": str(home)})


def listed(*args: str, home: Path) -> list[str]:
    proc = prebuild("--list", *args, home=home)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_cases_are_the_test_modules_own(tmp_path):
    import test_attention_gpu as attention
    import test_gpu as gpu

    lines = listed("--only", "attention", home=tmp_path)
    assert lines[-1] == f"{len(attention.ATTENTION_GPU_CASES) + len(attention.LAYER_FLASH_CASES)} cases"
    assert all(any(f"attention[{attention.case_id(c)}]" in line for line in lines) for c in attention.ATTENTION_GPU_CASES)
    # on another target, the cases the tests skip there (pinned attention: tensor maps and wgmma) are left out
    plain = [c for c in attention.ATTENTION_GPU_CASES if not c[4]]
    plain_flash = [c for c in attention.LAYER_FLASH_CASES if not c[1]]
    assert listed("--only", "attention", "--target", "sm_80", home=tmp_path)[-1] == f"{len(plain) + len(plain_flash)} cases"
    runs = [line for line in listed("--only", "gpu", "--match", "emmy run", home=tmp_path) if "emmy run" in line]
    assert len(runs) == len(gpu.MODEL_RUNS) + 1  # and test_emmy_run_check_cli's
    assert any("clamp_abs_sum --tolerance 5e-3" in line for line in runs)
    assert listed("--only", "layer_check", home=tmp_path)[-1] == "1 cases"


def test_an_unknown_group_is_an_error(tmp_path):
    proc = prebuild("--only", "gpu,nosuch", "--list", home=tmp_path)
    assert proc.returncode == 2 and "unknown group nosuch: the groups are gpu, attention, layer_check" in proc.stderr


@pytest.mark.nvcc
def test_builds_the_kernel_the_test_loads(tmp_path):
    """One attention case built: the cubin of the source the test compiles is in EMMY_HOME, and a
    second run finds it there."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    from test_attention_gpu import ATTENTION_GPU_CASES, case_id, compiled

    from emmy.backend.run import cubin_path

    case = next(c for c in ATTENTION_GPU_CASES if case_id(c) == "T7-16x8-d128")
    proc = prebuild("--only", "attention", "--match", "[T7-16x8-d128]", "--jobs", "1", home=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 cases compiled" in proc.stdout and "1 distinct kernel sources: 1 built by nvcc" in proc.stdout
    assert cubin_path(compiled(case, "sm_90a")[1].source, "sm_90a", tmp_path).exists()
    again = prebuild("--only", "attention", "--match", "[T7-16x8-d128]", "--jobs", "1", home=tmp_path)
    assert "0 built by nvcc" in again.stdout and f"1 already in {tmp_path}" in again.stdout


def test_a_case_that_fails_is_named():
    """A case whose compile fails comes back with its error, named in the summary, instead of
    stopping the pool."""
    sys.path.insert(0, str(ROOT / "tools"))
    from prebuild_gpu_tests import QWEN, Case, compile_case

    sources, _, error = compile_case(Case("gpu", "bad", "layer", (QWEN, 7, ("no_such_kernel.block_m=64",), "sm_90a")))
    assert sources == [] and error.startswith("EmmyError: ") and "no_such_kernel" in error
