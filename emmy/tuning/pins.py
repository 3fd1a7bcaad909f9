"""Pins: knob values the user fixes (`decide-forks{pin="..."}`, `emmy compile --pin`).

Syntax: items separated by `;` (a `,` works too), each one of

    KERNEL.KNOB=VALUE     one kernel (its `sym_name`, without `@`)
    *.KNOB=VALUE          every kernel that has the knob
    KNOB=VALUE            the same as `*.KNOB=VALUE`

VALUE is an integer (`64`) or a name (`mma_sync`, `split`). A kernel-specific pin beats a `*` pin
for the same knob. In a pass pipeline the whole spec is one quoted string, which xDSL's option
grammar accepts with any character but `"` and newlines:

    emmy-opt f.mlir -p 'decide-forks{pin="rms_norm_qkv_proj.block_m=64;*.workers=mma_sync"}'

`parse_pins` checks the syntax and that each knob exists for some kind; `pins_for` checks a
kernel's pins against its own domains (values, kinds); the combined assignment is checked for
legality by `decide-forks`. Every error is an EmmyError naming the pin, the kernel, the knob and
the domain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from emmy.diagnostics import EmmyError
from emmy.tuning.knobs import KnobValue, all_knob_names

_ITEM = re.compile(
    r"^(?:(?P<kernel>[A-Za-z_*][A-Za-z0-9_.$-]*?)\.)?(?P<knob>[A-Za-z_][A-Za-z0-9_]*)"
    r"\s*=\s*(?P<value>[A-Za-z0-9_-]+)$"
)

ANY_KERNEL = "*"


@dataclass(frozen=True)
class Pin:
    """One pinned value: `kernel` is a kernel name or `*`."""

    kernel: str
    knob: str
    value: KnobValue
    text: str  # the item as written, for messages


@dataclass(frozen=True)
class Pins:
    """A parsed pin spec (possibly empty)."""

    items: tuple[Pin, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def for_kernel(self, kernel: str) -> dict[str, Pin]:
        """Knob -> pin applying to `kernel` (kernel-specific pins beat `*` pins)."""
        out: dict[str, Pin] = {}
        for p in self.items:
            if p.kernel == ANY_KERNEL:
                out.setdefault(p.knob, p)
        for p in self.items:
            if p.kernel == kernel:
                out[p.knob] = p
        return out

    def named_kernels(self) -> set[str]:
        return {p.kernel for p in self.items if p.kernel != ANY_KERNEL}


def parse_pins(spec: str) -> Pins:
    """Parse a pin spec; EmmyError for a malformed item or a knob no kind has."""
    items: list[Pin] = []
    known = all_knob_names()
    for raw in re.split(r"[;,]", spec):
        text = raw.strip()
        if not text:
            continue
        m = _ITEM.match(text)
        if m is None:
            raise EmmyError(
                f"pin '{text}': expected KERNEL.KNOB=VALUE, *.KNOB=VALUE or KNOB=VALUE "
                f"(items separated by ';')"
            )
        kernel = m.group("kernel") or ANY_KERNEL
        knob = m.group("knob")
        if knob not in known:
            raise EmmyError(
                f"pin '{text}': unknown knob '{knob}'; knobs: {', '.join(sorted(known))}"
            )
        for p in items:
            if p.kernel == kernel and p.knob == knob:
                raise EmmyError(f"pin '{text}': '{p.text}' already pins {kernel}.{knob}")
        items.append(Pin(kernel, knob, _value(m.group("value")), text))
    return Pins(tuple(items))


def _value(text: str) -> KnobValue:
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else text


def pins_for(
    pins: Pins, kernel: str, kind: str, space: Mapping[str, Iterable[KnobValue]]
) -> dict[str, KnobValue]:
    """The pinned values of one kernel, checked against its knob domains.

    A `*` pin for a knob this kernel lacks is skipped; a pin naming this kernel must name one of
    its knobs with a value in the domain.
    """
    out: dict[str, KnobValue] = {}
    for knob, p in pins.for_kernel(kernel).items():
        if knob not in space:
            if p.kernel == ANY_KERNEL:
                continue
            raise EmmyError(
                f"pin '{p.text}': kernel '{kernel}' ({kind}) has no knob '{knob}'; "
                f"its knobs: {', '.join(space) or 'none'}"
            )
        domain = tuple(space[knob])
        if p.value not in domain:
            raise EmmyError(
                f"pin '{p.text}': {knob}={p.value} is not in the domain of {kernel}.{knob}: "
                f"[{', '.join(str(d) for d in domain)}]"
            )
        out[knob] = p.value
    return out


def check_pins_used(pins: Pins, kernels: Mapping[str, Mapping[str, Iterable[KnobValue]]]) -> None:
    """Every pin must apply somewhere: named kernels exist; `*` knobs exist on some kernel.

    `kernels` maps kernel name -> its knob space."""
    for p in pins.items:
        if p.kernel != ANY_KERNEL:
            if p.kernel not in kernels:
                raise EmmyError(
                    f"pin '{p.text}': no kernel named '{p.kernel}'; kernels: "
                    f"{', '.join(kernels) or 'none'}"
                )
        elif not any(p.knob in space for space in kernels.values()):
            raise EmmyError(f"pin '{p.text}': no kernel in the module has a knob '{p.knob}'")
