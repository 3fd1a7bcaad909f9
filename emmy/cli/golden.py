"""`emmy golden`: check the shipped golden files, and promote tuning records into them.

    emmy golden check [DIR]                        # DIR: the golden folder (default: the one a compile reads)
    emmy golden promote MODEL [--layer N] --tokens T[,T...] [--target sm_XX] [--storage URL]
                        [--out FILE]               # default FILE: <golden folder>/<target>/<model>.json

The golden folder is the one a compile reads: EMMY_GOLDEN, else the folder that ships with Emmy.

`check` prints one line per problem (file, entry, what) and exits 1 when there is any.
`promote` writes the entries of every kernel of the model with a recorded best in the store into
the golden file (replacing entries of the same key, keeping the others) and lists the kernels
that had no record; review is the file's diff.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from emmy.diagnostics import EmmyError

ACTIONS = ("check", "promote")


def add_parser(sub) -> None:
    p = sub.add_parser("golden", help="check golden files, or promote tuning records into them")
    p.add_argument("action", metavar="check|promote")
    p.add_argument("argument", nargs="?", default=None, metavar="DIR|MODEL")
    p.add_argument("--layer", type=int, default=None, help="promote: the layer that was tuned (none: a factory or the whole model)")
    p.add_argument("--tokens", default=None, help="promote: the token counts that were tuned, e.g. 512,4096")
    p.add_argument("--target", default=None, help="promote: the target that was tuned")
    p.add_argument("--storage", default=None, metavar="URL", help="promote: the store (default: sqlite under EMMY_HOME)")
    p.add_argument("--out", default=None, metavar="FILE", help="promote: the golden file to write")


def cmd_golden(args) -> int:
    if args.action not in ACTIONS:
        raise EmmyError(f"emmy golden: unknown action '{args.action}'", hint="valid actions: " + ", ".join(ACTIONS))
    if args.action == "check":
        return _check(Path(args.argument or default_folder()))
    return _promote(args)


def _check(directory: Path) -> int:
    from emmy.golden.check import check_dir
    from emmy.golden.schema import read_dir

    findings = check_dir(directory)
    for f in findings:
        print(f"error: {f}", file=sys.stderr)
    if findings:
        print(f"{len(findings)} problem(s) in {directory}", file=sys.stderr)
        return 1
    files = read_dir(directory)
    if not files:
        print(f"ok: nothing to check: no golden files (<target>/*.json) under {directory}")
        return 0
    entries = sum(len(f.entries) for f in files)
    print(f"ok: {entries} entries in {len(files)} file(s) under {directory}: layout, keys, legality and staleness checked")
    return 0


def _promote(args) -> int:
    from emmy.cli.main import TARGETS, default_target
    from emmy.cli.tune import _quiet_optuna, parse_tokens, storage_url
    from emmy.golden.promote import merge, promote
    from emmy.golden.schema import read_file, write_file
    from emmy.records.store import display_url, open_store, store_errors

    if not args.argument:
        raise EmmyError("emmy golden promote: give the MODEL that was tuned")
    if not args.tokens:
        raise EmmyError("emmy golden promote: give --tokens, the token counts that were tuned")
    tokens = parse_tokens(args.tokens)
    target = args.target or default_target()
    if target not in TARGETS:
        raise EmmyError(f"unknown target '{target}'", hint="valid targets: " + ", ".join(TARGETS))
    _quiet_optuna()
    url = storage_url(args)
    store = open_store(url, create=False)
    if store is None:
        raise EmmyError(f"there is no store at {display_url(url)} (nothing has been tuned)")
    out = Path(args.out) if args.out else Path(default_folder()) / target / f"{_file_name(args.argument)}.json"
    old = list(read_file(out).entries) if out.exists() else []
    with store_errors(store.name):
        entries, missing = promote(store, args.argument, args.layer, tokens, target)
    if not entries:
        lines = "".join(f"\n  no record: {m}" for m in missing)
        raise EmmyError(f"nothing to promote for {args.argument} at {', '.join(map(str, tokens))} tokens on {target} "
                        f"from {store.name}{lines}", hint="tune it first, on a GPU: emmy tune " + args.argument)
    write_file(out, target, merge(old, entries))
    print(f"promoted {len(entries)} entries into {out} ({len(old)} were there)")
    for m in missing:
        print(f"no record: {m}")
    return 0


def default_folder() -> str:
    """The golden folder a compile reads: EMMY_GOLDEN, else the one that ships with Emmy."""
    from emmy.cli.main import _golden_dir

    return _golden_dir() or "golden"


def _file_name(model: str) -> str:
    """`Qwen/Qwen3-Embedding-0.6B` -> `qwen3-embedding-0.6b`; `tools/running_example.py:make` ->
    `running_example-make`."""
    base = model.rstrip("/").split("/")[-1].replace(".py:", "-")
    return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-") or "model"


__all__ = ["add_parser", "cmd_golden"]
