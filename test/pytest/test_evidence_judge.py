"""The nearest tier's trust radius and vet, and its offline judge (`emmy.evidence.judge`,
`emmy evidence judge`) on a hand-made records export whose times are set by hand (test data
for the arithmetic, not measurements), with every error message the command gives."""

from __future__ import annotations

import json
import math

import pytest

from emmy.analysis.classify import classify
from emmy.cli.main import run
from emmy.cli.report import run_guarded
from emmy.driver import CompileOptions, compile_model
from emmy.evidence.gather import RADIUS, Evidence, Known
from emmy.evidence.hierarchy import EvidenceOptions, _misses
from emmy.evidence.judge import judge_nearest, summary
from emmy.evidence.prior import NearestVet
from emmy.prior.choose import neighbourhood, rules_anchor
from emmy.prior.data import records_data, samples_of
from emmy.prior.features import Kernel
from emmy.prior.model import score
from emmy.prior.store import MIN_MARGIN, Prior, write_prior
from emmy.records.record import SCHEMA
from emmy.schedule.key import SPACE_VERSION, KernelKey
from emmy.search.task import tasks_in
from emmy.targets import get_target
from emmy.tuning.deciders import Problem
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check
from test_prior_cli import FACTORY  # (one linear kernel: x[T, 512] @ W[1024, 512]^T)
from example_kernels import QKV, kernels

TARGET = get_target("sm_90a")


def _known(shape: str, values: dict, structure: str = "s" * 64) -> Known:
    key = KernelKey(structure, shape, "sm_90a", SPACE_VERSION)
    return Known(key.id, structure, shape, "sm_90a", SPACE_VERSION, key.extents(), values, 1e-5,
                 {"store": "test", "study": key.id, "trial": 0}, "tuned 10.00 us")


def test_a_shape_past_the_radius_lends_nothing_and_is_reported():
    key = KernelKey("s" * 64, "m=256 n=1024 k=512; a", "sm_90a", SPACE_VERSION)
    near, far = _known("m=512 n=1024 k=512; a", {"block_m": 64}), _known("m=4096 n=1024 k=512; a", {"block_m": 128})
    ev = Evidence.collect({"lin": key}, "sm_90a", [near, far], [])
    assert [c.values for c in ev.nearest["lin"]] == [{"block_m": 64}]
    (skipped,) = ev.stale["lin"]
    assert skipped.tier == "nearest" and skipped.source["key"] == far.key_id
    assert skipped.why == f"too far to borrow from: distance 4.00 over {RADIUS:.2f} (the extents' ratios multiply to more than 4)"
    assert "lin" not in ev.far
    ev = Evidence.collect({"lin": key}, "sm_90a", [far], [])
    assert ev.nearest["lin"] == [] and ev.far["lin"] == 1
    misses = _misses(("nearest", "rule"), "lin", ev, "", "", EvidenceOptions())
    assert misses["nearest"] == "the 1 nearest record(s) of this kernel's structure are too far (see the evidence skipped)"


def test_the_vet_takes_no_margin_for_borrowed_values():
    """A borrowed tile the physical model predicts slower than the rules' answer here, even by less
    than MIN_MARGIN, is vetted out; one it predicts no slower is kept."""
    info = classify(kernels(512)[QKV])
    space = knob_space_for(info, TARGET)
    rules = rules_anchor(info, TARGET, space)
    prior = Prior("sm_90a", residuals={"contraction": {"spread": 0.05, "keys": 2, "trials": 9}})
    kernel = Kernel(info, TARGET)
    rules_s = score(kernel, rules, prior, penalized=False)
    scored = [(v, score(kernel, v, prior, penalized=False)) for v in neighbourhood(info, TARGET, space, rules)]
    ratio = {tuple(sorted(v.items())): t / rules_s for v, t in scored if t is not None}
    slightly = next(dict(v) for v, r in ratio.items() if 1.0 < r < MIN_MARGIN)
    problem = Problem(QKV, info, TARGET, space, {})
    assert NearestVet(prior)(problem, {}, slightly).startswith("the prior's physical model predicts the rules' answer faster")
    faster = next(dict(v) for v, r in ratio.items() if r <= 1.0 and dict(v) != rules)
    assert NearestVet(prior)(problem, {}, faster) == ""


