// Emmy's device library: warp-level tensor-core tiles (ldmatrix + mma.sync.m16n8k16, sm_80+) and
// the plain-FMA thread tile used when `workers = thread`.
//
// Operands are swizzled K-major tiles in shared memory (layout: emmy_core.cuh, tile_offset):
// A rows are output rows (m), B rows are output columns (n): C[m][n] = sum_k A[m][k] * B[n][k].
// The swizzle keeps ldmatrix free of bank conflicts without padding.
//
// Accumulator layout of warp_tile<WM, WN, ...> (per thread, f32, WM/16 * WN/8 * 4 values):
//   acc[(mi * (WN / 8) + ni) * 4 + h * 2 + j] is C[mi*16 + g + 8*h][ni*8 + 2*t + j]
//   with g = lane / 4, t = lane % 4 (h, j in {0, 1}): the mma.sync C fragment layout.
#pragma once

#include "emmy_core.cuh"

namespace emmy {
namespace mma {

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                            const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(a));
}

// D = A * B + D for one 16x8x16 bf16 tile, f32 accumulate.
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp: acc += A[0:WM, 0:BK] * B[0:WN, 0:BK]^T. sA points at the warp's first A row of
// slab 0 of a tile of RA rows, sB at its first B row of a tile of RB rows (both row offsets
// multiples of 8). WM % 16 == 0, WN % 8 == 0, BK % 16 == 0. All 32 lanes call it.
template <int WM, int WN, int BK, int RA, int RB>
__device__ __forceinline__ void warp_tile(const bf16* sA, const bf16* sB, float* acc) {
  static_assert(WM % 16 == 0 && WN % 8 == 0 && BK % 16 == 0, "warp_tile shape");
  constexpr int SLAB = BK < 64 ? BK : 64, ROWB = 2 * SLAB;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    const bf16* a_slab = sA + (kk / SLAB) * RA * SLAB;
    const bf16* b_slab = sB + (kk / SLAB) * RB * SLAB;
    const int e = kk % SLAB;
    uint32_t a[WM / 16][4];
    uint32_t b[WN / 8][2];
#pragma unroll
    for (int mi = 0; mi < WM / 16; ++mi)
      ldmatrix_x4(a[mi][0], a[mi][1], a[mi][2], a[mi][3],
                  a_slab + swz<ROWB>(mi * 16 + (lane & 15), e + (lane >> 4) * 8));
#pragma unroll
    for (int nj = 0; nj < WN / 16; ++nj)
      ldmatrix_x4(b[2 * nj][0], b[2 * nj][1], b[2 * nj + 1][0], b[2 * nj + 1][1],
                  b_slab + swz<ROWB>(nj * 16 + (lane & 7) + ((lane >> 4) << 3), e + ((lane >> 3) & 1) * 8));
    if constexpr (WN % 16 == 8) {
      // lanes 0..15 give the addresses of the last 8 columns (two 8x8 matrices along k)
      ldmatrix_x2(b[WN / 8 - 1][0], b[WN / 8 - 1][1],
                  b_slab + swz<ROWB>((WN - 8) + (lane & 7), e + ((lane >> 3) & 1) * 8));
    }
#pragma unroll
    for (int mi = 0; mi < WM / 16; ++mi)
#pragma unroll
      for (int ni = 0; ni < WN / 8; ++ni) mma_16816(acc + (mi * (WN / 8) + ni) * 4, a[mi], b[ni]);
  }
}

}  // namespace mma

namespace fma {

// One thread: acc[i * TN + j] += sum_{k < BK} A[r0 + i * SM][k] * B[c0 + j * SN][k], with A and B
// swizzled tiles of RA and RB rows (sA, sB: the tiles' starts). Plain f32 FMAs; the fallback when
// tensor cores are not used.
template <int TM, int TN, int BK, int RA, int RB, int SM, int SN>
__device__ __forceinline__ void thread_tile(const bf16* sA, const bf16* sB, int r0, int c0, float* acc) {
#pragma unroll 2
  for (int k = 0; k < BK; k += 2) {
    float2 a[TM], b[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
      a[i] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sA + tile_offset<BK, RA>(r0 + i * SM, k)));
#pragma unroll
    for (int j = 0; j < TN; ++j)
      b[j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sB + tile_offset<BK, RB>(c0 + j * SN, k)));
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        acc[i * TN + j] = fmaf(a[i].x, b[j].x, acc[i * TN + j]);
        acc[i * TN + j] = fmaf(a[i].y, b[j].y, acc[i * TN + j]);
      }
  }
}

}  // namespace fma
}  // namespace emmy
