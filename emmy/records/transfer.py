"""Moving records between stores: schema-versioned JSON.

    data = export_records(store)             # {"format": "emmy-records", "schema": 1, "studies": [...], "layers": [...]}
    added = import_records(store, data)      # trials added (those already there are skipped)
    import_layers(store, data)               # layer checks added (where the store has none of that layer)

A study in the file: `name` (the key id), `attrs` (the study's Emmy attributes: key, kernel,
description, best) and `trials`: each with `number` (in the exporting store), `state`,
`value`, `params` and their `distributions` (Optuna's JSON form) and `user_attrs` (values,
status, time, spread, error, reason, env, date, uid). Importing adds the trials whose `uid` the
store does not have yet (importing a file twice adds nothing), creates missing studies, and
takes the file's recorded best only for a study that has none. Running and waiting trials are
not exported. `layers`: the store's layer checks (`emmy.records.layer`), each `name` (its study)
and `check`; importing adds a check only where the store has none of that layer. A file of a newer schema, or one that is not an export, is refused before
anything is written. A file whose name ends in `.gz` is read and written gzip-compressed
(`read_file`, `write_file`): an export of a busy store is tens of megabytes of JSON, a tenth of
that compressed.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping
from pathlib import Path

from emmy.diagnostics import EmmyError, first_line
from emmy.records.record import SCHEMA
from emmy.records.store import BEST_ATTR, Store

FORMAT = "emmy-records"


def export_records(store: Store, names: list[str] | None = None) -> dict:
    """The store's studies (all, or those named) as JSON-ready data."""
    import optuna
    from optuna.distributions import distribution_to_json

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
    studies = []
    for name in names if names is not None else store.study_names():
        study = store.load(name)
        trials = [
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value,
                "params": t.params,
                "distributions": {k: distribution_to_json(d) for k, d in t.distributions.items()},
                "user_attrs": t.user_attrs,
            }
            for t in study.get_trials(deepcopy=False, states=finished)
        ]
        studies.append({"name": name, "attrs": study.user_attrs, "trials": trials})
    return {"format": FORMAT, "schema": SCHEMA, "studies": studies, "layers": export_layers(store)}


def export_layers(store: Store) -> list[dict]:
    """The store's layer checks (`emmy.records.layer`) as JSON-ready data: name and check."""
    from emmy.records.layer import LAYER_ATTR

    out = []
    for name in store.layer_names():
        data = (store.study_attrs(name) or {}).get(LAYER_ATTR)
        if data is not None:
            out.append({"name": name, "check": data})
    return out


def read_file(path: Path, what: str = "records file") -> str:
    """The text of an export file, gunzipped where its name ends in `.gz` (EmmyError naming
    the file when it cannot be read)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text(encoding="utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise EmmyError(f"cannot read {what} '{path}': {getattr(e, 'strerror', None) or e}") from None


def write_file(path: Path, data: Mapping) -> None:
    """Write an export (sorted, indented JSON), gzip-compressed where the name ends in `.gz`."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise EmmyError(f"cannot write '{path}': {e.strerror or e}") from None


def read_export(text: str, where: str) -> dict:
    """Parse and check an export file's text (EmmyError naming `where` when it is not one)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise EmmyError(f"{where}:{e.lineno}:{e.colno}: not JSON ({e.msg})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EmmyError(f"{where}: not an Emmy records export (no \"format\": \"{FORMAT}\")")
    schema = data.get("schema")
    if not isinstance(schema, int):
        raise EmmyError(f"{where}: its \"schema\" must be an integer, not {schema!r}")
    if schema > SCHEMA:
        raise EmmyError(f"{where} was written by a newer Emmy (records schema {schema}; this Emmy "
                        f"reads schema {SCHEMA} and older)", hint="upgrade Emmy to import it")
    studies = data.get("studies")
    if not isinstance(studies, list):
        raise EmmyError(f"{where}: \"studies\" must be a list")
    for i, s in enumerate(studies):
        if not (isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("attrs"), dict)
                and isinstance(s.get("trials"), list)):
            raise EmmyError(f"{where}: study {i}: needs \"name\" (text), \"attrs\" (object) and \"trials\" (list)")
    layers = data.get("layers", [])
    if not isinstance(layers, list):
        raise EmmyError(f"{where}: \"layers\" must be a list")
    for i, layer in enumerate(layers):
        if not (isinstance(layer, dict) and isinstance(layer.get("name"), str) and isinstance(layer.get("check"), dict)):
            raise EmmyError(f"{where}: layer {i}: needs \"name\" (text) and \"check\" (object)")
    return data


def import_layers(store: Store, data: Mapping, where: str = "<data>") -> int:
    """Add an export's layer checks to `store`, each where the store has no check of that layer
    (never replacing one); returns how many were added. Every check is read before the first is
    written."""
    from emmy.records.layer import LAYER_PREFIX, check_from, layer_checks, write_layer_data

    checks = []
    for i, layer in enumerate(data.get("layers", [])):
        check = check_from(layer["check"], f"{where}: layer {i}")
        if layer["name"] != check.study or not layer["name"].startswith(LAYER_PREFIX):
            raise EmmyError(f"{where}: layer {i}: named '{layer['name']}', but its check is of {check.study}; "
                            "nothing was imported")
        checks.append((check.study, layer["check"]))
    have = layer_checks(store)
    added = [(name, raw) for name, raw in checks if name not in have]
    for name, raw in added:
        write_layer_data(store, name, raw)
    return len(added)


def import_records(store: Store, data: Mapping, where: str = "<data>") -> int:
    """Add an export's studies and trials to `store` (see the module docstring); returns the
    number of trials added. Every trial is checked before the first one is written."""
    import optuna

    prepared = [(s, [_trial(t, f"{where}: study {s['name']}: trial {j}") for j, t in enumerate(s["trials"])])
                for s in data["studies"]]
    added = 0
    for study_data, trials in prepared:
        name = study_data["name"]
        try:
            study = optuna.create_study(study_name=name, storage=store.storage, direction="minimize")
        except optuna.exceptions.DuplicatedStudyError:
            study = store.load(name)
        attrs = study.user_attrs
        for k, v in study_data["attrs"].items():
            if k not in attrs:  # never replaces what the store has (its best included)
                study.set_user_attr(k, v)
        have = {t.user_attrs.get("uid") for t in study.get_trials(deepcopy=False)}
        for trial in trials:
            if trial.user_attrs.get("uid") in have:
                continue
            study.add_trial(trial)
            added += 1
        if BEST_ATTR not in attrs and BEST_ATTR in study_data["attrs"]:
            study.set_user_attr(BEST_ATTR, study_data["attrs"][BEST_ATTR])
    return added


def _trial(t: Mapping, where: str):
    import optuna
    from optuna.distributions import json_to_distribution

    try:
        state = optuna.trial.TrialState[t["state"]]
        return optuna.trial.create_trial(
            state=state,
            value=t["value"] if state == optuna.trial.TrialState.COMPLETE else None,
            params=t["params"],
            distributions={k: json_to_distribution(d) for k, d in t["distributions"].items()},
            user_attrs=t["user_attrs"],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise EmmyError(f"{where}: malformed ({first_line(e)}); nothing was imported") from None


__all__ = ["FORMAT", "export_layers", "export_records", "import_layers", "import_records", "read_export"]
