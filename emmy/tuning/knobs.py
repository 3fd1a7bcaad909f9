"""The knob space: which schedule knobs each kind of kernel has, and their domains.

A knob is one schedule choice of a `tile.kernel` (docs/03-forks-and-knobs.md). Its domain depends on the
kernel's kind and is filtered by the target (no `wgmma` before sm_90a); it does not depend on the
shapes, so kernels of one kind on one target share a space (shape-specific limits are legality's
job, `emmy/tuning/legality.py`).

| kind | knobs (in this order) |
|---|---|
| contraction | block_m, block_n, block_k, split_k, combine, split_tail, stages, workers, warps, schedule, copy, cluster, group_m, epilogue, slices, vector, siblings (only with sibling contractions stored apart), fusion (only with a prologue reduction) |
| attention | block_q, block_kv, workers (mma_sync; wgmma, wgmma_ws on sm_90a), stages, warps, copy, schedule (persistent on sm_90a), fusion (Q and K inside the flash kernel, by a prologue kernel, or in the projection's epilogue) |
| reduction | rows_per_block, threads, vector |
| elementwise | threads, vector, items |

Meanings (what the kernel stage does with each value):
- `block_m`, `block_n`: output tile along the m-side (rows) and n-side (columns) axes (block_n
  also 96 and 192: 3072 columns in 32 or 16 tiles, one wave with 4 row blocks on 132 SMs; and
  112: the 14336 columns of Mistral-7B's and Llama-3-8B's MLP in 128 tiles; 160: 4096 or 2048
  columns in 26 or 13 tiles, which with 10 or 20 row blocks fill 2 or 4 waves of 132 SMs to 98%
  without splitting k; block_m also 192: three 64-row warpgroup slices, with warps = 12).
- `block_k`: the reduction step along k; `split_k`: the k range is cut into that many parts computed
  by different blocks, whose float32 partial sums are added afterwards.
- `combine`: who adds split_k's partial sums and runs the epilogue: a kernel of its own launched
  after the parts (`kernel`), or, per output tile, the last of its blocks to finish its k loop
  (`last_block`): the others write their parts to the workspace and count themselves on the
  tile's counter, the last one adds them to its own, in part order, and stores the tile.
  Meaningless (and `kernel`) with split_k = 1.
- `split_tail`: the tiles of the last, partial wave (the tiles past the last multiple of the
  SM count) split along k into that many parts: the whole waves run as one launch with a tile
  per block, the tail as a second launch (`<name>_tail`) whose last block per tile adds the
  parts. 1: no split. Needs split_k = 1, schedule = grid, no clusters or groups.
- `stages`: shared-memory staging depth of the k loop (1 = operands go straight to registers,
  2 = double buffering, ... up to 16, as deep as shared memory holds). A block keeps stages - 1
  copies in flight while it multiplies one slot, so a small tile needs more of them to cover a
  copy's latency (Little's law: 64 x 64 tiles stage 16 KB a step; cuBLAS runs such tiles 13-15
  deep).
- `workers`: who computes a tile: plain threads (`thread`), warps with `mma.sync` (`mma_sync`), or
  warpgroups with `wgmma` (`wgmma`, sm_90a only), or warpgroups with `wgmma` fed by one more
  warpgroup that only stages operands, handing pipeline slots over with mbarriers instead of
  block-wide barriers (`wgmma_ws`, warp-specialized, sm_90a only). In attention, `wgmma_ws`
  is FlashAttention-3's schedule (emmy/backend/runtime/attention_ws.cuh): a producer
  warpgroup (its registers lowered by setmaxnreg) issues the tensor-map copies of K and V into
  a `stages`-deep ring guarded by full/empty mbarriers; each consumer warpgroup (1 or 2, 64
  query rows each, registers raised) copies its Q rows once, then per key block issues
  S_j = Q K_j^T and P_{j-1} V_{j-1} together and computes the softmax of S_j while P V runs
  (intra-warpgroup overlap); two consumers also take turns issuing their wgmmas (named
  barriers), so one's softmax runs while the other's products do (ping-pong). The overlap
  follows from the warps (AttentionPlan.overlap), it is no knob of its own. Needs copy = tma
  and plain Q, K and V rows (fusion = split or epilogue where the body computes them).
- `warps`: warps per block that compute (threads = 32 * warps, plus 128 with `wgmma_ws`,
  contraction and attention alike). With `wgmma_ws` and 12 warps (three consumer warpgroups,
  512 threads) the producer warpgroup hands registers to the consumers with setmaxnreg
  (`emmy.schedule.contraction.ws_register_budgets`).
- `schedule`: how blocks meet tiles: one block per output tile (`grid`), or one block per
  multiprocessor looping over the tiles (`persistent`, `wgmma_ws` only, sm_90a): its producer
  warpgroup stages the next tile's first k-steps while the consumers run the epilogue of the
  last one, so the pipeline never drains between tiles; or one block per multiprocessor,
  stream-K (`stream_k`, `wgmma_ws` only, sm_90a): the tiles of every whole wave but the last
  go one to a block, and the k-steps of the others, one tile after the other, are cut into as
  many equal runs as there are blocks, so no multiprocessor idles in a last, partial wave. A
  tile whose steps fall to two or more blocks is stored by the last of them to finish, after
  adding the others' float32 parts from a workspace in block order (as `combine =
  last_block`). Attention (`wgmma_ws` only): one block per query block and head (`grid`), or
  one block per multiprocessor taking query blocks in the same longest-first order from a
  counter in global memory as it frees up (`persistent`): its producer warpgroup copies the
  next query block's first key blocks and its consumers that query block's Q rows (into a
  second Q tile) while they still finish the last one's, and each block sets up its barriers
  once.
- `copy`: how the producer warpgroup of `wgmma_ws` fills the pipeline slots: every thread
  issuing 16-byte `cp.async` copies (`cp_async`), or one thread issuing one tensor-memory-
  accelerator copy per operand tile and slab (`tma`, sm_90+), the hardware writing the swizzled
  layout and counting the bytes on the slot's barrier. An A side stored in planes (attention's
  output head by head, read as tokens x (heads * head dim) by the o projection) gets a
  three-dimensional map (emmy/lowering/tma.py). Operands the tensor maps cannot describe (a
  computed A side, concatenated weights) stay on cp.async.
- `cluster`: blocks per thread block cluster (1: no clusters; 2: pairs of blocks sharing the
  operand tile that each wgmma warpgroup multiplies whole, each copying half of it and
  multicasting it to both, which halves that tile's traffic out of L2; `copy = tma`, sm_90+).
  With `slices = rows` the pair has the same columns (neighbours along m) and shares B; with
  `slices = cols` the same rows (neighbours along n) and shares A, as cuBLAS's `2x1` pairs of
  128 x 192 tiles do for Qwen3's narrow o and down products. With `schedule = persistent`
  each pair of blocks loops over pairs of tiles.
- `group_m`: the order in which tiles are handed to blocks (launch order with `grid`, the loop
  order with `persistent`): along n first, one row of tiles after the other (`1`), or in groups
  of that many row tiles, going down a group's rows before moving to its next column (Triton's
  GROUP_M). The tiles running at once then share a few columns of B instead of reading all of
  it, which matters once B is too large for L2. A multiple of `cluster` where the pairs stack
  row tiles (`slices = rows`); pairs along n take whole pairs in any group.
- `epilogue`: how the two consumer warpgroups of a persistent `wgmma_ws` block share the
  tiles: both multiply each tile and store it together, each storing any of its rows between
  barriers of both (`together`); both multiply each tile, then each stores its own rows,
  warpgroup 1 only once warpgroup 0 has finished, so that from then on one warpgroup's
  epilogue runs while the other's wgmmas still do (`staggered`, sm_90a); or each warpgroup
  multiplies and stores whole tiles of its own, the block's tiles taken in turn, so that one
  warpgroup's epilogue runs while the other multiplies the next tile (`pingpong`, sm_90a: the
  warpgroup holds all block_m x block_n accumulators, with 232 registers a thread that the
  producer hands over; each has its own staged tile in shared memory; the warpgroups also take
  turns at the k loop, so they wait on the slots in the order the producer fills them).
- `slices`: which side of the tile the `wgmma` warpgroups cut into their 64-row slices (a
  wgmma's M is 64, its N up to 256). `rows`: block_m, each warpgroup multiplying 64 * mi rows
  of A by all block_n columns of B (wgmma N = block_n). `cols`: block_n, each warpgroup
  multiplying 64 * mi columns of B (as the wgmma's A operand) by all block_m rows of A (as its
  B operand, N = block_m), so its accumulators hold the tile transposed. That is cuBLAS's
  orientation for a narrow output: a 192 x 128 tile in two warpgroups, each 64 columns by 192
  rows, reads 2 x (64 + 192) operand rows from shared memory per k16 step, where three 64-row
  slices read 3 x (64 + 128). Needs wgmma workers, block_n a multiple of 64 per warpgroup,
  block_m at most 256, the epilogue `together`, no row statistics summed in the kernel
  (fusion = split) and no A side rewritten in place: a warpgroup holds every row of the tile.
- `vector`: elements per global access (8 bf16 = 16 bytes).
- `siblings`: where outputs over the same axes come from different contractions of one input
  (k and v of the running example): each tile holds a column share of every one of them
  (`paired`: k's and v's columns side by side in one accumulator), or each contraction gets
  tiles of its own (`apart`: one launch each with `schedule = persistent`, side by side in one
  launch with `grid`).
- `fusion`: `fused` keeps the prologue reduction (e.g. RMSNorm's sum of squares) in the kernel,
  `split` computes it in a kernel of its own first. Attention: its computed Q and K (per-head
  norm, rotary embedding) inside the flash kernel (`fused`), by a prologue kernel (`split`), or
  in the staged epilogue of the contraction that produces their rows (`epilogue`, where that
  contraction's tiles hold whole heads: `emmy.schedule.qk_epilogue`).
- `block_q`, `block_kv`: attention tile along the query axis and the key step.
- `split_kv`: attention's key blocks of one query block cut into up to this many parts of
  consecutive blocks, each run by a block of its own that writes its part's unnormalized output
  rows, running max and sum (float32) to a workspace; the part that finishes last merges the
  others into its own and stores the output (flash-decoding's split of the keys, for launches
  whose query blocks leave SMs idle or put one long causal block on the critical path).
- `rows_per_block`: rows of a reduction one block handles; `threads`: threads per block.
- `items`: elements (in vectors) each thread of an elementwise kernel handles.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from emmy.diagnostics import EmmyError
from emmy.targets import Target

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo

KnobValue = int | str

KINDS: tuple[str, ...] = ("elementwise", "reduction", "contraction", "attention")

WORKERS: tuple[str, ...] = ("thread", "mma_sync", "wgmma", "wgmma_ws")
# The workers values that multiply with wgmma warpgroups (64-row slices, staged operands).
WGMMA_WORKERS: tuple[str, ...] = ("wgmma", "wgmma_ws")
FUSION: tuple[str, ...] = ("fused", "split")
# attention: its computed Q and K in the flash kernel, by a prologue kernel, or in the epilogue of
# the contraction producing their rows (emmy.schedule.qk_epilogue)
ATTENTION_FUSION: tuple[str, ...] = ("fused", "split", "epilogue")
SCHEDULES: tuple[str, ...] = ("grid", "persistent", "stream_k")
COPIES: tuple[str, ...] = ("cp_async", "tma")
EPILOGUES: tuple[str, ...] = ("together", "staggered", "pingpong")
COMBINES: tuple[str, ...] = ("kernel", "last_block")
SIBLINGS: tuple[str, ...] = ("paired", "apart")
# slices: the warpgroups' 64-row wgmma slices along block_m (A's rows) or block_n (B's rows)
SLICES: tuple[str, ...] = ("rows", "cols")
GROUP_M: tuple[int, ...] = (1, 2, 4, 8, 16, 32)

# The full spaces, before the target filters them.
_SPACES: dict[str, dict[str, tuple[KnobValue, ...]]] = {
    "contraction": {
        "block_m": (16, 32, 64, 128, 192, 256),
        "block_n": (16, 32, 64, 96, 112, 128, 160, 192, 256),
        "block_k": (16, 32, 64, 128),
        "split_k": (1, 2, 3, 4, 8, 16),
        "combine": COMBINES,
        "split_tail": (1, 2, 3, 4, 8),
        "stages": (1, 2, 3, 4, 5, 6, 8, 12, 16),
        "workers": WORKERS,
        "warps": (1, 2, 4, 8, 12, 16),
        "schedule": SCHEDULES,
        "copy": COPIES,
        "cluster": (1, 2),
        "group_m": GROUP_M,
        "epilogue": EPILOGUES,
        "slices": SLICES,
        "vector": (1, 2, 4, 8),
        "siblings": SIBLINGS,
        "fusion": FUSION,
    },
    "attention": {
        # 192: three warpgroups of 64 rows (workers = wgmma_ws with warps = 12)
        "block_q": (16, 32, 64, 128, 192),
        "block_kv": (16, 32, 64, 128),
        # The flash kernel (emmy/backend/runtime/attention.cuh) on mma.sync (attention_mma.cuh),
        # or with S = Q K^T on wgmma (sm_90a; one warpgroup of 64 query rows,
        # attention_wgmma.cuh), or warp-specialized (wgmma_ws: a producer warpgroup,
        # attention_ws.cuh); the domain lists what the lowering
        # implements, nothing it would reject.
        "workers": ("mma_sync", "wgmma", "wgmma_ws"),
        "stages": (1, 2, 3),
        # 12: wgmma_ws's three consumer warpgroups (FlashAttention-3's tile for head dim 64)
        "warps": (1, 2, 4, 8, 12),
        # K and V rows by cp.async from every thread, or by tensor-map copies from one
        # (wgmma with 3+ stages or wgmma_ws, where it is the only way; key blocks of at most
        # the keys)
        "copy": COPIES,
        # one block per query block, or a block per SM looping over them (wgmma_ws)
        "schedule": ("grid", "persistent"),
        # parts of a query block's key blocks, each a block of its own (workers = wgmma_ws,
        # schedule = grid), merged by the last to finish
        "split_kv": (1, 2, 3, 4),
        "fusion": ATTENTION_FUSION,
    },
    "reduction": {
        "rows_per_block": (1, 2, 4, 8, 16),
        "threads": (32, 64, 128, 256, 512, 1024),
        "vector": (1, 2, 4, 8),
    },
    "elementwise": {
        "threads": (64, 128, 256, 512, 1024),
        "vector": (1, 2, 4, 8),
        "items": (1, 2, 4, 8),
    },
}

# Knobs that switch a feature on, and the value that leaves it off. A kernel whose knob set lacks
# one of them (hand-written IR; `fusion` without a prologue, `siblings` without siblings) runs
# with the feature off: its plan (emmy/schedule/) reads this value, nothing else defaults.
# (Without `group_m` the tiles go in the plain order of their clusters: group_m = cluster, or 1
# with pairs along n.)
FEATURE_OFF: dict[str, KnobValue] = {
    "split_k": 1,
    "split_kv": 1,
    "combine": "kernel",
    "split_tail": 1,
    "schedule": "grid",
    "copy": "cp_async",
    "cluster": 1,
    "epilogue": "together",
    "slices": "rows",
    "siblings": "paired",
    "fusion": "fused",
}


def in_space(values: Mapping[str, KnobValue], domains: Mapping[str, Sequence[KnobValue]]) -> dict[str, KnobValue] | None:
    """Knob values chosen in another space (a kernel's before a knob was added or taken out)
    read in `domains`: the knobs `domains` lacks left out, those `values` lacks at their off
    value (`FEATURE_OFF`); None where a knob has no value there (no off value, or one outside
    its domain). Whether the result is legal is the legal space's question."""
    point: dict[str, KnobValue] = {}
    for name, domain in domains.items():
        v = values[name] if name in values else FEATURE_OFF.get(name)
        if v is None or v not in domain:
            return None
        point[name] = v
    return point


# Structural forks: knobs whose values are different programs (a kernel that computes its row
# statistics against one that reads them from a launch of its own), not tunings of one program.
# A tuning study gives each of their legal values a fair share of its trials and re-measures
# each value's best beside the others (emmy.search.study), so the named best is the faster
# program, each at its own best schedule.
STRUCTURAL: tuple[str, ...] = ("fusion",)

# Knob values whose cost lies partly in another kernel (attention's fusion = epilogue: the
# contraction producing Q's and K's rows computes them in its epilogue). The prior, whose model
# sees one kernel, never proposes them; a tuning study of one isolated kernel cannot run them
# (legality refuses them there). They are reached by pinning.
IN_CONTEXT: frozenset[tuple[str, KnobValue]] = frozenset({("fusion", "epilogue")})

# Which target feature a knob value needs (tensor-map copies and block pairs exist only for
# wgmma_ws contractions, so they need wgmma too).
_NEEDS_FEATURE: dict[tuple[str, KnobValue], str] = {
    ("workers", "mma_sync"): "mma_sync",
    ("workers", "wgmma"): "wgmma",
    ("workers", "wgmma_ws"): "wgmma",
    ("schedule", "persistent"): "wgmma",
    ("split_kv", 2): "wgmma",  # (parts of the warp-specialized kernel only)
    ("split_kv", 3): "wgmma",
    ("split_kv", 4): "wgmma",
    ("schedule", "stream_k"): "wgmma",
    ("copy", "tma"): "wgmma",
    ("cluster", 2): "wgmma",
    ("epilogue", "staggered"): "wgmma",
    ("epilogue", "pingpong"): "wgmma",
    ("slices", "cols"): "wgmma",
}


class Ints:
    """Plain integer arithmetic under the names `grouped_tile` uses; the kernel stage passes
    its `KB` builder instead, which emits the same operations."""

    div = staticmethod(operator.floordiv)
    rem = staticmethod(operator.mod)
    mul = staticmethod(operator.mul)
    add = staticmethod(operator.add)
    sub = staticmethod(operator.sub)
    min = staticmethod(min)


def cluster_rows(cluster: int, slices: str) -> int:
    """Row tiles one cluster of `cluster` blocks stacks (see `cluster`): all of them for pairs
    along m (`slices = rows`, sharing B), one for pairs along n (`slices = cols`, sharing A). A
    `group_m` order takes whole clusters in a multiple of it."""
    return 1 if slices == "cols" else cluster


def grouped_tile(ops, t, mb: int, nb: int, group: int):
    """(row tile, column tile) of the t-th tile of an mb x nb grid taken in groups of `group`
    row tiles: down the group's rows first, then its next column, then the next group (the
    last group may be shorter). group = 1 is the plain order along n. `ops` does the
    arithmetic: `Ints` for numbers, a kernel builder for the kernel stage's index code."""
    group = min(group, mb)
    per = group * nb
    gid = ops.div(t, per)
    first = ops.mul(gid, group)
    size = group if mb % group == 0 else ops.min(ops.sub(mb, first), group)
    local = ops.rem(t, per)
    return ops.add(first, ops.rem(local, size)), ops.div(local, size)


def counter_order(costs: Sequence[int], blocks: int) -> list[list[int]]:
    """Attention's `schedule = persistent`: per block of the launch, the tiles (query blocks, in
    the grid's order) it takes from the tile counter, when each block takes the next tile as
    soon as it has finished its last and tile t takes costs[t] (ties: the lower block first).
    The kernel's blocks meet the counter in whatever order the hardware runs them; this is one
    such run."""
    free = [(0, b) for b in range(blocks)]
    heapq.heapify(free)
    out: list[list[int]] = [[] for _ in range(blocks)]
    for t, cost in enumerate(costs):
        at, b = heapq.heappop(free)
        out[b].append(t)
        heapq.heappush(free, (at + cost, b))
    return out


def stream_k_whole(tiles: int, sms: int) -> int:
    """`schedule = stream_k`: how many tiles, from the first, go one to a block in whole waves
    (every whole wave but the last); the rest are shared out as runs of k-steps."""
    return max(0, tiles // sms - 1) * sms


def stream_k_blocks(tiles: int, steps: int, sms: int) -> int:
    """`schedule = stream_k`: the blocks of the launch (one per SM, or one per k-step of a
    product with fewer)."""
    return min(sms, tiles * steps)


def stream_k_runs(tiles: int, steps: int, sms: int) -> list[list[tuple[int, int]]]:
    """`schedule = stream_k`: per tile, the [lo, hi) k-steps each block computes, in block
    order. The tiles of whole waves but the last (stream_k_whole) take a block each, in turns
    as with persistent blocks; the k-steps of the rest, tile after tile, are one run of I
    iterations that block b of B = stream_k_blocks takes [b * I // B, (b + 1) * I // B) of."""
    whole = stream_k_whole(tiles, sms)
    total = (tiles - whole) * steps
    blocks = stream_k_blocks(tiles, steps, sms)
    bounds = [b * total // blocks for b in range(blocks + 1)]
    runs: list[list[tuple[int, int]]] = [[(0, steps)] for _ in range(whole)] + [[] for _ in range(tiles - whole)]
    for lo, hi in zip(bounds, bounds[1:]):
        while lo < hi:
            t = lo // steps
            cut = min(hi, (t + 1) * steps)
            runs[whole + t].append((lo - t * steps, cut - t * steps))
            lo = cut
    return runs


def tile_at(t: int, mb: int, nb: int, group_m: int = 1, cluster: int = 1) -> tuple[int, int]:
    """(row tile, column tile) handed out t-th in an mb x nb grid of tiles (the `group_m`
    order, computed by the same `grouped_tile` the kernel stage emits). Clusters of `cluster`
    consecutive row tiles go together: the order runs over clusters, a cluster's blocks take
    its rows."""
    unit, rank = divmod(t, cluster)
    mu, n = grouped_tile(Ints, unit, mb // cluster, nb, max(1, group_m // cluster))
    return mu * cluster + rank, n


def knob_names(kind: str, *, fusion: bool = False, siblings: bool = False) -> tuple[str, ...]:
    """The knob names of a kind, in their canonical order (`fusion` and `siblings` only if asked
    for)."""
    _check_kind(kind)
    return tuple(n for n in _SPACES[kind] if (n != "fusion" or fusion) and (n != "siblings" or siblings))


def all_knob_names() -> set[str]:
    return {n for space in _SPACES.values() for n in space}


def knob_space(
    kind: str, target: Target, *, fusion: bool = False, siblings: bool = False
) -> dict[str, tuple[KnobValue, ...]]:
    """Knob name -> domain for a kernel of `kind` on `target`, in canonical order.

    `fusion=True` adds the `fusion` knob (contractions with a prologue reduction only),
    `siblings=True` the `siblings` knob (contractions with sibling outputs only).
    """
    space: dict[str, tuple[KnobValue, ...]] = {}
    for name in knob_names(kind, fusion=fusion, siblings=siblings):
        domain = tuple(
            v
            for v in _SPACES[kind][name]
            if (name, v) not in _NEEDS_FEATURE or target.has(_NEEDS_FEATURE[(name, v)])
        )
        space[name] = domain
    return space


def knob_space_for(info: KernelInfo, target: Target) -> dict[str, tuple[KnobValue, ...]]:
    """The knob space of a classified kernel. `fusion` is added for contractions with a prologue
    reduction, and for attention (whether Q and K are computed inside the flash kernel, or once
    by a prologue kernel into temporaries); `siblings` for contractions whose outputs over the
    same axes come from different contractions."""
    fusion = info.kind == "attention" or (info.kind == "contraction" and info.has_fusion_fork)
    siblings = info.kind == "contraction" and info.has_siblings_fork
    return knob_space(info.kind, target, fusion=fusion, siblings=siblings)


def _check_kind(kind: str) -> None:
    if kind not in _SPACES:
        raise EmmyError(f"unknown kernel kind '{kind}'; valid kinds: {', '.join(KINDS)}")
