"""emmy tune's search (emmy.search) on the real loop and store, with the deterministic cost
measurer in place of the GPU: tasks, first trials, legality of every draw, failed candidates,
resuming, naming the best, and the local tier reading it back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from emmy.driver import CompileOptions, compile_model
from emmy.measure import Measurement
from emmy.records import best_record, default_url, open_store
from emmy.search.cost import CostMeasurer
from emmy.search.best import name_best
from emmy.search.study import Budget, measured, open_study, point_key, run_trials
from emmy.search.task import select, tasks_in
from emmy.search.tune import HEADER, outcome_rows, tune
from emmy.targets import get_target
from emmy.tuning.legality import check

optuna.logging.set_verbosity(optuna.logging.WARNING)

ROOT = Path(__file__).resolve().parents[2]
MODEL = f"{ROOT}/test/pytest/models/mlp_block.py:make"
TARGET = "sm_90"


@pytest.fixture(scope="module")
def tasks():
    result = compile_model(CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile"))
    return tasks_in(result.module, get_target(TARGET), 16)


@pytest.fixture
def store(tmp_path):
    return open_store(default_url(tmp_path))


def _values(study):
    return [t.user_attrs["values"] for t in measured(study)]


def test_one_task_per_key_with_its_default(tasks):
    assert len({t.key_id for t in tasks}) == len(tasks) >= 2
    for t in tasks:
        op = t.kernel_op()
        assert op.kernel_name == t.kernel
        assert all(k.value is None for k in op.knob_dict().values())  # undecided in the task
        assert set(t.default) == set(t.space)
        assert check(t.info(), t.default, get_target(TARGET)) == []


def test_first_trials_are_the_default_then_legal_draws(tasks, store):
    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=12), seed=0, batch=3)
    study = store.load(task.key_id)
    values = _values(study)
    assert len(values) == 12
    assert values[0] == dict(task.default)
    info, target = task.info(), get_target(TARGET)
    assert all(check(info, v, target) == [] for v in values)
    assert len({point_key(v) for v in values}) == len(values)  # never measured twice
    for t in measured(study):
        assert set(t.user_attrs) >= {"values", "status", "time_s", "spread", "error", "reason", "env", "date", "uid"}
        assert t.user_attrs["env"]["card"] == "cost model (no GPU)"
        if t.user_attrs["status"] == "ok":
            assert t.state == optuna.trial.TrialState.COMPLETE and t.value == t.user_attrs["time_s"]
        else:
            assert t.state == optuna.trial.TrialState.FAIL and t.user_attrs["reason"]


def test_failed_candidates_are_failed_trials_not_crashes(tasks, store):
    task = tasks[0]
    run_trials(store, task, CostMeasurer(fail_every=2), Budget(trials=10), seed=1)
    statuses = [t.user_attrs["status"] for t in measured(store.load(task.key_id))]
    assert "build_failed" in statuses and len(statuses) == 10


def test_a_second_run_continues_the_study(tasks, store):
    task = tasks[1]
    run_trials(store, task, CostMeasurer(), Budget(trials=5), seed=0)
    first = _values(store.load(task.key_id))
    run_trials(store, task, CostMeasurer(), Budget(trials=9), seed=0)
    again = _values(store.load(task.key_id))
    assert len(again) == 9 and again[:5] == first


def test_the_study_is_created_and_seeded_once(tasks, store):
    task = tasks[0]
    open_study(store, task)
    waiting = len(store.load(task.key_id).get_trials(states=(optuna.trial.TrialState.WAITING,)))
    open_study(store, task)
    assert len(store.load(task.key_id).get_trials(states=(optuna.trial.TrialState.WAITING,))) == waiting >= 1
    attrs = store.load(task.key_id).user_attrs
    assert attrs["emmy.kernel"] == task.kernel and attrs["emmy.key"]["id"] == task.key_id


def test_a_resumed_study_measures_first_points_its_killed_workers_left(tasks, store):
    """Workers killed before measuring the enqueued first trials (FAIL without a status, as
    Optuna's heartbeat leaves them): the next run enqueues them again and measures the default
    first, not TPE's draws (Optuna's skip_if_exists counted the failed trials as existing)."""
    task = tasks[0]
    study = open_study(store, task)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    for _ in waiting:  # each asked, then left failed unmeasured
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    run_trials(store, task, CostMeasurer(), Budget(trials=len(waiting)), seed=0)
    values = _values(store.load(task.key_id))
    assert values[0] == dict(task.default)
    firsts = [dict(t.system_attrs["fixed_params"]) for t in waiting]
    again = [t for t in measured(store.load(task.key_id)) if "fixed_params" in t.system_attrs]
    assert [dict(t.system_attrs["fixed_params"]) for t in again] == firsts  # every first point, in order
    from emmy.search.study import requeue_unmeasured

    assert requeue_unmeasured(store.load(task.key_id)) == []  # measured now: nothing enqueued again


def test_time_budget_stops_the_loop(tasks, store):
    ticks = iter(range(0, 1000, 10))
    done = run_trials(store, tasks[0], CostMeasurer(), Budget(seconds=25), clock=lambda: next(ticks))
    assert 1 <= done <= 3


def test_name_best_remeasures_and_records(tasks, store):
    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=10))
    best = name_best(store, task, CostMeasurer())
    study = store.load(task.key_id)
    fastest = min((t for t in measured(study) if t.value is not None), key=lambda t: t.value)
    assert best.trial == fastest.number and best.values == fastest.user_attrs["values"]
    rec = best_record(store, task.key)
    assert rec.values == fastest.user_attrs["values"] and rec.trial == fastest.number and rec.time_s == best.time_s


class _Remeasured(CostMeasurer):
    """Re-measures each candidate at the given times (by trial values), spread 2%."""

    def __init__(self, times):
        super().__init__()
        object.__setattr__(self, "times", times)

    def remeasure(self, task, candidates, rounds):
        return [Measurement("ok", time_s=self.times(c), spread=0.02, error=0.0) for c in candidates]


def test_a_new_best_must_beat_the_old_by_more_than_the_spread(tasks, store):
    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=8))
    first = name_best(store, task, CostMeasurer())
    old = point_key(first.values)
    # (a best is named again only over new trials)
    run_trials(store, task, CostMeasurer(), Budget(trials=10))
    # another candidate now re-measures 1% faster than the recorded best: within the 2% spread
    kept = name_best(store, task, _Remeasured(lambda c: 1e-5 if point_key(c) == old else 0.99e-5))
    assert kept.kept and point_key(kept.values) == old
    assert point_key(best_record(store, task.key).values) == old
    # 10% faster: replaces it
    run_trials(store, task, CostMeasurer(), Budget(trials=12))
    new = name_best(store, task, _Remeasured(lambda c: 1e-5 if point_key(c) == old else 0.9e-5))
    assert not new.kept and point_key(new.values) != old
    assert point_key(best_record(store, task.key).values) == point_key(new.values)


class _Counting(CostMeasurer):
    """Counts its re-measurements."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "calls", [])

    def remeasure(self, task, candidates, rounds):
        self.calls.append(len(candidates))
        return super().remeasure(task, candidates, rounds)


