"""Running a compiled layer on concrete tensors (interpreted on the CPU, or on the GPU)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr

from emmy.diagnostics import EmmyError


def entry_function(module: ModuleOp) -> func.FuncOp:
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            return op
    raise EmmyError("the module holds no function to run")


def argument_names(fn: func.FuncOp) -> list[str]:
    """The PyTorch name of each function argument (its `emmy.name` argument attribute)."""
    names = []
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
    for i, _ in enumerate(fn.args):
        name = None
        if i < len(attrs):
            value = attrs[i].data.get("emmy.name")
            if isinstance(value, StringAttr):
                name = value.data
        names.append(name if name is not None else f"arg{i}")
    return names


def bind_arguments(fn: func.FuncOp, values: dict[str, object]) -> list[object]:
    """Order named tensors as the function's arguments."""
    out = []
    for name in argument_names(fn):
        if name not in values:
            raise EmmyError(f"no value for argument '{name}' of @{fn.sym_name.data}")
        out.append(values[name])
    return out


@dataclass
class RunReport:
    """`rel_error` of `output` against `reference`. Where the model computes in bf16 (or
    another format narrower than float32), `reference` is PyTorch's result in float32 and
    `baseline_error` PyTorch's own bf16 result's error against it: rounding to bf16 at different
    points deviates by about as much as PyTorch itself does (Gemma 3's layer, with six norms,
    about 1%), so the check allows what PyTorch's bf16 model itself deviates."""

    output: np.ndarray
    reference: np.ndarray
    rel_error: float
    baseline_error: float | None = None
    shapes: tuple[tuple[int, ...], ...] = ()  # every output's shape, where there are several

    def describe(self) -> str:
        """"shape (4, 16)", or "shapes (4, 16), (4, 16)" for a function with several results."""
        if len(self.shapes) > 1:
            return "shapes " + ", ".join(str(s) for s in self.shapes)
        return f"shape {tuple(self.output.shape)}"

    def allowed(self, tolerance: float) -> float:
        """The error a --check accepts: the tolerance, or 1.5x PyTorch's own bf16 error."""
        if self.baseline_error is None:
            return tolerance
        return max(tolerance, 1.5 * self.baseline_error)


def model_report(traced, output: np.ndarray, input_ids=None) -> RunReport:
    """A whole-model report: `output` (the pooled embedding) against PyTorch in float32, next
    to PyTorch's bf16 embedding against the same."""
    from emmy.interp.numeric import rel_error, to_numpy

    ref = to_numpy(traced.embed_float32(input_ids)).astype(np.float32)
    bf16 = to_numpy(traced.embed(input_ids)).astype(np.float32)
    return RunReport(
        output=output, reference=ref, rel_error=rel_error(output, ref), baseline_error=rel_error(bf16, ref)
    )


def run_interpreted(module: ModuleOp, traced, stage: str = "tile") -> RunReport:
    """Run the module's function with the tile-stage interpreter on the traced inputs and weights,
    and compare with the PyTorch layer on the same values."""
    import importlib

    from emmy.interp.numeric import to_numpy

    interp = importlib.import_module(f"emmy.interp.{stage}_stage")
    fn = entry_function(module)
    values = {name: to_numpy(t) for name, t in {**traced.inputs, **traced.params}.items()}
    args = bind_arguments(fn, values)
    outs = interp.run_function(module, args)
    return check(outs, traced)


def check(outs, traced) -> RunReport:
    """A report on a traced layer's (or factory's) results: against PyTorch in float32 with
    PyTorch's own error beside it where the module computes in a narrower format, else against
    PyTorch's result."""
    reference = traced.reference(dict(traced.inputs))
    wide = traced.float32_reference()
    if wide is None:
        return compare(outs, reference)
    report = compare(outs, wide)
    report.baseline_error = compare(_as_list(reference), wide).rel_error
    return report


def _as_list(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def compare(outs, reference) -> RunReport:
    """A report on a function's results `outs` (arrays or tensors, in order) against what
    PyTorch returned (a tensor, or a tuple of them): one relative error over all of them."""
    from emmy.interp.numeric import rel_error, to_numpy

    refs = _as_list(reference)
    if len(outs) != len(refs):
        raise EmmyError(f"the compiled function returns {len(outs)} values where PyTorch's module returns {len(refs)}")

    def as_np(x) -> np.ndarray:
        return np.asarray(x if isinstance(x, np.ndarray) else to_numpy(x), dtype=np.float32)

    ref_np = [as_np(r) for r in refs]
    out_np = [as_np(o).reshape(r.shape) for o, r in zip(outs, ref_np)]
    if len(out_np) == 1:
        out, ref = out_np[0], ref_np[0]
    else:
        out = np.concatenate([o.ravel() for o in out_np])
        ref = np.concatenate([r.ravel() for r in ref_np])
    return RunReport(output=out, reference=ref, rel_error=rel_error(out, ref),
                     shapes=tuple(tuple(r.shape) for r in ref_np))


def run_model_interpreted(result, input_ids=None) -> RunReport:
    """A whole model (`emmy.driver.ModelCompileResult`) with the tile-stage interpreter, part by
    part; the pooled, L2-normalized last-token embedding next to PyTorch's. For small models."""
    from emmy.interp import tile_stage
    from emmy.interp.numeric import to_numpy

    traced = result.traced

    def run(part, traced_part, values):
        fn = entry_function(part.result.module)
        np_values = {k: (v if isinstance(v, np.ndarray) else to_numpy(v)) for k, v in values.items()}
        params = {k: to_numpy(v) for k, v in traced_part.params.items()}
        (out,) = tile_stage.run_function(part.result.module, bind_arguments(fn, {**np_values, **params}))
        return np.asarray(out, dtype=np.float32)

    ids_t = traced.ids(input_ids)
    ids = ids_t.numpy()
    final = result.chain(ids, to_numpy(traced.cos), to_numpy(traced.sin), run)
    import torch

    from emmy.frontend.whole_model import pool

    hidden_t = torch.from_numpy(final.reshape(final.shape[0], final.shape[1], -1)).to(traced.config.dtype)
    return model_report(traced, to_numpy(pool(hidden_t)), ids_t)
