"""Recording what a PyTorch module does, one torch-level call at a time.

`capture(root, call, inputs)` runs `call(*inputs)` eagerly on real tensors under a
`TorchFunctionMode` and records every torch call that produces a tensor as a `Node`: the op name
(`aten.<name>`, e.g. `aten.linear`, `aten.scaled_dot_product_attention`, `aten.view`), its
arguments with tensors replaced by `Value`s, the result `Value`s (shape and dtype), and the module
path it ran in (the equivalent of torch.export's `nn_module_stack`). Calls made inside a recorded
call are not seen (F.silu is one node, not its implementation), and neither are metadata queries
(`x.shape`, `x.dtype`).

Why not torch.export by default: on this 2-core machine its first call costs ~1.2 s of imports
(`torch._dynamo`, sympy) plus 0.3-0.4 s of tracing, and `emmy compile` has under 3 s in total
(measurements in `emmy.frontend.trace`). Capturing at the torch-function level is ~20-100 ms and
keeps the model-level ops (linear, scaled_dot_product_attention, silu) that export also keeps;
`emmy.frontend.export` is the torch.export tracer, producing the same `Graph`.
While recording, linear and attention calls return zeros of the right shape instead of computing
(`_SHAPE_ONLY`), so the cost does not grow with the token count; the graph must therefore not
depend on tensor values (data-dependent control flow is not supported anyway).

Hugging Face-style RMSNorm modules (see `RMSNORM_SUFFIX`) are recorded as one node,
`emmy.hf_rms_norm(x, weight, eps=...)`, instead of their to/pow/mean/add/rsqrt/mul/to/mul.

The result is an `emmy.frontend.graph.Graph`, the same structure `emmy.frontend.export` builds
from torch.export's graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from emmy.diagnostics import EmmyError, first_line
from emmy.frontend.graph import INPLACE_ARITHMETIC, Constant, Graph, Node, Value, inplace_error

# RMSNorm modules are recognized by class name (`...RMSNorm`), a 1-D `weight`, a float
# `variance_epsilon` (or `eps`), and by checking on a random probe that the module computes exactly
# `weight * (x.f32 * rsqrt(mean(x.f32^2, -1) + eps)).to(x.dtype)` (Hugging Face's Llama, Mistral,
# Qwen2, Qwen3 RMSNorm and Emmy's copy do; Gemma's `(1 + weight)` variant does not, and is then
# recorded op by op).
RMSNORM_SUFFIX = "RMSNorm"


# Dunder methods -> aten-style op names (reflected forms keep the tensor first).
_DUNDER = {
    "add": "add",
    "radd": "add",
    "iadd": "add_",
    "sub": "sub",
    "rsub": "rsub",
    "isub": "sub_",
    "mul": "mul",
    "rmul": "mul",
    "imul": "mul_",
    "truediv": "div",
    "rtruediv": "rdiv",
    "itruediv": "div_",
    "floordiv": "floor_divide",
    "pow": "pow",
    "rpow": "pow",
    "matmul": "matmul",
    "rmatmul": "matmul",
    "neg": "neg",
    "getitem": "getitem",
    "setitem": "index_put_",
}


def op_name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if name == "__get__":  # a tensor property such as `.T` or `.data`
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    if name.startswith("__") and name.endswith("__"):
        name = _DUNDER.get(name[2:-2], name[2:-2])
    return f"aten.{name}"


def _is_inplace(name: str, kwargs: dict[str, Any]) -> bool:
    return (name.endswith("_") and not name.endswith("__")) or kwargs.get("out") is not None


class _Recorder(TorchFunctionMode):
    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph
        self.values: dict[int, tuple[torch.Tensor, Value]] = {}
        self.count = 0
        self.stack: list[tuple[str, str]] = []
        self.paused = False

    # ---------------------------------------------------------------- values
    def new_value(self, t: torch.Tensor) -> Value:
        v = Value(self.count, tuple(t.shape), t.dtype)
        self.count += 1  # not len(values): an in-place op gives its tensor a new value
        self.values[id(t)] = (t, v)  # keeps t alive, so its id stays unique
        return v

    def lookup(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            hit = self.values.get(id(obj))
            if hit is not None and hit[0] is obj:
                return hit[1]
            return Constant(tuple(obj.shape), obj.dtype)
        if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
            return type(obj)(self.lookup(o) for o in obj)
        return obj

    def where(self) -> tuple[str, str]:
        return self.stack[-1] if self.stack else ("", "")

    def record(self, name: str, args: Sequence[Any], kwargs: dict[str, Any], result: Any) -> None:
        outs = result if isinstance(result, (tuple, list)) else (result,)
        path, cls = self.where()
        self.graph.nodes.append(
            Node(
                op=name,
                args=tuple(self.lookup(a) for a in args),
                kwargs={k: self.lookup(v) for k, v in kwargs.items()},
                outputs=tuple(self.new_value(o) for o in outs if isinstance(o, torch.Tensor)),
                module_path=path,
                module_class=cls,
            )
        )

    def check_inplace(self, name: str, t: torch.Tensor) -> None:
        """See `INPLACE_ARITHMETIC`: x must not be an input, a parameter, a view or viewed."""
        hit = self.values.get(id(t))
        if hit is None or hit[0] is not t:
            return
        leaves = {v for _, v in self.graph.inputs} | {v for _, v in self.graph.params}
        aliased = t._base is not None or any(o._base is t for o, _ in self.values.values())
        if hit[1] in leaves or aliased:
            raise inplace_error(name, *self.where(), leaf=hit[1] in leaves, stage="capture")

    # ---------------------------------------------------------------- the mode
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        if not self.paused and name in INPLACE_ARITHMETIC and args and isinstance(args[0], torch.Tensor):
            self.check_inplace(name, args[0])
        meta = _shape_only(name, args, kwargs)
        if meta is not None:  # a well-formed matmul-class call: its values do not matter here
            result = torch.zeros(meta[0], dtype=meta[1], device=args[0].device)
        else:
            result = func(*args, **kwargs)
        if self.paused or not _has_tensor(result):
            return result
        if not _is_inplace(name, kwargs) and isinstance(result, torch.Tensor):
            hit = self.values.get(id(result))
            if hit is not None and hit[0] is result:
                return result  # returned an existing tensor unchanged (contiguous, to same dtype)
        self.record(name, args, kwargs, result)
        return result


def _linear_meta(x, weight, bias=None):
    """Result (shape, dtype) of a well-formed F.linear, else None (then it runs for real)."""
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)):
        return None
    if x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != weight.shape[1] or x.dtype != weight.dtype:
        return None
    if bias is not None and (bias.shape != weight.shape[:1] or bias.dtype != x.dtype):
        return None
    return (*x.shape[:-1], weight.shape[0]), x.dtype


def _sdpa_meta(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Result (shape, dtype) of a well-formed mask-free F.scaled_dot_product_attention, else None."""
    ts = (q, k, v)
    if attn_mask is not None or not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in ts):
        return None
    if len({t.dtype for t in ts}) != 1 or q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        return None
    if q.shape[3] != k.shape[3] or q.shape[1] % k.shape[1] or (q.shape[1] != k.shape[1] and not enable_gqa):
        return None
    return (*q.shape[:3], v.shape[3]), q.dtype


