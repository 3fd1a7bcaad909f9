"""What every kind's rules share (`emmy.tuning.rules`): a `Choice`, the preference lists, and a
few small helpers over knob domains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emmy.targets import Target
from emmy.tuning.knobs import KnobValue

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo


@dataclass(frozen=True)
class Choice:
    value: KnobValue
    reason: str


Prefs = list[tuple[KnobValue, str]]
# prefs(knob, info, target, chosen so far, memo for this decision) -> values best first
PrefFn = Callable[[str, "KernelInfo", Target, Mapping[str, KnobValue], dict], Prefs]


def dispatch(table: dict[str, PrefFn]) -> PrefFn:
    """One kind's preferences: each knob's function, or none."""
    def prefs(knob, info, target, chosen, memo) -> Prefs:
        fn = table.get(knob)
        return fn(knob, info, target, chosen, memo) if fn else []

    return prefs


def info_space(info: KernelInfo, target: Target):
    from emmy.tuning.knobs import knob_space_for

    return knob_space_for(info, target)


def pow2_floor(x: float) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def closest_first(values: Sequence[int], want: float) -> list[int]:
    return sorted(values, key=lambda v: (abs(v - want) / max(v, want), v))


def divides_first(values: Sequence[int], extent: int) -> list[int]:
    return sorted(values, key=lambda v: extent % v != 0)


def vector_prefs(info: KernelInfo) -> Prefs:
    """16-byte accesses or narrower, where they divide the contiguous extent."""
    out: Prefs = []
    for v in (8, 4, 2, 1):
        nbytes = v * info.element_bytes
        if nbytes <= 16 and info.vector_extent % v == 0:
            where = (
                f"along {info.vector_axis}={info.vector_extent}" if info.vector_axis
                else "(no contiguous axis)"
            )
            out.append((v, f"{nbytes}-byte accesses {where}"))
    return out
