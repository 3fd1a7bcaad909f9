// Emmy's flash-attention device code (one pass over the keys, online softmax).
//
// The generated kernel (emmy/lowering/attention.py) computes, as small device lambdas made from
// the fused loop body, one element of Q, K or V (index arithmetic, loads and scalar code such as
// RMSNorm and rotary embedding), the score of one (query, key) pair from the QK dot product
// (scale and causal mask) and the store of one output element, and calls
// `emmy::attention::run<...>(...)`, which does the heavy part, written once:
//
//   stage the block's BQ query rows into shared memory (once)
//   for each key block (blocks masked for every query of the block are skipped):
//     stage K, V rows into shared memory (through the lambdas, or cp.async for plain rows)
//     S = Q K^T          (mma.sync m16n8k16 bf16, f32 accumulate; ldmatrix from shared memory;
//                         with WGMMA, one warpgroup's wgmmas: S from shared memory, O += P V
//                         with P from registers and V MN-major from shared memory)
//     S = score(q, kv, S), out-of-range keys -> -inf   (only in blocks crossing the causal
//                         diagonal or an end; every other block takes S = free(q, kv, S))
//     m' = max(m, rowmax S); P = exp(S - m'); l = l * exp(m - m') + rowsum P
//     O = O * exp(m - m') + P V   (mma.sync, P kept in registers as bf16)
//   O / l -> the output lambda
//
// Row statistics of a producer (RMSNorm's sum of squares) are computed once per staged row: once
// per query row for Q, once per key row and key block for K.
//
// Warp layout (FlashAttention-2): each warp owns MT = BQ / (16 * WARPS) m16 tiles of query rows
// and all BKV keys of a block; no cross-warp reduction is needed.
//
// Entry point (all arguments but the lambdas are ints or pointers):
//
//   emmy::attention::run<D, BQ, BKV, WARPS, STAGES, QMODE, QRED, KMODE, KRED, VMODE, VRED, WGMMA>(
//       qa, qb, ka, kb, va, vb, score, free, fold, out, q_block, seq_q, seq_kv, causal, causal_offset, smem)
//
// Each producer (Q rows indexed by query, K and V rows by key; columns d < D) is two arguments
// (a, b) whose meaning depends on its MODE:
//   kDirect (0): a = const bf16* (row 0), b = int row stride in elements: row i is D contiguous
//                bf16 at a + i * b, 16-byte aligned (copied with cp.async).
//   kElem   (1): a = [](int i, int d) -> float, the element; b unused (pass 0).
//   kRowSum (2): a = [](int i, int r) -> float, a term summed over r < RED (one row statistic);
//                b = [](int i, int d, float sum) -> float, the element given the row's sum.
//   kTma    (3): a = const CUtensorMap& (a __grid_constant__ kernel parameter) viewing the whole
//                tensor as rows of RED elements with 64-column, BKV-row boxes and 128-byte
//                swizzle; b = int element offset of row 0: row i is D contiguous bf16 at
//                element b + i * RED. K and V only, WGMMA with STAGES >= 3; thread 0 copies
//                each key block's rows on an mbarrier the block waits on. A copy never crosses
//                the end of the keys (the rows after it are the next head's or batch's): the
//                last key block, when BKV does not divide seq_kv, is copied from key
//                seq_kv - BKV, and its keys below (j * BKV, those of the block before) are
//                masked (key_start). So BKV <= seq_kv.
// score = [](int q, int kv, float dot) -> float: the logit (-INFINITY when masked); called for
//         q < seq_q and kv < seq_kv only, in the key blocks that need a mask (block_masked:
//         those crossing the causal diagonal, the end of the keys or of the queries).
// free  = [](int q, int kv, float dot) -> float: the logit of a pair no mask applies to (score
//         without its causal mask; the generated kernel passes score itself when it has none);
//         called in every other key block.
// fold  = float: > 0 where free is exactly dot * fold (a positive constant scale): the loop
//         then folds it into the softmax's exponent instead of calling free (FreeScore); 0:
//         free applies.
// out   = [](int q, int e, float o) -> void: stores the normalized output element, called once
//         per q < seq_q, e < D.
// q_block: query rows [q_block * BQ, q_block * BQ + BQ). causal != 0: key kv is masked for query
// q whenever kv > q + causal_offset, and key blocks masked for every query of the block are not
// visited (score still applies the exact mask). smem: dynamic shared memory of
// Config::kSmemBytes bytes (smem_bytes in emmy/schedule/attention.py), 16-byte aligned (over 48 KB needs
// cudaFuncSetAttribute). Requirements: D % 16 == 0, BKV % 16 == 0, BQ % (16 * WARPS) == 0,
// STAGES >= 1, sm_80 or newer; every thread of the block (32 * WARPS threads) calls it.
// WGMMA != 0 (sm_90a only): S = Q K^T and O += P V with wgmma, one warpgroup per 64 query rows;
// needs D <= 256, WARPS % 4 == 0, BQ == 16 * WARPS, BKV <= 256 and `smem` 1024-byte aligned
// (the tiles are stored in wgmma's swizzled layout, rows of whole 64-column slabs: Config::DP).
// WGMMA == 2 (workers = wgmma_ws, sm_90a): warp-specialized (attention_ws.cuh): 128 more threads
// (a producer warpgroup issuing the tensor-map copies of K and V; the WARPS = 4 or 8 warps
// compute), kDirect Q, kTma K and V, STAGES >= 2; called by all 32 * WARPS + 128 threads.
//
// Element producers are staged by each warp in groups of EMMY_ATTENTION_ROW_UNROLL rows (default
// 4), in three straight-line phases (every row's statistic loads, the warp sums, every element)
// so that the group's global loads are in flight together; without this, each row costs two
// dependent round trips to L2 (measured: 81 -> 60 us for the Qwen3 attention at 512 tokens).
//
// `materialize<D, MODE, RED, WARPS, U>(a, b, out, row0, limit)` (below) writes producer rows to
// global memory instead: the "split" variant computes Q and K once in a prologue kernel.
//
// Register use (sm_90, D = 128, no spills): about 210-230 per thread for MT = 1; MT = 2 (e.g.
// BQ = 128 with 4 warps) and BKV = 128 spill with computed producers.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "emmy_tma.cuh"
#include "emmy_wgmma.cuh"

// Two consumer warpgroups with tensor-map K and V take turns issuing their wgmmas (see
// flash_wgmma); 0 keeps them in step with a block barrier per key block instead.
#ifndef EMMY_ATTENTION_PINGPONG
#define EMMY_ATTENTION_PINGPONG 1
#endif

#ifndef EMMY_ATTENTION_ROW_UNROLL
#define EMMY_ATTENTION_ROW_UNROLL 4
#endif

