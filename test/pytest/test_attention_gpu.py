"""GPU tests of Emmy's attention kernel alone, at lengths no block divides.

Causal grouped-query attention (tools/bench.py's SdpaAttention: q [1, T, heads, D], k and v
[1, T, kv_heads, D] through one F.scaled_dot_product_attention) compiled by Emmy and run on the
GPU, against torch's own attention in float32 on the same inputs. Lengths 1, 7, 63, 65, 1000,
3000 and 5000 (none a multiple of the 64- or 128-key blocks but 1, 7 and 63 fit one block), and
16384, where the heads go in L2 sections;
grouped-query ratios 1, 2, 4 and 7; head dims 48, 64, 80, 96, 112 and 128; the rules' schedules, and tensor-map
K and V copies pinned where the last key block is ragged (copied from seq_kv - block_kv, its
repeated keys masked), and the warp-specialized kernel (workers = wgmma_ws) with one and two
consumer warpgroups. Outputs start filled with NaN (`emmy.backend.run.poisoned`, at every
bind), so an element the kernel never writes fails. The Qwen3 layer's flash attention is run at
short lengths and with pinned schedules, among them Q and K computed in the q/k/v projection's
epilogue (fusion = epilogue). Skipped without a CUDA device; kernels
already built into EMMY_HOME (cached by source hash) are reused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

# (tokens, query heads, key-value heads, head dim, pins)
TMA = ("attention.copy=tma",)
WIDE_TMA = ("attention.copy=tma", "attention.block_q=128", "attention.warps=8", "attention.block_kv=128")
WS1 = ("attention.workers=wgmma_ws", "attention.copy=tma", "attention.block_q=64", "attention.warps=4",
       "attention.block_kv=64", "attention.stages=3")
WS2 = ("attention.workers=wgmma_ws", "attention.copy=tma", "attention.block_q=128", "attention.warps=8",
       "attention.block_kv=128", "attention.stages=2")
# three consumers (192 query rows): FlashAttention-3's tile for head dim 64, and 64-key blocks
# where 128 would spill (head dim 128, schedule = persistent)
WS3 = ("attention.workers=wgmma_ws", "attention.copy=tma", "attention.block_q=192", "attention.warps=12",
       "attention.block_kv=128", "attention.stages=2")
WS3_64 = WS3[:4] + ("attention.block_kv=64", "attention.stages=3")
PERSISTENT = ("attention.schedule=persistent",)
GRID = ("attention.schedule=grid",)


def split(parts: int) -> tuple[str, ...]:
    """A query block's key blocks in `parts` blocks, merged by the last (split_kv; grid only)."""
    return ("attention.schedule=grid", f"attention.split_kv={parts}")


