"""The rule-based decider: a legal schedule for any kernel, with no measurement.

    decide(info, target, space, fixed={}) -> dict[str, Choice] | None

For every knob of `space` not in `fixed`, a `Choice(value, reason)`, such that the whole
assignment (fixed values included) passes `legality.check`; None when no legal completion exists.

How it works: each kind has a knob order and, per knob, a preference list computed from the shapes,
the target and the knobs already chosen (best first, each with a one-line reason). A depth-first
search takes the first value of each list that keeps the partial assignment legal and backtracks
when a later knob has no legal value, so pinned values and target limits are always respected.

The preferences (tier `rule` in the IR):
- contraction: tensor-core workers (warp-specialized `wgmma_ws` on sm_90a when M >= 64, else
  `mma_sync`); block_m, block_n and split_k ranked by a small roofline estimate that counts tiles
  and waves on the SMs (small M -> small block_m, narrower block_n or split_k to fill the SMs;
  large M -> big tiles), preferring tiles that divide the extents; block_k 64 (16-byte rows of bf16); 3-4 stages when
  there are enough k-steps and shared memory; warps from the tile area; 16-byte vectors.
- attention: from 1000 keys of head dim 65-128 on sm_90a the warp-specialized kernel (`wgmma_ws`:
  a producer warpgroup, two consumers of 64 query rows, 2 stages, tensor-map copies), and at
  head dim 64 from 4096 keys, where 192-row query blocks give every SM three or more, its three
  consumers (block_q 192, 12 warps, 128-key blocks); else
  wgmma for S = Q K^T on sm_90a (one warpgroup of 64 query rows), else mma.sync with
  one 16-row slice per warp; block_q 64 (smaller for tiny sequences); block_kv 64 (128 for head
  dims <= 64); on the pipelined wgmma loop K and V by tensor-map copies at every length of at
  least one key block, and 128 x 128 tiles (two warpgroups) where they still fill the SMs twice.
- reduction: 16-byte vectors (narrower where a row has fewer than 32 of them: every lane of
  the row's warp gets one); one warp per row for rows up to 1024 elements (several rows per
  block), a block per row for longer rows; enough blocks to fill the SMs.
- elementwise: 16-byte vectors, 256 threads, more items per thread only for large tensors.

The preferences of each kind live in a module of their own: `rules_contraction`,
`rules_attention` and `rules_rows` (reductions and elementwise kernels), with what they share in
`rules_common`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from emmy.targets import Target
from emmy.tuning import rules_attention, rules_contraction, rules_rows
from emmy.tuning.knobs import KnobValue
from emmy.tuning.legality import check
from emmy.tuning.rules_common import Choice, PrefFn

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo

# Upper bound on search nodes per kernel (the search normally visits one node per knob).
MAX_NODES = 20000


def decide(
    info: KernelInfo,
    target: Target,
    space: Mapping[str, Sequence[KnobValue]],
    fixed: Mapping[str, KnobValue] | None = None,
) -> dict[str, Choice] | None:
    """A legal completion of `fixed` over `space`, with a reason per chosen knob (None: none)."""
    fixed = dict(fixed or {})
    if check(info, fixed, target):
        return None
    order = [k for k in _ORDER[info.kind] if k in space] + [
        k for k in space if k not in _ORDER[info.kind]
    ]
    prefs_of = _PREFS[info.kind]
    memo: dict = {}
    chosen: dict[str, KnobValue] = dict(fixed)
    reasons: dict[str, str] = {}
    nodes = 0

    def search(i: int) -> bool:
        nonlocal nodes
        if i == len(order):
            return True
        knob = order[i]
        if knob in fixed:
            return search(i + 1)
        domain = tuple(space[knob])
        candidates = [
            (v, r) for v, r in prefs_of(knob, info, target, chosen, memo) if v in domain
        ]
        seen = {v for v, _ in candidates}
        candidates += [(v, "the first legal value left") for v in domain if v not in seen]
        for value, reason in candidates:
            nodes += 1
            if nodes > MAX_NODES:
                return False
            chosen[knob] = value
            if not check(info, chosen, target) and search(i + 1):
                reasons[knob] = reason
                return True
            del chosen[knob]
        return False

    if not search(0):
        return None
    final = _FINAL.get(info.kind)
    if final is not None:
        final(info, target, chosen, reasons)
    return {k: Choice(chosen[k], reasons[k]) for k in order if k not in fixed}



_ORDER: dict[str, tuple[str, ...]] = {
    "contraction": rules_contraction.ORDER,
    "attention": rules_attention.ORDER,
    "reduction": rules_rows.REDUCTION_ORDER,
    "elementwise": rules_rows.ELEMENTWISE_ORDER,
}
_FINAL: dict[str, Callable[..., None]] = {"contraction": rules_contraction.FINAL}
_PREFS: dict[str, PrefFn] = {
    "contraction": rules_contraction.PREFS,
    "attention": rules_attention.PREFS,
    "reduction": rules_rows.REDUCTION_PREFS,
    "elementwise": rules_rows.ELEMENTWISE_PREFS,
}

__all__ = ["MAX_NODES", "Choice", "decide"]
