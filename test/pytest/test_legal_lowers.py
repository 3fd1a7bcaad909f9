"""Legality and the lowering agree: a point of a kernel's legal space lowers to CUDA.

Legality is the one check every decider uses (pins, rules, golden files, the tuner, the prior);
the lowering refuses what it cannot build with an error of its own. Where the two disagree a
tuner trial or a pinned value is spent on a build that fails. The legal spaces hold millions of
points, so this takes one seeded point of each combination of the knobs that pick a code path
(workers, schedule, epilogue, copy, cluster, fusion, split_tail, combine, siblings) and lowers it
through the pinned pipeline to CUDA, for contractions whose row statistics are summed each way
(`KernelInfo.ws_row_stats`), for attention, and for reductions and elementwise kernels (whose
spaces are small: every path is one of their points), on a Hopper and an Ampere target.
"""

from __future__ import annotations

import random

import pytest

import loop_examples as L
from emmy.analysis.classify import classify
from emmy.context import make_context
from emmy.dialects.loop import FusedOp
from emmy.ir_io import parse_module, parse_pipeline, run_passes
from emmy.schedule.space import legal_points
from emmy.targets import get_target
from emmy.tuning.knobs import knob_space_for

# the knobs that choose a code path in the lowering (the others size its tiles and loops)
PATHS = ("workers", "schedule", "epilogue", "copy", "cluster", "fusion", "split_tail", "combine", "siblings")
# at most this many points of a legal space are looked at to find its combinations
SCAN = 50_000


KERNELS = {
    "matmul": lambda t: L.matmul(1100, 1000, 1024, target=t),
    "f32_out": lambda t: L.matmul(512, 1024, 1024, target=t, f32_out=True),
    "in_place": lambda t: L.rmsnorm_matmul(4096, 1024, 1024, target=t),
    "a_tiles": lambda t: L.rmsnorm_matmul_folded(4096, 1024, 1024, target=t),
    "producer": lambda t: L.add_rmsnorm_matmul(4096, 1024, 1024, target=t),
    "before": lambda t: L.rmsnorm_matmul_reading_stats(4096, 1024, 1024, target=t),
    "gate_up": lambda t: L.gate_up(4096, 1024, 1024, target=t),
    "two_k": lambda t: L.matmul_two_k(512, 1024, 16, 64, target=t),
    "attention": lambda t: L.attention(1, 16, 8, 3000, 64, target=t),
    "attention_d128": lambda t: L.attention(1, 32, 8, 1000, 128, target=t),
    "attention_full": lambda t: L.attention(2, 8, 8, 512, 64, causal=False, target=t),
    "rmsnorm": lambda t: L.rmsnorm(4096, 1024, target=t),
    "softmax": lambda t: L.softmax(1000, 3000, target=t),
    "silu_mul": lambda t: L.silu_mul(3000, 3072, target=t),
    "rope": lambda t: L.rope_like(1, 3000, 16, 128, target=t),
}


def _info(text: str):
    module = parse_module(make_context(), text, "example")
    return classify(next(op for op in module.walk() if isinstance(op, FusedOp)))


def _one_point_per_path(points, seed: int) -> list[dict]:
    rng = random.Random(seed)
    step = max(1, len(points) // SCAN)
    paths: dict[tuple, list[int]] = {}
    for i in range(rng.randrange(step), len(points), step):
        paths.setdefault(tuple(points[i].get(k) for k in PATHS), []).append(i)
    return [points[rng.choice(ids)] for ids in paths.values()]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_code_path_of_the_legal_space_lowers(kernel, target):
    text, _ = KERNELS[kernel](target)
    info = _info(text)
    t = get_target(target)
    points = _one_point_per_path(legal_points(info, knob_space_for(info, t), t), seed=len(kernel))
    assert points
    failed = []
    for p in points:
        pins = ", ".join(f"{k}={v}" for k, v in p.items())
        pipeline = f'convert-loop-to-tile,decide-forks{{pin="*.{pins}"}},convert-tile-to-kernel,convert-kernel-to-cuda'
        try:
            ctx = make_context()
            run_passes(ctx, parse_module(ctx, text, "example"), parse_pipeline(pipeline))
        except Exception as e:  # noqa: BLE001 (every refusal is a disagreement to report)
            failed.append(f"{pins}\n    {str(e).splitlines()[0]}")
    assert not failed, f"{len(failed)} of {len(points)} legal points did not lower:\n" + "\n".join(failed[:5])
