"""One Optuna study per kernel key: its first trials and the trial loop one worker runs (naming
the best after them: emmy.search.best).

    study = open_study(store, task)                 # created once, seeded once
    run_trials(store, task, measurer, Budget(trials=30), seed=0)   # one worker's loop

The space is `emmy.schedule.space.ConditionalSpace` over the kernel's legal points, so every
draw is legal: no trial is spent on an illegal combination. The study's creator enqueues the
default answer (what Emmy chooses without records), the rules' answer and the prior tier's
anchor where they differ from it, the fastest points the store's earlier
studies of the same kernel and shape measured before its key changed (`emmy.search.earlier`) and
the default's legal neighbours as the first trials, then the default's structural-fork siblings
(below), then for a contraction whose default leaves its last wave part empty the tile shapes
that fill it (`emmy.search.waves`), then, where a fitted prior for the target exists, the
prior's top few candidates; then TPE (multivariate, grouped for the conditional space, a
constant liar for parallel workers, a fixed seed per worker) proposes the rest. A study continued after the answers changed measures
today's default, the rules' answer and, where a fitted prior reshapes their tile, the prior
tier's anchor before TPE's draws (`enqueue_todays_answers`).

Structural forks (`emmy.tuning.knobs.STRUCTURAL`: `fusion`, whose values are different programs;
a kernel has one where its values launch different kernels, `task_fork_knobs`)
get every branch measured: the default on each other branch (the nearest legal point with that
value, `fork_siblings`) is among the first trials, and no branch gets less than `FORK_SHARE` /
branches of the trials measured or being measured (a TPE draw on a branch past its share, while
another is below it, is pruned, `reason` "moved to BRANCH ...", and the nearest unmeasured legal
point on the starved branch is enqueued in its place: `_Fork`). The shares are read from the
store at each draw, so several workers, several processes and a resumed study keep them alike.
`emmy.search.best.name_best` re-measures each branch's fastest trial beside the top few
(`Best.fork`).

Trials (the store's layout is in `emmy.records.store`):
- measured "ok": COMPLETE, value = seconds per call;
- any other status (`wrong`, `build_failed`, `build_timeout`, `launch_error`, `spills`,
  `timeout`): FAIL, with `status` and `reason`: never chosen, never a crash;
- a sampler's draw moved to a starved branch of a structural fork: PRUNED, not measured, `reason`
  "moved to BRANCH (N of M trials there)";
- a draw that repeats a candidate another trial measured or is measuring: PRUNED, not measured,
  `reason` "repeats trial N" (today's default or rules' answer enqueued again after failing
  under another build of Emmy is no repeat: `retries` lists the failed trials); an unmeasured
  legal neighbour is enqueued instead, or where all its near neighbours were drawn, the nearest
  legal point no trial drew (so a small space is measured whole); the legal space checks each part of a kernel that runs as parts, so every
  draw is one that all parts can run;
- a trial the measurer did not measure (it stops a batch after a candidate timed out: see
  `emmy.measure.child`) is FAIL without `status`, `reason` "not measured: ...";
- a worker that dies mid-trial leaves a RUNNING trial that Optuna's heartbeat fails later (FAIL
  without `status`); finished trials are committed one by one and never lost. An enqueued first
  trial left so is enqueued again by the next run (`requeue_unmeasured`). A live worker
  whose trial was failed that way (its heartbeats delayed past the grace period by a busy
  store) records its measurement as a new trial (`retold`: the number it had).

The budget counts measured trials (those with a `status`), over all workers and processes: a
worker asks for as many as the budget leaves after the measured and the running ones (at most
`batch`), and waits while others measure the last ones (a running trial of a dead worker counts
until the heartbeat's grace period fails it). A study thus ends with its budget of measured
trials, more only where workers asked at the same moment (at most (W - 1) x batch more). Several
processes pointed at one store share the studies the same way. A worker asks for its next batch
while the current one is measured (the sampler and the store cost about 0.3-0.5 s a trial, as
much as a build; in a thread beside the measurement they cost no wall time, and the next batch is
drawn with the current one still running, which TPE's constant liar allows for); a batch asked for when the budget ran out is left unmeasured (FAIL without
`status`, `reason` "not measured: the worker stopped before it").
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

from emmy.measure import Measurement
from emmy.search.earlier import earlier_bests
from emmy.search.points import conditional_space, nearest, params_of, point_key
from emmy.search.todays import (
    RETRIES_ATTR, enqueue_todays_answers, holds_todays, requeue_unmeasured, stretched, todays_points, todays_waiting,
)
from emmy.search.waves import wave_fillers
from emmy.records.store import DESCRIPTION_ATTR, HEARTBEAT_S, KERNEL_ATTR, KEY_ATTR, MODEL_ATTR, MODULE_ATTR, SPACE_ATTR, Store

# Neighbours of the default answer enqueued as first trials.
NEIGHBOURS = 6
# With a fitted prior: its fastest predicted candidates enqueued after them, ranked among the
# default's nearest legal points and a fixed sample of the legal space (which can hold millions
# of points: the prior ranks about ten thousand a second).
PRIOR_TOP = 3
PRIOR_POOL = 64
PRIOR_SAMPLE = 1000
# Consecutive repeated draws after which a worker stops (the sampler has little left to offer).
MAX_REPEATS = 50
# Seconds a worker waits while other workers measure the last trials of the budget.
WAIT_S = 0.5
# Structural forks (`emmy.tuning.knobs.STRUCTURAL`, e.g. `fusion`): each branch (a legal value of
# the fork's knobs) keeps at least FORK_SHARE / (number of branches) of a study's trials (two
# branches: a third each; the sampler places the rest).
FORK_SHARE = 2 / 3


@dataclass(frozen=True)
class Budget:
    """Measured trials per study (None: no limit) and seconds per study per worker (None: no
    limit); at least one of them is set."""

    trials: int | None = None
    seconds: float | None = None


def open_study(store: Store, task, seed: int = 0, space=None, prior=None):
    """The study of the task's key; created (with its attributes and first trials) when missing.
    Several processes may call this at once: exactly one creates and seeds. `space`: the task's
    `conditional_space` where the caller has it (building it costs about half a second).
    The default comes first, then the rules' answer and the prior tier's anchor where they differ
    from it (`todays_points`, `enqueued`: "rules", "anchor": a run cut short by its budget still
    measures what deploy mode would run), then the fastest points of the store's earlier studies of the same
    kernel and shape, read in today's space (`emmy.search.earlier`, `enqueued`: "earlier"), then
    the default's neighbours and its fork siblings, then the tile shapes that fill the card's
    waves where the default's do not (`emmy.search.waves`, `enqueued`: "waves").
    `prior`: a fitted `emmy.prior.store.Prior` for the target, whose top candidates
    (`prior_picks`) are enqueued after those (user attribute `enqueued`: "prior")."""
    import optuna

    sampler = _sampler(seed)
    name = task.key_id
    try:
        study = optuna.create_study(study_name=name, storage=store.storage, sampler=sampler, direction="minimize")
    except optuna.exceptions.DuplicatedStudyError:
        return store.load(name, sampler=sampler)
    study.set_user_attr(KEY_ATTR, _key_fields(task.key))
    study.set_user_attr(KERNEL_ATTR, task.kernel)
    study.set_user_attr(DESCRIPTION_ATTR, task.description)
    if task.model:
        study.set_user_attr(MODEL_ATTR, task.model)
    # For the prior (emmy.prior.data): the key is a digest and cannot give back the kernel, so
    # the isolated tile-stage module is kept; `emmy prior fit` rebuilds each trial's plan from it.
    study.set_user_attr(MODULE_ATTR, task.module)
    space = space or conditional_space(task)
    default = dict(task.default)
    enqueued: set[tuple] = {point_key(default)} if default else set()  # the point keys queued so far

    def enqueue(point, params, source=None) -> None:
        study.enqueue_trial(params, user_attrs={"enqueued": source} if source else None, skip_if_exists=True)
        enqueued.add(point_key(point))

    params = params_of(space, default) if default else None
    if params is not None:
        enqueue(default, params)
    for why, point in todays_points(task, prior)[1:]:  # the rules' answer and the anchor, next
        params = params_of(space, point)
        if params is not None and point_key(point) not in enqueued:
            enqueue(point, params, why)
    for point in earlier_bests(store, task, space, frozenset(enqueued)):
        enqueue(point, params_of(space, point), "earlier")
    for point in space.neighbours(default, NEIGHBOURS) if default else []:
        params = params_of(space, point)
        if params is not None and point_key(point) not in enqueued:
            enqueue(point, params)
    for point in fork_siblings(space, default, frozenset(enqueued), task_fork_knobs(task)) if default else []:
        enqueue(point, params_of(space, point), "fork")
    for point in wave_fillers(task, space, default, frozenset(enqueued)) if default else []:
        enqueue(point, params_of(space, point), "waves")
    if prior is not None:
        for point in prior_picks(task, space, prior, frozenset(enqueued)):
            enqueue(point, params_of(space, point), "prior")
    return study


def prior_picks(task, space, prior, skip=frozenset()) -> list[dict]:
    """The prior's `PRIOR_TOP` fastest predicted legal points (`emmy.prior.model.rank`) among the
    default's `PRIOR_POOL` nearest legal points and a fixed sample of `PRIOR_SAMPLE` points of
    the legal space, leaving out the point keys in `skip`."""
    import random

    from emmy.prior.model import rank

    n = len(space.space)
    sample = range(n) if n <= PRIOR_SAMPLE else sorted(random.Random(0).sample(range(n), PRIOR_SAMPLE))
    default = dict(task.default)
    pool = [*(space.neighbours(default, PRIOR_POOL) if default else []), *(dict(space.space[i]) for i in sample)]
    out, seen = [], set(skip)
    for values, _ in rank(task.info(), pool, task.target_object(), prior):
        if point_key(values) not in seen and params_of(space, values) is not None:
            seen.add(point_key(values))
            out.append(values)
        if len(out) == PRIOR_TOP:
            break
    return out


def fork_knobs(domains: Mapping[str, Sequence[object]]) -> tuple[str, ...]:
    """The structural knobs (`emmy.tuning.knobs.STRUCTURAL`) that `domains` (knob -> values)
    gives more than one value: the knobs of the study's fork (none: no fork)."""
    from emmy.tuning.knobs import STRUCTURAL

    return tuple(k for k in STRUCTURAL if len(domains.get(k, ())) > 1)


