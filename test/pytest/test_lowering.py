"""Kernel builders (emmy/lowering) and convert-tile-to-kernel on hand-written tile IR: contraction
workers, pipelines, epilogues and their errors, elementwise and reduction kernels (no GPU, no
nvcc: test_nvcc.py compiles the output; test_tile_order.py and test_launch_plan.py hold the
tile order and the cuda stage)."""

from __future__ import annotations

import re

import pytest

from xdsl.dialects import arith
from xdsl.dialects.builtin import VectorType

import loop_examples as L
from emmy.backend.plan import cuda_source, launch_plan
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.ir_io import print_module
from tile_examples import LOWER, callees, example_plan, example_trace, gate_up, heads_matmul_residual, kernel_funcs, lower, rms_norm, rmsnorm_matmul, silu_mul, weighted_norm_matmul


# ---------------------------------------------------------------------------------------------
# Contractions
# ---------------------------------------------------------------------------------------------

CONTRACTION_CASES = [
    # (target, knobs, expected compute call)
    ("sm_80", dict(workers="mma_sync", block_m=64, block_n=64, block_k=32, stages=3, warps=4), "emmy::mma::warp_tile<32, 32, 32, 64, 64>"),
    ("sm_90", dict(workers="mma_sync", block_m=32, block_n=64, block_k=16, stages=2, warps=2), "emmy::mma::warp_tile<32, 32, 16, 32, 64>"),
    ("sm_90", dict(workers="mma_sync", block_m=64, block_n=64, block_k=64, stages=1, warps=4), "emmy::mma::warp_tile<32, 32, 64, 64, 64>"),
    ("sm_90a", dict(workers="wgmma", block_m=64, block_n=64, block_k=64, stages=4, warps=4), "emmy::wgmma::tile<64, 64, 64, 64>"),
    ("sm_90a", dict(workers="wgmma", block_m=128, block_n=128, block_k=128, stages=2, warps=4), "emmy::wgmma::tile<128, 128, 128, 128>"),
    ("sm_90a", dict(workers="wgmma", block_m=128, block_n=32, block_k=32, stages=3, warps=8), "emmy::wgmma::tile<32, 32, 128, 32>"),
    ("sm_90", dict(workers="thread", block_m=32, block_n=32, block_k=32, stages=2, warps=4), "emmy::fma::thread_tile<8, 1, 32, 32, 32, 4, 32>"),
]


@pytest.mark.parametrize(
    "target,knobs,staged",
    [
        ("sm_90a", dict(workers="wgmma_ws", block_m=128, block_n=128, block_k=64, stages=4, warps=8), True),
        ("sm_90a", dict(workers="wgmma", block_m=64, block_n=64, block_k=64, stages=4, warps=4), True),
        ("sm_80", dict(workers="mma_sync", block_m=64, block_n=64, block_k=32, stages=3, warps=4), True),
        # the k loop's buffers (2 x (32 + 64) x 16 bf16) hold the bf16 results (not f32 accumulators)
        ("sm_90", dict(workers="mma_sync", block_m=32, block_n=64, block_k=16, stages=2, warps=2), True),
        ("sm_90", dict(workers="thread", block_m=32, block_n=32, block_k=32, stages=2, warps=4), False),
    ],
)
def test_contraction_staged_epilogue(target, knobs, staged):
    """Tensor-core kernels write their outputs through shared memory: the accumulators go to an
    f32 tile there and each thread then stores 8 consecutive bf16 columns (16 bytes) at once."""
    module = lower(rmsnorm_matmul(M=72, N=80, K=192, target=target, **knobs), "convert-tile-to-kernel")
    f = kernel_funcs(module)["rms_norm_qkv_proj"]
    shared = {op.result.name_hint for op in f.walk() if isinstance(op, K.SharedOp)}
    outputs = set(f.body.block.args[-1:])
    out_stores = [op for op in f.walk() if isinstance(op, K.StoreOp) and op.ptr in outputs]
    assert out_stores
    widths = {op.value.type.get_shape()[0] if isinstance(op.value.type, VectorType) else 1 for op in out_stores}
    assert ("sC" in shared) == staged
    assert widths == ({8} if staged else widths - {8})


def test_staged_epilogue_stages_results_or_accumulators():
    """An epilogue that reads no tensor (RMSNorm's row scale) runs on the fragments and stages
    bf16 results; one that adds a residual to the rounded product stages that bf16 product and
    adds the residual 8 columns at a time; one that adds it to the f32 accumulator stages the
    f32 accumulators and evaluates there."""
    f = kernel_funcs(lower(rmsnorm_matmul(M=256, N=256, K=256, workers="wgmma_ws", block_m=128, block_n=128,
                                          warps=8, stages=4, factored=True), "convert-tile-to-kernel"))
    shared = {op.result.name_hint: op for op in f["rms_norm_qkv_proj"].walk() if isinstance(op, K.SharedOp)}
    assert str(shared["sC"].result.type.element_type) == "bf16"
    g = kernel_funcs(lower(heads_matmul_residual(target="sm_90a", workers="wgmma_ws", block_m=64, block_n=64,
                                                 warps=4, stages=3, block_k=64), "convert-tile-to-kernel"))
    (name,) = [n for n in g if not n.endswith("_combine")]
    shared = {op.result.name_hint: op for op in g[name].walk() if isinstance(op, K.SharedOp)}
    assert str(shared["sC"].result.type.element_type) == "bf16"
    residual_reads = [op for op in g[name].walk() if isinstance(op, K.LoadOp) and op.ptr is g[name].body.block.args[0]]
    assert residual_reads and all(isinstance(op.result.type, VectorType) and op.result.type.get_shape() == (8,)
                                  for op in residual_reads)
    h = kernel_funcs(lower(heads_matmul_residual(target="sm_90a", f32_add=True, workers="wgmma_ws", block_m=64,
                                                 block_n=64, warps=4, stages=3, block_k=64), "convert-tile-to-kernel"))
    (name,) = [n for n in h if not n.endswith("_combine")]
    shared = {op.result.name_hint: op for op in h[name].walk() if isinstance(op, K.SharedOp)}
    assert str(shared["sC"].result.type.element_type) == "f32"


