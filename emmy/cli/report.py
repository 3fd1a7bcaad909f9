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
    evidence: dict | None = None  # the kernel's emmy.evidence report (emmy.evidence.hierarchy)

    @property
    def source(self) -> dict | None:
        """The structured source of this knob's tier, where the evidence report has one."""
        return (self.evidence or {}).get("sources", {}).get(self.tier)


def keyed_decisions(module) -> list[KeyedDecision]:
    """Every knob of every tile.kernel of `module` (tile stage), in IR order, with its kernel's key
    on the module's target."""
    from emmy.dialects.tile import KernelOp
    from emmy.passes.decide_forks import decisions
    from emmy.schedule.key import kernel_key
    from emmy.targets import module_target

    target = module_target(module)
    per_kernel = [((kernel_key(op, target).id, _evidence(op)), len(op.knob_dict()))
                  for op in module.walk() if isinstance(op, KernelOp)]
    per_knob = [facts for facts, knobs in per_kernel for _ in range(knobs)]  # each kernel keyed once
    return [KeyedDecision(d.kernel, key, d.knob, d.value, d.tier, d.reason, ev)
            for d, (key, ev) in zip(decisions(module), per_knob)]


def _evidence(op) -> dict | None:
    import json

    from emmy.evidence.hierarchy import EVIDENCE_ATTR

    attr = op.attributes.get(EVIDENCE_ATTR)
    return json.loads(attr.data) if attr is not None else None


def short_source(source: dict | None) -> str:
    """One line for a structured source: the store's study and trial, the golden file and entry,
    the shape a nearest answer was borrowed from, the prior's predicted time."""
    if not source:
        return ""
    tier = source.get("tier")
    if tier == "prior":
        predicted = source.get("predicted_s")
        return f"prior: predicted {predicted * 1e6:.2f} us" if predicted else "prior"
    where = (f"{source['file'].rsplit('/', 1)[-1]} entry {source['entry']}" if "file" in source
             else f"study {source.get('study', '?')[:21]} trial {source.get('trial', '?')}")
    if tier == "nearest":
        reshaped = source.get("reshaped")
        tile = f", reshaped to {reshaped['to']['block_m']} x {reshaped['to']['block_n']}" if reshaped else ""
        return f"{where}, shape {str(source.get('shape', '')).split(';')[0]}{tile}"
    return where


def evidence_table(decisions: list[KeyedDecision]) -> str:
    """Per kernel with an evidence report: the tiers that answered, why each higher tier had no
    answer, and the evidence skipped (empty when no kernel has a report)."""
    from emmy.cli.table import format_table
    from emmy.evidence import TIERS

    rows, seen = [], set()
    for d in decisions:
        if d.evidence is None or d.kernel in seen:
            continue
        seen.add(d.kernel)
        used = {x.tier for x in decisions if x.kernel == d.kernel}
        tiers = [t for t in (*TIERS, "kept") if t in used]
        top = min((TIERS.index(t) for t in used if t in TIERS), default=len(TIERS))
        given = d.evidence.get("misses", {})
        misses = "; ".join(f"{t}: {given[t]}" for t in TIERS[:top] if t in given)
        skipped = "; ".join(f"{s['tier']} {short_source(s['source']) or s['source']}: {s['why']}" for s in d.evidence.get("skipped", []))
        rows.append((d.kernel, ",".join(tiers), misses or "-", skipped or "-"))
    if not rows:
        return ""
    return format_table(("kernel", "answered by", "why higher tiers had no answer", "evidence skipped"), rows)


def decisions_table(decisions: list[KeyedDecision]) -> str:
    """The `--explain` table: kernel, knob, value, tier, key (on each kernel's first row), source
    (where the tier's answer came from, when it has a structured source), reason."""
    from emmy.cli.table import format_table

    rows, last = [], None
    for d in decisions:
        rows.append((d.kernel, d.knob, str(d.value), d.tier, d.key if (d.kernel, d.key) != last else "",
                     short_source(d.source), d.reason))
        last = (d.kernel, d.key)
    if not any(r[5] for r in rows):
        return format_table(("kernel", "knob", "value", "tier", "key", "reason"), [r[:5] + r[6:] for r in rows])
    return format_table(("kernel", "knob", "value", "tier", "key", "source", "reason"), rows)
