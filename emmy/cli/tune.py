"""`emmy tune`: answer every fork of a layer or model by measurement, into the tuning store.

    emmy tune MODEL [--layer N] [--tokens T[,T,...]] [--trials K] [--time-budget S]
                    [--kernel NAME ...] [--storage URL] [--target sm_XX] [--workers W] [--deadline S]

One Optuna study per distinct kernel key (`emmy.search`), in the store at `--storage` (default:
SQLite `records.db` under EMMY_HOME, `~/.cache/emmy`). Re-running continues the same studies.
Without `--kernel`, the layer (or the whole model) is then timed with all its tuned answers
against its deploy answers at each token count, and the tuned answers that lose in context are
recorded so that compiles of that layer keep the deploy answer (`emmy.search.layer_check`).
`--measurer cost` replaces the GPU by a deterministic cost from each candidate's plan (for
tests and for trying the tuner without a GPU: its times mean nothing).
"""

from __future__ import annotations

import sys
import time

from emmy.diagnostics import EmmyError


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="measure schedules of every kernel and record the best")
    p.add_argument("model", help="a known model id, a local Hugging Face directory, or path.py:fn")
    p.add_argument("--layer", type=int, default=None, help="decoder layer to tune (default: the whole model)")
    p.add_argument("--tokens", default="512", metavar="T[,T,...]", help="token counts to tune at (default 512)")
    p.add_argument("--trials", type=int, default=None, metavar="K",
                   help="measured candidates per kernel (default 30, or unlimited with --time-budget)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S", help="seconds per kernel per worker")
    p.add_argument("--kernel", action="append", default=[], metavar="NAME", help="tune only this kernel (repeatable)")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="the store: any database URL Optuna accepts (default: sqlite under EMMY_HOME)")
    p.add_argument("--target", default=None, help="sm_80|sm_86|sm_89|sm_90|sm_90a (default: the GPU's)")
    p.add_argument("--workers", type=int, default=1, metavar="W", help="measuring processes (default 1)")
    p.add_argument("--devices", default=None, metavar="all|0,1,...",
                   help="one measuring worker per GPU, each pinned to its device (replaces --workers)")
    p.add_argument("--batch", type=int, default=4, metavar="N",
                   help="candidates a worker builds together ahead of the GPU (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler, the weights and the inputs")
    p.add_argument("--tracer", default="capture", metavar="capture|export", help="how the model is traced")
    p.add_argument("--measurer", default="gpu", metavar="gpu|cost[:S]",
                   help="gpu (default), or cost: a deterministic cost from each plan, no GPU (a test aid)")
    p.add_argument("--deadline", type=float, default=None, metavar="S",
                   help="seconds one candidate may take on the GPU before it is a failed trial with status "
                        "'timeout' and its measuring process is replaced (default: the time budget within "
                        "20..60 s, else 60)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars, and no line per kernel as its best is named (only the table)")


def parse_tokens(text: str) -> list[int]:
    try:
        tokens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise EmmyError(f"--tokens '{text}': expected token counts separated by commas, e.g. 512,4096") from None
    if not tokens or any(t < 1 for t in tokens):
        raise EmmyError(f"--tokens '{text}': give one or more token counts of at least 1")
    return list(dict.fromkeys(tokens))


def budget_of(args):
    from emmy.search.study import Budget

    if args.trials is not None and args.trials < 1:
        raise EmmyError(f"--trials {args.trials}: give at least 1 trial per kernel")
    if args.time_budget is not None and not args.time_budget > 0:
        raise EmmyError(f"--time-budget {args.time_budget}: give a positive number of seconds")
    trials = args.trials if args.trials is not None or args.time_budget is not None else 30
    return Budget(trials=trials, seconds=args.time_budget)


def deadline_of(args) -> float:
    """Seconds one candidate's measurement may take (`--deadline`, else from the time budget)."""
    if args.deadline is not None:
        if not args.deadline > 0:
            raise EmmyError(f"--deadline {args.deadline}: give a positive number of seconds")
        return args.deadline
    if args.time_budget is not None:
        return min(60.0, max(20.0, args.time_budget))
    return 60.0


def storage_url(args) -> str:
    from emmy.cli.main import _emmy_home
    from emmy.records.store import default_url

    return args.storage if args.storage else default_url(_emmy_home())


