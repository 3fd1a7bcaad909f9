"""`emmy golden promote`: candidate golden entries from the local tuning store.

    entries, missing = promote(store, "Qwen/Qwen3-Embedding-0.6B", 0, [512, 4096], "sm_90a")

The model is compiled at each token count (as `emmy tune` compiles it); every kernel whose key
has a recorded best in the store becomes an entry: the key and its parts, where it came from
(model, layer, tokens, kernel), the description, the best's values, time and spread, the few
fastest other measured candidates as alternatives, and the measuring machine. Kernels without a
record are returned as `missing` (the CLI says which), and so are those whose only record the
cost measurer wrote (`emmy tune --measurer cost`): golden files hold measurements; and those
whose study never measured the hand-written rules' answer (`rules_unmeasured`): without the
entry deploy mode may run that answer, so the entry must have been measured against it. Review is the diff of the golden file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from emmy.golden.check import model_tasks
from emmy.golden.schema import Alternative, Entry

ALTERNATIVES = 3


def promote(
    store, model: str, layer: int | None, tokens: Sequence[int], target: str,
    compile_tasks: Callable[..., dict] | None = None,
) -> tuple[list[Entry], list[str]]:
    """(entries, missing): an entry per kernel key with a recorded best, and the
    'kernel at T tokens' of those without one."""
    from emmy.records.store import best_record
    from emmy.search.cost import CARD as COST_CARD

    compile_tasks = compile_tasks or model_tasks(Path.cwd())
    entries: dict[str, Entry] = {}
    missing: list[str] = []
    for t in tokens:
        for name, task in compile_tasks(model, layer, t, target).items():
            if task.key.id in entries:
                continue
            record = best_record(store, task.key)
            if record is None:
                missing.append(f"{name} at {t} tokens")
                continue
            if record.card == COST_CARD:
                missing.append(f"{name} at {t} tokens (only the cost measurer's record: not a measurement)")
                continue
            if rules_unmeasured(store, task):
                missing.append(f"{name} at {t} tokens (its study never measured the rules' answer, which deploy "
                               "mode runs without the entry: tune it again)")
                continue
            entries[task.key.id] = Entry(
                key=task.key.id, structure=task.key.structure, shape=task.key.shape, version=task.key.version,
                model=model, layer=layer, tokens=t, kernel=name, description=task.description,
                values=dict(record.values), time_s=record.time_s, spread=record.spread,
                alternatives=tuple(_alternatives(store, task.key.id, record.values)),
                card=record.card, driver=record.driver, cuda=record.cuda, torch=record.torch,
                emmy=record.emmy, date=record.date, source=record.source(),
            )
    return list(entries.values()), missing


def rules_unmeasured(store, task) -> bool:
    """Whether the study of `task`'s key holds no measurement (a trial with a status) of the
    hand-written rules' answer (`emmy.search.todays.todays_points`). A golden refresh whose time
    budget ended studies before that answer came up once promoted a best 1.29x slower than it
    (down at 512 tokens, timed on an H100)."""
    from emmy.search.study import measured, point_key
    from emmy.search.todays import todays_points

    rules = dict(todays_points(task))["rules"]
    if not rules:
        return False
    want = point_key(rules)
    return not any(point_key(t.user_attrs["values"]) == want for t in measured(store.load(task.key.id)))


def merge(old: Sequence[Entry], new: Sequence[Entry]) -> list[Entry]:
    """The entries of a golden file after promoting `new` into it: a new entry replaces the old
    one of the same key, the rest stay. The replacement keeps the smaller token count of the two:
    a weight-folding kernel has one key at every count, and the file lists it at the first (a
    promotion at 4096 tokens once moved both weight-folding entries of the Qwen3 file there, and
    with them the numbers of the entries between)."""
    was = {e.key: e.tokens for e in old}
    keys = {e.key for e in new}
    return [*(e for e in old if e.key not in keys),
            *(replace(e, tokens=min(e.tokens, was.get(e.key, e.tokens))) for e in new)]


def _alternatives(store, key_id: str, best_values) -> list[Alternative]:
    """The fastest other candidates measured right in the study (distinct values, by time)."""
    from emmy.search.study import measured, point_key

    study = store.load(key_id)
    seen = {point_key(best_values)}
    out: list[Alternative] = []
    for t in sorted((t for t in measured(study) if t.value is not None), key=lambda t: t.value):
        values = dict(t.user_attrs["values"])
        if point_key(values) in seen:
            continue
        seen.add(point_key(values))
        out.append(Alternative(values, float(t.value), float(t.user_attrs.get("spread") or 0.0)))
        if len(out) == ALTERNATIVES:
            break
    return out


__all__ = ["ALTERNATIVES", "merge", "promote", "rules_unmeasured"]