def test_a_best_is_named_again_only_over_new_trials(tasks, store):
    """Naming a study whose best was named over the same trials recalls it without measuring;
    new trials make it re-measure."""
    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=6))
    counting = _Counting()
    first = name_best(store, task, counting)
    again = name_best(store, task, counting)
    assert len(counting.calls) == 1
    assert (again.trial, again.values, again.time_s) == (first.trial, first.values, first.time_s)
    assert again.recalled and not first.recalled
    assert store.load(task.key_id).user_attrs["emmy.best"]["measured"] == 6
    run_trials(store, task, CostMeasurer(), Budget(trials=8))
    name_best(store, task, counting)
    assert len(counting.calls) == 2
    assert store.load(task.key_id).user_attrs["emmy.best"]["measured"] == 8


def test_the_priors_top_candidates_come_after_the_default_and_its_neighbours(tasks, store):
    """With a prior for the target, a new study enqueues its 3 fastest predicted legal
    candidates (other than the default and its neighbours) after them; the first trials
    measure them all."""
    from emmy.prior.store import Prior
    from emmy.search.study import NEIGHBOURS, conditional_space, prior_picks

    task, prior = tasks[0], Prior(TARGET)
    space = conditional_space(task)
    first = [dict(task.default), *space.neighbours(dict(task.default), NEIGHBOURS)]
    picks = prior_picks(task, space, prior, {point_key(p) for p in first})
    assert len(picks) == 3 and all(check(task.info(), p, get_target(TARGET)) == [] for p in picks)
    assert not {point_key(p) for p in picks} & {point_key(p) for p in first}
    study = open_study(store, task, prior=prior)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.user_attrs.get("enqueued") for t in waiting] == [None] * len(first) + ["prior"] * 3
    assert [{k.partition("|")[0]: v for k, v in t.system_attrs["fixed_params"].items()} for t in waiting[-3:]] == picks
    run_trials(store, task, CostMeasurer(), Budget(trials=len(first) + 3), prior=prior)
    assert [point_key(v) for v in _values(store.load(task.key_id))] == [point_key(p) for p in first + picks]


