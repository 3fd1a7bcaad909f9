"""Golden configurations: reviewed measurements that ship with Emmy (`golden/<target>/*.json`).

- `schema`: the file layout, reading (every problem named by file and entry) and writing;
- `check`: `check_dir(dir)`: layout, duplicates, staleness and legality against the pipeline;
- `promote`: candidate entries from the local tuning store, for review as a diff.

decide-forks reads them as the `golden` tier of the evidence hierarchy (`emmy.evidence`).
"""

from pathlib import Path


def default_dir() -> Path:
    """The golden folder that ships with Emmy: `golden/` beside the `emmy` package (a source
    checkout or an editable install)."""
    return Path(__file__).resolve().parents[2] / "golden"
