"""The order in which a contraction kernel's blocks take their tiles (grid pairs, persistent
loops, group_m, split tails, stream k), read from the lowered index arithmetic and evaluated on
the CPU."""

from __future__ import annotations

import pytest

from xdsl.dialects.builtin import f32

from emmy.backend.plan import launch_plan
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from tile_examples import callees, heads_matmul_residual, kernel_funcs, lower, rmsnorm_matmul, weighted_norm_matmul


# the index arithmetic of a kernel's tile order, evaluated on the CPU
_FOLD = {"arith.addi": int.__add__, "arith.subi": int.__sub__, "arith.muli": int.__mul__,
         "arith.divui": int.__floordiv__, "arith.remui": int.__mod__, "arith.minsi": min, "arith.maxsi": max}


def _block_id(op, bx: int, by: int) -> int:
    return {"#kernel<dim x>": bx, "#kernel<dim y>": by}[str(op.properties["dim"])]


def _grid_origins(f) -> dict[tuple[int, int], tuple[int, int]]:
    """(m0, n0) of every block (blockIdx.x, blockIdx.y) of a schedule = grid kernel: the index
    arithmetic before its first loop, evaluated."""
    gx, gy, _ = f.grid_dims
    out = {}
    for bx in range(gx):
        for by in range(gy):
            env, found = {}, {}
            for op in f.body.block.ops:
                if op.name == "arith.constant" and hasattr(op.value, "value"):
                    env[op.result] = op.value.value.data
                elif op.name == "kernel.block_id":
                    env[op.results[0]] = _block_id(op, bx, by)
                elif op.name in _FOLD:
                    env[op.result] = _FOLD[op.name](env[op.operands[0]], env[op.operands[1]])
                    if op.result.name_hint in ("m0", "n0"):
                        found[op.result.name_hint] = env[op.result]
                elif op.name.startswith(("scf.", "kernel.for", "kernel.if")):
                    break
            out[bx, by] = (found["m0"], found["n0"])
    return out


def test_pairs_along_n_cover_every_tile_once():
    """Pairs along n (slices = cols, cluster = 2): the two blocks of a cluster (neighbours along
    x) take neighbouring column tiles of one row tile, in the plain order and in groups of row
    tiles; every tile once. (Pairs along m: neighbours along y, one column tile.)"""
    knobs = dict(S=1000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=192, block_n=128,
                 block_k=64, warps=8, stages=5, copy="tma", slices="cols", cluster=2)
    every = {(m * 192, n * 128) for m in range(6) for n in range(8)}
    for group in (1, 2, 4):
        f = kernel_funcs(lower(heads_matmul_residual(**knobs, group_m=group), "convert-tile-to-kernel"))["o_proj_residual"]
        origins = _grid_origins(f)
        assert sorted(origins.values()) == sorted(every), group
        for (bx, by), (m0, n0) in origins.items():
            mate = origins[bx ^ 1, by]
            assert mate[0] == m0 and abs(mate[1] - n0) == 128 and min(mate[1], n0) % 256 == 0
    rows = kernel_funcs(lower(heads_matmul_residual(**dict(knobs, slices="rows", warps=12), group_m=4),
                              "convert-tile-to-kernel"))["o_proj_residual"]
    origins = _grid_origins(rows)
    assert sorted(origins.values()) == sorted(every)
    assert all(origins[bx, by ^ 1][1] == n0 and abs(origins[bx, by ^ 1][0] - m0) == 192
               for (bx, by), (m0, n0) in origins.items())


