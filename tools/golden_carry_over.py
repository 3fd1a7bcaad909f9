"""Carry golden entries over knobs added to their kernels' space (emmy/golden/migrate.py).

    python tools/golden_carry_over.py [GOLDEN_DIR]     # default: golden/ beside this folder

Rewrites the golden files whose entries it carries over and prints one line per entry; then
run `emmy golden check`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from emmy.diagnostics import EmmyError
from emmy.golden.migrate import carry_over


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "golden"
    try:
        changed, notes = carry_over(directory)
    except EmmyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for line in notes:
        print(line)
    print(f"{len(notes)} entries carried over in {len(changed)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