# The expensive calls of a layer: their results are zeros of the right shape and dtype while
# recording (the recorded graph does not depend on values; `reference` computes for real).
# A call these rules do not accept runs for real, so PyTorch reports its own errors.
_SHAPE_ONLY = {
    "aten.linear": _linear_meta,
    "aten.scaled_dot_product_attention": _sdpa_meta,
}


def _shape_only(name: str, args: Sequence[Any], kwargs: dict[str, Any]):
    rule = _SHAPE_ONLY.get(name)
    if rule is None or not args:
        return None
    try:
        return rule(*args, **kwargs)
    except TypeError:  # called with keywords the rule does not know: run it for real
        return None


def _has_tensor(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (list, tuple)):
        return any(isinstance(o, torch.Tensor) for o in obj)
    return False


def capture(
    root: nn.Module,
    call: Callable[..., Any],
    inputs: Sequence[tuple[str, torch.Tensor]],
    params: Sequence[tuple[str, torch.Tensor]] | None = None,
) -> Graph:
    """Run `call(*input tensors)` and record it. Parameters are `root`'s named parameters (or the
    given list); module paths are relative to `root`."""
    graph = Graph()
    rec = _Recorder(graph)
    for name, t in inputs:
        graph.inputs.append((name, rec.new_value(t)))
    for name, t in params if params is not None else list(root.named_parameters()):
        if id(t) not in rec.values:
            graph.params.append((name, rec.new_value(t)))

    handles = []
    patched: list[nn.Module] = []
    for qualname, mod in root.named_modules():
        handles.append(mod.register_forward_pre_hook(_push(rec, qualname, type(mod).__name__)))
        handles.append(mod.register_forward_hook(_pop(rec), always_call=True))
        if type(mod).__name__.endswith(RMSNORM_SUFFIX) and _rms_norm_eps(mod) is not None:
            mod.forward = _rms_norm_forward(rec, mod)  # instance attribute shadows the method
            patched.append(mod)
    try:
        with torch.no_grad(), rec:
            result = call(*(t for _, t in inputs))
    except EmmyError:
        raise
    except Exception as e:  # noqa: BLE001 - the model failing on its example inputs is a user error
        raise EmmyError(
            f"running {type(root).__name__} on its example inputs to trace it failed: "
            f"{first_line(e)} (stage: capture)"
        ) from None
    finally:
        for h in handles:
            h.remove()
        for mod in patched:
            del mod.forward
    results = result if isinstance(result, (tuple, list)) else (result,)
    for r in results:
        v = rec.lookup(r)
        graph.outputs.append(v)
    return graph


