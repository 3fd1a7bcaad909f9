"""First trials that fill the card's waves (emmy.search.waves): a contraction whose default
answer leaves the last wave part empty starts its study with other tile shapes too."""

from __future__ import annotations

import optuna
import pytest

from emmy.driver import CompileOptions
from emmy.prior.features import features
from emmy.records import default_url, open_store
from emmy.search.study import conditional_space, open_study, point_key
from emmy.search.task import select, tasks_of
from emmy.search.waves import MIN_AREA, SLACK, wave_fillers
from emmy.tuning.legality import check

optuna.logging.set_verbosity(optuna.logging.WARNING)

MODEL = "Qwen/Qwen3-Embedding-0.6B"
TARGET = "sm_90a"


def _task(tokens: int, kernel: str):
    (task,) = select(tasks_of(CompileOptions(model=MODEL, layer=0, target=TARGET), [tokens]), [kernel])
    return task


@pytest.fixture(scope="module")
def down_3000():
    return _task(3000, "down_proj_residual")


def test_fillers_quantize_better_keep_most_of_the_tile_and_are_legal(down_3000):
    task = down_3000
    space = conditional_space(task)
    info, target = task.info(), task.target_object()
    own = features(info, task.default, target)
    assert own["quant"] > SLACK  # 96 tiles of 128 x 256 on 132 SMs
    fillers = wave_fillers(task, space, dict(task.default))
    assert fillers and len({point_key(p) for p in fillers}) == len(fillers)
    shapes = [(p["block_m"], p["block_n"]) for p in fillers]
    assert (256, 96) in shapes  # 12 x 11 = 132 tiles: one whole wave
    for point in fillers:
        f = features(info, point, target)
        assert f["quant"] < own["quant"] and f["tile_area"] >= MIN_AREA * own["tile_area"]
        assert (point["block_m"], point["block_n"]) != (task.default["block_m"], task.default["block_n"])
        assert check(info, point, target) == []
    quants = [features(info, p, target)["quant"] for p in fillers]
    assert quants == sorted(quants)


def test_a_study_starts_with_them_after_the_default_and_its_neighbours(down_3000, tmp_path):
    task = down_3000
    store = open_store(default_url(tmp_path))
    study = open_study(store, task)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    marks = [t.user_attrs.get("enqueued") for t in waiting]
    assert "waves" in marks and marks.index("waves") > 0
    assert marks[marks.index("waves"):] == ["waves"] * marks.count("waves")
    enqueued = {point_key(t.system_attrs["fixed_params"]) for t in waiting if t.user_attrs.get("enqueued") == "waves"}
    space = conditional_space(task)
    assert len(enqueued) == marks.count("waves") == len(wave_fillers(task, space, dict(task.default)))


def test_none_where_the_default_fills_its_waves():
    task = _task(4096, "down_proj_residual")  # 128 tiles on 132 SMs
    assert features(task.info(), task.default, task.target_object())["quant"] <= SLACK
    assert wave_fillers(task, conditional_space(task), dict(task.default)) == []


def test_a_small_space_is_measured_whole_rather_than_stopping_on_repeats(tmp_path, monkeypatch):
    """Past the near neighbours of a repeated draw, the nearest legal point no trial drew is
    enqueued, so a study whose budget exceeds its space measures every point, even where a
    worker gives up after two repeated draws in a row."""
    from emmy.search import study as study_module
    from emmy.search.cost import CostMeasurer
    from emmy.search.study import Budget, measured, run_trials

    monkeypatch.setattr(study_module, "MAX_REPEATS", 2)
    tasks = tasks_of(CompileOptions(model=MODEL, layer=0, target="sm_80"), [16])
    task = min(tasks, key=lambda t: len(conditional_space(t).space))
    n = len(conditional_space(task).space)
    assert n <= 100
    store = open_store(default_url(tmp_path))
    run_trials(store, task, CostMeasurer(), Budget(trials=n + 50), batch=4)
    points = {point_key(t.user_attrs["values"]) for t in measured(store.load(task.key_id))}
    assert len(points) == n
