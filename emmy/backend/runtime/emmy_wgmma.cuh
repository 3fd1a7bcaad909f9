// Emmy's device library: warpgroup tensor-core tiles with wgmma (sm_90a only).
//
// Shared-memory operands: swizzled K-major tiles (emmy_core.cuh, tile_offset), slabs of 32, 64
// or 128 bytes per row (BK = 16, 32, or a multiple of 64), tiles 1024-byte aligned; tile_rs
// takes A from registers and B MN-major (rows of k, 128-byte swizzled slabs of 64 n).
//
// Accumulators of tile<N, ...> (per thread of the warpgroup, f32, N/2 values), warp w = warp
// index within the warpgroup, g = lane / 4, t = lane % 4:
//   acc[j * 4 + h * 2 + i] is C[16 * w + g + 8 * h][8 * j + 2 * t + i]   (j < N/8; h, i in {0, 1})
//
// Ordering: shared memory written by ordinary stores or cp.async must be followed by
// emmy::fence_proxy_async() in each writing thread and a barrier before tile() reads it; tile()
// issues the wgmmas and commits them as one group; wait<0>() and settle() before reading the
// accumulators, wait<0>() before overwriting the operands.
#pragma once

#include "emmy_core.cuh"

namespace emmy {
namespace wgmma {

// Shared-memory matrix descriptor: K-major, ROWB-byte swizzle (32, 64, 128), 8-row groups
// 8 * ROWB bytes apart.
template <int ROWB>
__device__ __forceinline__ uint64_t desc(const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  constexpr uint64_t layout = ROWB == 128 ? 1 : (ROWB == 64 ? 2 : 3);
  uint64_t d = 0;
  d |= static_cast<uint64_t>((a & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;                  // leading byte offset (unused when swizzled)
  d |= static_cast<uint64_t>((8 * ROWB) >> 4) << 32;    // stride byte offset: 8 rows
  d |= layout << 62;                                    // swizzle mode
  return d;
}

// A descriptor moved `bytes` further into shared memory: its start address field (bits 0-13,
// in 16-byte units) stepped. Tiles lie below 256 KiB, so the field never carries into the rest
// and only the low word changes (one integer add, the high word shared by every step).
__device__ __forceinline__ uint64_t desc_step(uint64_t d, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(d) + (bytes >> 4);
  return (d & 0xFFFFFFFF00000000ull) | lo;
}

// Shared-memory matrix descriptor: MN-major B ("transposed": each 128-byte row holds 64
// consecutive n at one k), 128-byte swizzle, 8-row groups 1024 bytes apart, groups of 64 n
// (slabs) `slab_bytes` apart.
__device__ __forceinline__ uint64_t desc_mn(const void* smem, uint32_t slab_bytes) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = 0;
  d |= static_cast<uint64_t>((a & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((slab_bytes & 0x3FFFF) >> 4) << 16;  // leading byte offset: next 64 n
  d |= static_cast<uint64_t>(1024 >> 4) << 32;                      // stride byte offset: next 8 k
  d |= static_cast<uint64_t>(1) << 62;                              // 128-byte swizzle
  return d;
}

template <int R>
__device__ __forceinline__ void fence_operand(float* acc) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// The same for register A operands: they must stay in place until their wgmma group is waited.
template <int R>
__device__ __forceinline__ void fence_operand_u32(uint32_t* a) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

}  // namespace wgmma
}  // namespace emmy

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "emmy_wgmma_ops.cuh"
#define EMMY_HAS_WGMMA 1
#else
#define EMMY_HAS_WGMMA 0
#endif

namespace emmy {

// setmaxnreg (sm_90a): a warpgroup of a warp-specialized block raises or lowers the registers
// each of its threads may use (a multiple of 8, 24 to 256); every thread of the warpgroup executes
// the same one, and the block's total must stay within what it was launched with.
template <int N>
__device__ __forceinline__ void regs_raise() {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

template <int N>
__device__ __forceinline__ void regs_lower() {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

namespace wgmma {

template <int N>
struct dependent_false {
  static constexpr bool value = false;
};

__device__ __forceinline__ void fence() {
#if EMMY_HAS_WGMMA && defined(__CUDA_ARCH__)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void commit() {
#if EMMY_HAS_WGMMA && defined(__CUDA_ARCH__)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int PENDING>
__device__ __forceinline__ void wait() {
#if EMMY_HAS_WGMMA && defined(__CUDA_ARCH__)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// After the last wait<0>() of a tile, before anything reads the accumulators: each is written in
// place (+0.0 added: exact, but for a negative zero, which becomes +0). ptxas keeps a write of an
// accumulator after the wait and every later read after that write; a plain read it has been seen
// to schedule above the wait (CUDA 13.0: two bf16 conversions of neighbouring accumulators fused
// into one F2FP.PACK_AB, the slices = cols epilogue; tools/kernel_checks/wgmma_hazards.py finds
// such reads in a kernel's SASS).
template <int R>
__device__ __forceinline__ void settle(float* acc) {
#if EMMY_HAS_WGMMA && defined(__CUDA_ARCH__)
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("add.f32 %0, %0, 0f00000000;\n" : "+f"(acc[i]));
#endif
}

// One warpgroup (128 consecutive threads starting at a multiple of 128): acc += A[0:64, 0:BK] *
// B[0:N, 0:BK]^T from swizzled tiles of RA and RB rows; sA points at the warpgroup's first A
// row of slab 0 (a multiple of 8 rows into the tile), sB at its first B row. Issues BK/16 wgmmas
// and commits them as one group (no wait). ZERO: acc = A * B^T instead (acc need not be set).
// SLAB: columns per slab (by default BK up to 64, else 64); BK need not fill the last slab (the
// tiles of a head dim of 80 or 96 are two 64-column slabs, the second read only in part).
template <int N, int BK, int RA, int RB, bool ZERO = false, int SLAB = (BK < 64 ? BK : 64)>
__device__ __forceinline__ void tile(const bf16* sA, const bf16* sB, float* acc) {
#if EMMY_HAS_WGMMA
  static_assert(BK % 16 == 0 && (SLAB == 16 || SLAB == 32 || SLAB == 64) && (BK <= SLAB || SLAB == 64) &&
                    N % 8 == 0 && N <= 256,
                "wgmma tile shape");
  constexpr int ROWB = 2 * SLAB, STEPS = SLAB / 16;
  fence_operand<N / 2>(acc);
  fence();
  // one descriptor per operand; each k-step steps its address by a constant
  const uint64_t da = desc<ROWB>(sA), db = desc<ROWB>(sB);
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    const int s = kk / STEPS, off = (kk % STEPS) * 16;
    mma_async<N>(desc_step(da, 2 * (s * RA * SLAB + off)), desc_step(db, 2 * (s * RB * SLAB + off)), acc,
                 ZERO && kk == 0 ? 0 : 1);
  }
  commit();
  fence_operand<N / 2>(acc);
#else
  static_assert(dependent_false<N>::value, "emmy::wgmma::tile needs sm_90a (-gencode arch=compute_90a,code=sm_90a)");
#endif
}

// One warpgroup: acc += A[0:64, 0:16 * KSTEPS] * B[0:16 * KSTEPS, 0:N] with A in registers
// (a[kk]: the m16n8k16 A fragment of k-step kk for the warp's 16 rows; the accumulator layout
// of tile() packed to bf16 pairs is exactly that) and B MN-major in shared memory: ROWS rows of
// k, each the 64 n of one slab (128-byte swizzled, 1024-byte aligned; slabs ROWS * 64 elements
// apart), sB at row 0 of slab 0. Issues KSTEPS wgmmas and commits them as one group (no wait).
// N need not fill the last slab (a head dim of 80 or 96 reads 16 or 32 of its 64 columns;
// checked on an H200 by the GPU tests of attention at those head dims).
template <int N, int KSTEPS, int ROWS>
__device__ __forceinline__ void tile_rs(const uint32_t (*a)[4], const bf16* sB, float* acc) {
#if EMMY_HAS_WGMMA
  static_assert(N % 16 == 0 && N <= 256, "wgmma register-A tile: N a multiple of 16, at most 256");
  fence_operand<N / 2>(acc);
  fence();
  const uint64_t db = desc_mn(sB, ROWS * 64 * 2);
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) mma_async_rs<N>(a[kk], desc_step(db, 2 * kk * 16 * 64), acc);
  commit();
  fence_operand<N / 2>(acc);
#else
  static_assert(dependent_false<N>::value, "emmy::wgmma::tile_rs needs sm_90a (-gencode arch=compute_90a,code=sm_90a)");
#endif
}

}  // namespace wgmma
}  // namespace emmy
