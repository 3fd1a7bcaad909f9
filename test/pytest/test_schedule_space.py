"""The legal space of a kernel (emmy/schedule/space.py): exactly the points legality accepts, a
conditional space whose every draw is legal, neighbours, and what the plan predicts."""

from __future__ import annotations

import random
from itertools import product
from math import prod

import optuna
import pytest

import loop_examples as L
from emmy.analysis.classify import classify
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects.loop import FusedOp
from emmy.ir_io import parse_module
from emmy.schedule.plan import plan_for
from emmy.schedule.space import ConditionalSpace, LegalSpace, candidate_facts, knob_order, legal_points
from emmy.targets import get_target
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check

SM90A, SM80 = get_target("sm_90a"), get_target("sm_80")


def info_of(example):
    module = parse_module(make_context(), example[0], "example")
    return classify(next(op for op in module.walk() if isinstance(op, FusedOp)))


def brute_force(info, space, target) -> list[dict]:
    names = list(space)
    return [dict(zip(names, values)) for values in product(*space.values()) if not check(info, dict(zip(names, values)), target)]


def canonical(points) -> list[tuple]:
    return sorted(tuple(sorted((k, str(v)) for k, v in p.items())) for p in points)


# A contraction with row statistics (the fusion knob) at a size where split_tail, stream_k,
# clusters and groups all have legal and illegal values; each domain cut to a few values so
# that every combination can be checked one by one.
RMSNORM_MATMUL = L.rmsnorm_matmul(2048, 4096, 1024, target="sm_90a")
SMALL = {
    "block_m": (64, 128), "block_n": (256,), "block_k": (64,), "split_k": (1, 2), "combine": ("kernel", "last_block"),
    "split_tail": (1, 2), "stages": (1, 4), "workers": ("thread", "mma_sync", "wgmma", "wgmma_ws"), "warps": (4, 8),
    "schedule": ("grid", "persistent", "stream_k"), "copy": ("cp_async", "tma"), "cluster": (1, 2), "group_m": (1, 2),
    "epilogue": ("together", "staggered", "pingpong"), "slices": ("rows", "cols"), "vector": (8,),
    "fusion": ("fused", "split"),
}


@pytest.fixture(scope="module")
def contraction():
    return info_of(RMSNORM_MATMUL)


def test_small_contraction_space_equals_brute_force(contraction):
    assert set(SMALL) == set(knob_space_for(contraction, SM90A))
    expected = brute_force(contraction, SMALL, SM90A)
    points = legal_points(contraction, SMALL, SM90A)
    assert 0 < len(points) == len(expected) < prod(map(len, SMALL.values()))
    assert canonical(points) == canonical(expected)
    # every kind of rule is met on the way: values legal on their own but not together
    assert {p["schedule"] for p in points} == {"grid", "persistent", "stream_k"}
    assert {p["split_tail"] for p in points} == {1, 2} and {p["cluster"] for p in points} == {1, 2}
    # (A is computed from raw tiles here, rewritten in place by the warpgroup of its rows: never cols)
    assert {p["slices"] for p in points} == {"rows"}


def test_small_plain_contraction_space_equals_brute_force():
    """slices = cols where A is a plain copy: block_n is then the side cut into slices, which the
    builder's order (slices before the tiles) must not cut off."""
    info = info_of(L.matmul(3000, 1024, 2048, target="sm_90a"))
    small = {k: v for k, v in SMALL.items() if k != "fusion"}
    small.update(block_m=(32, 64, 128), block_n=(64, 128, 256), split_tail=(1,))
    assert set(small) == set(knob_space_for(info, SM90A))
    expected = brute_force(info, small, SM90A)
    points = legal_points(info, small, SM90A)
    assert canonical(points) == canonical(expected)
    cols = [p for p in points if p["slices"] == "cols"]
    assert cols and {p["block_m"] for p in cols} == {32, 64, 128} and {p["workers"] for p in cols} == {"wgmma", "wgmma_ws"}
    # pairs along n with cols (any group of row tiles), along m with rows (groups of whole pairs);
    # 3000 rows make 47 tiles of 64 (no pairs along m; 32 is no multiple of a 64-row slice) and
    # 1024 columns 16, 8 or 4 tiles (pairs along n)
    pairs = {(p["slices"], p["group_m"]) for p in points if p["cluster"] == 2}
    assert pairs == {("cols", 1), ("cols", 2), ("rows", 2)}
    assert {p["block_m"] for p in points if p["cluster"] == 2 and p["slices"] == "rows"} == {128}
    assert {p["block_m"] for p in points if p["cluster"] == 2 and p["slices"] == "cols"} == {32, 64, 128}