ATTENTION_GPU_CASES = [
    # every length, Qwen3's heads (16 / 8, head dim 128), the rules' schedule
    *[(t, 16, 8, 128, ()) for t in (1, 7, 63, 65, 1000, 3000, 5000)],
    # grouped-query ratios 1, 4 and 7
    (65, 4, 4, 128, ()), (1000, 4, 4, 128, ()),
    (63, 8, 2, 128, ()), (1000, 8, 2, 128, ()),
    (7, 14, 2, 128, ()), (1000, 14, 2, 128, ()), (3000, 14, 2, 128, ()),
    # head dim 64 (Llama-3.2-1B's 32 / 8)
    *[(t, 32, 8, 64, ()) for t in (1, 7, 65, 1000, 3000)],
    (1000, 14, 2, 64, ()),
    # tensor-map K and V at ragged lengths: the last key block shifted back to end at the last key
    (300, 16, 8, 128, TMA), (1000, 16, 8, 128, TMA), (3000, 16, 8, 128, TMA), (5000, 16, 8, 128, TMA),
    (1000, 16, 8, 128, WIDE_TMA), (3000, 16, 8, 128, WIDE_TMA), (5000, 32, 8, 128, WIDE_TMA),
    (3000, 14, 2, 128, WIDE_TMA), (1000, 8, 8, 128, WIDE_TMA), (3000, 32, 8, 64, TMA),
    # warp-specialized (workers = wgmma_ws, attention_ws.cuh): one consumer warpgroup (intra
    # overlap, a 3-deep ring) and two (ping-pong, a 2-deep ring), every ratio, head dims 64, 128
    *[(t, 16, 8, 128, WS1) for t in (300, 1000, 3000, 5000)],
    *[(t, 16, 8, 128, WS2) for t in (1000, 3000, 5000)],
    (1000, 4, 4, 128, WS2), (3000, 4, 4, 128, WS1),
    (1000, 8, 4, 128, WS2), (3000, 8, 2, 128, WS2), (5000, 8, 2, 128, WS1),
    (1000, 14, 2, 128, WS2), (3000, 14, 2, 128, WS1), (5000, 32, 8, 128, WS2),
    *[(t, 32, 8, 64, WS2) for t in (1000, 3000, 5000)],
    (1000, 14, 2, 64, WS1), (3000, 8, 8, 64, WS1),
    # three consumers taking turns: head dim 64 with 128-key blocks, 128 with 64-key ones
    *[(t, 32, 8, 64, WS3) for t in (1000, 3000, 5000)], (300, 14, 2, 64, WS3), (65, 8, 8, 64, WS3_64),
    (1000, 16, 8, 128, WS3_64), (3000, 8, 4, 128, WS3_64), (5000, 16, 8, 128, WS3_64),
    # head dims 96 and 80 (Phi-3's, Phi-2's): wgmma tiles of two 64-column slabs, the second
    # read in part by Q K^T and multiplied whole by P V (its columns of O never stored)
    *[(t, 32, 32, 96, ()) for t in (1, 65, 1000, 3000)], (63, 16, 8, 80, ()), (1000, 32, 32, 80, ()),
    (3000, 32, 8, 80, ()), (300, 16, 8, 96, TMA), (3000, 16, 8, 80, WIDE_TMA), (1000, 16, 8, 96, WS1),
    (5000, 32, 8, 96, WS2), (1000, 14, 2, 80, WS1),
    # and head dims 48 and 112 (one slab read in part; two, the second read in part; under 64
    # the rules take mma.sync, so wgmma is pinned)
    (1000, 8, 8, 48, ("attention.workers=wgmma",)), (3000, 16, 8, 112, ()),
    # blocks looping over the query blocks (schedule = persistent: pinned here; the rules' own
    # choice above from three waves of query blocks whose keys fit in L2, e.g. 16 / 8 at 3000),
    # and the grid pinned where the rules would loop
    (3000, 16, 8, 128, WS2 + GRID), (5000, 32, 8, 128, WS2 + GRID),
    (300, 16, 8, 128, WS1 + PERSISTENT), (1000, 16, 8, 128, WS2 + PERSISTENT), (5000, 16, 8, 128, WS2 + PERSISTENT),
    (3000, 14, 2, 128, WS1 + PERSISTENT), (5000, 32, 8, 64, WS2 + PERSISTENT), (3000, 8, 8, 64, WS1 + PERSISTENT),
    (3000, 8, 2, 80, WS2 + PERSISTENT), (3000, 32, 8, 64, WS3_64 + PERSISTENT), (5000, 16, 8, 128, WS3_64 + PERSISTENT),
    # 16384 keys: the key and value rows of all heads exceed L2, so the blocks take the heads in
    # L2 sections (AttentionPlan.section: 8 of 16 rows, 16 of 32, 4 of 32 at head dim 96)
    (16384, 16, 8, 128, ()), (16384, 32, 8, 128, WS2 + PERSISTENT), (16384, 32, 32, 96, ()),
    # a query block's key blocks in 2, 3 or 4 parts (split_kv), the last to finish merging the
    # others: ragged lengths, one and two and three consumers, head dims 64, 96 and 128, query
    # blocks with fewer key blocks than parts (65 tokens: one or two)
    (65, 16, 8, 128, WS1 + split(2)), (300, 16, 8, 128, WS1 + split(3)), (1000, 16, 8, 128, WS2 + split(2)),
    (1000, 16, 8, 128, WS2 + split(4)), (3000, 4, 4, 128, WS2 + split(4)), (1000, 8, 2, 96, WS2 + split(3)),
    (1000, 14, 2, 64, WS3_64 + split(3)), (5000, 4, 1, 128, WS2 + split(2)),
]
EPILOGUE = ("attention.fusion=epilogue",)
QKV_PINGPONG = tuple(f"rms_norm_qkv_proj.{k}" for k in (
    "workers=wgmma_ws", "copy=tma", "schedule=persistent", "warps=8", "epilogue=pingpong", "block_m=64",
    "block_n=128", "stages=3"))
