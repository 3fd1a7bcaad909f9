"""EMMY_DUMP_DIR: one file per pass, each reproduced byte for byte by emmy-opt from the one before,
each a fixpoint of parse and print; plus the CUDA source and the decisions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emmy.passes.pipeline import PIPELINE

MODEL = "Qwen/Qwen3-Embedding-0.6B"


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dump")
    env = dict(os.environ, EMMY_DUMP_DIR=str(d))
    proc = subprocess.run(
        [sys.executable, "-m", "emmy.cli.main", "compile", MODEL, "--layer", "0", "--tokens", "48",
         "--knob", "o_proj_residual.block_n=32"],
        capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return d


def _stage_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if re.match(r"\d\d-.*\.mlir$", p.name))


def test_one_file_per_pass_in_order(dump):
    names = [p.name for p in _stage_files(dump)]
    expected = ["00-torch-import.mlir"] + [f"{i + 1:02d}-{name}.mlir" for i, (name, *_) in enumerate(PIPELINE)]
    assert names == expected
    assert (dump / "layer0.cu").read_text().count("__global__") >= 5
    decisions = json.loads((dump / "decisions.json").read_text())
    assert {"kernel", "knob", "value", "tier", "reason"} <= set(decisions[0])
    pinned = [d for d in decisions if d["tier"] == "pinned"]
    assert pinned == [d for d in decisions if d["kernel"] == "o_proj_residual" and d["knob"] == "block_n"]
    assert pinned[0]["value"] == 32


def _opt(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "emmy.cli.opt", *args], capture_output=True, text=True, input=stdin)


def test_each_dump_is_reproduced_by_its_pass(dump):
    files = _stage_files(dump)
    for prev, cur in zip(files, files[1:]):
        pass_name = cur.name[3:-5]
        proc = _opt(str(prev), "-p", pass_name)
        assert proc.returncode == 0, (cur.name, proc.stderr)
        assert proc.stdout == cur.read_text(), f"emmy-opt -p {pass_name} {prev.name} differs from {cur.name}"


def test_each_dump_round_trips(dump):
    for f in _stage_files(dump):
        proc = _opt(str(f))
        assert proc.returncode == 0, (f.name, proc.stderr)
        assert proc.stdout == f.read_text(), f"{f.name} is not a fixpoint of emmy-opt"
        generic = _opt(str(f), "--print-op-generic")
        back = _opt("-", stdin=generic.stdout)
        assert back.stdout == f.read_text(), f"{f.name} does not survive the generic form"


def test_compile_is_deterministic(dump, tmp_path):
    env = dict(os.environ, EMMY_DUMP_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "emmy.cli.main", "compile", MODEL, "--layer", "0", "--tokens", "48",
         "--knob", "o_proj_residual.block_n=32"],
        capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    for f in dump.iterdir():
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f.name
