"""The tuning store (emmy.records): its schema marker, bad stores reported and never rewritten,
records read back, export and import."""

from __future__ import annotations

import json

import optuna
import pytest

from emmy.diagnostics import EmmyError
from emmy.records import SCHEMA, best_record, default_url, open_store
from emmy.records.store import BEST_ATTR, KERNEL_ATTR, KEY_ATTR, META_STUDY, store_exists
from emmy.records.transfer import export_records, import_records, read_export

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _url(tmp_path) -> str:
    return default_url(tmp_path)


def _study_with_best(store, name="k" * 16, values=None):
    """A study laid out as emmy.search.study writes one: two measured trials and a best."""
    values = values or {"threads": 256, "vector": 8}
    study = optuna.create_study(study_name=name, storage=store.storage, direction="minimize")
    study.set_user_attr(KEY_ATTR, {"id": name, "target": "sm_90", "structure_id": "s", "shape": "[4, 8]",
                                   "structure": "...", "version": 1})
    study.set_user_attr(KERNEL_ATTR, "add_kernel")
    dist = optuna.distributions.CategoricalDistribution([64, 128, 256])
    for i, (t, status) in enumerate([(2e-5, "ok"), (None, "build_failed")]):
        state = optuna.trial.TrialState.COMPLETE if t else optuna.trial.TrialState.FAIL
        study.add_trial(optuna.trial.create_trial(
            state=state, value=t, params={"threads": [256, 64][i]}, distributions={"threads": dist},
            user_attrs={"values": {**values, "threads": [256, 64][i]}, "status": status, "time_s": t,
                        "uid": f"u{i}", "env": {"card": "NVIDIA H200"}}))
    study.set_user_attr(BEST_ATTR, {"trial": 0, "values": values, "time_s": 2e-5, "spread": 0.02, "error": 0.0,
                                    "env": {"card": "NVIDIA H200", "driver": "570", "cuda": "12.8", "torch": "2.13",
                                            "emmy": "0.1.0", "source_hash": "abc"},
                                    "date": "2026-12-01T15:00:00Z"})
    return study


def test_a_new_store_records_its_schema(tmp_path):
    store = open_store(_url(tmp_path))
    assert (tmp_path / "records.db").is_file()
    meta = optuna.load_study(study_name=META_STUDY, storage=store.storage)
    assert meta.user_attrs["schema"] == SCHEMA
    assert store.study_names() == []
    assert open_store(_url(tmp_path)).study_names() == []  # reopening works


def test_reading_never_creates_a_store(tmp_path):
    assert open_store(_url(tmp_path / "home"), create=False) is None
    assert not (tmp_path / "home").exists()
    assert not store_exists(_url(tmp_path / "home"))


def test_best_record_reads_the_study_best(tmp_path):
    store = open_store(_url(tmp_path))
    assert best_record(store, "nothing") is None
    _study_with_best(store)
    rec = best_record(store, "k" * 16)
    assert rec.values == {"threads": 256, "vector": 8} and rec.time_s == 2e-5 and rec.spread == 0.02
    assert (rec.card, rec.driver, rec.cuda, rec.torch, rec.emmy, rec.source_hash) == (
        "NVIDIA H200", "570", "12.8", "2.13", "0.1.0", "abc")
    assert rec.kernel == "add_kernel" and rec.target == "sm_90" and rec.trial == 0 and rec.study == "k" * 16
    assert f"study {'k' * 16}, trial 0" in rec.source() and store.name in rec.source()


def test_corrupt_file_is_reported_and_left_alone(tmp_path):
    f = tmp_path / "records.db"
    f.write_bytes(b"this is no database at all\n" * 10)
    before = f.read_bytes()
    with pytest.raises(EmmyError, match="is not an SQLite database .* it was left as it is"):
        open_store(_url(tmp_path))
    with pytest.raises(EmmyError, match="is not an SQLite database"):
        open_store(_url(tmp_path), create=False)
    assert f.read_bytes() == before