@pytest.mark.parametrize(
    "example, target",
    [
        (L.attention(1, 16, 8, 512, 128), SM90A),
        (L.attention(1, 4, 2, 130, 96), SM80),
        (L.rmsnorm(512, 1024), SM90A),
        (L.silu_mul(7, 64), SM90A),
        (L.softmax(4, 64), SM80),
    ],
    ids=["attention", "attention-odd", "reduction", "elementwise", "softmax"],
)
def test_whole_space_equals_brute_force(example, target):
    info = info_of(example)
    space = knob_space_for(info, target)
    expected = brute_force(info, space, target)
    points = legal_points(info, space, target)
    assert len(points) == len(expected) > 0
    assert canonical(points) == canonical(expected)


def test_full_contraction_space(contraction):
    """The whole space (10^9 combinations): counted without listing it, the same in another
    order, and every point drawn from it legal."""
    space = knob_space_for(contraction, SM90A)
    points = legal_points(contraction, space, SM90A)
    assert points.order == knob_order(space) and points.order[0] == "workers"
    assert 10_000 < len(points) < prod(map(len, space.values())) // 100
    swapped = list(points.order)
    i, j = swapped.index("block_n"), swapped.index("block_k")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    other = legal_points(contraction, space, SM90A, order=swapped)
    assert len(other) == len(points)
    rng = random.Random(0)
    for _ in range(300):
        point = points[rng.randrange(len(points))]
        assert not check(contraction, point, SM90A), point
        assert point in other
    assert points[len(points) - 1] == points[-1] and points[0] in points


def test_sequence_order_index_and_membership(contraction):
    points = legal_points(contraction, SMALL, SM90A)
    listed = list(points)
    assert listed == [points[i] for i in range(len(points))] == points[:]
    # lexicographic in the knob order, each knob's values in domain order
    rank = [tuple(SMALL[n].index(p[n]) for n in points.order) for p in listed]
    assert rank == sorted(rank) and len(set(rank)) == len(rank)
    illegal = dict(listed[0], workers="thread", copy="tma")
    assert check(contraction, illegal, SM90A) and illegal not in points
    assert {**listed[0], "extra": 1} not in points and "block_m" not in points
    with pytest.raises(IndexError):
        points[len(points)]


def test_options_and_counts(contraction):
    points = legal_points(contraction, SMALL, SM90A)
    assert points.options({}) == ("thread", "mma_sync", "wgmma", "wgmma_ws")
    assert points.count({}) == len(points)
    # slices = cols needs an A side that is no rewrite of raw tiles (here the norm's); schedule =
    # persistent needs wgmma_ws
    assert points.options({"workers": "wgmma_ws"}) == ("rows",)
    assert points.options({"workers": "mma_sync"}) == ("rows",)
    assert points.options({"workers": "wgmma_ws", "slices": "rows"}) == ("grid", "persistent", "stream_k")
    assert points.options({"workers": "mma_sync", "slices": "rows"}) == ("grid",)
    by_workers = sum(points.count({"workers": w}) for w in points.options({}))
    assert by_workers == len(points)
    with pytest.raises(EmmyError, match=r"a prefix assigns the first knobs in order \(workers, slices, schedule, .*\), got block_m"):
        points.options({"block_m": 64})


