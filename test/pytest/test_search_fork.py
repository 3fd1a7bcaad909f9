"""Structural forks in a tuning study (emmy.search.study, `emmy.tuning.knobs.STRUCTURAL`): every
branch of the `fusion` fork (fused, split) is measured even with a small budget, keeps its share
of the trials, is re-measured at its own best beside the others, and the named best is the
faster branch's best; the record keeps each branch's time, round-trips through export/import and
`emmy records show` prints it. The deterministic cost measurer stands in for the GPU."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from emmy.diagnostics import EmmyError
from emmy.driver import CompileOptions, compile_model
from emmy.measure import Measurement
from emmy.records import best_record, default_url, open_store
from emmy.records.store import BEST_ATTR
from emmy.records.transfer import export_records, import_records
from emmy.search.cost import CostMeasurer
from emmy.search.best import name_best
from emmy.search.study import (
    FORK_SHARE, Budget, _Fork, branch_of, conditional_space, fork_knobs, fork_siblings, measured, nearest, open_study, point_key, run_trials, task_fork_knobs,
)
from emmy.search.task import tasks_in
from emmy.search.tune import fork_notes, outcome_notes, tune
from emmy.schedule.space import ConditionalSpace
from emmy.targets import get_target
from emmy.tuning.legality import check

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage")

ROOT = Path(__file__).resolve().parents[2]
MODEL = f"{ROOT}/test/pytest/models/mlp_block.py:make"
TARGET = "sm_90"


@pytest.fixture(scope="module")
def task():
    """The MLP block's first kernel (layer norm, fc1, gelu): a contraction with a prologue
    reduction, so its space has the `fusion` fork."""
    result = compile_model(CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile"))
    task = tasks_in(result.module, get_target(TARGET), 16)[0]
    assert fork_knobs(task.space) == ("fusion",)
    return task


def test_a_fork_must_change_what_runs():
    """`fusion` is a fork of the kernel with a prologue reduction (split launches its row
    statistics apart) at its default; where the default splits k, the statistics have a launch
    of their own either way, so its two values launch the same kernels: no trials are spent
    keeping shares there. The epilogue fusion (fc2 into the residual add) has no row statistics
    and no `fusion` knob at all."""
    import dataclasses

    result = compile_model(CompileOptions(model=MODEL, tokens=16, target=TARGET, stop_after="tile"))
    tasks = {t.kernel: t for t in tasks_in(result.module, get_target(TARGET), 16)}
    norm = tasks["layer_norm_fc1_gelu"]
    assert fork_knobs(norm.space) == task_fork_knobs(norm) == ("fusion",)
    split_k = {**norm.default, "split_k": 2, "block_k": 64}
    assert not check(norm.info(), split_k, get_target(TARGET))
    assert task_fork_knobs(dataclasses.replace(norm, default=split_k)) == ()
    assert "fusion" not in tasks["gelu_fc2_residual"].space and task_fork_knobs(tasks["gelu_fc2_residual"]) == ()


@pytest.fixture
def store(tmp_path):
    return open_store(default_url(tmp_path))


def _branches(study) -> list[str]:
    return [t.user_attrs["values"]["fusion"] for t in measured(study)]


class _Faster(CostMeasurer):
    """The cost measurer with one branch `factor` times faster (measured and re-measured
    alike)."""

    def __init__(self, fast: str, factor: float = 3.0):
        super().__init__(fail_every=10**9)  # (none fails)
        object.__setattr__(self, "fast", fast)
        object.__setattr__(self, "factor", factor)
        object.__setattr__(self, "timed", [])

    def measure(self, task, candidates):
        out = []
        for c, m in zip(candidates, super().measure(task, candidates)):
            if m.ok and c["fusion"] == self.fast:
                m = Measurement(m.status, time_s=m.time_s / self.factor, spread=m.spread, error=m.error, facts=m.facts)
            out.append(m)
        return out

    def remeasure(self, task, candidates, rounds):
        self.timed.append([dict(c) for c in candidates])
        return self.measure(task, candidates)


def test_only_fusion_is_structural():
    from emmy.tuning.knobs import STRUCTURAL

    assert STRUCTURAL == ("fusion",)
    assert fork_knobs({"fusion": ("fused", "split"), "block_m": (16, 32)}) == ("fusion",)
    assert fork_knobs({"fusion": ("fused",), "block_m": (16, 32)}) == ()
    assert branch_of({"fusion": "split", "block_m": 16}, ("fusion",)) == "split"


def test_nearest_keeps_the_fixed_values_and_changes_the_fewest_knobs():
    points = [{"a": a, "b": b, "f": f} for a in (1, 2, 4) for b in (1, 2) for f in ("x", "y")
              if not (f == "y" and a == 1)]
    space = ConditionalSpace(points, ("a", "f", "b"))
    here = {"a": 1, "b": 2, "f": "x"}
    assert nearest(space, here, {"f": "x"}) == here
    assert nearest(space, here, {"f": "y"}) == {"a": 2, "f": "y", "b": 2}  # a one step, b kept
    taken = {point_key({"a": 2, "f": "y", "b": 2})}
    assert nearest(space, here, {"f": "y"}, taken) == {"a": 4, "f": "y", "b": 2}  # one knob changed (two steps)
    taken.add(point_key({"a": 4, "f": "y", "b": 2}))
    assert nearest(space, here, {"f": "y"}, taken) == {"a": 2, "f": "y", "b": 1}  # then two knobs, fewest steps
    every_y = {point_key(p) for p in points if p["f"] == "y"}
    assert nearest(space, here, {"f": "y"}, every_y) is None
    assert nearest(space, here, {"f": "z"}) is None


def test_the_default_on_each_branch_is_among_the_first_trials(task, store):
    space = conditional_space(task)
    siblings = fork_siblings(space, dict(task.default))
    assert [s["fusion"] for s in siblings] == ["split"] and task.default["fusion"] == "fused"
    assert check(task.info(), siblings[0], get_target(TARGET)) == []
    assert nearest(space, dict(task.default), {"fusion": "split"}) == siblings[0]
    study = open_study(store, task)
    waiting = [{k.partition("|")[0]: v for k, v in t.system_attrs["fixed_params"].items()}
               for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]
    assert waiting[0] == dict(task.default) and siblings[0] in waiting


def test_a_draw_past_its_branchs_share_is_moved_to_the_starved_branch(task, store):
    """Six fused trials measured: a sampler's fused draw is pruned (reason "moved to split") and
    the nearest unmeasured split point is enqueued in its place; a split draw stays."""
    space = conditional_space(task)
    study = optuna.create_study(study_name=task.key_id, storage=store.storage)  # (no first trials here)
    fused = [p for p in [dict(task.default), *space.neighbours(dict(task.default), 20)] if p["fusion"] == "fused"][:6]
    for p in fused:
        study.add_trial(optuna.trial.create_trial(value=1e-5, user_attrs={"values": p, "status": "ok"}))
    fork = _Fork(space)
    trial = study.ask()
    draw = dict(fused[0])
    trial.set_user_attr("values", draw)
    assert fork.move(store, study, trial, draw)
    now = study.get_trials()[trial.number]
    assert now.state == optuna.trial.TrialState.PRUNED and now.user_attrs["reason"] == "moved to split (0 of 6 trials there)"
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    moved = {k.partition("|")[0]: v for k, v in waiting[-1].system_attrs["fixed_params"].items()}
    assert waiting[-1].user_attrs["enqueued"] == "fork" and moved == nearest(space, draw, {"fusion": "split"})
    split = study.ask()
    point = dict(moved)
    split.set_user_attr("values", point)
    assert not fork.move(store, study, split, point)  # (an enqueued point is never moved; and it is on split)


def test_both_branches_get_their_share_with_a_small_budget(task, store):
    """Split ten times slower: TPE alone spends 3 of 16 trials on it (the default's sibling and
    two draws); the fork's share keeps at least a third there."""
    budget = 16
    run_trials(store, task, _Faster("fused", factor=10.0), Budget(trials=budget))
    branches = _branches(store.load(task.key_id))
    assert len(branches) == budget
    for b in ("fused", "split"):
        assert branches.count(b) >= int(FORK_SHARE / 2 * budget), branches
    points = [point_key(t.user_attrs["values"]) for t in measured(store.load(task.key_id))]
    assert len(set(points)) == len(points)


