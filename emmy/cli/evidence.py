"""`emmy evidence judge`: the nearest tier judged offline on measured records.

    emmy evidence judge [--records FILE.json ... | --storage URL] [--target T] [--prior FILE] [--json]

For each study of the records with enough measured candidates, the deploy hierarchy's answer
below `golden` as if the study's shape had no record and no golden entry (its neighbours'
records only: the nearest tier, vetted by the prior, then the prior and the rules), and its
regret: the answer's measured time there over the best measured there (`emmy.evidence.judge`).
The records are exports written by `emmy records export` (`--records`, repeatable) or the
tuning store (`--storage`, default: the store under EMMY_HOME). The prior that vets and
answers is `golden/<target>/prior.json` of the golden folder compiles use (or `--prior`). A
table per study, a summary line, and with `--json` a last line
`{"geomean_regret": ..., "worst_regret": ..., "n": ..., "coverage": ...}`.
"""

from __future__ import annotations

import json
from pathlib import Path

from emmy.diagnostics import EmmyError

ACTIONS = ("judge",)


def add_parser(sub) -> None:
    p = sub.add_parser("evidence", help="judge the deploy evidence hierarchy's nearest tier on measured records")
    p.add_argument("action", metavar="judge")
    p.add_argument("--records", action="append", default=[], metavar="FILE.json",
                   help="an export written by 'emmy records export' (repeatable; instead of the store)")
    p.add_argument("--storage", default=None, metavar="URL", help="the tuning store (default: sqlite under EMMY_HOME)")
    p.add_argument("--target", default=None, help="the target whose records to judge (default: sm_90a)")
    p.add_argument("--prior", default=None, metavar="FILE",
                   help="the fitted prior that vets and answers (default: golden/<target>/prior.json)")
    p.add_argument("--json", action="store_true", help="end with a JSON summary line")


def cmd_evidence(args) -> int:
    from emmy.targets import get_target

    if args.action not in ACTIONS:
        raise EmmyError(f"emmy evidence: unknown action '{args.action}'", hint="valid actions: " + ", ".join(ACTIONS))
    if args.storage and args.records:
        raise EmmyError("emmy evidence: give --storage or --records, not both")
    target = get_target(args.target or "sm_90a").name
    prior = _prior(args.prior, target)
    from emmy.cli.tune import _quiet_optuna, storage_url
    from emmy.evidence.judge import MIN_MEASURED, judge_nearest, summary
    from emmy.prior.data import records_data, samples_of

    _quiet_optuna()
    data = records_data(None if args.records else storage_url(args), args.records)
    keys, _ = samples_of(data, target)
    rows = judge_nearest(data, keys, target, prior)
    if not rows:
        where = ", ".join(name for name, _ in data)
        raise EmmyError(f"nothing to judge: no study of {target} in {where} has {MIN_MEASURED} or more distinct "
                        "measured candidates", hint="tune more trials (emmy tune --trials N), or give other records")
    _print(rows)
    s = summary(rows)
    print(f"nearest tier judged on {s['n']} of {len(rows)} studies (coverage {s['coverage']}): geomean regret "
          f"{s['geomean_regret']}, worst {s['worst_regret']}; prior {prior.path if prior is not None else 'none (rules only)'}")
    if args.json:
        print(json.dumps(s))
    return 0


def _prior(path: str | None, target: str):
    """The fitted prior that vets the nearest tier and answers below it (None where there is none)."""
    from emmy.cli.main import _golden_dir
    from emmy.prior.store import load_prior, prior_path

    if path is not None and not Path(path).exists():
        raise EmmyError(f"{path}: no such prior file")
    golden = _golden_dir()
    file = Path(path) if path else (prior_path(Path(golden), target) if golden else None)
    if file is None:
        return None
    prior = load_prior(file, target)
    return prior if prior.fitted else None


def _print(rows) -> None:
    from emmy.cli.table import format_table

    body = [(r.kernel, r.key[:21], r.shape, str(r.candidates), f"{r.best_s * 1e6:.2f}", r.tier, r.borrowed or "-",
             "-" if r.answer_s is None else f"{r.answer_s * 1e6:.2f}",
             "not measured here" if r.regret is None else f"{r.regret:.3f}") for r in rows]
    print(format_table(("kernel", "key", "shape", "measured", "best us", "answered by", "borrowed from", "answer us",
                        "regret"), body))


__all__ = ["add_parser", "cmd_evidence"]
