// Emmy's device library, core part: vectors, conversions, warp and group reductions, cp.async,
// mbarriers and named barriers, the swizzled tile layout, split-k counters.
//
// Generated kernels (emmy/passes/convert_kernel_to_cuda.py) include "emmy.cuh", which includes
// this file. Everything is header-only, inline, and usable from sm_80 on.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace emmy {

typedef __nv_bfloat16 bf16;

// A vector of N elements moved in one access (4, 8 or 16 bytes).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
  __device__ __forceinline__ T& operator[](int i) { return v[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};

// A bf16 vector from f32 values rounded to nearest, two at a time: one packed conversion
// (F2FP) per pair instead of one per value, which on sm_90 runs at a fraction of the rate; the
// bits are those of __float2bfloat16_rn on each value.
template <class... F>
__device__ __forceinline__ Vec<bf16, sizeof...(F)> bf16_pairs(F... f) {
  constexpr int N = sizeof...(F);
  static_assert(N % 2 == 0, "emmy::bf16_pairs takes an even number of values");
  const float x[N] = {static_cast<float>(f)...};
  Vec<bf16, N> r;
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(x[i], x[i + 1]);
    r.v[i] = p.x;
    r.v[i + 1] = p.y;
  }
  return r;
}

// All-zero bits of any trivially copyable type of 4, 8 or 16 bytes (vectors), or a scalar.
template <class V>
__device__ __forceinline__ V zero() {
  static_assert(sizeof(V) % 4 == 0, "emmy::zero needs a multiple of 4 bytes");
  union {
    uint32_t w[sizeof(V) / 4];
    V v;
  } u;
#pragma unroll
  for (int i = 0; i < (int)(sizeof(V) / 4); ++i) u.w[i] = 0u;
  return u.v;
}

// base[i] read as a V where `ok`, else `otherwise`, without a branch: the load itself always
// happens, at base[i] or at base[0] (the tensor's first element, always there), and the select
// follows. A guarded load (`ok ? base[i] : 0`) becomes a branch around it, and ptxas keeps each
// such load in its own block: the epilogue's masked residual loads then ran one after another,
// each waiting out its own trip to memory (the o projection at 3000 tokens, Nsight Compute
// 2026-12-07); unguarded, the unrolled loop's loads can all be in flight at once.
template <class V, class E>
__device__ __forceinline__ V load_or(const E* base, int i, bool ok, V otherwise) {
  const V v = *reinterpret_cast<const V*>(base + (ok ? i : 0));
  return ok ? v : otherwise;
}

// base[i] = v as a V where `ok`, as one predicated store (global memory: `base` is a kernel
// argument) instead of a branch around it, so that a loop of guarded stores stays one block of
// straight code and the loads of later iterations (load_or) can be issued before earlier stores.
// Other sizes (a 1-byte bool or i8) keep the guarded store.
template <class V, class E>
__device__ __forceinline__ void store_if(E* base, int i, bool ok, const V& v) {
  E* const p = base + i;
  if constexpr (sizeof(V) != 2 && sizeof(V) != 4 && sizeof(V) != 8 && sizeof(V) != 16) {
    if (ok) *reinterpret_cast<V*>(p) = v;
  } else if constexpr (sizeof(V) == 2) {
    unsigned short w;
    __builtin_memcpy(&w, &v, 2);
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.b16 [%1], %2;\n}\n" ::"r"((int)ok), "l"(p), "h"(w)
                 : "memory");
  } else {
    uint32_t w[sizeof(V) / 4];
    __builtin_memcpy(w, &v, sizeof(V));
    if constexpr (sizeof(V) == 4) {
      asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.b32 [%1], %2;\n}\n" ::"r"((int)ok), "l"(p), "r"(w[0])
                   : "memory");
    } else if constexpr (sizeof(V) == 8) {
      asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.v2.b32 [%1], {%2, %3};\n}\n" ::"r"((int)ok), "l"(p),
                   "r"(w[0]), "r"(w[1])
                   : "memory");
    } else {
      asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.v4.b32 [%1], {%2, %3, %4, %5};\n}\n" ::"r"((int)ok),
                   "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                   : "memory");
    }
  }
}

// Round a pointer into shared memory up to a multiple of ALIGN bytes.
template <int ALIGN>
__device__ __forceinline__ unsigned char* align_smem(unsigned char* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  const uint32_t r = (a + (ALIGN - 1)) & ~uint32_t(ALIGN - 1);
  return p + (r - a);
}

// ---------------------------------------------------------------------------------------------
// Reductions. All lanes of the warp (or threads of the group) must call them together.
// ---------------------------------------------------------------------------------------------

// Sum / max over groups of WIDTH consecutive lanes (WIDTH a power of two <= 32); every lane of a
// group gets the group's result.
template <int WIDTH = 32>
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// warp_sum for code that whole groups of WIDTH lanes enter together, where other lanes of the warp
// may not (a branch on a value the group shares): the shuffles name the group's lanes alone.
template <int WIDTH>
__device__ __forceinline__ float lane_group_sum(float x) {
  static_assert(WIDTH >= 1 && WIDTH <= 32 && (WIDTH & (WIDTH - 1)) == 0, "a power of two up to a warp");
  unsigned group = 0xffffffffu;
  if constexpr (WIDTH < 32) group = ((1u << WIDTH) - 1u) << ((threadIdx.x & 31u) & ~(WIDTH - 1u));
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) x += __shfl_xor_sync(group, x, o);
  return x;
}