@pytest.mark.parametrize("target,knobs,compute", CONTRACTION_CASES)
def test_contraction_workers(target, knobs, compute):
    module = lower(rmsnorm_matmul(M=72, N=80, K=192, target=target, **knobs), "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["rms_norm_qkv_proj"]
    f = funcs["rms_norm_qkv_proj"]
    calls = callees(f)
    assert compute in calls
    # the row statistics are computed once per block (one warp per row) and kept in smem
    assert "emmy::warp_sum<32>" in calls
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    # B (a plain weight load) is copied with cp.async; the tensors A (x * rstd * w) reads are
    # copied raw (x: block_m rows, w: one row), then A is computed from shared memory
    # (sC: the staged epilogue's tiles, where the k loop's buffers leave room; test below)
    assert set(shared) - {"sC"} == {"sA", "sB", "raw0", "raw1", "rs"}
    assert "emmy::cp_async16" in calls
    assert any(isinstance(op, K.PackOp) for op in f.walk())
    bm, bn, bk, st = knobs["block_m"], knobs["block_n"], knobs["block_k"], knobs["stages"]
    assert shared["raw0"].size.value.data == st * bm * bk and shared["raw1"].size.value.data == st * bk
    assert f.grid_dims == (-(-80 // bn), -(-72 // bm), 1)
    assert f.threads == 32 * knobs["warps"]
    up = lambda n: -(-n // 128) * 128  # noqa: E731
    tiles = st * (bm + bn) * bk * 2 + up(st * bm * bk * 2) + up(st * bk * 2)
    assert f.smem_bytes == tiles + bm * 4 + (1024 if knobs["workers"] == "wgmma" else 0)
    if knobs["workers"] == "wgmma":
        assert "emmy::fence_proxy_async" in calls
        assert shared["sA"].align.value.data == 1024


def test_wgmma_pipeline_keeps_one_group_in_flight():
    module = lower(rmsnorm_matmul(workers="wgmma", stages=3, K=512), "convert-tile-to-kernel")
    calls = callees(kernel_funcs(module)["rms_norm_qkv_proj"])
    assert "emmy::wgmma::wait<1>" in calls and calls[-1] != "emmy::wgmma::wait<1>"
    assert calls.count("emmy::wgmma::wait<0>") == 1  # after the main loop only
    # lookahead of stages - 2: cp.async groups waited down to stages - 3 pending
    assert "emmy::cp_async_wait<0>" in calls


@pytest.mark.parametrize("workers,warps", [("wgmma", 4), ("wgmma_ws", 4)])
def test_wgmma_dual_contraction_keeps_a_whole_k_step_in_flight(workers, warps):
    """Gate and up with two 64-row slices per warpgroup are four groups of wgmmas per k-step:
    waiting down to one pending group would wait for the step's gate products; one k-step in
    flight is four groups."""
    text = gate_up(M=128, N=128, K=256, workers=workers, block_m=128, block_n=64, block_k=64, stages=4, warps=warps)
    calls = callees(kernel_funcs(lower(text, "convert-tile-to-kernel"))["gate_up_silu"])
    assert calls.count("emmy::wgmma::tile<64, 64, 128, 64>") == 4
    assert "emmy::wgmma::wait<4>" in calls and "emmy::wgmma::wait<1>" not in calls


@pytest.mark.parametrize("workers", ["wgmma", "wgmma_ws"])
def test_wgmma_dual_contraction_is_one_wide_wgmma(workers):
    """With one 64-row slice per warpgroup, gate's and up's B tiles of a slot lie side by side
    and one wgmma of N = 2 x block_n multiplies both (A read once), into one accumulator array
    whose halves are gate's and up's."""
    text = gate_up(M=128, N=128, K=256, workers=workers, block_m=64, block_n=64, block_k=64, stages=4, warps=4)
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["gate_up_silu"]
    calls = callees(f)
    assert calls.count("emmy::wgmma::tile<128, 64, 64, 128>") == 1
    assert "emmy::wgmma::wait<1>" in calls and "emmy::wgmma::tile<64, 64, 64, 64>" not in calls
    shared = {op.result.name_hint for op in f.walk() if isinstance(op, K.SharedOp)}
    assert "sB" in shared and "sB0" not in shared
    locals_ = [op for op in f.walk() if isinstance(op, K.LocalOp) and op.result.name_hint == "acc"]
    assert len(locals_) == 1


@pytest.mark.parametrize("stages", [2, 4])
def test_warp_specialized_pipeline(stages):
    """workers=wgmma_ws: a producer warpgroup stages, mbarriers hand slots over, no block-wide
    barrier inside the k loop (test_nvcc.py builds such kernels for sm_90a)."""
    text = rmsnorm_matmul(M=200, N=96, K=448, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=stages)
    module = lower(text, "convert-tile-to-kernel")
    f = kernel_funcs(module)["rms_norm_qkv_proj"]
    assert f.threads == 8 * 32 + 128
    calls = callees(f)
    assert calls.count("emmy::mbar_init") == 2 * stages
    assert "emmy::mbar_wait" in calls and "emmy::mbar_arrive" in calls
    assert "emmy::cp_async_mbar_arrive" in calls and "emmy::cp_async_wait<0>" in calls
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    assert set(shared) - {"sC"} == {"sA", "sB", "rs", "bars"}  # A computed by the producer, no raw copies
    # A uses the row statistic (x * rstd * w): the producer computes it from x prefetched a
    # k-step ahead, so the statistics must exist before the k loop: the block's pass over its
    # rows (one warp per row) runs first, nothing is summed during the loop
    assert "emmy::warp_sum<32>" in calls and "emmy::warp_sum<8>" not in calls
    assert "emmy::named_barrier<384>" not in calls
    loops = [op for op in f.walk() if isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "kt"]
    assert len(loops) == 2  # the producer's and the consumers'
    for loop in loops:
        assert not any(isinstance(op, K.BarrierOp) for op in loop.walk())


def test_producer_sums_the_statistics_of_an_a_side_computed_from_two_tensors():
    """A = g * (x + r) (`KernelInfo.ws_row_stats` = "producer"): the producer warpgroup computes
    A from x and r, prefetched a k-step ahead, and sums the squares on the way (over 8 lanes; no
    pass over the rows before the k loop, which sums over 32), then hands them to the whole tile
    at barrier 1. A staggered epilogue, whose warpgroups store in turn, is refused by legality
    (decide-forks) before the lowering would."""
    text, _ = L.add_rmsnorm_matmul(4096, 1024, 1024, target="sm_90a")
    pins = "*.workers=wgmma_ws, warps=8, block_m=128, block_n=128, schedule=persistent, fusion=fused"
    module = lower(text, f'convert-loop-to-tile,decide-forks{{pin="{pins}, epilogue=together"}},convert-tile-to-kernel')
    calls = callees(kernel_funcs(module)["add_norm_proj"])
    assert "emmy::warp_sum<8>" in calls and "emmy::warp_sum<32>" not in calls
    assert 1 in _barrier_ids(kernel_funcs(module)["add_norm_proj"], "emmy::named_barrier<384>")
    # the statistics are read once, by the epilogue (A does not use them: no load while staging A)
    for fusion, stats in (("fused", "rs"), ("split", "stats")):
        src = cuda_source(lower(text, f'convert-loop-to-tile,decide-forks{{pin="{pins.replace("fused", fusion)}"}},{LOWER}'))
        assert len(re.findall(rf"= {stats}_\d+\[", src)) == 1, fusion
    with pytest.raises(EmmyError, match="epilogue=staggered: the producer warpgroup sums the row statistics"):
        lower(text, f'convert-loop-to-tile,decide-forks{{pin="{pins}, epilogue=staggered"}}')


def test_warp_specialized_computes_a_in_place():
    """A = g * x with g not a parameter (nothing to fold) reads one block_m-row tensor: the
    producer copies x into the A slot and each consumer warpgroup rewrites its rows in place,
    summing the row statistics on the way."""
    funcs = kernel_funcs(lower(weighted_norm_matmul(), "convert-tile-to-kernel"))
    assert list(funcs) == ["norm_proj"]
    calls = callees(funcs["norm_proj"])
    # after each transform, and before the epilogue
    assert calls.count("emmy::named_barrier<128>") == 2
    assert "emmy::warp_sum<8>" in calls and "emmy::warp_sum<32>" not in calls
    assert "emmy::named_barrier<384>" not in calls


def test_persistent_blocks_loop_over_tiles():
    """schedule=persistent: one block per SM (at most the tile count), both warpgroup roles loop
    over the same tiles, the k-step count (slots, mbarrier phases) goes on across tiles, the
    consumers free each tile's last slot, and the epilogue keeps out of the pipeline's slots."""
    text = weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent")
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["norm_proj"]
    assert f.grid_dims == (64, 1, 1)  # 16 x 4 tiles of 128x128: one block each
    tile_loops = [op for op in f.walk() if isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "t"]
    assert len(tile_loops) == 2  # the producer's and the consumers'
    for loop in tile_loops:
        assert any(isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "kt" for op in loop.walk())
    calls = callees(f)
    # the consumers' warp_arrive per k-step after the first, plus one for the tile's last slot
    consumer = tile_loops[1]
    arrives = [op for op in consumer.walk() if isinstance(op, K.CallOp) and op.callee.data == "emmy::warp_arrive"]
    assert len(arrives) == 2
    # in place A (one barrier per k-step), the statistics written, and rs free again per tile
    assert calls.count("emmy::named_barrier<128>") == 3
    shared = {op.result.name_hint: op for op in f.walk() if isinstance(op, K.SharedOp)}
    if "sC" in shared:  # staged epilogue tiles after the mbarriers, never over the slots
        assert shared["sC"].offset.value.data > shared["bars"].offset.value.data
    big = kernel_funcs(lower(weighted_norm_matmul(M=4096, N=4096, K=256, schedule="persistent"), "convert-tile-to-kernel"))
    assert big["norm_proj"].grid_dims == (132, 1, 1)  # 1024 tiles


def test_persistent_schedule_errors():
    with pytest.raises(EmmyError, match="schedule=persistent needs workers=wgmma_ws"):
        lower(rmsnorm_matmul(M=256, workers="wgmma", warps=4, schedule="persistent"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=persistent needs split_k=1"):
        lower(weighted_norm_matmul(schedule="persistent", split_k=2), "convert-tile-to-kernel")
    # A = x * rstd * w: the statistics come before the k loop, per tile, from all warps
    with pytest.raises(EmmyError, match="cannot compute the A side from row statistics"):
        lower(rmsnorm_matmul(M=256, workers="wgmma_ws", block_m=128, warps=8, schedule="persistent"), "convert-tile-to-kernel")


def _barrier_ids(f: K.KernelFuncOp, callee: str) -> list:
    """The id operands of the kernel's calls of `callee` (an int, or the op computing it)."""
    out = []
    for op in f.walk():
        if isinstance(op, K.CallOp) and op.callee.data == callee:
            owner = op.operands[0].owner
            out.append(owner.value.value.data if hasattr(owner, "value") and hasattr(owner.value, "value") else owner)
    return out


def test_staggered_epilogue_takes_turns():
    """epilogue=staggered: each consumer warpgroup syncs only with itself around the staged
    epilogue (barriers 10 and 11), and warpgroup 1 waits at barrier 12 for warpgroup 0, which
    arrives there once it has stored its rows."""
    knobs = dict(M=4096, N=512, K=256, workers="wgmma_ws", block_m=128, block_n=128, warps=8, stages=4,
                 schedule="persistent", fusion="split")
    staggered = kernel_funcs(lower(rmsnorm_matmul(**knobs, epilogue="staggered"), "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    together = kernel_funcs(lower(rmsnorm_matmul(**knobs), "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    assert 12 in _barrier_ids(staggered, "emmy::named_barrier<256>")
    assert _barrier_ids(staggered, "emmy::named_barrier_arrive<256>") == [12]
    own = [i for i in _barrier_ids(staggered, "emmy::named_barrier<128>") if not isinstance(i, int)]
    assert own and all(isinstance(op, arith.AddiOp) for op in own)  # 10 + warpgroup
    assert 8 not in _barrier_ids(staggered, "emmy::named_barrier<256>")  # no barrier of both around the tile
    assert 8 in _barrier_ids(together, "emmy::named_barrier<256>")
    assert not _barrier_ids(together, "emmy::named_barrier_arrive<256>")


def test_pingpong_epilogue_takes_tiles_in_turn():
    """epilogue=pingpong: consumer warpgroup w loops over every other one of the block's tiles
    (from blockIdx.x + w * gridDim.x), waits for its turn at the k loop (barrier 13 + w, the
    first tile of warpgroup 0 without waiting), hands the turn on after its last slot wait only
    where the next tile exists, and stages its epilogue alone (barrier 10 + w) in its own room;
    a slot is freed by the 128 threads of one warpgroup, which hold all 128 x (2 x 64)
    accumulators of gate and up with 232 registers each."""
    knobs = dict(M=4096, N=512, K=256, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4,
                 schedule="persistent", epilogue="pingpong")
    f = kernel_funcs(lower(gate_up(**knobs), "convert-tile-to-kernel"))["gate_up_silu"]
    assert _barrier_ids(f, "emmy::named_barrier<256>") == [13, 14]
    assert _barrier_ids(f, "emmy::named_barrier_arrive<256>") == [14, 13]
    assert set(_barrier_ids(f, "emmy::named_barrier<128>")) == {10, 11}
    assert _init_counts(f)[1::2] == [4] * 4  # the empty barriers: one warpgroup's four warps release a slot
    calls = callees(f)
    assert "emmy::regs_lower<40>" in calls and "emmy::regs_raise<232>" in calls
    # per warpgroup: two 64-row slices of the 128-row A tile against gate's and up's B tiles
    assert calls.count("emmy::wgmma::tile<64, 32, 128, 64>") == 2 * 2 * 2
    src = cuda_source(lower(gate_up(**knobs)))
    staged = sorted({int(m) for m in re.findall(r"sC_\d+ = reinterpret_cast<__nv_bfloat16\*>\(emmy_smem \+ (\d+)\)", src)})
    assert len(staged) == 2 and staged[1] - staged[0] == 128 * (64 + 8) * 2  # one bf16 tile each
    loops = re.findall(r"for \(int t_\d+ = (\w+); t_\d+ < c\d+_\d+; t_\d+ \+= (c\d+)_\d+\)", src)
    assert [step for _, step in loops] == ["c132", "c264", "c264"]  # the producer: every tile


def test_pingpong_epilogue_errors():
    # the row statistics summed in the kernel, or an A side rewritten in place by the tile's warpgroups
    with pytest.raises(EmmyError, match="epilogue=pingpong needs cluster=1 and no row statistics summed in the kernel"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, stages=4, schedule="persistent",
                             epilogue="pingpong"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="epilogue=pingpong needs schedule=persistent and two consumer warpgroups"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, fusion="split", epilogue="pingpong"),
              "convert-tile-to-kernel")
    # stream-K's shared tiles have one epilogue for both warpgroups, like any epilogue but together
    with pytest.raises(EmmyError, match="schedule=stream_k needs cluster=1, group_m=1 and epilogue=together"):
        lower(gate_up(M=4096, N=512, K=256, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4,
                      schedule="stream_k", epilogue="pingpong"), "convert-tile-to-kernel")


def test_slices_cols_swaps_the_wgmma_operands():
    """slices=cols: each warpgroup multiplies its 64 columns of B (the wgmma's A operand, from
    the B tile's rows 64 * w on) by the whole A tile (its B operand: N = block_m), and holds the
    tile transposed: its fragments go to the staged tile one element at a time, rows of a pair
    one apart, then out by rows as with slices=rows."""
    knobs = dict(S=3000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=192, block_n=128,
                 block_k=64, warps=8, stages=5, copy="tma")
    cols = cuda_source(lower(heads_matmul_residual(**knobs, slices="cols")))
    rows = cuda_source(lower(heads_matmul_residual(**dict(knobs, warps=12), slices="rows")))
    assert re.findall(r"emmy::wgmma::tile<([\d, ]+)>", cols) == ["192, 64, 128, 192"]
    assert re.findall(r"emmy::wgmma::tile<([\d, ]+)>", rows) == ["128, 64, 192, 128"]
    assert "float acc_" in cols and re.search(r"float acc_\d+\[96\]", cols)  # 64 x 192 / 128 threads
    assert re.search(r"float acc_\d+\[64\]", rows)
    # one bf16 at a time into the staged tile, then 16-byte rows out (the residual added)
    assert re.search(r"sC_\d+\[v_\d+\] = \w+;", cols)
    assert "Vec<__nv_bfloat16, 2>" not in cols.split("sC_")[1].split("named_barrier")[0]
    assert cols.count("*reinterpret_cast<emmy::Vec<__nv_bfloat16, 8>*>(") == rows.count("*reinterpret_cast<emmy::Vec<__nv_bfloat16, 8>*>(")


@pytest.mark.parametrize("workers,slices,schedule", [
    ("wgmma_ws", "cols", "grid"), ("wgmma_ws", "cols", "persistent"), ("wgmma_ws", "rows", "grid"), ("wgmma", "rows", "grid"),
])
def test_accumulators_settle_after_the_last_wgmma_wait(workers, slices, schedule):
    """Right after the k loop's last wgmma wait, before any read of them, every accumulator is
    written in place (emmy::wgmma::settle): CUDA 13.0's ptxas scheduled reads of them above the
    wait in slices = cols epilogues (tools/kernel_checks/wgmma_hazards.py)."""
    warps = 12 if slices == "rows" and workers == "wgmma_ws" else 8
    src = cuda_source(lower(heads_matmul_residual(
        S=3000, H=16, D=128, N=1024, target="sm_90a", workers=workers, block_m=192, block_n=128, block_k=64,
        warps=warps if workers == "wgmma_ws" else 4 * (192 // 64), stages=4, copy="tma" if workers == "wgmma_ws" else "cp_async",
        slices=slices, schedule=schedule)))
    acc, n = re.search(r"float (acc_\d+)\[(\d+)\];", src).groups()
    settle = f"emmy::wgmma::settle<{n}>({acc});"
    assert src.count(settle) == 1
    before, after = src.split(settle)
    assert before.rstrip().endswith(("emmy::wgmma::wait<0>();", "emmy::cp_async_wait<0>();"))
    last_wait = before.rindex("emmy::wgmma::wait<")
    assert f"{acc}[" not in before[last_wait:]  # nothing reads them between the wait and the settle
    assert f"{acc}[" in after  # the epilogue reads them after


def test_slices_cols_errors():
    with pytest.raises(EmmyError, match="slices=cols needs workers=wgmma or wgmma_ws"):
        lower(heads_matmul_residual(target="sm_90a", workers="mma_sync", slices="cols"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="slices=cols needs fusion=split"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, stages=4, slices="cols"),
              "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match=r"wgmma: block_n=64 must be a multiple of 128"):
        lower(heads_matmul_residual(S=512, N=256, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=64,
                                    warps=8, stages=4, slices="cols"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="slices=cols needs epilogue=together"):
        lower(heads_matmul_residual(S=4096, N=512, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=128,
                                    warps=8, stages=4, schedule="persistent", epilogue="staggered", slices="cols"),
              "convert-tile-to-kernel")
    # (a value outside the domain is refused when the IR is read)
    with pytest.raises(EmmyError, match='knob \'slices\': the chosen value "diagonal" is not in the domain'):
        lower(heads_matmul_residual(target="sm_90a", workers="wgmma_ws", slices="diagonal"), "convert-tile-to-kernel")


def test_staggered_epilogue_errors():
    with pytest.raises(EmmyError, match="epilogue=staggered needs schedule=persistent and two consumer warpgroups"):
        lower(rmsnorm_matmul(M=4096, workers="wgmma_ws", block_m=128, warps=8, epilogue="staggered"), "convert-tile-to-kernel")
    # a residual read in the epilogue: the f32 accumulators are staged, any thread stores any row
    with pytest.raises(EmmyError, match="epilogue=staggered needs an epilogue that stages bf16 results"):
        lower(heads_matmul_residual(S=512, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=64, warps=8,
                                    stages=4, schedule="persistent", epilogue="staggered"), "convert-tile-to-kernel")


def _init_counts(f: K.KernelFuncOp) -> list[int]:
    """The arrival counts of the kernel's mbarrier inits, in order (full, empty per slot)."""
    counts = []
    for op in f.walk():
        if isinstance(op, K.CallOp) and op.callee.data == "emmy::mbar_init":
            counts.append(op.operands[1].owner.value.value.data)
    return counts


@pytest.mark.parametrize("block_k,slabs", [(64, 1), (128, 2)])
def test_tma_copies_whole_operand_tiles(block_k, slabs):
    """copy=tma: x (the raw tile of the in-place A) and w are 2-D views of their tensors; one
    producer thread copies each tile slab with one tensor-map copy, announcing the bytes on the
    slot's full barrier (one arrival), and no thread issues cp.async."""
    text = weighted_norm_matmul(M=200, N=256, K=1024, copy="tma", block_k=block_k, stages=3)
    module = lower(text, "convert-tile-to-kernel")
    f = kernel_funcs(module)["norm_proj"]
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    views = [(t.rows.data, t.cols.data, t.stride.data, t.offset.data, t.box_rows.data, t.box_cols.data) for t in maps]
    assert views == [(200, 1024, 1024, 0, 128, 64), (256, 1024, 1024, 0, 128, 64)]
    calls = callees(f)
    assert calls.count("emmy::tma_load_2d") == 2 * slabs
    assert calls.count("emmy::tma_prefetch") == 2
    assert "emmy::mbar_arrive_expect_tx" in calls
    assert "emmy::cp_async16" not in calls and "emmy::cp_async_mbar_arrive" not in calls
    assert _init_counts(f)[0::2] == [1] * 3  # full: the expect_tx arrival; the bytes do the rest
    text = print_module(module)
    launch = re.search(r"kernel.launch @norm_proj\((.*?)\)", text).group(1).split(", ")
    assert launch[-2:] == ["%x", "%w"]  # the maps are bound to the operands' tensors
    plan = launch_plan(lower(text, "convert-kernel-to-cuda"))  # (text: the kernel stage)
    kernel = next(k for k in plan.kernels if k.name == "norm_proj")
    assert [str(t) for t in kernel.arg_types[-2:]] == [
        "tensor_map<rows 200, cols 1024, stride 1024, offset 0, box 128 x 64>",
        "tensor_map<rows 256, cols 1024, stride 1024, offset 0, box 128 x 64>",
    ]
    assert "emmy::tensor_map_2d((__nv_bfloat16*)x + 0, 200, 1024, 1024, 128, 64)" in plan.source
    assert "const __grid_constant__ CUtensorMap tma_a" in plan.source


def test_tma_leaves_a_computed_a_side_to_the_producer_threads():
    """A = bf16(x * rstd) * w is computed by the producer warpgroup: only the weight goes
    through a tensor map, and the full barrier counts both kinds of arrivals."""
    text = rmsnorm_matmul(M=200, N=96, K=448, workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4, copy="tma")
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["rms_norm_qkv_proj"]
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    assert [(t.rows.data, t.box_rows.data) for t in maps] == [(96, 64)]
    calls = callees(f)
    assert calls.count("emmy::tma_load_2d") == 1
    assert _init_counts(f)[0::2] == [2 * 128 + 1] * 4


def test_cluster_pairs_multicast_their_b_slices():
    """cluster=2: blocks pair up along m (cluster [1, 2, 1]); each copies its half of the B
    tile and multicasts it to both, announcing the whole slot's bytes on its own barrier; a slot
    is free once every consumer warp of both blocks released it (2 x 8 arrivals), and both
    blocks meet before the first copy and before leaving."""
    text = weighted_norm_matmul(M=500, N=256, K=1024, copy="tma", cluster=2)
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["norm_proj"]
    assert f.cluster_dims == (1, 2, 1) and f.grid_dims == (2, 4, 1)
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    assert [t.box_rows.data for t in maps] == [128, 64]  # A whole, B in halves
    calls = callees(f)
    assert calls.count("emmy::tma_load_2d") == 1 and calls.count("emmy::tma_load_2d_multicast") == 1
    assert calls.count("emmy::cluster_sync") == 2 and "emmy::fence_mbarrier_init" in calls
    assert "emmy::cluster_arrive<2>" in calls and "emmy::mbar_arrive" not in calls
    assert _init_counts(f)[1::2] == [2 * 8] * 4
    source = launch_plan(lower(text)).source
    assert "__cluster_dims__(1, 2, 1)" in source


def test_cluster_pairs_along_n_multicast_their_a_slices():
    """slices=cols with cluster=2 (cuBLAS's 2x1 pairs of 128 x 192 tiles): the pair shares the
    tile each warpgroup multiplies whole, A, so blocks pair up along n (cluster [2, 1, 1], the
    grid's neighbours along x); each copies its half of A's rows (a box of block_m / 2 rows of the
    [1, H, S, D] map, multicast) and its whole B tile. In a persistent block's loop the rank in
    the cluster (blockIdx.y) picks its column of the pair."""
    knobs = dict(S=3000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=192, block_n=128,
                 block_k=64, warps=8, stages=5, copy="tma", slices="cols", cluster=2)
    f = kernel_funcs(lower(heads_matmul_residual(**knobs), "convert-tile-to-kernel"))["o_proj_residual"]
    assert f.cluster_dims == (2, 1, 1) and f.grid_dims == (8, 16, 1)
    maps = [t for t in f.arg_types if isinstance(t, K.TensorMapType)]
    assert [t.box_rows.data for t in maps] == [96, 128]  # A in halves, B whole
    calls = callees(f)
    assert calls.count("emmy::tma_load_3d_multicast") == 1 and calls.count("emmy::tma_load_2d") == 1
    assert "emmy::tma_load_3d" not in calls and "emmy::tma_load_2d_multicast" not in calls
    assert "emmy::cluster_arrive<2>" in calls and _init_counts(f)[1::2] == [2 * 8] * 5
    assert "__cluster_dims__(2, 1, 1)" in launch_plan(lower(heads_matmul_residual(**knobs))).source
    # persistent: clusters of two along y, whatever the side they pair along
    f = kernel_funcs(lower(heads_matmul_residual(**knobs, schedule="persistent", group_m=4), "convert-tile-to-kernel"))
    assert f["o_proj_residual"].cluster_dims == (1, 2, 1) and f["o_proj_residual"].grid_dims == (64, 2, 1)  # 128 tiles in 64 pairs
    with pytest.raises(EmmyError, match="the 5 column tiles do not pair up"):
        lower(heads_matmul_residual(**dict(knobs, N=640)), "convert-tile-to-kernel")


def test_cluster_errors():
    with pytest.raises(EmmyError, match="cluster=2 needs copy=tma"):
        lower(weighted_norm_matmul(M=500, cluster=2), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="the 3 row tiles do not pair up"):
        lower(weighted_norm_matmul(M=300, copy="tma", cluster=2), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="group_m=1 is not a multiple of cluster=2"):
        lower(weighted_norm_matmul(M=500, copy="tma", cluster=2, group_m=1), "convert-tile-to-kernel")


def test_tma_errors():
    with pytest.raises(EmmyError, match="copy=tma needs workers=wgmma_ws"):
        lower(rmsnorm_matmul(M=256, workers="wgmma", warps=4, copy="tma"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="is not in the domain"):
        lower(weighted_norm_matmul(copy="bulk"), "convert-tile-to-kernel")


def test_warp_specialized_sums_statistics_from_the_a_tiles():
    """With the norm weight folded into the weight matrix (loop-hoist-params) the running
    example's A side is x itself: a plain copy; the consumers read their rows of each A tile,
    after issuing the step's wgmmas, for the row statistics (no prologue pass, no rewrite)."""
    from emmy.driver import CompileOptions, compile_traced

    pins = ("*.workers=wgmma_ws", "*.block_m=128", "*.block_n=128", "*.warps=8", "*.split_k=1", "*.fusion=fused")
    opts = CompileOptions(model="example", layer=0, tokens=200, target="sm_90a", pins=pins,
                          stop_after="kernel")
    module = compile_traced(example_trace(200), opts).module
    funcs = kernel_funcs(module)
    forward = [n for n in funcs if not n.startswith("rms_norm_qkv_proj_weights")]
    assert forward == ["rms_norm_qkv_proj"]  # q, and k with v: two parts side by side, one launch
    assert len(funcs) > 1  # the prepare kernels folding the norm weight into q/k/v weights
    calls = callees(funcs["rms_norm_qkv_proj"])
    # per part: once before the epilogue (the statistics written), never per k-step
    assert calls.count("emmy::named_barrier<128>") == 2
    assert "emmy::warp_sum<8>" in calls and "emmy::warp_sum<32>" not in calls
    text = print_module(module)
    launches = re.findall(r"kernel.launch @(\w+)\([^)]*\)( \{emmy.phase = \"prepare\"\})?", text)
    assert [n for n, ph in launches if not ph] == ["rms_norm_qkv_proj"]
    assert all(n.startswith("rms_norm_qkv_proj_weights") for n, ph in launches if ph)


def test_one_trace_compiles_again_with_other_pins():
    """compile_traced lowers a copy: the trace stays at the torch stage and compiles again (the
    benchmark's variants compile one trace several times)."""
    from emmy.driver import CompileOptions, compile_traced

    traced = example_trace(64)
    before = print_module(traced.module)
    first = compile_traced(traced, CompileOptions(model="example", tokens=64, target="sm_90a"))
    second = compile_traced(traced, CompileOptions(model="example", tokens=64, target="sm_90a",
                                                   pins=("*.block_n=32",)))
    assert print_module(traced.module) == before
    assert print_module(first.module) != print_module(second.module)
    assert "emmy.pins" in second.module.attributes and "emmy.pins" not in first.module.attributes


@pytest.mark.parametrize("schedule,siblings,forward", [
    ("grid", "paired", ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj"]),
    ("grid", "apart", ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj"]),
    ("persistent", "paired", ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj_out0", "rms_norm_qkv_proj_out1_2"]),
    ("persistent", "apart",
     ["rms_norm_qkv_proj_out0_stats", "rms_norm_qkv_proj_out0", "rms_norm_qkv_proj_out1", "rms_norm_qkv_proj_out2"]),
])
def test_output_groups_share_one_statistics_kernel(schedule, siblings, forward):
    """fusion=split with q and k/v built as two parts (siblings=paired: k and v share each
    tile) or three (apart): all parts' row statistics are the same kernel on the same input,
    launched once, and the parts read its buffer: side by side in one launch, or (persistent
    blocks, each part filling the machine) one launch each."""
    pins = ("*.fusion=split", "*.workers=wgmma_ws", f"*.schedule={schedule}", f"*.siblings={siblings}")
    plan = example_plan(300, pins)
    names = [launch.kernel for launch in plan.forward_launches]
    assert names == forward
    # paired: k's and v's accumulators are the two halves of one array (columns side by side);
    # apart: every part holds one contraction over its whole block_n
    shares = re.findall(r"float\* const \w+ = acc_\d+ \+", plan.source)
    assert bool(shares) == (siblings == "paired")
    stats_buffer = plan.forward_launches[0].args[-1]
    assert all(stats_buffer in launch.args for launch in plan.forward_launches[1:])


@pytest.mark.parametrize("tokens", [4096, 32768])
def test_parts_are_built_with_the_decided_tiles(tokens):
    """Every part of the running example's projection (q, then k and v paired or apart) is
    built with the decided tile (128x256 in k-steps of 64): the knob that chose the split
    (siblings) is not handed on to the parts, whose legality check would take it for one it
    does not know and shrink the tile."""
    plan = example_plan(tokens)
    parts = [k for k in plan.kernels if re.fullmatch(r"rms_norm_qkv_proj_out[0-9_]+", k.name)]
    assert len(parts) == (3 if tokens == 32768 else 2)
    for part in parts:
        assert "emmy::wgmma::tile<256, 64, 128, 256>" in part.source, part.name


@pytest.mark.parametrize("workers,early", [("wgmma_ws", True), ("wgmma", True), ("mma_sync", False)])
def test_statistics_kernel_rows_are_loaded_before_the_k_loop(workers, early):
    """fusion=split: the rows a thread's wgmma fragments hold have their statistics loaded into
    registers before the k loop, so the epilogue does not start with a round trip to memory
    (mma.sync fragments keep loading them in the epilogue)."""
    pins = ("*.fusion=split", f"*.workers={workers}", "*.split_k=1")
    plan = example_plan(300, pins)
    (main,) = [k for k in plan.kernels if k.name == "rms_norm_qkv_proj"]
    text = main.source[main.source.index("rms_norm_qkv_proj("):]
    stats_reads = [m.start() for m in re.finditer(r"= stats_\d+\[", text)]
    mainloops = [m.start() for m in re.finditer(r"emmy::(wgmma::tile<|mma::)", text)]
    assert stats_reads and mainloops
    # in order of the source, per part of the launch: its statistics reads and its k loop
    events = sorted([(i, "s") for i in stats_reads] + [(i, "m") for i in mainloops])
    order = "".join(kind for _, kind in events)
    order = re.sub(r"(.)\1+", r"\1", order)
    if early:
        assert "float row_stats_" in text
        assert order == "sm" * len(order.split("m")[:-1])  # each part reads them before its k loop
    else:
        assert "row_stats" not in text and order.startswith("m") and order.endswith("s")


def test_split_k_parts_load_no_statistics():
    """split_k > 1: the parts write partial sums to the workspace and the combine kernel applies
    the statistics, so the parts load none ahead of their k loop."""
    plan = example_plan(64, ("*.workers=wgmma_ws", "*.split_k=2"))
    parts = [k for k in plan.kernels if k.name in ("rms_norm_qkv_proj_out0", "rms_norm_qkv_proj_out1_2")]
    assert len(parts) == 2
    for part in parts:
        assert "ws_" in part.source and "stats_" in part.source
        assert "row_stats" not in part.source


@pytest.mark.parametrize("tokens", [5, 64, 300])
@pytest.mark.parametrize("pins", [(), ("*.split_k=2",), ("*.workers=wgmma_ws",), ("*.workers=mma_sync",)], ids=str)
def test_running_example_lowers_at_odd_sizes(tokens, pins):
    """The GPU tests' running-example configurations lower to CUDA on sm_90a (parts side by side
    in one launch, k and v sharing a block's columns where the workers allow it)."""
    plan = example_plan(tokens, pins)
    kernels = [l.kernel for l in plan.forward_launches]
    assert all(l.kernel.startswith("rms_norm_qkv_proj_weights") for l in plan.prepare_launches)
    # the folded weights stay contiguous along k: read 16 bytes at a time, never element-wise
    forward = [k.source for k in plan.kernels if k.name in kernels]
    assert not any(re.search(r"rms_norm_qkv_proj_weights_\d+\[", src) for src in forward)
    # parts side by side in one launch, after their shared statistics kernel where there is one;
    # split-k parts have statistics and combine kernels: one launch per part then
    body = [k for k in kernels if k != "rms_norm_qkv_proj_out0_stats"]
    assert body == ["rms_norm_qkv_proj"] or all(k.startswith("rms_norm_qkv_proj_out") for k in kernels)


@pytest.mark.parametrize("workers", ["mma_sync", "wgmma", "wgmma_ws", "thread"])
def test_split_k_last_block_combine(workers):
    """combine = last_block: one kernel per contraction and no combine launch; its arguments
    gain the per-tile counters (a zeroed buffer of two ints per output tile) between the
    workspace and the outputs, and the tile's last block runs the epilogue."""
    extra = {"warps": 4, "stages": 3} if workers != "thread" else {"block_m": 32, "block_n": 32, "block_k": 32}
    module = lower(
        rmsnorm_matmul(M=200, N=136, K=512, split_k=4, combine="last_block", workers=workers, **extra),
        "convert-tile-to-kernel",
    )
    funcs = kernel_funcs(module)
    assert list(funcs) == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj"]
    text = print_module(module)
    bm, bn = (32, 32) if workers == "thread" else (64, 64)
    tiles = -(-200 // bm) * -(-136 // bn)
    assert f"kernel.empty : tensor<4x{tiles}x1x{bm * bn}xf32>" in text  # [split, tiles, contractions, tile]
    assert f"kernel.empty zeroed : tensor<{2 * tiles}xi32>" in text
    main = print_module(funcs["rms_norm_qkv_proj"])
    assert "%counters: !kernel.ptr<i32>, %out: !kernel.ptr<bf16>" in main
    assert main.count("emmy::split_ticket") == 1 and main.count("emmy::split_wait") == 1
    assert ("emmy::barrier_or<" in main) == (workers == "wgmma_ws")
    plan = launch_plan(lower(rmsnorm_matmul(M=200, N=136, K=512, split_k=4, combine="last_block", workers=workers, **extra)))
    assert [b.role for b in plan.buffers if b.name.endswith("counters")] == ["zeroed"]


@pytest.mark.parametrize("workers", ["wgmma", "mma_sync"])
def test_last_block_counters_of_every_part_are_zeroed(workers):
    """The running example's q and k/v parts (one launch each, merge_built) keep a counter
    buffer each, and both stay `zeroed` (garbage counters hand out wrong tickets)."""
    plan = example_plan(300, (f"*.workers={workers}", "*.split_k=2", "*.combine=last_block"))
    counters = [b for b in plan.buffers if b.dtype == "i32"]
    assert len(counters) == 2 and {b.role for b in counters} == {"zeroed"}
    assert not any(k.name.endswith("_combine") for k in plan.kernels)


def test_last_block_combine_needs_split_k():
    with pytest.raises(EmmyError, match="combine=last_block adds split_k's parts: it needs split_k > 1"):
        lower(rmsnorm_matmul(combine="last_block"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="unknown combine 'later'"):
        lower(rmsnorm_matmul(split_k=2, combine="later").replace('["kernel", "last_block"]', '["kernel", "later"]'),
              "convert-tile-to-kernel")


def test_warp_specialized_needs_sm90a():
    with pytest.raises(EmmyError, match="workers=wgmma_ws needs sm_90a"):
        lower(rmsnorm_matmul(target="sm_90", workers="wgmma_ws"), "convert-tile-to-kernel")


def test_split_k_and_split_fusion_launch_sequence():
    module = lower(rmsnorm_matmul(K=512, split_k=4, workers="mma_sync", block_k=64), "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine"]
    assert funcs["rms_norm_qkv_proj"].grid_dims[2] == 4
    text = print_module(module)
    assert "kernel.empty : tensor<1x64xf32>" in text  # statistics: [prologue reductions, rows]
    assert "kernel.empty : tensor<4x1x1x64x64xf32>" in text  # workspace: [split, contractions, batch, M, N]
    launches = re.findall(r"kernel.launch @(\w+)", text)
    assert launches == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj", "rms_norm_qkv_proj_combine"]

    module = lower(rmsnorm_matmul(fusion="split"), "convert-tile-to-kernel")
    assert list(kernel_funcs(module)) == ["rms_norm_qkv_proj_stats", "rms_norm_qkv_proj"]
    main = kernel_funcs(module)["rms_norm_qkv_proj"]
    assert not any(op.result.name_hint == "rs" for op in main.walk() if isinstance(op, K.SharedOp))


def test_dual_contraction_shares_the_a_tile():
    module = lower(gate_up(), "convert-tile-to-kernel")
    f = kernel_funcs(module)["gate_up_silu"]
    names = [op.result.name_hint for op in f.walk() if isinstance(op, K.SharedOp)]
    assert [n for n in names if n != "sC"] == ["sA", "sB0", "sB1"]
    locals_ = [op.result.name_hint for op in f.walk() if isinstance(op, K.LocalOp)]
    assert locals_[:2] == ["acc0", "acc1"]
    calls = callees(f)
    assert calls.count("emmy::mma::warp_tile<32, 16, 32, 64, 32>") == 2
    # A, B gate rows, B up rows (rows n + N); once in the pipeline prologue, once in the loop
    assert calls.count("emmy::cp_async16") == 6
    assert any(op.name == "math.exp" for op in f.walk())


def test_index_arithmetic_contiguous_through_div_rem():
    """k = h * D + d read as [h, s, d]: still 16-byte contiguous along k, so A uses cp.async."""
    module = lower(heads_matmul_residual(), "convert-tile-to-kernel")
    f = kernel_funcs(module)["o_proj_residual"]
    calls = callees(f)
    assert calls.count("emmy::cp_async16") == 4  # A and B, prologue and loop
    # nothing computed is stored into the A tile (the only 8-lane bf16 stores are the outputs)
    outs = set(f.body.block.args[-1:])
    packed = [op for op in f.walk() if isinstance(op, K.StoreOp) and isinstance(op.value.owner, K.PackOp)]
    assert packed and all(op.ptr in outs for op in packed if op.value.type == K.VectorType(K.BFloat16Type(), [8]))
    # the staged epilogue reads the residual 8 columns (16 bytes) at a time
    loads = [op for op in f.walk() if isinstance(op, K.LoadOp) and op.ptr.name_hint == "r0"]
    assert loads and all(op.result.type == K.VectorType(K.BFloat16Type(), [8]) for op in loads)


def test_computed_a_without_room_for_raw_copies_is_staged_from_registers():
    """sm_80 has 163 KB: 128x128 tiles, block_k 128, 2 stages fit, their raw copies do not."""
    module = lower(
        rmsnorm_matmul(M=128, N=128, K=256, target="sm_80", block_m=128, block_n=128, block_k=128, stages=2, warps=8),
        "convert-tile-to-kernel",
    )
    f = kernel_funcs(module)["rms_norm_qkv_proj"]
    names = [op.result.name_hint for op in f.walk() if isinstance(op, (K.SharedOp, K.LocalOp))]
    assert "raw0" not in names and "stage_a" in names


def test_wgmma_needs_sm90a():
    with pytest.raises(EmmyError, match="workers=wgmma needs sm_90a"):
        lower(rmsnorm_matmul(target="sm_90", workers="wgmma"), "convert-tile-to-kernel")


def test_shared_memory_over_the_target_limit():
    with pytest.raises(EmmyError, match="bytes of shared memory exceed"):
        lower(
            rmsnorm_matmul(M=256, N=256, K=512, target="sm_80", block_m=256, block_n=256, block_k=128, stages=2, warps=8),
            "convert-tile-to-kernel",
        )


def test_undecided_knobs():
    text = silu_mul().replace('= 128, "pinned", "test"', "")
    with pytest.raises(EmmyError, match="undecided"):
        lower(text, "convert-tile-to-kernel")


def test_unknown_kind_builder():
    from emmy.passes.convert_tile_to_kernel import builder_for

    with pytest.raises(EmmyError, match="no kernel builder for kind 'bogus'"):
        builder_for("bogus")


# ---------------------------------------------------------------------------------------------
# Elementwise and reduction
# ---------------------------------------------------------------------------------------------


def test_elementwise_vectorized():
    module = lower(silu_mul(), "convert-tile-to-kernel")
    f = kernel_funcs(module)["silu_mul"]
    loads = [op for op in f.walk() if isinstance(op, K.LoadOp)]
    stores = [op for op in f.walk() if isinstance(op, K.StoreOp)]
    assert [str(op.result.type) for op in loads] == ["vector<8xbf16>", "vector<8xbf16>"]
    assert [str(op.value.type) for op in stores] == ["vector<8xbf16>"]
    assert f.grid_dims == (-(-7 * 3072 // 8 // 256), 1, 1) and f.block_dims == (128, 1, 1)


def test_elementwise_odd_extent_falls_back_to_scalars():
    module = lower(silu_mul(M=3, N=5, vector=8), "convert-tile-to-kernel")
    f = kernel_funcs(module)["silu_mul"]
    assert all(op.result.type == K.BFloat16Type() for op in f.walk() if isinstance(op, K.LoadOp))


def test_reduction_rows_per_block():
    module = lower(rms_norm(rows_per_block=4, threads=256), "convert-tile-to-kernel")
    f = kernel_funcs(module)["rms_norm"]
    assert "emmy::group_sum<64>" in callees(f)
    assert f.grid_dims == (2, 1, 1)
    module = lower(rms_norm(M=64, rows_per_block=16, threads=256, N=512), "convert-tile-to-kernel")
    assert "emmy::warp_sum<16>" in callees(kernel_funcs(module)["rms_norm"])