def task_fork_knobs(task) -> tuple[str, ...]:
    """The knobs of a task's fork: its structural knobs (`fork_knobs`) whose values launch
    different kernels at the default answer (`emmy.schedule.plan.changes_launches`). Where the
    default splits k, the row statistics have a launch of their own with either `fusion` value:
    no fork, so no trials are spent keeping its branches' shares."""
    from emmy.schedule.plan import changes_launches

    knobs = fork_knobs(task.space)
    if not knobs or not task.default:
        return knobs
    info, target = task.info(), task.target_object()
    values = {k: v for k, v in task.default.items() if k != "siblings"}
    return tuple(k for k in knobs if changes_launches(info, values, k, task.space[k], target))


def branch_of(values: Mapping[str, object], knobs: Sequence[str]) -> str:
    """The fork branch a point is on: its values of the fork's knobs (`fused`; `fused/paired`
    with two)."""
    return "/".join(str(values[k]) for k in knobs)


def fork_branches(space, knobs: Sequence[str]) -> dict[str, dict[str, object]]:
    """Branch label -> the fork knobs' values, for every combination of their legal values (a
    combination no legal point has finds no point and is passed over)."""
    from itertools import product

    combos = product(*(space.space.domains[k] for k in knobs))
    return {branch_of(dict(zip(knobs, c)), knobs): dict(zip(knobs, c)) for c in combos}


