"""`emmy prior`: fit the prior's coefficients to measurements, and judge it by regret.

    emmy prior fit [--storage URL | --records FILE.json ...] [--target T] [--out FILE]
                   [--model MODEL [--layer N] --tokens T,...]
    emmy prior evaluate [--storage URL | --records FILE.json ...] [--target T] [--json]
    emmy prior show [--target T] [--prior FILE]

The measurements are the tuning store's trials (`--storage`, default: the store under
EMMY_HOME) or exports written by `emmy records export` (`--records`, repeatable). `fit` writes
`<target>/prior.json` in the golden folder a compile reads (EMMY_GOLDEN, else the `golden/` that
ships with Emmy), or `--out`; `evaluate` prints the regret of the prior's picks on
keys it was not fitted on (leave one shape out, leave one model out), and with `--json` a last
line `{"geomean_regret": ..., "worst_regret": ..., "n": ...}`; `--model` with `--tokens` rebuilds the kernels of
studies that do not keep their module (tuned before the store kept them) by compiling the model.
`show` prints a prior file (default: that folder's
`<target>/prior.json`; the unfitted defaults where there is none) and its margins.
"""

from __future__ import annotations

import json
from pathlib import Path

from emmy.cli.golden import default_folder
from emmy.diagnostics import EmmyError

ACTIONS = ("fit", "evaluate", "show")


def add_parser(sub) -> None:
    p = sub.add_parser("prior", help="fit the prior's cost model to measurements, or judge it by regret")
    p.add_argument("action", metavar="fit|evaluate|show")
    p.add_argument("--storage", default=None, metavar="URL", help="the tuning store (default: sqlite under EMMY_HOME)")
    p.add_argument("--records", action="append", default=[], metavar="FILE.json",
                   help="an export written by 'emmy records export' (repeatable; instead of the store)")
    p.add_argument("--target", default=None, help="the target whose measurements to use (default: sm_90a)")
    p.add_argument("--out", default=None, metavar="FILE", help="fit: where to write (default: <target>/prior.json in the golden folder a compile reads)")
    p.add_argument("--json", action="store_true", help="evaluate: end with a JSON summary line")
    p.add_argument("--model", default=None, help="fit/evaluate: rebuild kernels the records do not keep from this model")
    p.add_argument("--layer", type=int, default=None, help="with --model: the layer (default: the whole model)")
    p.add_argument("--tokens", default=None, metavar="T[,T,...]", help="with --model: the token counts it was tuned at")
    p.add_argument("--prior", default=None, metavar="FILE", help="show: the prior file (default: <target>/prior.json in the golden folder a compile reads)")


def cmd_prior(args) -> int:
    from emmy.targets import get_target

    if args.action not in ACTIONS:
        raise EmmyError(f"emmy prior: unknown action '{args.action}'", hint="valid actions: " + ", ".join(ACTIONS))
    target = get_target(args.target or "sm_90a").name
    if args.action == "show":
        return _show(Path(args.prior) if args.prior else None, target)
    if args.storage and args.records:
        raise EmmyError("emmy prior: give --storage or --records, not both")
    keys, sources, skipped = _samples(args, target)
    for line in skipped:
        print(f"skipped {line}")
    if args.action == "fit":
        return _fit(args, target, keys, sources)
    return _evaluate(args, target, keys)


def _samples(args, target: str):
    from emmy.cli.tune import _quiet_optuna, storage_url
    from emmy.prior.data import records_data, samples_of

    _check_model_flags(args)
    _quiet_optuna()
    url = None if args.records else storage_url(args)
    data = records_data(url, args.records)
    keys, skipped = samples_of(data, target, _modules(args, target))
    if not keys:
        where = ", ".join(name for name, _ in data)
        why = "".join(f"\n  skipped: {line}" for line in skipped)
        raise EmmyError(f"no measurements for {target} in {where}{why}",
                        hint="tune kernels on that target first (emmy tune --target ...), or give other records")
    return keys, [name for name, _ in data], skipped


def _check_model_flags(args) -> None:
    if args.model is None and (args.tokens is not None or args.layer is not None):
        raise EmmyError("emmy prior: --tokens and --layer go with --model")
    if args.model is not None and args.tokens is None:
        raise EmmyError("emmy prior: --model needs --tokens (the token counts the records were tuned at)")


