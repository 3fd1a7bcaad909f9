"""First trials from earlier studies of the same kernel (emmy.search.earlier): a new study of a
kernel whose key changed (a knob added or taken out) starts with what its old studies found
fastest, read in today's space and measured again."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from emmy.driver import CompileOptions
from emmy.records import default_url, open_store
from emmy.records.store import KERNEL_ATTR, KEY_ATTR
from emmy.search.earlier import EARLIER, earlier_bests
from emmy.search.study import _key_fields, conditional_space, open_study, point_key
from emmy.search.task import select, tasks_of
from emmy.tuning.knobs import in_space
from emmy.tuning.legality import check

optuna.logging.set_verbosity(optuna.logging.WARNING)

MODEL = "Qwen/Qwen3-Embedding-0.6B"
TARGET = "sm_90a"


@pytest.fixture(scope="module")
def down_3000():
    (task,) = select(tasks_of(CompileOptions(model=MODEL, layer=0, target=TARGET), [3000]), ["down_proj_residual"])
    return task


def _old_study(store, task, structure: str, trials, kernel: str | None = None, shape: str | None = None) -> str:
    """A study as an earlier Emmy left it: another structure digest (or another shape), its
    trials' values and times as given ((values, seconds, status))."""
    key = replace(task.key, structure=structure, shape=shape or task.key.shape)
    study = optuna.create_study(study_name=key.id, storage=store.storage, direction="minimize")
    study.set_user_attr(KEY_ATTR, _key_fields(key))
    study.set_user_attr(KERNEL_ATTR, kernel or task.kernel)
    for values, seconds, status in trials:
        ok = status == "ok"
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
            value=seconds if ok else None, params={}, distributions={},
            user_attrs={"values": values, "status": status, "time_s": seconds}))
    return key.id


def _then(values, **changes):
    return {**values, **changes}


def test_in_space_drops_knobs_gone_and_adds_the_off_value_of_knobs_gained():
    domains = {"block_m": (64, 128), "epilogue": ("together", "pingpong"), "split_k": (1, 2)}
    assert in_space({"block_m": 128, "fusion": "fused", "split_k": 2}, domains) == {
        "block_m": 128, "epilogue": "together", "split_k": 2}
    assert in_space({"block_m": 96, "split_k": 1, "epilogue": "together"}, domains) is None  # 96: not in today's domain
    assert in_space({"split_k": 1, "epilogue": "together"}, {**domains, "stages": (2, 4)}) is None  # no off value


def test_a_new_study_starts_with_the_old_studies_fastest_points_after_the_default(down_3000, tmp_path):
    task = down_3000
    store = open_store(default_url(tmp_path))
    default = dict(task.default)
    old = {k: v for k, v in default.items() if k != "epilogue"} | {"fusion": "fused"}  # before: fusion, no epilogue
    filler = _then(old, block_m=256, block_n=96, warps=16)
    grouped = _then(old, group_m=2)
    huge = _then(old, block_m=256, block_n=256, stages=8)  # more shared memory than a block has
    assert check(task.info(), in_space(huge, dict(task.space)), task.target_object()) != []
    _old_study(store, task, "a" * 64, [
        (grouped, 31e-6, "ok"), (filler, 24e-6, "ok"), (huge, 10e-6, "ok"),
        (_then(old, block_n=100), 11e-6, "ok"),  # 100: not in today's domain
        (_then(old, group_m=4), 9e-6, "wrong"),  # never a fast wrong answer
    ])
    _old_study(store, task, "b" * 64, [(_then(old, group_m=8), 28e-6, "ok"), (_then(old, group_m=16), 40e-6, "ok")])
    _old_study(store, task, "c" * 64, [(_then(old, group_m=32), 5e-6, "ok")], kernel="o_proj_residual")  # another kernel
    other_shape = task.key.shape.replace("m=3000", "m=2999")
    _old_study(store, task, "d" * 64, [(_then(old, group_m=32), 5e-6, "ok")], shape=other_shape)

    space = conditional_space(task)
    expected = [in_space(v, dict(task.space)) for v in (filler, _then(old, group_m=8), grouped)]
    assert earlier_bests(store, task, space) == expected[:EARLIER]
    assert expected[0]["epilogue"] == "together" and "fusion" not in expected[0]

    study = open_study(store, task, space=space)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    marks = [t.user_attrs.get("enqueued") for t in waiting]
    assert marks[:1 + EARLIER] == [None] + ["earlier"] * EARLIER
    assert _values(space, waiting[0].system_attrs["fixed_params"]) == default
    points = [_values(space, t.system_attrs["fixed_params"]) for t in waiting[1:1 + EARLIER]]
    assert points == expected
    assert len({point_key(_values(space, t.system_attrs["fixed_params"])) for t in waiting}) == len(waiting)


def test_a_study_that_exists_is_not_seeded_again(down_3000, tmp_path):
    task = down_3000
    store = open_store(default_url(tmp_path))
    first = open_study(store, task)
    n = len(first.get_trials(deepcopy=False))
    _old_study(store, task, "a" * 64, [(_then(dict(task.default), group_m=2), 20e-6, "ok")])
    again = open_study(store, task)
    assert len(again.get_trials(deepcopy=False)) == n


def _values(space, params) -> dict:
    """The knob values of a trial's Optuna parameters (`knob|choices` -> value)."""
    return {name.partition("|")[0]: v for name, v in params.items()}


def test_a_run_says_it_measured_earlier_points_and_whether_one_won(down_3000, tmp_path):
    """`emmy tune`'s notes under the table name the earlier points a new study measured."""
    from emmy.search.study import Budget
    from emmy.search.tune import outcome_notes, tune

    task = down_3000
    store = open_store(default_url(tmp_path))
    old = {k: v for k, v in dict(task.default).items() if k != "epilogue"} | {"fusion": "fused"}
    _old_study(store, task, "a" * 64, [(_then(old, group_m=2), 20e-6, "ok"), (_then(old, group_m=8), 21e-6, "ok")])
    (outcome,), problems = tune([task], store, Budget(trials=6), "cost", workers=1, progress=None)
    assert problems == []
    (line,) = [n for n in outcome_notes([outcome], 10.0) if "earlier point" in n]
    assert line.startswith(f"{task.kernel} ({task.key_id}): 2 earlier point(s) measured first")
    won = outcome.best is not None and outcome.best.values in (in_space(_then(old, group_m=g), dict(task.space)) for g in (2, 8))
    assert line.endswith("the best is one of them" if won else "none is the best")


def test_a_run_without_earlier_points_says_nothing_of_them(down_3000, tmp_path):
    from emmy.search.study import Budget
    from emmy.search.tune import outcome_notes, tune

    store = open_store(default_url(tmp_path))
    (outcome,), _ = tune([down_3000], store, Budget(trials=3), "cost", workers=1, progress=None)
    assert not [n for n in outcome_notes([outcome], 10.0) if "earlier point" in n]
