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
// This file holds the configuration, the pieces every main loop shares and the entry point; the
// producers are in attention_rows.cuh, and the main loops in the files it includes after the
// pieces: attention_mma.cuh (mma.sync), attention_wgmma.cuh (wgmma, one or two warpgroups) and
// attention_ws.cuh (warp-specialized, grid and persistent).
//
// Entry point (all arguments but the lambdas are ints or pointers):
//
//   emmy::attention::run<D, BQ, BKV, WARPS, STAGES, QMODE, QRED, KMODE, KRED, VMODE, VRED, WGMMA,
//                        STAGED_OUT, REGS_P, REGS_C>(
//       qa, qb, ka, kb, va, vb, score, free, fold, out, q_block, seq_q, seq_kv, causal, causal_offset, smem
//       [, part, parts, tile, split_ws, split_counts])
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
// compute), kDirect Q, kTma K and V, STAGES >= 2; called by all 32 * WARPS + 128 threads. Its
// optional last arguments cut the query block's key blocks into `parts` (split_kv; SplitKv in
// attention_ws.cuh): this block runs part `part`, `tile` its query block's slot row in the
// workspace `split_ws` (AttentionPlan.split_floats floats), `split_counts` one zeroed int per
// query block; the other main loops take the whole block (parts = 1).
// With two or three consumers (WARPS = 8 or 12) REGS_P and REGS_C are the registers a thread of
// the producer and of a consumer keeps after setmaxnreg (the plan's budgets); otherwise 0.
//
// Element producers are staged by each warp in groups of EMMY_ATTENTION_ROW_UNROLL rows (default
// 4), in three straight-line phases (every row's statistic loads, the warp sums, every element)
// so that the group's global loads are in flight together; without this, each row costs two
// dependent round trips to L2 (measured: 81 -> 60 us for the Qwen3 attention at 512 tokens).
//
// `materialize<D, MODE, RED, WARPS, U>(a, b, out, row0, limit)` (attention_rows.cuh) writes producer rows to
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

// Named barriers (0 is __syncthreads): warpgroups taking turns to issue their wgmmas wait on
// kTurnBarrier + their index (the wgmma loop's two, wgmma_ws's two or three consumers); a
// warpgroup's own barrier, among its 128 threads only, is kWarpgroupBarrier + its index.
constexpr int kTurnBarrier = 1;
constexpr int kWarpgroupBarrier = 4;

// The turns of NC warpgroups issuing their wgmmas one after another (ping-pong; nothing with
// one): warpgroup wg waits for its turn (take_turn), issues, and hands the turn to the next
// (pass_turn; the last to the first). A query block's turns start with warpgroup 0 (first_turn:
// the last warpgroup's arrival stands for a turn before it) and end with the last warpgroup,
// which hands on none (end_turn), so the next query block starts over without a block barrier.
template <int NC>
__device__ __forceinline__ void take_turn(int wg) {
  if constexpr (NC >= 2) emmy::named_barrier<256>(kTurnBarrier + wg);
}

template <int NC>
__device__ __forceinline__ void pass_turn(int wg) {
  if constexpr (NC >= 2) emmy::named_barrier_arrive<256>(kTurnBarrier + (wg + 1) % NC);
}

template <int NC>
__device__ __forceinline__ void first_turn(int wg) {
  if constexpr (NC >= 2) {
    if (wg == NC - 1) emmy::named_barrier_arrive<256>(kTurnBarrier);
  }
}

template <int NC>
__device__ __forceinline__ void end_turn(int wg) {
  if (wg < NC - 1) pass_turn<NC>(wg);
}

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

}  // namespace detail
}  // namespace attention
}  // namespace emmy

#include "attention_rows.cuh"  // the producers: Rows, stage_rows, make_rows, materialize