namespace emmy {
namespace attention {

// Producer modes (see above).
constexpr int kDirect = 0;
constexpr int kElem = 1;
constexpr int kRowSum = 2;
constexpr int kTma = 3;

// ---------------------------------------------------------------------------------------------
// Warp-level helpers.

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Round to bf16 and back (the body's truncf/extf pairs).
__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

// ---------------------------------------------------------------------------------------------
// Configuration and shared-memory layout.

template <int D_, int BQ_, int BKV_, int WARPS_, int STAGES_, int WGMMA_ = 0, int STAGED_OUT_ = 0, int PERSIST_ = 0>
struct Config {
  static constexpr int D = D_;
  static constexpr int BQ = BQ_;
  static constexpr int BKV = BKV_;
  static constexpr int WARPS = WARPS_;
  static constexpr int STAGES = STAGES_;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int MT = BQ / (16 * WARPS);  // m16 tiles of query rows per warp
  static constexpr int NT = BKV / 8;            // n8 tiles of keys in S
  // S = Q K^T and O += P V with wgmma (sm_90a): each warpgroup, its 64 query rows against the
  // block's keys.
  static constexpr bool kWgmma = WGMMA_ != 0;
  // Columns of a stored row: with wgmma the tiles are whole 64-column slabs, so a head dim that
  // is not a multiple of 64 (80, 96) is padded to the next one. Neither product reads the
  // padding: Q K^T contracts over the D real columns, P V is a wgmma of n = D.
  static constexpr int DP = kWgmma ? (D + 63) / 64 * 64 : D;
  static constexpr int DT = D / 8;              // n8 tiles of O's accumulators
  static constexpr int KT = D / 16;             // k16 steps of the QK contraction
  // Tile rows are LD elements apart. D % 64 == 0: rows of whole 128-byte lines whose 16-byte
  // chunks are XOR-swizzled by row; otherwise rows padded by 16 bytes (an odd number of 16-byte
  // chunks per row). Either way ldmatrix over 8 rows at one column hits 8 distinct bank groups.
  static constexpr bool kSwizzle = D % 64 == 0;
  // The output stores exactly bf16(O / l) (STAGED_OUT, the lowering's `staged_output`): with
  // wgmma each warpgroup stages its rows of O in its rows of the Q tile and stores them row by
  // row (store_rows_staged); otherwise every thread stores its fragments (store_rows).
  static constexpr bool kStagedOut = STAGED_OUT_ != 0 && kWgmma;
  static constexpr int LD = kWgmma ? DP : (kSwizzle ? D : D + 8);
  // Keep Q's A fragments in registers when the accumulators leave room for them.
  static constexpr bool kQInRegs = !kWgmma && MT == 1 && D / 2 + BKV / 2 + D / 4 <= 128;
  // Rows a warp computes at once (element producers): their loads are in flight together.
  static constexpr int kRowUnroll = EMMY_ATTENTION_ROW_UNROLL;
  static constexpr int kQElems = BQ * LD;
  static constexpr int kKVElems = BKV * LD;
  // schedule = persistent (wgmma_ws): a second Q tile after the V tiles, so that the next query
  // block's rows are copied while this one's finish (ws_consume), and the tile slots (WsTiles)
  // beside the ring's barriers.
  static constexpr bool kPersist = PERSIST_ != 0;
  static constexpr int kQBuffers = kPersist ? 2 : 1;
  static constexpr int kSmemBytes = (kQBuffers * kQElems + 2 * STAGES * kKVElems) * 2;

  static_assert(D % 16 == 0 && D > 0, "head dim must be a multiple of 16");
  static_assert(BKV % 16 == 0 && BKV > 0, "block_kv must be a multiple of 16");
  static_assert(BQ % (16 * WARPS) == 0 && MT >= 1, "block_q must give each warp 16-row tiles");
  static_assert(STAGES >= 1, "stages must be at least 1");
  static_assert(!kWgmma || (D <= 256 && WARPS % 4 == 0 && BQ == 16 * WARPS && BKV <= 256),
                "wgmma attention: head dim up to 256, warpgroups of 64 query rows "
                "(block_q = 16 * warps, warps a multiple of 4), block_kv <= 256");
};

namespace detail {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Element offset of (row r, column c) in a tile of ROWS rows; c % 8 stays in place. With wgmma
// the tile is stored as D / 64 slabs of [ROWS][64] (the K-major 128-byte swizzled layout wgmma
// reads, as emmy::tile_offset), otherwise as [ROWS][LD].
template <class C, int ROWS>
__device__ __forceinline__ int at(int r, int c) {
  if constexpr (C::kWgmma) {
    return (c >> 6) * (ROWS * 64) + r * 64 + ((((c & 63) >> 3) ^ (r & 7)) << 3) + (c & 7);
  } else if constexpr (C::kSwizzle) {
    return r * C::LD + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
  } else {
    return r * C::LD + c;
  }
}

// ---------------------------------------------------------------------------------------------
// PTX wrappers.

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D(16x8, f32) += A(16x16, bf16, row) * B(16x8, bf16, col)
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte global -> shared copy; when !valid, writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------------------------------------
// Producers: one row (D values) of Q, K or V.

template <int MODE, int RED, class A, class B>
struct Rows;

template <int RED, class A, class B>
struct Rows<kDirect, RED, A, B> {
  static constexpr bool kDirect = true;
  static constexpr bool kTma = false;
  const __nv_bfloat16* base;
  int stride;
  __device__ __forceinline__ const __nv_bfloat16* row(int i) const {
    return base + (long long)i * stride;
  }
};

template <int RED, class A, class B>
struct Rows<kElem, RED, A, B> {
  static constexpr bool kDirect = false;
  static constexpr bool kTma = false;
  static constexpr bool kStat = false;
  const A& a;
  __device__ __forceinline__ float partial(int, int) const { return 0.f; }
  template <int D, int N>
  __device__ __forceinline__ void fill(int i, int lane, float, float (&v)[N]) const {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int d = lane + 32 * j;
      v[j] = (D % 32 == 0 || d < D) ? a(i, d) : 0.f;
    }
  }
};

template <int RED, class A, class B>
struct Rows<kRowSum, RED, A, B> {
  static constexpr bool kDirect = false;
  static constexpr bool kTma = false;
  static constexpr bool kStat = true;
  const A& a;
  const B& b;
  // This lane's share of row i's statistic (the warp sums the shares).
  __device__ __forceinline__ float partial(int i, int lane) const {
    float s = 0.f;
#pragma unroll
    for (int r = lane; r < RED; r += 32) s += a(i, r);
    return s;
  }
  template <int D, int N>
  __device__ __forceinline__ void fill(int i, int lane, float s, float (&v)[N]) const {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int d = lane + 32 * j;
      v[j] = (D % 32 == 0 || d < D) ? b(i, d, s) : 0.f;
    }
  }
};

// Rows copied by the tensor memory accelerator: the map views the whole tensor as rows of RED
// elements, and row i of this producer (column 0) is element `offset + i * RED` of the tensor.
template <int RED, class A, class B>
struct Rows<kTma, RED, A, B> {
  static constexpr bool kDirect = false;
  static constexpr bool kTma = true;
  const CUtensorMap* map;
  int row0, col0;  // the view's coordinates of row 0, column 0
  // Copy rows [row, row + ROWS) (DP columns, one box per 64-column slab) into `tile`, a wgmma
  // tile of ROWS rows; completes its bytes on `bar`. Past the head dim a box reads the next
  // head's columns, or zeros past the end of the view: the padding no product reads.
  template <int DP, int ROWS>
  __device__ __forceinline__ void copy(__nv_bfloat16* tile, int row, long long* bar) const {
    static_assert(DP % 64 == 0, "tensor-map rows are whole 64-column slabs");
#pragma unroll
    for (int s = 0; s < DP / 64; ++s) emmy::tma_load_2d(tile + s * ROWS * 64, *map, col0 + 64 * s, row0 + row, bar);
  }
};

template <int N, int CAP>
__host__ __device__ constexpr int largest_divisor_upto() {
  int u = 1;
  for (int c = 1; c <= CAP && c <= N; ++c)
    if (N % c == 0) u = c;
  return u;
}

// Stage rows [row0, row0 + ROWS) of a producer into a [ROWS][LD] tile; rows at or past `limit`
// are zero (so 0 * garbage never reaches the accumulators).
template <class C, int ROWS, class F>
__device__ __forceinline__ void stage_rows(const F& f, __nv_bfloat16* tile, int row0, int limit,
                                           int warp, int lane, int tid) {
  constexpr int D = C::D;
  static_assert(!F::kTma, "rows copied by tensor maps are not staged by threads");
  if constexpr (F::kDirect) {
    constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
    constexpr int ITERS = (ROWS * CHUNKS + C::THREADS - 1) / C::THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = tid + it * C::THREADS;
      if ((ROWS * CHUNKS) % C::THREADS != 0 && c >= ROWS * CHUNKS) break;
      const int r = c / CHUNKS;
      const int ch = c % CHUNKS;
      const bool valid = row0 + r < limit;
      const __nv_bfloat16* src = f.row(valid ? row0 + r : row0) + ch * 8;
      cp_async_16(smem_addr(tile + at<C, ROWS>(r, ch * 8)), src, valid);
    }
  } else {
    // Each warp produces rows warp, warp + WARPS, ... in groups of U rows, in three straight-line
    // phases so that the rows of a group overlap: every row's statistic loads, the warp sums,
    // every element. Rows past `limit` compute a valid row (clamped) and store zeros; groups
    // entirely past it only store zeros.
    static_assert(ROWS % C::WARPS == 0, "tile rows must be a multiple of the warps");
    constexpr int N = (D + 31) / 32;
    constexpr int PER_WARP = ROWS / C::WARPS;
    constexpr int U = largest_divisor_upto<PER_WARP, C::kRowUnroll>();
#pragma unroll 1
    for (int g = 0; g < PER_WARP; g += U) {
      const int r0 = warp + g * C::WARPS;  // this group's rows: r0 + u * WARPS
      if (row0 + r0 >= limit) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int j = 0; j < N; ++j) {
            const int d = lane + 32 * j;
            if (D % 32 == 0 || d < D) tile[at<C, ROWS>(r0 + u * C::WARPS, d)] = __float2bfloat16(0.f);
          }
        continue;
      }
      int rows[U];
      float stat[U];
      float v[U][N];
#pragma unroll
      for (int u = 0; u < U; ++u) rows[u] = min(row0 + r0 + u * C::WARPS, limit - 1);
      if constexpr (F::kStat) {
#pragma unroll
        for (int u = 0; u < U; ++u) stat[u] = f.partial(rows[u], lane);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
          for (int u = 0; u < U; ++u) stat[u] += __shfl_xor_sync(0xffffffffu, stat[u], o);
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u) stat[u] = 0.f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) f.template fill<D>(rows[u], lane, stat[u], v[u]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int r = r0 + u * C::WARPS;
        const bool valid = row0 + r < limit;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const int d = lane + 32 * j;
          if (D % 32 == 0 || d < D) tile[at<C, ROWS>(r, d)] = __float2bfloat16(valid ? v[u][j] : 0.f);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Pieces of the main loops (flash and flash_wgmma).

// Key blocks a block of queries visits: all of them, or with a causal mask up to the last key
// its last query may see.
template <int BQ, int BKV>
__device__ __forceinline__ int key_blocks(int q0, int seq_q, int seq_kv, int causal, int causal_offset) {
  int n_blocks = (seq_kv + BKV - 1) / BKV;
  if (causal) {
    const int q_last = min(q0 + BQ, seq_q) - 1;
    const int kv_last = q_last + causal_offset;  // last key any row of this block may see
    const int n_causal = kv_last < 0 ? 0 : kv_last / BKV + 1;
    n_blocks = min(n_blocks, n_causal);
  }
  return n_blocks;
}

// 2^x flushing subnormal results to zero: one MUFU.EX2 (exp2f also scales subnormals). The
// softmax exponentiates values <= 0, so a flushed result is below 2^-126: nothing in bf16 P.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Whether a key block needs the mask: its keys [k0, k0 + BKV) against query rows [q_first,
// q_last] of a warp. Only a block that crosses the causal diagonal, the end of the keys or of the
// queries, or that repeats keys of the block before (k_lo > k0: the shifted last block of the
// tensor-map loop) does; every other block takes the scores through `free`, with no bounds
// checks and no causal compare.
template <int BKV>
__device__ __forceinline__ bool block_masked(int k0, int k_lo, int q_first, int q_last, int seq_q, int seq_kv,
                                             int causal, int causal_offset) {
  return k_lo > k0 || k0 + BKV > seq_kv || q_last >= seq_q || (causal && k0 + BKV - 1 > q_first + causal_offset);
}

// A compile-time choice between the masked and the unmasked softmax (see softmax_row).
template <bool B>
struct MaskTag {
  static constexpr bool value = B;
};

// The score of a key no mask touches: `ff` (the lowering's `free` lambda), and `fold` > 0 where
// that score is exactly dot * fold (the attention scale): softmax_row then takes the row max of
// the raw dots, scales that one value, and folds the scale into the exponent's multiplier, one
// instruction per score less than applying ff to each (the consumers' issue slots are what the
// warp-specialized loop runs short of). fold = 0: ff applies.
template <class FF>
struct FreeScore {
  const FF& ff;
  float fold;
  __device__ __forceinline__ float operator()(int q, int kv, float dot) const { return ff(q, kv, dot); }
};

// A row's running max moves only when a block's max passes it by more than this (log2 units:
// its exponentials then stay below 2^8, exact in bf16's and f32's range alike), so that most
// key blocks after the first few leave O as it is (rescale_acc skips a warp whose rows all
// kept theirs). The softmax is the same: every exponential and the sum are taken relative to
// the same, stale, max, which O / l divides out.
constexpr float kLazyRescale = 8.f;

// Online softmax of one fragment row (h) of a 16-row S tile s[NT][4] for query q against keys
// k0 ...: scores scaled (and with MASK, masked: keys below k_lo or at or past seq_kv, queries at
// or past seq_q and the score's own mask, through sf; without, through ff: no mask at all),
// exponentiated in place relative to the running max (moved only past kLazyRescale); m_run and
// l_run updated. Returns the factor rescaling the row's earlier sums (exactly 1 where the max
// stayed). The row's max and sum are taken in four independent chains (the instructions of one
// chain wait on each other).
template <int NT, bool MASK, class SF, class FF>
__device__ __forceinline__ float softmax_row(const SF& sf, const FF& ff, float (*s)[4], int h, int q, int k0, int k_lo,
                                             int t, int seq_q, int seq_kv, float& m_run, float& l_run) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int kChains = NT % 2 == 0 ? 4 : 2;
  float mx[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) mx[i] = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int kv = k0 + nt * 8 + 2 * t + c;
      float v = s[nt][2 * h + c];
      if constexpr (MASK) {
        v = (q < seq_q && kv < seq_kv && kv >= k_lo) ? sf(q, kv, v) : -INFINITY;
      } else if (!(ff.fold > 0.f)) {
        v = ff(q, kv, v);
      }
      s[nt][2 * h + c] = v;
      float& m = mx[(2 * nt + c) % kChains];
      m = fmaxf(m, v);
    }
  }
