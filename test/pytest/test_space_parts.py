"""A kernel that runs as parts (outputs over different axes: the running example's q, and k and v
paired or apart) has a legal space of the points legal for the whole and for every part: a point
legal for the whole product but not for a part is absent, and a sampler never draws it."""

from __future__ import annotations

import random
from dataclasses import replace
from itertools import product

import optuna
import pytest

from emmy.passes.decide_forks import problem_of
from emmy.schedule.plan import part_problems
from emmy.schedule.space import ConditionalSpace, legal_points, part_rules
from emmy.targets import get_target
from emmy.tuning.legality import check
from example_kernels import QKV, kernels

SM90A = get_target("sm_90a")

# block_n = 96 splits into 48 columns for k and for v: not a block_n, so the pair keeps 96 each
# and needs 2 x 256 x 96 accumulators over 128 threads (384, over what fits); apart, each part has
# its own 96.
SMALL = {
    "block_m": (64, 256), "block_n": (64, 96, 128), "block_k": (64,), "split_k": (1,), "combine": ("kernel",),
    "split_tail": (1,), "stages": (2, 4), "workers": ("wgmma", "mma_sync"), "warps": (4,), "schedule": ("grid",),
    "copy": ("cp_async",), "cluster": (1,), "group_m": (1,), "epilogue": ("together",), "slices": ("rows", "cols"),
    "vector": (8,),
    "siblings": ("paired", "apart"), "fusion": ("fused", "split"),
}


@pytest.fixture(scope="module")
def qkv():
    k = kernels(300)[QKV]
    return k, problem_of(k, SM90A)


def test_small_space_is_the_points_every_part_can_run(qkv):
    k, problem = qkv
    assert set(SMALL) == set(problem.space)
    names = list(SMALL)
    whole = [dict(zip(names, vs)) for vs in product(*SMALL.values())]
    whole = [p for p in whole if not check(problem.info, p, SM90A)]
    cannot = [p for p in whole if part_problems(k, p, SM90A)]
    assert cannot and len(cannot) < len(whole)  # some points legal for the whole are not for a part
    space = legal_points(problem.info, SMALL, SM90A)
    canonical = lambda ps: sorted(tuple(sorted(p.items())) for p in ps)  # noqa: E731
    assert canonical(space) == canonical([p for p in whole if p not in cannot])
    for p in cannot:
        assert p not in space
    # without its parts (no op to split) the kernel's space is the whole's
    assert canonical(legal_points(replace(problem.info, op=None), SMALL, SM90A)) == canonical(whole)


def test_whole_space_excludes_points_a_part_cannot_run(qkv):
    """The full space: whole-legal points a part cannot run (sampled from the space of the whole)
    are absent; points of the space (sampled) are legal for every part."""
    k, problem = qkv
    space = legal_points(problem.info, problem.space, SM90A)
    whole = legal_points(replace(problem.info, op=None), problem.space, SM90A)
    assert 0 < len(space) < len(whole)
    rng = random.Random(7)
    cannot = [p for p in (whole[rng.randrange(len(whole))] for _ in range(300)) if part_problems(k, p, SM90A)]
    assert cannot
    assert not [p for p in cannot if p in space]
    drawn = [space[rng.randrange(len(space))] for _ in range(150)]
    assert all(p in whole and not part_problems(k, p, SM90A) for p in drawn)


def test_conditional_space_never_draws_a_point_a_part_cannot_run(qkv):
    k, problem = qkv
    points = legal_points(problem.info, problem.space, SM90A)
    cond = ConditionalSpace(points, points.order)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(150):
        point = cond.suggest(study.ask())
        assert point in points and not check(problem.info, point, SM90A)
        assert not part_problems(k, point, SM90A), point


def test_paired_parts_run_two_ways(qkv):
    """k and v paired share block_n or keep it each: two sets of rules for `paired`, one for
    `apart` (q, k and v each on its own); a kernel without parts has none."""
    _, problem = qkv
    found = part_rules(problem.info, problem.space, SM90A)
    assert [s for s, _ in found] == ["paired", "paired", "apart"]
    assert all(rules for _, rules in found)
    assert part_rules(replace(problem.info, op=None), problem.space, SM90A) == [(None, ())]


@pytest.mark.parametrize("pins", [(), ("siblings=apart",), ("workers=mma_sync",)], ids=lambda p: ";".join(p) or "rules")
def test_the_decided_kernel_is_a_point_of_its_space(pins):
    """decide-forks fits a kernel's parts (emmy.passes.decide_forks): what it decides is legal for
    every part, so it is a point of the space."""
    k = kernels(300, pins=tuple(f"{QKV}.{p}" for p in pins))[QKV]
    problem = problem_of(k, SM90A)
    assert k.knob_values() in legal_points(problem.info, problem.space, SM90A)
