"""tools/bench.py's attention case without a GPU: the module (causal grouped-query SDPA), its
FLOP count, the --attention-heads option, the table, and that Emmy compiles the module to one
flash-attention kernel (tensor-map K and V where pinned, at a ragged length too)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import bench  # noqa: E402


def test_module_is_causal_grouped_query_attention():
    """SdpaAttention on [1, T, heads, D] inputs equals causal softmax(q k^T / sqrt(D)) v with
    each key-value head serving heads / kv_heads query heads, written out by hand."""
    module, (q, k, v) = bench.make_attention(37, heads=6, kv_heads=2, head_dim=16)
    q, k, v = q.double(), k.double(), v.double()
    out = module(q, k, v)
    assert out.shape == (1, 37, 6, 16)
    for h in range(6):
        qh, kh, vh = q[0, :, h], k[0, :, h // 3], v[0, :, h // 3]
        s = qh @ kh.T / 4.0
        s = s.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), float("-inf"))
        assert torch.allclose(out[0, :, h], torch.softmax(s, -1) @ vh, atol=1e-12)


def test_reference_one_head_at_a_time_is_the_module_in_f32():
    """The bench's reference (one query head at a time, so 32768 tokens fit) is the module's
    output on f32 inputs, grouped-query heads mapped to their key-value head."""
    module, (q, k, v) = bench.make_attention(29, heads=6, kv_heads=2, head_dim=16)
    want = module(*(x.float() for x in (q, k, v)))
    got = bench.attention_reference(q, k, v)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-6)
    # a different key-value head for the second group changes only that group's outputs
    k2 = k.clone()
    k2[:, :, 1] = 0
    moved = (bench.attention_reference(q, k2, v) - got).abs().amax(dim=(0, 1, 3))
    assert (moved[:3] == 0).all() and (moved[3:] > 0).all()


def test_flops_count_the_causal_half():
    assert bench.attention_flops(4096, 16) == 4 * 4096 * 4096 * 16 * 128 // 2


def test_heads_option():
    assert bench.parse_heads("16/8,32/8") == [(16, 8, 128), (32, 8, 128)]
    assert bench.parse_heads("32/8/64") == [(32, 8, 64)]
    from emmy.diagnostics import EmmyError

    for bad in ("16/5", "16/8/60", "16/8/64/2", "16/0"):
        with pytest.raises(EmmyError, match=re.escape(
                f"--attention-heads '{bad}': expected QUERY/KV[/HEAD_DIM][,...] with the key-value heads dividing "
                f"the query heads and the head dim a multiple of 8, got '{bad}'")):
            bench.parse_heads(bad)


def test_bad_heads_is_a_message(tmp_path):
    """A bad --attention-heads: the reason and exit 1, no traceback."""
    import os

    p = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "--build-only", "--cases", "attention",
                        "--attention-heads", "16x8"], capture_output=True, text=True,
                       env={**os.environ, "EMMY_HOME": str(tmp_path)})
    assert p.returncode == 1
    assert "error: --attention-heads '16x8': expected QUERY/KV" in p.stderr
    assert "Traceback" not in p.stderr


def test_attention_table():
    row = {"case": "attention 16/8 T=3000", "flops": bench.attention_flops(3000, 16), "emmy_s": 100e-6,
           "sdpa-cudnn_s": 80e-6}
    table = bench.format_attention_table([row], ["emmy", "sdpa-cudnn", "sdpa-flash"])
    head, _, line = table.splitlines()
    assert head.split(" | ")[1:4] == ["emmy us", "sdpa-cudnn us", "sdpa-flash us"]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["attention 16/8 T=3000", "100.0", "80.0", "fail"]
    assert cells[4:7] == ["369", "461", "-"]  # TFLOP/s: 3000^2 * 16 * 128 * 2 / 100 us
    assert cells[7:] == ["1.25", "-"]  # emmy / cudnn, emmy / flash


@pytest.mark.parametrize("tokens, pins, tma, workers", [(3000, (), True, 2), (3000, ("attention.copy=cp_async",), False, 1),
                                                       (4096, (), True, 2)])
def test_module_compiles_to_one_flash_kernel(tokens, pins, tma, workers):
    """The module at 3000 and 4096 tokens: one flash-attention kernel (q, k, v read in place as
    direct rows); by the rules the warp-specialized kernel (wgmma_ws: 2) with tensor-map K and V
    in 128 x 128 tiles, at the ragged 3000 too, its blocks looping over the query blocks (384 and
    512 of them: three waves and more, K and V in L2), the producer's loop then the consumers';
    cp.async copies pinned, the wgmma kernel (1), which can run them, a block per query block."""
    traced, flops, _ = bench.attention_case(tokens, 16, 8)
    plan, _ = bench.emmy_plan(traced, "sm_90a", bench.EmmyBuild(pins))
    calls = re.findall(r"emmy::attention::run(?:_ws)?<[^>]*>", plan.source)
    if workers == 2:  # persistent: the roles' run_ws, setmaxnreg's budgets in ws_role
        assert [c.rsplit(", ", 2)[-2] for c in calls] == ["0", "1"], calls
        assert all(c.startswith("emmy::attention::run_ws<128, 128, 128, 8, 2, ") for c in calls)
        assert len(re.findall(r"emmy::attention::ws_role<128, 128, 128, 8, 2, \d, \d+, \d+>", plan.source)) == 2
    else:  # WGMMA, O staged, a block per query block
        (call,) = calls
        assert call.startswith("emmy::attention::run<128, ") and re.search(rf", {workers}, 1(, \d+, \d+)?>$", call)
    assert all((", 3, 1024, 3, 1024, " in c) == tma for c in calls)  # K and V rows of 8 heads x 128 through tensor maps
    assert len(plan.kernels) == 1
    assert flops == bench.attention_flops(tokens, 16)


def test_head_dim_of_the_case():
    """A third number in the heads spec is the head dim (Llama-3.2-1B's 64): the traced module's
    q, k and v have it, and the flops and bytes count it."""
    traced, flops, bytes_ = bench.attention_case(256, 32, 8, 64)
    assert [tuple(x.shape) for x in traced.inputs.values()] == [(1, 256, 32, 64), (1, 256, 8, 64), (1, 256, 8, 64)]
    assert flops == bench.attention_flops(256, 32, 64) == 2 * 256 * 256 * 32 * 64
    assert bytes_ == 2 * 256 * 64 * (2 * 32 + 2 * 8)
