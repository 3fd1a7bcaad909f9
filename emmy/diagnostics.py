"""Errors Emmy reports to its users.

Any layer (frontend, passes, tuning, backend) raises `EmmyError` for bad input; the command line
(`emmy/cli/`) is the only place that turns it into a message and an exit code.
"""

from __future__ import annotations


class EmmyError(Exception):
    """A problem with the user's input, explained in words (no traceback is shown)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


def first_line(e: BaseException) -> str:
    """`TypeName: first line of the message` of an exception from code Emmy calls (PyTorch,
    a user's module): enough to say what went wrong without its traceback."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