def fork_siblings(space, default: Mapping[str, object], skip=frozenset(), knobs: Sequence[str] | None = None) -> list[dict]:
    """The default answer on each other branch of the space's fork (`knobs`; default: the
    space's structural knobs): the nearest legal point with that branch's values (`nearest`),
    leaving out the point keys in `skip`."""
    knobs = fork_knobs(space.space.domains) if knobs is None else tuple(knobs)
    out = []
    for label, fixed in fork_branches(space, knobs).items():
        if label == branch_of(default, knobs):
            continue
        point = nearest(space, default, fixed)
        if point is not None and point_key(point) not in skip:
            out.append(point)
    return out


def _key_fields(key) -> dict[str, object]:
    fields = {"id": key.id, "structure_id": key.structure_id}
    for name in ("structure", "shape", "target", "version"):
        fields[name] = getattr(key, name)
    return {k: v if isinstance(v, (str, int, float)) else str(v) for k, v in fields.items()}


def _sampler(seed: int):
    import optuna

    with _quiet():  # multivariate/group/constant_liar are "experimental"
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)


def measured(study) -> list:
    """The study's measured trials (COMPLETE or FAIL with a `status`), by number."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    return [t for t in study.get_trials(deepcopy=False, states=states) if "status" in t.user_attrs]


def run_trials(
    store: Store,
    task,
    measurer,
    budget: Budget,
    seed: int = 0,
    batch: int = 1,
    on_trial: Callable[[int, float | None], None] | None = None,
    clock: Callable[[], float] | None = None,
    prior=None,
) -> int:
    """One worker's loop on one study: ask up to `batch` trials, measure them together, tell,
    until the study has `budget.trials` measured trials, `budget.seconds` have passed, or every
    legal point is measured. Today's answers that the study lacks (`enqueue_todays_answers`) are
    measured past the trial budget and past the time budget (with the trials waiting ahead of
    them): a study that was already whole measures them too, and a short `--time-budget` never
    leaves the answer Emmy deploys without a study unmeasured beside the study's best. The next
    batch is asked for in a thread while the measurer has the current one (the two share nothing
    but the store, and the asking is done before the current batch is told). Returns the trials this worker measured.
    `on_trial(measured so far, best time)` is called after each batch. `prior`: see
    `open_study`."""
    from emmy.measure.gpu import source_hash  # (no GPU: a hash of Emmy's sources, as records keep it)

    clock = clock or time.monotonic
    start = clock()
    space = conditional_space(task)
    study = open_study(store, task, seed, space, prior)
    if study.user_attrs.get(SPACE_ATTR) != len(space.space):  # (for `emmy records efficiency`)
        study.set_user_attr(SPACE_ATTR, len(space.space))
    _fail_stale(study)
    requeue_unmeasured(study)
    enqueue_todays_answers(study, space, task, source_hash=source_hash(), prior=prior)
    cap = stretched(study, budget.trials, len(measured(study)))
    env: dict[str, str] | None = None  # (asked once something is measured: a finished study starts no measurer)
    done_here = repeats = 0
    knobs = task_fork_knobs(task)
    fork = _Fork(space, knobs) if knobs else None

    def room() -> int:
        """Trials this worker may ask for now (the measured and the running ones count)."""
        count, running = len(measured(study)), _running(study)
        return batch if cap is None else min(batch, cap - count - running)

    def ask(heart: _Heartbeat, n: int) -> tuple[list, list, int]:
        """A batch of up to `n`: (trials, points, draws pruned as repeats)."""
        trials, points, pruned = [], [], 0
        for _ in range(n):
            trial, point = _ask(store, study, space)
            heart.add(trial._trial_id)
            if fork is not None and fork.move(store, study, trial, point):  # (a starved branch's point enqueued)
                trial, point = _ask(store, study, space)
                heart.add(trial._trial_id)
            other = _repeats(study, trial, point)
            if other is not None:
                _prune(study, trial, space, point, f"repeats trial {other}")
                pruned += 1
                continue
            trials.append(trial)
            points.append(point)
        return trials, points, pruned

    ahead = None  # the next batch, asked while this one is measured
    with _Heartbeat(store) as heart, ThreadPoolExecutor(1, thread_name_prefix="emmy-ask") as asker:
        try:
            while True:
                _fail_stale(study)
                count = len(measured(study))
                if cap is not None and count >= cap:
                    break
                if (budget.seconds is not None and clock() - start >= budget.seconds
                        and not todays_waiting(study) and not holds_todays(store, ahead)):
                    break
                if count >= len(space.space) or repeats >= MAX_REPEATS:
                    break
                if ahead is not None:
                    trials, points, pruned = ahead.result()
                    ahead = None
                else:
                    free = room()
                    if free <= 0:  # the last trials of the budget are being measured by other workers
                        time.sleep(WAIT_S)
                        continue
                    trials, points, pruned = ask(heart, free)
                repeats += pruned
                if not trials:
                    continue
                repeats = 0
                ahead = asker.submit(lambda: ask(heart, room()))
                results = measurer.measure(task, points)
                wait([ahead])  # (the store is the asker's till it is done: told after it)
                if env is None:
                    env = measurer.environment()
                for trial, point, m in zip(trials, points, results):
                    _tell(study, trial, point, m, env)
                for trial in trials[len(results):]:  # the measurer stopped short (after a timeout)
                    _unmeasured(study, trial, "not measured: the measurer stopped this batch after a timeout")
                heart.drop(t._trial_id for t in trials)
                done_here += len(results)
                if on_trial is not None:
                    on_trial(len(measured(study)), _best_time(study))
        finally:  # a batch asked for ahead and never measured counts for nothing (enqueued points come back)
            if ahead is not None and ahead.exception() is None:
                for trial in ahead.result()[0]:
                    _unmeasured(study, trial, "not measured: the worker stopped before it")
    return done_here


class _Fork:
    """Keeps each branch of a study's fork to its share of the trials: a sampler's draw on a
    branch that has its share, while another branch is below it, is pruned (`reason` "moved to
    BRANCH ...") and the nearest unmeasured legal point to it on the starved branch is enqueued
    instead (`enqueued` "fork"), which the worker asks for next. Shares count the trials measured
    or being measured, by every worker and process (read from the store at each draw: nothing is
    kept but the branches found exhausted here), so several workers and a resumed study keep
    them alike. Enqueued points (the default, its neighbours and branch siblings, the prior's
    picks) are never moved."""

    def __init__(self, space, knobs: Sequence[str] | None = None):
        self.space = space
        self.knobs = fork_knobs(space.space.domains) if knobs is None else tuple(knobs)
        self.branches = fork_branches(space, self.knobs)
        self.closed: set[str] = set()  # branches with no unmeasured legal point left

    def move(self, store: Store, study, trial, point) -> bool:
        import optuna

        if "fixed_params" in store.storage.get_trial_system_attrs(trial._trial_id):
            return False
        live = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number and "values" in t.user_attrs
                and (t.state == optuna.trial.TrialState.RUNNING or "status" in t.user_attrs)]
        counts = {label: 0 for label in self.branches}
        for t in live:
            label = branch_of(t.user_attrs["values"], self.knobs)
            counts[label] = counts.get(label, 0) + 1
        need = FORK_SHARE / len(self.branches) * (len(live) + 1)
        starved = [b for b in self.branches if b not in self.closed and counts[b] < need]
        here = branch_of(point, self.knobs)
        if not starved or here in starved:
            return False
        seen = {point_key(t.user_attrs["values"]) for t in live}
        for label in sorted(starved, key=lambda b: counts[b]):
            moved = nearest(self.space, point, self.branches[label], seen)
            if moved is None:
                self.closed.add(label)
                continue
            _finish(study, trial, {"reason": f"moved to {label} ({counts[label]} of {len(live)} trials there)"},
                    state=optuna.trial.TrialState.PRUNED)  # (false where failed by another worker meanwhile)
            study.enqueue_trial(params_of(self.space, moved), user_attrs={"enqueued": "fork"}, skip_if_exists=True)
            return True
        return False


def _running(study) -> int:
    """Trials being measured (a trial asked for by a worker that died before it drew its point
    has no values and counts for nothing)."""
    import optuna

    return sum("values" in t.user_attrs for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))


# Python's warning filters are one per process, and `catch_warnings` restores them on leaving: two
# threads in it at once (a worker's asking thread and its loop) could leave Optuna's warnings on,
# or ignored for good. So its every use here holds this lock.
_WARNINGS_LOCK = threading.Lock()


@contextmanager
def _quiet():
    """Optuna's warnings silenced (one thread at a time)."""
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _ask(store: Store, study, space):
    with _quiet():  # "heartbeat is supposed to be used with optimize"
        trial = study.ask()
    store.storage.record_heartbeat(trial._trial_id)  # (before its values: see _running)
    point = dict(space.suggest(trial))
    trial.set_user_attr("values", point)
    return trial, point


def _repeats(study, trial, point) -> int | None:
    """The number of another trial that measured, or is measuring, the same point (the failures
    under another build that `trial` retries aside: `RETRIES_ATTR`)."""
    import optuna

    key = point_key(point)
    retried = set(trial.user_attrs.get(RETRIES_ATTR) or ())
    for t in study.get_trials(deepcopy=False):
        if t.number == trial.number or t.number in retried or "values" not in t.user_attrs:
            continue
        live = t.state == optuna.trial.TrialState.RUNNING or "status" in t.user_attrs
        if live and point_key(t.user_attrs["values"]) == key:
            return t.number
    return None


def _prune(study, trial, space, point, why: str) -> None:
    import optuna

    _finish(study, trial, {"reason": why}, state=optuna.trial.TrialState.PRUNED)  # (false where failed meanwhile)
    seen = {point_key(t.user_attrs["values"]) for t in study.get_trials(deepcopy=False) if "values" in t.user_attrs}
    for n in space.neighbours(point, NEIGHBOURS):
        params = params_of(space, n)
        if point_key(n) not in seen and params is not None:
            study.enqueue_trial(params, skip_if_exists=True)
            return
    # every near neighbour drawn already: the nearest legal point nobody drew (so a small space
    # is measured whole rather than the sampler repeating itself till MAX_REPEATS)
    other = nearest(space, point, {}, avoid=seen)
    params = params_of(space, other) if other is not None else None
    if params is not None:
        study.enqueue_trial(params, skip_if_exists=True)


def _unmeasured(study, trial, why: str) -> None:
    """A trial asked for but not measured: FAIL without a status (not counted, its point may be
    drawn again), with the reason."""
    import optuna

    _finish(study, trial, {"reason": why}, state=optuna.trial.TrialState.FAIL)  # (false where failed meanwhile)


def _finish(study, trial, attrs: Mapping[str, object], value: float | None = None, state=None) -> bool:
    """Sets a trial's attributes in order and tells it; False where another worker finished it
    first. Optuna says so two ways: UpdateFinishedTrialError where the trial finished between its
    check and its write, ValueError ("Cannot tell a COMPLETE trial") where before the check."""
    import optuna

    try:
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        study.tell(trial, value, state=state)
        return True
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    except ValueError:
        if _stored(study, trial).state.is_finished():
            return False
        raise


def _stored(study, trial):
    """The trial as the store holds it now (another worker may have finished it)."""
    return next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)


