"""Kernel keys: the name of one tuning problem (docs: DESIGN section 5, "Keys and storage").

    key = kernel_key(kernel_op, target)    # a KernelKey
    key.id              # "3f2a9c01b7e4:5d1e07aa:sm_90a:v1"  (structure, shape, target, version)
    key.structure_id    # "3f2a9c01b7e4:sm_90a:v1"           (what "the same kernel, another shape" shares)
    key.shape           # "m=512 n=4096 k=1024; 512x1024xbf16,1024xbf16,4096x1024xbf16->512x4096xbf16"
    key.extents()       # {"m": 512, "n": 4096, "k": 1024}

A key has four parts:

- `structure`: the sha256 (hex) of the kernel's canonical structure (`canonical_structure`): the
  `tile.kernel` printed with every knob undecided (names and domains kept, values, tiers and
  reasons dropped), the kernel's own name and every SSA value name stripped (values are numbered
  in print order), the attributes that say where it came from or when it runs (`emmy.origin`,
  `emmy.fused_from`, `emmy.phase`) dropped, and the shapes abstracted away: tensor types keep
  their rank and element type (`tensor<?x?xbf16>`), axes keep their names, not their extents.
  Constants in the body stay (the mean's 1/hidden, the attention scale): a kernel on another
  token count has the same structure, one on another hidden size usually does not.
- `shape`: the sizes the structure leaves out, readable: the axes with their extents, then the
  operand and result tensor types (`m=512 n=4096 k=1024; 512x1024xbf16,...->512x4096xbf16`).
- `target`: the target's name (`sm_90a`).
- `version`: `SPACE_VERSION`.

So identical kernels in different layers or models (other weight names, other kernel names) get
the same key; another body, shape, dtype or target gives another; deciding knobs changes nothing.

`describe(kernel_op)` is a one-line readable summary of a kernel (kind, axes, operands, results
and its operations), for tables and golden files.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from io import StringIO

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation
from xdsl.printer import Printer

from emmy.dialects.loop import ReduceOp
from emmy.dialects.tile import KernelOp, KnobAttr
from emmy.targets import Target

# The version of the schedule space. Bump it when a lowering changes what a knob value means (the
# same values would now build another kernel), or when the domains or the canonical structure
# change: every stored record under the old version then stops matching instead of lying.
SPACE_VERSION = 1

# Discardable attributes that say where a kernel came from, when it runs (once, when the weights
# are bound, or every call) or what evidence decided it, not what it computes or how a knob
# builds it.
UNKEYED_ATTRS: tuple[str, ...] = ("emmy.origin", "emmy.fused_from", "emmy.phase", "emmy.evidence")

_SHAPE_SEP = "; "


@dataclass(frozen=True)
class KernelKey:
    """The key of one tuning problem: structure digest, shape, target and space version."""

    structure: str  # sha256 hex of canonical_structure(kernel)
    shape: str  # "m=512 n=4096 k=1024; 512x1024xbf16,...->512x4096xbf16"
    target: str  # "sm_90a"
    version: int  # SPACE_VERSION

    @property
    def id(self) -> str:
        """Stable, short and printable: `<structure[:12]>:<sha256(shape)[:8]>:<target>:v<version>`."""
        shape = hashlib.sha256(self.shape.encode()).hexdigest()[:8]
        return f"{self.structure[:12]}:{shape}:{self.target}:v{self.version}"

    @property
    def structure_id(self) -> str:
        """The key without its shape, `<structure[:12]>:<target>:v<version>`: what the kernels that
        differ only in sizes share (the nearest-shape lookup groups by it)."""
        return f"{self.structure[:12]}:{self.target}:v{self.version}"

    def extents(self) -> dict[str, int]:
        """Axis name -> extent, read from the shape part."""
        axes = self.shape.split(_SHAPE_SEP, 1)[0]
        out: dict[str, int] = {}
        for item in axes.split():
            name, _, extent = item.partition("=")
            out[name] = int(extent)
        return out

    def __str__(self) -> str:
        return self.id


def key_id_part(key_id: str, part: str) -> str:
    """One part of a key id as `KernelKey.id` writes it: "structure", "shape" (its digest),
    "target" or "version"; "" where the id does not have those four parts."""
    parts = key_id.split(":")
    return parts[("structure", "shape", "target", "version").index(part)] if len(parts) == 4 else ""


def kernel_key(kernel: KernelOp, target: Target) -> KernelKey:
    """The key of `kernel` (a `tile.kernel`, knobs decided or not) on `target`."""
    structure = hashlib.sha256(canonical_structure(kernel).encode()).hexdigest()
    return KernelKey(structure, shape_of(kernel), target.name, SPACE_VERSION)


def shape_of(kernel: KernelOp) -> str:
    """The shape part of the key: `m=512 n=4096 k=1024; 512x1024xbf16,...->512x4096xbf16`."""
    axes = " ".join(f"{n}={e}" for n, e in kernel.axes.items())
    ins = ",".join(_type_text(v.type) for v in kernel.inputs)
    outs = ",".join(_type_text(v.type) for v in kernel.outputs)
    return f"{axes}{_SHAPE_SEP}{ins}->{outs}"


def canonical_structure(kernel: KernelOp) -> str:
    """The text the structure digest is taken of (module docstring): the kernel with knobs
    undecided, names stripped and shapes abstracted."""
    outer = Block(arg_types=[v.type for v in kernel.inputs])
    copy = kernel.clone(value_mapper=dict(zip(kernel.inputs, outer.args)), clone_name_hints=False)
    copy.properties["sym_name"] = StringAttr("kernel")
    copy.with_knobs({name: KnobAttr(k.knob_name, k.domain) for name, k in copy.knob_dict().items()})
    for op in copy.walk():
        for name in UNKEYED_ATTRS:
            op.attributes.pop(name, None)
    out = StringIO()
    Printer(stream=out).print_op(copy)
    copy.erase(safe_erase=False)
    text = _TENSOR_SHAPE.sub(lambda m: "tensor<" + "?x" * m.group(1).count("x"), out.getvalue())
    return _AXES.sub(lambda m: "axes [" + _EXTENT.sub("", m.group(1)) + "]", text, count=1)


_TENSOR_SHAPE = re.compile(r"tensor<((?:\d+x)+)")
_AXES = re.compile(r"axes \[([^\]]*)\]")
_EXTENT = re.compile(r" = \d+")


def _type_text(t: Attribute) -> str:
    if isinstance(t, TensorType):
        return "x".join([*(str(d) for d in t.get_shape()), str(t.element_type)])
    return str(t)


def describe(kernel: KernelOp) -> str:
    """One readable line: kind, axes, operands -> results, then the body's operations with counts
    in first-use order, e.g. `contraction m=512 n=4096 k=1024; 512x1024xbf16,... -> 512x4096xbf16;
    3 loop.load, 2 arith.extf, 1 loop.reduce sum[k], ...`."""
    ops: Counter[str] = Counter()
    for op in kernel.body.walk():
        if op.name in ("loop.axis", "loop.yield"):
            continue
        ops[_op_text(op)] += 1
    body = ", ".join(f"{n} {name}" for name, n in ops.items())
    axes = " ".join(f"{n}={e}" for n, e in kernel.axes.items())
    ins = ", ".join(_type_text(v.type) for v in kernel.inputs)
    outs = ", ".join(_type_text(v.type) for v in kernel.outputs)
    return f"{kernel.kind_name} {axes}; {ins} -> {outs}; {body}"


def _op_text(op: Operation) -> str:
    if isinstance(op, ReduceOp):
        return f"loop.reduce {op.kind_name}[{','.join(op.axis_names)}]"
    return op.name


__all__ = ["SPACE_VERSION", "KernelKey", "canonical_structure", "describe", "kernel_key", "key_id_part", "shape_of"]
