"""Golden files: their layout, reading them (every problem named by file and entry) and writing.

A golden file is JSON, one per target and model family (`golden/sm_90a/qwen3-embedding-0.6b.json`):

    {"schema": 1, "target": "sm_90a", "entries": [
      {"key": "3f2a9c01b7e4:5d1e07aa:sm_90a:v1",          # emmy.schedule.key: KernelKey.id
       "structure": "3f2a9c01...", "shape": "m=512 n=4096 k=1024; ...", "version": 1,
       "model": "Qwen/Qwen3-Embedding-0.6B", "layer": 0, "tokens": 512,   # where it came from
       "kernel": "rms_norm_qkv_proj", "description": "contraction m=512 ...",
       "values": {"block_m": 128, ...},                     # the chosen knob values
       "time_s": 2.1e-05, "spread": 0.01,                   # measured, seconds per call
       "alternatives": [{"values": {...}, "time_s": 2.3e-05, "spread": 0.01}, ...],
       "card": "NVIDIA H200", "driver": "...", "cuda": "...", "torch": "...", "emmy": "0.1.0",
       "date": "2026-12-01T16:02:11Z", "source": "store ..., study ..., trial 7"}]}

`layer` is null for a factory (`path.py:fn`, relative to the folder above `golden/`). Reading
checks the layout only; `emmy.golden.check` checks the entries against the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from emmy.diagnostics import EmmyError

SCHEMA = 1

_ENV = ("card", "driver", "cuda", "torch", "emmy", "date", "source")


@dataclass(frozen=True)
class Alternative:
    """Another measured candidate of the same kernel key."""

    values: Mapping[str, int | str]
    time_s: float
    spread: float


@dataclass(frozen=True)
class Entry:
    """One reviewed configuration: a kernel key, its knob values and the measurement behind them."""

    key: str
    structure: str
    shape: str
    version: int
    model: str
    layer: int | None
    tokens: int
    kernel: str
    description: str
    values: Mapping[str, int | str]
    time_s: float
    spread: float
    alternatives: tuple[Alternative, ...] = ()
    card: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    emmy: str = ""
    date: str = ""
    source: str = ""

    @property
    def target(self) -> str:
        """The target named in the key id (`<structure>:<shape>:<target>:v<version>`)."""
        from emmy.schedule.key import key_id_part

        return key_id_part(self.key, "target")

    def kernel_key(self):
        """The entry's key as an `emmy.schedule.key.KernelKey` (for its structure id and extents)."""
        from emmy.schedule.key import KernelKey

        return KernelKey(self.structure, self.shape, self.target, self.version)

    def to_json(self) -> dict:
        out = asdict(self)
        out["values"] = dict(self.values)
        out["alternatives"] = [{**asdict(a), "values": dict(a.values)} for a in self.alternatives]
        return out


@dataclass(frozen=True)
class GoldenFile:
    path: Path
    target: str
    entries: tuple[Entry, ...] = field(default_factory=tuple)

    def where(self, index: int) -> str:
        e = self.entries[index]
        return f"{self.path}: entry {index} (kernel '{e.kernel}', {e.tokens} tokens)"


