"""Emmy's backend: from a cuda-stage module to something a GPU runs.

- `emmy.backend.plan`: `launch_plan(module) -> LaunchPlan` (the whole `.cu` text, kernels,
  buffers, launches) and `cuda_source(module) -> str`;
- `emmy.backend.nvcc`: `compile_source(source, arch, out_dir)` (nvcc), `ptxas_report`, `sass`;
- `emmy/backend/runtime/*.cuh`: Emmy's CUDA device library, included by every generated file
  (`runtime_dir()` gives its path for `-I`).
"""

from __future__ import annotations

from pathlib import Path


def runtime_dir() -> Path:
    """The folder holding Emmy's device library headers (emmy.cuh, ...)."""
    return Path(__file__).resolve().parent / "runtime"
