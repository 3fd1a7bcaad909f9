"""Reference interpreter for the tile stage: every kernel runs by its decided schedule.

    from emmy.interp.tile_stage import run_function
    (y,) = run_function(module, [x, w])      # the first func.func of the module

Each `tile.kernel` is computed block by block as its plan says (`emmy.schedule.plan.plan_for`:
its decided knobs on the module's target), on numpy arrays, with the loop
body evaluated by `emmy.analysis.body.Evaluator` over restricted axis ranges and with overridden
values. So the schedule is really exercised: a wrong block decomposition, a lost edge tile, a
split that drops a part or an online-softmax rescaling error changes the numbers.

- contraction: blocks of block_m x block_n over the innermost m-side and n-side axes (outer
  m/n axes one index at a time; batch axes whole), edge tiles clipped; prologue reductions
  (RMSNorm's sum of squares) once per block of rows, or in a pass of their own over all rows
  first when `fusion` is `split`; the k-steps (block_k tiles of the innermost k axis, for every
  index of outer k axes: `legality.k_steps`) cut into split_k contiguous parts (split_tail parts
  for the tiles past the last full wave of the target's SMs; with `schedule = stream_k` the
  runs of the blocks, `knobs.stream_k_runs`: whole tiles for the first waves, then the other
  tiles' k-steps in tile order cut into one equal run per block), each part
  accumulating its steps' partial sums in float32; the parts added; then the epilogue and
  stores evaluated on the block with the contraction and prologue results overridden.
- attention: blocks of block_q queries, keys in steps of block_kv with online softmax (running
  max, running sum and output rescaled by exp(old max - new max)), the sum divided out at the
  end (or inside P x V when the loop does so), then the epilogue on the block; with schedule =
  persistent the query blocks one head at a time in an order the launch's blocks may take them
  from the tile counter (`knobs.counter_order`), so an order that loses or repeats one fails the
  write count; with split_kv each query block's key blocks in the plan's parts
  (`AttentionPlan.key_parts`), each part's online softmax on its own, then merged as the kernel's
  last part does (maxes to their maximum, sums and outputs rescaled and added). With fusion =
  epilogue the projection's run rewrites the Q/K heads of its output tile by tile first
  (`emmy.interp.qk_epilogue`), and the attention reads them as rows.
- reduction: blocks of rows_per_block rows; each top-level reduce accumulated in sweeps of
  (threads / rows_per_block) x vector elements along its contiguous axis, in dependency order
  (earlier results overridden so that a sweep never restricts them), then the epilogue.
- elementwise: blocks of threads x vector x items elements along the innermost axes.

Every result element must be written exactly once by the blocks (checked: an AssertionError
names the kernel otherwise). A kernel whose knobs are not all decided is a ValueError (run
decide-forks first). `loop.fused` ops left in the function are evaluated whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import product

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue

from emmy.analysis.body import Evaluator, evaluate
from emmy.analysis.classify import KernelInfo, classify
from emmy.dialects.loop import FusedOp, ReduceOp, StoreOp
from emmy.dialects.tile import KernelOp
from emmy.interp.numeric import element_dtype, round_to
from emmy.interp.qk_epilogue import direct_operands, run_epilogue
from emmy.interp.tensor_stage import find_function, prepare_args
from emmy.schedule.attention import AttentionPlan
from emmy.schedule.contraction import ContractionPlan
from emmy.schedule.elementwise import ElementwisePlan
from emmy.schedule.plan import plan_for, plan_kernel
from emmy.schedule.qk_epilogue import check_pairs, task_of
from emmy.schedule.reduction import ReductionPlan
from emmy.targets import Target, module_target
from emmy.tuning.knobs import Ints, counter_order, stream_k_runs

Ranges = dict[str, tuple[int, int]]


def run_function(
    module: ModuleOp, args: Sequence[np.ndarray], name: str | None = None
) -> list[np.ndarray]:
    """Run a tile-stage function (the first func.func, or `name`) on numpy arguments.

    Arguments are rounded to their declared dtypes; results are float32 arrays for bf16/f16/f32.
    """
    f = find_function(module, name)
    env: dict[SSAValue, np.ndarray] = dict(zip(f.body.block.args, prepare_args(f, args)))
    kernels = [op for op in f.body.block.ops if isinstance(op, KernelOp)]
    check_pairs(kernels)  # fusion = epilogue: an attention's Q/K rows rewritten by a contraction
    rewritten: dict[KernelOp, dict[SSAValue, np.ndarray]] = {}
    for op in f.body.block.ops:
        if isinstance(op, KernelOp):
            outs = run_kernel(op, [env[v] for v in op.inputs], rewritten.get(op))
            if op.kind.data == "contraction" and task_of(op) is not None:
                plan = plan_kernel(op, _target(op)).parts[0].plan  # its `qk`, the pair's legality checked
                assert isinstance(plan, ContractionPlan)
                task = plan.qk
                src = op.results[task.result]
                rows = run_epilogue(task, plan, outs[task.result], [
                    outs[task.result] if v is src else env[v] for v in task.attention.operands
                ])
                outs = [rows if i == task.result else o for i, o in enumerate(outs)]
                rewritten[task.attention] = direct_operands(task, rows)
        elif isinstance(op, FusedOp):
            outs = evaluate(op, [env[v] for v in op.inputs])
        elif isinstance(op, func.ReturnOp):
            return [np.ascontiguousarray(env[v]) for v in op.operands]
        else:
            raise NotImplementedError(f"the tile-stage interpreter does not run {op.name}")
        for r, arr in zip(op.results, outs):
            env[r] = arr
    raise ValueError(f"@{f.sym_name.data} has no func.return")


def run_kernel(
    op: KernelOp, inputs: Sequence[np.ndarray], fixed: Mapping[SSAValue, np.ndarray] | None = None
) -> list[np.ndarray]:
    """One tile.kernel's results, computed by its decided schedule (`fixed`: values of its body
    given, over their full domains: an attention's Q and K from the projection's epilogue)."""
    undecided = [n for n, k in op.knob_dict().items() if not k.is_decided]
    if undecided:
        raise ValueError(
            f"tile.kernel @{op.kernel_name}: knobs {', '.join(undecided)} are undecided "
            "(run decide-forks first)"
        )
    info = classify(op)
    plan = plan_for(info, op.knob_values(), _target(op))
    run = _RUNNERS[info.kind]
    return run(_Kernel(op, info, inputs, fixed), plan)


def _target(op: KernelOp) -> Target:
    """The target the module of `op` is compiled for."""
    module = op
    while module.parent_op() is not None:
        module = module.parent_op()
    return module_target(module)


# --------------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------------


class _Kernel:
    """A kernel being run: its evaluator, its outputs, and a count of writes per element."""

    def __init__(
        self, op: KernelOp, info: KernelInfo, inputs: Sequence[np.ndarray],
        fixed: Mapping[SSAValue, np.ndarray] | None = None,
    ):
        self.op = op
        self.fixed = dict(fixed or {})
        self.info = info
        self.ev = Evaluator(op, inputs)
        self.outs: list[np.ndarray] = []
        self.writes: list[np.ndarray] = []
        self.store_deps: dict[StoreOp, frozenset[str]] = {}
        for r in op.results:
            t = r.type
            assert isinstance(t, TensorType)
            dtype = np.float64 if element_dtype(t) == "f64" else (
                np.float32 if element_dtype(t) in ("bf16", "f16", "f32") else np.int64
            )
            self.outs.append(np.zeros(t.get_shape(), dtype=dtype))
            self.writes.append(np.zeros(t.get_shape(), dtype=np.int32))

    def value(
        self, v: SSAValue, ranges: Ranges, overrides: Mapping[SSAValue, np.ndarray] | None = None
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        return self.ev.value(v, ranges, {**self.fixed, **(overrides or {})} or None)

    def store_block(self, ranges: Ranges, overrides: Mapping[SSAValue, np.ndarray]) -> None:
        """Evaluate every store over the block `ranges` (with `overrides`) and write it.

        A store that does not depend on a blocked axis is written by the first block along
        that axis only (its value is the same in every block)."""
        for st in self.info.stores:
            deps = self._store_axes(st)
            if any(lo != 0 for a, (lo, _) in ranges.items() if a not in deps):
                continue
            self._store(st, ranges, overrides)

    def _store_axes(self, st: StoreOp) -> frozenset[str]:
        d = self.store_deps.get(st)
        if d is None:
            d = frozenset(self.ev.domains.names(
                _or(self.ev.domains.mask(v) for v in st.operands)
            ))
            self.store_deps[st] = d
        return d

    def _store(self, st: StoreOp, ranges: Ranges, overrides) -> None:
        val, vaxes = self.value(st.value, ranges, overrides)
        idx = [self.value(i, ranges, overrides) for i in st.indices]
        axes = [a for a in self.ev.axes if a in set(vaxes).union(*(set(x) for _, x in idx))]
        full = [self.ev.full_ranges(ranges)[a] for a in axes]
        shape = [hi - lo for lo, hi in full]
        if any(n == 0 for n in shape):
            return
        n = st.output_index
        v = np.broadcast_to(_expand(val, vaxes, axes), shape)
        where = tuple(np.broadcast_to(_expand(a, ax, axes), shape) for a, ax in idx)
        out = self.outs[n]
        out[where] = v
        np.add.at(self.writes[n], where, 1)

    def results(self) -> list[np.ndarray]:
        for n, w in enumerate(self.writes):
            if w.size and (w.min() != 1 or w.max() != 1):
                missing = int((w == 0).sum())
                twice = int((w > 1).sum())
                raise AssertionError(
                    f"tile.kernel @{self.op.kernel_name}: result {n} has {missing} elements "
                    f"never written and {twice} written more than once by the schedule"
                )
        out = []
        for r, arr in zip(self.op.results, self.outs):
            dt = element_dtype(r.type)
            out.append(round_to(arr, dt) if dt in ("bf16", "f16") else arr)
        return out


def _or(masks) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


def _expand(arr: np.ndarray, have: Sequence[str], want: Sequence[str]) -> np.ndarray:
    """An array over axes `have` (a subsequence of `want`) reshaped to broadcast over `want`."""
    shape = []
    it = iter(arr.shape)
    hs = set(have)
    for a in want:
        shape.append(next(it) if a in hs else 1)
    return arr.reshape(shape)


def _tiles(extent: int, size: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) tiles of `size` covering [0, extent), the last one clipped."""
    for lo in range(0, extent, size):
        yield lo, min(lo + size, extent)


