"""First trials from earlier studies of the same kernel: what was fastest before its key changed.

    earlier_bests(store, task, space, skip) -> [point, ...]   # enqueued by open_study ("earlier")

A kernel's key hashes its body and knob set, so a knob added or taken out, or a domain grown,
starts a new study for a kernel the store already knows well: its old studies answer nothing
(`decide-forks` reports them stale), and a short run of the new study may not find again what a
long one found. A new study therefore starts, right after today's default, with the `EARLIER`
fastest points measured by the store's other studies of the same kernel name, shape and target,
each read in today's space (`emmy.tuning.knobs.in_space`: knobs the kernel no longer has left
out, knobs it gained at their off value) and kept only where today's legal space can draw it.
They are measured again like any trial: nothing of the old study's times is trusted, so no one
has to vouch that the change kept their programs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from emmy.records.store import KERNEL_ATTR, KEY_ATTR, Store
from emmy.search.points import params_of, point_key
from emmy.tuning.knobs import in_space

# How many earlier points a new study starts with.
EARLIER = 3


def earlier_bests(store: Store, task, space, skip=frozenset()) -> list[dict]:
    """The `EARLIER` fastest points (module docstring), fastest first by the times the earlier
    studies measured; [] where the store has no other study of the task's kernel at its shape
    and target. `skip`: point keys already among the first trials."""
    domains = dict(task.space)
    found: list[tuple[float, int, tuple, dict]] = []
    for n, (values, time_s) in enumerate(_measured(store, _others(store, task))):
        point = in_space(values, domains)
        if point is None or params_of(space, point) is None:
            continue
        found.append((time_s, n, point_key(point), point))
    found.sort(key=lambda f: f[:2])
    out, seen = [], set(skip)
    for _, _, key, point in found:
        if key not in seen:
            seen.add(key)
            out.append(point)
        if len(out) == EARLIER:
            break
    return out


def _others(store: Store, task) -> list[str]:
    """The store's studies of the task's kernel name, shape and target under another key."""
    key = task.key
    out = []
    for study in store.studies():
        fields = study.user_attrs.get(KEY_ATTR)
        if (study.study_name != task.key_id and isinstance(fields, Mapping)
                and study.user_attrs.get(KERNEL_ATTR) == task.kernel
                and fields.get("shape") == key.shape and fields.get("target") == key.target):
            out.append(study.study_name)
    return sorted(out)


def _measured(store: Store, names: Iterable[str]):
    """(values, seconds) of each measured ("ok") trial of the studies named."""
    import optuna

    for name in names:
        study = store.load(name)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            values = t.user_attrs.get("values")
            if t.user_attrs.get("status") == "ok" and isinstance(values, Mapping) and t.value is not None:
                yield dict(values), float(t.value)


__all__ = ["EARLIER", "earlier_bests"]