def cmd_tune(args) -> int:
    from emmy.cli.main import TARGETS, _golden_dir, _has_gpu, default_target
    from emmy.cli.table import format_table

    tokens = parse_tokens(args.tokens)
    budget = budget_of(args)
    deadline = deadline_of(args)
    if args.workers < 1:
        raise EmmyError(f"--workers {args.workers}: give at least 1 measuring process")
    if args.batch < 1:
        raise EmmyError(f"--batch {args.batch}: give at least 1 candidate per batch")
    if args.tracer not in ("capture", "export"):
        raise EmmyError(f"unknown tracer '{args.tracer}'", hint="valid tracers: capture, export")
    kind = args.measurer.partition(":")[0]
    if kind != "gpu":
        from emmy.search.cost import make_measurer

        make_measurer(args.measurer)  # checks the spec before anything is compiled or stored
    if kind == "gpu" and not _has_gpu():
        raise EmmyError("emmy tune measures candidates on a GPU, and no CUDA device was found",
                        hint="to try the tuner without one, '--measurer cost' ranks candidates by a "
                             "deterministic cost from their plans (its times mean nothing)")
    devices = parse_devices(args.devices, kind, args.workers) if args.devices is not None else None
    workers = len(devices) if devices else args.workers
    target = args.target or default_target()
    if target not in TARGETS:
        raise EmmyError(f"unknown target '{target}'", hint="valid targets: " + ", ".join(TARGETS))
    from emmy.records.store import open_store, store_errors

    optuna_level = _quiet_optuna()
    store = open_store(storage_url(args))
    assert store is not None
    from emmy.driver import CompileOptions
    from emmy.search.task import select, tasks_of
    from emmy.search.tune import HEADER, cost_line, fork_notes, outcome_notes, outcome_rows, tune

    layer = args.layer
    options = CompileOptions(model=args.model, layer=layer, tokens=tokens[0], target=target, seed=args.seed,
                             tracer=args.tracer, verify_each=False, golden=_golden_dir())
    started = time.monotonic()
    tasks = select(tasks_of(options, tokens), args.kernel)
    finding_s = time.monotonic() - started
    from emmy.evidence.prior import prior_decider
    from emmy.targets import get_target

    decider = prior_decider(options.golden, get_target(target))  # a fitted prior only
    progress = None if args.quiet else sys.stderr
    from emmy.cli.main import _emmy_home

    with store_errors(store.name):
        outcomes, problems = tune(tasks, store, budget, args.measurer, workers, args.seed, args.batch,
                                  cache_dir=_emmy_home(), progress=progress, devices=devices,
                                  deadline_s=deadline, optuna_level=optuna_level, log=progress,
                                  prior=decider.prior if decider else None)
    layers, layer_note, checking_s = [], "", 0.0
    if args.kernel:
        layer_note = "the layer check (the layer timed with all its tuned answers) skipped: --kernel tunes only some kernels"
    else:
        checking = time.monotonic()
        with store_errors(store.name):
            layers = _check_layers(args, options, tokens, tasks, outcomes, store, devices, progress)
        checking_s = time.monotonic() - checking
    from emmy.search.layer_check import layer_rows

    print(format_table(HEADER, outcome_rows(outcomes) + layer_rows(layers)))
    print(f"records in {store.name}")
    for note in outcome_notes(outcomes, deadline):
        print(f"note: {note}", file=sys.stderr)
    if progress is not None:  # (--quiet: only the table)
        for note in fork_notes(outcomes):
            print(f"note: {note}", file=sys.stderr)
    if layer_note and progress is not None:
        print(f"note: {layer_note}", file=sys.stderr)
    if progress is not None:
        print(cost_line(outcomes, finding_s, checking_s), file=sys.stderr)
    for o in layers:
        if o.problem:
            print(f"note: {o.layer.where()} at {o.layer.tokens} tokens not checked: {o.note}", file=sys.stderr)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems or any(o.failed for o in layers) else 0


def _check_layers(args, options, tokens, tasks, outcomes, store, devices, progress):
    """The layer check at each token count (`emmy.search.layer_check`): with the GPU measurer the
    layer (or the whole model, as tools/bench.py's model case) is traced and timed on the GPU (the
    first of `devices`), with the cost measurer its kernels' costs are summed (the logic runs;
    the times mean nothing)."""
    from emmy.search.layer_check import CostLayerTimer, GpuLayerTimer, check_layers

    bests = {o.task.key_id: dict(o.best.values) for o in outcomes if o.best is not None}
    alone = {o.task.key_id: o.best.time_s for o in outcomes if o.best is not None}
    gpu = args.measurer.partition(":")[0] == "gpu"
    if gpu:
        from emmy.cli.main import _emmy_home

        def make_timer(layer):
            import torch

            from emmy.frontend import resolve_model, trace_layer

            if devices:
                torch.cuda.set_device(devices[0])
            source = resolve_model(options.model)
            if options.layer is None and source.kind != "factory":  # a whole model, timed as a whole
                from emmy.frontend.whole_model import trace_model
                from emmy.measure.layer import ModelCase

                traced = ModelCase(trace_model(source, layer.tokens, seed=options.seed, tracer=options.tracer))
            else:
                traced = trace_layer(source, options.layer or 0, layer.tokens, seed=options.seed, tracer=options.tracer)
            return GpuLayerTimer(traced, options.target, _emmy_home())
        suffix = ""
    else:
        make_timer, suffix = CostLayerTimer, " (the cost measurer's kernel costs summed: they mean nothing)"
    say = (lambda line: print(line + suffix, file=progress, flush=True)) if progress is not None else None
    return check_layers(store, options, tokens, tasks, bests, alone, make_timer, say, measured=gpu)


def parse_devices(text: str, measurer: str, workers: int, count: int | None = None) -> list[int]:
    """`--devices all` or `0,1,...` as GPU indices (`count`: the GPUs there are, asked of PyTorch
    when None). Each index is one measuring worker pinned to that GPU."""
    if measurer != "gpu":
        raise EmmyError(f"--devices {text}: only the GPU measurer measures on devices (not --measurer {measurer})")
    if workers != 1:
        raise EmmyError(f"--devices {text} with --workers {workers}: give one of them (--devices starts one worker per GPU)")
    if count is None:
        import torch

        count = torch.cuda.device_count()
    if text.strip() == "all":
        devices = list(range(count))
    else:
        try:
            devices = [int(d) for d in text.split(",") if d.strip()]
        except ValueError:
            raise EmmyError(f"--devices '{text}': expected 'all' or GPU indices separated by commas, e.g. 0,1") from None
    bad = [d for d in devices if not 0 <= d < count]
    if not devices or bad or len(set(devices)) != len(devices):
        what = f"no GPU {bad[0]}" if bad else "each GPU once, at least one"
        raise EmmyError(f"--devices '{text}': {what}", hint=f"this machine has {count} GPU(s): 0..{count - 1}")
    return devices


def _quiet_optuna() -> int:
    """Optuna logs each study it creates at INFO; the progress bars say enough. The level, for
    the worker processes too."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.logging.WARNING


__all__ = ["add_parser", "cmd_tune", "parse_devices"]
