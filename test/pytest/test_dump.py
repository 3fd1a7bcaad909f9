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
    assert {"kernel", "key", "knob", "value", "tier", "reason"} <= set(decisions[0])
    # one key per kernel: structure:shape:target:version
    keys = {d["kernel"]: d["key"] for d in decisions}
    assert all(d["key"] == keys[d["kernel"]] for d in decisions) and len(set(keys.values())) >= 4
    assert all(re.match(r"^[0-9a-f]{12}:[0-9a-f]{8}:sm_\d+a?:v\d+$", k) for k in keys.values())
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


def test_build_script_beside_the_source(dump):
    """`build.sh` holds the nvcc command that builds the dumped `.cu` (Emmy's flags for the
    module's target, `-I` the runtime headers the source includes), run from the dump directory."""
    from emmy.backend import runtime_dir
    from emmy.backend.nvcc import base_flags

    script = (dump / "build.sh").read_text().splitlines()
    assert script[0] == "#!/bin/sh" and os.access(dump / "build.sh", os.X_OK)
    assert 'cd "$(dirname "$0")"' in script
    cmd = script[-1].split()
    assert cmd == ["nvcc", *base_flags("sm_90"), "-shared", "-Xcompiler", "-fPIC", "-o", "layer0.so", "layer0.cu"]
    assert cmd[cmd.index("-I") + 1] == str(runtime_dir()) and (runtime_dir() / "emmy.cuh").is_file()
    assert '#include "emmy.cuh"' in (dump / "layer0.cu").read_text()


@pytest.mark.nvcc
def test_build_script_builds_the_source(dump, tmp_path):
    """Run from anywhere, `build.sh` builds the shared library next to the source."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    for f in ("build.sh", "layer0.cu"):
        shutil.copy(dump / f, tmp_path / f)
    proc = subprocess.run(["sh", str(tmp_path / "build.sh")], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "layer0.so").stat().st_size > 0