template <int WIDTH = 32>
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum / max over groups of GROUP consecutive threads of the block (GROUP a power of two; when
// GROUP > 32, whole warps). `scratch` is shared memory of at least blockDim/32 floats. Every
// thread of the block must call it (it contains barriers when GROUP > 32); every thread of a group
// gets the group's result.
template <int GROUP>
__device__ __forceinline__ float group_sum(float x, float* scratch) {
  if constexpr (GROUP <= 32) {
    return warp_sum<GROUP>(x);
  } else {
    constexpr int W = GROUP / 32;  // warps per group
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    x = warp_sum<32>(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    const int first = (warp / W) * W;
    float r = lane < W ? scratch[first + lane] : 0.0f;
    r = warp_sum<(W < 32 ? W : 32)>(r);
    r = __shfl_sync(0xffffffffu, r, 0);
    __syncthreads();
    return r;
  }
}

template <int GROUP>
__device__ __forceinline__ float group_max(float x, float* scratch) {
  if constexpr (GROUP <= 32) {
    return warp_max<GROUP>(x);
  } else {
    constexpr int W = GROUP / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    x = warp_max<32>(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    const int first = (warp / W) * W;
    float r = lane < W ? scratch[first + lane] : -INFINITY;
    r = warp_max<(W < 32 ? W : 32)>(r);
    r = __shfl_sync(0xffffffffu, r, 0);
    __syncthreads();
    return r;
  }
}

// ---------------------------------------------------------------------------------------------
// Asynchronous copies global -> shared (sm_80+), 16 bytes per thread and call.
// ---------------------------------------------------------------------------------------------

// Copy 16 bytes; when `pred` is false nothing is read and the 16 bytes of `smem` become zeros.
// `gmem` must be a valid, 16-byte aligned address even when `pred` is false (pass a clamped one).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
               : "memory");
}

// Copy 16 bytes, always in range.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Make this thread's earlier ordinary (generic-proxy) shared-memory writes visible to the async
// proxy (wgmma, bulk copies). Call in every writing thread before the barrier. No-op before sm_90.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Programmatic dependent launch (sm_90+). A kernel launched with the programmatic stream
// serialization attribute may start while the kernel before it on the stream is finishing:
// grid_dependency_wait() blocks until that kernel has completed and its writes are visible, so
// it comes before the kernel's first access to global memory. allow_dependents() lets the next
// kernel of the stream start launching (its blocks take the multiprocessors this grid frees).
// Both are no-ops when the launch had no such attribute, and before sm_90.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// Pipelines between warps (sm_90+): shared-memory mbarriers and named barriers.
//
// A warp-specialized k loop has, per pipeline slot, a `full` barrier (each producer thread
// arrives twice: once its stores are done, once its cp.async copies land) and an `empty`
// barrier (its consumers arrive once their tensor-core reads of the slot are done). Round j of a slot completes phase j, so a
// waiter of round j waits for parity j & 1; waiting for parity 1 on a fresh barrier returns at
// once (the producer's first pass over the empty slots). Barriers are 8-byte shared words.
// ---------------------------------------------------------------------------------------------

// Initialize a barrier expecting `count` arrivals per phase. One thread; then __syncthreads().
__device__ __forceinline__ void mbar_init(long long* bar, int count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(count) : "memory");
#endif
}

// Arrive (release: this thread's earlier shared-memory writes are visible to whoever waits).
__device__ __forceinline__ void mbar_arrive(long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(b) : "memory");
#endif
}

// The calling warp arrives once, after every one of its threads got here (__syncwarp orders
// their earlier shared-memory reads before lane 0's release): a barrier counting warps, not
// threads, takes a 32nd of the arrivals.
__device__ __forceinline__ void warp_arrive(long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
#endif
}

// Arrive once this thread's earlier cp.async copies have landed (the barrier's expected count
// includes this arrival; the thread does not wait).
__device__ __forceinline__ void cp_async_mbar_arrive(long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
#endif
}

// Wait until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(long long* bar, int parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile(
      "{\n"
      " .reg .pred done;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n"
      "}\n" ::"r"(b), "r"(parity)
      : "memory");
#endif
}

// Barrier among the THREADS threads (a multiple of 32) that call it with the same id (1..15;
// 0 is __syncthreads).
template <int THREADS>
__device__ __forceinline__ void named_barrier(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}