# The flash kernel in the Qwen3 layer (q/k RMSNorm + rope computed while staging, by a prologue
# or in the projection's epilogue): (tokens, pins)
LAYER_FLASH_CASES = [
    (1, ()), (63, ()), (65, ()), (65, ("attention.stages=3",) + TMA),
    (65, ("attention.stages=3", "attention.fusion=fused") + TMA),
    (200, ("attention.stages=3",) + WIDE_TMA), (1000, ("attention.fusion=fused",) + WIDE_TMA),
    # wgmma_ws needs plain Q and K rows: the prologue kernel materializes the normalized, rotated
    # ones (fusion = split); at 7 tokens it is illegal (a key block of 16 is more than the keys:
    # test_attention_ws.py checks the error), at 1 the attention is no flash kernel
    (63, ("attention.fusion=split", "attention.workers=wgmma_ws", "attention.copy=tma", "attention.block_q=64",
          "attention.warps=4", "attention.block_kv=32", "attention.stages=2")),
    (65, ("attention.fusion=split",) + WS1), (200, ("attention.fusion=split",) + WS2),
    (512, ("attention.fusion=split",) + WS2 + split(2)), (1000, ("attention.fusion=split",) + WS2 + split(3)),
    (1000, ("attention.fusion=split",) + WS2), (3000, ("attention.fusion=split",) + WS1),
    (4096, ("attention.fusion=split",) + WS2[:-1] + ("attention.stages=3",)),
    # Q and K normalized and rotated in the q/k/v projection's epilogue (fusion = epilogue; block_n
    # whole heads, decide-forks fits it), read as plain rows by mma_sync, wgmma and wgmma_ws
    # attention; the projection's block_n pinned to 128 and 256 (at 1 token the attention is no
    # flash kernel and has no fusion knob)
    *[(t, EPILOGUE) for t in (7, 65, 1000, 3000)],
    *[(t, EPILOGUE + ("attention.workers=mma_sync",)) for t in (7, 65, 1000, 3000)],
    (65, EPILOGUE + WS1), (1000, EPILOGUE + WS2), (3000, EPILOGUE + WS1), (3000, EPILOGUE + WS2),
    (65, EPILOGUE + ("rms_norm_qkv_proj.block_n=256",)), (1000, EPILOGUE + ("rms_norm_qkv_proj.block_n=128",)),
    (3000, EPILOGUE + ("rms_norm_qkv_proj.block_n=128",)), (1000, EPILOGUE + ("rms_norm_qkv_proj.block_n=256",) + WS2),
    # ... in a pingpong q/k/v kernel: each consumer warpgroup's epilogue beside the other's k loop
    (1000, EPILOGUE + QKV_PINGPONG), (3000, EPILOGUE + QKV_PINGPONG + WS2),
]
# tokens from which the module alone is one flash kernel: loop-fuse counts only reductions over
# parameters when it sizes 'short' (short_limit), so attention alone fuses as a model's does
FLASH_FROM = 2


def case_id(case) -> str:
    t, h, kv, d, pins = case
    return f"T{t}-{h}x{kv}-d{d}" + ("-" + ",".join(p.split(".", 1)[1] for p in pins) if pins else "")


def _target() -> str:
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def _cache(tmp_path) -> Path:
    return Path(os.environ["EMMY_HOME"]) if os.environ.get("EMMY_HOME") else tmp_path


def traced_attention(tokens: int, heads: int, kv_heads: int, head_dim: int):
    """tools/bench.py's attention module on random inputs, traced."""
    sys.path.insert(0, str(ROOT / "tools"))
    from bench import make_attention

    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    src = ModelSource(spec="tools/bench.py:make_attention", kind="factory", model_id="sdpa-attention",
                      factory=lambda: make_attention(tokens, heads, kv_heads, head_dim))
    return trace_layer(src, 0, tokens)


def compiled(case, target: str):
    """(traced module, Emmy's launch plan) of one case."""
    from emmy.backend.plan import launch_plan
    from emmy.driver import CompileOptions, compile_traced

    tokens, heads, kv_heads, head_dim, pins = case
    traced = traced_attention(tokens, heads, kv_heads, head_dim)
    opts = CompileOptions(model="sdpa-attention", layer=0, tokens=tokens, target=target, pins=pins)
    return traced, launch_plan(compile_traced(traced, opts).module)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", ATTENTION_GPU_CASES, ids=case_id)
def test_attention_matches_torch(case, tmp_path):
    from emmy.backend.run import GpuLayer

    target = _target()
    if case[4] and target != "sm_90a":
        pytest.skip("tensor-map attention needs wgmma (sm_90a)")
    traced, plan = compiled(case, target)
    assert ("emmy::attention::run" in plan.source) == (case[0] >= FLASH_FROM)
    layer = GpuLayer(plan, target, _cache(tmp_path))
    layer.bind({k: v.cuda() for k, v in {**traced.inputs, **traced.params}.items()})
    layer.launch()
    torch.cuda.synchronize()
    (out,) = layer.outputs()
    from bench import attention_reference  # tools/, on sys.path since traced_attention

    # in float32 one query head at a time (tools/bench.py): all heads at once take T x T scores a
    # head together (32 GiB at 16384 tokens and 32 heads), more than a GPU shared with other
    # tests' workers has to spare
    ref = attention_reference(*[x.cuda() for x in traced.inputs.values()])
    out = out.float().reshape(ref.shape)
    assert torch.isfinite(out).all(), "an output element was never written (NaN) or overflowed"
    err = ((out - ref).norm() / ref.norm()).item()
    assert err <= 1e-2, err


def layer_case_id(case) -> str:
    t, pins = case
    return f"T{t}" + ("-" + ",".join(p.split(".", 1)[1] for p in pins) if pins else "")


def layer_options(tokens: int, pins, target: str):
    from emmy.driver import CompileOptions

    return CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=0, tokens=tokens, target=target, pins=pins)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", LAYER_FLASH_CASES, ids=layer_case_id)
def test_layer_flash_attention_at_short_lengths(case, tmp_path):
    from emmy.backend.run import run_on_gpu

    tokens, pins = case
    target = _target()
    if pins and target != "sm_90a":
        pytest.skip("tensor-map attention needs wgmma (sm_90a)")
    report = run_on_gpu(layer_options(tokens, pins, target), cache_dir=_cache(tmp_path))
    assert report.rel_error <= 1e-2, report.rel_error