def test_tune_outcomes_and_table(tasks, store):
    outcomes, problems = tune(tasks, store, Budget(trials=6), "cost", workers=1, progress=None)
    assert problems == []
    rows = outcome_rows(outcomes)
    assert len(rows[0]) == len(HEADER) and [r[0] for r in rows] == [t.kernel for t in tasks]
    for o in outcomes:
        assert o.trials == 6 and o.best is not None and o.default_status in ("ok", "build_failed")
        if o.default_time_s is not None:
            assert o.default_time_s >= o.best.time_s * 0.999 or o.best.kept


def test_each_best_is_said_as_it_is_named(tasks, store):
    import io

    out = io.StringIO()
    tune(tasks, store, Budget(trials=4), "cost", workers=1, progress=None, log=out)
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [t.kernel for t in tasks]
    assert all(line.startswith("named ") and ": best " in line and "(4 trials) in " in line for line in lines)
    again = io.StringIO()
    tune(tasks, store, Budget(trials=4), "cost", workers=1, progress=None, log=again)
    assert all("(4 trials, recalled) in " in line for line in again.getvalue().splitlines())


def test_timeouts_show_in_the_table_and_notes(tasks):
    from emmy.search.best import Best
    from emmy.search.tune import Outcome, outcome_notes

    o = Outcome(tasks[0], 5, Best(1, {}, 2e-6, 0.01, kept=False), 3e-6, "ok", timeouts=2,
                notes=("naming the best: timeout: ...",))
    assert outcome_rows([o])[0][2] == "5 (2 timeout)"
    notes = outcome_notes([o], 60.0)
    assert notes[0] == (f"{tasks[0].kernel} ({tasks[0].key_id}): 2 candidate(s) timed out (status 'timeout': past "
                        "the 60 s deadline on the GPU, or no answer while preparing; the measuring process was "
                        "replaced each time; the reasons are in the store)")
    assert notes[1] == f"{tasks[0].kernel} ({tasks[0].key_id}): naming the best: timeout: ..."
    assert outcome_notes([replace(o, timeouts=0, notes=())], 60.0) == []


def test_select_names_the_kernels(tasks):
    from emmy.diagnostics import EmmyError

    assert select(tasks, [tasks[1].kernel]) == [tasks[1]]
    with pytest.raises(EmmyError, match="--kernel nope: no such kernel here") as e:
        select(tasks, ["nope"])
    assert all(t.kernel in str(e.value) for t in tasks)


def as_measured(store, task) -> None:
    """Test data: the study's best as a GPU run would have recorded it (the cost measurer's own
    records are not measurements, and the evidence hierarchy never uses them)."""
    from emmy.records.store import BEST_ATTR

    study = store.load(task.key_id)
    best = dict(study.user_attrs[BEST_ATTR])
    best["env"] = {**best["env"], "card": "NVIDIA H200 (test data)"}
    study.set_user_attr(BEST_ATTR, best)


