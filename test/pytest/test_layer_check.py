"""The layer check (emmy.search.layer_check, emmy.records.layer): the greedy revert with an
injected deterministic layer timer, the store round trip (record, list, export, import), the
local tier skipping a record that lost in its layer (with why in --explain), stale checks
reported, the `emmy tune --measurer cost` path, and its error messages. One GPU test times the
running example's layer for real."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from emmy.cli.main import run
from emmy.cli.report import run_guarded
from emmy.diagnostics import EmmyError
from emmy.measure.layer import LayerTime
from emmy.records import default_url, open_store
from emmy.records.layer import LAYER_ATTR, LAYER_SCHEMA, LayerCheck, Reverted, layer_checks, layer_signature, write_layer_check
from emmy.records.store import BEST_ATTR
from emmy.records.transfer import export_records, import_layers, import_records, read_export
from emmy.search.layer_check import Layer, LayerKernel, check_layer, faster, layer_line, layer_rows, LayerOutcome

optuna.logging.set_verbosity(optuna.logging.WARNING)

ROOT = Path(__file__).resolve().parents[2]
# the kernel cache the GPU test reads: EMMY_HOME as given to the run (the fixture below moves
# EMMY_HOME into each test's folder), where tools/prebuild_gpu_tests.py builds its kernels ahead
GIVEN_HOME = os.environ.get("EMMY_HOME")
MODEL = f"{ROOT}/test/pytest/models/mlp_block.py:make"
TUNE = ["tune", MODEL, "--tokens", "16", "--target", "sm_90", "--quiet", "--measurer", "cost", "--trials", "6"]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMMY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# --- the greedy revert, with a deterministic layer timer ----------------------------------------

A, B, C = "a", "b", "c"
TUNED = {A: {"x": 2}, B: {"x": 2}, C: {"x": 2}}
DEPLOY = {A: {"x": 1}, B: {"x": 1}, C: {"x": 1}}
LAYER = Layer("m", 0, 512, "sm_90a", tuple(LayerKernel(n, f"key-{n}", DEPLOY[n]) for n in (A, B, C)))


class Timer:
    """Each kernel 10 us at its deploy answer, 9 us at its tuned one (faster alone); `penalty`:
    extra us when all the named kernels are at their tuned answers together (an interaction);
    every set timed with `spread`. Records the rounds it timed."""

    def __init__(self, penalties=(), spread=0.01):
        self.penalties, self.spread, self.rounds = list(penalties), spread, []

    def environment(self):
        return {"card": "test card"}

    def cost(self, s):
        t = sum(9.0 if s[k]["x"] == 2 else 10.0 for k in s)
        t += sum(p for kernels, p in self.penalties if all(s[k]["x"] == 2 for k in kernels))
        return t * 1e-6

    def time(self, sets):
        self.rounds.append(sorted(sets))
        return {label: LayerTime(self.cost(s), self.spread, 0.0) for label, s in sets.items()}


def test_faster_needs_more_than_the_spread():
    assert faster(LayerTime(9e-6, 0.05), LayerTime(10e-6, 0.05))
    assert not faster(LayerTime(9.6e-6, 0.05), LayerTime(10e-6, 0.01))  # 4% faster, 5% spread
    assert not faster(LayerTime(None, problem="wrong"), LayerTime(10e-6, 0.0))


def test_a_faster_chosen_set_is_kept_whole():
    timer = Timer()
    v = check_layer(LAYER, TUNED, timer)
    assert v.reverted == {} and not v.problem
    assert v.final.time_s == pytest.approx(27e-6) and v.deploy.time_s == pytest.approx(30e-6)
    assert timer.rounds == [["deploy", "tuned"]]  # one round: nothing to search


def test_a_kernel_that_slows_the_layer_is_reverted():
    """b's tuned answer is faster alone but costs 5 us beside c's tuned answer: the layer is
    slower than the deploy set; reverting b (first in order whose revert helps) fixes it, and c
    stays tuned (reverting c after b gains nothing)."""
    timer = Timer(penalties=[((B, C), 5.0)])
    v = check_layer(LAYER, TUNED, timer)
    assert v.tuned.time_s == pytest.approx(32e-6) and v.deploy.time_s == pytest.approx(30e-6)
    assert list(v.reverted) == [B]
    assert v.reverted[B] == pytest.approx((32 - 28) / 32)
    assert v.final.time_s == pytest.approx(28e-6)
    # the first round, a revert tried per differing kernel, and a last round of all three sets
    assert timer.rounds[0] == ["deploy", "tuned"] and timer.rounds[-1] == ["deploy", "final", "tuned"]
    assert len(timer.rounds) == 1 + 3 + 1


def test_a_revert_within_the_spread_is_not_kept():
    timer = Timer(penalties=[((A, B, C), 3.5)], spread=0.2)  # 30.5 against 30 us: within 20%
    v = check_layer(LAYER, TUNED, timer)
    assert v.reverted == {} and len(timer.rounds) == 1


def test_kernels_of_one_key_are_reverted_together():
    """a and c share a key (the local tier answers them alike): reverting them is one step."""
    layer = Layer("m", 0, 512, "sm_90a", tuple(LayerKernel(n, "key-ac" if n != B else "key-b", DEPLOY[n])
                                               for n in (A, B, C)))
    timer = Timer(penalties=[((A, C), 7.0)])
    v = check_layer(layer, TUNED, timer)
    assert list(v.reverted) == [A] and v.final.time_s == pytest.approx(29e-6)
    assert len(timer.rounds) == 1 + 2 + 1


def test_several_kernels_reverted():
    timer = Timer(penalties=[((A,), 5.0), ((C,), 5.0)])
    v = check_layer(LAYER, TUNED, timer)
    assert list(v.reverted) == [A, C] and v.final.time_s == pytest.approx(29e-6)


def test_a_set_not_timed_is_a_problem_not_a_verdict():
    class Wrong(Timer):
        def time(self, sets):
            out = super().time(sets)
            out["tuned"] = LayerTime(None, error=0.5, problem="relative error 5.00e-01 over the allowed 1.0e-02")
            return out

    v = check_layer(LAYER, TUNED, Wrong())
    assert v.problem == "the chosen set was not timed: relative error 5.00e-01 over the allowed 1.0e-02"
    assert v.reverted == {}
    o = LayerOutcome(LAYER, v, v.problem, problem=True)
    assert layer_line(o) == f"layer 0 at 512 tokens: not checked: {v.problem}"
    assert layer_rows([o]) == []


def test_the_line_and_row():
    v = check_layer(LAYER, TUNED, Timer(penalties=[((B, C), 5.0)]))
    o = LayerOutcome(LAYER, v)
    assert layer_line(o) == ("layer 0 at 512 tokens: tuned 28.00 us +- 1.0%, untuned 30.00 us +- 1.0%: 1.07x; "
                             "the chosen set alone 32.00 us +- 1.0%; kept the deploy answer of b "
                             "(the layer 12% faster with it)")
    assert layer_rows([o]) == [("layer 0", "512 tokens", "-", "28.00 us +- 1.0% (1 reverted)",
                                "30.00 us +- 1.0%", "1.07x")]


# --- the store ----------------------------------------------------------------------------------


def _check(signature="s" * 24, reverted=None, tokens=512, **kw) -> LayerCheck:
    reverted = {"key-b": Reverted("b", {"x": 2}, {"x": 1}, 12.1e-6, 0.03)} if reverted is None else reverted
    return LayerCheck(signature=signature, target="sm_90", tokens=tokens, kernels={"a": "key-a", "b": "key-b"},
                      tuned_s=32e-6, tuned_spread=0.01, deploy_s=30e-6, deploy_spread=0.01, final_s=28e-6,
                      final_spread=0.01, reverted=reverted, model="m", layer=0, env={"card": "NVIDIA H200"},
                      date="2026-12-01T20:00:00Z", **kw)


def test_a_check_round_trips_through_the_store(tmp_path):
    store = open_store(default_url(tmp_path))
    write_layer_check(store, _check())
    assert store.study_names() == []  # a layer check is not a kernel's study
    assert store.layer_names() == ["emmy.layer." + "s" * 24]
    (back,) = layer_checks(store).values()
    assert back == _check()
    write_layer_check(store, _check(reverted={}))  # a newer check of the same layer replaces it
    assert list(layer_checks(store).values())[0].reverted == {}


def test_checks_are_exported_and_imported(tmp_path):
    a = open_store(default_url(tmp_path / "a"))
    write_layer_check(a, _check())
    data = read_export(json.dumps(export_records(a)), "f.json")
    assert data["layers"] == [{"name": "emmy.layer." + "s" * 24, "check": _check().to_json()}]
    b = open_store(default_url(tmp_path / "b"))
    assert import_records(b, data) == 0 and import_layers(b, data) == 1
    assert list(layer_checks(b).values()) == [_check()]
    write_layer_check(b, _check(reverted={}))
    assert import_layers(b, data) == 0  # never replaces the store's own check of that layer
    assert list(layer_checks(b).values())[0].reverted == {}


@pytest.mark.parametrize("layers, message", [
    ('"no"', 'f.json: "layers" must be a list'),
    ('[{"name": 1}]', 'f.json: layer 0: needs "name" (text) and "check" (object)'),
])
def test_bad_layers_in_an_export(layers, message):
    text = f'{{"format": "emmy-records", "schema": 1, "studies": [], "layers": {layers}}}'
    with pytest.raises(EmmyError) as e:
        read_export(text, "f.json")
    assert message in str(e.value)


def test_a_malformed_or_misnamed_check_imports_nothing(tmp_path):
    store = open_store(default_url(tmp_path))
    good = {"name": _check().study, "check": _check().to_json()}
    bad = {"name": "emmy.layer.x", "check": {"kernels": {}}}
    with pytest.raises(EmmyError, match="f.json: layer 1: a malformed layer check"):
        import_layers(store, {"layers": [good, bad]}, "f.json")
    misnamed = {"name": "emmy.layer.other", "check": _check().to_json()}
    with pytest.raises(EmmyError) as e:
        import_layers(store, {"layers": [good, misnamed]}, "f.json")
    assert f"f.json: layer 1: named 'emmy.layer.other', but its check is of {_check().study}" in str(e.value)
    assert store.layer_names() == []


def test_a_malformed_check_in_the_store_is_reported(tmp_path, capsys):
    store = open_store(default_url(tmp_path))
    study = optuna.create_study(study_name="emmy.layer.bad", storage=store.storage)
    study.set_user_attr(LAYER_ATTR, {"kernels": {"a": "k"}, "tokens": "many"})
    assert run_guarded(run, ["records", "list", "--storage", default_url(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"error: store {default_url(tmp_path)}: emmy.layer.bad: a malformed layer check" in err
    assert "Traceback" not in err


# --- emmy tune, and compiles reading the checks --------------------------------------------------


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A home whose store holds a cost run of the MLP block's layer, its records then marked as a
    GPU's (test data: the local tier never uses the cost measurer's)."""
    import os

    home = tmp_path_factory.mktemp("layer") / "home"
    before = os.environ.get("EMMY_HOME")
    os.environ["EMMY_HOME"] = str(home)
    try:
        assert run([*TUNE, "--layer", "0"]) == 0
    finally:
        if before is None:
            del os.environ["EMMY_HOME"]
        else:
            os.environ["EMMY_HOME"] = before
    store = open_store(default_url(home), create=False)
    for name in store.study_names():
        study = store.load(name)
        best = dict(study.user_attrs[BEST_ATTR])
        best["env"] = {**best["env"], "card": "NVIDIA H200 (test data)"}
        study.set_user_attr(BEST_ATTR, best)
    return home


