"""Today's answers in a study: what Emmy would run for the kernel without the store, measured in
every study that lacks it.

    todays_points(task, prior)               # [("default", ...), ("rules", ...), ("anchor", ...)]
    enqueue_todays_answers(study, space, task, source_hash, prior)   # those the study lacks
    stretched(study, trials, done)           # a trial budget that still measures them
    todays_waiting(study), holds_todays(store, batch)   # the time budget waits for them too
    requeue_unmeasured(study)                # enqueued first trials that ended unmeasured

A study's creator (`emmy.search.study.open_study`) enqueues the rules' answer and the prior tier's
anchor right after its default; a study made when the answers were others gets today's enqueued
when it is continued (`enqueue_todays_answers`). `emmy.search.study.run_trials` measures them
past its trial budget (`stretched`) and past its time budget (`todays_waiting`,
`holds_todays`), so a study's named best is always compared with what deploy mode runs; `emmy
golden promote` refuses a key whose study never measured the rules' answer.
"""

from __future__ import annotations

from emmy.search.points import params_of, point_key

# The user attribute of an enqueued trial that measures again a point whose only records are
# failures under another build of Emmy (`enqueue_todays_answers`): those trials' numbers, which
# its draw does not count as repeats.
RETRIES_ATTR = "retries"


# What `enqueue_todays_answers` marks its trials with (user attribute "enqueued").
TODAYS = ("default", "rules", "anchor")


def enqueue_todays_answers(study, space, task, source_hash: str | None = None, prior=None) -> list[str]:
    """Enqueues, in a study that has them neither measured nor waiting nor running, the task's
    default answer (what the compile chooses today without the store: golden, nearest, prior),
    the hand-written rules' answer (emmy.prior.choose.rules_anchor) and, where the fitted
    `prior` reshapes the rules' tile to fill the waves, the anchor the prior tier bounds its
    choice by (`emmy.prior.evaluate.reshaped_anchor`). A study made when the answers were others,
    then continued, measures today's after its waiting first trials and before TPE's draws, so
    the table's speed-up over the default is measured and `emmy prior evaluate` judges the prior against its measured anchor, not a stand-in. A failure
    (no time: the build, the launch or the timing failed; `wrong` is a result, not a failure)
    recorded by another build of Emmy than `source_hash` (this one's, `env.source_hash`) does
    not count as measured: the Qwen3 layer's o projection at 512 tokens had its rules' answer
    fail once to load (a harness bug fixed since), and nothing measured it again. Returns what it
    enqueued ("default", "rules", "anchor"). A new study has them already: its creator enqueues
    them first (open_study)."""
    import optuna

    S = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)

    def measured_here(t) -> bool:
        if t.user_attrs["status"] in ("ok", "wrong") or source_hash is None:
            return True
        env = t.user_attrs.get("env")
        return isinstance(env, dict) and env.get("source_hash") == source_hash

    # measured (a pruned draw of the same point measured nothing), waiting or being measured;
    # failed under another build: the trials a new measurement retries
    known: set[tuple] = set()
    stale: dict[tuple, list[int]] = {}
    for t in trials:
        if "status" in t.user_attrs:
            key = point_key(t.user_attrs["values"])
            if measured_here(t):
                known.add(key)
            else:
                stale.setdefault(key, []).append(t.number)
    known |= {point_key(t.user_attrs["values"]) for t in trials if t.state == S.RUNNING and "values" in t.user_attrs}
    known |= {point_key(dict(t.system_attrs.get("fixed_params") or t.params))
              for t in trials if t.state in (S.WAITING, S.RUNNING)}
    done = []
    for why, point in todays_points(task, prior):
        params = params_of(space, point) if point else None
        if params is None or point_key(point) in known or point_key(params) in known:
            continue
        retries = stale.get(point_key(point), [])
        study.enqueue_trial(params, user_attrs={"enqueued": why, **({RETRIES_ATTR: retries} if retries else {})})
        known |= {point_key(point), point_key(params)}
        done.append(why)
    return done


def todays_points(task, prior=None) -> list[tuple[str, dict]]:
    """Today's answers for the task, as (TODAYS name, point): its default answer, the
    hand-written rules' answer (emmy.prior.choose.rules_anchor) and, where the fitted `prior`
    reshapes the rules' tile to fill the waves, the anchor the prior tier bounds its choice by
    (emmy.prior.evaluate.reshaped_anchor); an empty point where there is none."""
    from emmy.prior.choose import rules_anchor
    from emmy.prior.evaluate import reshaped_anchor
    from emmy.prior.features import Kernel

    info, target = task.info(), task.target_object()
    rules = rules_anchor(info, target, dict(task.space)) or {}
    anchor = reshaped_anchor(Kernel(info, target), dict(task.space), prior, rules) if rules and prior is not None else None
    return [("default", dict(task.default)), ("rules", rules), ("anchor", anchor or {})]


def stretched(study, trials: int | None, done: int) -> int | None:
    """The trial budget of a study that has spent it while today's answers wait unmeasured
    (enqueued by this run, or by one that stopped at its budget): stretched so that they are
    measured, with the trials waiting ahead of them (Optuna hands out waiting trials in order).
    `done`: the study's measured trials."""
    if trials is None or done < trials:
        return trials
    queue = [t.user_attrs.get("enqueued") in TODAYS for t in waiting(study)]
    last = max((i for i, todays in enumerate(queue) if todays), default=-1)
    return max(trials, done + last + 1)


def todays_waiting(study) -> bool:
    """Whether one of today's answers (`enqueue_todays_answers`) waits unmeasured in the study."""
    return any(t.user_attrs.get("enqueued") in TODAYS for t in waiting(study))


def holds_todays(store, batch) -> bool:
    """Whether the batch a worker asked for ahead (a future of `ask`'s result) holds one of
    today's answers."""
    if batch is None or batch.exception() is not None:
        return False
    attrs = store.storage.get_trial_user_attrs
    return any(attrs(t._trial_id).get("enqueued") in TODAYS for t in batch.result()[0])


def waiting(study) -> list:
    import optuna

    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))


def requeue_unmeasured(study) -> list[int]:
    """Enqueues again each enqueued trial (the default, its neighbours, fork siblings, the prior's
    picks) that ended without a measurement (FAIL without `status`: its worker was killed, or a
    deadline stopped it) where no other trial has its parameters measured, waiting or running: a
    resumed study measures its first points before TPE's draws. (Optuna's `skip_if_exists`
    counts the unmeasured trial as existing.) Returns the numbers of the trials enqueued again."""
    import optuna

    S = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)

    def params(t) -> dict:
        return dict(t.system_attrs.get("fixed_params") or t.params)

    live = {point_key(params(t)) for t in trials
            if t.state in (S.WAITING, S.RUNNING) or "status" in t.user_attrs}
    again = []
    for t in trials:
        fixed = t.system_attrs.get("fixed_params")
        if t.state != S.FAIL or "status" in t.user_attrs or not fixed or point_key(fixed) in live:
            continue
        live.add(point_key(fixed))
        attrs = {k: v for k, v in t.user_attrs.items() if k == "enqueued"}
        study.enqueue_trial(dict(fixed), user_attrs=attrs or None)
        again.append(t.number)
    return again


__all__ = ["RETRIES_ATTR", "TODAYS", "enqueue_todays_answers", "holds_todays", "requeue_unmeasured", "stretched",
           "todays_points", "todays_waiting", "waiting"]