def test_cost_measurer_records_are_never_evidence(tasks, store):
    import json

    from emmy.passes.decide_forks import decisions

    tune(tasks, store, Budget(trials=4), "cost", workers=1, progress=None)
    options = CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile", records=store.url)
    module = compile_model(options).module
    assert all(d.tier == "rule" for d in decisions(module))
    from emmy.dialects.tile import KernelOp

    reports = [json.loads(op.attributes["emmy.evidence"].data) for op in module.walk() if isinstance(op, KernelOp)]
    assert reports and all(any("not a measurement" in s["why"] for s in r["skipped"]) for r in reports)


def test_local_tier_answers_from_the_store(tasks, store, tmp_path):
    from emmy.passes.decide_forks import decisions

    tune(tasks, store, Budget(trials=6), "cost", workers=1, progress=None)
    for task in tasks:
        as_measured(store, task)
    options = CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile", records=store.url)
    found = decisions(compile_model(options).module)
    for task in tasks:
        rec = best_record(store, task.key)
        mine = {d.knob: d for d in found if d.kernel == task.kernel}
        assert {k: d.value for k, d in mine.items()} == dict(rec.values)
        assert all(d.tier == "local" for d in mine.values())
        assert f"study {task.key_id}, trial {rec.trial}" in next(iter(mine.values())).reason


def test_local_tier_skips_a_record_no_longer_legal(tasks, store):
    from emmy.passes.decide_forks import decisions
    from emmy.records.store import BEST_ATTR

    task = tasks[0]
    tune([task], store, Budget(trials=4), "cost", workers=1, progress=None)
    as_measured(store, task)
    study = store.load(task.key_id)
    best = dict(study.user_attrs[BEST_ATTR])
    knob = next(iter(task.space))
    best["values"] = {**best["values"], knob: "not a value"}
    study.set_user_attr(BEST_ATTR, best)
    options = CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile", records=store.url)
    mine = [d for d in decisions(compile_model(options).module) if d.kernel == task.kernel]
    assert mine and all(d.tier == "rule" for d in mine)


def test_compiling_never_creates_a_store(tmp_path):
    from emmy.passes.decide_forks import decisions

    url = default_url(tmp_path / "home")
    options = CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile", records=url)
    assert all(d.tier == "rule" for d in decisions(compile_model(options).module))
    assert not (tmp_path / "home").exists()


def test_cost_measurer_is_deterministic(tasks):
    task = tasks[0]
    a = CostMeasurer().measure(task, [dict(task.default)])
    b = CostMeasurer().measure(replace(task), [dict(task.default)])
    assert a == b


def test_tasks_of_a_whole_model_each_key_once(tmp_path):
    """Every part of the model at each token count; kernels shared by layers (and parts) are one
    task; a layer's tasks are among the model's."""
    from tiny_models import write_tiny_model

    from emmy.search.task import tasks_of

    model = write_tiny_model(tmp_path / "m")
    whole = tasks_of(CompileOptions(model=model, layer=None, target=TARGET), [4, 8])
    ids = [t.key_id for t in whole]
    assert len(ids) == len(set(ids))
    assert {t.tokens for t in whole} == {4, 8}
    layer = tasks_of(CompileOptions(model=model, layer=0, target=TARGET), [4])
    assert {t.key_id for t in layer} <= set(ids)
    assert len({t.kernel for t in whole if t.tokens == 4}) > len(layer)  # the embedding and final norm too


def test_a_study_records_the_model_it_was_tuned_from(store):
    """The prior's leave-one-model-out holds out by this attribute."""
    from emmy.records.store import MODEL_ATTR
    from emmy.search.task import tasks_of

    tasks = tasks_of(CompileOptions(model=MODEL, target=TARGET), [16])
    assert tasks and all(t.model == MODEL for t in tasks)
    tune(tasks[:1], store, Budget(trials=2), "cost", workers=1, progress=None)
    assert store.study_attrs(tasks[0].key_id)[MODEL_ATTR] == MODEL


