"""A tuning record: the best measured schedule of one kernel key, and where it came from.

No database here (`store.py` keeps records in Optuna's storage); this module is what the rest of
Emmy reads (`decide-forks`' local tier) without importing Optuna.

    Record(key="3f9c...", kernel="o_proj_residual", target="sm_90a",
           values={"block_m": 128, "block_n": 128, ...}, time_s=2.1e-05, spread=0.01, error=0.0,
           card="NVIDIA H200", driver="570.124", cuda="12.8", torch="2.13.0", emmy="0.1.0",
           source_hash="a1b2...", date="2026-12-01T15:02:11Z", store="sqlite:///.../records.db",
           study="3f9c...", trial=7)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The layout of what Emmy keeps in a store (study and trial attributes) and in exported JSON.
# Bump it when that layout changes; a store or file with a larger number is refused.
SCHEMA = 1

# The environment fields a measurement records (`Measurer.environment()` keys).
ENV_FIELDS = ("card", "driver", "cuda", "torch", "emmy", "source_hash")


@dataclass(frozen=True)
class Record:
    """The recorded best schedule of one kernel key (a study's `best`), with its measurement and
    the machine that measured it."""

    key: str
    kernel: str
    target: str
    values: Mapping[str, int | str]
    time_s: float
    spread: float
    error: float | None
    card: str
    driver: str
    cuda: str
    torch: str
    emmy: str
    source_hash: str
    date: str
    store: str
    study: str
    trial: int
    description: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    # The study's structural fork (`fork_knobs`, e.g. ("fusion",)), where its space has one:
    # branch -> that branch's best re-measured in the same rounds as the best (trial, values,
    # time_s, spread; time_s None with a `note` where not right). Empty: no fork, or a best
    # named before forks were kept.
    fork: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    fork_knobs: tuple[str, ...] = ()

    def source(self) -> str:
        """Where the record lives, for a decision's reason."""
        return f"store {self.store}, study {self.study}, trial {self.trial}"

    def summary(self) -> str:
        spread = f" +- {self.spread * 100:.1f}%" if self.spread else ""
        return f"{self.time_s * 1e6:.2f} us{spread} on {self.card or 'an unknown card'}"


def fork_text(fork: Mapping[str, Mapping[str, object]], spreads: bool = True) -> str:
    """A fork's branches, each at its re-measured best: `fused 12.10 us +- 1.0% / split 11.30 us
    +- 0.8%` (`spreads` False: without the spreads); a branch not right shows its note."""
    parts = []
    for label, b in fork.items():
        t, spread = b.get("time_s"), b.get("spread")
        if t is None:
            parts.append(f"{label} {b.get('note') or 'not right'}")
        else:
            parts.append(f"{label} {float(t) * 1e6:.2f} us" + (f" +- {float(spread or 0) * 100:.1f}%" if spreads else ""))
    return " / ".join(parts)


def _fork_knobs(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or not all(isinstance(k, str) for k in raw):
        raise ValueError(f"fork_knobs {raw!r}: not a list of knob names")
    return tuple(raw)


def _fork(raw: object) -> dict[str, dict[str, object]]:
    """A best's `fork` attribute, checked (ValueError where it is not branch -> {trial, values,
    time_s, spread[, note]} with numbers or nulls)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(b, Mapping) for b in raw.values()):
        raise ValueError("fork: not a map of branch -> its best")
    out = {}
    for label, b in raw.items():
        for name in ("time_s", "spread"):
            v = b.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"fork: branch {label}: {name} {v!r} is not a number")
        if b.get("trial") is not None and not isinstance(b.get("trial"), int):
            raise ValueError(f"fork: branch {label}: trial {b.get('trial')!r} is not a trial number")
        out[str(label)] = dict(b)
    return out


def record_from(best: Mapping[str, object], *, key: str, kernel: str, target: str, store: str,
                description: str = "") -> Record:
    """A Record from a study's `best` attribute (what `emmy.search.study` writes)."""
    env = dict(best.get("env") or {})  # type: ignore[arg-type]
    return Record(
        key=key,
        kernel=kernel,
        target=target,
        values=dict(best["values"]),  # type: ignore[arg-type]
        time_s=float(best["time_s"]),  # type: ignore[arg-type]
        spread=float(best.get("spread") or 0.0),  # type: ignore[arg-type]
        error=None if best.get("error") is None else float(best["error"]),  # type: ignore[arg-type]
        card=str(env.get("card", "")),
        driver=str(env.get("driver", "")),
        cuda=str(env.get("cuda", "")),
        torch=str(env.get("torch", "")),
        emmy=str(env.get("emmy", "")),
        source_hash=str(env.get("source_hash", "")),
        date=str(best.get("date", "")),
        store=store,
        study=key,
        trial=int(best["trial"]),  # type: ignore[arg-type]
        description=description,
        env=env,
        fork=_fork(best.get("fork")),
        fork_knobs=_fork_knobs(best.get("fork_knobs")),
    )


__all__ = ["ENV_FIELDS", "SCHEMA", "Record", "fork_text", "record_from"]
