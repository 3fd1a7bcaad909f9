"""`emmy records`: inspect and move the tuning store's records.

    emmy records list [--storage URL]            # the studies, then the layer checks
    emmy records show KEY [--storage URL]        # KEY: a key id or a unique prefix of one, or emmy.layer.SIGNATURE
    emmy records export FILE [--storage URL]     # schema-versioned JSON
    emmy records import FILE [--storage URL]
    emmy records efficiency [--within PCT] [--storage URL]   # trials each study took to come within PCT% of its best

The store is `--storage` or SQLite `records.db` under EMMY_HOME (`~/.cache/emmy`). Listing,
showing and exporting never create a store.
"""

from __future__ import annotations

import sys
from pathlib import Path

from emmy.diagnostics import EmmyError

ACTIONS = ("list", "show", "export", "import", "efficiency")


def add_parser(sub) -> None:
    p = sub.add_parser("records", help="list, show, export or import tuning records, or how fast studies found their best")
    p.add_argument("action", metavar="list|show|export|import|efficiency")
    p.add_argument("argument", nargs="?", default=None, metavar="KEY|FILE")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="the store: any database URL Optuna accepts (default: sqlite under EMMY_HOME)")
    p.add_argument("--within", default=5.0, type=float, metavar="PCT",
                   help="efficiency: how close to a study's best counts as there, in percent (default 5)")


def cmd_records(args) -> int:
    from emmy.cli.tune import _quiet_optuna, storage_url
    from emmy.records.store import open_store, store_errors

    if args.action not in ACTIONS:
        raise EmmyError(f"emmy records: unknown action '{args.action}'", hint="valid actions: " + ", ".join(ACTIONS))
    if args.action == "efficiency" and not 0 <= args.within <= 100:
        raise EmmyError(f"emmy records efficiency: --within must be a percentage from 0 to 100, not {args.within:g}")
    if args.action not in ("list", "efficiency") and not args.argument:
        what = "KEY" if args.action == "show" else "FILE"
        raise EmmyError(f"emmy records {args.action}: give the {what}")
    _quiet_optuna()
    url = storage_url(args)
    if args.action == "import":
        from emmy.records.transfer import read_export, read_file

        data = read_export(read_file(Path(args.argument), "file"), args.argument)
        store = open_store(url)
        from emmy.records.transfer import import_records

        from emmy.records.transfer import import_layers

        with store_errors(store.name):
            added = import_records(store, data, args.argument)
            layers = import_layers(store, data, args.argument)
        print(f"imported {added} trials of {len(data['studies'])} studies into {store.name}"
              + (f", and {layers} of {len(data.get('layers', []))} layer checks" if data.get("layers") else ""))
        return 0
    store = open_store(url, create=False)
    if store is None:
        from emmy.records.store import display_url

        if args.action in ("list", "efficiency"):
            print(f"no records: there is no store at {display_url(url)} (nothing has been tuned)")
            return 0
        raise EmmyError(f"there is no store at {display_url(url)} (nothing has been tuned)")
    with store_errors(store.name):
        if args.action == "list":
            return _list(store)
        if args.action == "show":
            return _show(store, args.argument)
        if args.action == "efficiency":
            return _efficiency(store, args.within / 100.0)
        return _export(store, Path(args.argument))


def _list(store) -> int:
    from emmy.cli.table import format_table
    from emmy.records.store import KERNEL_ATTR, KEY_ATTR, best_record
    from emmy.search.study import measured

    rows = []
    for name in store.study_names():
        study = store.load(name)
        rec = best_record(store, name)
        attrs = study.user_attrs
        target = (attrs.get(KEY_ATTR) or {}).get("target", "")
        rows.append((name, str(attrs.get(KERNEL_ATTR, "")), str(target), str(len(measured(study))),
                     rec.summary() if rec else "-", rec.date if rec else ""))
    checks = _layer_rows(store)
    if not rows and not checks:
        print(f"no records in {store.name}")
        return 0
    if rows:
        print(format_table(("key", "kernel", "target", "trials", "best", "date"), rows))
    if checks:
        print(("\n" if rows else "") + "layer checks (the layer timed with all its tuned answers):")
        print(format_table(("check", "layer", "tokens", "target", "tuned", "untuned", "deploy answer kept for",
                            "date"), checks))
    return 0