def _axis_blocks(
    axes: Sequence[str], extents: Mapping[str, int], size: int
) -> Iterator[Ranges]:
    """Blocks over a group of axes: the innermost tiled by `size`, outer ones one index at a
    time (no axes: one empty block)."""
    if not axes:
        yield {}
        return
    *outer, inner = axes
    outer_ranges = [[(i, i + 1) for i in range(extents[a])] for a in outer]
    for combo in product(*outer_ranges):
        for t in _tiles(extents[inner], size):
            r = dict(zip(outer, combo))
            r[inner] = t
            yield r


def _split_steps(steps: int, parts: int) -> list[tuple[int, int]]:
    """Cut `steps` k-steps into `parts` contiguous runs of whole steps (as equal as possible)."""
    bounds = [round(p * steps / parts) for p in range(parts + 1)]
    return [(bounds[p], bounds[p + 1]) for p in range(parts)]


# --------------------------------------------------------------------------------------------
# Contraction
# --------------------------------------------------------------------------------------------


def _run_contraction(k: _Kernel, plan: ContractionPlan) -> list[np.ndarray]:
    info = k.info
    ext = info.axes
    bm, bn, bk, sk = plan.bm, plan.bn, plan.bk, plan.split
    k_outer, k_inner = info.k_axes[:-1], info.k_axes[-1]
    pre = [r for r in info.reductions if r in info.prologue]
    others = [
        r for r in info.other_reductions
        if not _depends_on(r, {c.reduce for c in info.contractions})
    ]
    # The k-steps in order: every outer k index (when the contraction reduces several axes)
    # times the block_k tiles of the innermost k axis; split_k parts are contiguous runs.
    steps = [
        {**{a: (i, i + 1) for a, i in zip(k_outer, outer)}, k_inner: t}
        for outer in product(*[range(ext[a]) for a in k_outer])
        for t in _tiles(ext[k_inner], bk)
    ]
    parts = _split_steps(len(steps), sk)
    # split_tail: the tiles past the last full wave (in the order along n) split along k
    tail = plan.tail
    first_tail = None  # the index of the first tail tile, with split_tail > 1
    stream = None  # schedule = stream_k: each tile's runs (the tiles in the order along n)
    if tail > 1 or plan.stream_k:
        blocks = sum(1 for _ in _axis_blocks(info.m_axes, ext, bm)) * sum(1 for _ in _axis_blocks(info.n_axes, ext, bn))
        sms = plan.target.sms
        if tail > 1:
            first_tail = blocks // sms * sms
        else:
            stream = stream_k_runs(blocks, len(steps), sms)
    tile_index = 0
    split_prologue: dict[SSAValue, np.ndarray] = {}
    if plan.fusion == "split":  # the row statistics in a pass of their own, all rows
        for r in pre:
            split_prologue[r.result] = k.value(r.result, {}, split_prologue)[0]
    for mb in _axis_blocks(info.m_axes, ext, bm):
        # Prologue: row statistics once per block of rows (full k), unless split out.
        row_over: dict[SSAValue, np.ndarray] = dict(split_prologue)
        for r in pre + others:
            if r.result not in row_over:
                row_over[r.result] = k.value(r.result, dict(mb), row_over)[0]
        for nb in _axis_blocks(info.n_axes, ext, bn):
            block = {**mb, **nb}
            over = dict(row_over)
            in_tail = first_tail is not None and tile_index >= first_tail
            tile_parts = _split_steps(len(steps), tail) if in_tail else parts
            if stream is not None:
                tile_parts = stream[tile_index]
            tile_index += 1
            if others:  # reductions over other axes, per output block
                for r in others:
                    over[r.result] = k.value(r.result, block, over)[0]
            for c in info.contractions:
                total = None
                for lo_step, hi_step in tile_parts:
                    part = None  # this split part's float32 partial sums
                    for kr in steps[lo_step:hi_step]:
                        v, _ = k.value(c.result, {**block, **kr}, over)
                        v = v.astype(np.float32)
                        part = v if part is None else part + v
                    if part is not None:
                        total = part if total is None else total + part
                over[c.result] = total if total is not None else k.value(c.result, block, over)[0]
            k.store_block(block, over)
    return k.results()