#pragma unroll
  for (int i = 1; i < kChains; ++i) mx[0] = fmaxf(mx[0], mx[i]);
  mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 1));
  mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 2));
  const float fold = MASK ? 0.f : ff.fold;  // s holds raw dots: scale their max (fold > 0 keeps it the max)
  if (fold > 0.f) mx[0] *= fold;
  const float k_exp = fold > 0.f ? fold * kLog2e : kLog2e;
  const float m_max = fmaxf(m_run, mx[0]);
  // (false while m_run is -inf: the first block with a key sets it)
  const float m_new = (m_max - m_run) * kLog2e <= kLazyRescale ? m_run : m_max;
  const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no (-inf) - (-inf)
  const float alpha = ex2_ftz((m_run - m_use) * kLog2e);
  const float m_scaled = m_use * kLog2e;
  float rs[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) rs[i] = 0.f;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float p = ex2_ftz(fmaf(s[nt][2 * h + c], k_exp, -m_scaled));
      s[nt][2 * h + c] = p;
      rs[(2 * nt + c) % kChains] += p;
    }
  }
#pragma unroll
  for (int i = 1; i < kChains; ++i) rs[0] += rs[i];
  l_run = l_run * alpha + rs[0];
  m_run = m_new;
  return alpha;
}

// The first key of key block j: j * BKV, except where SHIFT (tensor-map copies) moves the last,
// ragged block back to end at the last key (seq_kv - BKV; its keys below j * BKV, the block
// before's, are masked): a copy never crosses the end of the keys into the rows after them.
template <int BKV, bool SHIFT>
__device__ __forceinline__ int key_start(int j, int seq_kv) {
  if constexpr (SHIFT) return min(j * BKV, max(seq_kv - BKV, 0));
  return j * BKV;
}