def _persistent_origins(f) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(m0, n0) of the tiles each block (blockIdx.x, blockIdx.y) of a persistent kernel takes, in
    order: the first tile loop (the producer's) run on the index arithmetic of its body."""
    loop = next(op for op in f.walk() if op.name == "kernel.for")
    gx, gy, _ = f.grid_dims
    out = {}
    for bx in range(gx):
        for by in range(gy):
            env = {}
            for op in f.walk():
                if op is loop:
                    break
                if op.name == "arith.constant" and hasattr(op.value, "value"):
                    env[op.result] = op.value.value.data
                elif op.name == "kernel.block_id":
                    env[op.results[0]] = _block_id(op, bx, by)
            lo, hi, step = (env[v] for v in loop.operands)
            tiles = []
            for t in range(lo, hi, step):
                env[loop.regions[0].block.args[0]] = t
                found = {}
                for op in loop.regions[0].block.ops:
                    if op.name == "kernel.block_id":
                        env[op.results[0]] = _block_id(op, bx, by)
                    elif op.name in _FOLD and all(o in env for o in op.operands):
                        env[op.result] = _FOLD[op.name](env[op.operands[0]], env[op.operands[1]])
                        if op.result.name_hint in ("m0", "n0"):
                            found[op.result.name_hint] = env[op.result]
                tiles.append((found["m0"], found["n0"]))
            out[bx, by] = tiles
    return out


def test_persistent_pairs_along_n_take_every_tile_once():
    """Persistent pairs along n: the cluster's two blocks (blockIdx.y 0 and 1) loop over the same
    pairs, each taking its column of the pair; every tile once, in groups of row tiles or not."""
    knobs = dict(S=3000, H=16, D=128, N=1024, target="sm_90a", workers="wgmma_ws", block_m=64, block_n=128,
                 block_k=64, warps=8, stages=4, copy="tma", slices="cols", cluster=2, schedule="persistent")
    every = sorted((m * 64, n * 128) for m in range(47) for n in range(8))  # 188 pairs, 2 to 3 a cluster
    for group in (1, 4):
        f = kernel_funcs(lower(heads_matmul_residual(**knobs, group_m=group), "convert-tile-to-kernel"))["o_proj_residual"]
        assert f.grid_dims == (66, 2, 1)
        origins = _persistent_origins(f)
        assert sorted(t for tiles in origins.values() for t in tiles) == every, group
        for (bx, by), tiles in origins.items():
            mates = origins[bx, by ^ 1]
            assert [m for m, _ in tiles] == [m for m, _ in mates]
            assert all(abs(n - o) == 128 and min(n, o) % 256 == 0 for (_, n), (_, o) in zip(tiles, mates))


def _tile_origin_ops(f) -> list[str]:
    """The arith ops between the block ids and the first loop: how a block finds its tile."""
    names = []
    for op in f.body.block.ops:
        if op.name in ("scf.for", "scf.if"):
            break
        if op.name.startswith("arith.") and op.name != "arith.constant":
            names.append(op.name)
    return names


def test_group_m_orders_tiles_in_groups_of_rows():
    """group_m beyond the cluster: the block's place in launch order (blockIdx.x along n first)
    becomes the tile of the grouped order; with clusters the order runs over clusters and the
    block's rank among them picks its row. group_m = cluster keeps blockIdx.y and blockIdx.x."""
    plain = kernel_funcs(lower(weighted_norm_matmul(M=1000, N=512, copy="tma"), "convert-tile-to-kernel"))["norm_proj"]
    grouped = kernel_funcs(lower(weighted_norm_matmul(M=1000, N=512, copy="tma", group_m=4), "convert-tile-to-kernel"))["norm_proj"]
    assert plain.grid_dims == grouped.grid_dims == (4, 8, 1)
    assert "arith.divui" not in _tile_origin_ops(plain)
    # 8 row tiles in groups of 4: constant group size, no min
    ops = _tile_origin_ops(grouped)
    assert ops.count("arith.divui") >= 2 and ops.count("arith.remui") >= 1 and "arith.minsi" not in ops
    # 6 row tiles in groups of 4: the last group has 2 rows
    ragged = kernel_funcs(lower(weighted_norm_matmul(M=700, N=512, copy="tma", group_m=4), "convert-tile-to-kernel"))
    assert "arith.minsi" in _tile_origin_ops(ragged["norm_proj"])
    pairs = kernel_funcs(lower(weighted_norm_matmul(M=1000, N=512, copy="tma", cluster=2, group_m=8), "convert-tile-to-kernel"))
    assert pairs["norm_proj"].cluster_dims == (1, 2, 1)
    # persistent blocks: the same arithmetic on the loop's tile index
    def persistent(**k):
        (f,) = kernel_funcs(lower(weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent", **k),
                                  "convert-tile-to-kernel")).values()
        return [op.name for op in f.walk()]

    # (one more division and remainder in each of the producer's and the consumers' loops)
    along_n, in_groups = persistent(), persistent(group_m=8)
    assert in_groups.count("arith.divui") == along_n.count("arith.divui") + 2
    assert in_groups.count("arith.remui") == along_n.count("arith.remui") + 2


def test_split_tail_is_a_second_launch_for_the_last_tiles():
    """split_tail=4 on 16 x 9 = 144 tiles: the first 132 as one launch, a tile per block along
    n; the last 12 as `<name>_tail`, 12 x 4 blocks, the last of each tile's four adding the
    parts (its own workspace for 12 tiles, zeroed counters)."""
    text = weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=128, split_tail=4, fusion="split")
    module = lower(text, "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["norm_proj_stats", "norm_proj", "norm_proj_tail"]  # one statistics kernel for both
    assert funcs["norm_proj"].grid_dims == (132, 1, 1)
    assert funcs["norm_proj_tail"].grid_dims == (12, 1, 4)
    assert "emmy::split_ticket" in callees(funcs["norm_proj_tail"])
    assert "emmy::split_ticket" not in callees(funcs["norm_proj"])
    source = launch_plan(lower(text)).source
    assert "norm_proj_tail<<<" in source or "norm_proj_tail" in source
    with pytest.raises(EmmyError, match="split_tail=4: 72 tiles on 132 SMs leave no partial wave behind a full one"):
        lower(weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=256, split_tail=4, fusion="split"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="split_tail=2 needs split_k=1, schedule=grid, cluster=1 and no batch axes"):
        lower(weighted_norm_matmul(M=1100, N=2048, K=1024, split_tail=2, split_k=2), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="split_tail=2 needs fusion=split"):
        lower(weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=128, split_tail=2), "convert-tile-to-kernel")