def test_truncated_sqlite_file_is_reported_and_left_alone(tmp_path):
    store = open_store(_url(tmp_path))
    _study_with_best(store)
    store.storage.engine.dispose()
    f = tmp_path / "records.db"
    f.write_bytes(f.read_bytes()[:1500])  # the header survives, the pages do not
    before = f.read_bytes()
    with pytest.raises(EmmyError, match="records.db"):
        open_store(_url(tmp_path))
    assert f.read_bytes() == before


def test_directory_in_place_of_the_file(tmp_path):
    (tmp_path / "records.db").mkdir()
    with pytest.raises(EmmyError, match="is a directory, not a store file"):
        open_store(_url(tmp_path))


@pytest.mark.parametrize("url, message", [
    ("not a url", "is not a database URL"),
    ("nosuchdb://host/x", "unknown database kind 'nosuchdb'"),
])
def test_bad_urls(url, message):
    with pytest.raises(EmmyError, match=message):
        open_store(url)


def test_unreachable_server():
    pytest.importorskip("psycopg")
    with pytest.raises(EmmyError, match="cannot use the store postgresql://emmy@127.0.0.1:9/x"):
        open_store("postgresql://emmy@127.0.0.1:9/x")


def test_password_is_not_shown():
    pytest.importorskip("psycopg")
    with pytest.raises(EmmyError) as e:
        open_store("postgresql://emmy:secret@127.0.0.1:9/x")
    assert "secret" not in str(e.value)


def test_newer_schema_is_refused_and_left_alone(tmp_path):
    store = open_store(_url(tmp_path))
    _study_with_best(store)
    meta = optuna.load_study(study_name=META_STUDY, storage=store.storage)
    meta.set_user_attr("schema", SCHEMA + 1)
    store.storage.engine.dispose()
    before = (tmp_path / "records.db").read_bytes()
    with pytest.raises(EmmyError, match=f"written by a newer Emmy \\(store schema {SCHEMA + 1}"):
        open_store(_url(tmp_path))
    assert (tmp_path / "records.db").read_bytes() == before


def test_export_import_round_trip(tmp_path):
    a = open_store(_url(tmp_path / "a"))
    _study_with_best(a)
    data = export_records(a)
    assert data["schema"] == SCHEMA and data["format"] == "emmy-records"
    text = json.dumps(data)
    b = open_store(_url(tmp_path / "b"))
    assert import_records(b, read_export(text, "x.json")) == 2
    assert import_records(b, read_export(text, "x.json")) == 0  # twice adds nothing
    assert b.study_names() == ["k" * 16]
    assert best_record(b, "k" * 16) == best_record(a, "k" * 16).__class__(
        **{**best_record(a, "k" * 16).__dict__, "store": b.name})
    trials = b.load("k" * 16).trials
    assert [t.user_attrs["status"] for t in trials] == ["ok", "build_failed"]


@pytest.mark.parametrize("text, message", [
    ("{", "x.json:1:2: not JSON"),
    ('{"schema": 1}', "x.json: not an Emmy records export"),
    ('{"format": "emmy-records", "schema": 99, "studies": []}', "x.json was written by a newer Emmy"),
    ('{"format": "emmy-records", "schema": "one", "studies": []}', "its \"schema\" must be an integer"),
    ('{"format": "emmy-records", "schema": 1, "studies": {}}', "\"studies\" must be a list"),
    ('{"format": "emmy-records", "schema": 1, "studies": [{"name": 3}]}', "x.json: study 0: needs"),
])
def test_bad_export_files(text, message):
    with pytest.raises(EmmyError, match=message.replace("(", "\\(")):
        read_export(text, "x.json")


def test_a_malformed_trial_imports_nothing(tmp_path):
    a = open_store(_url(tmp_path / "a"))
    _study_with_best(a)
    data = export_records(a)
    data["studies"][0]["trials"][1]["state"] = "SOMETHING"
    b = open_store(_url(tmp_path / "b"))
    with pytest.raises(EmmyError, match="trial 1: malformed .* nothing was imported"):
        import_records(b, data, "x.json")
    assert b.study_names() == []