def _modules(args, target: str) -> dict[str, str] | None:
    """Key id -> module of the kernels of --model at --tokens (None without --model)."""
    from emmy.cli.tune import parse_tokens

    if args.model is None:
        return None
    from emmy.driver import CompileOptions
    from emmy.prior.data import modules_of

    return modules_of(CompileOptions(model=args.model, layer=args.layer, target=target), parse_tokens(args.tokens))


def _fit(args, target: str, keys, sources) -> int:
    from importlib.metadata import version

    from emmy.prior.fit import fit
    from emmy.prior.store import prior_path, write_prior

    samples = [s for kd in keys.values() for s in kd.samples]
    prior = fit(samples, target, sources, version("emmy"))
    out = Path(args.out) if args.out else _shown(prior_path(Path(default_folder()), target))
    write_prior(out, prior)
    print(f"fitted the {target} prior to {len(samples)} measured candidates of {len(keys)} kernel keys; wrote {out}")
    for kind, r in sorted(prior.residuals.items()):
        print(f"  {kind}: {r['keys']} keys, {r['trials']} candidates, residual spread {r['spread']:.3f}, "
              f"{_trust(prior, kind)}")
    return 0


def _shown(path: Path) -> Path:
    """`path` relative to the working directory where it lies under it (golden/sm_90a/prior.json
    from the repository root), else as it is."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _trust(prior, kind: str) -> str:
    """The margin of a kind and where it comes from, and the learned correction kept for it."""
    held = prior.residuals.get(kind, {}).get("held_out")
    where = (f"held out: {held['pairs']} pairs, worst x{held['worst']:.2f}" if held else "from the spread")
    across = held.get("across") if held else None
    other = (f"; x{prior.margin(kind, across=True):.2f} on other units than the rules' "
             f"({across['pairs']} pairs, worst x{across['worst']:.2f})" if across else "")
    weights = prior.correction.get(kind)
    corr = f"learned correction of {len(weights)} knob values" if weights else "no learned correction"
    return f"margin x{prior.margin(kind):.2f} ({where}){other}, {corr}"


def _show(path: Path | None, target: str) -> int:
    from emmy.prior.model import DEFAULTS
    from emmy.prior.store import load_prior, prior_path

    if path is not None and not path.exists():
        raise EmmyError(f"{path}: no such prior file")
    path = path or _shown(prior_path(Path(default_folder()), target))
    prior = load_prior(path, target)
    if not prior.fitted:
        print(f"{target}: no fitted prior: the default coefficients (margin x{prior.margin('contraction'):.2f})")
        print(f"  (no file at {path})")
    else:
        data = prior.data
        print(f"{target}: prior fitted {prior.date} by Emmy {prior.emmy or '?'} to {data.get('trials', '?')} "
              f"candidates of {len(data.get('keys') or {})} keys ({path})")
        for kind, r in sorted(prior.residuals.items()):
            print(f"  {kind}: {r.get('keys', '?')} keys, residual spread {r['spread']:.3f}, {_trust(prior, kind)}")
    for name, v in prior.coeffs.items():
        print(f"  {name} = {v:.4g}" + ("" if v == DEFAULTS[name] else f"  (default {DEFAULTS[name]:.4g})"))
    return 0


def _evaluate(args, target: str, keys) -> int:
    from emmy.cli.table import format_table
    from emmy.prior.evaluate import evaluate, newest_studies, summary

    rows = evaluate(keys, target)
    older = len(keys) - len(newest_studies(keys))
    if older:
        print(f"{older} older {'study' if older == 1 else 'studies'} of a kernel on a shape that a newer study "
              f"(another pipeline's key) also measured: held out beside it, not judged again")
    body = [(r.scheme, r.kernel, r.key[:12], r.kind, str(r.candidates), f"{r.best_s * 1e6:.2f}",
             f"{r.top_regret:.3f}", f"{r.regret:.3f}", r.picked, r.fusion or "-") for r in rows]
    print(format_table(("held out", "kernel", "key", "kind", "measured", "best us", "top regret", "regret", "pick",
                        "fusion fork"), body))
    s = summary(rows)
    for scheme, p in s["by"].items():
        print(f"leave one {scheme} out: geomean regret {p['geomean_regret']}, worst {p['worst_regret']}, "
              f"over {p['n']} kernels (top-ranked pick: geomean {p['top_geomean_regret']})")
    if args.json:
        print(json.dumps({"geomean_regret": s["geomean_regret"], "worst_regret": s["worst_regret"], "n": s["n"],
                          "by": s["by"]}))
    return 0


__all__ = ["add_parser", "cmd_prior"]
