"""Golden entries carried over a knob added to their kernels' space, or a domain grown.

    changed, notes = carry_over(directory)           # rewrites the files it changes

A kind of kernel that gains a knob gets new keys (the knob set is part of the structure a key
hashes), so every golden entry of that kind reads stale in `emmy golden check`, though the
program it measured is still there: the new knob at its off value (`knobs.FEATURE_OFF`, the
value a kernel without the knob runs with) builds it. `carry_over` gives such an entry the key
the pipeline makes today and adds that value to its values and to every alternative's. It
carries an entry over only where nothing else changed: the same kernel name, shape, space
version and description (operations, operands, dtypes), and only knobs with an off value in
today's domain missing from it. Any other stale entry is left as it is for `golden check` to
report. A domain that gains values (`block_m` 192, say) changes the keys too, and the values an
entry holds still build the program it measured: such an entry is carried over with its values
as they are, where each is in today's domain. Run it after adding such a knob or value
(`python tools/golden_carry_over.py`), then `emmy golden check`.

A knob taken out of a kernel's space because it never changed its program (a no-op: every
value built the same CUDA) changes the keys the same way. Only the person removing it can vouch
that it was a no-op (compare `emmy compile --knob K.KNOB=V -o ...` for each value before
removing it), so such knobs are named (`dropped`, `--drop KNOB`): an entry whose values hold
them and are otherwise in today's space is carried over without them. An alternative that
becomes the entry's values, or an earlier alternative's, was the same program measured again
and is left out (the entry's own time and the first alternative's stay).

Values are read in today's space as a new study reads an old study's points
(`emmy.tuning.knobs.in_space`): an alternative that no longer has a value there is left out,
and the note says so.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from emmy.golden.check import model_tasks
from emmy.golden.schema import Alternative, Entry, read_dir, write_file
from emmy.tuning.knobs import in_space


def carry_over(directory: Path, compile_tasks=None, dropped: Collection[str] = ()) -> tuple[list[Path], list[str]]:
    """Carry the stale entries of the golden files under `directory` over added knobs, grown
    domains and the no-op knobs named in `dropped` (see the module docstring). Returns the files
    rewritten and a note per entry carried over. `compile_tasks` as in
    `emmy.golden.check.check_dir`."""
    compile_tasks = compile_tasks or model_tasks(directory.resolve().parent)
    cache: dict[tuple, dict] = {}
    changed: list[Path] = []
    notes: list[str] = []
    for f in read_dir(directory):
        entries = list(f.entries)
        touched = False
        for i, e in enumerate(entries):
            group = (e.model, e.layer, e.tokens, f.target)
            if group not in cache:
                cache[group] = compile_tasks(*group)
            task = cache[group].get(e.kernel)
            carried = _carried(e, task, frozenset(dropped)) if task is not None and task.key.id != e.key else None
            if carried is not None:
                new, merged, outside = carried
                notes.append(f"{f.where(i)}: key {e.key} -> {new.key} ({_change(e, new, merged, outside)})")
                entries[i] = new
                touched = True
        if touched:
            write_file(f.path, f.target, entries)
            changed.append(f.path)
    return changed, notes


def _carried(e: Entry, task, dropped: frozenset[str]) -> tuple[Entry, int, int] | None:
    """`e` under the task's key with the added knobs at their off values and the `dropped`
    knobs left out (or, where no knob was added or dropped, with its values unchanged, every one
    still in its grown domain), or None where `e` is stale for another reason. Also how many
    alternatives were merged (the same program as the values or an earlier alternative once a
    no-op knob is gone) and how many were left out (no longer in today's space)."""
    key = task.key
    if (key.shape, key.version, task.description) != (e.shape, e.version, e.description):
        return None
    gone = [k for k in e.values if k not in task.space]
    if any(k not in dropped for k in gone):
        return None
    values = in_space(e.values, task.space)
    if values is None:
        return None
    seen = [values]
    alternatives = []
    merged = outside = 0
    for a in e.alternatives:
        v = in_space(a.values, task.space)
        if v is None:
            outside += 1
        elif gone and v in seen:  # (a dropped no-op knob: the same program measured again)
            merged += 1
        else:
            seen.append(v)
            alternatives.append(Alternative(v, a.time_s, a.spread))
    new = replace(e, key=key.id, structure=key.structure, values=values, alternatives=tuple(alternatives))
    return new, merged, outside


def _change(old: Entry, new: Entry, merged: int, outside: int) -> str:
    """What carrying `old` over changed, for its note."""
    added = [f"{k}={v}" for k, v in new.values.items() if k not in old.values]
    gone = [f"{k} dropped" for k in old.values if k not in new.values]
    counts = [f"{n} alternative{'s' if n > 1 else ''} {what}" for n, what in
              ((merged, "merged"), (outside, "outside today's space left out")) if n]
    return ", ".join(added + gone + counts) or "domains grown"


__all__ = ["carry_over"]