namespace emmy {
namespace attention {
namespace detail {

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

// The first key block a block of queries starting at q0 visits: with a sliding window of `window`
// keys (0: none), the block holding its first query's first key (q0 + causal_offset - window +
// 1): every block before it is masked for every query of the block. The main loops of wgmma_ws
// and of flash (mma_sync, and wgmma with fewer than 3 stages) start there; flash_wgmma's visit
// those blocks, all their scores -inf (AttentionPlan.first_key_block).
template <int BKV>
__device__ __forceinline__ int first_key_block(int q0, int causal_offset, int window) {
  return window > 0 ? max(0, q0 + causal_offset - window + 1) / BKV : 0;
}

// 2^x flushing subnormal results to zero: one MUFU.EX2 (exp2f also scales subnormals). The
// softmax exponentiates values <= 0, so a flushed result is below 2^-126: nothing in bf16 P.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Whether a key block needs the mask: its keys [k0, k0 + BKV) against query rows [q_first,
// q_last] of a warp. Only a block that crosses the causal diagonal, a sliding window's edge
// (`window` > 0: some key at or before q_last + causal_offset - window), the end of the keys or
// of the queries, or that repeats keys of the block before (k_lo > k0: the shifted last block of
// the tensor-map loop) does; every other block takes the scores through `free`, with no bounds
// checks and no causal or window compare.
template <int BKV>
__device__ __forceinline__ bool block_masked(int k0, int k_lo, int q_first, int q_last, int seq_q, int seq_kv,
                                             int causal, int causal_offset, int window = 0) {
  return k_lo > k0 || k0 + BKV > seq_kv || q_last >= seq_q || (causal && k0 + BKV - 1 > q_first + causal_offset) ||
         (window > 0 && k0 <= q_last + causal_offset - window);
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
  emmy::named_barrier<128>(kWarpgroupBarrier + wg);
  const int w = ctid >> 5, lane = ctid & 31;
#pragma unroll 4
  for (int r = w; r < 64; r += 4) {
    const int q = q0 + r0 + r;
    if (q >= seq_q) break;
#pragma unroll
    for (int c = lane; c < D; c += 32) of(q, c, __bfloat162float(sQ[at<C, BQ>(r0 + r, c)]));
  }
  emmy::named_barrier<128>(kWarpgroupBarrier + wg);
}

}  // namespace detail

}  // namespace attention
}  // namespace emmy

#include "attention_mma.cuh"    // WGMMA == 0: the mma.sync loop, on the helpers above
#include "attention_wgmma.cuh"  // WGMMA == 1: the wgmma loops and their pieces
#include "attention_ws.cuh"     // WGMMA == 2: the warp-specialized loop, on both

namespace emmy {
namespace attention {

// ---------------------------------------------------------------------------------------------
// The entry point generated kernels call (see the top of this file).

template <int D, int BQ, int BKV, int WARPS, int STAGES, int QMODE, int QRED, int KMODE,
          int KRED, int VMODE, int VRED, int WGMMA = 0, int STAGED_OUT = 0, int REGS_P = 0, int REGS_C = 0,
          int WINDOW = 0, class QA, class QB, class KA,
          class KB, class VA, class VB, class SF, class FF, class OF>
__device__ __forceinline__ void run(const QA& qa, const QB& qb, const KA& ka, const KB& kb,
                                    const VA& va, const VB& vb, const SF& score, const FF& free_score,
                                    float fold, const OF& out, int q_block, int seq_q, int seq_kv, int causal,
                                    int causal_offset, void* smem, int part = 0, int parts = 1, int tile = 0,
                                    float* split_ws = nullptr, int* split_counts = nullptr) {
  using C = Config<D, BQ, BKV, WARPS, STAGES, WGMMA, STAGED_OUT>;
  const detail::FreeScore<FF> free{free_score, fold};
  const auto qf = detail::make_rows<QMODE, QRED>(qa, qb);
  const auto kf = detail::make_rows<KMODE, KRED>(ka, kb);
  const auto vf = detail::make_rows<VMODE, VRED>(va, vb);
  if constexpr (WGMMA == 2) {
    detail::flash_ws<C, REGS_P, REGS_C>(qf, kf, vf, score, free, out, q_block, seq_q, seq_kv, causal, causal_offset, smem,
                                        detail::SplitKv{part, parts, parts, tile, split_ws, split_counts}, WINDOW);
  } else if constexpr (C::kWgmma && STAGES >= 3) {
    detail::flash_wgmma<C>(qf, kf, vf, score, free, out, q_block, seq_q, seq_kv, causal, causal_offset, smem, WINDOW);
  } else {
    detail::flash<C>(qf, kf, vf, score, free, out, q_block, seq_q, seq_kv, causal, causal_offset, smem, WINDOW);
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

template <int D, int BQ, int BKV, int WARPS, int STAGES, int ROLE, int REGS_P = 0, int REGS_C = 0>
__device__ __forceinline__ void ws_role() {
  detail::ws_registers<WARPS / 4, REGS_P, REGS_C, ROLE == 0>();
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
          int KRED, int VMODE, int VRED, int ROLE, int STAGED_OUT, int WINDOW = 0, class QA, class QB, class KA,
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
  const int j0 = detail::first_key_block<BKV>(q_block * BQ, causal_offset, WINDOW);
  const int n_blocks = max(0, detail::key_blocks<BQ, BKV>(q_block * BQ, seq_q, seq_kv, causal, causal_offset) - j0);
  if constexpr (ROLE == 0) {
    detail::ws_produce<C>(kf, vf, n_blocks, seq_kv, ring, smem, j0);
  } else {
    detail::ws_consume<C>(qf, score, free, out, q_block, n_blocks, seq_q, seq_kv, causal, causal_offset, ring, smem,
                          tile_i, next_block, next_q, j0, detail::SplitKv{}, WINDOW);
  }
  return ring + n_blocks;
}

}  // namespace attention
}  // namespace emmy