def test_stream_k_shares_tiles_among_one_block_per_sm():
    """schedule=stream_k on 9 x 8 = 72 tiles of 128x128 with 16 k-steps: 1152 steps on 132
    blocks (8 or 9 each), so every tile falls to two or three consecutive blocks. One launch of
    132 blocks, zeroed counters (2 per tile), a workspace of two slots per block (the run's
    first tile and its last), and the last block of a shared tile adding at most 3 parts."""
    from emmy.tuning.knobs import stream_k_runs

    runs = stream_k_runs(72, 16, 132)
    assert [len(r) for r in runs[:4]] == [2, 3, 3, 3] and max(map(len, runs)) == 3
    assert all(r[0][0] == 0 and r[-1][1] == 16 for r in runs)  # each tile's steps, in order
    assert all(a[1] == b[0] for r in runs for a, b in zip(r, r[1:]))
    assert stream_k_runs(2, 4, 132) == [[(i, i + 1) for i in range(4)]] * 2  # fewer steps than SMs
    # 300 tiles: the first wave's 132 whole, one to a block; the other 168 tiles' 16 steps shared
    # out (20 or 21 steps per block), at most two blocks to a tile
    hybrid = stream_k_runs(300, 16, 132)
    assert hybrid[:132] == [[(0, 16)]] * 132 and hybrid[132] == [(0, 16)] and hybrid[133] == [(0, 4), (4, 16)]
    assert max(map(len, hybrid)) == 2 and sum(hi - lo for r in hybrid for lo, hi in r) == 300 * 16
    text = weighted_norm_matmul(M=1100, N=1024, K=1024, copy="tma", schedule="stream_k", fusion="split")
    module = lower(text, "convert-tile-to-kernel")
    funcs = kernel_funcs(module)
    assert list(funcs) == ["norm_proj_stats", "norm_proj"]
    f = funcs["norm_proj"]
    assert f.grid_dims == (132, 1, 1)
    assert callees(f).count("emmy::split_ticket") == 1
    empties = {op.result.name_hint: op.result.type for op in module.walk() if isinstance(op, K.EmptyOp) and op.zeroed}
    assert [t.get_shape() for t in empties.values()] == [(144,)]
    ws = [op.result.type.get_shape() for op in module.walk() if isinstance(op, K.EmptyOp) and not op.zeroed
          and op.result.type.element_type == f32]
    assert (264, 1, 128 * 128) in ws
    # both roles loop over the block's tiles; the consumers' loads of up to 3 parts
    loads = [op for op in f.walk() if isinstance(op, K.CallOp) and op.callee.data.startswith("emmy::load_cg")]
    assert len(loads) == 3


def test_stream_k_whole_waves_first():
    """300 tiles of 128x128 over 16 k-steps: each block takes its whole tile of the first wave
    (a loop from blockIdx.x below 132, stored as usual), then its run of the other 168 tiles'
    steps; the tickets only in the second loop."""
    text = weighted_norm_matmul(M=2400, N=2048, K=1024, copy="tma", schedule="stream_k", fusion="split")
    f = kernel_funcs(lower(text, "convert-tile-to-kernel"))["norm_proj"]
    assert f.grid_dims == (132, 1, 1)
    loops = [op for op in f.walk() if isinstance(op, K.ForOp) and op.body.block.args[0].name_hint == "t"]
    assert len(loops) == 4  # whole tiles, then runs: the producer's and the consumers'
    tickets = [op for op in loops[3].walk() if isinstance(op, K.CallOp) and op.callee.data == "emmy::split_ticket"]
    assert len(tickets) == 1
    assert not any(isinstance(op, K.CallOp) and op.callee.data == "emmy::split_ticket" for op in loops[2].walk())


def test_stream_k_errors():
    with pytest.raises(EmmyError, match="schedule=stream_k needs workers=wgmma_ws"):
        lower(rmsnorm_matmul(M=256, workers="wgmma", warps=4, schedule="stream_k", fusion="split"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=stream_k needs split_k=1"):
        lower(weighted_norm_matmul(schedule="stream_k", split_k=2, fusion="split"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=stream_k needs fusion=split"):
        lower(weighted_norm_matmul(schedule="stream_k"), "convert-tile-to-kernel")
    with pytest.raises(EmmyError, match="schedule=stream_k needs cluster=1, group_m=1 and epilogue=together"):
        lower(weighted_norm_matmul(M=1000, copy="tma", schedule="stream_k", fusion="split", group_m=4), "convert-tile-to-kernel")