// 1 / l of a fragment row: its four threads' parts of the softmax sum added.
__device__ __forceinline__ float inv_row_sum(float l) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  return 1.f / l;
}

// The epilogue of one 16-row tile: O / l for rows q_row and q_row + 8 (acc[DT][4] in the
// accumulator layout), through `of`.
template <int DT, class OF>
__device__ __forceinline__ void store_rows(const OF& of, const float (*acc)[4], const float* l_run,
                                           int q_row, int t, int seq_q) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float inv = inv_row_sum(l_run[h]);
    const int q = q_row + h * 8;
    if (q < seq_q) {
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        of(q, dt * 8 + 2 * t, acc[dt][2 * h] * inv);
        of(q, dt * 8 + 2 * t + 1, acc[dt][2 * h + 1] * inv);
      }
    }
  }
}

// The epilogue of one warpgroup's 64 query rows with wgmma (C::kStagedOut): O / l rounded to
// bf16 into the warpgroup's own rows of the Q tile (no wgmma reads them any more once its last
// S_j is done), then stored row by row with consecutive columns on consecutive lanes, so that a
// warp's stores cover whole 32-byte sectors. Straight from the fragments, one store instruction
// of a warp writes 4 bytes in each of 8 rows, a quarter of a sector each: 4-5 us per block of
// 128 rows on an H200, a sixth of a 2048-token block's time (the trace build, page 2). The
// stored values are the same: `of` rounds to bf16 again, which changes nothing. `wrow`: the
// thread's fragment row within the warpgroup (16 * (warp % 4) + g); `ctid`: the thread within
// the warpgroup. Ends with the warpgroup's barrier, so its Q rows may be refilled after.
template <class C, class OF>
__device__ __forceinline__ void store_rows_staged(const OF& of, const float (*acc)[4], const float* l_run,
                                                  __nv_bfloat16* sQ, int wg, int wrow, int t, int ctid, int q0,
                                                  int seq_q) {
  constexpr int DT = C::DT, D = C::D, BQ = C::BQ;
  const int r0 = wg * 64;  // the warpgroup's first row in the tile
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float inv = inv_row_sum(l_run[h]);
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(sQ + at<C, BQ>(r0 + wrow + 8 * h, dt * 8 + 2 * t)) =
          __floats2bfloat162_rn(acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
    }
  }
  emmy::named_barrier<128>(3 + wg);
  const int w = ctid >> 5, lane = ctid & 31;
#pragma unroll 4
  for (int r = w; r < 64; r += 4) {
    const int q = q0 + r0 + r;
    if (q >= seq_q) break;
#pragma unroll
    for (int c = lane; c < D; c += 32) of(q, c, __bfloat162float(sQ[at<C, BQ>(r0 + r, c)]));
  }
  emmy::named_barrier<128>(3 + wg);
}

// ---------------------------------------------------------------------------------------------
// The main loop over producers.

template <class C, class QF, class KF, class VF, class SF, class FF, class OF>
__device__ __forceinline__ void flash(const QF& qf, const KF& kf, const VF& vf, const SF& sf, const FF& ff,
                                      const OF& of, int q_block, int seq_q, int seq_kv,
                                      int causal, int causal_offset, void* smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int BQ = C::BQ, BKV = C::BKV, MT = C::MT, NT = C::NT, DT = C::DT,
                KT = C::KT, STAGES = C::STAGES;

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;  // row within an 8-row group of a fragment
  const int t = lane & 3;   // column pair within a fragment

  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sK = sQ + C::kQElems;
  __nv_bfloat16* sV = sK + STAGES * C::kKVElems;

  const int q0 = q_block * BQ;
  const int wq0 = warp * MT * 16;  // first row of this warp in the tile

  const int n_blocks = key_blocks<BQ, BKV>(q0, seq_q, seq_kv, causal, causal_offset);

  auto stage_kv = [&](int j) {
    const int buf = j % STAGES;
    stage_rows<C, BKV>(kf, sK + buf * C::kKVElems, j * BKV, seq_kv, warp, lane, tid);
    stage_rows<C, BKV>(vf, sV + buf * C::kKVElems, j * BKV, seq_kv, warp, lane, tid);
  };

  // Prologue: Q and the first STAGES - 1 key blocks (one cp.async group each; Q's copies join
  // the first group).
  stage_rows<C, BQ>(qf, sQ, q0, seq_q, warp, lane, tid);
  if constexpr (STAGES > 1) {
#pragma unroll
    for (int j = 0; j < STAGES - 1; ++j) {
      if (j < n_blocks) stage_kv(j);
      cp_async_commit();
    }
  }

  float acc[MT][DT][4];
  float m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][dt][c] = 0.f;
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }

  // Per-lane ldmatrix coordinates (see the fragment layouts of mma.m16n8k16).
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8;  // A: (r0-7,k0-7) (r8-15,k0-7) (r0-7,k8-15) ..
  const int a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8;  // B from K rows: (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) ..
  const int b_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8;  // B from V rows, transposed: (k0-7,n0-7) (k8-15,n0-7) ..
  const int v_col = (lane >> 4) * 8;

  uint32_t qreg[C::kQInRegs ? MT : 1][C::kQInRegs ? KT : 1][4];

