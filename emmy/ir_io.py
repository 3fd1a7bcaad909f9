"""Reading and writing IR text, and running passes with verification.

Used by `emmy compile` and `emmy-opt` alike so that a dump file written by one is reproduced byte
for byte by the other.
"""

from __future__ import annotations

import io
from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass, PassPipeline
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException

from emmy.diagnostics import EmmyError
from emmy.passes.pipeline import all_passes, pass_names


class _LocatingParser(Parser):
    """xDSL's parser, remembering where each operation starts (for verifier messages)."""

    def __init__(self, ctx: Context, text: str, name: str):
        super().__init__(ctx, text, name=name)
        self.spans: dict[int, object] = {}

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        op = super().parse_operation()
        self.spans[id(op)] = span
        return op


def parse_module(ctx: Context, text: str, filename: str) -> ModuleOp:
    """Parse and verify; errors become EmmyError with file:line:col."""
    parser = _LocatingParser(ctx, text, filename)
    try:
        module = parser.parse_module()
    except ParseError as e:
        raise EmmyError(f"{filename}: invalid IR\n{_strip(str(e))}") from None
    except Exception as e:  # xDSL raises plain exceptions for some malformed input
        raise EmmyError(f"{filename}: invalid IR: {e}") from None
    try:
        module.verify()
    except (VerifyException, DiagnosticException) as e:
        where = filename
        op = _failing_op(module)
        span = parser.spans.get(id(op)) if op is not None else None
        if span is not None:
            loc = span.get_location()  # type: ignore[attr-defined]
            where = f"{loc.file}:{loc.line}:{loc.col}"
        raise EmmyError(f"{where}: IR does not verify\n{_strip(str(e))}") from None
    return module


def _failing_op(module: ModuleOp) -> Operation | None:
    """The innermost operation whose own verifier fails."""
    found = None
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, DiagnosticException):
            found = op
    return found


def verify(module: Operation, where: str) -> None:
    try:
        module.verify()
    except (VerifyException, DiagnosticException) as e:
        raise EmmyError(f"{where}: IR does not verify\n{_strip(str(e))}") from None


def _strip(text: str) -> str:
    return text.strip("\n")


def print_module(module: Operation, generic: bool = False) -> str:
    buf = io.StringIO()
    Printer(stream=buf, print_generic_format=generic).print_op(module)
    buf.write("\n")
    return buf.getvalue()


def mlir_pipeline_to_spec(pipeline: str) -> str:
    """`builtin.module(a,b{x=1})` -> `a,b{x=1}`."""
    text = pipeline.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        return text[len("builtin.module(") : -1]
    raise EmmyError(
        f"--pass-pipeline: expected 'builtin.module(pass,pass{{opt=value}})', got '{pipeline}'"
    )


def parse_pipeline(spec: str) -> list[ModulePass]:
    """Instantiate the passes named in an xDSL pipeline spec (`a,b{opt=1}`)."""
    if not spec.strip():
        return []
    try:
        pipeline = PassPipeline.parse_spec(all_passes(), spec)
    except ArgSpecParseError as e:  # subclasses BaseException, not Exception
        raise EmmyError(f"bad pass pipeline '{spec}': {e}", hint=_valid_passes()) from None
    except ValueError as e:
        raise EmmyError(f"bad pass pipeline '{spec}': {e}", hint=_valid_passes()) from None
    except Exception as e:
        raise EmmyError(f"bad pass pipeline '{spec}': {e}", hint=_valid_passes()) from None
    return list(pipeline.passes)


def _valid_passes() -> str:
    return "valid passes: " + ", ".join(pass_names())


def run_passes(
    ctx: Context,
    module: ModuleOp,
    passes: list[ModulePass],
    after_each: Callable[[ModulePass, ModuleOp], None] | None = None,
    verify_each: bool = True,
) -> None:
    """Apply passes in order, verifying after each (or, with verify_each=False, after the last);
    `after_each` sees the module after a pass."""
    for i, p in enumerate(passes):
        try:
            p.apply(ctx, module)
        except EmmyError:
            raise
        except (VerifyException, DiagnosticException) as e:
            raise EmmyError(f"pass '{p.name}' failed: {_strip(str(e))}") from None
        if verify_each or i == len(passes) - 1:
            verify(module, f"after pass '{p.name}'")
        if after_each is not None:
            after_each(p, module)