def _layer_rows(store) -> list[tuple[str, ...]]:
    """One row per layer check (`emmy.records.layer`)."""
    from emmy.records.layer import LAYER_SCHEMA, layer_checks

    def us(t: float, spread: float) -> str:
        return f"{t * 1e6:.2f} us +- {spread * 100:.1f}%"

    rows = []
    for name, c in layer_checks(store).items():
        if c.schema > LAYER_SCHEMA:
            rows.append((name, "", str(c.tokens), c.target, f"(layer schema {c.schema}: a newer Emmy's)", "", "", c.date))
            continue
        kept = ", ".join(r.kernel for r in c.reverted.values()) or "-"
        model = f"{c.model} layer {c.layer}" if c.layer is not None else c.model
        rows.append((name, model, str(c.tokens), c.target, us(c.final_s, c.final_spread),
                     us(c.deploy_s, c.deploy_spread), kept, c.date))
    return rows


def _find(store, key: str) -> str:
    names = store.study_names()
    found = [n for n in names if n == key] or [n for n in names if n.startswith(key)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise EmmyError(f"no study for key '{key}' in {store.name}",
                        hint="keys: " + (", ".join(names) or "none"))
    raise EmmyError(f"key '{key}' names {len(found)} studies: " + ", ".join(found), hint="give more of the key")


def _show(store, key: str) -> int:
    from collections import Counter

    from emmy.records.layer import LAYER_PREFIX
    from emmy.records.store import DESCRIPTION_ATTR, KERNEL_ATTR, KEY_ATTR, best_record
    from emmy.search.study import measured

    if key.startswith(LAYER_PREFIX):
        return _show_layer(store, key)
    name = _find(store, key)
    study = store.load(name)
    attrs = study.user_attrs
    print(f"key {name}")
    for field, value in (attrs.get(KEY_ATTR) or {}).items():
        if field != "id":
            print(f"  {field}: {value}")
    print(f"kernel {attrs.get(KERNEL_ATTR, '')}: {attrs.get(DESCRIPTION_ATTR, '')}")
    trials = measured(study)
    states = Counter(str(t.user_attrs.get("status")) for t in trials)
    print(f"trials: {len(trials)} measured (" + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")")
    rec = best_record(store, name)
    if rec is None:
        print("best: none named yet")
    else:
        print(f"best: trial {rec.trial}, {rec.summary()}, error {rec.error}, {rec.date}")
        print("  " + ", ".join(f"{k}={v}" for k, v in rec.values.items()))
        print(f"  card {rec.card}, driver {rec.driver}, CUDA {rec.cuda}, PyTorch {rec.torch}, "
              f"Emmy {rec.emmy}, source {rec.source_hash[:12]}")
    ok = sorted((t for t in trials if t.value is not None), key=lambda t: t.value)[:5]
    for t in ok:
        values = ", ".join(f"{k}={v}" for k, v in t.user_attrs["values"].items())
        print(f"  trial {t.number}: {t.value * 1e6:.2f} us  {values}")
    if rec is not None and rec.fork:
        print(f"fork {'/'.join(rec.fork_knobs)}: each branch's best, re-measured in the same rounds as the best")
        for label, branch in rec.fork.items():
            print(f"  {label}: " + _branch_text(branch, rec.trial))
    return 0


def _branch_text(branch, best_trial: int) -> str:
    """One branch of a fork: `trial 9, 11.30 us +- 0.8% (the best)`, or its note."""
    if branch.get("time_s") is None:
        trial = f"trial {branch['trial']}, " if branch.get("trial") is not None else ""
        return f"{trial}{branch.get('note') or 'not right'}"
    mark = " (the best)" if branch.get("trial") == best_trial else ""
    return (f"trial {branch['trial']}, {float(branch['time_s']) * 1e6:.2f} us "
            f"+- {float(branch.get('spread') or 0) * 100:.1f}%{mark}")


def _show_layer(store, name: str) -> int:
    """A layer check (`emmy records show emmy.layer.SIGNATURE`, or a unique prefix of one)."""
    from emmy.records.layer import LAYER_SCHEMA, layer_checks

    checks = layer_checks(store)
    found = [n for n in checks if n == name] or [n for n in checks if n.startswith(name)]
    if len(found) != 1:
        what = f"no layer check '{name}'" if not found else f"'{name}' names {len(found)} layer checks"
        raise EmmyError(f"{what} in {store.name}", hint="layer checks: " + (", ".join(checks) or "none"))
    c = checks[found[0]]
    print(f"layer check {c.study}")
    if c.schema > LAYER_SCHEMA:
        print(f"  written by a newer Emmy (layer schema {c.schema}; this Emmy reads {LAYER_SCHEMA} and older)")
        return 0
    where = f"layer {c.layer}" if c.layer is not None else f"model part {c.part}"
    print(f"{c.model} {where} at {c.tokens} tokens on {c.target}, measured {c.date} on {c.env.get('card', '?')}")
    print(f"  tuned (chosen set) {c.tuned_s * 1e6:.2f} us +- {c.tuned_spread * 100:.1f}%, "
          f"untuned (deploy set) {c.deploy_s * 1e6:.2f} us +- {c.deploy_spread * 100:.1f}%, "
          f"final {c.final_s * 1e6:.2f} us +- {c.final_spread * 100:.1f}%")
    for kernel, key in c.kernels.items():
        r = c.reverted.get(key)
        verdict = f"deploy answer kept: {c.why(key)}" if r is not None else "tuned answer kept"
        print(f"  {kernel} ({key}): {verdict}")
    return 0


def _efficiency(store, within: float) -> int:
    from emmy.cli.table import format_table
    from emmy.records.efficiency import LONG_TRIALS, efficiency_rows, median_needed

    rows = efficiency_rows(store, within)
    if not rows:
        print(f"no records in {store.name}")
        return 0
    pct = f"{within * 100:g}%"

    def us(t):
        return f"{t * 1e6:.2f} us" if t is not None else "-"

    def n(v):
        return str(v) if v is not None else "-"

    table = [(r.key, r.kernel, str(r.trials), n(r.space), "yes" if r.long else "no", us(r.named_s), n(r.needed_named),
              us(r.fastest_s), n(r.needed_fastest)) for r in rows]
    print(format_table(("key", "kernel", "trials", "space", "long", "named best", f"to {pct}", "fastest trial",
                        f"to {pct}"), table))
    for label, chosen in (("every study", rows), (f"the long studies ({LONG_TRIALS}+ trials or the whole space)",
                                                  [r for r in rows if r.long])):
        median = median_needed(chosen)
        counted = sum(r.needed is not None for r in chosen)
        print(f"median trials to within {pct} of the named best (else the fastest trial), {label}: "
              + (f"{median:g} over {counted} studies" if median is not None else "none measured right"))
    longest = max(r.trials for r in rows)
    print(f"(a short study is judged against its own best: a lower bound; the longest has {longest} trials)")
    return 0


def _export(store, path: Path) -> int:
    from emmy.records.transfer import export_records, write_file

    data = export_records(store)
    write_file(path, data)
    trials = sum(len(s["trials"]) for s in data["studies"])
    print(f"exported {trials} trials of {len(data['studies'])} studies to {path}", file=sys.stdout)
    return 0


__all__ = ["add_parser", "cmd_records"]