#pragma unroll 1
  for (int j = 0; j < n_blocks; ++j) {
    const int buf = j % STAGES;
    if constexpr (STAGES == 1) {
      __syncthreads();  // the previous block's K/V tiles are no longer read
      stage_kv(j);
      cp_async_commit();
      cp_async_wait<0>();
      if constexpr (C::kWgmma) emmy::fence_proxy_async();  // wgmma reads through the async proxy
      __syncthreads();
    } else {
      cp_async_wait<STAGES - 2>();  // block j's copies (and Q's) have landed
      if constexpr (C::kWgmma) emmy::fence_proxy_async();  // wgmma reads through the async proxy
      __syncthreads();              // ... for every thread; block j-1's buffer is free
      if (j + STAGES - 1 < n_blocks) stage_kv(j + STAGES - 1);
      cp_async_commit();
    }
    if constexpr (C::kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < KT; ++kk)
            ldmatrix_x4(qreg[mt][kk],
                        smem_addr(sQ + at<C, BQ>(wq0 + mt * 16 + a_row, kk * 16 + a_col)));
      }
    }
    const __nv_bfloat16* tK = sK + buf * C::kKVElems;
    const __nv_bfloat16* tV = sV + buf * C::kKVElems;
    const int k0 = j * BKV;

    // S = Q K^T
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mt][nt][c] = 0.f;
    if constexpr (C::kWgmma) {
      // the warpgroup's 64 rows of Q against the block's BKV keys; s[0][nt][2h + i] is the
      // accumulator layout of wgmma (emmy_wgmma.cuh) and of mma.sync alike
      emmy::wgmma::tile<BKV, C::D, BQ, BKV, false, 64>(sQ + (warp >> 2) * 64 * 64, tK, &s[0][0][0]);
      emmy::wgmma::wait<0>();
    } else {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (C::kQInRegs) {
#pragma unroll
            for (int c = 0; c < 4; ++c) a[mt][c] = qreg[mt][kk][c];
          } else {
            ldmatrix_x4(a[mt], smem_addr(sQ + at<C, BQ>(wq0 + mt * 16 + a_row, kk * 16 + a_col)));
          }
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, smem_addr(tK + at<C, BKV>(np * 16 + b_row, kk * 16 + b_col)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(s[mt][2 * np], a[mt], b[0], b[1]);
            mma_bf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }

    // Scores (masked only where the block crosses the diagonal or an end), online softmax, P
    // (bf16 A fragments) and O += P V.
    auto softmax = [&](auto mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = q0 + wq0 + mt * 16 + g + h * 8;
          const float alpha = softmax_row<NT, decltype(mask)::value>(sf, ff, s[mt], h, q, k0, k0, t, seq_q, seq_kv,
                                                                     m_run[mt][h], l_run[mt][h]);
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            acc[mt][dt][2 * h] *= alpha;
            acc[mt][dt][2 * h + 1] *= alpha;
          }
        }
      }
    };
    if (block_masked<BKV>(k0, k0, q0 + wq0, q0 + wq0 + MT * 16 - 1, seq_q, seq_kv, causal, causal_offset)) {
      softmax(MaskTag<true>{});
    } else {
      softmax(MaskTag<false>{});
    }

    if constexpr (C::kWgmma) {
      // O += P V on wgmma: P from registers (the S accumulators, packed to bf16, are the A
      // fragments), V read MN-major from its slabs (row = key, 64 head-dim columns per slab)
      uint32_t p[BKV / 16][4];
#pragma unroll
      for (int kk = 0; kk < BKV / 16; ++kk) {
        p[kk][0] = pack_bf16(s[0][2 * kk][0], s[0][2 * kk][1]);
        p[kk][1] = pack_bf16(s[0][2 * kk][2], s[0][2 * kk][3]);
        p[kk][2] = pack_bf16(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        p[kk][3] = pack_bf16(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
      }
      emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, tV, &acc[0][0][0]);
      emmy::wgmma::wait<0>();
    } else {
#pragma unroll
    for (int kk = 0; kk < BKV / 16; ++kk) {
      uint32_t p[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        p[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < DT / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_addr(tV + at<C, BKV>(kk * 16 + v_row, np * 16 + v_col)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][2 * np], p[mt], b[0], b[1]);
          mma_bf16(acc[mt][2 * np + 1], p[mt], b[2], b[3]);
        }
      }
    }
    }
  }
  asm volatile("cp.async.wait_all;\n" ::);  // no copy may outlive the block

  // Epilogue: O / l.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) store_rows<DT>(of, acc[mt], l_run[mt], q0 + wq0 + mt * 16 + g, t, seq_q);
#else
  __trap();  // Emmy's attention needs sm_80 or newer (mma.sync bf16, ldmatrix, cp.async)
#endif
}

// The mbarriers of the tensor-map copies: STAGES `full` ones (a key block's copies landed),
// then STAGES `empty` ones (every warp is done with a key block's buffer), 8 bytes each. They
// take no shared memory of their own: the kernel's dynamic shared memory is the tiles plus 1024
// bytes, and aligning the tiles to 1024 bytes (`smem`) leaves that slack before or after them;
// the barriers go in front when the slack there holds them, else right after the tiles.
// (flash_ws has 4 * STAGES: K's and V's full and empty ones apart, N = 4.)
template <class C, int N = 2>
__device__ __forceinline__ long long* tma_barriers(void* smem) {
  // (flash_ws with schedule = persistent: 4 more barriers and 2 tile slots after the ring's)
  constexpr int kBytes = 8 * N * C::STAGES + (N == 4 && C::kPersist ? 40 : 0);
  static_assert(kBytes <= 512, "the barriers fit the smaller side of the alignment slack");
  extern __shared__ __align__(16) unsigned char emmy_attention_dynamic_smem[];
  const int pad = static_cast<int>(static_cast<unsigned char*>(smem) - emmy_attention_dynamic_smem);
  if (pad >= kBytes) return reinterpret_cast<long long*>(emmy_attention_dynamic_smem);
  return reinterpret_cast<long long*>(static_cast<unsigned char*>(smem) + C::kSmemBytes);
}

// O's accumulators (the wgmma accumulator layout: DT n8 tiles of 4) zeroed.
template <int DT>
__device__ __forceinline__ void zero_acc(float (*acc)[4]) {
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[dt][c] = 0.f;
}

// P (the bf16 A fragments of P x V, BKV / 16 k16 steps) from the exponentiated scores.
template <int BKV>
__device__ __forceinline__ void pack_p(uint32_t (*p)[4], const float (*s)[4]) {
#pragma unroll
  for (int kk = 0; kk < BKV / 16; ++kk) {
    p[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// O rescaled to its rows' new running max (alpha[0]: row g, alpha[1]: row g + 8); nothing where
// no row of the warp moved its max (softmax_row's kLazyRescale).
template <int DT>
__device__ __forceinline__ void rescale_acc(float (*acc)[4], const float* alpha) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    acc[dt][0] *= alpha[0];
    acc[dt][1] *= alpha[0];
    acc[dt][2] *= alpha[1];
    acc[dt][3] *= alpha[1];
  }
}

// The online softmax of one warp's 16-row tile of key block j (a wgmma warpgroup's warp: rows
// q_first + g and q_first + g + 8, the keys from key_start<BKV, SHIFT>(j)): masked only where the
// block crosses the causal diagonal or an end (block_masked). alpha gets each row's rescaling.
template <int NT, int BKV, bool SHIFT, class SF, class FF>
__device__ __forceinline__ void softmax_tile(const SF& sf, const FF& ff, float (*s)[4], float* alpha, float* m_run,
                                             float* l_run, int j, int q_first, int g, int t, int seq_q, int seq_kv,
                                             int causal, int causal_offset) {
  const int k0 = key_start<BKV, SHIFT>(j, seq_kv);
  auto rows = [&](auto mask) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      alpha[h] = softmax_row<NT, decltype(mask)::value>(sf, ff, s, h, q_first + g + h * 8, k0, j * BKV, t, seq_q,
                                                        seq_kv, m_run[h], l_run[h]);
  };
  if (block_masked<BKV>(k0, j * BKV, q_first, q_first + 15, seq_q, seq_kv, causal, causal_offset)) {
    rows(MaskTag<true>{});
  } else {
    rows(MaskTag<false>{});
  }
}

