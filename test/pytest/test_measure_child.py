"""Measuring in a child process with a deadline (emmy.measure.child), on CPU: fake measurers in
the child hang, die or fail to start, and the tuner's loop goes on with a failed trial."""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import optuna
import pytest

from emmy.diagnostics import EmmyError
from emmy.measure import Measurement
from emmy.measure.child import ChildMeasurer
from emmy.records import default_url, open_store
from emmy.search.cost import CostMeasurer
from emmy.search.study import Budget, measured, point_key, run_trials

optuna.logging.set_verbosity(optuna.logging.WARNING)

ROOT = Path(__file__).resolve().parents[2]
MODEL = f"{ROOT}/test/pytest/models/mlp_block.py:make"


class Fake:
    """Measures candidate {"n": i} as i microseconds; {"n": -1} never finishes, {"n": -2} kills
    its process. With `hang_before`, it hangs before the GPU (in its build, say) on every
    candidate."""

    def __init__(self, hang_before: bool = False):
        self.hang_before = hang_before

    def environment(self) -> dict[str, str]:
        return {"card": "fake", "pid": str(os.getpid())}

    def measure(self, task, candidates):
        out = []
        for c in candidates:
            if c["n"] == -1:
                time.sleep(3600)
            if c["n"] == -2:
                os._exit(3)
            out.append(Measurement("ok", time_s=c["n"] * 1e-6, spread=0.0, error=0.0))
        return out

    def measure_each(self, task, candidates, started=None):
        for i, c in enumerate(candidates):
            if self.hang_before:
                time.sleep(3600)
            started(i)
            yield self.measure(task, [c])[0]

    def remeasure(self, task, candidates, rounds, started=None):
        started(0)
        return self.measure(task, candidates)


def make_fake(hang_before: bool = False):
    return Fake(hang_before)


def make_failing():
    raise EmmyError("no GPU here", hint="try --measurer cost")


class HangsOnTheDefault(CostMeasurer):
    """The cost measurer, except that the task's default candidate never finishes."""

    def measure(self, task, candidates):
        if any(point_key(c) == point_key(task.default) for c in candidates):
            time.sleep(3600)
        return super().measure(task, candidates)


def make_hangs_on_the_default():
    return HangsOnTheDefault()


def test_a_candidate_past_its_deadline_is_a_timeout_and_the_next_is_measured():
    """The candidates after a timeout are left out (the caller's budget is looked at first); the
    next request goes to a fresh child."""
    with ChildMeasurer(make_fake, deadline_s=1.0) as m:
        pid = m.environment()["pid"]
        out = m.measure(None, [{"n": 1}, {"n": -1}, {"n": 3}])
        assert [x.status for x in out] == ["ok", "timeout"]
        assert out[0].time_s == 1e-6
        assert out[1].reason.startswith("timeout: the candidate was not checked and timed within 1 s")
        assert "replaced" in out[1].reason and len(m.replaced) == 1
        assert m.environment()["pid"] == pid  # (read once)
        # the fresh child measures on
        assert [(x.status, x.time_s) for x in m.measure(None, [{"n": 3}])] == [("ok", 3e-6)]


def test_a_child_that_dies_is_a_launch_error_and_is_replaced():
    with ChildMeasurer(make_fake, deadline_s=30.0) as m:
        out = m.measure(None, [{"n": -2}, {"n": 2}])
        assert [x.status for x in out] == ["launch_error", "ok"]
        assert "the measuring process died (exit code 3)" in out[0].reason


def test_a_child_that_died_idle_is_replaced_at_the_next_request():
    with ChildMeasurer(make_fake, deadline_s=30.0) as m:
        pid = int(m.environment()["pid"])
        os.kill(pid, 9)
        for _ in range(200):  # (until it is gone)
            if not m._proc.is_alive():
                break
            time.sleep(0.05)
        assert [x.status for x in m.measure(None, [{"n": 2}])] == ["ok"]
        assert m.replaced == ["the measuring process died (exit code -9) between candidates; it was replaced"]


def test_a_hang_before_the_gpu_fails_the_rest_of_the_request():
    """Past the preparing limit (a build, the reference, the GPU lock), every candidate left is
    a timeout: a fresh child would spend as long on each."""
    with ChildMeasurer(partial(make_fake, True), deadline_s=30.0, prepare_s=1.0) as m:
        out = m.measure(None, [{"n": 1}, {"n": 2}])
        assert [x.status for x in out] == ["timeout", "timeout"]
        assert "no answer within 1 s while building, computing the reference or waiting for the GPU" in out[0].reason
        assert len(m.replaced) == 1


def test_remeasure_past_its_deadline_is_a_timeout_for_each():
    with ChildMeasurer(make_fake, deadline_s=0.5) as m:
        out = m.remeasure(None, [{"n": 1}, {"n": -1}], rounds=3)
        assert [x.status for x in out] == ["timeout", "timeout"]
        assert [x.status for x in m.remeasure(None, [{"n": 1}, {"n": 2}], rounds=3)] == ["ok", "ok"]


def test_a_measurer_that_cannot_start_is_an_error():
    with ChildMeasurer(make_failing, deadline_s=5.0) as m:
        with pytest.raises(EmmyError, match="no GPU here") as e:
            m.environment()
        assert e.value.hint == "try --measurer cost"


def test_the_trial_loop_goes_on_past_a_hung_candidate(tmp_path):
    """The default candidate (the study's first trial) hangs in the measuring child: its trial
    is failed with status 'timeout' and its reason, the child is replaced, the rest of its
    batch is failed unmeasured (no status: not counted), the next trials are measured, and no
    trial is left running."""
    from emmy.driver import CompileOptions, compile_model
    from emmy.search.task import tasks_in
    from emmy.targets import get_target

    result = compile_model(CompileOptions(model=MODEL, tokens=16, target="sm_90", stop_after="tile"))
    task = tasks_in(result.module, get_target("sm_90"), 16)[0]
    store = open_store(default_url(tmp_path))
    with ChildMeasurer(make_hangs_on_the_default, deadline_s=2.0) as m:
        run_trials(store, task, m, Budget(trials=4), batch=2)
        assert len(m.replaced) == 1
    study = store.load(task.key_id)
    trials = measured(study)
    first = trials[0]
    assert point_key(first.user_attrs["values"]) == point_key(task.default)
    assert first.state == optuna.trial.TrialState.FAIL and first.user_attrs["status"] == "timeout"
    assert first.user_attrs["reason"].startswith("timeout: ")
    assert len(trials) == 4 and all(t.user_attrs["status"] in ("ok", "build_failed") for t in trials[1:])
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    (skipped,) = [t for t in study.trials if "status" not in t.user_attrs and t.state == optuna.trial.TrialState.FAIL]
    assert skipped.number == 1 and skipped.state == optuna.trial.TrialState.FAIL
    assert skipped.user_attrs["reason"] == "not measured: the measurer stopped this batch after a timeout"
