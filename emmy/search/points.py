"""Points of a legal space: their keys and the nearest legal point to one.

    point_key(values) -> tuple                       # a point's identity (knob order does not matter)
    nearest(space, point, fixed, avoid) -> dict | None
    conditional_space(task)                          # the task's legal points as a ConditionalSpace
    params_of(space, point) -> dict | None           # the Optuna parameters that draw a point

Used by the studies (`emmy.search.study`: repeats, fork siblings, starved branches, enqueued
points), today's answers (`emmy.search.todays`) and the first trials that fill the card's waves
(`emmy.search.waves`).
"""

from __future__ import annotations

from collections.abc import Mapping

# Nodes of the legal space a nearest-point search visits at most (it usually needs a few dozen).
NEAREST_VISITS = 20000


def point_key(values: Mapping[str, object]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in values.items()))


def nearest(space, point: Mapping[str, object], fixed: Mapping[str, object], avoid=frozenset()) -> dict | None:
    """The legal point with the `fixed` values nearest to `point` (fewest other knobs changed,
    then fewest steps along their domains; ties in knob and value order) whose point key is
    not in `avoid`; None where there is none (or none within `NEAREST_VISITS` nodes). A
    depth-first walk of the legal space in `space.order`, each knob's own value first, cut
    where it cannot beat the best found."""
    order, domains, legal = space.order, space.space.domains, space.space
    best: list = [None, (len(order) + 1, 0)]
    visits = 0

    def walk(prefix: dict, cost: tuple[int, int]) -> None:
        nonlocal visits
        if cost >= best[1] or visits >= NEAREST_VISITS:
            return
        if len(prefix) == len(order):
            if point_key(prefix) not in avoid:
                best[0], best[1] = dict(prefix), cost
            return
        visits += 1
        name = order[len(prefix)]
        options = legal.options(prefix)
        if name in fixed:
            steps = [(fixed[name], (0, 0))] if fixed[name] in options else []
        else:
            here = point.get(name)
            at = domains[name].index(here) if here in domains[name] else None

            def step(v) -> tuple[int, int]:
                if v == here:
                    return (0, 0)
                return (1, len(domains[name]) if at is None else abs(domains[name].index(v) - at))

            steps = sorted(((v, step(v)) for v in options), key=lambda vs: vs[1])
        for v, (c, d) in steps:
            prefix[name] = v
            walk(prefix, (cost[0] + c, cost[1] + d))
            del prefix[name]

    walk({}, (0, 0))
    return best[0]



def conditional_space(task):
    """The task's ConditionalSpace over its legal points (knobs in `knob_order`: `workers`
    first)."""
    from emmy.schedule.space import ConditionalSpace, legal_points

    points = legal_points(task.info(), dict(task.space), task.target_object())
    return ConditionalSpace(points, points.order)


def params_of(space, point: Mapping[str, object]) -> dict[str, object] | None:
    """The Optuna parameters under which `space.suggest` would draw `point` (for enqueueing it):
    the suggestions are replayed on a recorder that answers each knob with the point's value.
    None where the space cannot draw the point."""
    recorder = _Recorder(point)
    try:
        space.suggest(recorder)
    except _NotInSpace:
        return None
    return recorder.params


class _NotInSpace(Exception):
    pass


class _Recorder:
    """Stands in for an Optuna trial: answers `suggest_categorical(name, choices)` with the
    point's value of the parameter's knob (`ConditionalSpace.parameter`: `knob|choices`)."""

    def __init__(self, point: Mapping[str, object]):
        self.point = dict(point)
        self.params: dict[str, object] = {}

    def suggest_categorical(self, name: str, choices):
        knob = name.partition("|")[0]
        if knob not in self.point or self.point[knob] not in choices:
            raise _NotInSpace(name)
        value = self.point[knob]
        self.params[name] = value
        return value


__all__ = ["NEAREST_VISITS", "conditional_space", "nearest", "params_of", "point_key"]
