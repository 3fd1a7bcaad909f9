"""A tuning run: every task's study to its budget, with W measuring workers, each study's best
named as soon as its trials are done, and a table.

    outcomes, problems = tune(tasks, store, Budget(trials=30), measurer_spec="gpu", workers=2)
    print(format_table(HEADER, outcome_rows(outcomes)))

With one worker the studies run in this process, one after the other, each study's best named
right after its trials. With W > 1, W worker processes (started fresh, `spawn`; with `devices`,
one per GPU, each pinned to it) go through the studies in the same order, each with its own
measurer and TPE seed (seed + worker index), cooperating through the store exactly as separate
`emmy tune` processes on other hosts would, and say on a queue when they are done with a study;
this process shows the progress (one bar per study, read from the store) and names each study's
best (re-measuring its top candidates) once every worker is done with it or has stopped, while
the workers go on with later studies (measuring processes take turns on a GPU:
`emmy.measure.gpu.gpu_lock`). A run killed at any point keeps every best it named; a re-run
names only what is missing or has new trials (`name_best`). A worker that dies loses only the
trial it was measuring.

The GPU measurer runs in a child process of each worker (and of this process, for naming) with
a deadline per candidate (`emmy.measure.child`): a kernel that never finishes is a failed trial
with status "timeout", the child replaced, and the run goes on; each outcome counts them.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TextIO

from emmy.records.store import Store, open_store
from emmy.records.record import fork_text
from emmy.search.best import Best, name_best
from emmy.search.study import Budget, branch_of, measured, point_key, run_trials
from emmy.search.task import TuneTask

POLL_S = 0.5


@dataclass(frozen=True)
class Outcome:
    """One study after a run: its measured trials, the named best, the default's time, and how
    many of its candidates passed their deadline ("timeout": the measuring process replaced)."""

    task: TuneTask
    trials: int
    best: Best | None
    default_time_s: float | None
    default_status: str
    timeouts: int = 0
    notes: tuple[str, ...] = field(default=())
    # wall seconds this run spent on the study, builds and naming included: with one worker its
    # trials and its naming; with several, from when every worker was done with the study before
    # (or the run's start) to when its best was named
    seconds: float | None = None


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
    deadline_s: float | None = None,
    optuna_level: int | None = None,
    log: TextIO | None = None,
    prior=None,
) -> tuple[list[Outcome], list[str]]:
    """Tune every task into `store`; returns the outcomes and the problems met (workers that
    stopped), which the caller reports. `devices`: one worker per GPU index, each pinned to its
    GPU (`workers` is then their number). `deadline_s`: seconds one candidate's measurement may
    take on the GPU (`emmy.measure.child`). `optuna_level`: Optuna's logging verbosity in the
    worker processes (None: Optuna's default). `log`: where a line says each study's best as it
    is named (what a run that is killed later has kept). `prior`: a fitted prior for the target,
    whose top candidates each new study tries first (`emmy.search.study.open_study`)."""
    bars = _Bars(tasks, budget, progress)
    namer = _Namer(store, tasks, measurer_spec, cache_dir, deadline_s, devices[0] if devices else None,
                   bars.writer(log))
    problems: list[str] = []
    try:
        if workers == 1:
            for i, task in enumerate(tasks):
                namer.begin(i)
                run_trials(store, task, namer.measurer(), budget, seed=seed, batch=batch,
                           on_trial=lambda n, best, i=i: bars.update(i, n, best), prior=prior)
                namer.name(i)
        else:
            problems = _run_workers(tasks, store, budget, measurer_spec, workers, seed, batch, cache_dir, bars,
                                    namer, devices, deadline_s, optuna_level, prior)
        outcomes = [namer.name(i) for i in range(len(tasks))]  # (named already: read back)
    finally:
        namer.close()
        bars.close()
    return outcomes, problems


class _Namer:
    """Names the studies' bests, each once, with this process's measurer (made on first use)."""

    def __init__(self, store: Store, tasks: Sequence[TuneTask], spec: str, cache_dir, deadline_s, device,
                 say=None):
        self.store, self.tasks, self.say = store, list(tasks), say
        self.spec, self.cache_dir, self.deadline_s, self.device = spec, cache_dir, deadline_s, device
        self.outcomes: dict[int, Outcome] = {}
        self._measurer = None
        self._began: dict[int, float] = {}  # when this run began work on each study (`Outcome.seconds`)
        self._mark = time.monotonic()  # the start, then when every worker was done with the last study named

    def begin(self, i: int) -> None:
        """Study i's work begins now (one worker: its trials start)."""
        self._began[i] = time.monotonic()

    def measurer(self):
        if self._measurer is None:
            from emmy.search.cost import make_measurer

            self._measurer = make_measurer(self.spec, self.cache_dir, self.deadline_s, self.device)
        return self._measurer

    def name(self, i: int) -> Outcome:
        """Study i's outcome, its best named now (once per run)."""
        if i not in self.outcomes:
            replaced = len(getattr(self._measurer, "replaced", ()))
            start = time.monotonic()
            began = self._began.get(i, self._mark)
            self._mark = start
            outcome = _outcome(self.store, self.tasks[i], self.measurer)
            self.outcomes[i] = replace(outcome, seconds=time.monotonic() - began)
            if self.say is not None:
                self.say(_named_line(self.outcomes[i], time.monotonic() - start))
            notes = tuple(f"naming the best: {why}" for why in getattr(self._measurer, "replaced", ())[replaced:])
            if notes:
                self.outcomes[i] = replace(self.outcomes[i], notes=self.outcomes[i].notes + notes)
        return self.outcomes[i]

    def close(self) -> None:
        close = getattr(self._measurer, "close", None)
        if close is not None:
            close()


def _run_workers(tasks, store, budget, spec, workers, seed, batch, cache_dir, bars, namer: _Namer, devices=None,
                 deadline_s=None, optuna_level=None, prior=None) -> list[str]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    done = ctx.Queue()
    procs = [
        ctx.Process(target=worker_main, args=(store.url, list(tasks), budget, spec, seed + w, batch, cache_dir,
                                              devices[w] if devices else None, w, done, deadline_s, optuna_level,
                                              prior),
                    name=f"emmy-tune-worker-{w}")
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    finished: list[set[int]] = [set() for _ in tasks]  # the workers done with each study
    try:
        while True:
            alive = [p.is_alive() for p in procs]
            _drain(done, finished)
            for i in range(len(tasks)):
                if i not in namer.outcomes and all(w in finished[i] or not alive[w] for w in range(workers)):
                    namer.name(i)
                    bars.poll(store)
            if not any(alive):
                break
            time.sleep(POLL_S)
            bars.poll(store)
        bars.poll(store)
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        raise
    for p in procs:
        p.join()
    return [f"worker {w} stopped with exit code {p.exitcode}; the trials it finished are in the store"
            for w, p in enumerate(procs) if p.exitcode != 0]


def _named_line(o: Outcome, seconds: float) -> str:
    """What naming a study found: `named KERNEL KEY: best T +- S% (N trials, M timeout) in X s`."""
    best = f"best {_us(o.best.time_s)} +- {o.best.spread * 100:.1f}%" if o.best else "no best (none right)"
    recalled = ", recalled" if o.best and o.best.recalled else ""
    timeouts = f", {o.timeouts} timeout" if o.timeouts else ""
    fork = f" [{'/'.join(o.best.fork_knobs)}: {fork_text(o.best.fork, spreads=False)}]" if o.best and o.best.fork else ""
    study = f"; the study took {o.seconds:.1f} s" if o.seconds is not None else ""
    return (f"named {o.task.kernel} {o.task.key_id}: {best} ({o.trials} trials{timeouts}{recalled}) "
            f"in {seconds:.1f} s{study}{fork}")


def _drain(done, finished: list[set[int]]) -> None:
    while True:
        try:
            w, i = done.get_nowait()
        except queue.Empty:
            return
        finished[i].add(w)


def worker_main(url: str, tasks: list[TuneTask], budget: Budget, spec: str, seed: int, batch: int, cache_dir,
                device: int | None = None, index: int = 0, done=None, deadline_s: float | None = None,
                optuna_level: int | None = None, prior=None) -> None:
    """A worker process: every study in order, to its budget (on GPU `device` when given),
    putting (index, study) on the `done` queue after each."""
    from emmy.diagnostics import EmmyError
    from emmy.records.store import store_errors
    from emmy.search.cost import make_measurer

    from emmy.measure.child import die_with_parent

    die_with_parent()
    measurer = None
    try:
        if optuna_level is not None:
            import optuna

            optuna.logging.set_verbosity(optuna_level)
        store = open_store(url)
        assert store is not None
        measurer = make_measurer(spec, cache_dir, deadline_s, device)
        with store_errors(store.name):
            for i, task in enumerate(tasks):
                run_trials(store, task, measurer, budget, seed=seed, batch=batch, prior=prior)
                if done is not None:
                    done.put((index, i))
    except EmmyError as e:
        sys.stderr.write(f"error: {e}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(1)
    finally:
        if hasattr(measurer, "close"):
            measurer.close()


def _outcome(store: Store, task: TuneTask, measurer) -> Outcome:
    """Name the study's best (`measurer`: a callable giving the measurer, asked only where a
    study needs re-measuring) and sum up its trials."""
    best = name_best(store, task, _Lazy(measurer))
    trials = measured(store.load(task.key_id))
    default = point_key(task.default)
    first = next((t for t in trials if point_key(t.user_attrs["values"]) == default), None)
    status = "not measured" if first is None else str(first.user_attrs["status"])
    timeouts = sum(t.user_attrs["status"] == "timeout" for t in trials)
    # the default's time re-measured beside the best (the trial's own single measurement otherwise)
    default_s = best.default_s if best is not None and best.default_s is not None else (None if first is None else first.value)
    return Outcome(task, len(trials), best, default_s, status, timeouts, _earlier_note(trials, best))


def _earlier_note(trials, best: Best | None) -> tuple[str, ...]:
    """Where the study measured earlier points (`emmy.search.earlier`: the fastest of the store's
    older studies of this kernel at this shape, under another key), how many, and whether the
    best is one of them."""
    earlier = {point_key(t.user_attrs["values"]) for t in trials if t.user_attrs.get("enqueued") == "earlier"}
    if not earlier:
        return ()
    won = best is not None and point_key(best.values) in earlier
    return (f"{len(earlier)} earlier point(s) measured first, the fastest of the store's older studies of this "
            f"kernel at this shape (another key, emmy.search.earlier); {'the best is one of them' if won else 'none is the best'}",)


class _Lazy:
    """A measurer made on its first use (naming a study that needs no re-measuring starts no
    measuring process)."""

    def __init__(self, make):
        self.make = make

    def __getattr__(self, name):
        return getattr(self.make(), name)


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

    def writer(self, out: TextIO | None):
        """A function writing a line to `out` above the bars (None: no `out`)."""
        if out is None:
            return None
        if not self.bars:
            return lambda line: print(line, file=out, flush=True)
        from tqdm import tqdm

        return lambda line: tqdm.write(line, file=out)

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


HEADER = ("kernel", "key", "trials", "best", "default", "speed-up")


def outcome_rows(outcomes: Sequence[Outcome]) -> list[tuple[str, ...]]:
    """The final table's rows (`HEADER`): kernel, key, trials (with the candidates that passed
    their deadline), best time and spread, the default's time, speed-up (no wall time: the table
    is the same for the same records; `cost_line` says what the run took)."""
    rows = []
    for o in outcomes:
        best = o.best
        best_text = f"{_us(best.time_s)} +- {best.spread * 100:.1f}%" if best else "none right"
        default_text = _us(o.default_time_s) if o.default_time_s is not None else o.default_status
        speedup = f"{o.default_time_s / best.time_s:.2f}x" if best and o.default_time_s else "-"
        trials = f"{o.trials} ({o.timeouts} timeout)" if o.timeouts else str(o.trials)
        rows.append((o.task.kernel, o.task.key_id, trials, best_text, default_text, speedup))
    return rows


def cost_line(outcomes: Sequence[Outcome], finding_s: float, checking_s: float) -> str:
    """What the run cost in wall time: finding the kernels (the compile), the studies (each
    study's trials, builds and naming; their mean and most per kernel), checking the layers."""
    timed = [o for o in outcomes if o.seconds is not None]
    studies = sum(o.seconds for o in timed)
    most = max(timed, key=lambda o: o.seconds, default=None)
    per = (f" ({studies / len(timed):.1f} s a study on average, at most {most.seconds:.1f} s: "
           f"{most.task.kernel} {most.task.key_id})" if most is not None else "")
    return (f"wall {finding_s + studies + checking_s:.1f} s: {finding_s:.1f} s finding the kernels, {studies:.1f} s on "
            f"{len(timed)} studies{per}, {checking_s:.1f} s checking the layers")


def outcome_notes(outcomes: Sequence[Outcome], deadline_s: float) -> list[str]:
    """What the table does not say: per study, the candidates that timed out (each time the
    measuring process was replaced) and what happened while naming its best."""
    notes = []
    for o in outcomes:
        where = f"{o.task.kernel} ({o.task.key_id})"
        if o.timeouts:
            notes.append(f"{where}: {o.timeouts} candidate(s) timed out (status 'timeout': past the {deadline_s:g} s "
                         "deadline on the GPU, or no answer while preparing; the measuring process was replaced "
                         "each time; the reasons are in the store)")
        notes += [f"{where}: {note}" for note in o.notes]
    return notes


def fork_notes(outcomes: Sequence[Outcome]) -> list[str]:
    """Per study with a structural fork: each branch (fused / split) at its own best, re-measured
    in the same rounds, and the branch chosen."""
    notes = []
    for o in outcomes:
        if o.best is not None and o.best.fork:
            chosen = branch_of(o.best.values, o.best.fork_knobs)
            notes.append(f"{o.task.kernel} ({o.task.key_id}): {'/'.join(o.best.fork_knobs)} fork, each branch at its "
                         f"own best re-measured in the same rounds: {fork_text(o.best.fork)}; chosen: {chosen}")
    return notes


__all__ = ["HEADER", "Outcome", "cost_line", "fork_notes", "outcome_notes", "outcome_rows", "tune", "worker_main"]