def test_from_points_round_trip(contraction):
    points = legal_points(contraction, SMALL, SM90A)
    listed = list(points)
    rebuilt = LegalSpace.from_points(listed, points.order, points.domains)
    assert list(rebuilt) == listed and rebuilt.source is None
    # without domains, each knob's values in the order they first appear
    first_seen = LegalSpace.from_points(listed[::-1], points.order)
    assert first_seen.domains["workers"] == ("wgmma_ws", "wgmma", "mma_sync", "thread")
    assert canonical(first_seen) == canonical(listed)
    # another order: from the points when the space was built from points
    backwards = rebuilt.reordered(tuple(reversed(points.order)))
    assert backwards.order == tuple(reversed(points.order)) and canonical(backwards) == canonical(listed)
    shuffled = listed[:]
    random.Random(1).shuffle(shuffled)
    reordered = LegalSpace.from_points(shuffled, tuple(reversed(points.order)))
    assert canonical(reordered) == canonical(listed)
    with pytest.raises(EmmyError, match="a point must assign exactly the knobs"):
        LegalSpace.from_points([{"block_m": 64}], points.order)


def test_order_must_name_every_knob(contraction):
    with pytest.raises(EmmyError, match=r"the order \(workers, block_m\) must name each knob of the space"):
        legal_points(contraction, SMALL, SM90A, order=("workers", "block_m"))


def test_one_and_no_legal_point():
    info = info_of(L.silu_mul(7, 64))
    assert list(legal_points(info, {}, SM90A)) == [{}]  # no knobs: the one empty point
    one = legal_points(info, {"threads": (64,), "vector": (1,), "items": (1,)}, SM90A)
    assert list(one) == [{"threads": 64, "vector": 1, "items": 1}]
    # K = 100: vectors of 8 do not divide it
    matmul = info_of(L.matmul(7, 96, 100))
    none = legal_points(matmul, {**knob_space_for(matmul, SM90A), "vector": (8,)}, SM90A)
    assert len(none) == 0 and list(none) == [] and none.options({}) == () and none.count({}) == 0
    with pytest.raises(EmmyError, match="a conditional space needs at least one legal point"):
        ConditionalSpace(none, none.order)


# ------------------------------------------------------------------------------------ sampling


def test_every_draw_of_an_optuna_study_is_legal(contraction):
    space = knob_space_for(contraction, SM90A)
    cond = ConditionalSpace(legal_points(contraction, space, SM90A), knob_order(space))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=10))
    seen = []
    for _ in range(30):
        trial = study.ask()
        point = cond.suggest(trial)
        assert set(point) == set(space) and not check(contraction, point, SM90A), point
        # each parameter's name carries its choice list, so Optuna sees one list per name
        for name, value in trial.params.items():
            knob, _, choices = name.partition("|")
            assert point[knob] == value and str(value) in choices.split(",")
        seen.append(point)
        study.tell(trial, float(point["block_m"] * point["block_n"]))
    assert len({tuple(sorted(p.items(), key=str)) for p in seen}) > 20  # it explores
    assert ConditionalSpace.parameter("block_m", [64, 128]) == "block_m|64,128"


def test_suggest_takes_only_legal_choices(contraction):
    """A stand-in trial that records the choices offered: each is a value with a completion."""
    points = legal_points(contraction, SMALL, SM90A)
    cond = ConditionalSpace(points, points.order)

    class Trial:
        def __init__(self, rng):
            self.rng, self.offered = rng, []

        def suggest_categorical(self, name, choices):
            self.offered.append((name, list(choices)))
            return self.rng.choice(choices)

    rng = random.Random(3)
    for _ in range(50):
        trial = Trial(rng)
        point = cond.suggest(trial)
        assert point in points
        prefix: dict = {}
        for (name, choices), knob in zip(trial.offered, points.order):
            assert choices == list(points.options(prefix)) and name == ConditionalSpace.parameter(knob, choices)
            prefix[knob] = point[knob]


def test_conditional_space_in_another_order(contraction):
    points = legal_points(contraction, SMALL, SM90A)
    order = tuple(sorted(points.order))
    cond = ConditionalSpace(points, order)
    assert cond.order == order and len(cond.space) == len(points) and cond.space.source == points.source
    assert ConditionalSpace(points, points.order).space is points
    listed = [{k: p[k] for k in order} for p in cond.space]
    assert canonical(listed) == canonical(points)


