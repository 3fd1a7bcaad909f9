"""The legal space of one kernel: every knob assignment `emmy.tuning.legality.check` accepts, for
the kernel and, where it runs as parts, for each part.

    points = legal_points(info, space, target)   # a LegalSpace (a Sequence of dicts)
    len(points)          # 2638552 (the Qwen3 layer's q/k/v projection at 512 tokens, sm_90a)
    points[0]            # {"workers": "thread", "block_m": 16, ...}, in a fixed order
    point in points      # legality, by a walk of the space
    cond = ConditionalSpace(points, order)
    cond.suggest(trial)  # an Optuna trial draws a legal point, knob by knob
    cond.neighbours(point, 8)
    candidate_facts(info, values, target)  # what the plan predicts for one point

`info` is the kernel's `KernelInfo` (`emmy.analysis.classify.classify`), `space` its knob domains
(`{name: values}` as in the IR: `emmy.passes.decide_forks.problem_of(op, target).space`).

The legal points of a contraction run to millions (0.08-0.13% of a raw space of 2.4 billion
combinations on the Qwen3 layer), too many to list one by one. They are kept as a layered graph
instead: one layer per knob (in `knob_order`, `workers` first), each node the set of legal
completions of the prefixes that reach it, each edge a value with at least one completion. The
graph is built depth first from prefixes, running each legality rule on its own with a record of
the knobs it asks about and reads (bit masks):

- a rule that asked only about assigned knobs is *settled*: it runs the same way on every longer
  prefix, so it is not run again below;
- a rule's run is kept by the values of the knobs it read, and reused on any prefix of the same
  length that agrees on them;
- two prefixes of one length share their node when the same rules are open (not settled) on both
  and they agree on every earlier knob that those rules read anywhere below: the open rules then
  run the same way on both, step by step. Equal nodes are kept once.

The Qwen3 layer's contractions (sm_90a) visit 8,000-15,000 prefixes and keep 200-400 nodes, in
0.15-0.2 s of CPU at 512 tokens and 0.2-0.5 s at 4096 (where about half is legality's stream_k
check, which walks every output tile). The size, any point by index (so uniform sampling),
iteration in order, membership and "which values of the next knob still have a completion" follow
from counts kept on the nodes.

A kernel that runs as parts (outputs over different axes: `emmy.schedule.plan.split_by_outputs`,
the running example's q beside k and v) must be legal for each part too, as it runs
(`emmy.schedule.plan.part_values`): its graph is built with every part's legality rules besides
the kernel's (`part_rules`), one graph per `siblings` value (which decides the parts; `siblings`
is chosen right after `workers`) and per way a part of several contractions may run (k and v
paired share block_n where that is legal, else keep it each), and the graphs are joined node by
node. So every point, and every draw of a `ConditionalSpace`, runs on every part. The running
example's q/k/v kernel (sm_90a) takes 1.1-1.3 s of CPU at 300 tokens and 2.4-2.5 s at 4096 (three
graphs of some 40-55 rules each); kernels without parts, all of the Qwen3 layer's, are built as
before.

This relies on two properties of `legality.check`: its domain check looks at one knob at a time
(so each domain is filtered knob by knob first), and each rule reads the knobs through the
mapping it is given, so that what it asks and reads is all its answer depends on.
`test_schedule_space.py` checks the result against checking every combination.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import combinations, product
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from emmy.analysis.classify import classify
from emmy.diagnostics import EmmyError
from emmy.schedule.attention import AttentionPlan
from emmy.schedule.contraction import ContractionPlan
from emmy.schedule.plan import split_by_outputs
from emmy.targets import Target
from emmy.tuning import legality
from emmy.tuning.knobs import KnobValue, knob_space_for

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo

# The order knobs are chosen in, where a kernel has them: first the ones that pick how the kernel
# works (`workers` first: it decides which of the other rules apply), then the tile sizes; any
# other knob after these, in the space's order (`siblings` picks a kernel's parts, whose rules
# apply from there on: see part_rules; `slices` comes right after `workers` because it says which
# of block_m and block_n is cut into 64-row slices, and which side a cluster's pair of blocks
# shares, which the rules of `cluster` and `group_m` read). Measured on the Qwen3 layer's four
# contractions (sm_90a, 512 tokens), when the space was smaller: this order built their legal
# spaces visiting 35,523 prefixes (0.7 s of CPU for the four); the space's own order, with or
# without `workers` first, about 220,000 (8.5-8.9 s). Today (tools/legal_space_size.py):
# 15,384,400 points for the four (5,218,844 for q/k/v), 2,216,420 of them with slices = cols,
# 0.3-0.4 s of CPU a kernel. (In the order before, slices after group_m, the builder cut off
# 32,048 legal q/k/v points: pairs along n in groups of one row tile, which group_m's rule
# refused while it took the pairs to lie along m.)
PREFERRED_ORDER: tuple[str, ...] = (
    "workers", "slices", "siblings", "schedule", "split_tail", "fusion", "split_k", "combine", "cluster", "group_m",
    "copy", "epilogue", "block_m", "block_n", "block_k", "warps", "stages",
)


def knob_order(space: Mapping[str, Sequence[KnobValue]]) -> tuple[str, ...]:
    """The order knobs are chosen in: those of `PREFERRED_ORDER` the space has, in that order,
    then the others in the space's order."""
    return (*(n for n in PREFERRED_ORDER if n in space), *(n for n in space if n not in PREFERRED_ORDER))


