"""Tracing with `torch.export` into the frontend's `Graph` (the alternative to `capture`).

`export_graph(root, call, inputs, params)` exports `call(*inputs)` (a module, or a closure calling
`root`) with `torch.export.export(..., strict=False)` and converts the exported FX graph into the
same `emmy.frontend.graph.Graph` the `TorchFunctionMode` recorder produces, so
`emmy.frontend.importer.import_graph` gives the same torch-stage IR for both:

- Export's training IR (no `run_decompositions`) keeps the model-level ops Emmy wants:
  `aten.linear`, `aten.scaled_dot_product_attention`, `aten.silu`, `aten.layer_norm`,
  `aten.embedding`, views. A node's name is its op's schema name (`aten::linear` -> `aten.linear`);
  its arguments are converted to the torch-function conventions the importer expects (only
  `aten.embedding(weight, ids)` differs from `F.embedding(ids, weight)`).
- Hugging Face's RMSNorm, which export records as `to(f32), pow(2), mean([-1], keepdim),
  add(eps), rsqrt, mul, to(x.dtype), mul(weight)`, is recognized by that exact pattern in the FX
  graph (intermediates used only inside the chain, the weight a 1-D parameter or input of the
  size of the last axis) and becomes one `emmy.hf_rms_norm(x, weight, eps=...)` node. The
  chain is the definition of `torch.rms_norm`, so no numeric probe is needed (the capture
  tracer, which sees the module call rather than its ops, checks a probe instead).
- `aten._assert_tensor_metadata` nodes are dropped; `operator.getitem` on a multi-result node
  selects one result.
- The module path of each node comes from `node.meta["nn_module_stack"]` (relative to `root`),
  so unsupported ops are reported as `unsupported torch op 'aten.cumsum' at block.1 (Cumsum)
  (stage: torch import)`, exactly like the capture tracer.

Export traces with fake tensors, so its cost does not depend on the token count; its first call
in a process imports `torch._dynamo`, sympy and friends (see `emmy.frontend.trace` for timings).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx, nn

from emmy.diagnostics import EmmyError, first_line
from emmy.frontend.graph import INPLACE_ARITHMETIC, Constant, Graph, Node, Value, inplace_error

_ROOT = "root"  # the attribute under which the wrapper holds the traced module


class _Call(nn.Module):
    """`forward(*xs) = call(*xs)`, with `root` registered so its parameters are lifted."""

    def __init__(self, root: nn.Module, call: Callable[..., Any]):
        super().__init__()
        self.root = root
        object.__setattr__(self, "_call", call)  # not registered: it may be `root` itself

    def forward(self, *xs: torch.Tensor) -> Any:
        return self._call(*xs)


def export_graph(
    root: nn.Module,
    call: Callable[..., Any],
    inputs: Sequence[tuple[str, torch.Tensor]],
    params: Sequence[tuple[str, torch.Tensor]] | None = None,
) -> Graph:
    """Export `call(*input tensors)` and convert it. Parameters are `root`'s named parameters
    (or the given list; a lifted tensor not in it is a `Constant`); paths are relative to `root`."""
    wrapper = _Call(root, call)
    try:
        with torch.no_grad():
            ep = torch.export.export(wrapper, tuple(t for _, t in inputs), strict=False)
    except EmmyError:
        raise
    except Exception as e:  # noqa: BLE001 - any tracing failure is a user-facing error
        raise EmmyError(
            f"torch.export could not trace {type(root).__name__}: {first_line(e)} "
            "(stage: torch.export)"
        ) from None
    return _Converter(ep, wrapper, inputs, params if params is not None else list(root.named_parameters())).run()


# ------------------------------------------------------------------------------------ conversion
def op_name(target: Any) -> str:
    """`aten.linear` for `torch.ops.aten.linear.default`; a readable name for anything else."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.replace("::", ".")
    return getattr(target, "__name__", None) or str(target)


def _is(node: Any, name: str) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and op_name(node.target) == name


def _meta(node: fx.Node) -> Any:
    return node.meta.get("val")


def _tensors(val: Any) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        return [v for v in val if isinstance(v, torch.Tensor)]
    return []


def _where(node: fx.Node) -> tuple[str, str]:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    if path == _ROOT:
        path = ""
    elif path.startswith(_ROOT + "."):
        path = path[len(_ROOT) + 1 :]
    cls_name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]
    return path, cls_name