def _push(rec: _Recorder, qualname: str, cls: str):
    def hook(module, args):
        rec.stack.append((qualname, cls))

    return hook


def _pop(rec: _Recorder):
    def hook(module, args, output):
        rec.stack.pop()

    return hook


def _rms_norm_eps(mod: nn.Module) -> float | None:
    w = getattr(mod, "weight", None)
    eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
    if isinstance(w, torch.Tensor) and w.dim() == 1 and isinstance(eps, float):
        return eps
    return None


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """What `torch.rms_norm` means (Hugging Face's LlamaRMSNorm)."""
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _computes_hf_rms_norm(mod: nn.Module, forward, x: torch.Tensor, eps: float) -> bool:
    gen = torch.Generator().manual_seed(0)
    probe = (torch.randn(8, x.shape[-1], generator=gen) * 3 + 0.5).to(x.dtype)  # rows are independent
    out = forward(mod, probe)
    expected = hf_rms_norm(probe, mod.weight, eps)
    return isinstance(out, torch.Tensor) and out.dtype == expected.dtype and torch.equal(out, expected)


def _rms_norm_forward(rec: _Recorder, mod: nn.Module):
    original = type(mod).forward
    eps = _rms_norm_eps(mod)
    assert eps is not None

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        if rec.paused:
            return original(mod, hidden_states)
        rec.paused = True
        try:
            exact = _computes_hf_rms_norm(mod, original, hidden_states, eps)
            out = original(mod, hidden_states) if exact else None
        finally:
            rec.paused = False
        if not exact:  # not HF's RMSNorm after all: record what it does op by op
            return original(mod, hidden_states)
        rec.record("emmy.hf_rms_norm", (hidden_states, mod.weight), {"eps": eps}, out)
        return out

    return forward
