"""tools/legal_space_size.py: the legal spaces of a compiled layer's kernels, counted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import legal_space_size  # noqa: E402


def test_counts_the_layer_contractions(capsys):
    assert legal_space_size.main(["--tokens", "64", "--target", "sm_90a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines}
    assert set(rows) == {"rms_norm_qkv_proj", "o_proj_residual", "rms_norm_gate_up_proj_silu", "down_proj_residual", "total"}
    counts = {name: [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:points|with)", line)] for name, line in rows.items()}
    assert counts["total"][0] == sum(c[0] for name, c in counts.items() if name != "total")
    for name, c in counts.items():
        if name != "total":
            assert 0 < c[1] < c[0], (name, c)  # some of each space, not all, slices the columns


def test_no_cols_where_there_is_no_wgmma(capsys):
    assert legal_space_size.main(["--tokens", "64", "--target", "sm_80"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("total")]
    assert lines and all(" 0 with slices=cols" in line for line in lines)
