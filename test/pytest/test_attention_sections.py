"""L2 sections of attention's query blocks (AttentionPlan.section and tile_at).

Where the key and value rows of all heads do not fit in L2 together (Qwen3's 8 key-value heads
of 128 from 16384 keys on an H200), the blocks take the heads in sections that do: a section's
query blocks, longest first and head fastest, before the next section's. The section's size
(l2_section), the order (every query block once, the longest first in each section, the plain
order where one section holds every head), the grouped-query heads found through computed K
rows (the Qwen3 layer), the lowering (the grid's and the persistent blocks' index code, which
nvcc builds), the plan's facts and the tile interpreter (the same numbers in either order). The
GPU runs are test_attention_gpu.py's cases at 16384 tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import loop_examples as L

from emmy.analysis.classify import classify
from emmy.dialects.tile import KernelOp
from emmy.driver import CompileOptions, compile_traced, trace
from emmy.interp import tile_stage
from emmy.lowering import attention as A
from emmy.schedule.attention import l2_section
from emmy.schedule.plan import plan_for
from emmy.schedule.space import candidate_facts
from emmy.targets import get_target
from emmy.tuning.knobs import Ints

from attention_examples import attention_knobs, attention_ir, cuda_source, needs_nvcc, nvcc_compile, parse_kernel
from test_tile_stage import random_args, tile_module

SM90A = get_target("sm_90a")
WS = {"block_q": 64, "block_kv": 64, "workers": "wgmma_ws", "stages": 2, "warps": 4, "copy": "tma",
      "fusion": "split", "schedule": "grid"}


def _kv(tokens: int, head_dim: int = 128) -> int:
    return 2 * tokens * head_dim * 2  # K's and V's rows of one key-value head, bf16


@pytest.mark.parametrize("tokens,group,rows,section", [
    (4096, 2, 16, 16), (8192, 2, 16, 16),  # Qwen3's 8 key-value heads fit in 60 MB: one section
    (16384, 2, 16, 8), (32768, 2, 16, 4),  # 8 MB each: 4 of them; 16 MB: 2
    (8192, 4, 32, 32), (16384, 4, 32, 16), (32768, 4, 32, 8),
    (131072, 4, 32, 4),  # not even one fits: one key-value head's group
    (32768, 1, 32, 2),  # no grouped-query heads
])
def test_section_holds_the_key_value_heads_that_fit_in_l2(tokens, group, rows, section):
    assert l2_section(_kv(tokens), group, rows, SM90A.l2_bytes) == section


def _plan(l2_bytes: int, **over):
    op = parse_kernel(attention_ir(T=130, H=8, HKV=2, D=64, qwen=False, knobs=attention_knobs(workers="wgmma", stages=3)))
    info = classify(op)
    return op, info, plan_for(info, {**WS, **over}, dataclasses.replace(SM90A, l2_bytes=l2_bytes))


def test_order_takes_every_query_block_once_longest_first_in_each_section():
    """8 heads sharing 2 key-value heads, 3 query blocks of 64 (130 tokens): with room in L2
    for one key-value head (33280 bytes of K and V rows), sections of its 4 query heads."""
    _, _, one = _plan(40000)
    assert (one.group, one.kv_head_bytes, one.section, one.query_blocks) == (4, 33280, 4, 3)
    order = [one.tile_at(Ints, t) for t in range(one.tiles)]
    assert sorted(order) == sorted((r, q) for r in range(8) for q in range(3))
    assert order[:12] == [(r, q) for q in (2, 1, 0) for r in range(4)]  # section 0, longest first
    assert order[12:] == [(r, q) for q in (2, 1, 0) for r in range(4, 8)]
    _, _, whole = _plan(SM90A.l2_bytes)  # every head fits: the plain order, head fastest
    assert whole.section == whole.batch == 8
    assert [whole.tile_at(Ints, t) for t in range(whole.tiles)] == [(t % 8, 2 - t // 8) for t in range(24)]


def test_qwen3_layer_finds_its_grouped_heads_through_computed_keys():
    """In the Qwen3 layer K's rows are computed (RMSNorm, rotary embedding) from the k
    projection, read as head / 2: the plan counts 2 query heads per key-value head, so at 32768
    tokens (16 MB of K and V rows per key-value head) a section is 4 heads, at 4096 all 16."""
    for tokens, section in ((32768, 4), (4096, 16)):
        opts = CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=0, tokens=tokens, target="sm_90a",
                              stop_after="tile")
        module = compile_traced(trace(opts), opts).module
        (k,) = [k for k in module.walk() if isinstance(k, KernelOp) and k.kind_name == "attention"]
        info = classify(k)
        plan = plan_for(info, k.knob_values(), SM90A)
        assert (plan.group, plan.batch, plan.section) == (2, 16, section)
        # a fact of the candidate where the heads go in sections (none with one section)
        assert candidate_facts(info, k.knob_values(), SM90A).get("l2_section") == (section if section < 16 else None)


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("schedule", ["grid", "persistent"])
def test_sectioned_kernels_build(schedule, tmp_path):
    """The grid's blocks (from their linear index) and the persistent blocks' tile counter both
    map through the sections; nvcc builds either for sm_90a."""
    op, info, plan = _plan(40000, schedule=schedule)
    assert plan.section == 4
    built = A.build(op, info, plan)
    src = cuda_source(built)
    assert "blockIdx.y" in src if schedule == "grid" else "ws_tiles" in src
    nvcc_compile(src, "sm_90a", tmp_path)


def test_interpreter_follows_the_sections(monkeypatch):
    """The tile interpreter takes the persistent blocks' query blocks in the sectioned order:
    the same numbers as a block per query block, each element written once."""
    text, shapes = L.attention(1, 8, 2, 130, 64, target="sm_90a")
    args = random_args(shapes)
    small = dataclasses.replace(SM90A, l2_bytes=40000)
    monkeypatch.setattr(tile_stage, "_target", lambda op: small)
    tiles = "workers=wgmma_ws;stages=2;block_q=64;block_kv=64;warps=4;copy=tma;fusion=split"
    (grid,) = tile_stage.run_function(tile_module(text, f"{tiles};schedule=grid"), args)
    (persistent,) = tile_stage.run_function(tile_module(text, f"{tiles};schedule=persistent"), args)
    assert np.array_equal(grid, persistent)