// flash_wgmma's loop for two warpgroups taking turns (kPingPong, see flash_wgmma): K and V by
// tensor-map copies that thread 0 issues, Q rows staged by every thread.
template <class C, class QF, class KF, class VF, class SF, class FF, class OF>
__device__ __forceinline__ void flash_wgmma_pingpong(const QF& qf, const KF& kf, const VF& vf, const SF& sf, const FF& ff,
                                                     const OF& of, int q0, int n_blocks, int seq_q, int seq_kv,
                                                     int causal, int causal_offset, void* smem, long long* full,
                                                     long long* empty) {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  constexpr int BQ = C::BQ, BKV = C::BKV, NT = C::NT, DT = C::DT, STAGES = C::STAGES;
  constexpr int AHEAD = STAGES - 2;  // key blocks in flight ahead of the one multiplied
  // warp through a shuffle: known warp-uniform, so the wgmma descriptors stay uniform (flash_ws)
  const int tid = threadIdx.x, warp = __shfl_sync(0xffffffffu, tid >> 5, 0), lane = tid & 31, g = lane >> 2,
            t = lane & 3;
  const int wg = warp >> 2;  // this warpgroup: named barrier 1 + wg is its turn to issue
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sK = sQ + C::kQElems;
  __nv_bfloat16* sV = sK + STAGES * C::kKVElems;
  const __nv_bfloat16* sQw = sQ + wg * 64 * 64;  // this warpgroup's 64 rows, slab 0
  // K and V block j into buffer j % STAGES (thread 0; the buffer's last block released)
  auto copy_kv = [&](int j) {
    const int buf = j % STAGES;
    if (j >= STAGES) emmy::mbar_wait(empty + buf, (j / STAGES - 1) & 1);
    emmy::mbar_arrive_expect_tx(full + buf, 2 * BKV * C::DP * 2);
    kf.template copy<C::DP, BKV>(sK + buf * C::kKVElems, key_start<BKV, true>(j, seq_kv), full + buf);
    vf.template copy<C::DP, BKV>(sV + buf * C::kKVElems, key_start<BKV, true>(j, seq_kv), full + buf);
  };
  stage_rows<C, BQ>(qf, sQ, q0, seq_q, warp, lane, tid);
  cp_async_commit();
  if (tid == 0) {
    for (int j = 0; j < AHEAD && j < n_blocks; ++j) copy_kv(j);
  }
  float acc[DT][4];
  zero_acc<DT>(acc);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  if (n_blocks > 0) {
    cp_async_wait<0>();  // Q's rows landed and are visible to the wgmmas' async proxy
    emmy::fence_proxy_async();
    __syncthreads();
    if (wg == 1) emmy::named_barrier_arrive<256>(1);  // warpgroup 0 issues first
    uint32_t p[BKV / 16][4];
    float s[NT][4];
    float alpha[2];
    // Block j's scores into s (its copies landed), after the other warpgroup issued its own.
    auto turn = [&](int j) {
      emmy::mbar_wait(full + j % STAGES, (j / STAGES) & 1);
      emmy::named_barrier<256>(1 + wg);
      emmy::wgmma::tile<BKV, C::D, BQ, BKV, true, 64>(sQw, sK + (j % STAGES) * C::kKVElems, &s[0][0]);
    };
    // The other warpgroup's turn; thread 0 then refills the buffer of block j + AHEAD.
    auto pass = [&](int j) {
      emmy::named_barrier_arrive<256>(2 - wg);
      if (tid == 0 && j + AHEAD < n_blocks) copy_kv(j + AHEAD);
      __syncwarp();
    };
    auto softmax = [&](int j) {
      softmax_tile<NT, BKV, true>(sf, ff, s, alpha, m_run, l_run, j, q0 + warp * 16, g, t, seq_q, seq_kv, causal,
                            causal_offset);
    };
    turn(0);
    pass(0);
    emmy::wgmma::wait<0>();
    emmy::wgmma::fence_operand<NT * 4>(&s[0][0]);
    softmax(0);
    pack_p<BKV>(p, s);
#pragma unroll 1
    for (int j = 1; j < n_blocks; ++j) {
      turn(j);
      emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, sV + ((j - 1) % STAGES) * C::kKVElems, &acc[0][0]);
      pass(j);
      emmy::wgmma::wait<1>();  // the scores; P x V may still run
      emmy::wgmma::fence_operand<NT * 4>(&s[0][0]);
      softmax(j);
      emmy::wgmma::wait<0>();
      emmy::wgmma::fence_operand<DT * 4>(&acc[0][0]);
      emmy::wgmma::fence_operand_u32<BKV / 4>(&p[0][0]);  // P stays put until P x V is done
      if (lane == 0) emmy::mbar_arrive(empty + (j - 1) % STAGES);  // this warp is done with block j - 1
      rescale_acc<DT>(acc, alpha);
      pack_p<BKV>(p, s);
    }
    // the last block's P x V, in turn (warpgroup 1's is the last turn: it passes none on)
    emmy::named_barrier<256>(1 + wg);
    emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, sV + ((n_blocks - 1) % STAGES) * C::kKVElems, &acc[0][0]);
    if (wg == 0) emmy::named_barrier_arrive<256>(2);
    emmy::wgmma::wait<0>();
    emmy::wgmma::fence_operand<DT * 4>(&acc[0][0]);
  }
  asm volatile("cp.async.wait_all;\n" ::);  // no copy may outlive the block
  if constexpr (C::kStagedOut) {
    store_rows_staged<C>(of, acc, l_run, sQ, wg, (warp & 3) * 16 + g, t, tid & 127, q0, seq_q);
  } else {
    store_rows<DT>(of, acc, l_run, q0 + warp * 16 + g, t, seq_q);
  }
#else
  __trap();  // needs sm_90a
#endif
}

