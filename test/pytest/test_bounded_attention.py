"""The float32 reference's attention by blocks of queries (emmy.measure.bounded_attention): the
same results as PyTorch's whole call, causal or not, grouped-query heads, masks; whole where small."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from emmy.measure.bounded_attention import blocked_sdpa, bounded_attention  # noqa: E402


def _qkv(lq=37, lk=37, heads=4, kv=2, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, lq, d, generator=g)
    k = torch.randn(1, kv, lk, d, generator=g)
    v = torch.randn(1, kv, lk, d, generator=g)
    return q, k, v


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lq,lk", [(37, 37), (5, 37)])
def test_blocks_agree_with_the_whole_call(causal, lq, lk):
    q, k, v = _qkv(lq, lk)
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3, enable_gqa=True)
    calls = []

    def counting(*a, **kw):
        calls.append(a[0].shape[-2])
        return F.scaled_dot_product_attention(*a, **kw)

    blocked = blocked_sdpa(counting, q, k, v, is_causal=causal, scale=0.3, enable_gqa=True, limit=4 * 4 * lk * 2)
    assert len(calls) > 1 and sum(calls) == lq  # by blocks of 2 queries
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-5)


def test_a_per_query_mask_is_cut_with_its_queries():
    q, k, v = _qkv(heads=2, kv=2)
    mask = torch.rand(37, 37, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[:, 0] = True
    whole = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    blocked = blocked_sdpa(F.scaled_dot_product_attention, q, k, v, attn_mask=mask, limit=2 * 37 * 4 * 5)
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-5)


def test_small_calls_run_whole():
    q, k, v = _qkv()
    calls = []
    blocked_sdpa(lambda *a, **kw: calls.append(kw) or F.scaled_dot_product_attention(*a, **kw), q, k, v,
                 is_causal=True, enable_gqa=True)
    assert len(calls) == 1 and calls[0]["is_causal"] and calls[0]["enable_gqa"]


def test_the_mode_routes_a_module_s_attention():
    q, k, v = _qkv(lq=64, lk=64)
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    with bounded_attention(limit=4 * 64 * 4 * 16):
        blocked = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        other = torch.add(q, 1.0)  # every other function unchanged
    torch.testing.assert_close(blocked, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(other, q + 1.0)
