"""One candidate schedule of an isolated kernel, lowered to CUDA: the pipeline from decide-forks on
with the candidate's values pinned.

    lowered = lower_candidate(module_text, "o_proj_residual", {"block_m": 128, "split_k": 2})
    lowered.plan.source        # the .cu text
    lowered.facts              # {"launches": 2, "threads": 384, "smem": 98304, "grid": ..., "knobs": {...}}

`module_text` is an isolated tile-stage module (`isolate.py`), knobs undecided. A candidate that
the pipeline rejects (an illegal combination, an unknown knob) raises EmmyError with the pass's
message; the measurer turns that into a failed Measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from emmy.passes.pipeline import PIPELINE

# the passes a candidate runs through: decide-forks and everything after it
_FROM = "decide-forks"


def pin_spec(kernel_name: str, values: Mapping[str, object]) -> str:
    """decide-forks' `pin` option for one kernel's values: `KERNEL.KNOB=VALUE;...` (sorted)."""
    return ";".join(f"{kernel_name}.{k}={values[k]}" for k in sorted(values))


def candidate_passes(pin: str) -> list:
    """The pipeline from decide-forks on, decide-forks pinning `pin`."""
    import importlib

    start = [name for name, *_ in PIPELINE].index(_FROM)
    passes = []
    for name, module, cls, _ in PIPELINE[start:]:
        pass_cls = getattr(importlib.import_module(f"emmy.passes.{module}"), cls)
        passes.append(pass_cls(pin=pin) if name == _FROM else pass_cls())
    return passes


@dataclass(frozen=True)
class Lowered:
    """A candidate as CUDA: its launch plan (`emmy.backend.plan.LaunchPlan`) and what the plan
    says about it (per kernel: threads, grid, shared memory; launches; the decided knobs)."""

    plan: object
    facts: Mapping[str, object] = field(default_factory=dict)


def lower_candidate(module_text: str, kernel_name: str, values: Mapping[str, object]) -> Lowered:
    """Parse the isolated module, pin `values` on `kernel_name`, lower to CUDA."""
    from emmy.backend.plan import launch_plan
    from emmy.context import make_context
    from emmy.dialects.tile import KernelOp
    from emmy.ir_io import parse_module, run_passes
    from emmy.targets import module_target

    ctx = make_context()
    module = parse_module(ctx, module_text, f"<isolated {kernel_name}>")
    knobs: dict[str, object] = {}
    sources: dict[str, str] = {}

    def record(p, m) -> None:
        if p.name == _FROM:
            for k in m.walk():
                if isinstance(k, KernelOp) and k.kernel_name == kernel_name:
                    knobs.update(k.knob_values())
                    sources.update(a_sources(k, module_target(m)))

    run_passes(ctx, module, candidate_passes(pin_spec(kernel_name, values)), after_each=record, verify_each=False)
    plan = launch_plan(module)
    return Lowered(plan, plan_facts(plan, knobs, sources))


def a_sources(kernel, target) -> dict[str, str]:
    """Per contraction part of a decided kernel, where its A side comes from (the plan's
    `a_source` and its reason)."""
    from emmy.schedule.contraction import ContractionPlan
    from emmy.schedule.plan import plan_kernel

    parts = plan_kernel(kernel, target).parts
    return {p.plan.name: f"{p.plan.a_source} ({p.plan.a_source_reason})" for p in parts if isinstance(p.plan, ContractionPlan)}


def plan_facts(plan, knobs: Mapping[str, object], a_source: Mapping[str, str] | None = None) -> dict[str, object]:
    """What the launch plan predicts: the knobs as decided, the forward launches, per kernel its
    threads per block, grid and shared memory (the largest over its launches), and where a
    contraction's A side comes from (`a_source`, per part: `a_sources`) beside that memory."""
    forward = [launch for launch in plan.launches if not launch.prepare]
    kernels: dict[str, dict[str, object]] = {}
    for launch in forward:
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
        k = kernels.setdefault(launch.kernel, {"threads": threads, "blocks": blocks, "smem": launch.smem})
        k["smem"] = max(int(k["smem"]), launch.smem)
    return {
        "knobs": dict(knobs),
        "launches": len(forward),
        "kernels": kernels,
        "smem": max((int(k["smem"]) for k in kernels.values()), default=0),
        **({"a_source": "; ".join(f"{part}: {why}" for part, why in a_source.items())} if a_source else {}),
        "threads": max((int(k["threads"]) for k in kernels.values()), default=0),
    }


__all__ = ["Lowered", "a_sources", "candidate_passes", "lower_candidate", "pin_spec", "plan_facts"]
