"""tools/compile_bench.py: it reads `--time-passes` and reports figures (it asserts no time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import compile_bench  # noqa: E402

STDERR = """\
     812.0 ms  trace + import
      31.5 ms  convert-torch-to-tensor
     561.2 ms  loop-fuse
    1404.7 ms  total
"""


def test_parse_timings_reads_every_pass_line():
    t = compile_bench.parse_timings("some warning\n" + STDERR)
    assert t == {"trace + import": 0.812, "convert-torch-to-tensor": 0.0315, "loop-fuse": 0.5612, "total": 1.4047}


def test_parse_timings_sums_a_pass_that_runs_per_part():
    t = compile_bench.parse_timings("      10.0 ms  loop-fuse\n      30.0 ms  loop-fuse\n")
    assert t == {"loop-fuse": 0.04}


def test_summary_takes_medians_per_pass():
    s = compile_bench.summarize(
        [3.0, 1.0, 2.0], [1.5, 0.5, 1.0], [{"a": 0.3, "b": 1.0}, {"a": 0.1}, {"a": 0.2, "b": 3.0}], (0.5, 1.5)
    )
    assert s["wall_s"]["median"] == 2.0 and s["wall_s"]["min"] == 1.0 and s["wall_s"]["max"] == 3.0
    assert s["cpu_s"]["median"] == 1.0 and s["cpu_s"]["max"] == 1.5
    assert s["passes_s"] == {"a": 0.2, "b": 1.0}  # a pass missing from a run counts 0 there
    table = compile_bench.format_table(s, "title")
    assert "median 2.000 s, min 1.000 s, max 3.000 s" in table
    assert "CPU (user + sys): median 1.000 s, min 0.500 s, max 1.500 s" in table
    assert "  200.0 ms  a" in table


def test_runs_a_compile_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_bench.py"), "--runs", "1", "--warmup", "0",
         "--json", str(out), "--", f"{ROOT}/tools/running_example.py:make", "--tokens", "8"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["runs"] == 1 and len(data["wall_s"]["all"]) == 1 and data["cpu_s"]["all"][0] > 0
    assert {"trace + import", "loop-fuse", "total"} <= set(data["passes_s"])
    assert "wall over 1 runs" in proc.stdout


def test_a_failing_compile_is_reported_without_a_traceback():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_bench.py"), "--runs", "1", "--warmup", "0",
         "--", "no/such-model-anywhere", "--layer", "0"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode != 0
    assert "compile_bench: " in proc.stderr and "failed (exit" in proc.stderr
    assert "Traceback" not in proc.stderr
