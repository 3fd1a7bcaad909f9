"""Carry golden entries over knobs added to their kernels' space, grown domains, and no-op knobs
taken out of it (emmy/golden/migrate.py).

    python tools/golden_carry_over.py [GOLDEN_DIR] [--drop KNOB ...]   # default: golden/ beside this folder

`--drop KNOB` vouches that KNOB, gone from some kernels' space, never changed their program
(check it before removing the knob: `emmy compile --knob KERNEL.KNOB=V -o ...` gives the same
CUDA for every value); entries holding it are carried over without it.

Rewrites the golden files whose entries it carries over and prints one line per entry; then
run `emmy golden check`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emmy.diagnostics import EmmyError
from emmy.golden.migrate import carry_over


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent / "golden")
    parser.add_argument("--drop", action="append", default=[], metavar="KNOB",
                        help="a knob taken out of some kernels' space that never changed their program")
    args = parser.parse_args()
    try:
        changed, notes = carry_over(args.directory, dropped=args.drop)
    except EmmyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for line in notes:
        print(line)
    print(f"{len(notes)} entries carried over in {len(changed)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
