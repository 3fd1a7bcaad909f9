"""Which kernels' schedules a change moves: the answers of two trees side by side, for several
models and token counts (what to time before and after a change to the rules).

    python tools/rules_diff.py REV [--model SPEC ...] [--tokens 64,128,512] [--target sm_90a]
        [--evidence pinned,rule] [--layer N | --whole-model] [--pins DIR]

REV is a git revision of this repository (the tree before the change: HEAD, HEAD~1, main); the
other side is the working tree. Each side compiles each model at each token count in a process
of its own (`emmy compile --evidence ...` with `EMMY_DUMP_DIR`, and an empty `EMMY_HOME`, so no
store of yours answers), and their knob decisions (`decisions.json`) are compared. Each case
prints a line per kernel whose answer moved, with the knobs that differ (old -> new) and the new
answer's reason for the first of them. `--pins DIR` writes, per case with a moved kernel, the
old answers of the kernels that moved as `KERNEL.KNOB=VALUE` lines
(`DIR/<model>@<tokens>.pins`; only knobs the working tree has): the "before" contender of `tools/bench.py --variant
old=$(paste -sd, FILE)`. The default evidence is the rules alone (`pinned,rule`); name
`pinned,golden,nearest,prior,rule` to compare what a deploy compile answers.

Exit status: 0 when every case compiled on both sides (moved or not), 1 otherwise.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN3 = "Qwen/Qwen3-Embedding-0.6B"


@dataclass(frozen=True)
class Case:
    model: str
    tokens: int

    @property
    def name(self) -> str:
        return f"{Path(self.model.split(':')[0]).name or self.model}@{self.tokens}"


@dataclass(frozen=True)
class Moved:
    kernel: str
    knobs: tuple[tuple[str, object, object], ...]  # (knob, old, new); a missing side is None
    reason: str  # the new answer's reason for the first knob that moved


def checkout(rev: str, into: Path) -> Path:
    """The tree of `rev` extracted under `into` (no worktree left behind); a clear error for a
    revision git does not know."""
    proc = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: git cannot read revision '{rev}': {proc.stderr.decode().strip().splitlines()[-1]}")
    tree = into / "tree"
    with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:") as tar:
        tar.extractall(tree, filter="data")
    return tree


def decisions(tree: Path, case: Case, args, scratch: Path) -> dict[tuple[str, str], dict] | str:
    """(kernel, knob) -> its decision row, compiling `case` with the Emmy of `tree`; or its
    error line (else the last line it printed)."""
    dump = Path(tempfile.mkdtemp(dir=scratch))
    home = Path(tempfile.mkdtemp(dir=scratch))
    layer = [] if args.whole_model else ["--layer", str(args.layer)]
    argv = [sys.executable, "-m", "emmy.cli.main", "compile", case.model, *layer, "--tokens", str(case.tokens),
            "--target", args.target, "--evidence", args.evidence, "-o", os.devnull]
    env = {**os.environ, "PYTHONPATH": str(tree), "EMMY_DUMP_DIR": str(dump), "EMMY_HOME": str(home)}
    env.pop("EMMY_EVIDENCE", None)
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tree, env=env)
    rows = dump / "decisions.json"
    if proc.returncode != 0 or not rows.exists():
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        said = [line for line in lines if line.startswith("error:")] or lines[-1:]
        return said[0] if said else f"exit {proc.returncode}"
    return {(r["kernel"], r["knob"]): r for r in json.loads(rows.read_text())}


def moved(old: Mapping[tuple[str, str], dict], new: Mapping[tuple[str, str], dict]) -> list[Moved]:
    """The kernels whose answers differ between two sides, in the new side's order (then kernels
    only the old side has)."""
    kernels = list(dict.fromkeys([k for k, _ in new] + [k for k, _ in old]))
    out = []
    for kernel in kernels:
        knobs = list(dict.fromkeys([n for k, n in new if k == kernel] + [n for k, n in old if k == kernel]))
        diff = []
        for knob in knobs:
            a, b = old.get((kernel, knob)), new.get((kernel, knob))
            va, vb = (a or {}).get("value"), (b or {}).get("value")
            if a is None or b is None or va != vb:
                diff.append((knob, va, vb))
        if diff:
            first = next((new[(kernel, k)] for k, _, _ in diff if (kernel, k) in new), None)
            out.append(Moved(kernel, tuple(diff), first["reason"] if first else "no such knob on the new side"))
    return out


def pins(old: Mapping[tuple[str, str], dict], new: Mapping[tuple[str, str], dict], kernels: Sequence[str]) -> list[str]:
    """The old side's answers of `kernels` as `KERNEL.KNOB=VALUE` pins, for the knobs the new
    side has (a pin of a knob the working tree no longer has would be refused)."""
    return [f"{k}.{n}={r['value']}" for (k, n), r in old.items() if k in kernels and (k, n) in new]


def parse_args(argv: Sequence[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the git revision to compare the working tree with")
    ap.add_argument("--model", action="append", default=[], metavar="SPEC",
                    help=f"a model as emmy compile takes it (repeatable; default {QWEN3})")
    ap.add_argument("--tokens", default="64,128,512", help="token counts, comma-separated (default 64,128,512)")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--evidence", default="pinned,rule", help="the tiers each side may use (default: the rules alone)")
    ap.add_argument("--layer", type=int, default=0, help="the decoder layer (default 0)")
    ap.add_argument("--whole-model", action="store_true", help="compile the whole model (a path.py:fn factory)")
    ap.add_argument("--pins", type=Path, metavar="DIR", help="write the old answers of the kernels that moved here")
    args = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--tokens '{args.tokens}': expected comma-separated integers")
    if not tokens or min(tokens) < 1:
        ap.error(f"--tokens '{args.tokens}': expected positive token counts")
    args.cases = [Case(absolute(m), t) for m in (args.model or [QWEN3]) for t in tokens]
    return args


def absolute(spec: str) -> str:
    """A model spec naming a local path (a directory, or path.py:fn) made absolute: each side
    compiles in its own tree."""
    path, sep, fn = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
    return str(Path(path).resolve()) + sep + fn if Path(path).exists() else spec


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="rules-diff-") as tmp:
        scratch = Path(tmp)
        old_tree = checkout(args.rev, scratch)
        jobs = [(tree, case) for case in args.cases for tree in (old_tree, ROOT)]
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            results = list(pool.map(lambda job: decisions(job[0], job[1], args, scratch), jobs))
        for i, case in enumerate(args.cases):
            old, new = results[2 * i], results[2 * i + 1]
            head = f"{case.name} ({args.target}, {args.evidence})"
            errors = [f"{side}: {r}" for side, r in ((args.rev, old), ("working tree", new)) if isinstance(r, str)]
            if errors:
                failed += 1
                print(f"{head}: did not compile ({'; '.join(errors)})")
                continue
            changes = moved(old, new)
            print(f"{head}: {len(changes)} kernel(s) moved")
            for m in changes:
                knobs = ", ".join(f"{k} {'-' if a is None else a} -> {'-' if b is None else b}" for k, a, b in m.knobs)
                print(f"  {m.kernel}: {knobs}  ({m.reason})")
            if changes and args.pins:
                args.pins.mkdir(parents=True, exist_ok=True)
                path = args.pins / f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', case.name)}.pins"
                path.write_text("\n".join(pins(old, new, [m.kernel for m in changes])) + "\n")
                print(f"  old answers as pins: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
