"""The tile-stage interpreter follows each kernel's decided schedule and keeps the numbers.

Every loop of `loop_examples` goes through convert-loop-to-tile and decide-forks (default rules and
several pins, including tiles that do not divide the shapes: 7 or 33 tokens, block_m=16/64,
split_k=2/3, attention blocks that cut the keys), and the tile-stage result is compared with the
loop-stage interpreter on random inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import loop_examples as L
from emmy.context import make_context
from emmy.dialects.loop import FusedOp
from emmy.interp import tile_stage
from emmy.interp.numeric import rel_error
from emmy.ir_io import parse_module, parse_pipeline, run_passes

BF16_TOL = 1e-2  # relative error (Frobenius) allowed between two bf16 results


def loop_reference(module, args):
    """The loop-stage interpreter (emmy/interp/loop_stage.py), or the loop evaluator it wraps."""
    try:
        from emmy.interp.loop_stage import run_function
    except ImportError:
        from emmy.analysis.body import evaluate
        from emmy.interp.tensor_stage import find_function, prepare_args

        def run_function(module, args):
            f = find_function(module)
            env = dict(zip(f.body.block.args, prepare_args(f, args)))
            for op in f.body.block.ops:
                if isinstance(op, FusedOp):
                    env.update(zip(op.results, evaluate(op, [env[v] for v in op.inputs])))
                else:
                    return [env[v] for v in op.operands]

    return run_function(module, args)


def tile_module(text: str, pin: str = ""):
    ctx = make_context()
    module = parse_module(ctx, text, "example")
    spec = f'convert-loop-to-tile,decide-forks{{pin="{pin}"}}'
    run_passes(ctx, module, parse_pipeline(spec))
    return module


def random_args(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def compare(example, pin: str, seed: int = 0):
    text, shapes = example
    args = random_args(shapes, seed)
    ref = loop_reference(parse_module(make_context(), text, "example"), args)
    out = tile_stage.run_function(tile_module(text, pin), args)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        assert rel_error(o, r) < BF16_TOL, pin
        np.testing.assert_allclose(o, r, rtol=2e-2, atol=2e-2 * float(np.abs(r).max()))
    return out, ref


CASES = [
    # contractions: 7 and 33 tokens, tiles that do not divide, split_k over whole k-steps
    (L.matmul(7, 96, 64), ""),
    (L.matmul(7, 100, 96), "block_m=16;block_n=16;block_k=16;split_k=3"),
    (L.matmul(33, 80, 128), "block_m=64;block_n=32;block_k=32;split_k=2"),
    (L.matmul(33, 80, 128), "block_m=16;block_n=64;block_k=16;split_k=4;workers=thread"),
    (L.matmul(33, 48, 64, target="sm_90a"), "block_m=64;block_n=16;workers=wgmma;warps=4"),
    (L.rmsnorm_matmul(7, 64, 128), ""),
    (L.rmsnorm_matmul(33, 80, 256), "block_m=16;block_n=32;block_k=16;split_k=2"),
    (L.rmsnorm_matmul(33, 80, 256), "block_m=64;block_n=64;split_k=2;fusion=split"),
    (L.gate_up(7, 48, 64), ""),
    (L.gate_up(33, 40, 96), "block_m=16;block_n=16;block_k=32;split_k=3"),
    (L.matmul_two_k(7, 40, 3, 32), "block_m=16;block_n=16;block_k=16;split_k=2"),
    # split_tail: 10 x 14 tiles on 132 SMs, the 8 past the full wave split 4 ways along k
    (L.matmul(150, 224, 256), "block_m=16;block_n=16;block_k=16;workers=mma_sync;split_tail=4"),
    (L.gate_up(150, 224, 128), "block_m=16;block_n=16;block_k=16;workers=mma_sync;split_tail=2"),
    (L.matmul_two_k(33, 24, 2, 48), ""),
    # stream_k: 5 x 8 tiles of 64 x 64 with 8 k-steps of 64 on 132 SMs (runs of 2 or 3 steps)
    (L.matmul(300, 500, 512, target="sm_90a"), "block_m=64;block_n=64;block_k=64;workers=wgmma_ws;warps=4;schedule=stream_k"),
    # ... and 10 x 29 tiles: the first wave's 132 whole, the other 158 tiles' 4 steps shared out
    (L.matmul(600, 1800, 256, target="sm_90a"), "block_m=64;block_n=64;block_k=64;workers=wgmma_ws;warps=4;schedule=stream_k"),
    (L.rmsnorm_matmul(130, 80, 512, target="sm_90a"),
     "block_m=64;block_n=64;block_k=64;workers=wgmma_ws;warps=4;schedule=stream_k;fusion=split"),  # 48 one-step runs
    # attention: causal with grouped heads, and unmasked with the sum divided in the epilogue
    (L.attention(1, 4, 2, 7, 16), ""),
    (L.attention(2, 4, 2, 33, 16), "block_q=16;block_kv=16"),
    (L.attention(1, 2, 1, 40, 32, causal=False, normalize_inside=False), "block_q=16;block_kv=16"),
    (L.attention(1, 2, 2, 33, 16, causal=False), "block_q=32;block_kv=16;warps=2;fusion=split"),
    # reductions: rows in blocks, sweeps along the row
    (L.rmsnorm(7, 64), ""),
    (L.rmsnorm(33, 96), "rows_per_block=2;threads=64;vector=2"),
    (L.softmax(9, 200), "rows_per_block=1;threads=32;vector=1"),
    (L.softmax(5, 40), "rows_per_block=4;threads=128;vector=4"),
    # elementwise
    (L.silu_mul(7, 40), ""),
    (L.silu_mul(33, 100), "threads=64;vector=1;items=1"),
    (L.rope_like(2, 7, 3, 16), "threads=64;vector=2;items=1"),
]


@pytest.mark.parametrize("example,pin", CASES, ids=[f"{i}:{p or 'rules'}" for i, (_, p) in enumerate(CASES)])
def test_tile_stage_matches_loop_stage(example, pin):
    compare(example, pin)


def test_split_actually_used(monkeypatch):
    """Dropping one split_k part changes the result: the interpreter really splits k."""
    example = L.matmul(7, 64, 128)
    compare(example, "block_k=16;split_k=2")

    def drop_last(steps, parts):
        bounds = [round(p * steps / parts) for p in range(parts + 1)]
        return [(bounds[p], bounds[p + 1]) for p in range(parts - 1)]

    monkeypatch.setattr(tile_stage, "_split_steps", drop_last)
    with pytest.raises(AssertionError):
        compare(example, "block_k=16;split_k=2")


def test_split_tail_actually_used(monkeypatch):
    """Dropping the last of the tail tiles' parts changes the result (and only theirs are cut
    in four: the other tiles have one part)."""
    example, pin = L.matmul(150, 224, 256), "block_m=16;block_n=16;block_k=16;workers=mma_sync;split_tail=4"
    compare(example, pin)
    calls = []

    def drop_last_of_four(steps, parts):
        calls.append(parts)
        bounds = [round(p * steps / parts) for p in range(parts + 1)]
        return [(bounds[p], bounds[p + 1]) for p in range(parts - (parts == 4))]

    monkeypatch.setattr(tile_stage, "_split_steps", drop_last_of_four)
    with pytest.raises(AssertionError):
        compare(example, pin)
    assert calls.count(4) == 8 and calls.count(1) == 1  # the 8 tail tiles; the rest share one list


def test_stream_k_runs_actually_used(monkeypatch):
    """Dropping the last block's run of every tile changes the result: the interpreter adds
    the blocks' parts of each tile."""
    example = L.matmul(300, 500, 512, target="sm_90a")
    pin = "block_m=64;block_n=64;block_k=64;workers=wgmma_ws;warps=4;schedule=stream_k"
    compare(example, pin)
    real = tile_stage.stream_k_runs
    seen = []

    def drop_last(tiles, steps, sms):
        runs = real(tiles, steps, sms)
        seen.append((tiles, steps, sms, max(map(len, runs))))
        return [r[:-1] for r in runs]

    monkeypatch.setattr(tile_stage, "stream_k_runs", drop_last)
    with pytest.raises(AssertionError):
        compare(example, pin)
    assert seen == [(40, 8, 132, 4)]  # 320 steps, 2 or 3 per block


