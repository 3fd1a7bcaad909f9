"""The trace cache: a traced model's torch-stage IR on disk, so compiling it again imports no torch.

Tracing needs PyTorch (importing it costs 1.1-1.3 s on a 2-core machine, more than all the passes
of a layer), yet its result, the torch-stage module (`00-torch-import.mlir` in a dump, before
`emmy.target` is set), is a pure function of its inputs. `TraceCache.open(home, source, ...)`
names one entry, a JSON file under `<home>/traces/`:

    {"format": 1, "key": "<hex>", "parts": [{"name": "layer0", "layers": [], "ir": "builtin.module ..."}]}

One part for a layer; a whole model's parts are the embedding, each distinct layer structure (with
the layers that share it) and the final norm, as `emmy.driver.compile_whole_model` compiles them.

The key is a SHA-256 over everything the trace depends on: the model's identity and content (its
id, its config, and for real weights their files' names, sizes and mtimes), the layer (or the whole
model), tokens, seed, tracer, Emmy's own source (every .py and .json under `emmy/`, so any code
change invalidates every entry) and the versions of torch, transformers and xDSL. The target is not
in it: `emmy.target` is set after the trace. A Python factory (`path.py:fn`) is never cached: what
it builds may depend on any file or value it reads.

A missing, unreadable or corrupt entry is a miss (the trace runs and the entry is written again);
writes go to a temporary file renamed into place, so a reader never sees half an entry; a folder
that cannot be written just means no caching. This module never imports torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from emmy.frontend.models import ModelSource

FORMAT = 1
SUBDIR = "traces"  # under the compile cache folder (EMMY_HOME)
_EMMY_DIR = Path(__file__).resolve().parent.parent
_VERSIONED = ("torch", "transformers", "xdsl")  # the packages a trace's text depends on


@dataclass
class CachedPart:
    """One traced part as the cache holds it: its torch-stage `module` (what a compile needs of a
    `emmy.frontend.TracedLayer`), its `name` (`layer0`, `embed_tokens`, `norm`) and, for a whole
    model's layer structure, the `layers` that share it (else empty). No weights, no inputs: a
    cached part can be compiled, not run."""

    name: str
    layers: list[int]
    module: ModuleOp


class TraceCache:
    """One entry of the trace cache (see the module docstring)."""

    def __init__(self, folder: Path, key: str):
        self.folder = folder
        self.key = key
        self.path = folder / f"{key}.json"

    @classmethod
    def open(
        cls, home: str | Path, source: ModelSource, *, layer: int | None, tokens: int, seed: int, tracer: str
    ) -> TraceCache | None:
        """The entry for tracing `source` (layer `layer`, or the whole model when None), or None
        when nothing is cached: no `home`, or a factory source."""
        if not home or source.kind == "factory":
            return None
        fields = {
            "format": FORMAT,
            "model": model_identity(source),
            "layer": layer,
            "tokens": tokens,
            "seed": seed,
            "tracer": tracer,
            "emmy": source_hash(),
            "versions": package_versions(),
        }
        key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
        return cls(Path(home) / SUBDIR, key)

    def load(self) -> list[CachedPart] | None:
        """The entry's parts, or None when it is missing, unreadable or corrupt."""
        try:
            entry = json.loads(self.path.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        try:
            if entry["format"] != FORMAT or entry["key"] != self.key or not entry["parts"]:
                return None
            from emmy.context import make_context
            from emmy.ir_io import parse_module

            ctx = make_context()
            parts = []
            for part in entry["parts"]:
                name, layers, ir = part["name"], part["layers"], part["ir"]
                if not (isinstance(name, str) and isinstance(ir, str) and isinstance(layers, list)):
                    return None
                if not all(isinstance(i, int) for i in layers):
                    return None
                parts.append(CachedPart(name, layers, parse_module(ctx, ir, str(self.path))))
            return parts
        except Exception:  # noqa: BLE001 - any damage to an entry makes it a miss, never an error
            return None

    def store(self, parts: Sequence[CachedPart]) -> bool:
        """Write the entry atomically (a temporary file renamed into place). False when the
        folder cannot be written (then nothing is cached, and that is no error)."""
        from emmy.ir_io import print_module

        entry = {
            "format": FORMAT,
            "key": self.key,
            "parts": [{"name": p.name, "layers": list(p.layers), "ir": print_module(p.module)} for p in parts],
        }
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{self.key[:16]}.", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.chmod(tmp, 0o644)  # mkstemp makes it private; an entry holds no secret
            os.replace(tmp, self.path)
            return True
        except OSError:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            return False


def model_identity(source: ModelSource) -> dict[str, Any]:
    """What identifies a (non-factory) model's trace: its id, its config and, when it has real
    weights, each weight file's name, size and mtime."""
    weights = None
    if source.weights_dir is not None:
        weights = [
            [p.name, st.st_size, st.st_mtime_ns]
            for p in sorted(Path(source.weights_dir).glob("*.safetensors"))
            for st in [p.stat()]
        ]
    return {
        "kind": source.kind,
        "id": source.model_id,
        "config": source.config,
        "weights_dir": None if source.weights_dir is None else str(source.weights_dir),
        "weights": weights,
    }


def source_hash(root: Path = _EMMY_DIR) -> str:
    """A hash of Emmy's own source: every .py and .json file under `root` (`emmy/`), names and
    contents (~10 ms)."""
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json") and "__pycache__" not in p.parts)
    for path in files:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def package_versions() -> dict[str, str | None]:
    """The installed versions of torch, transformers and xDSL, read from their metadata
    directories without importing them (None for one not installed)."""
    versions: dict[str, str | None] = {}
    for name in _VERSIONED:
        spec = importlib.util.find_spec(name)
        versions[name] = None if spec is None or spec.origin is None else _dist_version(name, Path(spec.origin))
    return versions


def _dist_version(name: str, origin: Path) -> str:
    """`name`'s version from the `<name>-<version>.dist-info` folder beside the package, else
    from importlib.metadata (slower: it scans every path)."""
    site = origin.parent.parent
    try:
        for entry in os.listdir(site):
            if entry.startswith(name + "-") and entry.endswith(".dist-info"):
                return entry[len(name) + 1 : -len(".dist-info")]
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return f"unknown ({origin.parent})"