def _depends_on(r: ReduceOp, reduces: set[ReduceOp]) -> bool:
    results = {x.result for x in reduces}
    return any(v in results for o in r.walk() for v in o.operands)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


def _attention_blocks(info, plan: AttentionPlan) -> Iterator[Ranges]:
    """The query blocks in the order the kernel's blocks take them: with `schedule = grid`, a
    query block of every head at once (each head's the same); with `persistent`, per block of
    the launch the query blocks it takes from the tile counter, one head each
    (knobs.counter_order; the grid's order, AttentionPlan.tile_at: head fastest within an L2
    section and the longest causal query blocks first, query block b costing b + 1, its causal
    length in query blocks), so that a tile the order loses or takes twice shows in the
    results."""
    att = info.attention
    ext = info.axes
    if not plan.persistent:
        for qr in _tiles(ext[att.query_axis], plan.block_q):
            yield {att.query_axis: qr}
        return
    rows = [a for a in info.parallel_axes if a not in (att.query_axis, att.value_dim_axis)]
    order = [plan.tile_at(Ints, t) for t in range(plan.tiles)]
    for tiles in counter_order([q_block + 1 for _, q_block in order], plan.blocks):
        for t in tiles:
            row, q_block = order[t]
            block: Ranges = {}
            for a in reversed(rows):  # row-major over the batch and head axes, the last fastest
                row, i = divmod(row, ext[a])
                block[a] = (i, i + 1)
            lo = q_block * plan.block_q
            block[att.query_axis] = (lo, min(lo + plan.block_q, ext[att.query_axis]))
            yield block