def legal_points(
    info: KernelInfo,
    space: Mapping[str, Sequence[KnobValue]],
    target: Target,
    order: Sequence[str] | None = None,
) -> LegalSpace:
    """Every legal full assignment of `space` for the kernel `info` on `target`, as a
    `LegalSpace` (a Sequence of dicts in a fixed order: lexicographic in `order`, each knob's
    values in domain order)."""
    order = knob_order(space) if order is None else tuple(order)
    if sorted(order) != sorted(space):
        raise EmmyError(f"legal space of @{info.name}: the order ({', '.join(order)}) must name each knob of the space ({', '.join(space)}) once")
    spaces = []
    for siblings, rules in part_rules(info, space, target):
        own = dict(space, siblings=(siblings,)) if siblings is not None else space
        spaces.append(_Builder(info, own, target, order, rules).build())
    if len(spaces) == 1:
        return spaces[0]
    domains = {n: tuple(v for v in space[n] if any(v in s.domains[n] for s in spaces)) for n in order}
    return _union(spaces, order, domains, (info, target))


# --------------------------------------------------------------------------------------------
# Kernels that run as parts
# --------------------------------------------------------------------------------------------


def part_rules(
    info: KernelInfo, space: Mapping[str, Sequence[KnobValue]], target: Target
) -> list[tuple[KnobValue | None, tuple[Rule, ...]]]:
    """Where the kernel runs as parts (outputs over different axes,
    `emmy.schedule.plan.split_by_outputs`), the rules a point must also pass: per value of
    `siblings` (which decides the parts; None where the space has no such knob), one tuple of
    rules per way of running the parts. A point is legal when it passes one of the tuples of its
    `siblings` value; a kernel without parts has one empty tuple.

    A part runs with the kernel's values (`emmy.schedule.plan.part_values`): each legality rule on
    the part's own facts, and a check of its domains. A part with several contractions (k and v
    paired) runs with block_n shared among them where that is legal, else with the kernel's
    block_n: two ways, each such part doubles the tuples (their spaces are joined)."""
    if info.kind != "contraction" or info.op is None:
        return [(None, ())]
    choices = [(v, v == "apart") for v in space["siblings"]] if "siblings" in space else [(None, False)]
    out: list[tuple[KnobValue | None, tuple[Rule, ...]]] = []
    for siblings, apart in choices:
        ops = split_by_outputs(info.op, apart)
        alone: list[Rule] = []  # rules of parts with one way to run
        ways: list[tuple[tuple[Rule, ...], tuple[Rule, ...]]] = []  # (block_n shared, the kernel's) per part
        for op in ops if len(ops) > 1 else ():
            part = classify(op)
            if part.n_contractions > 1:
                ways.append((_rules_of_part(part, space, target, part.n_contractions), _rules_of_part(part, space, target, 1)))
            else:
                alone += _rules_of_part(part, space, target, 1)
        out += [(siblings, tuple(alone) + tuple(r for rules in pick for r in rules)) for pick in product(*ways)]
    if all(not rules for _, rules in out):
        return [(None, ())]
    return out


