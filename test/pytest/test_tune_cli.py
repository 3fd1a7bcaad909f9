"""`emmy tune` and `emmy records` on the command line: a run with the cost measurer, the records
read back by `emmy records` and by `emmy compile` (tier local), and every bad input a clear
message with exit code 1, no traceback, nothing in the store lost."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from emmy.diagnostics import EmmyError

from emmy.cli.main import run
from emmy.cli.report import run_guarded
from emmy.records import SCHEMA, default_url, open_store
from emmy.records.store import META_STUDY

ROOT = Path(__file__).resolve().parents[2]
MODEL = f"{ROOT}/test/pytest/models/mlp_block.py:make"
TUNE = ["tune", MODEL, "--tokens", "16", "--target", "sm_90", "--quiet"]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EMMY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _error(capsys, argv) -> str:
    assert run_guarded(run, argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A home whose store holds a short tuning run of the MLP block (both kernels)."""
    home = tmp_path_factory.mktemp("tuned") / "home"
    env = {**os.environ, "EMMY_HOME": str(home)}
    env.pop("EMMY_DUMP_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "emmy.cli.main", *TUNE, "--trials", "6", "--measurer", "cost"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return home, proc.stdout


def test_tune_prints_the_table(tuned):
    home, out = tuned
    lines = out.splitlines()
    assert lines[0].split() == ["kernel", "key", "trials", "best", "default", "speed-up"]
    # two kernels, then the model timed with all its tuned answers (emmy.search.layer_check)
    assert len(lines) == 2 + 2 + 1 + 1 and lines[-1] == f"records in {default_url(home)}"
    assert all(line.split()[2] == "6" for line in lines[2:4])
    assert lines[4].split()[:4] == ["model", "16", "tokens", "-"]


def test_records_list_and_show(tuned, monkeypatch, capsys):
    home, _ = tuned
    monkeypatch.setenv("EMMY_HOME", str(home))
    assert run(["records", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["key", "kernel", "target", "trials", "best", "date"]
    assert len(out) == 4 + 1 + 1 + 2 + 1  # then a blank line and the layer check: its title, head and row
    assert out[5] == "layer checks (the layer timed with all its tuned answers):"
    key = out[2].split()[0]
    assert run(["records", "show", key]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("key ") and "trials: 6 measured" in shown and "best: trial " in shown
    assert "card cost model (no GPU)" in shown


def test_records_export_import(tuned, tmp_path, monkeypatch, capsys):
    home, _ = tuned
    monkeypatch.setenv("EMMY_HOME", str(home))
    f = tmp_path / "r.json"
    assert run(["records", "export", str(f)]) == 0
    data = json.loads(f.read_text())
    assert data["schema"] == SCHEMA and len(data["studies"]) == 2
    other = default_url(tmp_path / "other")
    assert run(["records", "import", str(f), "--storage", other]) == 0
    assert "imported 12 trials of 2 studies" in capsys.readouterr().out
    assert run(["records", "import", str(f), "--storage", other]) == 0
    assert "imported 0 trials" in capsys.readouterr().out


def test_records_export_import_gzipped(tuned, tmp_path, monkeypatch, capsys):
    """A name ending in .gz is written and read gzip-compressed, by `records` and `prior fit`
    alike; the same records either way."""
    import gzip

    home, _ = tuned
    monkeypatch.setenv("EMMY_HOME", str(home))
    plain, packed = tmp_path / "r.json", tmp_path / "r.json.gz"
    assert run(["records", "export", str(plain)]) == 0 and run(["records", "export", str(packed)]) == 0
    assert json.loads(gzip.decompress(packed.read_bytes())) == json.loads(plain.read_text())
    assert run(["records", "import", str(packed), "--storage", default_url(tmp_path / "other")]) == 0
    assert "imported 12 trials of 2 studies" in capsys.readouterr().out
    from emmy.prior.data import records_data

    assert [d for _, d in records_data(None, [str(packed)])] == [d for _, d in records_data(None, [str(plain)])]


def test_records_import_bad_gzip(tmp_path, capsys):
    bad = tmp_path / "x.json.gz"
    bad.write_bytes(b"not gzip at all")
    assert f"cannot read file '{bad}'" in _error(capsys, ["records", "import", str(bad)])
    import gzip

    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b'{"format": "emmy-records"' * 100)[:40])
    assert f"cannot read file '{cut}'" in _error(capsys, ["records", "import", str(cut)])


def test_compile_uses_the_local_records(tuned, monkeypatch, capsys, tmp_path):
    import shutil

    home, _ = tuned
    # the cost measurer's records are never evidence: compiling reports them as skipped
    monkeypatch.setenv("EMMY_HOME", str(home))
    assert run(["compile", MODEL, "--tokens", "16", "--target", "sm_90", "--explain"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(line.split()[3] == "rule" for line in lines[2:lines.index("")])
    assert "not a measurement: written by the cost measurer" in out
    home = tmp_path / "home"
    shutil.copytree(tuned[0], home)
    _as_measured(default_url(home))
    monkeypatch.setenv("EMMY_HOME", str(home))
    assert run(["compile", MODEL, "--tokens", "16", "--target", "sm_90", "--explain"]) == 0
    out = capsys.readouterr().out
    rows = out.split("\n\n")[0].splitlines()[2:]  # the decisions table
    assert rows and all(" local " in line for line in rows)
    assert f"store {default_url(home)}, study " in out and ", trial " in out


def _as_measured(url: str) -> None:
    """Test data: the store's bests relabelled as a GPU run would have written them."""
    from emmy.records.store import BEST_ATTR

    store = open_store(url, create=False)
    for name in store.study_names():
        study = store.load(name)
        best = dict(study.user_attrs[BEST_ATTR])
        best["env"] = {**best["env"], "card": "NVIDIA H200 (test data)"}
        study.set_user_attr(BEST_ATTR, best)


def test_compile_and_run_read_the_store_given_by_storage(tuned, capsys, tmp_path):
    """--storage names the store the local tier reads (a team's shared one, say) instead of
    records.db under EMMY_HOME; a bad one is a clear error, the store left as it is."""
    import shutil

    team = tmp_path / "team.db"
    shutil.copy(tuned[0] / "records.db", team)
    url = f"sqlite:///{team}"
    _as_measured(url)
    assert run(["compile", MODEL, "--tokens", "16", "--target", "sm_90", "--explain", "--storage", url]) == 0
    out = capsys.readouterr().out
    rows = out.split("\n\n")[0].splitlines()[2:]
    assert rows and all(" local " in line for line in rows)
    assert f"store {url}, study " in out
    assert run(["run", MODEL, "--tokens", "16", "--target", "sm_90", "--backend", "interpret", "--check",
                "--storage", url]) == 0
    assert "relative error" in capsys.readouterr().out
    before = team.read_bytes()
    err = _error(capsys, ["compile", MODEL, "--tokens", "16", "--storage", "foo://x"])
    assert "--storage 'foo://x': unknown database kind 'foo'" in err
    err = _error(capsys, ["compile", MODEL, "--tokens", "16", "--storage", "postgresql://emmy@127.0.0.1:1/emmy"])
    assert "cannot use the store postgresql://emmy@127.0.0.1:1/emmy: connection failed" in err
    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    err = _error(capsys, ["run", MODEL, "--tokens", "16", "--backend", "interpret", "--storage", f"sqlite:///{bad}"])
    assert "is not an SQLite database" in err and bad.read_text() == "not a database"
    assert team.read_bytes() == before


def test_compile_without_a_store_creates_none(home, capsys):
    assert run(["compile", MODEL, "--tokens", "16", "--target", "sm_90", "--explain"]) == 0
    assert " local " not in capsys.readouterr().out
    assert not home.exists()


# --- bad input ---------------------------------------------------------------------------------


def test_no_gpu(capsys):
    err = _error(capsys, TUNE)
    assert "emmy tune measures candidates on a GPU, and no CUDA device was found" in err
    assert "--measurer cost" in err


@pytest.mark.parametrize("args, message", [
    (["--trials", "0"], "--trials 0: give at least 1 trial per kernel"),
    (["--time-budget", "0"], "--time-budget 0.0: give a positive number of seconds"),
    (["--workers", "0"], "--workers 0: give at least 1 measuring process"),
    (["--batch", "0"], "--batch 0: give at least 1 candidate per batch"),
    (["--tokens", "a,b"], "--tokens 'a,b': expected token counts separated by commas"),
    (["--tokens", "0"], "--tokens '0': give one or more token counts of at least 1"),
    (["--measurer", "abacus"], "unknown measurer 'abacus'"),
    (["--measurer", "cost:soon"], "--measurer cost:soon: the delay must be a number of seconds"),
    (["--storage", "not a url"], "--storage 'not a url' is not a database URL"),
    (["--storage", "nosuchdb://h/x"], "--storage 'nosuchdb://h/x': unknown database kind 'nosuchdb'"),
    (["--target", "sm_70"], "unknown target 'sm_70'"),
    (["--deadline", "0"], "--deadline 0.0: give a positive number of seconds"),
])
def test_bad_arguments(args, message, capsys, home):
    err = _error(capsys, [*TUNE, "--measurer", "cost", *args])
    assert message in err
    assert not home.exists()  # checked before anything is created


def test_unknown_kernel_lists_the_kernels(capsys):
    err = _error(capsys, [*TUNE, "--measurer", "cost", "--kernel", "nope"])
    assert "--kernel nope: no such kernel here" in err and "kernels: " in err


def test_unreachable_server(capsys):
    pytest.importorskip("psycopg")
    err = _error(capsys, [*TUNE, "--measurer", "cost", "--storage", "postgresql://emmy@127.0.0.1:9/x"])
    assert "cannot use the store postgresql://emmy@127.0.0.1:9/x" in err


def test_newer_schema_store(tmp_path, capsys):
    url = default_url(tmp_path / "s")
    store = open_store(url)
    optuna.load_study(study_name=META_STUDY, storage=store.storage).set_user_attr("schema", SCHEMA + 1)
    store.storage.engine.dispose()
    before = (tmp_path / "s" / "records.db").read_bytes()
    err = _error(capsys, [*TUNE, "--measurer", "cost", "--storage", url])
    assert "was written by a newer Emmy" in err
    err = _error(capsys, ["records", "list", "--storage", url])
    assert "was written by a newer Emmy" in err
    assert (tmp_path / "s" / "records.db").read_bytes() == before


def test_corrupt_store(tmp_path, capsys):
    f = tmp_path / "records.db"
    f.write_text("not a database\n")
    err = _error(capsys, [*TUNE, "--measurer", "cost", "--storage", default_url(tmp_path)])
    assert "is not an SQLite database" in err and f.read_text() == "not a database\n"


def test_read_only_home():
    """As another user where the tests run as root (root writes anywhere)."""
    import shutil
    import tempfile

    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no way to make a directory read-only for the test")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    top = Path(tempfile.mkdtemp(prefix="emmy-ro-"))
    try:
        top.chmod(0o755)
        home = top / "home"
        home.mkdir()
        home.chmod(0o555)
        env = {**os.environ, "EMMY_HOME": str(home), "HOME": str(top)}
        proc = subprocess.run([*prefix, sys.executable, "-m", "emmy.cli.main", *TUNE, "--measurer", "cost"],
                              capture_output=True, text=True, env=env, cwd=top)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"the directory {home} is read-only; nothing was written" in proc.stderr
        assert "set EMMY_HOME to a writable directory" in proc.stderr
        assert list(home.iterdir()) == []
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("args, message", [
    (["records", "sort"], "emmy records: unknown action 'sort'"),
    (["records", "show"], "emmy records show: give the KEY"),
    (["records", "export"], "emmy records export: give the FILE"),
    (["records", "show", "abc"], "there is no store at"),
    (["records", "efficiency", "--within", "-5"], "--within must be a percentage from 0 to 100, not -5"),
])
def test_records_bad_input(args, message, capsys):
    assert message in _error(capsys, args)


def test_records_efficiency(tuned, monkeypatch, capsys):
    """A row per study (trials, legal space, long or not, named best and fastest trial, the trials
    it took to come within the margin of each) and the medians over every study and over the long
    ones, said to be against the named best."""
    monkeypatch.setenv("EMMY_HOME", str(tuned[0]))
    assert run(["records", "efficiency"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[2:6] == ["trials", "space", "long", "named"] and out[0].split()[-3:] == ["trial", "to", "5%"]
    assert len(out) == 2 + 2 + 3
    for line in out[2:4]:
        cells = line.split()
        assert cells[2] == "6" and int(cells[3]) > 6 and cells[4] == "no"  # the tuning run wrote the space's size
        assert cells[6] == "us" and 1 <= int(cells[7]) <= 6 and 1 <= int(cells[-1]) <= 6
    assert out[4].startswith("median trials to within 5% of the named best (else the fastest trial), every study: ")
    assert out[4].endswith(" over 2 studies")
    assert out[5].endswith("the long studies (200+ trials or the whole space): none measured right")
    assert "the longest has 6 trials" in out[6]
    assert run(["records", "efficiency", "--within", "0"]) == 0


def test_to_within_counts_trials_in_measuring_order():
    from emmy.records.efficiency import median_needed, study_efficiency, to_within

    assert to_within([12.0, None, 10.3, 9.9, 10.0], 0.05) == 3
    assert to_within([12.0, None, 10.3, 9.9, 10.0], 0.0) == 4
    assert to_within([None, None], 0.05) is None and to_within([], 0.05) is None
    rows = [study_efficiency("a", "k", [2.0, 1.0], 0.05), study_efficiency("b", "k", [1.0], 0.05),
            study_efficiency("c", "k", [None], 0.05)]
    assert [r.needed for r in rows] == [2, 1, None] and median_needed(rows) == 1.5


def test_to_within_a_named_best():
    """Against the named best (re-measured) rather than the fastest single trial, which noise
    flatters; a named best faster than every trial leaves nothing within the margin."""
    from emmy.records.efficiency import LONG_TRIALS, study_efficiency, to_within

    assert to_within([12.0, None, 10.3, 9.9, 10.0], 0.05, 11.5) == 1
    assert to_within([12.0, 10.3], 0.05, 9.0) is None
    r = study_efficiency("a", "k", [13.0, 10.6, 10.0], 0.05, named_s=10.4, space=3)
    assert (r.needed_fastest, r.needed_named, r.needed) == (3, 2, 2) and r.long
    r = study_efficiency("b", "k", [10.0] * 5, 0.05, space=100)
    assert r.needed == 1 and not r.long
    assert study_efficiency("c", "k", [10.0] * LONG_TRIALS, 0.05).long


def test_space_size_of_a_study_without_the_attribute(tuned):
    """Studies tuned before runs wrote their space's size get it counted from their module (the
    same count the run wrote); one whose module is missing or unreadable has none (not an error)."""
    from emmy.records.efficiency import space_size
    from emmy.records.store import SPACE_ATTR, default_url, open_store

    store = open_store(default_url(tuned[0]), create=False)
    for name in store.study_names():
        attrs = store.load(name).user_attrs
        assert space_size(attrs) == attrs[SPACE_ATTR] > 6
    assert space_size({}) is None
    assert space_size({"emmy.module": "not ir", "emmy.key": {"target": "sm_90a"}}) is None


def test_records_list_without_a_store(home, capsys):
    assert run(["records", "list"]) == 0
    assert "no records: there is no store at" in capsys.readouterr().out
    assert not home.exists()


def test_records_show_unknown_key(tuned, monkeypatch, capsys):
    monkeypatch.setenv("EMMY_HOME", str(tuned[0]))
    err = _error(capsys, ["records", "show", "zzzz"])
    assert "no study for key 'zzzz'" in err and "keys: " in err


def test_records_import_bad_file(tmp_path, capsys):
    f = tmp_path / "x.json"
    f.write_text('{"format": "emmy-records", "schema": 99, "studies": []}')
    assert "x.json was written by a newer Emmy" in _error(capsys, ["records", "import", str(f)])
    assert "cannot read" in _error(capsys, ["records", "import", str(tmp_path / "missing.json")])


def test_records_export_unwritable(tuned, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EMMY_HOME", str(tuned[0]))
    assert "cannot write" in _error(capsys, ["records", "export", str(tmp_path / "no" / "dir" / "x.json")])


# --- --devices (one measuring worker per GPU) ---------------------------------------------------


def test_devices_parse():
    from emmy.cli.tune import parse_devices

    assert parse_devices("all", "gpu", 1, count=4) == [0, 1, 2, 3]
    assert parse_devices("1,3", "gpu", 1, count=4) == [1, 3]


@pytest.mark.parametrize(
    "text, measurer, workers, fragment",
    [
        ("0,x", "gpu", 1, "expected 'all' or GPU indices"),
        ("0,2", "gpu", 1, "--devices '0,2': no GPU 2"),
        ("0,0", "gpu", 1, "each GPU once"),
        ("0", "cost", 1, "only the GPU measurer measures on devices"),
        ("0,1", "gpu", 3, "--devices 0,1 with --workers 3: give one of them"),
    ],
)
def test_devices_errors(text, measurer, workers, fragment):
    from emmy.cli.tune import parse_devices

    with pytest.raises(EmmyError) as e:
        parse_devices(text, measurer, workers, count=2)
    assert fragment in str(e.value)


def test_devices_on_the_command_line_without_a_gpu(capsys):
    err = _error(capsys, [*TUNE, "--measurer", "cost", "--devices", "0"])
    assert "only the GPU measurer measures on devices" in err


def test_deadline_follows_the_time_budget():
    from argparse import Namespace

    from emmy.cli.tune import deadline_of

    assert deadline_of(Namespace(deadline=None, time_budget=None)) == 60.0
    assert deadline_of(Namespace(deadline=None, time_budget=5.0)) == 20.0
    assert deadline_of(Namespace(deadline=None, time_budget=45.0)) == 45.0
    assert deadline_of(Namespace(deadline=None, time_budget=600.0)) == 60.0
    assert deadline_of(Namespace(deadline=7.5, time_budget=600.0)) == 7.5


def _tune_process(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "EMMY_HOME": str(home)}
    env.pop("EMMY_DUMP_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "emmy.cli.main", *TUNE, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_quiet_workers_print_no_optuna_lines(tmp_path):
    proc = _tune_process(tmp_path / "home", "--workers", "2", "--trials", "3", "--measurer", "cost")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "A new study created" not in err and "[I " not in err, err
    assert "speed-up" in out


def test_each_best_is_said_as_it_is_named_unless_quiet(tmp_path):
    argv = [sys.executable, "-m", "emmy.cli.main", *[a for a in TUNE if a != "--quiet"], "--trials", "3",
            "--measurer", "cost"]
    env = {**os.environ, "EMMY_HOME": str(tmp_path / "home")}
    env.pop("EMMY_DUMP_DIR", None)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("named ") == 2 and ": best " in proc.stderr and "(3 trials) in " in proc.stderr
    # the layer-norm kernel has the fusion fork (the epilogue fusion has no row statistics and
    # no fusion knob): each branch at its best, said as it is named and after the table
    assert proc.stderr.count(" [fusion: fused ") == 1
    assert proc.stderr.count("fusion fork, each branch at its own best re-measured in the same rounds: fused ") == 1
    # what the run cost: each study's wall time as it is named, and the whole run's at the end
    assert proc.stderr.count("; the study took ") == 2
    cost = re.search(r"^wall ([\d.]+) s: ([\d.]+) s finding the kernels, ([\d.]+) s on 2 studies \(([\d.]+) s a "
                     r"study on average, at most ([\d.]+) s: \w+ [0-9a-f]{12}:\S+\), ([\d.]+) s checking the layers$",
                     proc.stderr, re.M)
    assert cost, proc.stderr
    total, finding, studies, mean, most, checking = map(float, cost.groups())
    assert abs(total - (finding + studies + checking)) <= 0.2 and mean <= most <= studies and finding > 0
    quiet = subprocess.run([*argv, "--quiet"], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def _bests(url: str) -> dict:
    store = open_store(url, create=False)
    if store is None:
        return {}
    return {name: store.load(name).user_attrs.get("emmy.best") for name in store.study_names()}


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_killed_run_keeps_the_bests_it_named(workers, tmp_path):
    """kill -9 once the first study's best is named (the second still measuring): the best
    stays, the workers stop with the run, and a re-run names only the missing best (the first
    is not named again)."""
    home = tmp_path / "home"
    url = default_url(home)
    proc = _tune_process(home, "--trials", "6", "--measurer", "cost:0.4", "--workers", workers)
    named: dict = {}
    for _ in range(1200):
        time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        if home.exists():
            named = {k: v for k, v in _bests(url).items() if v is not None}
        if named:
            break
    assert len(named) == 1, "the first study was not named while the second was measured"
    children = _children(proc.pid)
    proc.kill()
    proc.communicate(timeout=60)
    for _ in range(100):  # the workers die with the run (PR_SET_PDEATHSIG)
        if not any(_alive(c) for c in children):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("a worker outlived the killed run")
    assert {k: v for k, v in _bests(url).items() if v is not None} == named
    again = _tune_process(home, "--trials", "6", "--measurer", "cost", "--workers", workers)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    after = _bests(url)
    (first,) = named
    assert after[first] == named[first]  # recalled, not measured and written again
    assert all(v is not None for v in after.values()) and len(after) == 2
