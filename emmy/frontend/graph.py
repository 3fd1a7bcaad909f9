"""The traced graph both tracers produce and the importer reads.

A `Graph` is a list of `Node`s in execution order, each naming one torch-level operation the way
`emmy.frontend.importer.OP_TABLE` spells it (`aten.linear`, `aten.view`, `emmy.hf_rms_norm`), with
its arguments as PyTorch passed them except that tensors are `Value`s (computed by an earlier
node, or a function input or parameter) or `Constant`s (any other tensor). Both
`emmy.frontend.capture` (a `TorchFunctionMode` recorder) and `emmy.frontend.export` (torch.export)
produce it, so one importer serves both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from emmy.diagnostics import EmmyError


@dataclass(frozen=True)
class Value:
    """A tensor of the captured graph."""

    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Constant:
    """A tensor argument that is neither an input, a parameter nor a recorded result."""

    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass
class Node:
    op: str  # "aten.linear", "emmy.hf_rms_norm", ...
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: tuple[Value, ...]
    module_path: str  # "self_attn.q_proj" ("" for the root)
    module_class: str  # "Linear"

    @property
    def where(self) -> str:
        return f"{self.module_path or '<root>'} ({self.module_class})"


@dataclass
class Graph:
    inputs: list[tuple[str, Value]] = field(default_factory=list)
    params: list[tuple[str, Value]] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)  # Values (a Constant or other is an error)


# In-place arithmetic (`x += y`) is recorded as its out-of-place form, whose result is x's value
# from then on; the importer reads these as it reads `aten.add` and the rest. That is what the
# model computes only when nothing else sees x's storage, which each tracer checks
# (`inplace_error`).
INPLACE_ARITHMETIC = ("aten.add_", "aten.sub_", "aten.mul_", "aten.div_")


def inplace_error(name: str, path: str, cls: str, leaf: bool, stage: str) -> EmmyError:
    """The error for in-place op `name` writing into an input or a parameter (`leaf`), or into
    a tensor that shares its storage with a view."""
    what = "an input or a parameter" if leaf else "a tensor that shares its storage with a view"
    return EmmyError(
        f"in-place '{name}' at {path or '<root>'} ({cls}) writes into {what}; Emmy records values, "
        f"not storage, so it supports in-place arithmetic only on a tensor nothing else sees (stage: {stage})"
    )