def _rules_of_part(part: KernelInfo, space, target: Target, share: int) -> tuple[Rule, ...]:
    """The legality rules run on the part `part` with block_n divided among `share` contractions
    (part_values), and the part's domain check of the values it sees."""
    own = knob_space_for(part, target)
    names = [n for n in space if n != "siblings"]
    checked = {
        n: frozenset(own.get(n, ())) for n in names
        if not set(space[n]) <= set(own.get(n, ())) or (n == "block_n" and share > 1)
    }

    def seen(values: legality.RuleValues) -> legality.RuleValues:
        return legality.RuleValues(_SharedBlockN(values.values, share)) if share > 1 else values

    def domain(info, values, target, reasons) -> None:
        view = seen(values)
        for n, allowed in checked.items():
            if view.has(n) and view[n] not in allowed:
                reasons.append(f"part @{part.name}: {n}={view[n]} is not in its domain")

    def wrap(rule: Rule) -> Rule:
        def run(info, values, target, reasons) -> None:
            rule(part, seen(values), target, reasons)

        return run

    return ((domain,) if checked else ()) + tuple(wrap(rule) for rule in _rules(part.kind))


class _SharedBlockN(Mapping):
    """Knob values with block_n divided among `share` contractions, as `part_values` divides it
    (at least 8, a multiple of 8); reads go through to the values (which record them)."""

    __slots__ = ("values", "share")

    def __init__(self, values: Mapping[str, KnobValue], share: int):
        self.values, self.share = values, share

    def __getitem__(self, name: str) -> KnobValue:
        value = self.values[name]
        return max(8, int(value) // self.share // 8 * 8) if name == "block_n" else value

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def _union(spaces: Sequence[LegalSpace], order: tuple[str, ...], domains: dict, source) -> LegalSpace:
    """The points of any of `spaces` (in one `order`): their graphs merged, node by node."""
    interner = _Interner()
    memo: dict[frozenset[int], _Node | None] = {}

    def merge(nodes: list[_Node], depth: int) -> _Node | None:
        if depth == len(order):
            return interner.leaf
        key = frozenset(id(n) for n in nodes)
        if key not in memo:
            edges = []
            for value in domains[order[depth]]:
                children = [c for n in nodes if (c := n.child(value)) is not None]
                if children and (merged := merge(children, depth + 1)) is not None:
                    edges.append((value, merged))
            memo[key] = interner.node(edges)
        return memo[key]

    roots = [s._root for s in spaces if s._root is not None]
    root = merge(roots, 0) if roots else None
    return LegalSpace(order, domains, root, len(interner.nodes) + 1, source)


# --------------------------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------------------------


class _Node:
    """Legal completions of a prefix: edges (value, child) in domain order, and their count."""

    __slots__ = ("values", "children", "starts", "count")

    def __init__(self, edges: Sequence[tuple[KnobValue, _Node]]):
        self.values = tuple(v for v, _ in edges)
        self.children = tuple(c for _, c in edges)
        starts, total = [], 0
        for c in self.children:
            starts.append(total)
            total += c.count
        self.starts = tuple(starts)  # the index of each edge's first completion
        self.count = total if edges else 1  # a node without edges is the end of a full point

    def child(self, value: KnobValue) -> _Node | None:
        for v, c in zip(self.values, self.children):
            if v == value:
                return c
        return None


class _Interner:
    """One node per distinct set of edges (children compared by identity)."""

    def __init__(self) -> None:
        self.nodes: dict[tuple, _Node] = {}
        self.leaf = _Node(())

    def node(self, edges: list[tuple[KnobValue, _Node]]) -> _Node | None:
        if not edges:
            return None  # no legal completion
        key = tuple((v, id(c)) for v, c in edges)
        found = self.nodes.get(key)
        if found is None:
            found = self.nodes[key] = _Node(edges)
        return found


class LegalSpace(Sequence):
    """The legal points of one kernel (see the module docstring); a Sequence of dicts."""

    def __init__(
        self,
        order: tuple[str, ...],
        domains: dict[str, tuple[KnobValue, ...]],
        root: _Node | None,
        nodes: int,
        source: tuple[KernelInfo, Target] | None = None,
    ):
        self.order = order
        self.domains = domains  # each knob's values that are legal on their own, in domain order
        self._root = root
        self.nodes = nodes  # distinct nodes of the graph (its size in memory)
        self.source = source  # the kernel and target it was built for (None: built from points)

    @classmethod
    def from_points(
        cls,
        points: Iterable[Mapping[str, KnobValue]],
        order: Sequence[str],
        domains: Mapping[str, Sequence[KnobValue]] | None = None,
    ) -> LegalSpace:
        """The space holding exactly `points` (full assignments of the knobs in `order`); each
        knob's values in the order of `domains`, else in the order they first appear."""
        order = tuple(order)
        domains_seen: dict[str, dict[KnobValue, None]] = {n: dict.fromkeys((domains or {}).get(n, ())) for n in order}
        trie: dict = {}
        for p in points:
            if sorted(p) != sorted(order):
                raise EmmyError(f"a point must assign exactly the knobs {', '.join(order)}, got {', '.join(p)}")
            level = trie
            for name in order:
                domains_seen[name].setdefault(p[name], None)
                level = level.setdefault(p[name], {})
        interner = _Interner()

        def build(level: dict, depth: int) -> _Node | None:
            if depth == len(order):
                return interner.leaf
            values = [v for v in domains_seen[order[depth]] if v in level]
            return interner.node([(v, build(level[v], depth + 1)) for v in values])

        root = build(trie, 0) if trie else None
        return cls(order, {n: tuple(d) for n, d in domains_seen.items()}, root, len(interner.nodes) + 1)

    def reordered(self, order: Sequence[str]) -> LegalSpace:
        """The same points with the knobs chosen in `order` (built again from the kernel's rules
        where this space was built from them, else from its points)."""
        order = tuple(order)
        if order == self.order:
            return self
        if self.source is not None:
            info, target = self.source
            return legal_points(info, self.domains, target, order)
        if sorted(order) != sorted(self.order):
            raise EmmyError(f"the order ({', '.join(order)}) must name each knob of the space ({', '.join(self.order)}) once")
        return LegalSpace.from_points(({n: p[n] for n in order} for p in self), order, self.domains)

    # Sequence ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return 0 if self._root is None else self._root.count

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"legal point {index} of {n}")
        point: dict[str, KnobValue] = {}
        node = self._root
        for name in self.order:
            assert node is not None
            i = bisect.bisect_right(node.starts, index) - 1
            index -= node.starts[i]
            point[name] = node.values[i]
            node = node.children[i]
        return point

    def __iter__(self) -> Iterator[dict[str, KnobValue]]:
        """The points in order, by a depth-first walk: `stack` holds (node, next edge) for the
        nodes on the path, `chosen` the values of the edges taken to reach the top one; a leaf,
        or a node whose edges are all done, backs up one edge."""
        if self._root is None:
            return
        stack: list[tuple[_Node, int]] = [(self._root, 0)]
        chosen: list[KnobValue] = []
        while stack:
            node, i = stack.pop()
            if len(chosen) == len(self.order) or i == len(node.values):
                if len(chosen) == len(self.order):  # a full point
                    yield dict(zip(self.order, chosen))
                if chosen:  # back up one edge
                    chosen.pop()
            else:  # take edge i, then come back for edge i + 1
                stack.append((node, i + 1))
                chosen.append(node.values[i])
                stack.append((node.children[i], 0))

    def __contains__(self, point: object) -> bool:
        if not isinstance(point, Mapping) or len(point) != len(self.order):
            return False
        node = self._root
        for name in self.order:
            if node is None or name not in point:
                return False
            node = node.child(point[name])
        return node is not None

    # Walking ----------------------------------------------------------------------------------

    def options(self, prefix: Mapping[str, KnobValue]) -> tuple[KnobValue, ...]:
        """The values of the next knob in `order` (after the ones `prefix` assigns, which must
        be the first ones) that still have a legal completion."""
        node = self._walk(prefix)
        return () if node is None else node.values

    def count(self, prefix: Mapping[str, KnobValue]) -> int:
        """How many legal points start with `prefix` (the first knobs in `order`)."""
        node = self._walk(prefix)
        return 0 if node is None else node.count

    def _walk(self, prefix: Mapping[str, KnobValue]) -> _Node | None:
        names = self.order[: len(prefix)]
        if sorted(names) != sorted(prefix):
            raise EmmyError(
                f"a prefix assigns the first knobs in order ({', '.join(self.order)}), got {', '.join(prefix)}"
            )
        node = self._root
        for name in names:
            if node is None:
                return None
            node = node.child(prefix[name])
        return node


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