@pytest.mark.parametrize("fast", ["fused", "split"])
def test_the_named_best_is_the_faster_branchs_best(task, store, fast):
    measurer = _Faster(fast)
    run_trials(store, task, measurer, Budget(trials=10))
    best = name_best(store, task, measurer)
    slow = {"fused": "split", "split": "fused"}[fast]
    assert best.values["fusion"] == fast and best.fork_knobs == ("fusion",)
    assert set(best.fork) == {"fused", "split"}
    assert best.fork[fast]["trial"] == best.trial and best.fork[fast]["time_s"] == best.time_s
    assert best.fork[slow]["time_s"] > best.time_s and best.fork[slow]["values"]["fusion"] == slow
    # each branch's fastest trial was re-measured in the same rounds as the others
    trials = measured(store.load(task.key_id))
    for b in ("fused", "split"):
        fastest = min((t for t in trials if t.value is not None and t.user_attrs["values"]["fusion"] == b),
                      key=lambda t: t.value)
        assert fastest.user_attrs["values"] in measurer.timed[0]
        assert best.fork[b]["trial"] == fastest.number
    again = name_best(store, task, measurer)
    assert again.recalled and again.fork == best.fork and len(measurer.timed) == 1


def test_the_fork_round_trips_through_the_store_export_and_import(task, store, tmp_path):
    run_trials(store, task, _Faster("split"), Budget(trials=8))
    best = name_best(store, task, _Faster("split"))
    rec = best_record(store, task.key)
    assert rec.fork == best.fork and rec.fork_knobs == ("fusion",)
    other = open_store(default_url(tmp_path / "other"))
    import_records(other, export_records(store))
    assert best_record(other, task.key).fork == best.fork
    assert best_record(other, task.key).fork_knobs == ("fusion",)


