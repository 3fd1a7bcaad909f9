"""`emmy prior fit|evaluate|show` on a hand-made records export (its times come from the model
itself with noise: test data for the plumbing, not measurements), and every error message the
command gives (exit 1, one line, no traceback)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from emmy.cli.main import run
from emmy.cli.report import run_guarded
from emmy.driver import CompileOptions, compile_model
from emmy.prior.choose import neighbourhood
from emmy.prior.features import Kernel
from emmy.prior.model import DEFAULTS, predict, with_target
from emmy.prior.store import load_prior
from emmy.records.record import SCHEMA
from emmy.search.task import tasks_in
from emmy.targets import get_target
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.rules import decide

TARGET = get_target("sm_90a")
FACTORY = '''
import torch
from torch import nn

def make(tokens: int = 256):
    torch.manual_seed(0)
    lin = nn.Linear(512, 1024, bias=False).to(torch.bfloat16)
    return lin, (torch.randn(1, tokens, 512, dtype=torch.bfloat16),)
'''


def _study(name: str, task, times, module: bool = True, target: str = "sm_90a") -> dict:
    key = {"id": name, "structure_id": f"{name[:4]}:{target}:v1", "structure": name, "shape": task.key.shape,
           "target": target, "version": task.key.version}
    attrs = {"emmy.key": key, "emmy.kernel": task.kernel, "emmy.description": task.description}
    if module:
        attrs["emmy.module"] = task.module
    trials = [{"number": i, "state": "COMPLETE", "value": t, "params": {}, "distributions": {},
               "user_attrs": {"values": v, "status": "ok", "time_s": t, "facts": {}}} for i, (v, t) in enumerate(times)]
    trials.append({"number": len(trials), "state": "FAIL", "value": None, "params": {}, "distributions": {},
                   "user_attrs": {"values": times[0][0], "status": "build_failed", "reason": "test"}})
    return {"name": name, "attrs": attrs, "trials": trials}


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """An export of three keys of one kernel (the same module under three names), 30 candidates
    each around the rules' answer, timed by the default model with 3% noise."""
    root = tmp_path_factory.mktemp("prior_cli")
    (root / "lin.py").write_text(FACTORY)
    result = compile_model(CompileOptions(model=f"{root}/lin.py:make", tokens=256, target="sm_90a", stop_after="tile"))
    (task,) = tasks_in(result.module, TARGET, 256)
    info = task.info()
    space = knob_space_for(info, TARGET)
    anchor = {k: c.value for k, c in decide(info, TARGET, space).items()}
    points = [anchor, *neighbourhood(info, TARGET, space, anchor)]
    kernel = Kernel(info, TARGET)
    rng = np.random.default_rng(0)
    studies = []
    for n, name in enumerate(("aaaa0001", "bbbb0002", "cccc0003")):
        chosen = [points[0]] + [points[i] for i in rng.choice(np.arange(1, len(points)), 29, replace=False)]
        times = [(v, predict(with_target(kernel.features(v), TARGET), DEFAULTS) * math.exp(rng.normal(0, 0.03)))
                 for v in chosen]
        studies.append(_study(name, task, times))
    bad = {**times[0][0], "block_k": 24}  # a block_k no plan builds (a record of an older space)
    studies[0]["trials"].append({"number": 99, "state": "COMPLETE", "value": 1e-5, "params": {}, "distributions": {},
                                 "user_attrs": {"values": bad, "status": "ok", "time_s": 1e-5}})
    studies.append(_study("dddd0004", task, times[:3], module=False))
    path = root / "records.json"
    path.write_text(json.dumps({"format": "emmy-records", "schema": SCHEMA, "studies": studies}))
    # the same trials under the kernel's real key, without its module (tuned before the store kept it)
    (root / "old.json").write_text(json.dumps({"format": "emmy-records", "schema": SCHEMA,
                                               "studies": [_study(task.key_id, task, times, module=False)]}))
    return path


