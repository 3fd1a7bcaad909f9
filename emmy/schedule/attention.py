"""The plan of an attention kernel: what its decided knobs mean.

    plan(info, values, target) -> AttentionPlan   # tiles, warps, pipeline, launches, shared memory

The body's roles come from emmy.schedule.attention_body (`analyze`); emmy.lowering.attention
turns plan and body into the flash kernel. The plan is block_q query rows per block (16 per
warp), block_kv keys per step, `stages` K/V buffers, mma.sync or wgmma for S = Q K^T (one
warpgroup per 64 query rows), cp.async or tensor-map copies of K and V, and with fusion = split
a prologue kernel `<name>_prep` that materializes the computed rows first. With fusion =
epilogue (emmy.schedule.qk_epilogue) the projection producing Q's and K's rows writes them
normalized and rotated: no prologue kernel, Q and K plain rows of that output. The order of the
query blocks is the plan's too: longest first, head fastest, and where the key and value rows of
all heads exceed L2, the heads in L2 sections that fit (l2_section, AttentionPlan.tile_at;
attention_body.kv_group finds the query heads that share key-value heads).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from emmy.analysis.classify import AttentionInfo, KernelInfo
from emmy.diagnostics import EmmyError
from emmy.schedule.attention_body import DIRECT, AttentionBody, analyze, kv_group
from emmy.schedule.attention_body import attention_error as _err
from emmy.schedule.contraction import Decided, LaunchPlan
from emmy.targets import Target
from emmy.tuning.knobs import ATTENTION_FUSION, Ints, KnobValue, grouped_tile

SMEM_ALIGN_WGMMA = 1024  # wgmma's swizzled tiles are read through absolute address bits
PREP_WARPS = 8  # warps of the split variant's prologue kernel
PREP_ROWS = 4  # rows each of its warps produces
MAX_GRID_Y = 65535


def stored_head_dim(head_dim: int, wgmma: bool) -> int:
    """Columns of a Q, K or V row in shared memory (Config::LD in attention.cuh): with wgmma whole
    64-column slabs (a head dim of 80 or 96 padded to 128; neither product reads the padding:
    Q K^T steps over the real columns, P V is a wgmma of n = the head dim); otherwise rows of a
    multiple of 64 columns as they are (swizzled) and any other width padded by 8 so ldmatrix
    meets distinct banks."""
    if wgmma:
        return -(-head_dim // 64) * 64
    return head_dim if head_dim % 64 == 0 else head_dim + 8


def tile_bytes(head_dim: int, block_q: int, block_kv: int, stages: int, wgmma: bool = False, q_tiles: int = 1) -> int:
    """The Q, K and V tiles of emmy::attention::run (Config::kSmemBytes in attention.cuh).
    `q_tiles`: 2 with schedule = persistent, whose next query block's Q rows are copied into a
    second Q tile while the last one's finish."""
    ld = stored_head_dim(head_dim, wgmma)
    return (q_tiles * block_q * ld + 2 * stages * block_kv * ld) * 2


def smem_bytes(head_dim: int, block_q: int, block_kv: int, stages: int, wgmma: bool = False, q_tiles: int = 1) -> int:
    """Dynamic shared memory of the attention kernel: its tiles (tile_bytes), plus what aligning
    the base to 1024 bytes may take for wgmma (the tensor-map copies' mbarriers,
    AttentionPlan.barriers of 8 bytes, live in that slack: tma_barriers in attention_wgmma.cuh)."""
    return tile_bytes(head_dim, block_q, block_kv, stages, wgmma, q_tiles) + (SMEM_ALIGN_WGMMA if wgmma else 0)


def kv_head_bytes(seq_kv: int, head_dim: int, wgmma: bool, tma: bool) -> int:
    """The key and value rows of one key-value head in bytes, as they are copied (whole 64-column
    slabs with tensor-map copies: stored_head_dim)."""
    copied = stored_head_dim(head_dim, wgmma) if tma else head_dim
    return 2 * seq_kv * copied * 2


