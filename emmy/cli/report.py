"""Turning errors into messages and exit codes (never a traceback for bad input); the decisions
as `emmy compile --explain` and the dump's decisions file show them, with each kernel's key."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class KeyedDecision:
    """One knob of one kernel as decided (`emmy.passes.decide_forks.Decision`), with the kernel's
    key (`emmy.schedule.key.KernelKey.id`)."""

    kernel: str
    key: str
    knob: str
    value: object
    tier: str
    reason: str


def keyed_decisions(module) -> list[KeyedDecision]:
    """Every knob of every tile.kernel of `module` (tile stage), in IR order, with its kernel's key
    on the module's target."""
    from emmy.dialects.tile import KernelOp
    from emmy.passes.decide_forks import decisions
    from emmy.schedule.key import kernel_key
    from emmy.targets import module_target

    target = module_target(module)
    keys = [kernel_key(op, target).id for op in module.walk() if isinstance(op, KernelOp) for _ in op.knob_dict()]
    return [KeyedDecision(d.kernel, key, d.knob, d.value, d.tier, d.reason) for d, key in zip(decisions(module), keys)]


def decisions_table(decisions: list[KeyedDecision]) -> str:
    """The `--explain` table: kernel, knob, value, tier, key (on each kernel's first row), reason."""
    from emmy.cli.table import format_table

    rows, last = [], None
    for d in decisions:
        rows.append((d.kernel, d.knob, str(d.value), d.tier, d.key if (d.kernel, d.key) != last else "", d.reason))
        last = (d.kernel, d.key)
    return format_table(("kernel", "knob", "value", "tier", "key", "reason"), rows)