// The wgmma main loop with STAGES >= 3 (sm_90a): one warpgroup per 64 query rows, software
// pipelined as in FlashAttention-3. Iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}
// (two wgmma groups), waits for S_j only and computes its online softmax while the P x V group
// still runs, then waits for it and rescales O to the new running max. Key blocks are copied
// STAGES - 2 blocks ahead, so block j - 2's buffer (last read by P x V in iteration j - 1) is
// the one refilled in iteration j.
//
// With tensor-map K and V and two warpgroups (kPingPong), the warpgroups take turns: each issues
// its wgmmas for a key block only after the other has issued its own for the block before
// (named barriers 1 and 2), so one warpgroup's softmax runs while the other's matrix products
// keep the tensor cores busy (FlashAttention-3's ping-pong schedule). Nothing else holds them in
// step: thread 0 refills a buffer once every warp has arrived on its `empty` mbarrier (after
// its last P x V on that block), and each warp waits only for the `full` mbarrier of the block
// it multiplies.
template <class C, class QF, class KF, class VF, class SF, class FF, class OF>
__device__ __forceinline__ void flash_wgmma(const QF& qf, const KF& kf, const VF& vf, const SF& sf, const FF& ff,
                                            const OF& of, int q_block, int seq_q, int seq_kv,
                                            int causal, int causal_offset, void* smem) {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  constexpr int BQ = C::BQ, BKV = C::BKV, NT = C::NT, DT = C::DT, STAGES = C::STAGES;
  constexpr int AHEAD = STAGES - 2;  // key blocks in flight ahead of the one multiplied
  static_assert(C::kWgmma && C::MT == 1 && STAGES >= 3, "flash_wgmma: wgmma tiles and 3+ stages");

  const int tid = threadIdx.x;
  const int warp = __shfl_sync(0xffffffffu, tid >> 5, 0);  // known warp-uniform (see flash_ws)
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t = lane & 3;

  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sK = sQ + C::kQElems;
  __nv_bfloat16* sV = sK + STAGES * C::kKVElems;
  const __nv_bfloat16* sQw = sQ + (warp >> 2) * 64 * 64;  // this warpgroup's 64 rows, slab 0

  const int q0 = q_block * BQ;
  const int wq0 = warp * 16;

  const int n_blocks = key_blocks<BQ, BKV>(q0, seq_q, seq_kv, causal, causal_offset);

  // K and V rows come through cp.async / shared stores by every thread, or as tensor-map copies
  // that thread 0 issues on the block's `full` mbarrier (kTma producers; whole key blocks, the
  // ragged last one moved back to end at the last key: key_start, for staged rows too).
  constexpr bool kAnyTma = KF::kTma || VF::kTma;
  constexpr bool kAnyStaged = !KF::kTma || !VF::kTma;
  constexpr int kTmaBytes = ((KF::kTma ? 1 : 0) + (VF::kTma ? 1 : 0)) * BKV * C::DP * 2;
  long long* full = tma_barriers<C>(smem);
  long long* empty = full + STAGES;
  constexpr bool kPingPong = EMMY_ATTENTION_PINGPONG && KF::kTma && VF::kTma && C::WARPS == 8;
  if constexpr (kAnyTma) {
    if (tid == 0) {
#pragma unroll
      for (int b = 0; b < STAGES; ++b) {
        emmy::mbar_init(full + b, 1);
        if constexpr (kPingPong) emmy::mbar_init(empty + b, C::WARPS);
      }
    }
    __syncthreads();
  }

  auto stage_kv = [&](int j) {
    const int buf = j % STAGES;
    __nv_bfloat16* tK = sK + buf * C::kKVElems;
    __nv_bfloat16* tV = sV + buf * C::kKVElems;
    if constexpr (kAnyTma) {
      if (tid == 0) {
        emmy::mbar_arrive_expect_tx(full + buf, kTmaBytes);
        if constexpr (KF::kTma) kf.template copy<C::DP, BKV>(tK, key_start<BKV, kAnyTma>(j, seq_kv), full + buf);
        if constexpr (VF::kTma) vf.template copy<C::DP, BKV>(tV, key_start<BKV, kAnyTma>(j, seq_kv), full + buf);
      }
    }
    if constexpr (!KF::kTma) stage_rows<C, BKV>(kf, tK, key_start<BKV, kAnyTma>(j, seq_kv), seq_kv, warp, lane, tid);
    if constexpr (!VF::kTma) stage_rows<C, BKV>(vf, tV, key_start<BKV, kAnyTma>(j, seq_kv), seq_kv, warp, lane, tid);
  };

  if constexpr (kPingPong) {
    flash_wgmma_pingpong<C>(qf, kf, vf, sf, ff, of, q0, n_blocks, seq_q, seq_kv, causal, causal_offset, smem, full,
                            empty);
    return;
  }

  // Q and the first AHEAD key blocks, one cp.async group per block (Q joins the first).
  stage_rows<C, BQ>(qf, sQ, q0, seq_q, warp, lane, tid);
#pragma unroll
  for (int j = 0; j < AHEAD; ++j) {
    if (j < n_blocks) stage_kv(j);
    cp_async_commit();
  }

  float acc[DT][4];
  zero_acc<DT>(acc);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  uint32_t p[BKV / 16][4];

  // Block j's copies have landed and are visible to the async proxy; refill block j - 2's buffer.
  auto arrive = [&](int j) {
    if (kAnyStaged || j == 0) {  // staged K / V rows, or (only) Q's copies
      cp_async_wait<AHEAD - 1>();
      emmy::fence_proxy_async();
    }
    if constexpr (kAnyTma) emmy::mbar_wait(full + j % STAGES, (j / STAGES) & 1);
    __syncthreads();
    if (j + AHEAD < n_blocks) stage_kv(j + AHEAD);
    cp_async_commit();
  };
  // S = Q K_j^T: one wgmma group (no wait), overwriting s.
  auto issue_scores = [&](int j, float (*s)[4]) {
    emmy::wgmma::tile<BKV, C::D, BQ, BKV, true, 64>(sQw, sK + (j % STAGES) * C::kKVElems, &s[0][0]);
  };
  // Online softmax of block j's scores; the rescale factors of the rows' earlier sums in alpha.
  auto softmax = [&](int j, float (*s)[4], float* alpha) {
    softmax_tile<NT, BKV, kAnyTma>(sf, ff, s, alpha, m_run, l_run, j, q0 + wq0, g, t, seq_q, seq_kv, causal,
                                   causal_offset);
  };

  if (n_blocks > 0) {
    float s[NT][4];
    float alpha[2];
    arrive(0);
    issue_scores(0, s);
    emmy::wgmma::wait<0>();
    emmy::wgmma::fence_operand<NT * 4>(&s[0][0]);
    softmax(0, s, alpha);
    pack_p<BKV>(p, s);
#pragma unroll 1
    for (int j = 1; j < n_blocks; ++j) {
      arrive(j);
      issue_scores(j, s);
      emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, sV + ((j - 1) % STAGES) * C::kKVElems, &acc[0][0]);
      emmy::wgmma::wait<1>();  // the scores; P x V may still run
      emmy::wgmma::fence_operand<NT * 4>(&s[0][0]);
      softmax(j, s, alpha);
      emmy::wgmma::wait<0>();
      emmy::wgmma::fence_operand<DT * 4>(&acc[0][0]);
      emmy::wgmma::fence_operand_u32<BKV / 4>(&p[0][0]);  // P stays put until P x V is done
      rescale_acc<DT>(acc, alpha);
      pack_p<BKV>(p, s);
    }
    emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, sV + ((n_blocks - 1) % STAGES) * C::kKVElems, &acc[0][0]);
    emmy::wgmma::wait<0>();
    emmy::wgmma::fence_operand<DT * 4>(&acc[0][0]);
  }
  asm volatile("cp.async.wait_all;\n" ::);  // no copy may outlive the block
  if constexpr (C::kStagedOut) {
    store_rows_staged<C>(of, acc, l_run, sQ, warp >> 2, (warp & 3) * 16 + g, t, tid & 127, q0, seq_q);
  } else {
    store_rows<DT>(of, acc, l_run, q0 + wq0 + g, t, seq_q);
  }
#else
  __trap();  // needs sm_90a
#endif
}

template <int MODE, int RED, class A, class B>
__device__ __forceinline__ Rows<MODE, RED, A, B> make_rows(const A& a, const B& b) {
  if constexpr (MODE == kDirect) {
    return Rows<MODE, RED, A, B>{a, static_cast<int>(b)};
  } else if constexpr (MODE == kElem) {
    return Rows<MODE, RED, A, B>{a};
  } else if constexpr (MODE == kTma) {
    static_assert(RED > 0, "kTma needs the row length of the map's view");
    const int offset = static_cast<int>(b);
    return Rows<MODE, RED, A, B>{&a, offset / RED, offset % RED};
  } else {
    static_assert(MODE == kRowSum, "producer mode must be kDirect, kElem, kRowSum or kTma");
    static_assert(RED > 0, "kRowSum needs the length of the row statistic");
    return Rows<MODE, RED, A, B>{a, b};
  }
}

}  // namespace detail

}  // namespace attention
}  // namespace emmy

#include "attention_ws.cuh"  // WGMMA == 2: the warp-specialized loop, on the helpers above