def l2_section(kv_head_bytes: int, group: int, rows: int, l2_bytes: int) -> int:
    """How many batch x head rows the blocks take together (an L2 section: AttentionPlan.tile_at):
    as many key-value heads as fit in L2 together (`kv_head_bytes` each, K's and V's rows), a
    power of two of them and at least one, each with its `group` query heads (grouped-query
    attention); every row, the plain order, where all of them fit. Blocks of one section read
    the same key and value rows from L2 rather than from memory again; FlashAttention-3's
    scheduler sizes its sections so."""
    fit = max(1, l2_bytes // max(1, kv_head_bytes))
    return min(rows, group * (1 << (fit.bit_length() - 1)))


# workers = wgmma_ws (emmy/backend/runtime/attention_ws.cuh): one producer warpgroup issuing the
# tensor-map copies of K and V, 1, 2 or 3 consumer warpgroups of 64 query rows each.
WS_PRODUCER_THREADS = 128
WS_MAX_CONSUMERS = 3  # two or three consumers take turns issuing (ping-pong), one after another
# setmaxnreg with two or three consumers (384 or 512 threads; ptxas starts every thread at <= 168
# or 128 registers): the producer gives its registers back, the consumers take them
# (128 * 24 + 256 * 240 <= 65536; 128 * 24 + 384 * 160 <= 65536). With one consumer (256
# threads) every thread may already have 255: no setmaxnreg. By consumer warpgroups. The lowering
# passes them to the runtime (REGS_P and REGS_C of emmy::attention::run and ws_role).
WS_PRODUCER_REGS = 24
WS_CONSUMER_REGS = {2: 240, 3: 160}


@dataclass(frozen=True)
class AttentionPlan:
    name: str
    block_q: int
    block_kv: int
    warps: int
    stages: int
    workers: str  # the knob's value
    fusion: str  # "fused"; "split": computed Q/K/V rows materialized by `<name>_prep` first;
    # "epilogue": computed Q and K written, normalized and rotated, by the projection's epilogue
    # in place of their raw rows (emmy.schedule.qk_epilogue), read here as direct rows
    head_dim: int
    seq_q: int
    seq_kv: int
    batch: int  # batch x head rows (the main kernel's grid x)
    prep: tuple[int, int, int] | None  # the grid of `<name>_prep` (fusion = split with computed rows)
    target: Target = field(repr=False)
    wgmma: bool = False  # S = Q K^T with wgmma (emmy::attention::run's WGMMA)
    tma: bool = False  # copy = tma: direct K and V rows by tensor-map copies (kTma); a ragged
    # last key block is copied from seq_kv - block_kv, its repeated keys masked (key_start in
    # attention.cuh), so that no copy crosses the end of the keys
    persistent: bool = False  # schedule = persistent (wgmma_ws): a block per SM loops over the
    # query blocks (ws_tiles in attention.cuh), taking the next one in the grid's longest-first
    # order from a counter as it frees up
    group: int = 1  # query heads per key-value head where the head is the fastest batch axis
    # (consecutive rows share K and V rows); 1 otherwise
    split_kv: int = 1  # parts of a query block's key blocks, a block each (split_kv_illegal)
    causal: bool = False  # key kv masked for query q past q + causal_offset: the key blocks a
    causal_offset: int = 0  # query block visits end at its last row's last key (key_blocks)
    window: int = 0  # a sliding window inside the causal mask (AttentionBody.window; 0 none): the
    # key blocks a query block visits start at its first row's first key (first_key_block)

    @property
    def warp_specialized(self) -> bool:
        """workers = wgmma_ws: a producer warpgroup copies K and V, the `warps` compute."""
        return self.workers == "wgmma_ws"

    @property
    def consumers(self) -> int:
        """Warpgroups that compute (wgmma_ws; 0 otherwise), each 64 query rows."""
        return self.warps // 4 if self.warp_specialized else 0

    @property
    def overlap(self) -> str:
        """How softmax overlaps the wgmmas: `pingpong` (two or three consumers take turns
        issuing, and each overlaps its softmax with its own next QK^T: the wgmma loop's two
        warpgroups with tensor-map copies, and wgmma_ws's two or three consumers), `intra` (a warpgroup's softmax of key
        block j runs while its P_{j-1} V_{j-1} wgmmas do: the pipelined wgmma loop with 3+
        stages, wgmma_ws with one consumer), or `none`."""
        if self.warp_specialized:
            return "pingpong" if self.consumers >= 2 else "intra"
        if self.wgmma and self.stages >= 3:
            return "pingpong" if self.tma and self.warps == 8 else "intra"
        return "none"

    @property
    def threads(self) -> int:
        return 32 * self.warps + (WS_PRODUCER_THREADS if self.warp_specialized else 0)

    @property
    def register_budgets(self) -> tuple[int, int] | None:
        """(producer, consumer) registers per thread set by setmaxnreg (wgmma_ws with two or
        three consumers), else None (ptxas's allocation for the whole block)."""
        if self.warp_specialized and self.consumers in WS_CONSUMER_REGS:
            return WS_PRODUCER_REGS, WS_CONSUMER_REGS[self.consumers]
        return None

    @property
    def smem_layout(self) -> tuple[tuple[str, int, int], ...]:
        """(region, byte offset from the tiles' base, bytes): the Q tile (block_q rows), then the
        stages' K tiles, then their V tiles (block_kv rows each), as Config in attention.cuh;
        rows of stored_head_dim elements. The mbarriers
        (`barriers`, 8 bytes each) take none of it: they live in the wgmma tiles' 1024-byte
        alignment slack, before the tiles or after them."""
        ld = stored_head_dim(self.head_dim, self.wgmma)
        q, kv = 2 * self.block_q * ld, 2 * self.stages * self.block_kv * ld
        regions = (("q", 0, q), ("k", q, kv), ("v", q + kv, kv))
        return regions + ((("q_next", q + 2 * kv, q),) if self.persistent else ())

    @property
    def barriers(self) -> int:
        """mbarriers in shared memory (8 bytes each, in the 1024-byte alignment slack of
        smem_bytes): with tensor-map copies a `full` and an `empty` one per stage, with
        wgmma_ws K's and V's apart (4 per stage); else none."""
        if not self.tma:
            return 0
        # schedule = persistent: 2 `full` and 2 `empty` ones for the tile slots (WsTiles)
        return (4 if self.warp_specialized else 2) * self.stages + (4 if self.persistent else 0)

    @property
    def query_blocks(self) -> int:
        return -(-self.seq_q // self.block_q)

    @property
    def tiles(self) -> int:
        """Query blocks of every batch x head row: what the blocks compute, one each with
        schedule = grid."""
        return self.batch * self.query_blocks

    @property
    def kv_head_bytes(self) -> int:
        """The key and value rows of one key-value head in bytes, as they are copied."""
        return kv_head_bytes(self.seq_kv, self.head_dim, self.wgmma, self.tma)

    @property
    def section(self) -> int:
        """Batch x head rows per L2 section (l2_section on the target's L2): `batch` where the
        key and value rows of all of them fit."""
        return l2_section(self.kv_head_bytes, self.group, self.batch, self.target.l2_bytes)

    def tile_at(self, ops, t):
        """(batch x head row, query block) of the t-th query block the launch takes (the grid's
        blocks in the order of their index, or the persistent blocks' tile counter): the longest
        causal query blocks first, a query block of every row of a section before the next
        query block, section after section (knobs.grouped_tile with the section as the group).
        With one section, row t % batch and query block query_blocks - 1 - t / batch. `ops`:
        knobs.Ints for numbers, the kernel builder for index code."""
        if self.section >= self.batch:
            q_block = self.tile_block(ops, t)
            return self.tile_row(ops, t), q_block
        row, rank = grouped_tile(ops, t, self.batch, self.query_blocks, self.section)
        return row, ops.sub(self.query_blocks - 1, rank)

    def tile_row(self, ops, t):
        """tile_at's batch x head row alone (with one section no query block computed)."""
        return ops.rem(t, self.batch) if self.section >= self.batch else self.tile_at(ops, t)[0]

    def tile_block(self, ops, t):
        """tile_at's query block alone (with one section no row computed)."""
        if self.section >= self.batch:
            return ops.sub(self.query_blocks - 1, ops.div(t, self.batch))
        return self.tile_at(ops, t)[1]

    def key_blocks(self, q_block: int) -> int:
        """Key blocks query block `q_block` visits: all of them, or with a causal mask up to the
        last key its last query may see (key_blocks in attention.cuh)."""
        n = -(-self.seq_kv // self.block_kv)
        if self.causal:
            last = min((q_block + 1) * self.block_q, self.seq_q) - 1 + self.causal_offset
            n = min(n, 0 if last < 0 else last // self.block_kv + 1)
        return n

    def first_key_block(self, q_block: int) -> int:
        """The first key block query block `q_block` visits: with a sliding window, the one
        holding its first row's first key (every block before it is masked for every row; every
        main loop starts there, `WINDOW` in attention.cuh); 0 otherwise (first_key_block in
        attention.cuh)."""
        if not (self.window and self.causal):
            return 0
        return max(0, q_block * self.block_q + self.causal_offset - self.window + 1) // self.block_kv

    def key_parts(self, q_block: int) -> list[tuple[int, int]]:
        """The [first, end) key blocks of each part of query block `q_block` (split_kv): the
        blocks from first_key_block to key_blocks cut into min(split_kv, their number) runs of
        consecutive blocks, part p from p * n // parts (key_parts in attention_ws.cuh); one
        part, maybe empty, without a split."""
        j0 = self.first_key_block(q_block)
        n = max(0, self.key_blocks(q_block) - j0)
        parts = max(1, min(self.split_kv, n))
        return [(j0 + p * n // parts, j0 + (p + 1) * n // parts) for p in range(parts)]

    def part_blocks(self) -> list[tuple[int, int]]:
        """(key blocks, parts of its query block) of every block of the launch that runs a part,
        in the order of the blocks' index (the order the block scheduler starts them): grid y
        query rank by rank, a rank's parts side by side, x the batch x head rows. Blocks of a
        part past a short query block's parts leave at once and are not listed. Without a
        split, every query block as one part."""
        out = []
        for rank in range(self.query_blocks):
            for part in range(self.split_kv):
                for row in range(self.batch):
                    _, q_block = self.tile_at(Ints, row + rank * self.batch)
                    parts = self.key_parts(q_block)
                    if part < len(parts):
                        out.append((parts[part][1] - parts[part][0], len(parts)))
        return out

    def critical_path(self, slots: int) -> float:
        """The launch's time in key blocks of one block, estimated: each block of part_blocks
        costs its key blocks, BLOCK_COST (what it does once) and, as a part of a split query
        block, SPLIT_PART_COST, and starts on the first of `slots` block slots (SMs x blocks an
        SM holds) to free up, in index order; the last to finish. Grid schedule only (what
        split_kv's rule compares)."""
        free = [0.0] * max(1, slots)
        for blocks, parts in self.part_blocks():
            start = heapq.heappop(free)
            heapq.heappush(free, start + blocks + BLOCK_COST + (SPLIT_PART_COST if parts > 1 else 0.0))
        return max(free)

    @property
    def split_floats(self) -> int:
        """float32 values of the workspace split_kv's parts write: per query block and part,
        per consumer thread its output fragments (head_dim / 2) and its two rows' running max and
        sum (4), in the thread's own layout (split_workspace in attention_ws.cuh); 0 without."""
        if self.split_kv <= 1:
            return 0
        return self.tiles * self.split_kv * 32 * self.warps * (self.head_dim // 2 + 4)

    @property
    def grid(self) -> tuple[int, int, int]:
        if self.persistent:  # a block per SM (at most a tile each), x only
            return (min(self.tiles, self.target.sms), 1, 1)
        # split_kv: the parts of a query block side by side along y (its longest first)
        return (self.batch, self.query_blocks * self.split_kv, 1)

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def waves(self) -> int:
        """Rounds of query blocks an SM runs (blocks of the grid one after another, or the
        persistent block's loop)."""
        return -(-self.tiles // self.target.sms)

    @property
    def q_tiles(self) -> int:
        """Q tiles in shared memory: 2 with schedule = persistent (smem_bytes)."""
        return 2 if self.persistent else 1

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.head_dim, self.block_q, self.block_kv, self.stages, self.wgmma, self.q_tiles)

    @property
    def registers(self) -> int:
        """Registers per thread, estimated: the output rows and scores a thread holds (fp32)
        besides addresses, at most what a thread may use."""
        per_thread = (self.block_q * self.head_dim + self.block_q * self.block_kv) // (32 * self.warps)
        budgets = self.register_budgets
        return min(budgets[1] if budgets else self.target.regs_per_thread, per_thread + 40)

    @property
    def launches(self) -> tuple[LaunchPlan, ...]:
        main = LaunchPlan(self.name, self.grid, (self.threads, 1, 1), "main")
        if self.prep is None:
            return (main,)
        return (LaunchPlan(f"{self.name}_prep", self.prep, (32 * PREP_WARPS, 1, 1), "prep"), main)


def plan(info: KernelInfo, values: Mapping[str, KnobValue], target: Target, name: str | None = None) -> AttentionPlan:
    """The plan of the attention kernel `info` (its body analyzed by `analyze`)."""
    name = name or info.name
    v = Decided(values, f"tile.kernel @{info.name}")
    bq, bkv, warps, stages = int(v["block_q"]), int(v["block_kv"]), int(v["warps"]), int(v["stages"])
    workers = str(v["workers"])
    D, att = info.head_dim, info.attention
    if att is None:
        raise _err(name, "the loop is not classified as attention")
    if workers == "thread":
        raise _err(name, "workers=thread is not implemented for attention (use mma_sync)")
    wgmma = False
    if workers in ("wgmma", "wgmma_ws"):
        if not target.has("wgmma"):
            raise _err(name, f"workers={workers} needs sm_90a (target is {target.name})")
        if D > 256 or warps % 4 or bq != 16 * warps or bkv > 256:
            raise _err(
                name, f"workers={workers} needs a head dim up to 256, a warpgroup "
                "per 64 query rows (warps a multiple of 4, block_q = 16 * warps) and "
                f"block_kv <= 256 (have {D}, {bq}, {warps}, {bkv})"
            )
        wgmma = True
    elif workers != "mma_sync":
        raise _err(name, f"unknown workers '{workers}'")
    if not target.has("mma_sync"):
        raise _err(name, f"{target.name} has no mma.sync bf16 tensor cores")
    if D % 16:
        raise _err(name, f"head dimension {D} is not a multiple of 16")
    if bkv % 16 or bkv <= 0:
        raise _err(name, f"block_kv={bkv} is not a multiple of 16")
    if warps <= 0 or bq % (16 * warps):
        raise _err(name, f"block_q={bq} does not give each of warps={warps} whole 16-row tiles")
    if stages < 1:
        raise _err(name, f"stages={stages} must be at least 1")
    q_tiles = 2 if str(v["schedule"]) == "persistent" else 1  # (persistent: the next query block's Q tile)
    smem = smem_bytes(D, bq, bkv, stages, wgmma, q_tiles)
    if smem > target.smem_per_block:
        second = " (schedule=persistent keeps a second Q tile)" if q_tiles == 2 else ""
        raise _err(name, f"{smem} bytes of shared memory{second} exceed the {target.smem_per_block} of {target.name}")
    copy = str(v["copy"])
    if copy not in ("cp_async", "tma"):
        raise _err(name, f"unknown copy '{copy}' (cp_async or tma)")
    tma = copy == "tma"
    if tma and (not wgmma or (workers == "wgmma" and stages < 3) or bkv > info.seq_kv):
        raise _err(
            name, "copy=tma needs workers=wgmma, stages >= 3 and a block_kv of at most the keys "
            f"(have {workers}, {stages}, block_kv={bkv} for {info.seq_kv} keys)"
        )
    fusion = str(v["fusion"])
    if fusion not in ATTENTION_FUSION:
        raise _err(name, f"unknown fusion '{fusion}' ({', '.join(ATTENTION_FUSION)})")
    if workers == "wgmma_ws":
        why = ws_illegal(info, warps, copy, fusion)
        if why:
            raise _err(name, why)
        if stages < 2:
            raise _err(name, f"workers=wgmma_ws copies K and V into a ring of stages >= 2 buffers (stages={stages})")
    schedule = str(v["schedule"])
    if schedule not in ("grid", "persistent"):
        raise _err(name, f"unknown schedule '{schedule}' (grid or persistent)")
    why = persistent_illegal(workers) if schedule == "persistent" else ""
    if why:
        raise _err(name, why)
    batch = info.extent(a for a in info.parallel_axes if a not in (att.query_axis, att.value_dim_axis))
    split = int(v["split_kv"])
    why = split_kv_illegal(info, split, workers, schedule, bq, target)
    if why:
        raise _err(name, why)
    if batch > MAX_GRID_Y:
        raise _err(name, f"{batch} batch x head rows exceed the grid's y limit of {MAX_GRID_Y}")
    if -(-info.seq_q // bq) > MAX_GRID_Y:
        raise _err(name, f"{-(-info.seq_q // bq)} query blocks of {bq} exceed the grid's y limit of {MAX_GRID_Y}")
    body = _analyzed(info)
    prep = None
    computed = [r for _, r in _operand_rows(body)] if fusion == "split" else []
    if computed:  # a prologue kernel for the computed ones of Q, K and V
        prep = (-(-max(computed) // (PREP_WARPS * PREP_ROWS)), batch, len(computed))
    causal, offset, window = (body.causal, body.causal_offset, body.window) if body is not None else (False, 0, 0)
    return AttentionPlan(
        name, bq, bkv, warps, stages, workers, fusion, D, info.seq_q, info.seq_kv, batch, prep, target, wgmma, tma,
        schedule == "persistent", _kv_group(info, att, body), split, causal, offset, window,
    )


def _kv_group(info: KernelInfo, att: AttentionInfo, body: AttentionBody | None) -> int:
    """Query heads per key-value head when consecutive batch x head rows share them (kv_group's
    head axis is the fastest of the rows' axes, row-major as the grid's x), else 1 (and for a
    body the flash kernel cannot run: building it says why)."""
    rows = [a for a in info.parallel_axes if a not in (att.query_axis, att.value_dim_axis)]
    found = kv_group(body, info) if body is not None else None
    if found is None or not rows or found[0] != rows[-1]:
        return 1
    return found[1]


def persistent_illegal(workers: str) -> str:
    """Why schedule = persistent cannot run with these workers (empty when it can; legality.py
    asks the same): it loops the warp-specialized kernel (run_ws in attention.cuh), whose ring of
    K and V buffers and consumers' turns carry on from one query block to the next; the other
    flash loops have no such loop."""
    if workers != "wgmma_ws":
        return f"schedule=persistent loops the warp-specialized kernel over query blocks: it needs workers=wgmma_ws, not {workers}"
    return ""


# critical_path's costs, in key blocks of one block (head dim 128, 128 x 128 tiles, two consumer
# warpgroups, H100 CUDA-graph replay, 16 / 8 heads: 7.3 us for 2 key blocks at 256 tokens, 19.9 us
# for 8 at 1000, about 2.1 us a key block and 3 us besides; docs/bench/h100-layer-attention-
# 2026-12-07.log): what a block does once (its Q rows, the ring's fill, the output), and what a
# part of a split query block adds (writing its slot, counting itself, the merge in the last).
# SPLIT_PART_COST was fitted to the split measured against whole query blocks (1-4 parts, 16 / 8
# heads at 256, 512 and 1000 tokens, 32 / 8 at 512 and 1000; log-squares, a merge cost per other
# part fitted at 0): the 13 times within 0.86-1.21x of the estimate
# (docs/bench/h100-split-kv-2026-12-07.log). Each part costs about 4 us besides its key blocks.
BLOCK_COST = 1.5
SPLIT_PART_COST = 1.75

# split_kv: at most this many waves of parts on the target's SMs. Past them every SM has query
# blocks of its own to run one after another, so parts only add their merge, and the workspace
# (AttentionPlan.split_floats) grows with the launch.
SPLIT_KV_MAX_WAVES = 4


def split_kv_illegal(info: KernelInfo, split_kv: int, workers: str, schedule: str, block_q: int,
                     target: Target) -> str:
    """Why the key blocks cannot be cut into `split_kv` parts (empty when they can; legality.py
    asks the same): the parts are blocks of the warp-specialized kernel's grid (flash_ws in
    attention_ws.cuh), which writes and merges them, at most SPLIT_KV_MAX_WAVES waves of them
    for the launch's query blocks of `block_q` rows."""
    tiles = info.batch * -(-info.seq_q // block_q)
    if split_kv < 1:
        return f"split_kv={split_kv} must be at least 1"
    if split_kv == 1:
        return ""
    if workers != "wgmma_ws" or schedule != "grid":
        return (f"split_kv={split_kv} runs the parts of a query block as blocks of the warp-specialized kernel's "
                f"grid: it needs workers=wgmma_ws and schedule=grid, not {workers} and {schedule}")
    if tiles * split_kv > SPLIT_KV_MAX_WAVES * target.sms:
        return (f"split_kv={split_kv}: {tiles} query blocks in {tiles * split_kv} parts are more than "
                f"{SPLIT_KV_MAX_WAVES} waves of the {target.sms} SMs of {target.name}: every SM has query blocks "
                "of its own already")
    return ""


def ws_illegal(info: KernelInfo, warps: int, copy: str, fusion: str) -> str:
    """Why workers = wgmma_ws cannot run with these knobs (empty when it can; legality.py asks
    the same). Its producer warpgroup only issues tensor-map copies, and the consumers copy their
    Q rows with cp.async: every operand must be plain rows in memory, so computed Q, K or V
    (RMSNorm, rotary embedding) need fusion = split, whose `_prep` kernel materializes them."""
    if warps not in tuple(4 * c for c in range(1, WS_MAX_CONSUMERS + 1)):
        return f"workers=wgmma_ws has 1, 2 or 3 consumer warpgroups: warps must be 4, 8 or 12, not {warps}"
    if copy != "tma":
        return f"workers=wgmma_ws: its producer warpgroup copies K and V with tensor maps (copy=tma, not {copy})"
    if fusion in ("fused", "epilogue"):
        computed = computed_operands(info)
        if fusion == "epilogue":  # the projection's epilogue computes Q and K, not V
            computed = tuple(c for c in computed if c == "v")
        if computed:
            return (f"workers=wgmma_ws needs plain rows of Q, K and V, and {', '.join(computed)} "
                    "computed (normalized, rotated) in the kernel: use fusion=split (a prologue "
                    "kernel materializes them)")
    return ""


def computed_operands(info: KernelInfo) -> tuple[str, ...]:
    """Which of "q", "k", "v" the body computes (not a plain load of rows). A body the flash
    kernel cannot run (analyze's EmmyError) has none here: its plan still serves the tile
    interpreter, and building it raises that error."""
    return tuple(p for p, _ in _operand_rows(_analyzed(info)))


def _analyzed(info: KernelInfo) -> AttentionBody | None:
    """The body's analysis, or None for a body the flash kernel cannot run (analyze's EmmyError)."""
    try:
        return analyze(info.stores[0].parent_op(), info)
    except EmmyError:
        return None


def _operand_rows(body: AttentionBody | None) -> list[tuple[str, int]]:
    """(name, rows) of each of Q, K and V that is computed (not a plain load of rows), in that
    order; none for a body analyze rejects (see computed_operands)."""
    if body is None:
        return []
    return [(p.name, r) for p, r in ((body.q, body.seq_q), (body.k, body.seq_kv), (body.v, body.seq_kv))
            if p.mode != DIRECT]
