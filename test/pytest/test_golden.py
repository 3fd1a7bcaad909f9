"""Golden files: their layout, `emmy golden check` (duplicates, staleness, legality) and promote.

The entries here are test data written into temporary folders (their times are made up and
never leave the test); the shipped golden files come from `emmy tune` on a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy.diagnostics import EmmyError
from emmy.golden.check import check_dir, model_tasks
from emmy.golden.schema import SCHEMA, read_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "tools/running_example.py:make"
TARGET = "sm_90a"


@pytest.fixture(scope="module")
def example_tasks():
    return model_tasks(ROOT)(EXAMPLE, None, 16, TARGET)


def entry_for(task, tokens=16, **changes) -> dict:
    e = {
        "key": task.key.id, "structure": task.key.structure, "shape": task.key.shape, "version": task.key.version,
        "model": EXAMPLE, "layer": None, "tokens": tokens, "kernel": task.kernel, "description": task.description,
        "values": dict(task.default), "time_s": 1.0e-5, "spread": 0.01, "alternatives": [],
        "card": "test data", "date": "2026-12-01T00:00:00Z",
    }
    e.update(changes)
    return e


def write(folder: Path, target: str, entries: list[dict], name: str = "example.json", schema: int = SCHEMA) -> Path:
    path = folder / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": schema, "target": target, "entries": entries}))
    return path


def messages(findings) -> str:
    return "\n".join(str(f) for f in findings)


def test_a_true_entry_passes(tmp_path, example_tasks):
    task = next(iter(example_tasks.values()))
    write(tmp_path, TARGET, [entry_for(task)])
    assert check_dir(tmp_path) == []


def test_duplicates_stale_and_illegal_entries_are_named(tmp_path, example_tasks):
    task = next(iter(example_tasks.values()))
    illegal = dict(task.default)
    knob = next(k for k, v in task.space.items() if len(v) > 1)
    illegal[knob] = "no such value"
    path = write(tmp_path, TARGET, [
        entry_for(task),
        entry_for(task),  # the same key again
        entry_for(task, key=task.key.id.replace(task.key.id[:4], "ffff"), kernel=task.kernel),  # a key the pipeline no longer gives
        entry_for(task, key="0" * 12 + ":00000000:sm_90a:v1", kernel="no_such_kernel"),
    ])
    write(tmp_path, TARGET, [entry_for(task, tokens=8, key="1" * 12 + ":11111111:sm_90a:v1", values=illegal)], name="other.json")
    text = messages(check_dir(tmp_path))
    assert f"{path}: entry 1 (kernel '{task.kernel}', 16 tokens): duplicate" in text
    assert "entry 2" in text and "stale: the key is now" in text
    assert "entry 3" in text and "no kernel 'no_such_kernel'" in text
    assert "other.json: entry 0" in text
    assert "stale" in text


def test_illegal_values_are_named(tmp_path, example_tasks):
    task = next(iter(example_tasks.values()))
    knob = next(k for k, v in task.space.items() if len(v) > 1)
    bad = {**task.default, knob: "no such value"}
    write(tmp_path, TARGET, [entry_for(task, values=bad)])
    text = messages(check_dir(tmp_path))
    assert f"values: illegal on {TARGET}" in text and knob in text


def test_wrong_folder_and_target(tmp_path, example_tasks):
    task = next(iter(example_tasks.values()))
    write(tmp_path, "sm_80", [entry_for(task)])
    (tmp_path / "sm_80" / "example.json").rename(tmp_path / "sm_80" / "moved.json")
    data = json.loads((tmp_path / "sm_80" / "moved.json").read_text())
    data["target"] = TARGET
    (tmp_path / "sm_80" / "moved.json").write_text(json.dumps(data))
    text = messages(check_dir(tmp_path))
    assert "lies in the folder for sm_80" in text


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{not json", ":1:2: not JSON"),
        ('{"schema": 99, "target": "sm_90a", "entries": []}', "written by a newer Emmy (schema 99"),
        ('{"schema": 1, "target": "sm_90a", "entries": {}}', "'entries' must be a list"),
        ('{"schema": 1, "target": "sm_90a", "entries": [{"kernel": "k"}]}', "entry 0 (kernel 'k'): 'key' is missing"),
        ('[]', "a golden file is a JSON object"),
    ],
)
def test_layout_problems_name_the_file(tmp_path, text, fragment):
    path = tmp_path / "sm_90a" / "bad.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(EmmyError) as e:
        read_file(path)
    assert str(path) in str(e.value) and fragment in str(e.value)
    findings = check_dir(tmp_path, compile_tasks=lambda *a: {})
    assert len(findings) == 1 and fragment in str(findings[0])


@pytest.mark.parametrize("changes, message", [
    ({"time_s": "fast"}, "'time_s' must be a number, not \"fast\""),
    ({"tokens": True}, "'tokens' must be an integer, not true"),
    ({"layer": -1}, "'layer' must be a layer number or null, not -1"),
    ({"tokens": 0}, "'tokens' must be at least 1"),
    ({"time_s": 0}, "'time_s' must be positive and 'spread' not negative"),
    ({"spread": -0.1}, "'time_s' must be positive and 'spread' not negative"),
    ({"values": {}}, "'values' must map knob names to values"),
    ({"values": {"block_m": 1.5}}, "'values': knob 'block_m' must be an integer or a string, not 1.5"),
    ({"alternatives": {}}, "'alternatives' must be a list"),
    ({"alternatives": [{"time_s": 1e-5}]}, "alternative 0: an alternative is an object with 'values' and 'time_s'"),
    ({"alternatives": [{"values": {"block_m": 64}, "time_s": -1}]}, "alternative 0: 'time_s' must be a number, not -1"),
    ({"card": 7}, "'card' must be a string"),
])
def test_entry_fields_are_checked(tmp_path, example_tasks, changes, message):
    """Each field of an entry is checked as the file is read; the message names the file, the
    entry and its kernel, and check reports it as one finding."""
    task = next(iter(example_tasks.values()))
    path = write(tmp_path, TARGET, [entry_for(task, **changes)])
    (f,) = check_dir(tmp_path, compile_tasks=lambda *a: {})
    assert str(path) in str(f) and f"entry 0 (kernel '{task.kernel}')" in str(f) and message in str(f)


def test_cli_check_exit_codes(tmp_path, example_tasks):
    from cli_helpers import assert_user_error, emmy

    task = next(iter(example_tasks.values()))
    write(tmp_path, TARGET, [entry_for(task), entry_for(task)])
    proc = emmy("golden", "check", str(tmp_path), cwd=ROOT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "duplicate" in proc.stderr and "1 problem(s)" in proc.stderr
    assert_user_error(emmy("golden", "check", str(tmp_path / "missing")), "no such golden folder")
    (tmp_path / "empty" / TARGET).mkdir(parents=True)
    empty = emmy("golden", "check", str(tmp_path / "empty"), cwd=ROOT)
    assert empty.returncode == 0 and "nothing to check: no golden files" in empty.stdout
    assert_user_error(emmy("golden", "frobnicate"), "unknown action 'frobnicate'", "check, promote")
    assert_user_error(emmy("golden", "promote"), "emmy golden promote: give the MODEL that was tuned")
    assert_user_error(emmy("golden", "promote", EXAMPLE, env={"EMMY_HOME": str(tmp_path / "home")}), "give --tokens")
    assert_user_error(emmy("golden", "promote", EXAMPLE, "--tokens", "16", "--target", TARGET,
                           env={"EMMY_HOME": str(tmp_path / "home")}), "there is no store")


def test_shipped_golden_files_are_true():
    """What CI checks: every shipped golden file against the pipeline as it is now."""
    assert messages(check_dir(ROOT / "golden")) == ""


def test_cost_measurer_entries_are_not_golden(tmp_path, example_tasks):
    """Golden files hold measurements: an entry the cost measurer wrote fails the check."""
    task = next(iter(example_tasks.values()))
    write(tmp_path, TARGET, [entry_for(task, card="cost model (no GPU)")])
    (f,) = check_dir(tmp_path)
    assert "entry 0" in str(f) and "not a measurement: written by the cost measurer" in str(f)


def test_promote_refuses_the_cost_measurers_records(tmp_path):
    from cli_helpers import assert_user_error, emmy

    env = {"EMMY_HOME": str(tmp_path / "home")}
    tuned = emmy("tune", EXAMPLE, "--tokens", "16", "--target", "sm_80", "--trials", "3", "--measurer", "cost",
                 "--quiet", env=env, cwd=ROOT)
    assert tuned.returncode == 0, tuned.stderr
    proc = emmy("golden", "promote", EXAMPLE, "--tokens", "16", "--target", "sm_80", "--out",
                str(tmp_path / "g" / "sm_80" / "x.json"), env=env, cwd=ROOT)
    assert_user_error(proc, "nothing to promote", "(only the cost measurer's record: not a measurement)")
    assert not (tmp_path / "g").exists()


def test_promote_needs_the_rules_answer_measured(tmp_path):
    """A study that never measured the hand-written rules' answer (its default came from
    elsewhere, and the run stopped before the rules' turn) is no golden entry yet: without it
    deploy mode runs the rules' answer, which the study's best was never compared with."""
    from dataclasses import replace

    from emmy.driver import CompileOptions, compile_model
    from emmy.golden.promote import rules_unmeasured
    from emmy.prior.choose import rules_anchor
    from emmy.records import default_url, open_store
    from emmy.search.cost import CostMeasurer
    from emmy.search.points import point_key
    from emmy.search.study import Budget, conditional_space, run_trials
    from emmy.search.task import tasks_in
    from emmy.targets import get_target

    target = "sm_90"
    module = compile_model(CompileOptions(model=f"{ROOT}/test/pytest/models/mlp_block.py:make", tokens=16,
                                          target=target, stop_after="tile")).module
    task = tasks_in(module, get_target(target), 16)[0]
    rules = rules_anchor(task.info(), get_target(target), dict(task.space))
    other = next(p for p in reversed(conditional_space(task).neighbours(dict(task.default), 60))
                 if point_key(p) != point_key(rules))
    elsewhere = replace(task, default=other)  # a default from a golden entry, say
    store = open_store(default_url(tmp_path))
    run_trials(store, elsewhere, CostMeasurer(), Budget(trials=1), seed=0)  # the default alone
    assert rules_unmeasured(store, elsewhere)
    run_trials(store, elsewhere, CostMeasurer(), Budget(trials=1), seed=0)  # today's answers, past the budget
    assert not rules_unmeasured(store, elsewhere)


def test_carry_over_adds_a_new_knob_at_its_off_value(tmp_path, example_tasks):
    """An entry stale only because its kernel gained a knob gets today's key and the knob's off
    value (the program it measured); entries stale for other reasons stay for check to name."""
    from emmy.golden.migrate import carry_over
    from emmy.tuning.knobs import FEATURE_OFF

    task = next(t for t in example_tasks.values() if "epilogue" in t.space)
    before = {k: v for k, v in task.default.items() if k != "epilogue"}
    old = "f" * 12 + task.key.id[12:]
    alternative = {"values": dict(before), "time_s": 2.0e-5, "spread": 0.02}
    no_block_m = {k: v for k, v in before.items() if k != "block_m"}
    path = write(tmp_path, TARGET, [
        entry_for(task, key=old, structure="f" * 64, values=before, alternatives=[alternative]),
        entry_for(task, tokens=8, key="e" * 12 + task.key.id[12:], values=no_block_m),  # no off value for block_m
        entry_for(task, tokens=4, key="d" * 12 + task.key.id[12:], values=before, description="another body"),
    ])
    changed, notes = carry_over(tmp_path, compile_tasks=lambda *a: example_tasks)
    assert changed == [path] and len(notes) == 1 and f"-> {task.key.id} (epilogue={FEATURE_OFF['epilogue']})" in notes[0]
    carried = next(e for e in read_file(path).entries if e.tokens == 16)
    assert carried.key == task.key.id and carried.structure == task.key.structure
    assert dict(carried.values) == {**before, "epilogue": FEATURE_OFF["epilogue"]}
    assert list(carried.values) == list(task.space)  # in the kernel's knob order
    assert dict(carried.alternatives[0].values) == dict(carried.values) and carried.alternatives[0].time_s == 2.0e-5
    text = messages(check_dir(tmp_path, compile_tasks=lambda *a: example_tasks))
    assert "16 tokens" not in text  # the carried entry checks out
    assert text.count("stale: the key is now") == 2


def test_carry_over_follows_a_grown_domain(tmp_path, example_tasks):
    """A domain that gained values (block_m 192) changes the keys; an entry whose values are all
    in today's domains is carried over with its values as they are (an alternative that is not
    is left out, and the note says so); one holding a value no longer in its domain is left for
    check to name."""
    from emmy.golden.migrate import carry_over

    task = next(t for t in example_tasks.values() if "block_m" in t.space)
    values = dict(task.default)
    old = "f" * 12 + task.key.id[12:]
    kept = {"values": {**values, "block_m": 32}, "time_s": 1.2e-5, "spread": 0.02}
    gone = {"values": {**values, "block_m": 48}, "time_s": 1.3e-5, "spread": 0.02}
    path = write(tmp_path, TARGET, [
        entry_for(task, key=old, structure="f" * 64, values=values, alternatives=[gone, kept]),
        entry_for(task, tokens=8, key="e" * 12 + task.key.id[12:], values={**values, "block_m": 48}),
    ])
    changed, notes = carry_over(tmp_path, compile_tasks=lambda *a: example_tasks)
    assert changed == [path] and len(notes) == 1
    assert f"-> {task.key.id} (1 alternative outside today's space left out)" in notes[0]
    carried = next(e for e in read_file(path).entries if e.tokens == 16)
    assert carried.key == task.key.id and dict(carried.values) == values
    assert [dict(a.values) for a in carried.alternatives] == [{**values, "block_m": 32}]
    text = messages(check_dir(tmp_path, compile_tasks=lambda *a: example_tasks))
    assert "16 tokens" not in text and text.count("stale: the key is now") == 1


def test_carry_over_drops_a_named_no_op_knob(tmp_path, example_tasks):
    """A knob taken out of a kernel's space as a no-op changes its keys; only the knobs named as
    dropped are carried over (left out of the values and alternatives, an alternative that
    becomes the same program merged), any other extra knob leaves the entry for check to name."""
    from emmy.golden.migrate import carry_over

    task = next(t for t in example_tasks.values() if "block_m" in t.space)
    values = dict(task.default)
    old = "f" * 12 + task.key.id[12:]
    twin = {"values": {**values, "retired": "b"}, "time_s": 1.1e-5, "spread": 0.02}
    other = {"values": {**values, "block_m": 32, "retired": "a"}, "time_s": 1.2e-5, "spread": 0.02}
    path = write(tmp_path, TARGET, [
        entry_for(task, key=old, structure="f" * 64, values={**values, "retired": "a"}, alternatives=[twin, other]),
        entry_for(task, tokens=8, key="e" * 12 + task.key.id[12:], values={**values, "unknown": 1}),
    ])
    assert carry_over(tmp_path, compile_tasks=lambda *a: example_tasks) == ([], [])  # nothing named: nothing carried
    changed, notes = carry_over(tmp_path, compile_tasks=lambda *a: example_tasks, dropped=["retired"])
    assert changed == [path] and len(notes) == 1
    assert f"-> {task.key.id} (retired dropped, 1 alternative merged)" in notes[0]
    carried = next(e for e in read_file(path).entries if e.tokens == 16)
    assert carried.key == task.key.id and dict(carried.values) == values and carried.time_s == 1.0e-5
    assert [dict(a.values) for a in carried.alternatives] == [{**values, "block_m": 32}]
    text = messages(check_dir(tmp_path, compile_tasks=lambda *a: example_tasks))
    assert "16 tokens" not in text and text.count("stale: the key is now") == 1


def test_a_promotion_keeps_an_entrys_first_token_count():
    """A weight-folding kernel has one key at every token count: promoting it again at 4096 tokens
    replaces its entry's measurement but keeps the file listing it at 1 token (the entry numbers
    of the ones between stay), while a new key keeps its own count."""
    from dataclasses import replace

    from emmy.golden.promote import merge

    old = read_file(ROOT / "golden" / TARGET / "qwen3-embedding-0.6b.json").entries
    weights = next(e for e in old if e.kernel.endswith("_weights"))
    assert weights.tokens == 1
    again = replace(weights, tokens=4096, time_s=weights.time_s * 0.9)
    other = replace(old[-1], key="0" * 12 + ":00000000:sm_90a:v1", tokens=2048)
    merged = merge(old, [again, other])
    assert len(merged) == len(old) + 1
    kept = next(e for e in merged if e.key == weights.key)
    assert (kept.tokens, kept.time_s) == (1, again.time_s)
    assert next(e for e in merged if e.key == other.key).tokens == 2048