def _tell(study, trial, point, m: Measurement, env: Mapping[str, str]) -> None:
    import optuna

    attrs = {  # `status` last: a trial with a status has all of them (a worker may die between two)
        "time_s": m.time_s, "spread": m.spread, "error": m.error, "reason": m.reason,
        "env": dict(env), "date": utc_now(), "uid": uuid.uuid4().hex,
        "facts": {k: v for k, v in m.facts.items() if isinstance(v, (int, float, str, bool)) or v is None},
        "status": m.status,
    }
    ok = m.ok and m.time_s is not None
    if not _finish(study, trial, attrs, m.time_s if ok else None, None if ok else optuna.trial.TrialState.FAIL):
        # Finished by another worker: one that was handed the same waiting trial (SQLite cannot
        # lock the queue's row, so two workers may pop one enqueued trial) and told it first,
        # or one that took this worker for dead (heartbeats delayed by a busy store) and failed
        # it (after this worker's attributes, `status` too, were written: the trial is then a
        # FAIL that says "ok"). Where it holds a time, or holds a status and this measurement
        # failed too, it is recorded already; else this one is kept as a trial of its own,
        # unless another trial has measured the point meanwhile.
        held = _stored(study, trial)
        if held.state == optuna.trial.TrialState.COMPLETE or ("status" in held.user_attrs and not ok):
            return
        if _repeats(study, trial, point) is not None:
            return
        state = optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL
        study.add_trial(optuna.trial.create_trial(
            state=state, value=m.time_s if ok else None, params=trial.params, distributions=trial.distributions,
            user_attrs={"values": dict(point), **attrs, "retold": trial.number}))


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _best_time(study) -> float | None:
    times = [t.value for t in measured(study) if t.value is not None]
    return min(times) if times else None


def _fail_stale(study) -> None:
    import optuna

    with _quiet():
        optuna.storages.fail_stale_trials(study)


class _Heartbeat:
    """Records the heartbeats of a worker's trials from their asking to their measurement's end
    (a worker killed meanwhile stops beating, and its trials are failed by another worker after
    the grace period): the batch being measured and the next one, asked for meanwhile."""

    def __init__(self, store: Store):
        self.storage, self.ids = store.storage, set()
        self.lock = threading.Lock()  # (the asking thread adds, the measuring one drops)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def add(self, trial_id: int) -> None:
        with self.lock:
            self.ids.add(trial_id)

    def drop(self, trial_ids) -> None:
        with self.lock:
            self.ids.difference_update(trial_ids)

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            with self.lock:
                ids = sorted(self.ids)
            for tid in ids:
                self.storage.record_heartbeat(tid)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


__all__ = ["Budget", "branch_of", "conditional_space", "fork_branches", "fork_knobs", "fork_siblings", "task_fork_knobs", "measured",
           "nearest", "open_study", "params_of", "prior_picks", "requeue_unmeasured", "run_trials"]