# Export records aten ops whose argument order differs from the torch-level call the importer's
# table is written for: (aten args, kwargs) -> (torch-level args, kwargs).
_NORMALIZE: dict[str, Callable[[tuple, dict], tuple[tuple, dict]]] = {
    "aten.embedding": lambda a, k: ((a[1], a[0]), {"padding_idx": a[2] if len(a) > 2 else k.get("padding_idx", -1)}),
}

_DROPPED = frozenset({"aten._assert_tensor_metadata"})


class _Converter:
    def __init__(self, ep: Any, wrapper: nn.Module, inputs, params):
        self.ep = ep
        self.wrapper = wrapper
        self.graph = Graph()
        self.inputs = inputs
        self.params = params
        self.env: dict[fx.Node, Any] = {}
        self.count = 0

    def new_value(self, t: torch.Tensor) -> Value:
        v = Value(self.count, tuple(int(d) for d in t.shape), t.dtype)
        self.count += 1
        return v

    # ---------------------------------------------------------------- placeholders
    def bind_placeholders(self) -> None:
        from torch.export.graph_signature import InputKind

        g = self.graph
        for name, t in self.inputs:
            g.inputs.append((name, self.new_value(t)))
        by_id: dict[int, Value] = {}
        for name, t in self.params:
            if id(t) not in by_id:
                by_id[id(t)] = v = self.new_value(t)
                g.params.append((name, v))
        placeholders = [n for n in self.ep.graph.nodes if n.op == "placeholder"]
        user = iter(v for _, v in g.inputs)
        for node, spec in zip(placeholders, self.ep.graph_signature.input_specs, strict=True):
            if spec.kind == InputKind.USER_INPUT:
                self.env[node] = next(user)
                continue
            tensor = None
            if spec.kind == InputKind.PARAMETER:
                tensor = self.wrapper.get_parameter(spec.target)
            elif spec.kind == InputKind.BUFFER:
                tensor = self.wrapper.get_buffer(spec.target)
            hit = by_id.get(id(tensor)) if tensor is not None else None
            val = _meta(node)
            self.env[node] = hit if hit is not None else Constant(tuple(val.shape), val.dtype)

    # ---------------------------------------------------------------- nodes
    def arg(self, a: Any) -> Any:
        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
            return (tuple if isinstance(a, tuple) else list)(self.arg(x) for x in a)
        return a

    def emit(self, node: fx.Node, name: str, args: tuple, kwargs: dict) -> None:
        val = _meta(node)
        outs = tuple(self.new_value(t) for t in _tensors(val))
        path, cls = _where(node)
        self.graph.nodes.append(Node(name, args, kwargs, outs, path, cls))
        if isinstance(val, (list, tuple)):
            it = iter(outs)
            self.env[node] = tuple(next(it) if isinstance(v, torch.Tensor) else v for v in val)
        else:
            self.env[node] = outs[0] if outs else None

    def run(self) -> Graph:
        self.bind_placeholders()
        norms, skip = find_hf_rms_norms(self.ep.graph, {n for n, v in self.env.items() if isinstance(v, Value)})
        for node in self.ep.graph.nodes:
            if node.op == "placeholder" or node in skip:
                continue
            if node.op == "output":
                self.bind_outputs(node)
                continue
            if node.op != "call_function":
                self.emit(node, f"fx.{node.op}:{node.target}", (), {})
                continue
            if node in norms:
                x, w, eps = norms[node]
                self.emit(node, "emmy.hf_rms_norm", (self.env[x], self.env[w]), {"eps": eps})
                continue
            if node.target is operator.getitem:
                self.env[node] = self.env[node.args[0]][node.args[1]]
                continue
            name = op_name(node.target)
            if name in _DROPPED:
                continue
            args, kwargs = tuple(self.arg(a) for a in node.args), {k: self.arg(v) for k, v in node.kwargs.items()}
            if name in _NORMALIZE:
                args, kwargs = _NORMALIZE[name](args, kwargs)
            if name in INPLACE_ARITHMETIC:
                _check_inplace(node, name)
            self.emit(node, name, args, kwargs)
        return self.graph

    def bind_outputs(self, node: fx.Node) -> None:
        from torch.export.graph_signature import OutputKind

        results = node.args[0]
        for spec, r in zip(self.ep.graph_signature.output_specs, results, strict=True):
            if spec.kind != OutputKind.USER_OUTPUT:
                raise EmmyError(
                    f"the traced module mutates {spec.target} ({spec.kind.name.lower()}); "
                    "only pure forward computations are supported (stage: torch.export)"
                )
            self.graph.outputs.append(self.arg(r))