def test_the_default_is_remeasured_beside_the_best(tasks, store):
    """The default answer is timed in the same interleaved rounds as the best, and the run's
    speed-up compares those two times (a trial's single measurement can differ from a
    re-measurement by more than the spread); a recalled best keeps it."""
    from emmy.search.tune import _outcome

    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=6))
    default = point_key(task.default)
    seen = []

    class Slow(_Remeasured):
        def remeasure(self, task, candidates, rounds):
            seen.extend(point_key(c) for c in candidates)
            return super().remeasure(task, candidates, rounds)

    times = lambda c: 2e-5 if point_key(c) == default else 1e-5  # noqa: E731
    best = name_best(store, task, Slow(times))
    assert default in seen and best.default_s == 2e-5 and point_key(best.values) != default
    assert store.load(task.key_id).user_attrs["emmy.best"]["default_s"] == 2e-5
    out = _outcome(store, task, lambda: Slow(times))
    assert out.best.recalled and out.default_time_s == 2e-5


def test_a_continued_study_measures_todays_default_first(tasks, store):
    """A study made when the rules answered otherwise (here: its first trials measured, then the
    default changed to a point it never measured): continuing it measures the new default after
    the first trials still waiting and before TPE's draws, once, so the table's speed-up over
    the default is measured."""
    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=6), seed=0)
    study = store.load(task.key_id)
    from emmy.search.study import conditional_space, params_of

    space = conditional_space(task)
    seen = {point_key(v) for v in _values(study)}  # measured, or waiting as enqueued first trials:
    waiting = [dict(t.system_attrs["fixed_params"]) for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]
    seen |= {point_key(w) for w in waiting}
    other = next(p for p in reversed(space.neighbours(dict(task.default), 60))
                 if point_key(p) not in seen and point_key(params_of(space, p)) not in seen)
    changed = replace(task, default=other)
    n = 6 + len(waiting) + 1  # the first trials still waiting, then today's default
    run_trials(store, changed, CostMeasurer(), Budget(trials=n), seed=0)
    values = _values(store.load(task.key_id))
    assert values[n - 1] == dict(other)
    run_trials(store, changed, CostMeasurer(), Budget(trials=n + 2), seed=0)  # measured now: not again
    assert [point_key(v) for v in _values(store.load(task.key_id))].count(point_key(other)) == 1


def _whole_study_then_another_default(tasks, store):
    """A study of tasks[0] with its budget of 6 trials spent, and the same task with a default
    the study neither measured nor has waiting: (task, the first trials the budget left
    waiting, which Optuna hands out ahead of today's default, that default, the changed task)."""
    from emmy.search.study import conditional_space, params_of

    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=6), seed=0)
    study = store.load(task.key_id)
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    space = conditional_space(task)
    seen = {point_key(v) for v in _values(study)} | {point_key(dict(t.system_attrs["fixed_params"])) for t in waiting}
    other = next(p for p in reversed(space.neighbours(dict(task.default), 60))
                 if point_key(p) not in seen and point_key(params_of(space, p)) not in seen)
    return task, waiting, other, replace(task, default=other)


def test_a_whole_study_measures_todays_default_past_its_budget(tasks, store):
    """A study that already has its budget of trials, continued after the default changed to a
    point it never measured: today's default is measured anyway (the table's default is then a
    trial the study can name), once, and nothing else past the budget."""
    task, waiting, other, changed = _whole_study_then_another_default(tasks, store)
    measured_now = run_trials(store, changed, CostMeasurer(), Budget(trials=6), seed=0)
    values = [point_key(v) for v in _values(store.load(task.key_id))]
    assert measured_now == len(waiting) + 1 and values[-1] == point_key(other) and len(values) == 7 + len(waiting)
    assert run_trials(store, changed, CostMeasurer(), Budget(trials=6), seed=0) == 0  # measured now: nothing


def test_a_new_study_measures_the_rules_answer_right_after_its_default(tasks, store):
    """A default from elsewhere (a golden entry, say): the new study's second trial is the
    rules' answer, ahead of the earlier studies' points, the neighbours and the prior's picks."""
    from emmy.prior.choose import rules_anchor
    from emmy.search.study import conditional_space

    task = tasks[0]
    rules = rules_anchor(task.info(), get_target(TARGET), dict(task.space))
    other = next(p for p in reversed(conditional_space(task).neighbours(dict(task.default), 60))
                 if point_key(p) != point_key(rules))
    run_trials(store, replace(task, default=other), CostMeasurer(), Budget(trials=2), seed=0)
    trials = measured(store.load(task.key_id))
    assert [point_key(t.user_attrs["values"]) for t in trials] == [point_key(other), point_key(rules)]
    assert trials[1].user_attrs["enqueued"] == "rules"