def test_online_softmax_rescaling_used(monkeypatch):
    """Without the exp(old max - new max) rescaling, attention over several key blocks is wrong."""
    example = L.attention(1, 2, 1, 40, 16, causal=False)
    compare(example, "block_q=16;block_kv=16")
    monkeypatch.setattr(tile_stage, "_rescale_factor", lambda old, new: np.ones_like(old))
    with pytest.raises(AssertionError):
        compare(example, "block_q=16;block_kv=16")


def test_lost_edge_tile_detected(monkeypatch):
    """A schedule that forgets the clipped edge tile leaves elements unwritten: an error."""
    example = L.matmul(33, 48, 64)

    def no_edge(extent, size):
        for lo in range(0, extent - size + 1, size):
            yield lo, lo + size

    monkeypatch.setattr(tile_stage, "_tiles", no_edge)
    with pytest.raises(AssertionError, match="never written"):
        compare(example, "block_m=16;block_n=16")


def test_undecided_knobs_rejected():
    text, shapes = L.matmul(7, 16, 16)
    ctx = make_context()
    module = parse_module(ctx, text, "example")
    run_passes(ctx, module, parse_pipeline("convert-loop-to-tile"))
    with pytest.raises(ValueError, match="undecided"):
        tile_stage.run_function(module, random_args(shapes))


