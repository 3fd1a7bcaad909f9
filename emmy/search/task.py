"""Tuning tasks: one per distinct kernel key of a compiled layer or model.

    tasks = tasks_of(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=0, target="sm_90a"),
                     tokens=[512, 4096])
    tasks[0].kernel, tasks[0].key.id, tasks[0].default     # "rms_norm_qkv_proj", "3f9c...", {...}

A `TuneTask` is plain data (it crosses into worker processes): the kernel's name, its key
(`emmy.schedule.key.KernelKey`), the target, the tile-stage module that runs just this kernel
(`emmy.measure.isolate.isolate`, printed, knobs undecided), its knob space, the answer the
compile gave it without local records (`default`: golden, prior or rules), and a readable
description.
Identical kernels (same key: other layers, other parts of a model, other token counts that give
the same shapes) are one task, tuned once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from emmy.diagnostics import EmmyError

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from emmy.analysis.classify import KernelInfo
    from emmy.dialects.tile import KernelOp
    from emmy.driver import CompileOptions
    from emmy.targets import Target


@dataclass(frozen=True)
class TuneTask:
    """One tuning problem: a kernel key and what measuring a candidate of it needs."""

    kernel: str
    key: object  # emmy.schedule.key.KernelKey
    target: str
    module: str  # the isolated tile-stage module, printed (knobs undecided)
    space: Mapping[str, tuple[int | str, ...]]  # knob -> domain, in the kernel's order
    default: Mapping[str, int | str]  # the answer before tuning (rules or pins)
    description: str
    tokens: int = 0
    model: str = ""  # the model it was compiled from (where known): what leave-one-model-out holds out

    @property
    def key_id(self) -> str:
        return self.key.id  # type: ignore[attr-defined]

    def kernel_op(self) -> KernelOp:
        """The task's `tile.kernel`, parsed from `module`."""
        from emmy.context import make_context
        from emmy.dialects.tile import KernelOp
        from emmy.ir_io import parse_module

        module = parse_module(make_context(), self.module, f"<task {self.kernel}>")
        return next(op for op in module.walk() if isinstance(op, KernelOp))

    def info(self) -> KernelInfo:
        from emmy.analysis.classify import classify

        return classify(self.kernel_op())

    def target_object(self) -> Target:
        from emmy.targets import get_target

        return get_target(self.target)


def tasks_in(module: ModuleOp, target: Target, tokens: int = 0) -> list[TuneTask]:
    """A task per kernel of a tile-stage module after decide-forks (decided knobs give the
    default answer), each key once, in IR order."""
    from emmy.dialects.tile import KernelOp
    from emmy.ir_io import print_module
    from emmy.measure.isolate import isolate
    from emmy.schedule.key import describe, kernel_key

    tasks: dict[str, TuneTask] = {}
    for op in module.walk():
        if not isinstance(op, KernelOp):
            continue
        key = kernel_key(op, target)
        if key.id in tasks:
            continue
        knobs = op.knob_dict()
        tasks[key.id] = TuneTask(
            kernel=op.kernel_name,
            key=key,
            target=target.name,
            module=print_module(isolate(module, op.kernel_name)),
            space={name: tuple(k.values) for name, k in knobs.items()},
            default={name: k.value for name, k in knobs.items() if k.value is not None},
            description=describe(op),
            tokens=tokens,
        )
    return list(tasks.values())


def tasks_of(options: CompileOptions, tokens: Sequence[int]) -> list[TuneTask]:
    """Every distinct kernel key of the compiled layer (`options.layer`) or, with layer None,
    of the whole model, at each token count: each key once, in order of first appearance.

    The compile stops after decide-forks and reads no store (the default answer is what Emmy
    chooses without local records: golden, nearest golden, prior or rules, as `options` say)."""
    from emmy.driver import compile_model, compile_whole_model
    from emmy.targets import get_target

    target = get_target(options.target)
    seen: dict[str, TuneTask] = {}
    for t in tokens:
        opts = replace(options, tokens=t, stop_after="tile", records="")
        if options.layer is None:
            modules = [p.result.module for p in compile_whole_model(opts).parts]
        else:
            modules = [compile_model(opts).module]
        for module in modules:
            for task in tasks_in(module, target, t):
                seen.setdefault(task.key_id, replace(task, model=options.model))
    return list(seen.values())


def select(tasks: Iterable[TuneTask], kernels: Sequence[str]) -> list[TuneTask]:
    """The tasks of the named kernels (all with none named); an unknown name is an EmmyError
    listing the kernels there are."""
    tasks = list(tasks)
    if not kernels:
        return tasks
    names = list(dict.fromkeys(t.kernel for t in tasks))
    unknown = [k for k in kernels if k not in names]
    if unknown:
        raise EmmyError(f"--kernel {', '.join(unknown)}: no such kernel here",
                        hint="kernels: " + ", ".join(names))
    return [t for t in tasks if t.kernel in kernels]


__all__ = ["TuneTask", "select", "tasks_in", "tasks_of"]
