"""The plan is what the lowering consumes (issue 23): over every kernel of the Qwen3 layer and of
the running example at several token counts, each plan's launches (names, grids, blocks) are the
generated kernel's, and a one-launch kernel's plan of the whole kernel (`plan_for`: what the
tuner's facts and the prior read) counts the blocks its parts launch (a reduction whose outputs
lie over different axes: each group's rows, not the product of all row axes)."""

from __future__ import annotations

from functools import cache
from math import prod
from pathlib import Path

import pytest

from emmy.analysis.classify import classify
from emmy.dialects.tile import KernelOp
from emmy.driver import CompileOptions, compile_traced, trace
from emmy.passes.convert_tile_to_kernel import build_kernel
from emmy.schedule.plan import plan_for, plan_kernel
from emmy.schedule.reduction import group_rows
from emmy.targets import get_target

EXAMPLE = str(Path(__file__).resolve().parents[2] / "tools" / "running_example.py") + ":make"
QWEN3 = "Qwen/Qwen3-Embedding-0.6B"
SM90A = get_target("sm_90a")
CASES = [(QWEN3, 1), (QWEN3, 32), (QWEN3, 512), (EXAMPLE, 1), (EXAMPLE, 32), (EXAMPLE, 300)]


@cache
def _kernels(model: str, tokens: int) -> tuple[KernelOp, ...]:
    layer = 0 if model == QWEN3 else None
    traced = trace(CompileOptions(model=model, layer=layer, tokens=tokens))
    options = CompileOptions(model=model, layer=layer, tokens=tokens, target="sm_90a", stop_after="tile")
    module = compile_traced(traced, options).module
    return tuple(k for k in module.walk() if isinstance(k, KernelOp))


def _made(k: KernelOp) -> list[tuple[str, tuple, tuple]]:
    built = build_kernel(k, SM90A)
    funcs = {f.sym_name.data: f for f in built.funcs}
    return [(la.kernel, tuple(funcs[la.kernel].grid_dims), tuple(funcs[la.kernel].block_dims)) for la in built.launches]


@pytest.mark.parametrize("model,tokens", CASES, ids=lambda c: str(c).rsplit("/", 1)[-1])
def test_every_plan_launches_what_the_lowering_emits(model, tokens):
    for k in _kernels(model, tokens):
        made = _made(k)
        kplan = plan_kernel(k, SM90A)
        assert [(la.kernel, la.grid, la.block) for la in kplan.launches] == made, k.kernel_name
        if k.kind_name in ("reduction", "elementwise"):  # one launch: the whole kernel's plan counts its blocks
            values = {n: v for n, v in k.knob_values().items() if n != "siblings"}
            whole = plan_for(classify(k), values, SM90A)
            assert whole.blocks == sum(prod(grid) for _, grid, _ in made), k.kernel_name
            assert [la.block for la in whole.launches] == [block for _, _, block in made], k.kernel_name


def test_a_reduction_of_sibling_outputs_counts_each_groups_rows():
    """The running example at one token: q over n = 2048 rows and k, v over d2 = 1024 rows, from
    one normalized input, are two parts; the whole kernel's plan counts 2048 + 1024 rows in blocks
    of its rows_per_block (the product, 2048 x 1024 rows, was 262144 blocks of 8)."""
    k = next(k for k in _kernels(EXAMPLE, 1) if k.kind_name == "reduction")
    info = classify(k)
    assert set(info.row_axes) == {"n", "d2"}
    assert group_rows(info) == (2048, 1024)
    values = dict(k.knob_values(), rows_per_block=8, threads=256)
    values.pop("siblings", None)
    whole = plan_for(info, values, SM90A)
    assert (whole.rows, whole.blocks) == (3072, 256 + 128)
    parts = plan_kernel(k, SM90A).parts
    assert sum(p.plan.rows for p in parts) == whole.rows
