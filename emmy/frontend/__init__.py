"""Emmy's frontend: which model (`resolve_model`) and its traced torch-stage IR (`trace_layer`).

`emmy.frontend.models` is light; `trace_layer` and `TracedLayer` import torch (about 1 s), so they
load on first use and resolving (or rejecting) a MODEL argument stays instant.
"""

from typing import TYPE_CHECKING, Any

from emmy.frontend.models import ModelSource, known_models, resolve_model

if TYPE_CHECKING:
    from emmy.frontend.trace import TracedLayer, trace_layer

__all__ = ["ModelSource", "TracedLayer", "known_models", "resolve_model", "trace_layer"]


def __getattr__(name: str) -> Any:
    if name in ("TracedLayer", "trace_layer"):
        from emmy.frontend import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'emmy.frontend' has no attribute '{name}'")
