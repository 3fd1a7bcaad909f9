"""tools/rules_diff.py: the answers of a git revision and the working tree side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import rules_diff  # noqa: E402


def row(kernel, knob, value, reason="r"):
    return {(kernel, knob): {"kernel": kernel, "knob": knob, "value": value, "reason": reason}}


def test_moved_names_each_kernel_whose_answer_differs_and_pins_keep_the_new_sides_knobs():
    old = {**row("qkv", "block_m", 128), **row("qkv", "stages", 4), **row("o", "block_m", 128),
           **row("o", "fusion", "fused"), **row("down", "block_m", 64)}
    new = {**row("qkv", "block_m", 64, "one wave"), **row("qkv", "stages", 4), **row("o", "block_m", 128),
           **row("down", "block_m", 64)}
    changes = rules_diff.moved(old, new)
    assert [(m.kernel, m.knobs, m.reason) for m in changes] == [
        ("qkv", (("block_m", 128, 64),), "one wave"),
        ("o", (("fusion", "fused", None),), "no such knob on the new side"),
    ]
    assert rules_diff.pins(old, new, ["qkv", "o"]) == ["qkv.block_m=128", "qkv.stages=4", "o.block_m=128"]
    assert rules_diff.moved(new, new) == []


def test_model_paths_are_made_absolute_for_the_other_tree(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert rules_diff.absolute("Qwen/Qwen3-Embedding-0.6B") == "Qwen/Qwen3-Embedding-0.6B"  # a model id
    assert rules_diff.absolute("tools/running_example.py:make") == f"{ROOT}/tools/running_example.py:make"
    assert rules_diff.absolute("tools") == str(ROOT / "tools")


def tool(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "rules_diff.py"), *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_a_revision_against_the_working_tree_end_to_end():
    proc = tool("HEAD", "--model", f"{ROOT}/tools/running_example.py:make", "--whole-model", "--tokens", "16")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.startswith("running_example.py@16 (sm_90a, pinned,rule): ") and " kernel(s) moved" in proc.stdout


def test_bad_input_is_a_message_and_exit_status():
    proc = tool("no-such-revision")
    assert proc.returncode == 1 and "error: git cannot read revision 'no-such-revision'" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = tool("HEAD", "--tokens", "0")
    assert proc.returncode == 2 and "--tokens '0': expected positive token counts" in proc.stderr
    proc = tool("HEAD", "--model", "no/such-model", "--tokens", "8")
    assert proc.returncode == 1 and proc.stdout.startswith("such-model@8 (sm_90a, pinned,rule): did not compile (HEAD: error: ")
