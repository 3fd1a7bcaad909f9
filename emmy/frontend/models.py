"""Which model a user means: a known id, a local Hugging Face directory, or a Python factory.

`resolve_model(spec)` turns the MODEL argument of `emmy compile` into a `ModelSource`; nothing is
built or traced here (that is `emmy.frontend.trace`). No network access is ever attempted: a known
id uses the config shipped in `emmy/models/` (random weights), or a local copy in a Hugging Face
cache directory when the caller names one.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from emmy.diagnostics import EmmyError

# Known model ids -> config file under emmy/models/.
KNOWN_MODELS: dict[str, str] = {
    "Qwen/Qwen3-Embedding-0.6B": "qwen3-embedding-0.6b.json",
}

_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


@dataclass(frozen=True, eq=False)
class ModelSource:
    """A resolved MODEL argument.

    kind:
      - "known": a known id; `config` is the shipped Hugging Face config, `weights_dir` a local
        copy's snapshot directory when one was found (else None: random weights).
      - "local": a Hugging Face model directory; `config` is its config.json, `weights_dir` the
        directory when it holds *.safetensors (else None: random weights).
      - "factory": `path.py:fn`; `factory()` returns `(module, example_inputs)`.
    `model_id` is what the module attribute `emmy.model` records.
    """

    spec: str
    kind: Literal["known", "local", "factory"]
    model_id: str
    config: Mapping[str, Any] | None = None
    weights_dir: Path | None = None
    factory: Callable[[], Any] | None = field(default=None, repr=False)

    @property
    def has_weights(self) -> bool:
        return self.weights_dir is not None


def known_models() -> list[str]:
    """The model ids `resolve_model` knows without any local files."""
    return sorted(KNOWN_MODELS)


def resolve_model(spec: str, *, hf_cache: str | Path | None = None) -> ModelSource:
    """Resolve a MODEL argument. `hf_cache` (optional) is a Hugging Face hub cache directory
    (`.../hub`, holding `models--Org--Name/snapshots/<rev>/`) in which a known id's real
    weights may be found; the command line passes it, this function reads no environment.
    Raises EmmyError for anything it cannot resolve."""
    if spec in KNOWN_MODELS:
        return _known(spec, hf_cache)
    for known in KNOWN_MODELS:
        if known.lower() == spec.lower():
            return _known(known, hf_cache)
    if ":" in spec:
        path, _, fn = spec.rpartition(":")
        if path.endswith(".py"):
            return _factory(spec, Path(path), fn)
    if spec.endswith(".py"):
        raise EmmyError(
            f"model '{spec}': a Python factory needs its function name, as 'path/to/file.py:fn'"
        )
    path = Path(spec)
    if path.is_dir():
        return _local_dir(spec, path)
    raise EmmyError(f"unknown model '{spec}'", hint=_model_hint())


def _model_hint() -> str:
    return (
        "MODEL is one of:\n"
        + "".join(f"  - a known id: {m}\n" for m in known_models())
        + "  - a local Hugging Face model directory holding config.json (and *.safetensors for "
        "real weights; without them the weights are random)\n"
        "  - a Python factory 'path/to/file.py:fn', where fn() returns (module, example_inputs)"
    )


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise EmmyError(f"cannot read model config {path}: {e}") from None
    if not isinstance(config, dict):
        raise EmmyError(f"model config {path} is not a JSON object")
    return config


def _known(model_id: str, hf_cache: str | Path | None) -> ModelSource:
    snapshot = _find_in_hf_cache(model_id, hf_cache) if hf_cache is not None else None
    if snapshot is not None:
        return ModelSource(
            spec=model_id,
            kind="known",
            model_id=model_id,
            config=_read_config(snapshot / "config.json"),
            weights_dir=snapshot,
        )
    return ModelSource(
        spec=model_id,
        kind="known",
        model_id=model_id,
        config=_read_config(_MODELS_DIR / KNOWN_MODELS[model_id]),
    )


def _find_in_hf_cache(model_id: str, hf_cache: str | Path) -> Path | None:
    """A snapshot directory of `model_id` holding config.json and *.safetensors, if any."""
    snapshots = Path(hf_cache) / ("models--" + model_id.replace("/", "--")) / "snapshots"
    if not snapshots.is_dir():
        return None
    for snap in sorted(snapshots.iterdir()):
        if (snap / "config.json").is_file() and any(snap.glob("*.safetensors")):
            return snap
    return None


def _local_dir(spec: str, path: Path) -> ModelSource:
    config_path = path / "config.json"
    if not config_path.is_file():
        raise EmmyError(
            f"model directory '{spec}' has no config.json (expected a Hugging Face model directory)",
            hint=_model_hint(),
        )
    weights = path if any(path.glob("*.safetensors")) else None
    return ModelSource(
        spec=spec,
        kind="local",
        model_id=str(path),
        config=_read_config(config_path),
        weights_dir=weights,
    )


def _factory(spec: str, path: Path, fn_name: str) -> ModelSource:
    if not path.is_file():
        raise EmmyError(f"model factory '{spec}': file {path} does not exist")
    if not fn_name.isidentifier():
        raise EmmyError(f"model factory '{spec}': '{fn_name}' is not a Python function name")
    mod_name = f"emmy_factory_{abs(hash(str(path.resolve())))}"
    try:
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module
        module_spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(mod_name, None)
        raise EmmyError(f"model factory '{spec}': importing {path} failed: {type(e).__name__}: {e}") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise EmmyError(
            f"model factory '{spec}': {path} defines no function '{fn_name}'",
            hint=("functions there: " + ", ".join(names)) if names else None,
        )
    return ModelSource(spec=spec, kind="factory", model_id=spec, factory=fn)
