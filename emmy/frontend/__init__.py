"""Emmy's frontend: which model (`resolve_model`) and its traced torch-stage IR (`trace_layer` for
one decoder layer, `trace_model` for a whole Llama-family model).

`emmy.frontend.models` and `emmy.frontend.trace_cache` (traced modules kept on disk, so a repeated
`emmy compile` needs no torch) are light; everything else imports torch (about 1 s), so it loads
on first use and resolving (or rejecting) a MODEL argument stays instant.
"""

from typing import TYPE_CHECKING, Any

from emmy.frontend.models import ModelSource, known_models, resolve_model

if TYPE_CHECKING:
    from emmy.frontend.trace import TRACERS, TracedLayer, trace_layer
    from emmy.frontend.whole_model import TracedModel, layer_key, trace_model

__all__ = [
    "TRACERS",
    "ModelSource",
    "TracedLayer",
    "TracedModel",
    "known_models",
    "layer_key",
    "resolve_model",
    "trace_layer",
    "trace_model",
]

_LAZY = {
    "TRACERS": "emmy.frontend.trace",
    "TracedLayer": "emmy.frontend.trace",
    "trace_layer": "emmy.frontend.trace",
    "TracedModel": "emmy.frontend.whole_model",
    "layer_key": "emmy.frontend.whole_model",
    "trace_model": "emmy.frontend.whole_model",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'emmy.frontend' has no attribute '{name}'")