class _Asked(Mapping):
    """A prefix assignment that records which knobs a rule asks about and which it reads, as
    bit masks (bit i: the i-th knob in order)."""

    __slots__ = ("values", "bits", "asked", "read")

    def __init__(self, values: dict[str, KnobValue], bits: dict[str, int]):
        self.values, self.bits = values, bits
        self.asked = self.read = 0

    def __getitem__(self, name: str) -> KnobValue:
        bit = self.bits[name]
        self.asked |= bit
        self.read |= bit
        return self.values[name]

    def __contains__(self, name: object) -> bool:
        self.asked |= self.bits.get(name, 0)  # type: ignore[call-overload]
        return name in self.values

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


class _Run(NamedTuple):
    """One rule run on a prefix: whether it passed, and the knobs it asked about and read (masks)."""

    ok: bool
    asked: int
    read: int


Rule = Callable[[Any, Any, Target, list], None]  # legality.rules_for's: rule(info, values, target, reasons)


def _rules(kind: str) -> tuple[Rule, ...]:
    """The legality rules of a kind, run one at a time here (`check` runs them all)."""
    return legality.rules_for(kind)


class _Builder:
    """Builds the graph of a LegalSpace depth first (module docstring: settled and open rules,
    runs kept by the values they read, nodes shared by prefixes the open rules cannot tell apart)."""

    def __init__(
        self, info: KernelInfo, space: Mapping[str, Sequence[KnobValue]], target: Target, order: tuple[str, ...],
        extra: tuple[Rule, ...] = (),
    ):
        self.info, self.target, self.order = info, target, order
        self.bits = {n: 1 << i for i, n in enumerate(order)}
        # the domain check and the rules of one knob alone, knob by knob
        self.domains = {n: tuple(v for v in space[n] if not legality.check(info, {n: v}, target)) for n in order}
        self.rules = _rules(info.kind) + extra  # (extra: the rules of the kernel's parts, part_rules)
        self.prefix: dict[str, KnobValue] = {}  # the prefix being extended (one dict throughout)
        self.values: list[KnobValue] = [0] * len(order)  # the prefix's values by position
        self.view = _Asked(self.prefix, self.bits)
        self.rule_values = legality.RuleValues(self.view)
        # depth -> open rules -> the earlier knobs they read (mask) -> those knobs' values -> (node, reads per rule)
        self.memo: list[dict[tuple[bool, ...], dict[int, dict]]] = [{} for _ in order]
        # prefix length -> rule -> the knobs a run read (mask) -> their values -> the run
        self.runs: list[list[dict[int, dict]]] = [[{} for _ in self.rules] for _ in range(len(order) + 1)]
        self.getters: dict[int, Callable[[list], Any]] = {}
        self.interner = _Interner()

    def build(self) -> LegalSpace:
        runs = self._run()
        root = None
        if all(r.ok for r in runs):
            root, _ = self._node(0, runs)
        return LegalSpace(self.order, self.domains, root, len(self.interner.nodes) + 1, (self.info, self.target))

    def _key(self, mask: int) -> Any:
        """The values of the knobs in `mask`, from the current prefix (hashable)."""
        getter = self.getters.get(mask)
        if getter is None:
            positions = [i for i in range(len(self.order)) if mask >> i & 1]
            getter = self.getters[mask] = itemgetter(*positions) if positions else (lambda _: ())
        return getter(self.values)

    def _run(self, settled: Sequence[_Run | None] = ()) -> list[_Run]:
        """Each rule run on the prefix, but for those given in `settled` (they run the same way)."""
        view, values = self.view, self.rule_values
        out = []
        cache = self.runs[len(self.prefix)]
        for i, rule in enumerate(self.rules):
            if settled and (done := settled[i]) is not None:
                out.append(done)
                continue
            known = cache[i]
            run = None
            for mask, table in known.items():
                run = table.get(self._key(mask))
                if run is not None:
                    break
            if run is None:
                view.asked = view.read = 0
                reasons: list[str] = []
                rule(self.info, values, self.target, reasons)
                run = _Run(not reasons, view.asked, view.read)
                known.setdefault(run.read, {})[self._key(run.read)] = run
            out.append(run)
        return out

    def _node(self, depth: int, runs: list[_Run]) -> tuple[_Node | None, list[int]]:
        """The node of the legal prefix (its first `depth` knobs; `runs` the rules run on it)
        and, per rule, the knobs it reads on the prefix and its completions (masks)."""
        prefix = self.prefix
        if depth == len(self.order):
            return self.interner.leaf, [r.read for r in runs]
        later = -1 << depth  # the knobs not yet assigned
        opened = tuple(bool(r.asked & later) for r in runs)
        memo = self.memo[depth].setdefault(opened, {})
        for deps, table in memo.items():
            found = table.get(self._key(deps))
            if found is not None:
                node, reads = found
                return node, [reads[i] if o else r.read for i, (o, r) in enumerate(zip(opened, runs))]
        name = self.order[depth]
        reads = [r.read for r in runs]
        settled = [None if o else r for o, r in zip(opened, runs)]
        edges: list[tuple[KnobValue, _Node]] = []
        for value in self.domains[name]:
            prefix[name] = self.values[depth] = value
            child_runs = self._run(settled)
            for i, r in enumerate(child_runs):
                reads[i] |= r.read
            if all(r.ok for r in child_runs):
                child, child_reads = self._node(depth + 1, child_runs)
                for i, r in enumerate(child_reads):
                    reads[i] |= r
                if child is not None:
                    edges.append((value, child))
            del prefix[name]
        deps = 0
        for o, r in zip(opened, reads):
            if o:
                deps |= r
        deps &= ~later
        node = self.interner.node(edges)
        memo.setdefault(deps, {})[self._key(deps)] = (node, reads)
        return node, reads


