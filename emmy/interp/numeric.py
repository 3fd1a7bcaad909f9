"""Numeric helpers shared by Emmy's reference interpreters and tests.

Values of every floating dtype are held in numpy float32 arrays; a `bf16` or `f16` value is a
float32 array whose entries are exactly representable in that dtype (see `round_to`).
"""

from __future__ import annotations

import math

import numpy as np

from emmy.dtypes import element_dtype  # noqa: F401 (re-exported: the interpreters import it from here)

LOW_PRECISION = ("bf16", "f16")


def to_numpy(t) -> np.ndarray:
    """A torch tensor as a numpy array: float32 for bf16/f16/f32, float64 for f64, integers as is."""
    import torch

    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.contiguous().numpy().copy()


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round to nearest even into `dtype` ("bf16", "f16", "f32", ...), held in float32.

    bf16 and f16 values come back as float32 arrays whose entries are exactly representable in
    that dtype (overflow gives inf, NaN stays NaN). "f32" converts to float32; "f64" to float64;
    integer dtypes ("i64", "i32", "i1", ...) to int64 / bool.
    """
    if dtype == "bf16":
        x = np.asarray(x)
        if x.dtype == np.float64:
            x = _round_f64_to_bf16_precision(x)
        with np.errstate(over="ignore"):
            x32 = np.array(x, dtype=np.float32, order="C")  # a copy of its own, rounded in place
        bits = x32.view(np.uint32)
        nan = np.isnan(x32)
        bias = bits >> np.uint32(16)  # (in place, one temporary: the inputs at 32768 tokens are large)
        bias &= np.uint32(1)
        bias += np.uint32(0x7FFF)
        bits += bias
        bits &= np.uint32(0xFFFF0000)
        if nan.any():
            np.copyto(x32, x, where=nan, casting="unsafe")
        return x32
    if dtype == "f16":
        with np.errstate(over="ignore"):  # float64 -> float16 directly: one rounding
            return np.asarray(x).astype(np.float16).astype(np.float32)
    if dtype == "f32":
        with np.errstate(over="ignore"):
            return np.asarray(x, dtype=np.float32)
    if dtype == "f64":
        return np.asarray(x, dtype=np.float64)
    if dtype == "i1":
        return np.asarray(x).astype(bool)
    if dtype.startswith("i") or dtype == "index":
        return np.asarray(x).astype(np.int64)
    raise ValueError(f"round_to: unknown dtype '{dtype}'")


def causal_masked(sq: int, sk: int, offset: int = 0, window: int | None = None) -> np.ndarray:
    """[sq, sk] booleans, True where a causal mask hides key kv from query q: kv > q + offset,
    and with a sliding `window` also kv <= q + offset - window (torch.scaled_dot_product_attention
    and tensor.causal_mask)."""
    kv, q = np.arange(sk)[None, :], np.arange(sq)[:, None] + offset
    masked = kv > q
    if window is not None:
        masked |= kv <= q - window
    return masked


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in x's float precision (numpy has none; torch's is used)."""
    import torch

    x = np.array(x, order="C")  # a writable copy for torch.from_numpy
    return torch.erf(torch.from_numpy(x)).numpy()


def _round_f64_to_bf16_precision(x: np.ndarray) -> np.ndarray:
    """Round float64 values to 8 significant bits (nearest even) in float64, so that a later
    float32 step is exact and float64 results (matmuls, sums) are rounded once, not twice."""
    bits = np.ascontiguousarray(x, dtype=np.float64).reshape(-1).view(np.uint64)
    drop = np.uint64(45)  # 52 - 7 mantissa bits
    bias = (np.uint64(1) << (drop - np.uint64(1))) - np.uint64(1) + ((bits >> drop) & np.uint64(1))
    with np.errstate(over="ignore"):
        rounded = ((bits + bias) & ~((np.uint64(1) << drop) - np.uint64(1))).view(np.float64)
    out = np.where(np.isfinite(x.reshape(-1)), rounded, x.reshape(-1))
    return out.reshape(x.shape)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| (Frobenius, in float64); inf when either holds NaN or the shapes
    differ; when ref is all zeros, the absolute error norm (0.0 when out is zero too)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape or np.isnan(out).any() or np.isnan(ref).any():
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        num = float(np.linalg.norm(out - ref))
        den = float(np.linalg.norm(ref))
    if math.isnan(num):  # inf - inf
        return math.inf
    if den == 0.0:
        return num
    return num / den
