"""Running Emmy's commands as a user does, in a subprocess, for the CLI tests: `emmy(...)`,
`emmy_opt(...)`, and `assert_user_error`, the shape of every user-facing error (exit code 1, one
message starting with `error: `, no traceback)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

# The subprocesses' EMMY_HOME (traces, kernels, the local store): one per test process, never
# the developer's ~/.cache/emmy, whose records would reach the local tier.
HOME = Path(tempfile.mkdtemp(prefix="emmy-test-cli-home-"))


def emmy(*args, env=None, cwd=None):
    import os

    e = dict(os.environ)
    e.pop("EMMY_DUMP_DIR", None)
    e["EMMY_HOME"] = str(HOME)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "emmy.cli.main", *args], capture_output=True, text=True,
                          env=e, cwd=cwd)


def emmy_opt(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "emmy.cli.opt", *args], capture_output=True, text=True,
                          input=stdin)


def assert_user_error(proc, *fragments):
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    for f in fragments:
        assert f in proc.stderr, (f, proc.stderr)