def test_todays_answers_are_measured_past_the_time_budget(tasks, store):
    """A --time-budget spent before today's answers come up (first trials of the study waiting
    ahead of them) still measures them, with those ahead, and nothing else: a golden refresh
    with 8 s a kernel once left the rules' answer of 14 studies unmeasured (down at 512 tokens:
    64 x 64 tiles 8 deep, 22% faster than the study's named best on an H100)."""
    task, waiting, other, changed = _whole_study_then_another_default(tasks, store)
    ticks = iter(range(0, 100_000, 100))  # every check is past the 10 s budget
    done = run_trials(store, changed, CostMeasurer(), Budget(seconds=10), seed=0, clock=lambda: next(ticks))
    values = [point_key(v) for v in _values(store.load(task.key_id))]
    assert done == len(waiting) + 1 and values[-1] == point_key(other)
    ticks = iter(range(0, 100_000, 100))
    assert run_trials(store, changed, CostMeasurer(), Budget(seconds=10), seed=0, clock=lambda: next(ticks)) == 0


def test_todays_default_left_waiting_by_a_whole_study_is_measured_by_the_next_run(tasks, store):
    """A run before this rule enqueued today's default into a whole study and stopped at its
    budget; the next run measures it (and only it)."""
    from emmy.search.study import conditional_space, enqueue_todays_answers, params_of

    task = tasks[0]
    run_trials(store, task, CostMeasurer(), Budget(trials=6), seed=0)
    study = store.load(task.key_id)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # (no first trials left waiting)
    space = conditional_space(task)
    seen = {point_key(v) for v in _values(study)}
    other = next(p for p in reversed(space.neighbours(dict(task.default), 60))
                 if point_key(p) not in seen and point_key(params_of(space, p)) not in seen)
    changed = replace(task, default=other)
    assert enqueue_todays_answers(study, space, changed) == ["default"]  # ... and that run stopped
    assert run_trials(store, changed, CostMeasurer(), Budget(trials=6), seed=0) == 1
    assert point_key(_values(store.load(task.key_id))[-1]) == point_key(other)
    fresh = tasks[1]  # a study with budget left: today's answers wait their turn, the budget holds
    assert run_trials(store, fresh, CostMeasurer(), Budget(trials=2), seed=0) == 2


def test_a_study_measures_the_rules_answer_where_the_default_is_another(tasks, store):
    """Where the default comes from elsewhere (a golden entry, the prior) and differs from the
    hand-written rules' answer, the study measures the rules' answer too (`enqueued` "rules"):
    the prior's anchor, which `emmy prior evaluate` judges against."""
    from emmy.prior.choose import rules_anchor
    from emmy.search.study import conditional_space

    task = tasks[0]
    rules = rules_anchor(task.info(), task.target_object(), dict(task.space))
    assert point_key(rules) == point_key(dict(task.default))  # (no golden file for sm_90: the rules answer)
    space = conditional_space(task)
    near = {point_key(p) for p in space.neighbours(rules, 60)[:20]}
    other = next(p for p in reversed(space.neighbours(rules, 60)) if point_key(p) not in near)
    changed = replace(task, default=other)
    run_trials(store, changed, CostMeasurer(), Budget(trials=40), seed=0)
    trials = measured(store.load(task.key_id))
    assert point_key(trials[0].user_attrs["values"]) == point_key(other)
    ruled = [t for t in trials if point_key(t.user_attrs["values"]) == point_key(rules)]
    assert len(ruled) == 1 and ruled[0].user_attrs.get("enqueued") == "rules"


def test_a_pruned_draw_of_the_default_does_not_count_as_measured(tasks, store):
    """A draw of the default that was pruned (moved to another branch, or a repeat) measured
    nothing: the default is still enqueued and measured."""
    from emmy.search.study import conditional_space, enqueue_todays_answers

    task = tasks[0]
    study = open_study(store, task)
    for _ in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # the first trials, never measured
    pruned = study.ask()
    pruned.set_user_attr("values", dict(task.default))
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    assert "default" in enqueue_todays_answers(study, conditional_space(task), task)
    run_trials(store, task, CostMeasurer(), Budget(trials=1), seed=0)
    assert _values(store.load(task.key_id)) == [dict(task.default)]