def _study(task, times: list[tuple[dict, float]], best: dict) -> dict:
    key = {"id": task.key_id, "structure_id": task.key.structure_id, "structure": task.key.structure,
           "shape": task.key.shape, "target": "sm_90a", "version": task.key.version}
    trials = [{"number": i, "state": "COMPLETE", "value": t, "params": {}, "distributions": {},
               "user_attrs": {"values": v, "status": "ok", "time_s": t, "facts": {}}} for i, (v, t) in enumerate(times)]
    number = next(i for i, (v, _) in enumerate(times) if v == best)
    attrs = {"emmy.key": key, "emmy.kernel": task.kernel, "emmy.description": task.description,
             "emmy.module": task.module,
             "emmy.best": {"trial": number, "values": best, "time_s": times[number][1], "env": {"card": "test card"}}}
    return {"name": task.key_id, "attrs": attrs, "trials": trials}


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """One linear kernel at 256, 512 and 4096 tokens. At 256 and 512 (distance 1) the same ten
    candidates: at 256 the best is A (10 us) and B takes 12 us; at 512 the best is B (10 us) and A
    takes 15 us. At 4096 (past the radius of both) ten candidates, none the rules' answer there."""
    root = tmp_path_factory.mktemp("judge")
    (root / "lin.py").write_text(FACTORY)
    tasks = {}
    for t in (256, 512, 4096):
        result = compile_model(CompileOptions(model=f"{root}/lin.py:make", tokens=t, target="sm_90a", stop_after="tile"))
        (tasks[t],) = tasks_in(result.module, TARGET, t)
    infos = {t: task.info() for t, task in tasks.items()}
    space = knob_space_for(infos[256], TARGET)
    anchor = rules_anchor(infos[256], TARGET, space)
    points = [v for v in [anchor, *neighbourhood(infos[256], TARGET, space, anchor)]
              if not check(infos[512], v, TARGET)][:10]
    a, b = points[0], points[1]
    slow = [(v, 20e-6 + i * 1e-6) for i, v in enumerate(points[2:])]
    studies = [_study(tasks[256], [(a, 10e-6), (b, 12e-6), *slow], a), _study(tasks[512], [(b, 10e-6), (a, 15e-6), *slow], b)]
    rules_4096 = rules_anchor(infos[4096], TARGET, knob_space_for(infos[4096], TARGET))
    far = [v for v in [anchor, *neighbourhood(infos[256], TARGET, space, anchor)]
           if v != rules_4096 and not check(infos[4096], v, TARGET)][:10]
    studies.append(_study(tasks[4096], [(v, 50e-6 + i * 1e-6) for i, v in enumerate(far)], far[0]))
    path = root / "records.json"
    path.write_text(json.dumps({"format": "emmy-records", "schema": SCHEMA, "studies": studies}))
    unfitted = root / "unfitted.json"
    write_prior(unfitted, Prior("sm_90a"))
    return {"path": path, "unfitted": unfitted, "tasks": tasks}


def test_the_judge_borrows_from_the_neighbour_and_measures_the_answer_here(export):
    data = records_data(None, [str(export["path"])])
    keys, skipped = samples_of(data, "sm_90a")
    assert not skipped
    rows = {r.shape: r for r in judge_nearest(data, keys, "sm_90a", None)}
    assert set(rows) == {"m=256 n=1024 k=512", "m=512 n=1024 k=512", "m=4096 n=1024 k=512"}
    r256, r512, r4096 = rows["m=256 n=1024 k=512"], rows["m=512 n=1024 k=512"], rows["m=4096 n=1024 k=512"]
    assert (r256.tier, r256.borrowed, r256.candidates) == ("nearest", "m=512 n=1024 k=512", 10)
    assert r256.regret == pytest.approx(1.2) and r512.regret == pytest.approx(1.5)
    assert (r4096.tier, r4096.answer_s, r4096.regret) == ("rule", None, None)  # too far: the rules, never measured
    s = summary(list(rows.values()))
    assert s == {"geomean_regret": round(math.sqrt(1.2 * 1.5), 4), "worst_regret": 1.5, "n": 2,
                 "coverage": round(2 / 3, 4)}


def _run(argv, capsys):
    code = run_guarded(run, argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_cli_prints_a_table_and_a_json_last_line(export, capsys):
    code, out, _ = _run(["evidence", "judge", "--records", str(export["path"]), "--prior", str(export["unfitted"]),
                         "--json"], capsys)
    assert code == 0
    assert "answered by" in out and "not measured here" in out and "prior none (rules only)" in out
    last = json.loads(out.strip().splitlines()[-1])
    assert last == {"geomean_regret": round(math.sqrt(1.8), 4), "worst_regret": 1.5, "n": 2, "coverage": 0.6667}


def test_cli_errors(export, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = _run(["evidence", "judge", "--records", str(bad)], capsys)
    assert code == 1 and f"error: {bad}:1:2: not JSON" in err
    code, _, err = _run(["evidence", "judge", "--records", str(tmp_path / "missing.json")], capsys)
    assert code == 1 and f"error: cannot read records file '{tmp_path / 'missing.json'}'" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something else"}))
    code, _, err = _run(["evidence", "judge", "--records", str(other)], capsys)
    assert code == 1 and "not an Emmy records export" in err
    few = tmp_path / "few.json"
    data = json.loads(export["path"].read_text())
    data["studies"] = [dict(s, trials=s["trials"][:3]) for s in data["studies"]]
    few.write_text(json.dumps(data))
    code, _, err = _run(["evidence", "judge", "--records", str(few)], capsys)
    assert code == 1 and "nothing to judge: no study of sm_90a in" in err and "8 or more distinct measured" in err
    code, _, err = _run(["evidence", "rank", "--records", str(few)], capsys)
    assert code == 1 and "emmy evidence: unknown action 'rank'" in err and "valid actions: judge" in err
    code, _, err = _run(["evidence", "judge", "--records", str(few), "--storage", "sqlite:///x.db"], capsys)
    assert code == 1 and "give --storage or --records, not both" in err
    code, _, err = _run(["evidence", "judge", "--records", str(few), "--prior", str(tmp_path / "nope.json")], capsys)
    assert code == 1 and f"{tmp_path / 'nope.json'}: no such prior file" in err
