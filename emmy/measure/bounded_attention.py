"""The float32 reference's attention in bounded memory.

A case's reference runs its PyTorch module in float32 (`emmy.measure.layer.reference`). For
float32, `F.scaled_dot_product_attention` with grouped-query heads falls back to the math
back-end, which holds the whole score matrix: at 32768 tokens and 16 heads, 64 GiB, more than
the card has beside the case. Inside `bounded_attention()`, a call whose score matrix would pass
`SCORE_BYTES` is computed a block of queries at a time (each block with its own causal mask and
only the keys it can see), with the same arithmetic per element; smaller calls run unchanged.
"""

from __future__ import annotations

import math

SCORE_BYTES = 1 << 30  # the most score-matrix bytes one math-back-end call may hold


def _blocks(queries: int, per_query_bytes: int, limit: int) -> list[tuple[int, int]]:
    """[start, end) runs of queries, each holding at most `limit` bytes of scores."""
    step = max(1, limit // max(1, per_query_bytes))
    return [(s, min(queries, s + step)) for s in range(0, queries, step)]


def blocked_sdpa(sdpa, q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale=None, enable_gqa: bool = False, limit: int = SCORE_BYTES):
    """`sdpa(q, k, v, ...)` (PyTorch's scaled_dot_product_attention), by blocks of queries when its
    score matrix (batch x heads x queries x keys, 4 bytes each) passes `limit`. Causal is PyTorch's
    (top-left aligned: query i sees keys 0..i). A call with dropout, or a mask that is not per
    query, runs whole."""
    import torch

    *lead, lq, _ = q.shape
    lk = k.shape[-2]
    per_query = math.prod(lead) * lk * 4
    mask_per_query = attn_mask is None or (attn_mask.dim() >= 2 and attn_mask.shape[-2] == lq)
    if per_query * lq <= limit or dropout_p or not mask_per_query or (is_causal and attn_mask is not None):
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)
    if enable_gqa and k.shape[-3] != q.shape[-3]:  # each query head's key-value head, spelled out
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    outs = []
    for s, e in _blocks(lq, per_query, limit):
        if is_causal:
            seen = min(lk, e)
            rows = torch.arange(s, e, device=q.device)[:, None]
            mask = torch.arange(seen, device=q.device)[None, :] <= rows
            outs.append(sdpa(q[..., s:e, :], k[..., :seen, :], v[..., :seen, :], attn_mask=mask, scale=scale))
        else:
            m = None if attn_mask is None else attn_mask[..., s:e, :]
            outs.append(sdpa(q[..., s:e, :], k, v, attn_mask=m, scale=scale))
    return torch.cat(outs, dim=-2)


def bounded_attention(limit: int = SCORE_BYTES):
    """A context in which every `F.scaled_dot_product_attention` call goes through `blocked_sdpa`."""
    from emmy.frontend.sdpa_mode import sdpa_through

    return sdpa_through(lambda sdpa, *args, **kwargs: blocked_sdpa(sdpa, *args, limit=limit, **kwargs))


__all__ = ["SCORE_BYTES", "blocked_sdpa", "bounded_attention"]
