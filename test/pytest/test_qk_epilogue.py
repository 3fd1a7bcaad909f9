"""Attention's fusion = epilogue: its computed Q and K in the epilogue of the q/k/v projection.

emmy.schedule.qk_epilogue (the facts and both sides' legality), the attention's plan, decide-forks
fitting the projection for a pinned epilogue, the tile interpreter following the branch tile by
tile (against PyTorch and bit for bit against fusion = fused), the CUDA of both kernels (nvcc,
sm_80 and sm_90a, no spills), and every refusal message. GPU runs: test_attention_gpu.py
(EPILOGUE_CASES).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emmy.analysis.classify import classify
from emmy.diagnostics import EmmyError
from emmy.dialects.tile import KernelOp, KnobAttr
from emmy.driver import CompileOptions, compile_model
from emmy.schedule import qk_epilogue as E
from emmy.schedule.attention_body import DIRECT, analyze
from emmy.schedule.attention import plan as attention_plan
from emmy.schedule.plan import plan_for, plan_kernel
from emmy.targets import get_target
from emmy.tuning.knobs import ATTENTION_FUSION
from emmy.tuning.legality import check

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "pytest"))
from attention_examples import attention_ir, parse_kernel  # noqa: E402

MODEL = "Qwen/Qwen3-Embedding-0.6B"
SM90A = get_target("sm_90a")


def layer(tokens: int, *pins: str, target: str = "sm_90a", stop_after: str = "tile"):
    return compile_model(CompileOptions(model=MODEL, layer=0, tokens=tokens, target=target, pins=pins,
                                        stop_after=stop_after))


def kernels(module) -> dict[str, KernelOp]:
    return {op.kernel_name: op for op in module.walk() if isinstance(op, KernelOp)}


def hand(**kw) -> KernelOp:
    return parse_kernel(attention_ir(T=100, **kw))


def edited(pattern: str, repl: str, **kw) -> KernelOp:
    text, n = re.subn(pattern, repl, attention_ir(T=100, **kw))
    assert n, pattern
    return parse_kernel(text)


# --------------------------------------------------------------------------------------------
# The facts
# --------------------------------------------------------------------------------------------


def test_facts_of_the_qwen3_layer():
    k = kernels(layer(7).module)
    att = k["attention"]
    facts = E.find(att, classify(att))
    assert not isinstance(facts, str), facts
    assert att.operands[facts.source] is k["rms_norm_qkv_proj"].results[0]
    assert (facts.rows, facts.columns, facts.head_dim) == (7, 4096, 128)
    q, kk = facts.operands
    assert q.heads == tuple(range(16)) and q.progression == (0, 1)
    assert kk.heads == tuple(16 + b // 2 for b in range(16)) and kk.progression == (16, 2)
    assert facts.heads == tuple(range(24))  # V's heads (24 ... 31) stay raw


def test_facts_of_a_handwritten_attention():
    op = hand()
    facts = E.find(op, classify(op))
    assert not isinstance(facts, str), facts
    assert [o.heads for o in facts.operands] == [(0, 1, 2, 3), (4, 4, 5, 5)]
    body = E.direct_rows(analyze(op, classify(op)), facts)
    assert (body.q.mode, body.k.mode, body.q.stride, body.k.stride) == (DIRECT, DIRECT, 1024, 1024)


@pytest.mark.parametrize("op, message", [
    (lambda: hand(qwen=False), "Q and K are plain rows already"),
    # Q computed from a [heads, rows, d] tensor: no [rows, columns] input
    (lambda: edited(r"(%b\d+x) = (loop.load %Q\[[^\]]*\] : [^\n]*-> bf16)", r"\1r = \2\n\1 = arith.negf \1r : bf16", qwen=False),
     "Q does not read its rows, and only its own row, from one [rows, columns] input"),
    # rotate_half's partner d + 64 without the modulo: past the head
    (lambda: edited(r"arith\.remui (%\w+), %\w+ : index", r"arith.addi \1, %c1x : index"),
     "Q reads columns outside one aligned head of 128 columns"),
    # K's rotary table read by query head: the two query heads of a key head would compute two Ks
    (lambda: edited(r"loop\.load %COS\[%c1x, (%kv\d+x)", r"loop.load %COS[%h7x, \1"), "K depends on h other than through which head"),
    # K's columns where Q's are
    (lambda: edited(r", %c5x : index", r", %c1x : index"), "Q and K read the same heads of their source"),
    # V's columns where K's are
    (lambda: edited(r", %c6x : index", r", %c5x : index"), "V reads columns of the heads the epilogue would overwrite"),
])
def test_find_refusals(op, message):
    kernel = op()
    why = E.find(kernel, classify(kernel))
    assert isinstance(why, str) and message in why, why


def test_find_needs_a_column_to_read_back(monkeypatch):
    monkeypatch.setattr(E, "row_stride", lambda *a: None)
    op = hand()
    why = E.find(op, classify(op))
    assert isinstance(why, str) and "Q reads no column h * 128 + d of its source as it is" in why, why


# --------------------------------------------------------------------------------------------
# Legality: the attention's side, the projection's side
# --------------------------------------------------------------------------------------------


def test_an_isolated_attention_cannot_take_the_epilogue():
    op = hand()
    reasons = check(classify(op), dict(op.knob_values(), fusion="epilogue"), get_target("sm_90"))
    assert reasons == ["fusion=epilogue: its Q/K rows are a function argument, not the result of a contraction "
                       "kernel whose epilogue could compute them"]


def test_the_layer_attention_may_take_the_epilogue():
    att = kernels(layer(65).module)["attention"]
    assert check(classify(att), dict(att.knob_values(), fusion="epilogue"), SM90A) == []


def test_the_attention_plan_of_the_epilogue():
    att = kernels(layer(65).module)["attention"]
    info = classify(att)
    values = dict(att.knob_values())
    fused = attention_plan(info, dict(values, fusion="fused"), SM90A)
    split = attention_plan(info, dict(values, fusion="split"), SM90A)
    epi = attention_plan(info, dict(values, fusion="epilogue"), SM90A)
    assert epi.prep is None and epi.launches == fused.launches and split.launches != fused.launches
    # wgmma_ws needs plain Q and K rows: the epilogue gives them
    ws = dict(values, workers="wgmma_ws", copy="tma", block_q=64, warps=4, block_kv=64, stages=2)
    attention_plan(info, dict(ws, fusion="epilogue"), SM90A)
    with pytest.raises(EmmyError, match="workers=wgmma_ws needs plain rows of Q, K and V"):
        attention_plan(info, dict(ws, fusion="fused"), SM90A)


def test_the_attention_plan_names_its_fusions():
    op = hand()
    with pytest.raises(EmmyError, match=r"unknown fusion 'apart' \(fused, split, epilogue\)"):
        attention_plan(classify(op), dict(op.knob_values(), fusion="apart"), get_target("sm_90"))


def _projection(tokens: int = 65):
    k = kernels(layer(tokens).module)
    att, proj = k["attention"], k["rms_norm_qkv_proj"]
    facts = E.find(att, classify(att))
    assert not isinstance(facts, str)
    return facts, proj, classify(proj)


@pytest.mark.parametrize("change, message", [
    ({"block_n": 64}, "fusion=epilogue needs block_n a multiple of the head dim 128 (a tile holds whole heads"),
    ({"block_n": 128, "split_k": 2}, "fusion=epilogue needs split_k=1"),
    ({"block_n": 128, "split_k": 1, "split_tail": 2, "fusion": "split", "workers": "mma_sync", "warps": 8,
      "schedule": "grid", "copy": "cp_async", "epilogue": "together", "cluster": 1, "group_m": 1},
     "fusion=epilogue needs split_tail=1"),
])
def test_projection_refusals(change, message):
    facts, proj, info = _projection()
    pl = plan_for(info, {**proj.knob_values(), "split_tail": 1, **change}, SM90A)
    assert message in E.projection_illegal(facts, proj, info, pl, 0)


def test_projection_must_stage_the_whole_tile():
    # every legal schedule of the Qwen3 projection stages its whole tile; a layout with room for
    # fewer columns (a wider tile elsewhere) is refused
    from types import SimpleNamespace

    facts, proj, info = _projection()
    pl = plan_for(info, {**proj.knob_values(), "split_tail": 1, "block_n": 128, "split_k": 1}, SM90A)
    narrow = SimpleNamespace(bn=pl.bn, split=1, tail=1, facts=pl.facts, smem=SimpleNamespace(epilogue_width=64))
    assert ("fusion=epilogue needs the staged epilogue to hold the whole tile's bf16 results in shared memory "
            "(block_n=128; the layout stages 64 columns)") in E.projection_illegal(facts, proj, info, narrow, 0)


def test_projection_of_another_kind_or_store():
    facts, proj, info = _projection()
    att = kernels(layer(65).module)["attention"]
    assert "its rows come from a kernel of kind attention" in E.projection_illegal(facts, att, classify(att), None, 0)
    assert "result 1 of @rms_norm_qkv_proj is stored 0 times" in E.stored_columns(proj, info, 1)


def test_heads_not_in_progression(monkeypatch):
    facts, proj, info = _projection()
    q, k = facts.operands
    odd = E.QkEpilogue(facts.source, facts.rows, facts.columns, facts.head_dim, facts.batch_axes, facts.batch_shape,
                       (E.HeadOperand("q", (1, 0) + q.heads[2:], q.row_axis, q.col_axis, q.rows), k))
    pl = plan_for(info, dict(proj.knob_values(), block_n=128, split_k=1, split_tail=1), SM90A)
    assert "the heads Q reads (1, 0, 2" in E.projection_illegal(odd, proj, info, pl, 0)


# --------------------------------------------------------------------------------------------
# decide-forks: the pair
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [65, 3000])
def test_pinned_epilogue_fits_the_projection(tokens):
    k = kernels(layer(tokens, "attention.fusion=epilogue").module)
    proj, att = k["rms_norm_qkv_proj"].knob_dict(), k["attention"].knob_dict()
    assert att["fusion"].value == "epilogue" and att["fusion"].tier_name == "pinned"
    assert int(proj["block_n"].value) % 128 == 0 and proj["split_k"].value == 1 and proj["split_tail"].value == 1
    plan = plan_kernel(k["rms_norm_qkv_proj"], SM90A).parts[0].plan
    assert plan.qk is not None and plan.qk.attention is k["attention"]
    if tokens == 65:  # the rules' 32 columns would split heads
        assert proj["block_n"].reason_text.startswith("block_n=128: whole heads of 128 columns for @attention's fusion=epilogue")


def test_pins_that_forbid_the_epilogue():
    with pytest.raises(EmmyError, match=r"tile.kernel @attention: fusion=epilogue is pinned, but @rms_norm_qkv_proj "
                                        r"cannot compute Q and K in its epilogue: .*block_n a multiple of the head dim 128"):
        layer(65, "attention.fusion=epilogue", "rms_norm_qkv_proj.block_n=64")


def test_one_token_has_no_flash_attention():
    with pytest.raises(EmmyError, match="kernel 'attention' \\(reduction\\) has no knob 'fusion'"):
        layer(1, "attention.fusion=epilogue")


@pytest.mark.parametrize("tokens", [7, 65, 3000])
def test_no_tier_but_pins_answers_the_epilogue(tokens):
    fusion = kernels(layer(tokens).module)["attention"].knob_dict()["fusion"]
    assert fusion.values == ("fused", "split", "epilogue") and fusion.value in ("fused", "split")


# --------------------------------------------------------------------------------------------
# The tile interpreter
# --------------------------------------------------------------------------------------------


def _interpret(tokens: int, *pins: str):
    from emmy.execute import bind_arguments, entry_function
    from emmy.interp import tile_stage
    from emmy.interp.numeric import rel_error, to_numpy

    r = layer(tokens, *pins)
    values = {n: to_numpy(t) for n, t in {**r.traced.inputs, **r.traced.params}.items()}
    (out,) = tile_stage.run_function(r.module, bind_arguments(entry_function(r.module), values))
    ref = to_numpy(r.traced.reference(r.traced.inputs)).reshape(out.shape)
    return out, rel_error(out, ref)


@pytest.mark.parametrize("tokens, pins", [
    (7, ()), (65, ()), (65, ("attention.workers=wgmma_ws", "attention.copy=tma", "attention.block_q=64",
                             "attention.warps=4", "attention.block_kv=64", "attention.stages=2")),
    (65, ("rms_norm_qkv_proj.block_n=256",)),
])
def test_interpreter_follows_the_epilogue(tokens, pins):
    out, err = _interpret(tokens, "attention.fusion=epilogue", *pins)
    fused, fused_err = _interpret(tokens, "attention.fusion=fused")
    assert err <= 1e-2, err
    # The same bf16 Q and K, computed in another kernel: equal but for the float32 order of the
    # projection's sums, which the tile (block_n) and the CPU's matrix kernels decide; where that
    # rounds a Q or K element the other way, a few outputs move by a bf16 step (0.3% of them, at
    # most 1.5% of the output's RMS, at 65 tokens with block_n 256 on one CPU; none on another).
    o, f = out.astype(np.float32), fused.astype(np.float32)
    moved = np.abs(o - f)
    assert np.mean(moved > 0) < 0.01 and moved.max() <= 2**-5 * np.sqrt(np.mean(f**2)), (np.mean(moved > 0), moved.max())
    assert abs(err - fused_err) <= 1e-3 * max(err, fused_err) + 1e-6


def test_interpreter_sees_a_tile_without_whole_heads(monkeypatch):
    r = layer(65, "attention.fusion=epilogue")
    proj = kernels(r.module)["rms_norm_qkv_proj"]
    knobs = proj.knob_dict()
    knobs["block_n"] = KnobAttr("block_n", knobs["block_n"].values, 64, "pinned", "test")
    proj.with_knobs(knobs)
    monkeypatch.setattr(E, "projection_illegal", lambda *a: "")  # as if the plan allowed it
    from emmy.execute import run_interpreted

    with pytest.raises(AssertionError, match=r"the Q epilogue of head 0 reads outside its tile \(rows 0:64, columns 0:64\)"):
        run_interpreted(r.module, r.traced)


def test_interpreter_refuses_what_the_plan_refuses():
    r = layer(65, "attention.fusion=epilogue")
    proj = kernels(r.module)["rms_norm_qkv_proj"]
    knobs = proj.knob_dict()
    knobs["split_k"] = KnobAttr("split_k", knobs["split_k"].values, 2, "pinned", "test")
    proj.with_knobs(knobs)
    from emmy.execute import run_interpreted

    with pytest.raises(EmmyError, match=r"tile.kernel @rms_norm_qkv_proj: fusion=epilogue needs split_k=1 .* \(for @attention\)"):
        run_interpreted(r.module, r.traced)


# --------------------------------------------------------------------------------------------
# Lowering
# --------------------------------------------------------------------------------------------


def test_an_unpaired_epilogue_is_refused_before_lowering():
    from emmy.context import make_context
    from emmy.ir_io import parse_module, run_passes
    from emmy.passes.convert_tile_to_kernel import ConvertTileToKernelPass

    op = hand()
    knobs = op.knob_dict()
    knobs["fusion"] = KnobAttr("fusion", ATTENTION_FUSION, "epilogue", "pinned", "test")
    op.with_knobs(knobs)
    module = op.parent_op()
    while module.parent_op() is not None:
        module = module.parent_op()
    ctx = make_context()
    module = parse_module(ctx, str(module), "hand")
    with pytest.raises(EmmyError, match="tile.kernel @attention \\(attention\\): fusion=epilogue: its Q/K rows are a function argument"):
        run_passes(ctx, module, [ConvertTileToKernelPass()])


def test_kernel_stage_of_the_epilogue():
    from emmy.backend.plan import cuda_source

    r = layer(65, "attention.fusion=epilogue", stop_after="cuda")
    src = cuda_source(r.module)
    proj = re.search(r"void __launch_bounds__\([^)]*\) rms_norm_qkv_proj\(([^)]*)\)", src).group(1)
    assert len(re.findall(r"qk_in\d+_\d+", proj)) == 4  # q_norm and k_norm weights, cos, sin
    assert "emmy::attention::run<128, 64, 64, 4, 2, 0, 0, 0, 0, 0, 0, 1, 1>" in src  # Q, K, V direct rows
    assert "attention_prep" not in src


def test_epilogue_masks_only_the_loads_that_follow_the_row():
    """At 3000 tokens the last row tile is ragged, so the epilogue's rows past M are masked: the
    rotary tables (one row per token) load under the mask, the norm weights (one per column of a
    head, the same whatever the row) without it, so that their loads in every round of the loop
    are one load (BodyEmitter.scope's `guards`)."""
    from emmy.backend.plan import cuda_source

    src = cuda_source(layer(3000, "attention.fusion=epilogue", stop_after="cuda").module)
    body = src.split(" rms_norm_qkv_proj(", 1)[1].split("extern \"C\"", 1)[0]
    masked = set(re.findall(r"load_or<[^>]*>>\((qk_in\d+)_", body))
    plain = set(re.findall(r"reinterpret_cast<const [^>]*>\*>\((qk_in\d+)_", body))
    assert len(masked) == 2 and len(plain) == 2 and not masked & plain, (masked, plain)


_ARCH = {"sm_80": ["-arch=sm_80"], "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"]}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("target, tokens, pins", [
    ("sm_80", 65, ()),
    ("sm_90a", 7, ("attention.workers=mma_sync",)),
    ("sm_90a", 65, ()),
    ("sm_90a", 3000, ("attention.workers=wgmma_ws", "attention.copy=tma", "attention.block_q=128",
                      "attention.warps=8", "attention.block_kv=128", "attention.stages=2")),
])
def test_epilogue_compiles_without_spills(target, tokens, pins, tmp_path):
    from emmy.backend.plan import cuda_source

    src = cuda_source(layer(tokens, "attention.fusion=epilogue", *pins, target=target, stop_after="cuda").module)
    cu = tmp_path / "layer.cu"
    cu.write_text(src)
    cmd = ["nvcc", "-c", "-O3", "-std=c++17", *_ARCH[target], "-Xptxas", "-v",
           f"-I{ROOT / 'emmy' / 'backend' / 'runtime'}", str(cu), "-o", str(tmp_path / "layer.o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "warning" not in r.stderr, r.stderr[-4000:]  # (a staged value read back and never used, say)
    for name in ("rms_norm_qkv_proj", "attention"):
        log = r.stderr.split(f"Compiling entry function '{name}'")[1].split("Compiling entry function")[0]
        assert "0 bytes spill stores" in log, log


def test_the_rows_must_be_the_attentions_alone():
    k = kernels(layer(65, "attention.fusion=epilogue").module)
    proj = k["rms_norm_qkv_proj"]
    ret = proj.parent_block().last_op
    ret.operands = [*ret.operands, proj.results[0]]  # another reader of the q/k/v rows
    with pytest.raises(EmmyError, match="tile.kernel @attention \\(attention\\): fusion=epilogue: @rms_norm_qkv_proj's result is read by other kernels too"):
        E.task_of(proj)


def test_the_side_inputs_must_come_before_the_projection():
    from xdsl.dialects.test import TestOp
    from xdsl.rewriter import InsertPoint, Rewriter

    k = kernels(layer(65, "attention.fusion=epilogue").module)
    proj, att = k["rms_norm_qkv_proj"], k["attention"]
    later = TestOp(result_types=[att.operands[0].type])  # the q norm weight, computed after the projection
    Rewriter.insert_op(later, InsertPoint.after(proj))
    att.operands = [later.results[0], *att.operands[1:]]
    with pytest.raises(EmmyError, match="fusion=epilogue: its input 0 is computed after @rms_norm_qkv_proj"):
        E.task_of(proj)


# --------------------------------------------------------------------------------------------
# Qwen2: Q and K computed without norms (the q/k biases, then the rotary embedding)
# --------------------------------------------------------------------------------------------


def _qwen2(tmp_path, tokens: int, *pins: str, stop_after: str = "tile", target: str = "sm_90a"):
    from tiny_models import write_real_sized_model

    model = write_real_sized_model(tmp_path / "qwen2-0.5b", "qwen2-0.5b")
    return compile_model(CompileOptions(model=model, layer=0, tokens=tokens, target=target, pins=pins,
                                        stop_after=stop_after))


def test_qwen2_biases_are_per_head(tmp_path):
    """Qwen2's Q and K read their bias by query head and by key head (grouped 7 to 1): a head's
    value is the same whichever batch/head row computes it, so the epilogue applies."""
    from emmy.execute import run_interpreted

    r = _qwen2(tmp_path, 7, "attention.fusion=epilogue")
    att = kernels(r.module)["attention"]
    facts = E.find(att, classify(att))
    assert not isinstance(facts, str), facts
    assert facts.head_dim == 64 and [o.progression for o in facts.operands] == [(0, 1), (14, 7)]
    epi = run_interpreted(r.module, r.traced).rel_error
    fused = run_interpreted(_qwen2(tmp_path, 7, "attention.fusion=fused").module, r.traced).rel_error
    assert epi <= 1e-2 and epi == fused


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [37, 1100])
def test_qwen2_epilogue_on_the_gpu(tokens, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tiny_models import write_real_sized_model

    from emmy.backend.run import run_on_gpu

    major, minor = torch.cuda.get_device_capability()
    target = "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
    model = write_real_sized_model(tmp_path / "qwen2-0.5b", "qwen2-0.5b")
    opts = CompileOptions(model=model, layer=0, tokens=tokens, target=target, pins=("attention.fusion=epilogue",))
    report = run_on_gpu(opts, cache_dir=tmp_path)
    assert report.rel_error <= 1e-2, report.rel_error