def test_tune_checks_the_layer_with_the_cost_measurer(tuned, capsys):
    from emmy.search.cost import CARD

    store = open_store(default_url(tuned), create=False)
    (check,) = layer_checks(store).values()
    assert check.tokens == 16 and check.layer == 0 and check.env["card"] == CARD and not check.measured
    assert set(check.kernels) == {"layer_norm_fc1_gelu", "gelu_fc2_residual"}
    assert check.signature == layer_signature(check.kernels.values())
    assert check.reverted == {}  # a sum of costs: the tuned set is never slower
    assert check.final_s == check.tuned_s < check.deploy_s


def test_tune_prints_the_layer_line_and_row(home, capsys):
    assert run([*TUNE, "--layer", "0", "--trials", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].split()[:5] == ["layer", "0", "16", "tokens", "-"] and out[-2].endswith("x")
    assert run([*TUNE[:-1], "4", "--layer", "0"]) == 0  # more trials: continued, the layer checked again
    assert len(layer_checks(open_store(default_url(home), create=False))) == 1


def test_a_rerun_over_the_same_bests_recalls_the_check(home, capsys, monkeypatch):
    from emmy.search import layer_check

    assert run([*TUNE, "--layer", "0", "--trials", "3"]) == 0
    first = capsys.readouterr().out.splitlines()[-2]
    (check,) = layer_checks(open_store(default_url(home), create=False)).values()
    assert set(check.chosen) == {"layer_norm_fc1_gelu", "gelu_fc2_residual"}
    timed = []
    monkeypatch.setattr(layer_check.CostLayerTimer, "time", lambda self, sets: timed.append(sets) or {})
    argv = [a for a in TUNE if a != "--quiet"]
    assert run([*argv, "--layer", "0", "--trials", "3"]) == 0  # the same studies: the same bests
    captured = capsys.readouterr()
    assert timed == [] and captured.out.splitlines()[-2] == first
    assert "(recalled: the same tuned answers were checked before)" in captured.err
    assert layer_checks(open_store(default_url(home), create=False)) == {check.study: check}


def test_tune_line_goes_with_the_progress(home, capsys):
    argv = [a for a in TUNE if a != "--quiet"]
    assert run([*argv, "--layer", "0", "--trials", "3"]) == 0
    err = capsys.readouterr().err
    assert "layer 0 at 16 tokens: tuned " in err and ", untuned " in err


def test_a_kernel_subset_is_not_checked(home, capsys):
    extra = ["--layer", "0", "--kernel", "gelu_fc2_residual"]
    assert run([*[a for a in TUNE if a != "--quiet"], "--trials", "2", *extra]) == 0
    assert ("note: the layer check (the layer timed with all its tuned answers) skipped: --kernel tunes only "
            "some kernels") in capsys.readouterr().err
    assert run([*TUNE, "--trials", "2", *extra]) == 0
    assert "note:" not in capsys.readouterr().err  # --quiet: only the table
    assert layer_checks(open_store(default_url(home), create=False)) == {}


def test_a_whole_model_is_checked_as_a_whole(home, capsys):
    """Without --layer the model is timed as a whole and kept as one check per part (the MLP
    block is a factory: one part, `forward`, the same kernels as its layer)."""
    assert run([*TUNE, "--trials", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[-2].split()[:4] == ["model", "16", "tokens", "-"]
    (check,) = layer_checks(open_store(default_url(home), create=False)).values()
    assert check.layer is None and check.part == "forward" and check.tokens == 16


def test_a_set_not_timed_is_a_note_and_no_record(home, capsys, monkeypatch):
    from emmy.search import layer_check

    def wrong(self, sets):
        return {label: LayerTime(None, error=0.5, problem="relative error 5.00e-01 over the allowed 1.0e-02: not timed")
                for label in sets}

    monkeypatch.setattr(layer_check.CostLayerTimer, "time", wrong)
    assert run([*TUNE, "--trials", "3", "--layer", "0"]) == 0
    captured = capsys.readouterr()
    assert ("note: layer 0 at 16 tokens not checked: the chosen set was not timed: relative error 5.00e-01 over "
            "the allowed 1.0e-02: not timed") in captured.err
    assert "layer 0" not in captured.out  # no row
    assert layer_checks(open_store(default_url(home), create=False)) == {}


def test_a_layer_that_fails_to_time_is_an_error_not_a_traceback(home, capsys, monkeypatch):
    """Timing the layer raising (out of memory, a CUDA error) is the layer's note and exit status 1;
    the studies' trials stay in the store and nothing is recorded for the layer."""
    from emmy.search import layer_check

    def oom(self, sets):
        raise RuntimeError("CUDA out of memory. Tried to allocate 16.00 GiB")

    monkeypatch.setattr(layer_check.CostLayerTimer, "time", oom)
    assert run([*TUNE, "--trials", "3", "--layer", "0"]) == 1
    captured = capsys.readouterr()
    assert ("note: layer 0 at 16 tokens not checked: timing it failed: RuntimeError: CUDA out of memory. "
            "Tried to allocate 16.00 GiB") in captured.err
    assert "Traceback" not in captured.err
    store = open_store(default_url(home), create=False)
    assert layer_checks(store) == {} and store.study_names()
    assert all(store.load(n).trials for n in store.study_names())


def test_names_standing_for_several_keys_are_not_checked():
    parts = [LayerKernel("norm", "key-1", {"x": 1}, part="layer0"), LayerKernel("norm", "key-2", {"x": 1}, part="layer1")]
    layer = Layer("m", None, 512, "sm_90a", tuple(parts))
    assert layer.clash() == ("kernel norm is in several parts with different keys, and a set pins kernels by name "
                             "in every part alike")
    assert Layer("m", None, 512, "sm_90a", (parts[0], replace(parts[1], key="key-1"))).clash() == ""


def test_a_clash_is_a_note_in_the_run(home, capsys, monkeypatch):
    from emmy.search import layer_check

    parts = (LayerKernel("norm", "key-1", {"x": 1}, part="layer0"), LayerKernel("norm", "key-2", {"x": 1}, part="layer1"))
    monkeypatch.setattr(layer_check, "layer_of", lambda options, tokens, tasks=(): Layer("m", None, tokens, "sm_90",
                                                                                         parts))
    assert run([*TUNE, "--trials", "2"]) == 0
    assert ("note: model at 16 tokens not checked: kernel norm is in several parts with different keys, and a set "
            "pins kernels by name in every part alike") in capsys.readouterr().err
    assert layer_checks(open_store(default_url(home), create=False)) == {}


def test_a_model_check_is_kept_per_part():
    from emmy.search.layer_check import layer_records

    kernels = (LayerKernel(A, "key-a", DEPLOY[A], part="embed_tokens"), LayerKernel(B, "key-b", DEPLOY[B], part="layer0"),
               LayerKernel(C, "key-c", DEPLOY[C], part="layer0"))
    model = Layer("m", None, 512, "sm_90a", kernels)
    v = check_layer(model, TUNED, Timer(penalties=[((B, C), 5.0)]))
    records = layer_records(model, v, TUNED, {"key-b": 9e-6}, {"card": "test card"})
    assert [(r.part, dict(r.kernels)) for r in records] == [("embed_tokens", {A: "key-a"}),
                                                            ("layer0", {B: "key-b", C: "key-c"})]
    assert records[0].reverted == {} and list(records[1].reverted) == ["key-b"]
    assert records[1].signature == layer_signature(["key-b", "key-c"]) and records[1].final_s == v.final.time_s
    assert "the model at 512 tokens was 12% faster" in records[1].why("key-b")


def _lost_in_the_layer(home, tmp_path, deploy=None, **kw):
    """A copy of the tuned home whose check (made measured) says gelu_fc2_residual's tuned answer
    lost in the layer (`deploy`: the deploy answer it records, none by default)."""
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    store = open_store(default_url(copy), create=False)
    (check,) = layer_checks(store).values()
    key = check.kernels["gelu_fc2_residual"]
    best = store.load(key).user_attrs[BEST_ATTR]
    fields = check.to_json()
    fields.update(env={"card": "NVIDIA H200 (test data)"}, date="2026-12-01T20:00:00Z", **kw)
    fields["reverted"] = {key: {"kernel": "gelu_fc2_residual", "tuned": best["values"], "deploy": deploy or {},
                                "alone_s": 12.1e-6, "gain": 0.03}}
    from emmy.records.layer import write_layer_data

    write_layer_data(store, check.study, fields)
    return copy, store, key


def _explain(capsys, home, monkeypatch) -> str:
    monkeypatch.setenv("EMMY_HOME", str(home))
    assert run(["compile", MODEL, "--tokens", "16", "--target", "sm_90", "--explain"]) == 0
    return capsys.readouterr().out


def test_the_local_tier_skips_a_record_that_lost_in_its_layer(tuned, tmp_path, capsys, monkeypatch):
    copy, _, _ = _lost_in_the_layer(tuned, tmp_path)
    out = _explain(capsys, copy, monkeypatch)
    decisions = out.split("\n\n")[0].splitlines()[2:]
    by_kernel = {k: [r for r in decisions if r.split()[0] == k] for k in ("layer_norm_fc1_gelu", "gelu_fc2_residual")}
    assert by_kernel["layer_norm_fc1_gelu"] and all(" local " in r for r in by_kernel["layer_norm_fc1_gelu"])
    assert by_kernel["gelu_fc2_residual"] and not any(" local " in r for r in by_kernel["gelu_fc2_residual"])
    assert ("tuned alone 12.1 us, but the layer 0 at 16 tokens was 3% faster with the deploy answer "
            "(measured 2026-12-01T20:00:00Z, NVIDIA H200 (test data)") in out
    assert "its record lost in this layer's check" in out


def test_the_local_tier_answers_with_the_deploy_answer_the_layer_was_measured_with(tuned, tmp_path, capsys,
                                                                                    monkeypatch):
    """With the store on, the nearest tier could borrow another shape's record where the local one
    is skipped; the check's own deploy answer is what the layer was measured faster with."""
    from emmy.driver import CompileOptions
    from emmy.search.layer_check import layer_of

    layer = layer_of(CompileOptions(model=MODEL, layer=0, tokens=16, target="sm_90"), 16)
    deploy = layer.deploy()["gelu_fc2_residual"]
    copy, _, _ = _lost_in_the_layer(tuned, tmp_path, deploy=deploy)
    out = _explain(capsys, copy, monkeypatch)
    rows = [r for r in out.split("\n\n")[0].splitlines()[2:] if r.split()[0] == "gelu_fc2_residual"]
    assert rows and all(" local " in r and "the layer check kept the deploy answer: tuned alone 12.1 us" in r
                        for r in rows)
    assert {r.split()[1]: r.split()[2] for r in rows} == {k: str(v) for k, v in deploy.items()}
    assert "tuned alone 12.1 us, but the layer 0 at 16 tokens was 3% faster" in out.split("\n\n")[1]  # the skipped record


def test_a_check_of_other_tuned_values_is_stale(tuned, tmp_path, capsys, monkeypatch):
    copy, store, key = _lost_in_the_layer(tuned, tmp_path)
    study = store.load(key)
    best = dict(study.user_attrs[BEST_ATTR])
    old = dict(best["values"])
    best["values"] = {**old, next(iter(old)): "other"}
    # the check judged `old`; the study names another best now: the check is reported, not used
    check = store.study_attrs(layer_checks(store).popitem()[0])[LAYER_ATTR]
    check["reverted"][key]["tuned"] = {**old, "threads": -1}
    from emmy.records.layer import write_layer_data

    write_layer_data(store, "emmy.layer." + check["signature"], check)
    out = _explain(capsys, copy, monkeypatch)
    assert "stale layer check: it judged the tuned values" in out and "the study's best is now" in out
    decisions = out.split("\n\n")[0].splitlines()[2:]
    assert all(" local " in r for r in decisions if r.split()[0] in ("layer_norm_fc1_gelu", "gelu_fc2_residual"))


def test_a_check_of_a_newer_schema_is_reported(tuned, tmp_path, capsys, monkeypatch):
    copy, _, _ = _lost_in_the_layer(tuned, tmp_path, schema=LAYER_SCHEMA + 1)
    out = _explain(capsys, copy, monkeypatch)
    assert f"layer check of a newer Emmy (layer schema {LAYER_SCHEMA + 1}; this Emmy reads {LAYER_SCHEMA}" in out
    assert "tuned alone" not in out
    monkeypatch.setenv("EMMY_HOME", str(copy))
    assert run(["records", "list"]) == 0
    assert f"(layer schema {LAYER_SCHEMA + 1}: a newer Emmy's)" in capsys.readouterr().out


def test_a_check_of_another_space_version_is_stale(tuned, tmp_path, capsys, monkeypatch):
    copy, store, key = _lost_in_the_layer(tuned, tmp_path)
    name, check = layer_checks(store).popitem()
    old = {n: k.rsplit(":v", 1)[0] + ":v0" for n, k in check.kernels.items()}
    data = check.to_json()
    data["kernels"] = old
    data["signature"] = layer_signature(old.values())
    data["reverted"] = {old["gelu_fc2_residual"]: data["reverted"][key]}
    from emmy.records.layer import write_layer_data

    store.storage.delete_study(store.storage.get_study_id_from_name(name))
    write_layer_data(store, "emmy.layer." + data["signature"], data)
    out = _explain(capsys, copy, monkeypatch)
    assert "stale layer check: made under another space version" in out
    decisions = out.split("\n\n")[0].splitlines()[2:]
    assert all(" local " in r for r in decisions if r.split()[0] == "gelu_fc2_residual")


def test_a_cost_check_is_never_used(tuned, tmp_path, capsys, monkeypatch):
    from emmy.search.cost import CARD

    copy, store, key = _lost_in_the_layer(tuned, tmp_path)
    name, check = layer_checks(store).popitem()
    data = check.to_json()
    data["env"] = {"card": CARD}
    from emmy.records.layer import write_layer_data

    write_layer_data(store, name, data)
    out = _explain(capsys, copy, monkeypatch)
    assert "layer check not a measurement: made by the cost measurer" in out


def test_records_list_shows_the_checks(tuned, monkeypatch, capsys):
    monkeypatch.setenv("EMMY_HOME", str(tuned))
    assert run(["records", "list"]) == 0
    out = capsys.readouterr().out
    assert "layer checks (the layer timed with all its tuned answers):" in out
    (row,) = [line for line in out.splitlines() if line.startswith("emmy.layer.")]
    assert " 16 " in row and " sm_90 " in row and row.split()[-2] == "-"


def test_records_show_a_check(tuned, tmp_path, monkeypatch, capsys):
    copy, store, key = _lost_in_the_layer(tuned, tmp_path)
    name = store.layer_names()[0]
    monkeypatch.setenv("EMMY_HOME", str(copy))
    assert run(["records", "show", name[:16]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"layer check {name}"
    assert out[1].endswith("layer 0 at 16 tokens on sm_90, measured 2026-12-01T20:00:00Z on NVIDIA H200 (test data)")
    assert f"  gelu_fc2_residual ({key}): deploy answer kept: tuned alone 12.1 us" in "\n".join(out)
    assert any(line.startswith("  layer_norm_fc1_gelu (") and line.endswith("tuned answer kept") for line in out)
    assert run_guarded(run, ["records", "show", "emmy.layer.zzz"]) == 1
    err = capsys.readouterr().err
    assert f"error: no layer check 'emmy.layer.zzz' in {default_url(copy)}" in err and name in err


# --- on the GPU ---------------------------------------------------------------------------------


def gpu_layer_sets():
    """The GPU test's case: (model, tokens, target, layer, the kernel set to another answer, the
    sets timed: the deploy set and the set with that kernel's block_n changed). Also what
    tools/prebuild_gpu_tests.py builds ahead."""
    from emmy.driver import CompileOptions
    from emmy.search.layer_check import layer_of
    from emmy.search.task import tasks_of

    model, tokens, target = f"{ROOT}/tools/running_example.py:make", 64, "sm_90a"
    options = CompileOptions(model=model, layer=0, tokens=tokens, target=target)
    layer = layer_of(options, tokens, tasks_of(options, [tokens]))
    deploy = layer.deploy()
    k = next(k for k in layer.kernels if "block_n" in k.task.space)
    other = next(v for v in k.task.space["block_n"] if v != deploy[k.name]["block_n"])
    tuned = {**deploy, k.name: {**deploy[k.name], "block_n": other}}
    return model, tokens, target, layer, k, {"deploy": deploy, "tuned": tuned}


@pytest.mark.gpu
def test_the_running_example_layer_timed_on_the_gpu(tmp_path):
    """The running example at 64 tokens on the GPU: the deploy set and a set with one kernel at
    another answer, each checked against PyTorch and timed together (GpuLayerTimer); then the
    layer check over them, and its record."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from emmy.frontend import resolve_model, trace_layer
    from emmy.search.layer_check import GpuLayerTimer, layer_records

    model, tokens, target, layer, k, sets = gpu_layer_sets()
    timer = GpuLayerTimer(trace_layer(resolve_model(model), 0, tokens), target, Path(GIVEN_HOME or tmp_path))
    times = timer.time(sets)
    for t in times.values():
        assert t.time_s is not None and t.time_s > 0 and 0 <= t.spread and t.error < 1e-2, times
    v = check_layer(layer, sets["tuned"], timer)
    assert not v.problem and set(v.reverted) <= {k.name}
    (record,) = layer_records(layer, v, sets["tuned"], {}, timer.environment())
    assert record.env["card"] and record.final_s > 0 and record.signature == layer.signature


def test_a_set_compiles_as_its_pins_say():
    """What the GPU layer timer builds for a set (emmy.measure.layer.EmmyBuild with the set's
    pins) decides every kernel as the set says: the deploy set again, and a set with one kernel
    at another legal answer (compiled here to the tile stage; no GPU)."""
    from emmy.dialects.tile import KernelOp
    from emmy.driver import CompileOptions, compile_model
    from emmy.measure.layer import EmmyBuild
    from emmy.search.layer_check import layer_of, pins_of
    from emmy.search.task import tasks_of

    options = CompileOptions(model=MODEL, layer=0, tokens=16, target="sm_90")
    layer = layer_of(options, 16, tasks_of(options, [16]))
    deploy = layer.deploy()
    first = layer.kernels[0]
    other = next(v for v in first.task.space["block_n"] if v != deploy[first.name]["block_n"])
    changed = {**deploy, first.name: {**deploy[first.name], "block_n": other}}
    for s in (deploy, changed):
        build = EmmyBuild(pins=pins_of(s))
        module = compile_model(build.options(model=MODEL, layer=0, tokens=16, target="sm_90", stop_after="tile")).module
        decided = {k.kernel_name: {n: kn.value for n, kn in k.knob_dict().items() if kn.value is not None}
                   for k in module.walk() if isinstance(k, KernelOp)}
        assert decided == s


@pytest.mark.nvcc
def test_prepare_builds_the_cubins_before_the_gpu(tmp_path):
    """The CPU's part of a layer timer's set (compile and nvcc), done before it takes the GPU:
    the cubins are in the cache, where loading them later finds them (no GPU needed here)."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    from emmy.backend.run import cubin_path
    from emmy.frontend import resolve_model, trace_layer
    from emmy.measure.layer import EmmyBuild, LayerRuns, emmy_plan

    traced = trace_layer(resolve_model(f"{ROOT}/tools/running_example.py:make"), 0, 16)
    runs = LayerRuns(traced, "sm_90a", tmp_path)
    runs.prepare({"deploy": EmmyBuild(), "bad": EmmyBuild(pins=("no_such_kernel.block_m=64",))})  # a bad one is left
    plan, _ = emmy_plan(traced, "sm_90a", EmmyBuild())
    assert cubin_path(plan.source, "sm_90a", tmp_path).exists()