def test_records_show_prints_each_branch(task, store, tmp_path, monkeypatch, capsys):
    from emmy.cli.main import run

    run_trials(store, task, _Faster("split"), Budget(trials=8))
    best = name_best(store, task, _Faster("split"))
    monkeypatch.setenv("EMMY_HOME", str(tmp_path))
    assert run(["records", "show", task.key_id]) == 0
    out = capsys.readouterr().out
    assert "fork fusion: each branch's best, re-measured in the same rounds as the best" in out
    split, fused = best.fork["split"], best.fork["fused"]
    assert (f"  split: trial {split['trial']}, {split['time_s'] * 1e6:.2f} us "
            f"+- {split['spread'] * 100:.1f}% (the best)") in out.splitlines()
    assert f"  fused: trial {fused['trial']}, {fused['time_s'] * 1e6:.2f} us" in out


def test_a_malformed_fork_is_reported(task, store):
    run_trials(store, task, CostMeasurer(), Budget(trials=4))
    name_best(store, task, CostMeasurer())
    study = store.load(task.key_id)
    for bad, why in (("x", "fork: not a map of branch -> its best"),
                     ({"split": {"time_s": "fast"}}, "fork: branch split: time_s 'fast' is not a number")):
        study.set_user_attr(BEST_ATTR, {**study.user_attrs[BEST_ATTR], "fork": bad})
        with pytest.raises(EmmyError, match="its recorded best is malformed") as e:
            best_record(store, task.key)
        assert why in str(e.value)


def test_the_run_says_each_branch_at_its_best(task, store):
    import io

    log = io.StringIO()
    outcomes, _ = tune([task], store, Budget(trials=6), "cost", workers=1, progress=None, log=log)
    best = outcomes[0].best
    assert set(best.fork) == {"fused", "split"}
    assert " [fusion: fused " in log.getvalue() and " / split " in log.getvalue()
    assert outcome_notes(outcomes, 60.0) == []
    notes = fork_notes(outcomes)
    assert len(notes) == 1 and notes[0].startswith(f"{task.kernel} ({task.key_id}): fusion fork, each branch at its "
                                                   "own best re-measured in the same rounds: fused ")
    assert notes[0].endswith(f"; chosen: {best.values['fusion']}")


@pytest.mark.gpu
def test_the_fusion_fork_measured_on_the_gpu(tmp_path):
    """On a CUDA device (sm_90a): a short study of the MLP block's first kernel measures the
    fused and the split kernels, re-measures each at its best in the same interleaved rounds,
    and names the faster; the record keeps both times."""
    import os

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    result = compile_model(CompileOptions(model=MODEL, tokens=512, target="sm_90a", stop_after="tile"))
    task = tasks_in(result.module, get_target("sm_90a"), 512)[0]
    store = open_store(default_url(tmp_path))
    home = Path(os.environ["EMMY_HOME"]) if os.environ.get("EMMY_HOME") else tmp_path
    outcomes, problems = tune([task], store, Budget(trials=12), "gpu", progress=None, cache_dir=home)
    assert problems == []
    best = outcomes[0].best
    assert best is not None and set(best.fork) == {"fused", "split"}, best
    times = {b: v["time_s"] for b, v in best.fork.items()}
    assert all(t is not None and t > 0 for t in times.values()), best.fork
    assert best.fork[best.values["fusion"]]["trial"] == best.trial or best.kept
    assert best_record(store, task.key).fork == best.fork
