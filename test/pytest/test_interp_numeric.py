"""emmy.interp.numeric: rounding to bf16/f16 as PyTorch rounds, dtype names, relative error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    TensorType,
    i1,
    i64,
)

from emmy.diagnostics import EmmyError
from emmy.interp.numeric import element_dtype, erf, rel_error, round_to, to_numpy


def _samples() -> np.ndarray:
    rng = np.random.default_rng(0)
    special = np.array(
        [0.0, -0.0, 1.0, -1.0, 1e-40, -3e-39, 1e-45, 3.4e38, -3.4e38, 65504.0, 65520.0, 1e5,
         np.inf, -np.inf, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9, 1 + 3 * 2**-9, 2**-14, 2**-24],
        dtype=np.float32,
    )
    # ties: halfway between neighbouring bf16 values (low 16 bits exactly 0x8000)
    ties = (rng.integers(0, 2**15, 1000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    wide = rng.standard_normal(5000).astype(np.float32) * np.float32(10.0) ** rng.integers(-30, 30, 5000)
    return np.concatenate([special, ties[np.isfinite(ties)], wide.astype(np.float32)])


@pytest.mark.parametrize("name,dtype", [("bf16", torch.bfloat16), ("f16", torch.float16)])
def test_round_to_matches_torch(name, dtype):
    x = _samples()
    got = round_to(x, name)
    ref = torch.from_numpy(x).to(dtype).float().numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ref)
    # the sign of zero is kept
    assert np.array_equal(np.signbit(got), np.signbit(ref))


def test_round_to_bf16_ties_to_even():
    one = np.float32(1.0)
    ulp = np.float32(2**-7)
    x = np.array([one + ulp / 2, one + 3 * ulp / 2], dtype=np.float32)
    np.testing.assert_array_equal(round_to(x, "bf16"), [1.0, 1 + 2 * ulp])


def test_round_to_keeps_nan_and_overflows_to_inf():
    nan_low = np.array([0x7F800001, 0xFFC00000], dtype=np.uint32).view(np.float32)
    out = round_to(nan_low, "bf16")
    assert np.isnan(out).all()
    assert round_to(np.array([3.4028235e38], np.float32), "bf16")[0] == np.inf
    assert round_to(np.array([70000.0], np.float32), "f16")[0] == np.inf


def test_round_to_other_dtypes():
    x = np.array([1.5, 2.5, 1e-3])
    assert round_to(x, "f32").dtype == np.float32
    assert round_to(x, "f64").dtype == np.float64
    np.testing.assert_array_equal(round_to(np.array([3.0, 4.0]), "i64"), [3, 4])
    assert round_to(np.array([1, 0]), "i1").dtype == bool
    with pytest.raises(ValueError, match="unknown dtype"):
        round_to(x, "f8")


def test_round_to_accepts_non_contiguous_and_scalars():
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T * np.float32(1.001)
    np.testing.assert_array_equal(round_to(x, "bf16"), torch.from_numpy(x.copy()).bfloat16().float().numpy())
    assert round_to(np.float64(1 / 3), "bf16").shape == ()


def test_to_numpy():
    t = torch.tensor([[1.0, 2.5], [1 / 3, -4.0]], dtype=torch.bfloat16)
    a = to_numpy(t)
    assert a.dtype == np.float32 and a.shape == (2, 2)
    assert a[1, 0] == t.float()[1, 0].item()
    assert to_numpy(torch.ones(3, dtype=torch.float16)).dtype == np.float32
    assert to_numpy(torch.ones(3, dtype=torch.float64)).dtype == np.float64
    assert to_numpy(torch.arange(4)).dtype == np.int64
    # a copy: later changes to the tensor do not show
    f = torch.zeros(2)
    a = to_numpy(f)
    f += 1
    assert a.sum() == 0
    assert to_numpy(torch.ones(2, 3).t()).shape == (3, 2)


def test_element_dtype():
    assert element_dtype(BFloat16Type()) == "bf16"
    assert element_dtype(Float16Type()) == "f16"
    assert element_dtype(Float32Type()) == "f32"
    assert element_dtype(Float64Type()) == "f64"
    assert element_dtype(i64) == "i64"
    assert element_dtype(i1) == "i1"
    assert element_dtype(IndexType()) == "index"
    assert element_dtype(TensorType(BFloat16Type(), [2, 3])) == "bf16"
    with pytest.raises(EmmyError, match="unsupported element type tensor<1xi64>"):
        element_dtype(TensorType(TensorType(i64, [1]), [1]))


def test_rel_error():
    ref = np.array([3.0, 4.0])
    assert rel_error(ref, ref) == 0.0
    assert rel_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert rel_error(np.array([3.0, np.nan]), ref) == math.inf
    assert rel_error(ref, np.array([np.nan, 1.0])) == math.inf
    assert rel_error(np.array([np.inf, 4.0]), np.array([np.inf, 4.0])) == math.inf
    assert rel_error(np.zeros(2), np.zeros(2)) == 0.0
    assert rel_error(np.array([0.0, 2.0]), np.zeros(2)) == 2.0
    assert rel_error(np.zeros(3), np.zeros(2)) == math.inf
    # float32 inputs are measured in float64 (no overflow of the squares)
    big = np.full(4, 1e30, dtype=np.float32)
    assert rel_error(big * np.float32(1.5), big) == pytest.approx(0.5)


def test_erf_matches_math():
    x = np.linspace(-4, 4, 101).astype(np.float32)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.abs(erf(x) - ref).max() < 1e-6
    assert erf(x).dtype == np.float32


def test_round_to_rounds_float64_once():
    # just above the midpoint between the bf16 neighbours 1 and 1 + 2^-7: float32 would make it
    # an exact tie (rounded to even, down to 1); one rounding from float64 goes up
    x = np.array([1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 2**-8, 3 * 2**-9 + 2**-45])
    got = round_to(x, "bf16")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [1 + 2**-7, -(1 + 2**-7), 1.0, 3 * 2**-9])
    half = round_to(np.array([1 + 2**-11 + 2**-40]), "f16")
    assert half[0] == 1 + 2**-10
    # float64 ties, infinities and NaN
    assert round_to(np.array([np.inf, -np.inf]), "bf16").tolist() == [np.inf, -np.inf]
    assert np.isnan(round_to(np.array([np.nan]), "bf16")).all()
    assert round_to(np.array([1e300]), "bf16")[0] == np.inf
    rng = np.random.default_rng(1)
    y = rng.standard_normal(10000) * 10.0 ** rng.integers(-20, 20, 10000)
    exact = torch.from_numpy(y).to(torch.bfloat16).float().numpy()  # torch rounds float64 once
    np.testing.assert_array_equal(round_to(y, "bf16"), exact)