def test_running_example_through_the_pipeline():
    """The running example from the torch stage: every pass up to decide-forks, then the tile
    stage (with split_k and tiles that cut the 32 tokens) against the loop stage."""
    from pathlib import Path

    from emmy.interp.tensor_stage import find_function
    from emmy.ir_io import print_module

    path = Path(__file__).parents[1] / "filecheck" / "inputs" / "torch-running-example.mlir"
    ctx = make_context()
    module = parse_module(ctx, path.read_text(), str(path))
    run_passes(
        ctx, module,
        parse_pipeline("convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse"),
    )
    loop_text = print_module(module)
    f = find_function(module)
    rng = np.random.default_rng(1)
    args = [
        rng.standard_normal(t.get_shape()).astype(np.float32) * (0.05 if len(t.get_shape()) == 2 else 1)
        for t in f.function_type.inputs.data
    ]
    ref = loop_reference(parse_module(make_context(), loop_text, "loop"), args)
    tiled = tile_module(loop_text, "*.block_m=16;*.block_n=128;*.block_k=64;*.split_k=2")
    assert any(isinstance(op, tile_stage.KernelOp) for op in tiled.walk())
    out = tile_stage.run_function(tiled, args)
    for o, r in zip(out, ref, strict=True):
        assert rel_error(o, r) < BF16_TOL


def test_layer_on_sm90a_schedules_interprets():
    """On sm_90a the rules pick warp-specialized wgmma tiles; the tile interpreter follows them
    (70 tokens: edge tiles on every 64- and 128-row tile) and matches PyTorch."""
    from emmy.driver import CompileOptions, compile_model
    from emmy.execute import run_interpreted

    result = compile_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=0, tokens=70,
                                          target="sm_90a", stop_after="tile"))
    text = str(result.module)
    assert '= "wgmma_ws", "rule"' in text
    report = run_interpreted(result.module, result.traced)
    assert report.rel_error <= 1e-2, report.rel_error


def test_layer_with_as_many_tokens_as_the_head_dim():
    """At 128 tokens the keys and the head dim have 128 elements each: loop-fuse gives the max,
    the sum and P x V one key axis name and one head axis name (an axis around a nested
    reduction never shares a name with one inside), so attention is still classified and
    lowered as attention (it used to be taken for a contraction), and the numbers hold."""
    from emmy.analysis.classify import classify
    from emmy.driver import CompileOptions, compile_model
    from emmy.execute import run_interpreted

    result = compile_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=0, tokens=128,
                                          target="sm_90a", stop_after="tile"))
    kinds = {op.properties["sym_name"].data: classify(op).kind for op in result.module.walk() if op.name == "tile.kernel"}
    assert kinds["attention"] == "attention"
    report = run_interpreted(result.module, result.traced)
    assert report.rel_error <= 1e-2, report.rel_error
