"""Turning errors into messages and exit codes (never a traceback for bad input)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from emmy.diagnostics import EmmyError


def fail(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return 1


def run_guarded(fn: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run a command; user errors print `error: ...` and exit 1."""
    try:
        return fn(argv)
    except EmmyError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        return fail("interrupted")
    except BrokenPipeError:
        return 0