# --------------------------------------------------------------------------------------------
# A conditional space for a sampler
# --------------------------------------------------------------------------------------------


class ConditionalSpace:
    """Knobs chosen one after another in `order`, each from the values that still have a legal
    completion given the earlier choices: every draw is legal.

    `points`: a `LegalSpace` (rebuilt in `order` when its own differs) or any iterable of full
    assignments (dicts)."""

    def __init__(self, points: LegalSpace | Iterable[Mapping[str, KnobValue]], order: Sequence[str]):
        order = tuple(order)
        self.space = points.reordered(order) if isinstance(points, LegalSpace) else LegalSpace.from_points(points, order)
        self.order = order
        if not len(self.space):
            raise EmmyError("a conditional space needs at least one legal point")

    @staticmethod
    def parameter(knob: str, choices: Sequence[KnobValue]) -> str:
        """The sampler's parameter name for `knob` offered `choices`: one fixed choice list per
        name, as Optuna needs (`block_m|64,128`)."""
        return f"{knob}|{','.join(map(str, choices))}"

    def suggest(self, trial: Any) -> dict[str, KnobValue]:
        """A legal point drawn through `trial.suggest_categorical(name, choices)` (an Optuna
        trial), knob by knob; returns the plain values (the parameters' names carry the choice
        sets: see `parameter`)."""
        chosen: dict[str, KnobValue] = {}
        node = self.space._root
        for name in self.order:
            assert node is not None
            choices = list(node.values)
            value = trial.suggest_categorical(self.parameter(name, choices), choices)
            chosen[name] = value
            node = node.child(value)
        return chosen

    def neighbours(self, point: Mapping[str, KnobValue], n: int) -> list[dict[str, KnobValue]]:
        """Up to `n` legal points that differ from `point` in one knob, then in two; closest
        first (fewest knobs changed, then the fewest steps along the domains, then knob order
        and value order)."""
        if sorted(point) != sorted(self.order):
            raise EmmyError(f"a point must assign exactly the knobs {', '.join(self.order)}, got {', '.join(point)}")
        out: list[dict[str, KnobValue]] = []
        for changed in (1, 2):
            found = []
            for names in combinations(self.order, changed):
                others = [self._others(name, point[name]) for name in names]
                for picks in product(*others):
                    candidate = dict(point)
                    for name, (_, _, value) in zip(names, picks):
                        candidate[name] = value
                    if candidate in self.space:
                        steps = sum(s for s, _, _ in picks)
                        found.append(((steps, [self.order.index(x) for x in names], [i for _, i, _ in picks]), candidate))
            found.sort(key=lambda f: f[0])
            out += [c for _, c in found[: n - len(out)]]
            if len(out) >= n:
                break
        return out

    def _others(self, name: str, value: KnobValue) -> list[tuple[int, int, KnobValue]]:
        """(steps from `value` along the domain, index, other value) of the knob's other values."""
        domain = self.space.domains[name]
        here = domain.index(value) if value in domain else None
        return [
            (abs(i - here) if here is not None else len(domain), i, v)
            for i, v in enumerate(domain)
            if v != value
        ]


