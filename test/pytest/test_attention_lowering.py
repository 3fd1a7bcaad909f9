"""The attention kernel builder (emmy/lowering/attention.py) and its device code (attention.cuh).

Inputs: hand-written attention `tile.kernel`s shaped like the fused Qwen3 attention loop (q/k
RMSNorm over the head dimension + rotary embedding on a fused qkv buffer, grouped-query heads,
causal softmax, P x V), and plain attention; when the pipeline fuses the Qwen3 layer's attention
into one loop, that one too. Checks: the analysis (producer modes, causal offset), the
kernel-stage IR, the structure errors, and that the generated CUDA compiles with nvcc for
sm_80, sm_90 and sm_90a without register spills (and has HMMA when cuobjdump is around).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from emmy.analysis.classify import classify
from emmy.lowering import attention as A
from emmy.schedule.attention_body import score_fold, staged_output
from emmy.backend.cxx import emit_kernel
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.tile import KernelOp
from emmy.targets import get_target
from xdsl.parser import Parser

from attention_examples import (
    ROOT, attention_ir, attention_knobs, build_attention, build_text, check_ptxas, cuda_source, needs_nvcc,
    nvcc_compile, parse_kernel,
)


# --------------------------------------------------------------------------------------------
# Analysis and IR
# --------------------------------------------------------------------------------------------


def test_qwen_analysis():
    op = parse_kernel(attention_ir())
    info = classify(op)
    assert info.kind == "attention"
    plan = A.analyze(op, info)
    assert (plan.query_axis, plan.key_axis, plan.batch_axes, plan.head_dim) == ("q", "kv", ("h",), 128)
    assert (plan.q.mode, plan.k.mode, plan.v.mode) == (A.ROWSUM, A.ROWSUM, A.DIRECT)
    assert (plan.q.stat_axis, plan.k.stat_axis, plan.q.stat_len) == ("r", "r2", 128)
    assert plan.v.stride == (4 + 2 * 2) * 128
    assert plan.causal and plan.causal_offset == 0


def test_plain_analysis_and_non_causal():
    op = parse_kernel(attention_ir(qwen=False, causal=False, divide_in_pv=False))
    plan = A.analyze(op, classify(op))
    assert (plan.q.mode, plan.k.mode, plan.v.mode) == (A.DIRECT, A.DIRECT, A.DIRECT)
    assert (plan.q.stride, plan.k.stride) == (128, 128)
    assert not plan.causal
    assert plan.out_override.owner.name == "arith.divf"


def test_kernel_ir():
    op, info, built = build_text(attention_ir(T=100, H=4, HKV=2))
    (func,) = built.funcs
    func.verify()
    assert func.grid_dims == (4, 2, 1)  # 4 heads x ceil(100 / 64) query blocks (every head's longest first)
    assert func.block_dims == (128, 1, 1)
    assert func.smem_bytes == A.smem_bytes(128, 64, 64, 2) == (64 * 128 + 4 * 64 * 128) * 2
    calls = [o for o in func.walk() if isinstance(o, K.CallOp)]
    assert [c.callee.data for c in calls] == ["emmy::attention::run<128, 64, 64, 4, 2, 2, 128, 2, 128, 0, 0, 0>"]
    lambdas = [o for o in func.walk() if isinstance(o, K.LambdaOp)]
    assert len(lambdas) == 7  # q term/elem, k term/elem, score, free (score without the mask), out
    (launch,) = built.launches
    assert len(launch.args) == len(op.operands) + 1
    # every lambda argument is used; the score lambda holds the causal select, the free one
    # (the key blocks below the diagonal) none
    score, free = lambdas[4], lambdas[5]
    assert any(isinstance(o, K.LoadOp) for o in lambdas[1].walk())
    assert any(o.name == "arith.select" for o in score.walk())
    assert not any(o.name in ("arith.select", "arith.cmpi") for o in free.walk())
    assert any(o.name == "arith.mulf" for o in free.walk())  # the scale stays
    (call,) = calls
    assert call.operands[6:8] == (score.result, free.result)
    assert call.operands[9] is lambdas[6].result
    fold = call.operands[8].owner  # the scale free applies, which the main loop folds in
    assert fold.name == "arith.constant" and fold.value.value.data == pytest.approx(128**-0.5)


@pytest.mark.parametrize(
    "kw, fold",
    [
        ({}, 128**-0.5),
        ({"causal": False}, 128**-0.5),
        ({"qwen": False, "scale": 0.125}, 0.125),
        ({"scale": -0.5}, 0.0),  # a negative factor turns the row max into the min
        ({"round_score": True}, 0.0),  # rounded to bf16: not exactly dot * scale
    ],
)
def test_score_fold_only_for_an_exact_positive_scale(kw, fold):
    op, info, _ = build_text(attention_ir(T=64, **kw))
    assert score_fold(A.analyze(op, info)) == pytest.approx(fold)


@pytest.mark.parametrize(
    "kw, staged",
    [
        ({}, True),
        ({"divide_in_pv": False}, True),  # O = (P x V) / l, then rounded
        ({"qwen": False}, True),
        ({"out_scale": 2.0}, False),  # arithmetic after the division: the lambda needs O in f32
    ],
)
def test_output_staged_only_when_it_stores_bf16_of_o(kw, staged):
    """staged_output: the output is exactly bf16(O / l); the wgmma main loops then stage O in
    shared memory (STAGED_OUT, the template argument after the wgmma mode), the mma.sync one
    never gets the argument."""
    op, info, _ = build_text(attention_ir(T=64, **kw))
    assert staged_output(A.analyze(op, info)) is staged
    for workers, tail in (("wgmma", f", 1, {int(staged)}>"), ("mma_sync", ", 0>")):
        _, _, built = build_text(attention_ir(knobs=attention_knobs(workers=workers), **kw), target="sm_90a")
        (call,) = [o for o in built.funcs[-1].walk() if isinstance(o, K.CallOp) and "attention::run" in o.callee.data]
        assert call.callee.data.endswith(tail)


def test_non_causal_score_is_its_own_free_lambda():
    """Without a causal mask the main loop gets the score lambda twice (score and free)."""
    _, _, built = build_text(attention_ir(T=100, causal=False))
    (func,) = built.funcs
    lambdas = [o for o in func.walk() if isinstance(o, K.LambdaOp)]
    assert len(lambdas) == 6  # q term/elem, k term/elem, score, out
    (call,) = [o for o in func.walk() if isinstance(o, K.CallOp)]
    assert call.operands[6] is call.operands[7] is lambdas[4].result
    assert call.operands[9] is lambdas[5].result


def test_cuda_text():
    _, _, built = build_text(attention_ir(T=48))
    src = emit_kernel(built.funcs[0])
    assert "emmy::attention::run<128, 64, 64, 4, 2, 2, 128, 2, 128, 0, 0, 0>(" in src
    assert "__launch_bounds__(128, 1)" in src


def test_knob_values_reach_the_template():
    text = attention_ir(T=256, knobs=attention_knobs(block_q=128, block_kv=32, stages=3, warps=8))
    _, _, built = build_text(text)
    (call,) = [o for o in built.funcs[0].walk() if isinstance(o, K.CallOp)]
    assert call.callee.data.startswith("emmy::attention::run<128, 128, 32, 8, 3,")
    assert built.funcs[0].grid_dims == (4, 2, 1)
    assert built.funcs[0].block_dims == (256, 1, 1)


def test_split_variant():
    op = parse_kernel(attention_ir(T=100))
    knobs = dict(op.knob_values(), fusion="split")
    built = build_attention(op, classify(op), knobs, get_target("sm_90"))
    prep, main = built.funcs
    for f in built.funcs:
        f.verify()
    assert [l.kernel for l in built.launches] == ["attention_prep", "attention"]
    # Q rows for 4 query heads, K rows for the 2 key heads (grouped-query attention)
    assert [t.get_shape()[0] for t in built.temps] == [4 * 100 * 128, 2 * 100 * 128]
    assert prep.grid_dims == (4, 4, 2)  # ceil(100 / 32) row blocks, query heads, {Q, K}
    callees = [o.callee.data for o in prep.walk() if isinstance(o, K.CallOp)]
    assert callees == ["emmy::attention::materialize<128, 2, 128, 8, 4>"] * 2
    (call,) = [o for o in main.walk() if isinstance(o, K.CallOp)]
    assert call.callee.data == "emmy::attention::run<128, 64, 64, 4, 2, 0, 0, 0, 0, 0, 0, 0>"
    # plain attention has nothing to materialize: one kernel
    op = parse_kernel(attention_ir(qwen=False))
    built = build_attention(op, classify(op), dict(op.knob_values(), fusion="split"), get_target("sm_90"))
    assert len(built.funcs) == 1 and not built.temps


def test_wgmma_attention():
    """workers=wgmma (sm_90a): S = Q K^T on wgmma (the template's wgmma mode, before STAGED_OUT);
    the tiles' base is aligned to 1024 bytes for wgmma's swizzle, and the shared memory has room
    for it."""
    _, _, built = build_text(attention_ir(knobs=attention_knobs(workers="wgmma")), target="sm_90a")
    (func,) = built.funcs
    (call,) = [o for o in func.walk() if isinstance(o, K.CallOp)]
    assert call.callee.data == "emmy::attention::run<128, 64, 64, 4, 2, 2, 128, 2, 128, 0, 0, 1, 1>"
    (smem,) = [o for o in func.walk() if isinstance(o, K.SharedOp)]
    assert smem.align.value.data == 1024
    assert func.smem_bytes == A.smem_bytes(128, 64, 64, 2, wgmma=True) == (64 * 128 + 4 * 64 * 128) * 2 + 1024
    assert "emmy.note" not in func.attributes


def test_wgmma_attention_two_warpgroups():
    """block_q=128 with 8 warps: two warpgroups of 64 query rows share each K/V tile."""
    _, _, built = build_text(attention_ir(T=256, knobs=attention_knobs(workers="wgmma", block_q=128, warps=8)), target="sm_90a")
    (func,) = built.funcs
    (call,) = [o for o in func.walk() if isinstance(o, K.CallOp)]
    assert call.callee.data.startswith("emmy::attention::run<128, 128, 64, 8, ")
    assert func.block_dims == (256, 1, 1) and func.smem_bytes == A.smem_bytes(128, 128, 64, 2, wgmma=True)


def test_wgmma_attention_needs_whole_warpgroups():
    text = attention_ir(T=256, knobs=attention_knobs(workers="wgmma", block_q=128, warps=4))
    with pytest.raises(EmmyError, match=re.escape("workers=wgmma needs a head dim up to 256, a warpgroup per 64 query rows")):
        build_text(text, target="sm_90a")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"break_softmax": True}, "P in the P x V sum"),
        ({"knobs": attention_knobs(workers="thread")}, "workers=thread"),
        ({"knobs": attention_knobs(block_q=16, warps=2)}, "block_q=16"),
        ({"knobs": attention_knobs(block_kv=128, stages=3, block_q=128)}, None),  # legal
        # query blocks go on the grid's y dimension (heads on x, so the longest start first)
        ({"T": 64 * 65536 + 64}, "65537 query blocks of 64 exceed the grid's y limit of 65535"),
    ],
)
def test_errors(kw, message):
    text = attention_ir(**kw)
    if message is None:
        build_text(text)
        return
    with pytest.raises(EmmyError, match=re.escape(message)):
        build_text(text)


# --------------------------------------------------------------------------------------------
# CUDA: nvcc for sm_80, sm_90, sm_90a
# --------------------------------------------------------------------------------------------



@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a", "sm_90a-wgmma"])
@pytest.mark.parametrize("variant", ["qwen", "qwen-split", "plain"])
def test_nvcc(arch, variant, tmp_path):
    op = parse_kernel(attention_ir(T=100, qwen=variant != "plain"))
    knobs = dict(op.knob_values(), fusion="split" if variant.endswith("split") else "fused")
    if arch.endswith("-wgmma"):
        arch, knobs["workers"] = "sm_90a", "wgmma"
    built = build_attention(op, classify(op), knobs, get_target(arch))
    log, obj = nvcc_compile(cuda_source(built), arch, tmp_path)
    check_ptxas(log)
    if shutil.which("cuobjdump"):
        sass = subprocess.run(["cuobjdump", "-sass", str(obj)], capture_output=True, text=True).stdout
        assert "HMMA" in sass  # P V (and Q K^T unless wgmma)
        assert ("HGMMA" in sass) == (knobs["workers"] == "wgmma")
        assert not re.search(r"\b(LDL|STL)\b", sass)


# --------------------------------------------------------------------------------------------
# The Qwen3 layer through the pipeline
# --------------------------------------------------------------------------------------------


def _layer_attention():
    from emmy.ir_io import run_passes  # noqa: PLC0415
    from emmy.passes.pipeline import all_passes  # noqa: PLC0415

    text = (ROOT / "test" / "filecheck" / "inputs" / "torch-layer.mlir").read_text()
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    names = [
        "convert-torch-to-tensor", "tensor-merge-siblings", "convert-tensor-to-loop",
        "loop-fuse", "convert-loop-to-tile", "decide-forks",
    ]
    passes = [all_passes()[n]()() for n in names]
    run_passes(ctx, module, passes)  # a pipeline failure fails the tests that use the layer
    kernels = [o for o in module.walk() if isinstance(o, KernelOp) and o.kind.data == "attention"]
    if not kernels:
        pytest.skip("the pipeline does not fuse the layer's attention into one attention loop yet")
    return module, kernels


@needs_nvcc
@pytest.mark.nvcc
def test_layer_attention_compiles(tmp_path):
    module, kernels = _layer_attention()
    target = module.attributes["emmy.target"].data
    for op in kernels:
        info = classify(op)
        plan = A.analyze(op, info)
        # Qwen3: q/k RMSNorm (a row sum of squares) + rope on the fused qkv buffer, plain v rows
        assert (plan.q.mode, plan.k.mode, plan.v.mode) == (A.ROWSUM, A.ROWSUM, A.DIRECT)
        assert plan.causal and plan.causal_offset == 0 and plan.head_dim == 128
        built = build_attention(op, info, op.knob_values(), get_target(target))
        src = cuda_source(built)
        for arch in ("sm_80", "sm_90", "sm_90a"):
            log, _ = nvcc_compile(src, arch, tmp_path)
            check_ptxas(log)
        split = build_attention(op, info, dict(op.knob_values(), fusion="split"), get_target(target))
        assert [t.get_shape()[0] for t in split.temps] == [16 * plan.seq_q * 128, 8 * plan.seq_kv * 128]
        log, _ = nvcc_compile(cuda_source(split), "sm_90a", tmp_path)
        check_ptxas(log)


def test_wgmma_attention_three_stages_is_the_pipelined_loop():
    """stages=3 on wgmma selects the software-pipelined main loop (emmy::attention::run picks
    flash_wgmma at compile time for WGMMA and STAGES >= 3); the shared memory holds 3 K/V stages."""
    _, _, built = build_text(attention_ir(T=256, knobs=attention_knobs(workers="wgmma", stages=3)), target="sm_90a")
    (func,) = built.funcs
    (call,) = [o for o in func.walk() if isinstance(o, K.CallOp)]
    assert call.callee.data.startswith("emmy::attention::run<128, 64, 64, 4, 3, ") and call.callee.data.endswith(", 1, 1>")
    assert func.smem_bytes == A.smem_bytes(128, 64, 64, 3, wgmma=True) == (64 * 128 + 6 * 64 * 128) * 2 + 1024


# --------------------------------------------------------------------------------------------
# K and V by tensor-map copies (copy = tma)
# --------------------------------------------------------------------------------------------


def _tma_build(fusion: str, T: int = 256):
    op = parse_kernel(attention_ir(T=T, knobs=attention_knobs(workers="wgmma", stages=3)))
    knobs = dict(op.knob_values(), copy="tma", fusion=fusion)
    return op, build_attention(op, classify(op), knobs, get_target("sm_90a"))


def test_tma_attention_maps_direct_rows():
    """copy=tma: every K or V operand read as direct rows gets a tensor map over its whole tensor
    (rows of its row stride, boxes of block_kv rows by 64 columns), passed to the main loop as a
    kTma producer with the view's row length; computed K stays with the threads (fused)."""
    op, built = _tma_build("fused")
    (func,) = built.funcs
    maps = [(a, t) for a, t in ((a, a.type) for a in func.body.block.args) if isinstance(t, K.TensorMapType)]
    assert len(maps) == 1  # V only: K is computed (RMSNorm + rope) inside the flash kernel
    v_map = maps[0][1]
    rows, cols, stride, offset, box_rows, box_cols, planes, _ = (p.data for p in v_map.parameters[1:])
    assert (cols, stride, offset, box_rows, box_cols, planes) == (stride, stride, 0, 64, 64, 1) and rows * stride > 0
    (call,) = [o for o in func.walk() if isinstance(o, K.CallOp)]
    assert call.callee.data == f"emmy::attention::run<128, 64, 64, 4, 3, 2, 128, 2, 128, 3, {stride}, 1, 1>"
    (launch,) = built.launches
    v_tensor = A.analyze(op, classify(op)).v.load.tensor
    assert launch.args[-1] == A.In(v_tensor.index)

    _, split = _tma_build("split")
    prep, main = split.funcs
    kinds = [a.type for a in main.body.block.args if isinstance(a.type, K.TensorMapType)]
    assert len(kinds) == 2  # materialized K rows and V
    k_params = [p.data for p in kinds[0].parameters[1:]]
    assert k_params == [2 * 256, 128, 128, 0, 64, 64, 1, 0]  # the 2 key heads' rows of the K temporary
    (call,) = [o for o in main.walk() if isinstance(o, K.CallOp)]
    assert ", 0, 0, 3, 128, 3, " in call.callee.data  # Q direct rows, K and V through maps
    assert split.launches[1].args[-2:] == (A.Tmp(1), launch.args[-1])


@pytest.mark.parametrize(
    "T, knobs, message",
    [
        (256, {"stages": 2}, "copy=tma needs workers=wgmma, stages >= 3 and a block_kv of at most the keys (have wgmma, 2, block_kv=64 for 256 keys)"),
        (48, {}, "(have wgmma, 3, block_kv=64 for 48 keys)"),
        (256, {"copy": "bulk"}, "unknown copy 'bulk' (cp_async or tma)"),
    ],
)
def test_tma_attention_errors(T, knobs, message):
    op = parse_kernel(attention_ir(T=T, knobs=attention_knobs(workers="wgmma", stages=3)))
    values = {**op.knob_values(), "copy": "tma", **knobs}
    with pytest.raises(EmmyError, match=re.escape(message)):
        build_attention(op, classify(op), values, get_target("sm_90a"))


def test_tma_attention_at_ragged_lengths():
    """copy=tma where block_kv does not divide the keys (100 = 64 + 36): the same maps and main
    loop as at 256 keys (the last key block is copied from key 100 - 64 and its first 28 keys
    masked, in attention.cuh), so the tensor-map copies need only block_kv <= the keys."""
    op, built = _tma_build("split", T=100)
    _, main = built.funcs
    maps = [a.type for a in main.body.block.args if isinstance(a.type, K.TensorMapType)]
    assert [[p.data for p in m.parameters[1:]][4:6] for m in maps] == [[64, 64], [64, 64]]
    (call,) = [o for o in main.walk() if isinstance(o, K.CallOp)]
    assert ", 0, 0, 3, 128, 3, " in call.callee.data
    assert [constant(v) for v in call.operands[-5:-1]] == [100, 100, 1, 0]  # seq_q, seq_kv, causal, offset


def constant(v):
    """The value of an index constant."""
    return v.owner.value.value.data


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("fusion, T", [("fused", 256), ("split", 256), ("split", 100)])
def test_tma_attention_compiles(fusion, T, tmp_path):
    _, built = _tma_build(fusion, T)
    log, obj = nvcc_compile(cuda_source(built), "sm_90a", tmp_path)
    check_ptxas(log)
    if shutil.which("cuobjdump"):
        sass = subprocess.run(["cuobjdump", "-sass", str(obj)], capture_output=True, text=True).stdout
        assert "UTMALDG" in sass and "HGMMA" in sass


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("d, fusion", [(96, "fused"), (80, "split"), (48, "fused"), (112, "fused")])
def test_wgmma_attention_pads_the_head_dim(d, fusion, tmp_path):
    """A head dim that is not a multiple of 64 runs wgmma on tiles of whole 64-column slabs:
    each row of Q, K and V takes the next multiple of 64 columns in shared memory, Q K^T contracts over the d real
    ones (d / 16 k-steps, the last slab read in part) and P V is a wgmma of n = d; it compiles
    for sm_90a without spills into those wgmma instructions."""
    op = parse_kernel(attention_ir(T=100, D=d, knobs=attention_knobs(workers="wgmma", stages=3)))
    knobs = dict(op.knob_values(), fusion=fusion)
    built = build_attention(op, classify(op), knobs, get_target("sm_90a"))
    main = built.funcs[-1]
    (call,) = [o for o in main.walk() if isinstance(o, K.CallOp)]
    assert call.callee.data.startswith(f"emmy::attention::run<{d}, 64, 64, 4, 3, ")
    dp = -(-d // 64) * 64  # whole 64-column slabs
    assert main.smem_bytes == A.smem_bytes(d, 64, 64, 3, wgmma=True) == (64 * dp + 2 * 3 * 64 * dp) * 2 + 1024
    log, obj = nvcc_compile(cuda_source(built), "sm_90a", tmp_path)
    check_ptxas(log)
    if shutil.which("cuobjdump"):
        sass = subprocess.run(["cuobjdump", "-sass", str(obj)], capture_output=True, text=True).stdout
        assert "HGMMA.64x64x16" in sass  # Q K^T: 64 keys per block
        assert f"HGMMA.64x{d}x16" in sass and "HGMMA.64x128x16" not in sass  # P V: the real columns only