def _check_inplace(node: fx.Node, name: str) -> None:
    """See `INPLACE_ARITHMETIC`: the tensor written must not be a placeholder (an input, a
    parameter or a buffer), a view, or viewed by another node."""
    target = node.args[0]
    if not isinstance(target, fx.Node):
        return
    leaf = target.op == "placeholder"
    aliased = _is_view(target) or any(_is_view(u) for u in target.users if u is not node)
    if leaf or aliased:
        raise inplace_error(name, *_where(node), leaf=leaf, stage="torch.export")


def _is_view(node: fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and bool(node.target.is_view)


# ------------------------------------------------------------------------------------ RMSNorm
def _users(node: fx.Node) -> list[fx.Node]:
    return [u for u in node.users if not _is(u, "aten._assert_tensor_metadata")]


def _single_user(node: fx.Node) -> fx.Node | None:
    users = _users(node)
    return users[0] if len(users) == 1 else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dtype(node: Any) -> torch.dtype | None:
    val = _meta(node) if isinstance(node, fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _is_cast(node: Any, dtype: torch.dtype) -> bool:
    return (_is(node, "aten.to") or _is(node, "aten._to_copy")) and _dtype(node) == dtype


def _other(mul: fx.Node, one: fx.Node) -> Any:
    """The operand of a two-tensor `aten.mul` that is not `one` (None if `one` is not an operand)."""
    if not _is(mul, "aten.mul") or len(mul.args) != 2 or mul.kwargs:
        return None
    a, b = mul.args
    return b if a is one else a if b is one else None


def _match_rms_norm(rsqrt: fx.Node, weights: set[fx.Node]):
    """(final mul, x, weight, eps, chain nodes) if `rsqrt` sits in HF's RMSNorm chain."""
    add = rsqrt.args[0]
    if not (_is(add, "aten.add") and len(add.args) == 2 and _number(add.args[1])):
        return None
    if add.kwargs.get("alpha", 1) != 1:
        return None
    mean = add.args[0]
    if not (_is(mean, "aten.mean") and len(mean.args) >= 2 and mean.kwargs.get("dtype") is None):
        return None
    keepdim = mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim", False)
    pow_ = mean.args[0]
    if not (keepdim is True and _is(pow_, "aten.pow") and len(pow_.args) == 2 and pow_.args[1] == 2):
        return None
    xf = pow_.args[0]
    xf_val = _meta(xf) if isinstance(xf, fx.Node) else None
    if not isinstance(xf_val, torch.Tensor) or xf_val.dtype != torch.float32:
        return None
    rank = xf_val.dim()
    if list(mean.args[1]) not in ([-1], [rank - 1]):
        return None
    if not (_single_user(pow_) is mean and _single_user(mean) is add and _single_user(add) is rsqrt):
        return None
    norm = _single_user(rsqrt)
    if norm is None or _other(norm, rsqrt) is not xf:
        return None
    chain = [pow_, mean, add, rsqrt, norm]
    if _is_cast(xf, torch.float32) and set(_users(xf)) == {pow_, norm}:
        x = xf.args[0]
        chain.insert(0, xf)
    else:  # the input is f32 already and HF's `.to(float32)` left no node
        x = xf
    x_dtype = _dtype(x)
    back = _single_user(norm)
    if back is not None and _is_cast(back, x_dtype) and back.args[0] is norm:
        chain.append(back)
        final = _single_user(back)
        scaled = back
    elif x_dtype == torch.float32:
        final, scaled = back, norm
    else:
        return None
    if final is None:
        return None
    weight = _other(final, scaled)
    w_val = _meta(weight) if isinstance(weight, fx.Node) else None
    if weight not in weights or not isinstance(w_val, torch.Tensor) or tuple(w_val.shape) != (xf_val.shape[-1],):
        return None
    return final, x, weight, float(add.args[1]), chain


def find_hf_rms_norms(
    graph: fx.Graph, weights: set[fx.Node]
) -> tuple[dict[fx.Node, tuple[fx.Node, fx.Node, float]], set[fx.Node]]:
    """HF RMSNorm chains in an exported graph: {final mul: (x, weight, eps)} and the set of the
    chains' other nodes (to skip; they have no users outside the chain). `weights`: the
    placeholders that may serve as the norm weight."""
    norms: dict[fx.Node, tuple[fx.Node, fx.Node, float]] = {}
    skip: set[fx.Node] = set()
    for node in graph.nodes:
        if _is(node, "aten.rsqrt"):
            hit = _match_rms_norm(node, weights)
            if hit is not None:
                final, x, weight, eps, chain = hit
                norms[final] = (x, weight, eps)
                skip.update(chain)
    return norms, skip