namespace emmy {
namespace attention {

// ---------------------------------------------------------------------------------------------
// Materializing a producer into global memory (the "split" variant: Q and K computed once by a
// prologue kernel, then read by `run` as kDirect rows).
//
//   emmy::attention::materialize<D, MODE, RED, WARPS, U>(a, b, out, row0, limit)
//
// Called by all 32 * WARPS threads of a block: rows [row0, min(row0 + WARPS * U, limit)) of the
// producer (a, b) (see the modes above; not kDirect) are written to out[i * D + d] as bf16.

template <int D, int MODE, int RED, int WARPS, int U, class A, class B>
__device__ __forceinline__ void materialize(const A& a, const B& b, __nv_bfloat16* out, int row0,
                                            int limit) {
  static_assert(MODE != kDirect, "a kDirect producer needs no materializing");
  const auto f = detail::make_rows<MODE, RED>(a, b);
  using F = decltype(f);
  constexpr int N = (D + 31) / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = row0 + warp * U;  // this warp's rows: r0 .. r0 + U - 1
  if (r0 >= limit) return;
  int rows[U];
  float stat[U];
  float v[U][N];
#pragma unroll
  for (int u = 0; u < U; ++u) rows[u] = min(r0 + u, limit - 1);
  if constexpr (F::kStat) {
#pragma unroll
    for (int u = 0; u < U; ++u) stat[u] = f.partial(rows[u], lane);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u) stat[u] += __shfl_xor_sync(0xffffffffu, stat[u], o);
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u) stat[u] = 0.f;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) f.template fill<D>(rows[u], lane, stat[u], v[u]);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (r0 + u < limit) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const int d = lane + 32 * j;
        if (D % 32 == 0 || d < D) out[(long long)(r0 + u) * D + d] = __float2bfloat16(v[u][j]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The entry point generated kernels call (see the top of this file).

template <int D, int BQ, int BKV, int WARPS, int STAGES, int QMODE, int QRED, int KMODE,
          int KRED, int VMODE, int VRED, int WGMMA = 0, int STAGED_OUT = 0, class QA, class QB, class KA,
          class KB, class VA, class VB, class SF, class FF, class OF>
__device__ __forceinline__ void run(const QA& qa, const QB& qb, const KA& ka, const KB& kb,
                                    const VA& va, const VB& vb, const SF& score, const FF& free_score,
                                    float fold, const OF& out, int q_block, int seq_q, int seq_kv, int causal,
                                    int causal_offset, void* smem) {
  using C = Config<D, BQ, BKV, WARPS, STAGES, WGMMA, STAGED_OUT>;
  const detail::FreeScore<FF> free{free_score, fold};
  const auto qf = detail::make_rows<QMODE, QRED>(qa, qb);
  const auto kf = detail::make_rows<KMODE, KRED>(ka, kb);
  const auto vf = detail::make_rows<VMODE, VRED>(va, vb);
  if constexpr (WGMMA == 2) {
    detail::flash_ws<C>(qf, kf, vf, score, free, out, q_block, seq_q, seq_kv, causal, causal_offset, smem);
  } else if constexpr (C::kWgmma && STAGES >= 3) {
    detail::flash_wgmma<C>(qf, kf, vf, score, free, out, q_block, seq_q, seq_kv, causal, causal_offset, smem);
  } else {
    detail::flash<C>(qf, kf, vf, score, free, out, q_block, seq_q, seq_kv, causal, causal_offset, smem);
  }
}

// schedule = persistent (workers = wgmma_ws only): a block per SM loops over query blocks,
// taking each from a counter in global memory as it frees up (`counter`: two ints, zero before
// the launch and zero again after it: the last block to finish resets them). The generated
// kernel calls ws_begin once; then, in each role's branch (ROLE 0: threads below 128, the
// producer warpgroup; ROLE 1: the consumers), ws_role once and ws_tiles with `tile(t, ring, i)`:
// the role's run_ws for tile t (the grid's order, the lowering's AttentionPlan.tile_at: with
// one L2 section head row t % batch, query block query_blocks - 1 - t / batch), the loop's
// i-th, `ring` being what the last call returned (0 first): the key blocks the ring has carried
// so far; the consumers' `next_block(t)` and `next_q(t)` give tile t's query block and Q rows.
// So the producer copies the next query block's first key blocks while the consumers still
// finish this one's, the consumers copy its Q rows meanwhile (ws_consume), and no block-wide
// barrier is met after ws_begin.
template <int D, int BQ, int BKV, int WARPS, int STAGES>
using PersistentConfig = Config<D, BQ, BKV, WARPS, STAGES, 2, 0, 1>;

template <int D, int BQ, int BKV, int WARPS, int STAGES>
__device__ __forceinline__ void ws_begin(void* smem) {
  detail::ws_setup<PersistentConfig<D, BQ, BKV, WARPS, STAGES>>(smem);
}

template <int D, int BQ, int BKV, int WARPS, int STAGES, int ROLE>
__device__ __forceinline__ void ws_role() {
  detail::ws_registers<PersistentConfig<D, BQ, BKV, WARPS, STAGES>, ROLE == 0>();
}

template <int D, int BQ, int BKV, int WARPS, int STAGES, int ROLE, class TILE>
__device__ __forceinline__ void ws_tiles(const TILE& tile, int tiles, int* counter, void* smem) {
  using C = PersistentConfig<D, BQ, BKV, WARPS, STAGES>;
  const detail::WsTiles<C> tl(smem);
  int ring = 0;
  if constexpr (ROLE == 0) {
    if (threadIdx.x != 0) return;  // one producer thread takes the tiles and issues the copies
    for (int i = 0;; ++i) {
      const int b = i & 1;
      if (i >= 2) emmy::mbar_wait(tl.empty + b, ((i >> 1) - 1) & 1);  // every consumer warp read tile i - 2
      int t = atomicAdd(counter, 1);
      if (t >= tiles) t = -1;
      tl.slot[b] = t;
      emmy::mbar_arrive(tl.full + b);  // (release: the slot's value is seen by whoever waits on it)
      if (t < 0) break;
      ring = tile(t, ring, i);
    }
    // every block has taken its last tile before it counts itself done: the last one resets
    __threadfence();
    if (atomicAdd(counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      counter[0] = 0;
      counter[1] = 0;
    }
  } else {
    const int lane = threadIdx.x & 31;
    for (int i = 0;; ++i) {
      const int b = i & 1;
      emmy::mbar_wait(tl.full + b, (i >> 1) & 1);
      // through a shuffle: the compiler then knows the tile (and the ring position and query
      // block that follow from it) is warp-uniform and keeps the wgmma descriptors in uniform
      // registers (as flash_ws's warp index); read straight from shared memory it moved them
      // into uniform registers before every wgmma, 9% more instructions per key block
      const int t = __shfl_sync(0xffffffffu, tl.slot[b], 0);
      if (lane == 0) emmy::mbar_arrive(tl.empty + b);
      if (t < 0) break;
      ring = tile(t, ring, i);
    }
  }
}

template <int D, int BQ, int BKV, int WARPS, int STAGES, int QMODE, int QRED, int KMODE,
          int KRED, int VMODE, int VRED, int ROLE, int STAGED_OUT, class QA, class QB, class KA,
          class KB, class VA, class VB, class SF, class FF, class OF, class NB, class NQ>
__device__ __forceinline__ int run_ws(const QA& qa, const QB& qb, const KA& ka, const KB& kb,
                                      const VA& va, const VB& vb, const SF& score, const FF& free_score,
                                      float fold, const OF& out, int q_block, int seq_q, int seq_kv, int causal,
                                      int causal_offset, int ring, void* smem, int tile_i,
                                      const NB& next_block, const NQ& next_q) {
  using C = Config<D, BQ, BKV, WARPS, STAGES, 2, STAGED_OUT, 1>;
  const auto qf = detail::make_rows<QMODE, QRED>(qa, qb);
  const auto kf = detail::make_rows<KMODE, KRED>(ka, kb);
  const auto vf = detail::make_rows<VMODE, VRED>(va, vb);
  const detail::FreeScore<FF> free{free_score, fold};
  detail::ws_check<C, decltype(qf), decltype(kf), decltype(vf)>();
  const int n_blocks = detail::key_blocks<BQ, BKV>(q_block * BQ, seq_q, seq_kv, causal, causal_offset);
  if constexpr (ROLE == 0) {
    detail::ws_produce<C>(kf, vf, n_blocks, seq_kv, ring, smem);
  } else {
    detail::ws_consume<C>(qf, score, free, out, q_block, n_blocks, seq_q, seq_kv, causal, causal_offset, ring, smem,
                          tile_i, next_block, next_q);
  }
  return ring + n_blocks;
}

}  // namespace attention
}  // namespace emmy
