"""Parameters created on first access: random from a seed, or read from *.safetensors.

A whole model's weights (Qwen3-Embedding-0.6B: 28 layers of 15M parameters plus a 151669x1024
embedding table, ~1.2 GB in bf16, ~4 s to fill with random values here) are not needed to compile
it: the IR only records shapes. `LazyTensors` knows every tensor's shape and dtype up front and
creates it when it is first read (by a reference run, or by a tracer that runs ops), then keeps
it. The example inputs of a whole model's layers are lazy the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch

from emmy.diagnostics import EmmyError

Spec = tuple[tuple[int, ...], torch.dtype]


class LazyTensors(Mapping[str, torch.Tensor]):
    """Tensors by name, in a fixed order; `make(name)` creates one on first access."""

    def __init__(self, specs: Mapping[str, Spec], make: Callable[[str], torch.Tensor]):
        self.specs: dict[str, Spec] = dict(specs)
        self._make = make
        self._made: dict[str, torch.Tensor] = {}

    def __getitem__(self, name: str) -> torch.Tensor:
        t = self._made.get(name)
        if t is None:
            if name not in self.specs:
                raise KeyError(name)
            t = self._make(name)
            shape, dtype = self.specs[name]
            assert tuple(t.shape) == shape and t.dtype == dtype, (name, t.shape, t.dtype)
            self._made[name] = t
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def materialized(self) -> list[str]:
        """Names created so far."""
        return [n for n in self.specs if n in self._made]


class SafetensorsIndex:
    """Which *.safetensors file holds which key, and each key's shape (headers only)."""

    def __init__(self, weights_dir: Path):
        from safetensors import safe_open

        self.dir = weights_dir
        self.files: dict[str, Path] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for path in sorted(weights_dir.glob("*.safetensors")):
            try:
                with safe_open(str(path), framework="pt") as f:
                    for key in f.keys():
                        self.files[key] = path
                        self.shapes[key] = tuple(f.get_slice(key).get_shape())
            except Exception as e:  # noqa: BLE001 - a broken file is a user error
                raise EmmyError(f"cannot read {path}: {type(e).__name__}: {e}") from None

    def find(self, candidates: tuple[str, ...]) -> str | None:
        """The first candidate key present."""
        return next((k for k in candidates if k in self.files), None)

    def load(self, key: str, dtype: torch.dtype) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self.files[key]), framework="pt") as f:
            return f.get_tensor(key).to(dtype)