# --------------------------------------------------------------------------------------------
# What the plan predicts
# --------------------------------------------------------------------------------------------


def candidate_facts(info: KernelInfo, values: Mapping[str, KnobValue], target: Target) -> dict[str, int | float | str]:
    """What the plan (`emmy.schedule.plan.plan_for`) predicts for one legal point: shared memory
    per block (bytes, the plan's whole layout), threads per block, blocks of the main launch,
    waves on the target's SMs, registers per thread (estimated) and launches in all; for a
    contraction also where a computed A side comes from (`a_source`: "raw_copies" or "global",
    and why), and with three consumer warpgroups the registers the producer hands them; for a
    attention whose heads go in L2 sections the batch x head rows of one (`l2_section`), and for
    a warp-specialized one (wgmma_ws) its consumer warpgroups, their overlap of softmax and
    wgmmas, and the producer's and consumers' register budgets."""
    from emmy.schedule.plan import plan_for

    plan = plan_for(info, values, target)
    facts: dict[str, int | float | str] = {
        "smem_bytes": plan.smem_bytes,
        "threads": plan.threads,
        "blocks": plan.blocks,
        "waves": plan.waves,
        "registers": plan.registers,
        "launches": len(plan.launches),
    }
    if isinstance(plan, ContractionPlan):
        facts["a_source"], facts["a_source_reason"] = plan.a_source, plan.a_source_reason
        if plan.register_budgets is not None:  # three consumer warpgroups: registers traded
            facts["producer_registers"], facts["consumer_registers"] = plan.register_budgets
    if isinstance(plan, AttentionPlan) and plan.section < plan.batch:
        facts["l2_section"] = plan.section  # batch x head rows whose blocks go together
    if isinstance(plan, AttentionPlan) and plan.warp_specialized:
        producer, consumer = plan.register_budgets or (target.regs_per_thread, target.regs_per_thread)
        facts["consumers"], facts["overlap"] = plan.consumers, plan.overlap
        facts["producer_registers"], facts["consumer_registers"] = producer, consumer
    return facts


__all__ = ["ConditionalSpace", "LegalSpace", "candidate_facts", "knob_order", "legal_points"]