// Arrive on named barrier `id` without waiting: the THREADS counted include threads that
// arrive here and threads that wait with named_barrier<THREADS>(id).
template <int THREADS>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Swizzled K-major operand tiles in shared memory (used by mma::warp_tile, wgmma::tile and
// fma::thread_tile alike; the same layout TMA's 32/64/128-byte swizzles produce).
//
// A tile of R rows (R % 8 == 0) x BK bf16 is stored as slabs of SLAB = min(BK, 64) elements
// per row (ROWB = 2 * SLAB bytes: 32, 64 or 128); slab s holds elements s*SLAB .. s*SLAB+SLAB-1
// of every row, R * ROWB bytes, slabs one after the other. In a slab, row r starts at byte
// r * ROWB and its 16-byte chunk c sits at chunk position c ^ ((r / (128 / ROWB)) % (ROWB / 16)).
// Tiles start at 1024-byte aligned addresses when read by wgmma; rows offsets used as tile
// bases must be multiples of 8.
// ---------------------------------------------------------------------------------------------

// Element offset of element e (< ROWB / 2) of row r within one slab.
template <int ROWB>
__device__ __forceinline__ int swz(int r, int e) {
  static_assert(ROWB == 32 || ROWB == 64 || ROWB == 128, "slab rows are 32, 64 or 128 bytes");
  constexpr int C = ROWB / 16, L = 128 / ROWB;
  return r * (ROWB / 2) + ((((e >> 3) ^ (r / L)) & (C - 1)) << 3) + (e & 7);
}

// Element offset of element k (< BK) of row r in a tile of ROWS rows x BK elements.
template <int BK, int ROWS>
__device__ __forceinline__ int tile_offset(int r, int k) {
  constexpr int SLAB = BK < 64 ? BK : 64;
  return (k / SLAB) * (ROWS * SLAB) + swz<SLAB * 2>(r, k % SLAB);
}

// ---------------------------------------------------------------------------------------------
// split_k with `combine = last_block`: the blocks computing the parts of one output tile meet on
// two counters of that tile (an int pair in a buffer that starts zeroed, `counters[2 * tile]`:
// tickets taken, parts published). Every block takes a ticket once its k loop is done; the
// block that takes the last one keeps its partial sums in registers, the others write theirs to
// the workspace and publish them. The last block waits until every other part is published
// (those blocks hold a ticket, so they are running and only have stores left: no block waits
// for one that has not started), sets both counters back to zero for the next call, adds the
// parts in their order (the sums do not depend on which block came last) and runs the epilogue.
// ---------------------------------------------------------------------------------------------

// The leader thread (`leader`) takes the block's ticket: 1 if it was the tile's last, else 0
// (0 on every other thread; barrier_or / block_or hands the answer to all).
__device__ __forceinline__ int split_ticket(int* counters, int tile, int parts, bool leader) {
  if (!leader) return 0;
  return atomicAdd(counters + 2 * tile, 1) == parts - 1 ? 1 : 0;
}

// Release: this thread's earlier global writes are visible device-wide before anything it does
// after (each writer of a part calls it before the barrier that precedes split_publish).
__device__ __forceinline__ void fence_gpu() { __threadfence(); }

// One thread: the block's part of the tile is written (after fence_gpu and a barrier).
__device__ __forceinline__ void split_publish(int* counters, int tile) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counters + 2 * tile + 1) : "memory");
}

// One thread of the last block: wait until the other parts - 1 parts are published, then zero
// both counters (every other block is done with them).
__device__ __forceinline__ void split_wait(int* counters, int tile, int parts) {
  int* published = counters + 2 * tile + 1;
  int seen;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(published) : "memory");
    if (seen >= parts - 1) break;
    __nanosleep(64);
  }
  counters[2 * tile] = 0;
  *published = 0;
}

// 1 on every thread of the block if any thread passed a non-zero `p` (__syncthreads_or).
__device__ __forceinline__ int block_or(int p) { return __syncthreads_or(p); }

// The same among the THREADS threads meeting at named barrier `id` (1..15).
template <int THREADS>
__device__ __forceinline__ int barrier_or(int id, int p) {
  int r;
  asm volatile(
      "{\n"
      " .reg .pred in, out;\n"
      " setp.ne.s32 in, %2, 0;\n"
      " bar.red.or.pred out, %1, %3, in;\n"
      " selp.s32 %0, 1, 0, out;\n"
      "}\n"
      : "=r"(r)
      : "r"(id), "r"(p), "n"(THREADS)
      : "memory");
  return r;
}

// N consecutive floats at p (4 * N-byte aligned) through L2 only (ld.global.cg), or zeros when
// !pred: parts written by other blocks of this grid are never read from a stale L1 line.
template <int N>
__device__ __forceinline__ Vec<float, N> load_cg(const float* p, bool pred) {
  Vec<float, N> r = zero<Vec<float, N>>();
  if (!pred) return r;
  if constexpr (N == 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(p));
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
  } else if constexpr (N == 2) {
    const float2 v = __ldcg(reinterpret_cast<const float2*>(p));
    r[0] = v.x, r[1] = v.y;
  } else {
    static_assert(N == 2 || N == 4, "emmy::load_cg moves 2 or 4 floats (load_cg1: one)");
  }
  return r;
}

__device__ __forceinline__ float load_cg1(const float* p, bool pred) { return pred ? __ldcg(p) : 0.0f; }

// ---------------------------------------------------------------------------------------------
// Scalar helpers used by generated code.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

}  // namespace emmy
