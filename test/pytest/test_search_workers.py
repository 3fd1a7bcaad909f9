"""Many workers, one store, for real: `emmy tune` processes with several measuring workers each,
the real tuner loop and the deterministic cost measurer (this is about the store, not the GPU),
against PostgreSQL on loopback and against SQLite. No trial is lost or duplicated, every study
completes its budget, and a worker killed with SIGKILL mid-run loses no finished trial.

PostgreSQL: the server named by EMMY_TEST_POSTGRES (`.ci/run` starts one), else one this module
starts in a temporary directory with the Debian binaries (/usr/lib/postgresql/*/bin), as a
non-root user; skipped only where those binaries are absent."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import optuna
import pytest

from emmy.records import default_url, open_store
from emmy.search.study import measured, point_key

optuna.logging.set_verbosity(optuna.logging.WARNING)

ROOT = Path(__file__).resolve().parents[2]
MODEL = f"{ROOT}/test/pytest/models/mlp_block.py:make"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> dict:
    """subprocess arguments that run PostgreSQL's tools as a non-root user (they refuse root)."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return {"user": name}
        except KeyError:
            continue
    pytest.skip("running as root with no 'postgres' or 'nobody' user to run PostgreSQL as")


@pytest.fixture(scope="module")
def postgres_server():
    """A PostgreSQL server URL (no database part): EMMY_TEST_POSTGRES's, or one started here."""
    pytest.importorskip("psycopg")
    given = os.environ.get("EMMY_TEST_POSTGRES")
    if given:
        yield given.rsplit("/", 1)[0]
        return
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if not bins:
        pytest.skip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin): apt-get install postgresql")
    bin_dir = Path(bins[-1])
    as_user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="emmy-pg-"))
    if as_user:
        shutil.chown(root, user=as_user["user"])
    data, port = root / "data", _free_port()
    run = dict(check=True, capture_output=True, **as_user)
    subprocess.run([bin_dir / "initdb", "-D", data, "-U", "emmy", "-A", "trust", "--no-sync"], **run)
    subprocess.run([bin_dir / "pg_ctl", "-D", data, "-l", root / "log", "-w", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"], **run)
    try:
        yield f"postgresql://emmy@127.0.0.1:{port}"
    finally:
        subprocess.run([bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"], capture_output=True, **as_user)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh database on the server, dropped afterwards."""
    import psycopg

    name = "emmy_" + uuid.uuid4().hex[:12]
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"{postgres_server}/{name}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _tune(url: str, *args: str, home: Path) -> subprocess.Popen:
    env = {**os.environ, "EMMY_HOME": str(home)}
    env.pop("EMMY_DUMP_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "emmy.cli.main", "tune", MODEL, "--tokens", "16", "--target",
                             "sm_90", "--storage", url, "--quiet", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _check_store(url: str, budget: int, workers: int, batch: int = 4) -> dict:
    """Every study has its budget of measured trials (more only where workers asked at the same
    moment: at most (workers - 1) x batch), none measured twice, each finished trial complete
    with its attributes, both branches of the fusion fork measured, and a named best."""
    store = open_store(url, create=False)
    names = store.study_names()
    assert len(names) == 2
    summary = {}
    forks = 0
    for name in names:
        study = store.load(name)
        trials = measured(study)
        assert budget <= len(trials) <= budget + (workers - 1) * batch, (name, len(trials))
        points = [point_key(t.user_attrs["values"]) for t in trials]
        assert len(set(points)) == len(points), "a candidate was measured twice"
        assert len({t.user_attrs["uid"] for t in trials}) == len(trials)
        numbers = [t.number for t in study.trials]
        assert len(set(numbers)) == len(numbers) and sorted(numbers) == list(range(len(numbers)))
        assert "emmy.best" in study.user_attrs
        # both branches of the fusion fork (the first kernel's: its values launch different
        # kernels; the epilogue fusion has no fusion knob) get their share, whichever
        # worker drew them, and each is named at its best
        if study.user_attrs["emmy.best"].get("fork_knobs"):
            branches = [t.user_attrs["values"]["fusion"] for t in trials]
            assert min(branches.count("fused"), branches.count("split")) >= budget // 4, branches
            assert set(study.user_attrs["emmy.best"]["fork"]) == {"fused", "split"}
            forks += 1
        summary[name] = {t.number: (point_key(t.user_attrs["values"]), t.value) for t in trials}
    assert forks == 1, "the layer-norm kernel's fusion fork, and no other"
    return summary


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_two_tuners_with_two_workers_each_share_one_store(kind, request, tmp_path):
    url = request.getfixturevalue("postgres_url") if kind == "postgresql" else default_url(tmp_path / "shared")
    budget = 14
    procs = [_tune(url, "--workers", "2", "--trials", str(budget), "--measurer", "cost:0.02", "--seed", str(i),
                   home=tmp_path / f"home{i}") for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "Traceback" not in err and "speed-up" in out
    _check_store(url, budget, workers=4)


def _workers_of(pid: int) -> list[int]:
    """The measuring worker processes (multiprocessing spawn children) of an `emmy tune`."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    out = []
    for c in children:
        try:
            cmd = Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except FileNotFoundError:
            continue
        if "spawn_main" in cmd:
            out.append(int(c))
    return out


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_a_killed_worker_loses_no_finished_trial(kind, request, tmp_path):
    url = request.getfixturevalue("postgres_url") if kind == "postgresql" else default_url(tmp_path / "shared")
    budget = 16
    proc = _tune(url, "--workers", "2", "--trials", str(budget), "--measurer", "cost:0.15", home=tmp_path / "home")
    store = None
    for _ in range(1200):  # until a few trials are finished (the compile comes first)
        time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        store = store or open_store(url, create=False)
        names = store.study_names() if store else []
        if names and len(measured(store.load(names[0]))) >= 4:
            break
    workers = _workers_of(proc.pid)
    assert len(workers) == 2
    before = {t.number: (point_key(t.user_attrs["values"]), t.value, t.user_attrs["uid"])
              for t in measured(store.load(names[0]))}
    os.kill(workers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and "Traceback" not in err
    assert "stopped with exit code -9; the trials it finished are in the store" in err
    after = {t.number: (point_key(t.user_attrs["values"]), t.value, t.user_attrs["uid"])
             for t in measured(store.load(names[0]))}
    assert all(after.get(n) == v for n, v in before.items()), "a finished trial was lost or changed"
    _check_store(url, budget, workers=2)
