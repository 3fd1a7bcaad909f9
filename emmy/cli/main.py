"""`emmy`: the compiler's command line.

    emmy compile MODEL --layer N [--tokens T] [--target sm_90] [--ir STAGE] [--explain]
                       [--knob KERNEL.KNOB=VALUE ...] [--storage URL] [--time-passes] [-o FILE.cu]
    emmy run MODEL --layer N [--tokens T] [--backend cuda|interpret] [--check] [--storage URL]
    emmy tune MODEL [--layer N] [--tokens T,...] [--trials K] [--storage URL] [--workers W] ...
    emmy records list|show KEY|export FILE|import FILE [--storage URL]
    emmy prior fit|evaluate|show [--storage URL | --records FILE.json ...] [--target T] [--out FILE] [--json]

The environment variable EMMY_DUMP_DIR=DIR makes `emmy compile` write the module after every
pass (`NN-<pass>.mlir`), the CUDA source and the decisions into DIR. EMMY_HOME (default
~/.cache/emmy) is the compile cache folder: `emmy compile` keeps traced models in its `traces/`
(emmy.frontend.trace_cache), so compiling one again imports no PyTorch.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from dataclasses import replace
from pathlib import Path

from emmy.cli import evidence, golden, prior, records, tune
from emmy.cli.report import run_guarded
from emmy.context import STAGES
from emmy.diagnostics import EmmyError
from emmy.targets import DEFAULT_TARGET, target_names

TARGETS = tuple(target_names())


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one clear line (exit 1, like other user errors)."""

    def error(self, message: str):  # type: ignore[override]
        raise EmmyError(f"{self.prog}: {message}", hint=f"see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="emmy", description="Emmy compiles PyTorch models to CUDA.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", help="a known model id, a local Hugging Face directory, or path.py:fn")
        p.add_argument("--layer", type=int, default=None, help="decoder layer to compile")
        p.add_argument("--tokens", type=int, default=512,
                       help="sequence length (static shape); a path.py:fn factory that takes `tokens` gets it")
        p.add_argument("--target", default=None,
                       help="|".join(TARGETS) + f" (default: the GPU's, else {DEFAULT_TARGET})")
        p.add_argument("--knob", action="append", default=[], metavar="KERNEL.KNOB=VALUE",
                       help="pin a schedule knob (repeatable; KERNEL may be '*')")
        p.add_argument("--max-launches", type=int, default=0, metavar="N",
                       help="trade helper launches (combine kernels) until each function makes at most N per call "
                            "(default: no budget; helpers are faster under CUDA-graph replay)")
        p.add_argument("--seed", type=int, default=0, help="seed for random weights and inputs")
        p.add_argument("--evidence", default=None, metavar="TIER,TIER,...",
                       help="the evidence tiers decide-forks may use: pinned,local,golden,nearest,prior,rule "
                            "(default: all, or EMMY_EVIDENCE)")
        p.add_argument("--tracer", default="capture", metavar="capture|export",
                       help="how the model is traced: capture (default, fast) or torch.export; same IR")
        p.add_argument("--storage", default=None, metavar="URL",
                       help="the tuning store the local tier reads (any URL emmy tune takes, e.g. a team's "
                            "postgresql://...; default: records.db under EMMY_HOME, where there is one)")

    c = sub.add_parser("compile", help="compile a model to CUDA source")
    model_args(c)
    c.add_argument("--ir", choices=None, default=None, metavar="STAGE",
                   help="print one stage: " + "|".join(STAGES) + " (tile is shown after decisions)")
    c.add_argument("--explain", action="store_true", help="print every decision, its tier and reason")
    c.add_argument("--time-passes", action="store_true", help="print the time each pass took")
    c.add_argument("-o", "--output", default=None, help="write the CUDA source here")

    r = sub.add_parser("run", help="compile and run a layer, optionally checking against PyTorch")
    model_args(r)
    r.add_argument("--backend", choices=None, default=None, help="cuda (default with a GPU) or interpret")
    r.add_argument("--check", action="store_true", help="compare with PyTorch; exit 1 past the tolerance")
    r.add_argument("--tolerance", type=float, default=1e-2, help="relative error allowed (default 1e-2)")
    r.add_argument("--input-ids", default=None, metavar="ID,ID,...",
                   help="token ids for a whole-model run (their count sets --tokens)")
    r.add_argument("--text", default=None, help="text for a whole-model run, tokenized by the model "
                   "directory's own tokenizer (needs a local model with tokenizer files)")
    tune.add_parser(sub)
    records.add_parser(sub)
    golden.add_parser(sub)
    prior.add_parser(sub)
    evidence.add_parser(sub)
    return ap


def default_target() -> str:
    """The GPU's architecture when one is present, else DEFAULT_TARGET. Without a CUDA driver
    there is no GPU, and PyTorch is not imported to find that out (a trace cache hit imports
    no torch at all)."""
    if not _has_cuda_driver():
        return DEFAULT_TARGET
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
    except Exception:
        pass
    return DEFAULT_TARGET


def _has_cuda_driver() -> bool:
    """Whether the CUDA driver library loads (what torch.cuda.is_available needs first)."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _options(args, stop_after: str):
    from emmy.driver import CompileOptions

    target = args.target or default_target()
    if target not in TARGETS:
        raise EmmyError(f"unknown target '{target}'", hint="valid targets: " + ", ".join(TARGETS))
    if args.max_launches < 0:
        raise EmmyError(f"--max-launches {args.max_launches}: give a number of launches, or 0 for no budget")
    if args.tracer not in ("capture", "export"):
        raise EmmyError(f"unknown tracer '{args.tracer}'", hint="valid tracers: capture, export")
    # Dump files must each be valid IR; otherwise the module is verified after import and after
    # the last pass (every pass is verified by its tests and by emmy-opt).
    verify_each = bool(os.environ.get("EMMY_DUMP_DIR"))
    return CompileOptions(
        model=args.model, layer=args.layer, tokens=args.tokens, target=target,
        pins=tuple(args.knob), max_launches=args.max_launches, stop_after=stop_after, seed=args.seed, tracer=args.tracer,
        verify_each=verify_each, records=args.storage or _local_store(), golden=_golden_dir(),
        evidence=_evidence(args),
    )


def _evidence(args) -> str:
    """--evidence, else EMMY_EVIDENCE, else every tier; checked here so a bad name is a clear
    error before anything is compiled."""
    from emmy.evidence import parse_tiers

    text = args.evidence if args.evidence is not None else os.environ.get("EMMY_EVIDENCE", "")
    where = "--evidence" if args.evidence is not None else "EMMY_EVIDENCE"
    try:
        parse_tiers(text)
    except EmmyError as e:
        raise EmmyError(f"{where} '{text}': {e.message}", hint=e.hint) from None
    return text


def _golden_dir() -> str:
    """EMMY_GOLDEN, else the golden folder that ships with Emmy (where there is one)."""
    from emmy.golden import default_dir

    chosen = os.environ.get("EMMY_GOLDEN")
    if chosen:
        return chosen
    shipped = default_dir()
    return str(shipped) if shipped.is_dir() else ""


def _local_store() -> str:
    """The default tuning store (records.db under EMMY_HOME) for decide-forks' local tier, when
    there is one: compiling never creates a store."""
    from emmy.records.store import DEFAULT_FILE, default_url

    home = _emmy_home()
    return default_url(home) if (home / DEFAULT_FILE).is_file() else ""


def cmd_compile(args) -> int:
    from emmy.driver import compile_model

    if args.ir is not None and args.ir not in STAGES:
        raise EmmyError(f"unknown stage '{args.ir}'", hint="valid stages: " + ", ".join(STAGES))
    dump_dir = os.environ.get("EMMY_DUMP_DIR")
    stop = "cuda" if (dump_dir or args.ir is None) else args.ir
    # compiling reads and fills the trace cache (emmy.frontend.trace_cache) under EMMY_HOME
    options = replace(_options(args, stop), cache_dir=str(_emmy_home()))
    if args.layer is None and not _is_factory(args.model):
        return _compile_whole_model(args, options, dump_dir)
    rec = _Recorder(Path(dump_dir) if dump_dir else None, args.ir)
    result = compile_model(options, after_each=rec.after)
    module = result.module
    source = _source(module) if stop == "cuda" else None
    rec.finish(module, source)
    if source is not None:
        _warn_launch_budget(module, options)
    if args.output and source is not None:
        _write(Path(args.output), source)
    if args.ir is not None:
        sys.stdout.write(rec.stage_text)
    elif not args.explain:
        _print_summary(module, options, rec.writer)
    if args.explain:
        _print_decisions(rec.decisions, options)
    if args.time_passes:
        _print_timings(result.timings)
    return 0


class _Recorder:
    """What `emmy compile` keeps while one module goes down the pipeline: the dump files (when
    dumping), the text of the `--ir` stage, and the decisions (taken right after decide-forks:
    the tile ops and their knobs are gone after kernel lowering)."""

    def __init__(self, dump_dir: Path | None, ir: str | None):
        from emmy.cli.dump import DumpWriter

        self.writer = DumpWriter(dump_dir) if dump_dir is not None else None
        self.ir = ir
        self.stage_text = ""
        self.decisions: list = []

    def after(self, name: str, module) -> None:
        from emmy.ir_io import print_module

        if name == "decide-forks":
            self.decisions = _decisions(module)
        text = self.writer.write_stage(name, module) if self.writer is not None else None
        # The last pass of the asked stage wins; tile is shown after decide-forks.
        if self.ir is not None and _stage_of(name) == self.ir and (self.ir != "tile" or name == "decide-forks"):
            self.stage_text = text if text is not None else print_module(module)

    def finish(self, module, source: str | None) -> None:
        from emmy.targets import module_target

        if self.writer is not None:
            self.writer.write_source(_func_name(module), source, module_target(module).name)
            self.writer.write_decisions(self.decisions)


def _is_factory(model: str) -> bool:
    path, sep, fn = model.rpartition(":")
    return bool(sep) and path.endswith(".py")


def _compile_whole_model(args, options, dump_dir) -> int:
    """`emmy compile MODEL` without --layer: the embedding, each distinct layer structure once,
    the final norm. Dumps go to one subdirectory per part."""
    from emmy.driver import compile_whole_model

    recorders: dict[str, _Recorder] = {}

    def after_each(part: str, name: str, module) -> None:
        if part not in recorders:
            recorders[part] = _Recorder(Path(dump_dir) / part if dump_dir else None, args.ir)
        recorders[part].after(name, module)

    result = compile_whole_model(options, after_each=after_each)
    total = 0
    for part in result.parts:
        module = part.result.module
        rec = recorders[part.name]
        rec.finish(module, _source(module) if options.stop_after == "cuda" else None)
        if options.stop_after == "cuda":
            _warn_launch_budget(module, options, f"{part.name}: ")
        if args.ir is not None:
            sys.stdout.write(rec.stage_text)
            continue
        if args.explain:
            print(f"{part.name}:")
            _print_decisions(rec.decisions, options)
            continue
        from emmy.backend.plan import launch_plan

        launches = len(launch_plan(module).forward_launches)
        uses = len(part.layers) if part.layers else 1
        total += launches * uses
        which = f" (used by layers {_ranges(part.layers)})" if part.layers else ""
        print(f"{part.name}{which}: {launches} kernel launches")
    if args.ir is None and not args.explain:
        print(f"{options.model}, {options.tokens} tokens, target {options.target}: "
              f"{len(result.parts)} distinct parts compiled, {total} kernel launches per forward pass")
        if dump_dir:
            print(f"wrote {sum(r.writer.count for r in recorders.values())} files under {dump_dir}")
    if args.output:
        texts = [_source(p.result.module) for p in result.parts]
        _write(Path(args.output), "\n".join(texts))
    if args.time_passes:
        _print_timings(result.timings)
    return 0


def _warn_launch_budget(module, options, where: str = "") -> None:
    """A line on stderr where a function makes more launches than --max-launches allows (the
    budget trades every helper launch it can; pinned answers and kernels without one stay)."""
    from emmy.backend.plan import launch_plan

    budget = options.max_launches
    launches = len(launch_plan(module).forward_launches)
    if budget and launches > budget:
        print(f"warning: {where}--max-launches {budget} not met: {launches} launches per call (a budget "
              "below the number of kernels trades nothing; above it, pinned answers and kernels "
              "without a helper launch to trade keep theirs)", file=sys.stderr)


def _ranges(indices: list[int]) -> str:
    if indices == list(range(indices[0], indices[-1] + 1)) and len(indices) > 1:
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(map(str, indices))


def _stage_of(pass_name: str) -> str:
    from emmy.passes.pipeline import stage_after

    return "torch" if pass_name == "torch-import" else stage_after(pass_name)


def _func_name(module) -> str:
    from emmy.backend.plan import launch_plan

    return launch_plan(module).name


def _decisions(module):
    from emmy.cli.report import keyed_decisions

    return keyed_decisions(module)


def _source(module) -> str:
    from emmy.backend.plan import cuda_source

    return cuda_source(module)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise EmmyError(f"cannot write '{path}': {e.strerror}") from None


def _print_summary(module, options, writer) -> None:
    from emmy.backend.plan import launch_plan

    plan = launch_plan(module)
    factory = _is_factory(options.model)
    if factory:  # a factory brings its own inputs: show their shapes
        inputs = sorted((b.position, list(b.shape)) for b in plan.buffers if b.role == "input")
        what = "inputs " + ", ".join(str(shape) for _, shape in inputs)
    else:
        what = f"{options.tokens} tokens"
    where = f" layer {options.layer}" if options.layer is not None and not factory else ""
    print(f"{options.model}{where}, {what}, target {options.target}: "
          f"{len(plan.forward_launches)} kernel launches")
    for launch in plan.forward_launches:
        print(f"  {launch.kernel:<40} grid {tuple(launch.grid)} block {tuple(launch.block)} smem {launch.smem}")
    if plan.prepare_launches:
        print(f"once, when the weights are bound: {len(plan.prepare_launches)} kernel launches")
        for launch in plan.prepare_launches:
            print(f"  {launch.kernel:<40} grid {tuple(launch.grid)} block {tuple(launch.block)} smem {launch.smem}")
    if writer is not None:
        print(f"wrote {writer.count} files to {writer.directory}")


def _print_decisions(decisions, options) -> None:
    from emmy.cli.report import decisions_table, evidence_table
    from emmy.records.store import display_url

    print(decisions_table(decisions))
    evidence = evidence_table(decisions)
    print()
    if evidence:
        print(evidence)
    store = display_url(options.records) if options.records else "none"
    golden = options.golden or "none"
    print(f"evidence: tiers {options.evidence or 'all'}; store {store}; golden folder {golden}"
          + ("" if evidence else "; nothing recorded matched these kernels' keys or structures"))


def _print_timings(timings) -> None:
    total = sum(t for _, t in timings)
    for name, t in timings:
        print(f"  {t * 1000:8.1f} ms  {name}", file=sys.stderr)
    print(f"  {total * 1000:8.1f} ms  total", file=sys.stderr)


def cmd_run(args) -> int:
    from emmy.driver import compile_model

    backend = args.backend
    if backend not in (None, "cuda", "interpret"):
        raise EmmyError(f"unknown backend '{backend}'", hint="valid backends: cuda, interpret")
    if not args.tolerance > 0:
        raise EmmyError(f"--tolerance {args.tolerance}: give the relative error allowed, a positive number such as 1e-2")
    if backend is None:
        backend = "cuda" if _has_gpu() else None
        if backend is None:
            raise EmmyError("no CUDA device found", hint="use '--backend interpret' to run on the CPU")
    whole = args.layer is None and not _is_factory(args.model)
    input_ids = _input_ids(args) if whole else None
    if (args.input_ids or args.text) and not whole:
        raise EmmyError("--input-ids and --text are for whole-model runs (leave out --layer)")
    if input_ids is not None:
        args.tokens = int(input_ids.shape[1])
    if backend == "cuda":
        if not _has_gpu():
            raise EmmyError("no CUDA device found", hint="use '--backend interpret' to run on the CPU")
        from emmy.backend.run import run_model_on_gpu, run_on_gpu

        if whole:
            report = run_model_on_gpu(_options(args, "cuda"), cache_dir=_emmy_home(), input_ids=input_ids)
        else:
            report = run_on_gpu(_options(args, "cuda"), cache_dir=_emmy_home())
    elif whole:
        from emmy.driver import compile_whole_model
        from emmy.execute import run_model_interpreted

        report = run_model_interpreted(compile_whole_model(_options(args, "tile")), input_ids)
    else:
        from emmy.execute import run_interpreted

        result = compile_model(_options(args, "tile"))
        report = run_interpreted(result.module, result.traced)
    what = "pooled embedding" if whole else "output"
    if report.baseline_error is None:
        print(f"{what} {report.describe()}; relative error vs PyTorch {report.rel_error:.3e}")
    else:
        print(f"{what} {report.describe()}; relative error vs PyTorch float32 "
              f"{report.rel_error:.3e} (PyTorch bf16: {report.baseline_error:.3e})")
    if not args.check:
        return 0
    allowed = report.allowed(args.tolerance)
    why = f"the tolerance {args.tolerance:.1e}"
    if allowed > args.tolerance:
        why = f"{allowed:.1e} (1.5x PyTorch's own bf16 error)"
    if report.rel_error <= allowed:
        print(f"ok: relative error {report.rel_error:.3e} within {why}")
        return 0
    print(f"FAILED: relative error {report.rel_error:.3e} over {why}")
    print(f"error: relative error {report.rel_error:.3e} exceeds {why}", file=sys.stderr)
    return 1


def _input_ids(args):
    """`--input-ids 1,2,3` or `--text ...` as a [1, T] int64 tensor (None when neither is given)."""
    import torch

    if args.input_ids and args.text:
        raise EmmyError("give either --input-ids or --text, not both")
    if args.input_ids:
        try:
            ids = [int(x) for x in args.input_ids.split(",") if x.strip()]
        except ValueError:
            raise EmmyError(f"--input-ids: expected comma-separated integers, got '{args.input_ids}'") from None
        if not ids:
            raise EmmyError("--input-ids: no token ids given")
        return torch.tensor([ids], dtype=torch.int64)
    if args.text is not None:
        from emmy.frontend.tokenize import tokenize

        return tokenize(args.model, args.text)
    return None


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _emmy_home() -> Path:
    home = os.environ.get("EMMY_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "emmy"


COMMANDS = {"compile": cmd_compile, "run": cmd_run, "tune": tune.cmd_tune, "records": records.cmd_records,
            "golden": golden.cmd_golden, "prior": prior.cmd_prior, "evidence": evidence.cmd_evidence}


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args)


def main(argv: list[str] | None = None) -> None:
    """The `emmy` console script: run the command and end the process with its exit code.

    The process leaves through `os._exit` once its output is flushed: with PyTorch loaded, the
    interpreter's orderly shutdown (finalizing every module) takes another 0.5-0.8 s on a 2-core
    machine and has nothing left to do (files are closed, work is finished). `run` is the entry
    for calling a command from Python.

    The cyclic garbage collector is off for the process: xDSL's IR is a web of parent and use
    links, so the collector keeps walking every live op while the passes run (about 10% of a
    layer's compile on a 2-core machine) and finds little to free; reference counting still frees
    everything else. A whole-model compile peaks at the same memory (about 320 MB) either way."""
    gc.disable()
    code = run_guarded(run, sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader that left, a closed stream
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