def test_a_failure_of_todays_answer_recorded_by_another_build_is_measured_again(tasks, store):
    """The rules' answer (here: the default too) failed once under another build of Emmy (a
    harness error): continuing the study measures it again, once; a failure recorded by this
    build, or a wrong result by any build, counts as measured."""
    from emmy.measure.gpu import source_hash
    from emmy.search.study import conditional_space, enqueue_todays_answers

    task = tasks[0]
    study = open_study(store, task)
    space = conditional_space(task)
    for _ in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # the first trials, never measured
    failed = study.ask()
    for k, v in {"values": dict(task.default), "status": "launch_error", "reason": "CUDA_ERROR_NOT_FOUND",
                 "env": {"source_hash": "an older build"}}.items():
        failed.set_user_attr(k, v)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert enqueue_todays_answers(study, space, task, source_hash="this build") == ["default"]
    assert enqueue_todays_answers(study, space, task, source_hash="this build") == []  # waiting now: once
    run_trials(store, task, CostMeasurer(), Budget(trials=30), seed=0)
    again = [t.user_attrs["status"] for t in measured(store.load(task.key_id))
             if point_key(t.user_attrs["values"]) == point_key(dict(task.default))]
    assert again == ["launch_error", "ok"]
    retry = next(t for t in measured(store.load(task.key_id)) if t.user_attrs["status"] == "ok"
                 and point_key(t.user_attrs["values"]) == point_key(dict(task.default)))
    assert retry.user_attrs["retries"] == [failed.number] and retry.user_attrs["enqueued"] == "default"

    other = store.load(task.key_id)
    for status, build in (("launch_error", source_hash()), ("wrong", "an older build")):
        t = other.ask()
        for k, v in {"values": dict(task.default), "status": status, "env": {"source_hash": build}}.items():
            t.set_user_attr(k, v)
        other.tell(t, state=optuna.trial.TrialState.FAIL)
    assert enqueue_todays_answers(other, space, task, source_hash=source_hash()) == []



def _asked_then_finished_elsewhere(store, task, *, measured_there: bool):
    """A trial this worker asked for and is telling, finished by another worker holding its own
    handle on the store right after this worker's last attribute is written and before its tell:
    told with a measurement (two workers popped one waiting trial) or failed without one (this
    worker's heartbeat taken for dead)."""
    from emmy.search.study import _ask, conditional_space

    here = open_study(store, task)
    trial, point = _ask(store, here, conditional_space(task))
    there = store.load(task.key_id)
    own = trial.set_user_attr

    def set_user_attr(key, value):
        own(key, value)
        if key != "status":
            return
        if measured_there:
            store.storage.set_trial_user_attr(trial._trial_id, "status", "ok")
            there.tell(trial.number, 1e-3)
        else:
            there.tell(trial.number, state=optuna.trial.TrialState.FAIL)

    trial.set_user_attr = set_user_attr
    return here, trial, point


@pytest.mark.parametrize("measured_there", [True, False])
def test_a_trial_another_worker_finished_first_is_recorded_once(tasks, store, measured_there):
    """Optuna refuses to tell a trial finished before the tell with ValueError ("Cannot tell a
    COMPLETE trial"; UpdateFinishedTrialError only where it finishes during the tell): either way
    the worker goes on. Where the other worker measured the trial, that measurement stands; where
    it failed it unmeasured, this worker's measurement is kept as a trial of its own."""
    from emmy.search.study import _tell

    task = tasks[0]
    study, trial, point = _asked_then_finished_elsewhere(store, task, measured_there=measured_there)
    _tell(study, trial, point, Measurement(status="ok", time_s=2e-3, spread=0.01), {"card": "test"})
    trials = store.load(task.key_id).get_trials(deepcopy=False)
    retold = [t for t in trials if t.user_attrs.get("retold") == trial.number]
    if measured_there:
        assert retold == []
        assert next(t for t in trials if t.number == trial.number).value == 1e-3
    else:
        assert [t.value for t in retold] == [2e-3]
        assert retold[0].user_attrs["values"] == point

