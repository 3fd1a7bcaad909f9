"""Helpers shared by the kernel builders: kernel arguments, index decomposition, contraction constants."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from math import prod

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from emmy.lowering import In, Out
from emmy.lowering.kb import KB
from emmy.dialects import kernel as K

_IDENT = re.compile(r"[^A-Za-z0-9_]")
# Names a kernel must not take: C and CUDA functions the generated source can see (a loop named
# after its one op, `abs`, declared abs a second time with "C" linkage), and C++ keywords.
_TAKEN = frozenset(
    "abs fabs min max exp exp2 log log2 sqrt rsqrt sin cos tan tanh erf pow floor ceil round trunc "
    "signbit isnan isinf fma fmin fmax div mod sum clamp select printf malloc free assert "
    "auto char const default delete do double float for if int long new operator return short "
    "signed sizeof static struct switch template this typedef union unsigned void volatile while".split()
)


def c_ident(name: str) -> str:
    s = _IDENT.sub("_", name).strip("_") or "k"
    return s if not s[0].isdigit() else "k" + s


def kernel_ident(name: str) -> str:
    """A kernel's C name: `c_ident`, with `_k` after a name the source already uses."""
    s = c_ident(name)
    return s + "_k" if s in _TAKEN else s


def io_args(op: Operation) -> tuple[list[Attribute], list[str], list[In | Out]]:
    """Kernel argument types, names and launch arguments for every input and result of a tile op."""
    types: list[Attribute] = []
    names: list[str] = []
    refs: list[In | Out] = []
    block = op.regions[0].block
    for i, (operand, arg) in enumerate(zip(op.operands, block.args)):
        t = operand.type
        assert isinstance(t, TensorType)
        types.append(K.PtrType(t.element_type))
        names.append(c_ident(arg.name_hint or operand.name_hint or f"in{i}"))
        refs.append(In(i))
    for i, r in enumerate(op.results):
        t = r.type
        assert isinstance(t, TensorType)
        types.append(K.PtrType(t.element_type))
        names.append(c_ident(r.name_hint or f"out{i}"))
        refs.append(Out(i))
    return types, names, refs


def bind_pointers(kb: KB, op: Operation) -> tuple[dict[SSAValue, SSAValue], list[SSAValue]]:
    """(loop block argument -> kernel pointer argument, result pointers) for a func made with io_args."""
    args = kb.func.body.block.args
    block = op.regions[0].block
    n_in = len(block.args)
    ptrs = {a: args[i] for i, a in enumerate(block.args)}
    outs = [args[n_in + i] for i in range(len(op.results))]
    return ptrs, outs


def decompose(kb: KB, linear: SSAValue | int, axes: Sequence[str], extents: Mapping[str, int]) -> dict[str, SSAValue]:
    """Row-major coordinates (last axis fastest) of a linear index over `axes`."""
    out: dict[str, SSAValue] = {}
    rest: SSAValue | int = linear
    for i in range(len(axes) - 1, -1, -1):
        a = axes[i]
        e = extents[a]
        if i == 0:
            out[a] = kb.idx(rest)
        else:
            out[a] = kb.rem(rest, e)
            rest = kb.div(rest, e)
    return {a: out[a] for a in axes}




def extent(extents: Mapping[str, int], axes: Sequence[str]) -> int:
    return prod(extents[a] for a in axes)


# Contraction kernels (emmy/lowering/contraction*.py): the named barriers of their warpgroups (the
# staged epilogue tiles' paddings are part of the plan's layout: emmy/schedule/contraction_smem.py).
EPILOGUE_BARRIER = 8  # named barrier of wgmma_ws's computing warpgroups around the staged epilogue
PERSISTENT_BARRIER = 9  # schedule = persistent: the consumers have read the row statistics of a tile
OWN_EPILOGUE_BARRIER = 10  # + warpgroup: epilogue = staggered, one warpgroup around its own rows
ORDER_BARRIER = 12  # epilogue = staggered: warpgroup 1 stores a tile after warpgroup 0 has
TURN_BARRIER = 13  # + warpgroup: epilogue = pingpong, that warpgroup's turn at the k loop


def fragment_row(kb: KB, base_row, gq, mi, row_step: int, h) -> SSAValue:
    """The tile row of a thread's accumulator fragment: m16 tile `mi` (row_step rows apart from
    base_row), fragment half `h` (rows gq and gq + 8 of the tile)."""
    return kb.add(kb.add(base_row, kb.mul(mi, row_step)), kb.add(gq, kb.mul(h, 8)))