def _run(argv, capsys):
    code = run_guarded(run, argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_fit_writes_a_prior_that_loads(export, tmp_path, capsys):
    out_path = tmp_path / "golden" / "sm_90a" / "prior.json"
    code, out, _ = _run(["prior", "fit", "--records", str(export), "--out", str(out_path)], capsys)
    assert code == 0
    assert "skipped" in out and "dddd0004" in out and "no emmy.module attribute" in out
    assert "study aaaa0001: 1 trials whose values the current plan no longer builds" in out
    assert "to 90 measured candidates of 3 kernel keys" in out and "contraction: 3 keys" in out
    prior = load_prior(out_path, "sm_90a")
    assert prior.fitted and prior.data["keys"] == {"aaaa0001": 30, "bbbb0002": 30, "cccc0003": 30}
    assert prior.data["sources"] == [str(export)] and prior.residuals["contraction"]["spread"] < 0.06
    held = prior.residuals["contraction"]["held_out"]  # three keys: each held out in turn
    assert held["pairs"] == 3 * 29 and prior.margin("contraction") == held["margin"]
    code, out, _ = _run(["prior", "show", "--prior", str(out_path)], capsys)
    assert code == 0 and "prior fitted" in out
    assert f"margin x{held['margin']:.2f} (held out: {3 * 29} pairs, worst x{held['worst']:.2f})" in out
    assert "learned correction" in out


def test_evaluate_prints_a_table_and_a_json_last_line(export, capsys):
    code, out, _ = _run(["prior", "evaluate", "--records", str(export), "--json"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert list(summary)[:3] == ["geomean_regret", "worst_regret", "n"]
    assert summary["n"] == 3 and 1.0 <= summary["geomean_regret"] <= summary["worst_regret"]
    assert any(line.startswith("shape") for line in lines) and any(line.startswith("model") for line in lines)
    assert "leave one shape out" in out and "leave one model out" in out


def test_evaluate_judges_a_problem_once_and_says_so(export, tmp_path, capsys):
    """Two studies of the one kernel on the one shape under two keys (another structure, as a
    newer pipeline gives): one problem, judged once on the newer study."""
    data = json.loads(export.read_text())
    studies = []
    for study, name in zip(data["studies"][:2], ("aaaa:p:sm_90a:v1", "bbbb:p:sm_90a:v1")):
        study = json.loads(json.dumps(study))
        study["name"] = study["attrs"]["emmy.key"]["id"] = name
        for i, t in enumerate(study["trials"]):
            t["user_attrs"]["date"] = f"2026-12-0{2 if name[0] == 'a' else 6}T10:00:{i % 60:02d}Z"
        studies.append(study)
    path = tmp_path / "two.json"
    path.write_text(json.dumps({**data, "studies": studies}))
    code, out, _ = _run(["prior", "evaluate", "--records", str(path), "--json"], capsys)
    assert code == 0
    assert "1 older study of a kernel on a shape that a newer study (another pipeline's key) also measured" in out
    assert json.loads(out.strip().splitlines()[-1])["n"] == 1
    table = out.split("held out  ", 1)[1]  # a row shows a key's first 12 characters
    assert "bbbb:p:sm_90" in table and "aaaa:p:sm_90" not in table


def test_model_and_tokens_rebuild_kernels_the_records_do_not_keep(export, tmp_path, capsys):
    old = export.parent / "old.json"
    out_path = tmp_path / "prior.json"
    code, out, _ = _run(["prior", "fit", "--records", str(old), "--out", str(out_path)], capsys)
    assert code == 1  # nothing usable without the module
    code, out, _ = _run(["prior", "fit", "--records", str(old), "--out", str(out_path),
                         "--model", f"{export.parent}/lin.py:make", "--tokens", "256"], capsys)
    assert code == 0 and "skipped" not in out
    assert list(load_prior(out_path, "sm_90a").data["keys"].values()) == [30]


def test_show_without_a_file_shows_the_defaults(tmp_path, capsys, monkeypatch):
    """`show` (and `fit`) default to the golden folder a compile reads: EMMY_GOLDEN, else the
    one that ships with Emmy, wherever they run from."""
    from emmy.golden import default_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EMMY_GOLDEN", str(tmp_path / "g"))
    code, out, _ = _run(["prior", "show", "--target", "sm_80"], capsys)
    assert code == 0 and out.splitlines()[:2] == [
        "sm_80: no fitted prior: the default coefficients (margin x2.01)", "  (no file at g/sm_80/prior.json)"]
    monkeypatch.delenv("EMMY_GOLDEN")
    code, out, _ = _run(["prior", "show", "--target", "sm_90a"], capsys)
    assert code == 0 and f"({default_dir() / 'sm_90a' / 'prior.json'})" in out.splitlines()[0]


@pytest.mark.parametrize("argv, message", [
    (["prior", "fit", "--records", "/nonexistent/records.json"], "error: cannot read records file '/nonexistent/records.json'"),
    (["prior", "fit", "--target", "sm_70"], "error: unknown target 'sm_70'"),
    (["prior", "tidy"], "error: emmy prior: unknown action 'tidy'"),
    (["prior", "fit", "--storage", "sqlite:////nonexistent/x.db", "--records", "x.json"], "give --storage or --records, not both"),
    (["prior", "show", "--prior", "/nonexistent/prior.json"], "error: /nonexistent/prior.json: no such prior file"),
    (["prior", "fit", "--records", "x.json", "--model", "m"], "error: emmy prior: --model needs --tokens"),
    (["prior", "fit", "--records", "x.json", "--tokens", "5"], "error: emmy prior: --tokens and --layer go with --model"),
])
def test_errors(argv, message, capsys):
    code, _, err = _run(argv, capsys)
    assert code == 1 and message in err


def test_records_that_are_not_an_export(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"studies": []}')
    code, _, err = _run(["prior", "evaluate", "--records", str(bad)], capsys)
    assert code == 1 and f"{bad}: not an Emmy records export" in err


def test_no_measurements_for_the_target(export, capsys):
    code, _, err = _run(["prior", "fit", "--records", str(export), "--target", "sm_80"], capsys)
    assert code == 1 and "error: no measurements for sm_80 in" in err and "emmy tune --target" in err


def test_a_store_that_does_not_exist(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/none.db"
    code, _, err = _run(["prior", "evaluate", "--storage", url], capsys)
    assert code == 1 and "there is no store at" in err
    assert not (tmp_path / "none.db").exists()  # looking never creates a store


def test_a_broken_prior_file(tmp_path, capsys):
    path = tmp_path / "prior.json"
    path.write_text('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {"knee": "fast"}}')
    code, _, err = _run(["prior", "show", "--prior", str(path)], capsys)
    assert code == 1 and f"error: {path}: coefficient knee must be a positive number" in err
    path.write_text("{")
    code, _, err = _run(["prior", "show", "--prior", str(path)], capsys)
    assert code == 1 and f"error: {path}:1:2: not JSON" in err


def test_fit_cannot_write(export, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = _run(["prior", "fit", "--records", str(export), "--out", str(blocker / "prior.json")], capsys)
    assert code == 1 and "error: cannot write" in err


def test_fit_reads_the_store_too(export, tmp_path, capsys):
    from emmy.records import default_url, open_store
    from emmy.records.transfer import import_records, read_export

    url = default_url(tmp_path)
    import_records(open_store(url), read_export(export.read_text(), str(export)))
    out_path = tmp_path / "prior.json"
    code, out, _ = _run(["prior", "fit", "--storage", url, "--out", str(out_path)], capsys)
    assert code == 0 and "to 90 measured candidates of 3 kernel keys" in out
    assert load_prior(out_path, "sm_90a").data["sources"] == [url]


def test_a_store_the_tuner_wrote_is_read_back(tmp_path, capsys, monkeypatch):
    """`emmy tune` keeps each study's kernel (emmy.module) so the prior can rebuild its plans
    (the cost measurer: no GPU, and no measurement either)."""
    from pathlib import Path

    monkeypatch.setenv("EMMY_HOME", str(tmp_path))
    model = Path(__file__).parent / "models" / "mlp_block.py"
    url = f"sqlite:///{tmp_path}/r.db"
    code, _, _ = _run(["tune", f"{model}:make", "--tokens", "16", "--trials", "4", "--target", "sm_90a",
                       "--measurer", "cost", "--storage", url, "--quiet"], capsys)
    assert code == 0
    # the kernels are rebuilt from the store (no "no emmy.module" line), and the cost measurer's
    # trials are not measurements: nothing to fit, said so, and no prior.json written
    code, out, err = _run(["prior", "fit", "--storage", url, "--out", str(tmp_path / "prior.json")], capsys)
    assert code == 1 and "written by the cost measurer (not measurements)" in out + err
    assert "no emmy.module" not in out + err and not (tmp_path / "prior.json").exists()