# ------------------------------------------------------------------------------------ neighbours


def test_neighbours(contraction):
    points = legal_points(contraction, SMALL, SM90A)
    cond = ConditionalSpace(points, points.order)
    point = next(p for p in points if p["workers"] == "wgmma_ws" and p["schedule"] == "grid" and p["block_m"] == 128)
    near = cond.neighbours(point, 30)
    assert near == cond.neighbours(dict(reversed(list(point.items()))), 30)  # deterministic
    assert len(near) == 30 and point not in near
    within_two = [p for p in points if 1 <= sum(p[k] != point[k] for k in point) <= 2]
    assert canonical(cond.neighbours(point, 1000)) == canonical(within_two)  # all there are
    changed = [sum(p[k] != point[k] for k in point) for p in near]
    assert changed == sorted(changed) and set(changed) == {1, 2}
    for p in near:
        assert p in points and not check(contraction, p, SM90A)
    ones = [p for p in near if sum(p[k] != point[k] for k in point) == 1]
    every_one = [dict(point, **{k: v}) for k in points.order for v in SMALL[k] if v != point[k]]
    assert len(ones) == sum(1 for p in every_one if p in points)
    assert len({tuple(p.items()) for p in near}) == len(near)
    with pytest.raises(EmmyError, match="a point must assign exactly the knobs"):
        cond.neighbours({"block_m": 64}, 3)


def test_neighbours_nearest_values_first():
    info = info_of(L.silu_mul(7, 64))
    space = knob_space_for(info, SM90A)
    points = legal_points(info, space, SM90A)
    cond = ConditionalSpace(points, points.order)
    near = cond.neighbours({"threads": 256, "vector": 1, "items": 1}, 4)
    assert near == [
        {"threads": 128, "vector": 1, "items": 1},
        {"threads": 512, "vector": 1, "items": 1},
        {"threads": 256, "vector": 2, "items": 1},
        {"threads": 256, "vector": 1, "items": 2},
    ]


# ------------------------------------------------------------------------------------ facts


def test_candidate_facts_come_from_the_plan(contraction):
    space = knob_space_for(contraction, SM90A)
    points = legal_points(contraction, space, SM90A)
    rng = random.Random(5)
    for _ in range(20):
        values = points[rng.randrange(len(points))]
        facts = candidate_facts(contraction, values, SM90A)
        plan = plan_for(contraction, values, SM90A)
        assert facts == {
            "smem_bytes": plan.smem_bytes, "threads": plan.threads, "blocks": plan.blocks, "waves": plan.waves,
            "registers": plan.registers, "launches": len(plan.launches),
            "a_source": plan.a_source, "a_source_reason": plan.a_source_reason,
        }
        assert 0 < facts["threads"] <= SM90A.max_threads_per_block and facts["smem_bytes"] <= SM90A.smem_per_block
        assert facts["waves"] == -(-facts["blocks"] // SM90A.sms)


def test_reordered_needs_every_knob(contraction):
    points = LegalSpace.from_points(list(legal_points(contraction, SMALL, SM90A)), knob_order(SMALL))
    with pytest.raises(EmmyError, match=r"the order \(block_m\) must name each knob of the space \(workers, "):
        points.reordered(("block_m",))


def test_the_decisions_of_a_layer_are_legal_points():
    """Every kernel of the Qwen3 layer (sm_90a): the rules' answers are one of its legal points."""
    from emmy.dialects.tile import KernelOp
    from emmy.driver import CompileOptions, compile_model
    from emmy.passes.decide_forks import problem_of

    module = compile_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", tokens=32, target="sm_90a", stop_after="tile")).module
    kinds = set()
    for op in module.walk():
        if isinstance(op, KernelOp):
            problem = problem_of(op, SM90A)
            points = legal_points(problem.info, problem.space, SM90A)
            assert op.knob_values() in points, op.kernel_name
            kinds.add(op.kind_name)
    assert kinds == {"elementwise", "contraction", "attention"}
