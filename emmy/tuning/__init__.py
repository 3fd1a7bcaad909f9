"""Schedule tuning: knob spaces, legality, the default rules, pins and deciders (the target table
is `emmy.targets`, which every layer may import).

- `knobs`: the knob space per kernel kind, filtered by the target.
- `legality`: `check(info, values, target) -> list[str]`, the one legality check.
- `rules`: `decide(info, target, space, fixed)`, the default rule-based decider.
- `pins`: `parse_pins(spec)`, user-fixed knob values.
- `deciders`: the ordered evidence hierarchy `decide-forks` consults.
"""
