"""A tuning run: every task's study to its budget, with W measuring workers, then each study's
best named after re-measuring, and a table.

    outcomes = tune(tasks, store, Budget(trials=30), measurer_spec="gpu", workers=2)
    print(format_table(HEADER, outcome_rows(outcomes)))

With one worker the studies run in this process, one after the other. With W > 1, W worker
processes (started fresh, `spawn`; with `devices`, one per GPU, each pinned to it) go through
the studies in the same order, each with its own
measurer and TPE seed (seed + worker index), cooperating through the store exactly as separate
`emmy tune` processes on other hosts would; this process shows the progress (one bar per study,
read from the store) and, once they are done, re-measures each study's top candidates and names
its best. A worker that dies loses only the trial it was measuring.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from emmy.records.store import Store, open_store
from emmy.search.study import Best, Budget, measured, name_best, point_key, run_trials
from emmy.search.task import TuneTask

POLL_S = 0.5


@dataclass(frozen=True)
class Outcome:
    """One study after a run: its measured trials, the named best, and the default's time."""

    task: TuneTask
    trials: int
    best: Best | None
    default_time_s: float | None
    default_status: str


def tune(
    tasks: Sequence[TuneTask],
    store: Store,
    budget: Budget,
    measurer_spec: str = "gpu",
    workers: int = 1,
    seed: int = 0,
    batch: int = 1,
    cache_dir=None,
    progress: TextIO | None = sys.stderr,
    devices: Sequence[int] | None = None,
) -> tuple[list[Outcome], list[str]]:
    """Tune every task into `store`; returns the outcomes and the problems met (workers that
    stopped), which the caller reports. `devices`: one worker per GPU index, each pinned to its
    GPU (`workers` is then their number)."""
    from emmy.search.cost import make_measurer

    problems: list[str] = []
    bars = _Bars(tasks, budget, progress)
    try:
        measurer = None
        if workers == 1:
            _pin(devices[0] if devices else None)
            measurer = make_measurer(measurer_spec, cache_dir)
            for i, task in enumerate(tasks):
                run_trials(store, task, measurer, budget, seed=seed, batch=batch,
                           on_trial=lambda n, best, i=i: bars.update(i, n, best))
        else:
            problems = _run_workers(tasks, store, budget, measurer_spec, workers, seed, batch, cache_dir, bars, devices)
        measurer = measurer or make_measurer(measurer_spec, cache_dir)  # (after the workers: the GPU is free)
        outcomes = [_outcome(store, task, measurer) for task in tasks]
    finally:
        bars.close()
    return outcomes, problems


def _run_workers(tasks, store, budget, spec, workers, seed, batch, cache_dir, bars, devices=None) -> list[str]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=worker_main, args=(store.url, list(tasks), budget, spec, seed + w, batch, cache_dir,
                                              devices[w] if devices else None),
                    name=f"emmy-tune-worker-{w}")
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        while any(p.is_alive() for p in procs):
            time.sleep(POLL_S)
            bars.poll(store)
        bars.poll(store)
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        raise
    return [f"worker {w} stopped with exit code {p.exitcode}; the trials it finished are in the store"
            for w, p in enumerate(procs) if p.exitcode != 0]


def worker_main(url: str, tasks: list[TuneTask], budget: Budget, spec: str, seed: int, batch: int, cache_dir,
                device: int | None = None) -> None:
    """A worker process: every study in order, to its budget (on GPU `device` when given)."""
    from emmy.diagnostics import EmmyError
    from emmy.records.store import store_errors
    from emmy.search.cost import make_measurer

    try:
        _pin(device)
        store = open_store(url)
        assert store is not None
        measurer = make_measurer(spec, cache_dir)
        with store_errors(store.name):
            for task in tasks:
                run_trials(store, task, measurer, budget, seed=seed, batch=batch)
    except EmmyError as e:
        sys.stderr.write(f"error: {e}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(1)


def _pin(device: int | None) -> None:
    """Measure on GPU `device` from now on in this process (PyTorch's current device, whose
    context the measurer launches in; the GPU lock is per device)."""
    if device is not None:
        import torch

        torch.cuda.set_device(device)


def _outcome(store: Store, task: TuneTask, measurer) -> Outcome:
    best = name_best(store, task, measurer)
    trials = measured(store.load(task.key_id))
    default = point_key(task.default)
    first = next((t for t in trials if point_key(t.user_attrs["values"]) == default), None)
    status = "not measured" if first is None else str(first.user_attrs["status"])
    return Outcome(task, len(trials), best, None if first is None else first.value, status)


class _Bars:
    """A tqdm bar per study: kernel, measured trials, best so far."""

    def __init__(self, tasks: Sequence[TuneTask], budget: Budget, out: TextIO | None):
        self.tasks = list(tasks)
        self.bars = []
        if out is None:
            return
        from tqdm import tqdm

        width = max((len(t.kernel) for t in tasks), default=0)
        self.bars = [
            tqdm(total=budget.trials, desc=t.kernel.ljust(width), position=i, leave=True, file=out,
                 unit="trial", dynamic_ncols=True)
            for i, t in enumerate(self.tasks)
        ]

    def update(self, i: int, count: int, best: float | None) -> None:
        if not self.bars:
            return
        bar = self.bars[i]
        bar.n = count
        bar.set_postfix_str("best " + (_us(best) if best is not None else "-"), refresh=False)
        bar.refresh()

    def poll(self, store: Store) -> None:
        if not self.bars:
            return
        for i, task in enumerate(self.tasks):
            try:
                study = store.load(task.key_id)
            except KeyError:
                continue
            trials = measured(study)
            times = [t.value for t in trials if t.value is not None]
            self.update(i, len(trials), min(times) if times else None)

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


HEADER = ("kernel", "key", "trials", "best", "default", "speed-up")


def outcome_rows(outcomes: Sequence[Outcome]) -> list[tuple[str, ...]]:
    """The final table's rows (`HEADER`): kernel, key, trials, best time and spread, the
    default's time, speed-up."""
    rows = []
    for o in outcomes:
        best = o.best
        best_text = f"{_us(best.time_s)} +- {best.spread * 100:.1f}%" if best else "none right"
        default_text = _us(o.default_time_s) if o.default_time_s is not None else o.default_status
        speedup = f"{o.default_time_s / best.time_s:.2f}x" if best and o.default_time_s else "-"
        rows.append((o.task.kernel, o.task.key_id, str(o.trials), best_text, default_text, speedup))
    return rows


__all__ = ["HEADER", "Outcome", "outcome_rows", "tune", "worker_main"]