def _run_attention(k: _Kernel, plan: AttentionPlan) -> list[np.ndarray]:
    info = k.info
    att = info.attention
    assert att is not None
    mx, sm, pv = att.max_reduce, att.sum_reduce, att.pv.reduce
    for block in _attention_blocks(info, plan):
        parts = [_online_softmax(k, block, keys) for keys in _key_parts(info, plan, block)]
        m, l, acc, (m_axes, l_axes, acc_axes) = _merge_parts(parts)
        m_final = np.where(np.isneginf(m), np.float32(0), m).astype(np.float32)
        if att.pv_uses_sum:
            with np.errstate(invalid="ignore", divide="ignore"):
                acc = acc / _expand(l, l_axes, acc_axes)
        over = {mx.result: m_final, sm.result: l, pv.result: acc.astype(np.float32)}
        k.store_block(block, over)
    return k.results()


def _key_parts(info, plan: AttentionPlan, block: Ranges) -> list[list[tuple[int, int]]]:
    """The key tiles (block_kv keys each) of every part of the query block `block` starts
    (AttentionPlan.key_parts: split_kv's runs of consecutive key blocks; one part without a
    split); the last part also takes the key blocks past the causal end, which the kernel skips
    and which change nothing here (every score of them masked)."""
    att = info.attention
    tiles = list(_tiles(info.axes[att.key_axis], plan.block_kv))
    ranges = plan.key_parts(block[att.query_axis][0] // plan.block_q)
    return [tiles[j0:j1 if p < len(ranges) - 1 else len(tiles)] for p, (j0, j1) in enumerate(ranges)]


def _online_softmax(k: _Kernel, block: Ranges, key_tiles: Sequence[tuple[int, int]]):
    """One pass of the online softmax over `key_tiles`: (running max, running sum, unnormalized
    output, their axes), the output divided by the sum only where the loop body does so inside
    P x V (then the sum is taken as 1 there, as in the kernel)."""
    att = k.info.attention
    mx, sm, pv = att.max_reduce, att.sum_reduce, att.pv.reduce
    m = l = acc = None
    m_axes = l_axes = acc_axes = ()
    for kr in key_tiles:
        kb = {**block, att.key_axis: kr}
        s_max, m_axes = k.value(mx.result, kb)
        m_new = s_max if m is None else np.maximum(m, s_max)
        m_safe = np.where(np.isneginf(m_new), np.float32(0), m_new).astype(np.float32)
        alpha = None if m is None else _rescale_factor(m, m_safe)
        over = {mx.result: m_safe}
        p_sum, l_axes = k.value(sm.result, kb, over)
        l = p_sum if l is None else l * _expand(alpha, m_axes, l_axes) + p_sum
        if att.pv_uses_sum:
            over[sm.result] = np.ones_like(p_sum)
        part, acc_axes = k.value(pv.result, kb, over)
        acc = part if acc is None else acc * _expand(alpha, m_axes, acc_axes) + part
        m = m_new
    assert m is not None and l is not None and acc is not None
    return m, l, acc, (m_axes, l_axes, acc_axes)


def _merge_parts(parts):
    """split_kv's merge (merge_parts in attention_ws.cuh): the running maxes to their maximum,
    each part's sum and output rescaled by exp(its max - that maximum) (0 for a part that saw no
    key of a row) and added."""
    if len(parts) == 1:
        return parts[0]
    m_axes, l_axes, acc_axes = parts[0][3]
    m = np.maximum.reduce([p[0] for p in parts])
    m_safe = np.where(np.isneginf(m), np.float32(0), m).astype(np.float32)
    l = acc = None
    for m_p, l_p, acc_p, _ in parts:
        f = np.where(np.isneginf(m_p), np.float32(0), _rescale_factor(m_p, m_safe)).astype(np.float32)
        l_add, acc_add = l_p * _expand(f, m_axes, l_axes), acc_p * _expand(f, m_axes, acc_axes)
        l = l_add if l is None else l + l_add
        acc = acc_add if acc is None else acc + acc_add
    return m, l, acc, (m_axes, l_axes, acc_axes)


def _rescale_factor(m_old: np.ndarray, m_new: np.ndarray) -> np.ndarray:
    """exp(old max - new max): how much the running sum and output shrink when the max grows."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp(m_old - m_new).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Reduction and elementwise
# --------------------------------------------------------------------------------------------


def _run_reduction(k: _Kernel, plan: ReductionPlan) -> list[np.ndarray]:
    info = k.info
    ext = info.axes
    rpb = plan.rows_per_block
    sweep = plan.threads_per_row * plan.vector
    for rows in _axis_blocks(info.row_axes, ext, rpb):
        over: dict[SSAValue, np.ndarray] = {}
        for r in info.reductions:
            over[r.result] = _reduce_in_sweeps(k, r, dict(rows), over, sweep)
        k.store_block(dict(rows), over)
    return k.results()


def _reduce_in_sweeps(
    k: _Kernel, r: ReduceOp, block: Ranges, over: Mapping[SSAValue, np.ndarray], sweep: int
) -> np.ndarray:
    """A top-level reduce over `block`, accumulated sweep by sweep along its contiguous axis."""
    axis = k.info.vector_axis if k.info.vector_axis in r.axis_names else r.axis_names[-1]
    acc = None
    for t in _tiles(k.info.axes[axis], sweep):
        v, _ = k.value(r.result, {**block, axis: t}, over)
        if acc is None:
            acc = v
        elif r.kind_name == "max":
            acc = np.maximum(acc, v)
        else:
            acc = acc + v
    assert acc is not None
    return acc


def _run_elementwise(k: _Kernel, plan: ElementwisePlan) -> list[np.ndarray]:
    info = k.info
    ext = info.axes
    per_block = plan.threads * plan.vector * plan.items
    par = list(info.parallel_axes)
    if not par:
        k.store_block({}, {})
        return k.results()
    inner = info.vector_axis if info.vector_axis in par else par[-1]
    rest = [a for a in par if a != inner]
    cols = min(ext[inner], per_block)
    rows_axis = rest[-1] if rest else None
    rows = max(1, per_block // cols) if rows_axis else 1
    outer = rest[:-1]
    for combo in product(*[range(ext[a]) for a in outer]):
        base = {a: (i, i + 1) for a, i in zip(outer, combo)}
        row_tiles = _tiles(ext[rows_axis], rows) if rows_axis else [None]
        for rt in row_tiles:
            for ct in _tiles(ext[inner], cols):
                block = dict(base)
                if rt is not None:
                    block[rows_axis] = rt  # type: ignore[index]
                block[inner] = ct
                k.store_block(block, {})
    return k.results()


_RUNNERS = {
    "contraction": _run_contraction,
    "attention": _run_attention,
    "reduction": _run_reduction,
    "elementwise": _run_elementwise,
}

__all__ = ["run_function", "run_kernel"]
