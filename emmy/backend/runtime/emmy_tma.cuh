// The tensor memory accelerator (sm_90+): 2-D tiles copied from global to shared memory by one
// instruction, described by a tensor map (CUtensorMap) the host encodes and passes by value as a
// `const __grid_constant__ CUtensorMap` kernel parameter.
//
// Emmy's maps are 2-D views of a row-major bf16 tensor: `cols` contiguous elements per row
// (dimension 0), `rows` rows `stride` elements apart (dimension 1), boxes of box_rows x box_cols
// with box_cols * 2 = 32, 64 or 128 bytes and the swizzle of the same width, which writes exactly
// the layout of emmy::swz / tile_offset (one slab of a K-major operand tile). Elements outside
// the view land as zeros, and still count towards the bytes the barrier expects.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace emmy {

// The calling thread arrives on `bar` and adds `bytes` to the transaction count its phase waits
// for (the bytes the copies issued next will deliver).
__device__ __forceinline__ void mbar_arrive_expect_tx(long long* bar, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
#endif
}

// Fetch the map into the descriptor cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch(const CUtensorMap& map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
#endif
}

// Copy the box at element column `col`, row `row` of the map's view into `smem` (aligned to the
// swizzle's repeat, 1024 bytes for 128-byte rows); its bytes complete a transaction on `bar`.
__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap& map, int col, int row, long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(s),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(col), "r"(row), "r"(b)
      : "memory");
#endif
}

// A box of a map in planes (emmy/dialects/tensor_map.py): column `col` within plane `plane`.
__device__ __forceinline__ void tma_load_3d(void* smem, const CUtensorMap& map, int col, int row, int plane,
                                            long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(s),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(col), "r"(row), "r"(plane), "r"(b)
      : "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// Thread block clusters (sm_90+): blocks of one cluster run together and reach each other's
// shared memory. A pair of blocks sharing an operand tile (B for pairs along m, A for pairs along
// n) each copy half of it and multicast the half to both (tma_load_*_multicast); a slot is free
// again once the consumers of both blocks have released it (cluster_arrive on every block's
// `empty` barrier).
// ---------------------------------------------------------------------------------------------

// This block's rank in its cluster.
__device__ __forceinline__ int cluster_rank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return static_cast<int>(r);
}

// Every thread (not exited) of every block of the cluster meets here; shared-memory writes (and mbarrier
// initializations, after fence_mbarrier_init) before it are visible to the whole cluster after.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// Threads with nothing left to do leave the kernel (a cluster barrier then stops counting them).
__device__ __forceinline__ void exit_unless(bool keep) {
  if (!keep) asm volatile("exit;\n" ::: "memory");
}

// Make this thread's mbarrier initializations visible to the other blocks of the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// The calling warp (all its threads, after their own reads are done) arrives once on the barrier
// at `bar`'s offset in each of the cluster's CTAS blocks (this one included).
template <int CTAS>
__device__ __forceinline__ void cluster_arrive(long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
#pragma unroll
    for (int c = 0; c < CTAS; ++c) {
      uint32_t remote;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(b), "r"(c));
      asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
    }
  }
#endif
}

// tma_load_2d into the same shared-memory offset of every block of the cluster in `mask` (bit
// per rank), completing the bytes on the barrier at `bar`'s offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem, const CUtensorMap& map, int col, int row,
                                                      long long* bar, int mask) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  const uint16_t m = static_cast<uint16_t>(mask);
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(s),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(col), "r"(row), "r"(b), "h"(m)
      : "memory");
#endif
}

// tma_load_3d (a box of a map in planes) into every block of the cluster in `mask`, as
// tma_load_2d_multicast (pairs along n share the A tile, which the o projection reads in planes).
__device__ __forceinline__ void tma_load_3d_multicast(void* smem, const CUtensorMap& map, int col, int row,
                                                      int plane, long long* bar, int mask) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  const uint16_t m = static_cast<uint16_t>(mask);
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(s),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(col), "r"(row), "r"(plane), "r"(b), "h"(m)
      : "memory");
#endif
}

// Host side: the map of a view (see above; `planes` planes `plane_stride` elements apart, a 3-D
// map past one plane), for the launch functions of generated sources. The driver's encoder is
// looked up through the runtime, so nothing links against libcuda.
inline CUtensorMap tensor_map_2d(const void* base, unsigned long long rows, unsigned long long cols,
                                 unsigned long long stride, unsigned box_rows, unsigned box_cols,
                                 unsigned long long planes = 1, unsigned long long plane_stride = 0) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static Encode encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult found;
    void* fn = nullptr;
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    encode = reinterpret_cast<Encode>(fn);
  }
  CUtensorMap map{};
  const cuuint32_t rank = planes > 1 ? 3 : 2;  // (columns, rows[, planes])
  const cuuint64_t dims[3] = {cols, rows, planes};
  const cuuint64_t strides[2] = {stride * 2, plane_stride * 2};
  const cuuint32_t box[3] = {box_cols, box_rows, 1};
  const cuuint32_t step[3] = {1, 1, 1};
  const unsigned width = box_cols * 2;
  const CUtensorMapSwizzle swizzle = width == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : width == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                   : CU_TENSOR_MAP_SWIZZLE_32B;
  if (encode != nullptr) {
    encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides, box, step,
           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  return map;
}

}  // namespace emmy
