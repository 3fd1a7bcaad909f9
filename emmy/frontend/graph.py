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