def read_file(path: Path) -> GoldenFile:
    """A golden file, its layout checked; any problem is an EmmyError naming the file and entry."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EmmyError(f"{path}: cannot read the golden file: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise EmmyError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise EmmyError(f"{path}: a golden file is a JSON object with 'schema', 'target' and 'entries'")
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise EmmyError(f"{path}: 'schema' must be an integer (this Emmy writes {SCHEMA})")
    if schema > SCHEMA:
        raise EmmyError(f"{path}: written by a newer Emmy (schema {schema}; this one reads up to {SCHEMA})")
    target = data.get("target")
    if not isinstance(target, str) or not target:
        raise EmmyError(f"{path}: 'target' must name a target such as \"sm_90a\"")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise EmmyError(f"{path}: 'entries' must be a list")
    return GoldenFile(path, target, tuple(_entry(e, f"{path}: entry {i}") for i, e in enumerate(entries)))


def golden_paths(directory: Path, target: str | None = None) -> list[Path]:
    """The golden files under `directory/<target>/` (every target's folder with None), sorted by
    path; `prior.json` (the prior's coefficients) is not a golden file."""
    folders = [directory / target] if target else sorted(p for p in directory.iterdir() if p.is_dir())
    return [f for d in folders if d.is_dir() for f in sorted(d.glob("*.json")) if f.name != "prior.json"]


def read_dir(directory: Path, target: str | None = None) -> list[GoldenFile]:
    """Every golden file under `directory/<target>/` (`golden_paths`), read; none where there is no
    folder."""
    if not directory.exists():
        return []
    if not directory.is_dir():
        raise EmmyError(f"{directory}: the golden folder is not a folder")
    return [read_file(f) for f in golden_paths(directory, target)]


def write_file(path: Path, target: str, entries: list[Entry]) -> None:
    """Write a golden file (entries sorted by model, tokens and kernel so diffs review well),
    through a temporary file so a failed write never leaves half a file."""
    ordered = sorted(entries, key=lambda e: (e.model, e.layer if e.layer is not None else -1, e.tokens, e.kernel))
    data = {"schema": SCHEMA, "target": target, "entries": [e.to_json() for e in ordered]}
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise EmmyError(f"{path}: cannot write the golden file: {e.strerror}") from None


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "key": str, "structure": str, "shape": str, "version": int, "model": str, "tokens": int,
    "kernel": str, "description": str, "values": dict, "time_s": (int, float), "spread": (int, float),
}


def _entry(raw: object, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise EmmyError(f"{where}: an entry is a JSON object")
    label = f"{where} (kernel '{raw.get('kernel', '?')}')"
    for name, types in _REQUIRED.items():
        if name not in raw:
            raise EmmyError(f"{label}: '{name}' is missing")
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise EmmyError(f"{label}: '{name}' must be {_kind(types)}, not {json.dumps(value)}")
    layer = raw.get("layer")
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
        raise EmmyError(f"{label}: 'layer' must be a layer number or null, not {json.dumps(layer)}")
    if raw["tokens"] < 1:
        raise EmmyError(f"{label}: 'tokens' must be at least 1")
    if not raw["time_s"] > 0 or raw["spread"] < 0:
        raise EmmyError(f"{label}: 'time_s' must be positive and 'spread' not negative")
    values = _values(raw["values"], f"{label}: 'values'")
    alts = raw.get("alternatives", [])
    if not isinstance(alts, list):
        raise EmmyError(f"{label}: 'alternatives' must be a list")
    alternatives = tuple(_alternative(a, f"{label}: alternative {i}") for i, a in enumerate(alts))
    env = {}
    for name in _ENV:
        value = raw.get(name, "")
        if not isinstance(value, str):
            raise EmmyError(f"{label}: '{name}' must be a string")
        env[name] = value
    return Entry(
        key=raw["key"], structure=raw["structure"], shape=raw["shape"], version=raw["version"],
        model=raw["model"], layer=layer, tokens=raw["tokens"], kernel=raw["kernel"],
        description=raw["description"], values=values, time_s=float(raw["time_s"]),
        spread=float(raw["spread"]), alternatives=alternatives, **env,
    )


def _alternative(raw: object, where: str) -> Alternative:
    if not isinstance(raw, dict) or "values" not in raw or "time_s" not in raw:
        raise EmmyError(f"{where}: an alternative is an object with 'values' and 'time_s'")
    time_s, spread = raw["time_s"], raw.get("spread", 0.0)
    for name, v in (("time_s", time_s), ("spread", spread)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise EmmyError(f"{where}: '{name}' must be a number, not {json.dumps(v)}")
    return Alternative(_values(raw["values"], f"{where}: 'values'"), float(time_s), float(spread))


def _values(raw: object, where: str) -> dict[str, int | str]:
    if not isinstance(raw, dict) or not raw:
        raise EmmyError(f"{where} must map knob names to values")
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise EmmyError(f"{where}: knob '{k}' must be an integer or a string, not {json.dumps(v)}")
    return dict(raw)


def _kind(types) -> str:
    names = {str: "a string", int: "an integer", float: "a number", dict: "an object"}
    types = types if isinstance(types, tuple) else (types,)
    return "a number" if float in types else " or ".join(names[t] for t in types)


__all__ = ["SCHEMA", "Alternative", "Entry", "GoldenFile", "golden_paths", "read_dir", "read_file", "write_file"]
