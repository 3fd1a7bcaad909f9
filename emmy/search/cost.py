"""A deterministic measurer with no GPU: a candidate's "time" is a cost computed from what its
plan predicts (`emmy.schedule.space.candidate_facts`), so the tuner's loop and store can be run
and tested on any machine (`emmy tune --measurer cost`).

    m = CostMeasurer()
    m.measure(task, [{"threads": 256, "vector": 8, "items": 1}])[0]
    # Measurement(status="ok", time_s=1.3e-05, spread=0.01, error=0.0, facts={...})

The same candidate always costs the same. About one candidate in `fail_every` (chosen by a hash
of its values) is a deterministic `build_failed`, so failed trials go through the loop too. The
hash leaves out feature knobs at their off value (`knobs.FEATURE_OFF`): a knob added to a space
builds, at that value, the program its kernels built before, which keeps its cost.
`delay_s` sleeps per candidate, standing in for a build and a timing (tests that kill a worker
mid-run need a run that lasts). It implements `emmy.measure.Measurer`; it measures nothing, and
its times mean nothing beyond ranking candidates by their predicted facts.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emmy.measure import Measurement
from emmy.tuning.knobs import FEATURE_OFF

BASE_S = 1e-5
# The card its records name: what marks them as not measured (the evidence hierarchy never uses
# them as local or nearest evidence; emmy.evidence.gather reports them as skipped).
CARD = "cost model (no GPU)"


@dataclass(frozen=True)
class CostMeasurer:
    delay_s: float = 0.0
    fail_every: int = 11

    def environment(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"card": CARD, "driver": "", "cuda": "", "torch": version("torch"),
                "emmy": version("emmy"), "source_hash": ""}

    def measure(self, task, candidates: Sequence[Mapping[str, int | str]]) -> list[Measurement]:
        from emmy.schedule.space import candidate_facts

        info, target = task.info(), task.target_object()
        out = []
        for values in candidates:
            if self.delay_s:
                time.sleep(self.delay_s)
            out.append(self._cost(values, dict(candidate_facts(info, values, target))))
        return out

    def remeasure(self, task, candidates: Sequence[Mapping[str, int | str]], rounds: int) -> list[Measurement]:
        return self.measure(task, candidates)

    def _cost(self, values: Mapping[str, int | str], facts: dict) -> Measurement:
        numbers = {k: float(v) for k, v in sorted(facts.items())
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        named = sorted((k, v) for k, v in values.items() if k not in FEATURE_OFF or FEATURE_OFF[k] != v)
        digest = hashlib.sha256(repr(named).encode()).digest()
        jitter = int.from_bytes(digest[:4], "big") / 2**32  # [0, 1), fixed per candidate
        if int.from_bytes(digest[4:8], "big") % self.fail_every == 0:
            return Measurement("build_failed", reason="cost measurer: this candidate fails by construction",
                               facts=facts)
        scale = math.prod(1.0 + math.log1p(abs(v)) / 64.0 for v in numbers.values())
        return Measurement("ok", time_s=BASE_S * scale * (1.0 + 0.5 * jitter), spread=0.01, error=0.0,
                           facts=facts)


def make_measurer(spec: str, cache_dir=None, deadline_s: float | None = None, device: int | None = None):
    """The measurer a `--measurer` spec names: `gpu` (emmy.measure's GPU measurer, its builds
    cached in `cache_dir`, EMMY_HOME, as `emmy run`'s; on GPU `device` when given), `cost` or
    `cost:SECONDS` (CostMeasurer with that delay per candidate). The target comes with each task.
    The GPU measurer runs in a child process (`emmy.measure.child`) with `deadline_s` seconds per
    candidate (default `DEFAULT_DEADLINE_S`): a kernel that never finishes is a "timeout"."""
    from emmy.diagnostics import EmmyError

    name, _, arg = spec.partition(":")
    if name == "cost":
        try:
            delay = float(arg) if arg else 0.0
        except ValueError:
            raise EmmyError(f"--measurer {spec}: the delay must be a number of seconds") from None
        return CostMeasurer(delay_s=delay)
    if name == "gpu":
        from functools import partial
        from pathlib import Path

        from emmy.measure.child import DEFAULT_DEADLINE_S, ChildMeasurer
        from emmy.measure.gpu import pinned_measurer

        if cache_dir is None:
            raise EmmyError("the GPU measurer needs a cache directory (EMMY_HOME)")
        return ChildMeasurer(partial(pinned_measurer, Path(cache_dir), device), deadline_s or DEFAULT_DEADLINE_S)
    raise EmmyError(f"unknown measurer '{spec}'", hint="valid measurers: gpu, cost, cost:SECONDS")


__all__ = ["CostMeasurer", "make_measurer"]
