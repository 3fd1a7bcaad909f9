"""`emmy-opt`: run Emmy passes on an IR file, like mlir-opt.

    emmy-opt FILE.mlir -p 'convert-loop-to-tile,decide-forks{pin="*.block_m=64"}'
    emmy-opt FILE.mlir --pass-pipeline='builtin.module(loop-fuse)'
    emmy-opt --list-passes

The module is verified after parsing and after every pass. Output goes to stdout (or -o FILE).
"""

from __future__ import annotations

import argparse
import sys

from emmy.cli.report import run_guarded
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.ir_io import mlir_pipeline_to_spec, parse_module, parse_pipeline, print_module, run_passes
from emmy.passes.pipeline import pass_names

SPLIT_MARKER = "// -----"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="emmy-opt", description="Run Emmy passes on an IR file.")
    ap.add_argument("input", nargs="?", help="IR file ('-' or nothing for stdin)")
    ap.add_argument("-p", "--passes", default="", help="passes, xDSL syntax: 'a,b{opt=1}'")
    ap.add_argument("--pass-pipeline", default=None, help="MLIR syntax: 'builtin.module(a,b{opt=1})'")
    ap.add_argument("-o", "--output", default=None, help="write here instead of stdout")
    ap.add_argument("--print-op-generic", action="store_true", help="print the generic form")
    ap.add_argument("--list-passes", action="store_true", help="print Emmy's pass names and exit")
    ap.add_argument("--split-input-file", action="store_true", help=f"treat '{SPLIT_MARKER}' as separating files")
    ap.add_argument(
        "--verify-diagnostics",
        action="store_true",
        help="print the error of each chunk and exit 0 (for tests of error messages)",
    )
    return ap


def _read(path: str | None) -> tuple[str, str]:
    if path in (None, "-"):
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            with open(path, "rb") as f:
                data, name = f.read(), path
        except OSError as e:
            raise EmmyError(f"cannot read '{path}': {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise EmmyError(
            f"cannot read '{name}': not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); "
            "IR files are UTF-8"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n"), name  # as text-mode reading does


def _chunks(text: str, split: bool) -> list[str]:
    if not split:
        return [text]
    # Keep line numbers right: pad each chunk with the newlines that precede it.
    out, offset = [], 0
    for part in text.split(SPLIT_MARKER):
        out.append("\n" * offset + part)
        offset += part.count("\n")
    return out


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.list_passes:
        print("\n".join(pass_names()))
        return 0
    spec = args.passes
    if args.pass_pipeline is not None:
        spec = ",".join(s for s in (spec, mlir_pipeline_to_spec(args.pass_pipeline)) if s)
    passes = parse_pipeline(spec)
    text, name = _read(args.input)
    outputs: list[str] = []
    status = 0
    for chunk in _chunks(text, args.split_input_file):
        ctx = make_context()
        try:
            module = parse_module(ctx, chunk, name)
            run_passes(ctx, module, passes)
            outputs.append(print_module(module, generic=args.print_op_generic))
        except EmmyError as e:
            if not args.verify_diagnostics:
                raise
            outputs.append(f"error: {e}\n")
    result = (SPLIT_MARKER + "\n").join(outputs)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(result)
        except OSError as e:
            raise EmmyError(f"cannot write '{args.output}': {e.strerror}") from None
    else:
        sys.stdout.write(result)
    return status


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_guarded(run, sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
