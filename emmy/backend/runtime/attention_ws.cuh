// Emmy's warp-specialized flash attention for sm_90a (workers = wgmma_ws): FlashAttention-3's
// schedule on the pieces of attention.cuh and attention_wgmma.cuh (attention.cuh includes this
// file after both, and calls flash_ws from emmy::attention::run when WGMMA == 2: one query block
// per block). The pieces of
// flash_ws (ws_setup, ws_registers, ws_produce, ws_consume) also run schedule = persistent, where
// a block per SM takes query blocks from a tile counter (ws_begin, ws_role, ws_tiles and run_ws
// in attention.cuh; the tile slots: WsTiles): each takes `ring`, the key blocks the ring carried
// before, so buffers and mbarrier phases go on, and the consumers copy the next query block's
// Q rows into a second Q tile while they finish the last (ws_consume).
//
// Roles (threads = 128 + 32 * WARPS; WARPS = 4, 8 or 12 consumer warps, BQ = 16 * WARPS):
//
//   warpgroup 0, the producer: one thread issues the tensor-map copies of K and V, key block
//     after key block (K_j, V_j, K_{j+1}, ...), into a STAGES-deep ring of K buffers and one of
//     V buffers. Each buffer has a `full` mbarrier (the copy's bytes land on it:
//     arrive_expect_tx) and an `empty` one (every consumer warp arrives once its wgmmas on the
//     buffer are done: K_j's once S_j is, V_j's once P_j V_j is); K_j (V_j) waits for `empty`
//     of K (V) block j - STAGES before it is copied. K and V apart, a K buffer is free a
//     softmax earlier than its V buffer, and S_j waits for K_j only: with STAGES = 2, K_{j+1}
//     and V_j are copied while block j - 1's products run. A ragged last key block is copied
//     from seq_kv - BKV (its keys below j * BKV masked: key_start), so no copy crosses the end
//     of the keys.
//   warpgroups 1 .. WARPS / 4, the consumers: consumer c owns query rows [q0 + 64 c, q0 + 64 c
//     + 64). It copies its Q rows once with cp.async (Q is read once per block, so no third
//     tensor map and no hand-over from the producer: its first K/V copies are in flight
//     meanwhile; persistent blocks copy them a query block ahead), then for each key block j:
//     waits for K_j and V_{j-1} (`full`), issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} as two
//     wgmma groups, waits for S_j only, releases K_j (`empty`) and computes its online softmax
//     while P V runs (intra-warpgroup overlap), waits for P V, releases V_{j-1} and rescales O
//     (where a row's max moved: kLazyRescale). Its output goes through its Q rows
//     (store_rows_staged) where the output is bf16(O / l).
//   With two or three consumers they take turns issuing their wgmmas (named barriers
//     kTurnBarrier + c, as flash_wgmma_pingpong; consumer c passes the turn to c + 1, the last
//     to 0): one's softmax runs while the others' products keep the tensor cores busy
//     (inter-warpgroup ping-pong). Three consumers (192 query rows: FlashAttention-3's tile
//     for head dim 64) give the tensor cores two other warpgroups' products to run during each
//     softmax, where a head dim of 64 makes the products short next to it.
//
// Registers: with two consumers (384 threads, ptxas starts every thread at <= 168) the producer
// lowers its budget with setmaxnreg and the consumers raise theirs; with three (512 threads, 128
// each to start with) likewise; with one consumer (256 threads) every thread may already use
// 255 and nothing is changed. The budgets are the plan's (AttentionPlan.register_budgets in
// emmy/schedule/attention.py: 24 and 240 with two consumers, 24 and 160 with three), passed as
// the template arguments REGS_P and REGS_C of run and ws_role.
//
// Requirements: Q plain rows (kDirect: fusion = split materializes computed ones), K and V
// kTma, STAGES >= 2, the wgmma Config (attention.cuh), sm_90a.
#pragma once

namespace emmy {
namespace attention {
namespace detail {

// The ring's mbarriers (attention.cuh's tma_barriers, in the alignment slack): per stage a `full`
// and an `empty` one for K, the same for V.
template <class C>
struct WsRing {
  long long* full_k;
  long long* full_v;
  long long* empty_k;
  long long* empty_v;
  __device__ __forceinline__ explicit WsRing(void* smem) {
    full_k = tma_barriers<C, 4>(smem);
    full_v = full_k + C::STAGES;
    empty_k = full_v + C::STAGES;
    empty_v = empty_k + C::STAGES;
  }
};

// schedule = persistent: the query blocks ("tiles", in the grid's order: head fastest, the
// longest causal query block first) a block takes, one at a time, from a counter in global
// memory. The producer's thread takes tile i and publishes it in slot i % 2 (`full`, one
// arrival); each consumer warp reads it at tile i's start and frees the slot (`empty`, one
// arrival per consumer warp). The consumers also peek at slot (i + 1) % 2 once tile i's last
// S_j is done, to copy the next tile's Q rows early. -1: no tile left. After the ring's
// barriers (tma_barriers<C, 4> leaves room for them).
template <class C>
struct WsTiles {
  long long* full;
  long long* empty;
  volatile int* slot;
  __device__ __forceinline__ explicit WsTiles(void* smem) {
    full = tma_barriers<C, 4>(smem) + 4 * C::STAGES;
    empty = full + 2;
    slot = reinterpret_cast<volatile int*>(empty + 2);
  }
};

// Once per block, before the roles part: thread 0 initializes the ring's barriers (and with
// schedule = persistent the tile slots'); the block's last block-wide barrier (from here the
// roles only meet on mbarriers and named barriers).
template <class C>
__device__ __forceinline__ void ws_setup(void* smem) {
  const WsRing<C> r(smem);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < C::STAGES; ++b) {
      emmy::mbar_init(r.full_k + b, 1);
      emmy::mbar_init(r.full_v + b, 1);
      emmy::mbar_init(r.empty_k + b, C::WARPS);
      emmy::mbar_init(r.empty_v + b, C::WARPS);
    }
    if constexpr (C::kPersist) {
      const WsTiles<C> tl(smem);
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        emmy::mbar_init(tl.full + b, 1);
        emmy::mbar_init(tl.empty + b, C::WARPS);
      }
    }
  }
  __syncthreads();
}

// The Q tile of the persistent loop's tile i: the first Q tile for even i, the second (after
// the V tiles) for odd i; the first always with one query block per block.
template <class C>
__device__ __forceinline__ __nv_bfloat16* ws_q_tile(void* smem, int i) {
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  if constexpr (C::kPersist) {
    if (i & 1) return sQ + C::kQElems + 2 * C::STAGES * C::kKVElems;
  }
  return sQ;
}

// Issue (not wait for) the cp.async copies of warpgroup `wg`'s 64 Q rows into sQ; rows at or
// past seq_q zero.
template <class C, class QF>
__device__ __forceinline__ void copy_q_ws(const QF& qf, __nv_bfloat16* sQ, int wg, int ctid, int q0, int seq_q) {
  constexpr int CHUNKS = C::D / 8;  // 16-byte chunks per row
  static_assert((64 * CHUNKS) % 128 == 0, "a warpgroup copies whole rounds of chunks");
#pragma unroll
  for (int it = 0; it < 64 * CHUNKS / 128; ++it) {
    const int c = ctid + it * 128;
    const int r = c / CHUNKS, ch = c % CHUNKS;
    const int row = q0 + wg * 64 + r;
    const bool valid = row < seq_q;
    cp_async_16(smem_addr(sQ + at<C, C::BQ>(wg * 64 + r, ch * 8)), qf.row(valid ? row : q0) + ch * 8, valid);
  }
  cp_async_commit();
}

// Wait for this thread's Q copies and make the warpgroup's visible to its wgmmas.
__device__ __forceinline__ void wait_q_ws(int wg) {
  cp_async_wait<0>();
  emmy::fence_proxy_async();                 // the async proxy (wgmma) reads them
  emmy::named_barrier<128>(kWarpgroupBarrier + wg);  // ... after every thread of the warpgroup copied
}

// Consumer warpgroup `wg`'s 64 rows of Q into its rows of the wgmma Q tile (rows at or past
// seq_q zero), visible to its wgmmas: its 128 threads (ctid = thread within it) only.
template <class C, class QF>
__device__ __forceinline__ void stage_q_ws(const QF& qf, __nv_bfloat16* sQ, int wg, int ctid, int q0, int seq_q) {
  copy_q_ws<C>(qf, sQ, wg, ctid, q0, seq_q);
  wait_q_ws(wg);
}

// Once per role, right after the roles part (every thread of a warpgroup executes it): with two
// or three consumers (NC) the producer gives registers back, down to REGS_P a thread, and the
// consumers take them, up to REGS_C (setmaxnreg; the plan's budgets, see Registers above).
template <int NC, int REGS_P, int REGS_C, bool PRODUCER>
__device__ __forceinline__ void ws_registers() {
  static_assert(NC < 2 || (REGS_P >= 24 && REGS_C <= 256 && REGS_P % 8 == 0 && REGS_C % 8 == 0 &&
                           128 * REGS_P + 128 * NC * REGS_C <= 65536),
                "wgmma_ws attention with two or three consumers: the plan's register budgets (multiples "
                "of 8 from 24 to 256) must fit the register file");
  if constexpr (NC >= 2) {
    if constexpr (PRODUCER) {
      emmy::regs_lower<REGS_P>();
    } else {
      emmy::regs_raise<REGS_C>();
    }
  }
}

// The producer's part of one query block: thread 0 copies its n_blocks key blocks, K_j then V_j,
// from key block j0 on (split_kv: the block's part of them). `ring` counts the key blocks the
// block copied before this query block (schedule = persistent goes on from one query block to the
// next): block j takes buffer (ring + j) % STAGES, and waits for that buffer's last use to be
// released first.
template <class C, class KF, class VF>
__device__ __forceinline__ void ws_produce(const KF& kf, const VF& vf, int n_blocks, int seq_kv, int ring, void* smem,
                                           int j0 = 0) {
  constexpr int BKV = C::BKV, STAGES = C::STAGES, DP = C::DP;
  if (threadIdx.x != 0) return;
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem) + C::kQElems;
  __nv_bfloat16* sV = sK + STAGES * C::kKVElems;
  const WsRing<C> r(smem);
#pragma unroll 1
  for (int j = 0; j < n_blocks; ++j) {
    const int n = ring + j, buf = n % STAGES, k0 = key_start<BKV, true>(j0 + j, seq_kv);
    if (n >= STAGES) emmy::mbar_wait(r.empty_k + buf, (n / STAGES - 1) & 1);
    emmy::mbar_arrive_expect_tx(r.full_k + buf, BKV * DP * 2);
    kf.template copy<DP, BKV>(sK + buf * C::kKVElems, k0, r.full_k + buf);
    if (n >= STAGES) emmy::mbar_wait(r.empty_v + buf, (n / STAGES - 1) & 1);
    emmy::mbar_arrive_expect_tx(r.full_v + buf, BKV * DP * 2);
    vf.template copy<DP, BKV>(sV + buf * C::kKVElems, k0, r.full_v + buf);
  }
}

// split_kv: the key blocks of a query block cut into `parts` runs of consecutive blocks (key_parts),
// each a block of the grid (schedule = grid). Every part writes its consumers' unnormalized output
// fragments, running max and sum to its slot of the workspace `ws` (float32; per query block
// `tile` and part, value k of consumer thread c at ((tile * stride + part) * V + k) * consumer
// threads + c, V = head dim / 2 + 4 values a thread: a warp's stores of one value are 128
// contiguous bytes, and the thread that merges a slot wrote the same fragment positions in its own
// part), then counts itself in counts[tile]; the part that counts last merges every other part's
// slot into its own registers (running maxes to their maximum, sums and outputs rescaled by
// exp(old max - new max) and added) and stores the output; it also zeroes counts[tile] for the
// next launch. parts = 1: no split.
struct SplitKv {
  int part = 0;           // this block's part
  int parts = 1;          // parts of this query block: min(split_kv, its key blocks)
  int stride = 1;         // slots per query block in `ws` (the plan's split_kv)
  int tile = 0;           // the query block's slot row: batch x head row + query rank * rows
  float* ws = nullptr;    // AttentionPlan.split_floats floats
  int* counts = nullptr;  // one per query block, zero before the launch and after it
};

// The first key block and the count of part `part` of `parts` over n key blocks (every part has at
// least one where parts <= n; AttentionPlan.key_parts).
__device__ __forceinline__ int2 key_parts(int part, int parts, int n) {
  const int j0 = part * n / parts;
  return make_int2(j0, (part + 1) * n / parts - j0);
}

constexpr int kSplitBarrier = 7;  // named barrier of the consumers' merge (after the turns' 1-3, 4-6)

// Write this part's slot, count it, and in the part that counts last merge the others' slots:
// true there (its acc, m_run and l_run are the query block's), false in every other part (its
// consumers are done). `cthread`: the thread among the consumers.
template <class C>
__device__ __forceinline__ bool merge_parts(float (*acc)[4], float* m_run, float* l_run, const SplitKv& sp,
                                            int cthread, void* smem) {
  constexpr int NCT = 32 * C::WARPS, DT = C::DT, V = DT * 4 + 4;
  constexpr float kLog2e = 1.4426950408889634f;
  auto slot = [&](int part, int k) {
    return sp.ws + ((static_cast<size_t>(sp.tile) * sp.stride + part) * V + k) * NCT + cthread;
  };
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) __stcg(slot(sp.part, dt * 4 + i), acc[dt][i]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __stcg(slot(sp.part, DT * 4 + h), m_run[h]);
    __stcg(slot(sp.part, DT * 4 + 2 + h), l_run[h]);
  }
  __threadfence();  // this thread's slot is seen device-wide before the count
  // whether this part counted last: one int after the ring's barriers (tma_barriers leaves room)
  volatile int* last = reinterpret_cast<volatile int*>(tma_barriers<C, 4>(smem) + 4 * C::STAGES);
  emmy::named_barrier<NCT>(kSplitBarrier);
  if (cthread == 0) {
    *last = atomicAdd(sp.counts + sp.tile, 1) == sp.parts - 1;
    if (*last) sp.counts[sp.tile] = 0;
  }
  emmy::named_barrier<NCT>(kSplitBarrier);
  if (!*last) return false;
  __threadfence();  // every other part's slot, counted before, is read after
  for (int p = 0; p < sp.parts; ++p) {
    if (p == sp.part) continue;
    float a[2], b[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mp = __ldcg(slot(p, DT * 4 + h)), lp = __ldcg(slot(p, DT * 4 + 2 + h));
      const float m = fmaxf(m_run[h], mp);  // -inf only where neither part saw a key of the row
      a[h] = m_run[h] == -INFINITY ? 0.f : ex2_ftz((m_run[h] - m) * kLog2e);
      b[h] = mp == -INFINITY ? 0.f : ex2_ftz((mp - m) * kLog2e);
      l_run[h] = l_run[h] * a[h] + lp * b[h];
      m_run[h] = m;
    }
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[dt][i] = acc[dt][i] * a[i >> 1] + __ldcg(slot(p, dt * 4 + i)) * b[i >> 1];
    }
  }
  return true;
}

// No next tile (schedule = grid).
struct NoNextQ {
  __device__ __forceinline__ const __nv_bfloat16* operator()(int) const { return nullptr; }
};
struct NoNextBlock {
  __device__ __forceinline__ int operator()(int) const { return 0; }
};

// The consumers' part of one query block (q_block), its key blocks at ring + j of the ring (see
// ws_produce). Each consumer warpgroup copies its Q rows, runs the key blocks and stores its
// rows of O; with two or three consumers their turns start over with each query block (consumer 0
// first) and end even, so query blocks follow one another without a block-wide barrier.
//
// schedule = persistent (C::kPersist): this is the loop's tile `tile_i`; its Q rows are in Q
// tile tile_i % 2 (ws_q_tile), copied there during the tile before (the first tile copies its
// own). Once its last S_j is done, each consumer warpgroup reads the next tile from the tile
// slots and starts copying that tile's Q rows into the other Q tile (`next_block(t)`: tile t's
// query block; `next_q(t)`: the row-0 pointer of Q for tile t's head row; the order of the
// tiles is the lowering's: AttentionPlan.tile_at), so the copy overlaps the last key block and
// the output.
template <class C, class QF, class SF, class FF, class OF, class NB = NoNextBlock, class NQ = NoNextQ>
__device__ __forceinline__ void ws_consume(const QF& qf, const SF& sf, const FF& ff, const OF& of, int q_block,
                                           int n_blocks, int seq_q, int seq_kv, int causal, int causal_offset,
                                           int ring, void* smem, int tile_i = 0, const NB& next_block = NB{},
                                           const NQ& next_q = NQ{}, int j0 = 0, const SplitKv& split = SplitKv{},
                                           int window = 0) {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  constexpr int BQ = C::BQ, BKV = C::BKV, NT = C::NT, DT = C::DT, STAGES = C::STAGES, D = C::D;
  constexpr int NC = C::WARPS / 4;  // consumer warpgroups
  // the warp index through a shuffle: the compiler then knows it is warp-uniform and keeps what
  // derives from it (each warpgroup's Q rows, hence the wgmma descriptors) in uniform registers
  const int tid = threadIdx.x, warp = __shfl_sync(0xffffffffu, tid >> 5, 0), lane = tid & 31;
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem) + C::kQElems;
  __nv_bfloat16* sV = sK + STAGES * C::kKVElems;
  __nv_bfloat16* sQ = ws_q_tile<C>(smem, tile_i);
  const int q0 = q_block * BQ;
  const WsRing<C> r(smem);

  const int cw = warp - 4;   // warp among the consumers: query rows q0 + 16 cw ..
  const int wg = cw >> 2;    // consumer warpgroup: named barrier kTurnBarrier + wg is its turn to issue
  const int g = lane >> 2, t = lane & 3;
  const int ctid = tid - 128 * (wg + 1);
  const int q_first = q0 + cw * 16;
  if (!C::kPersist || tile_i == 0) {
    stage_q_ws<C>(qf, sQ, wg, ctid, q0, seq_q);
  } else {
    wait_q_ws(wg);  // copied during the tile before
  }
  // schedule = persistent: the next tile's Q rows into the other Q tile, once no S_j is left
  auto copy_next_q = [&]() {
    if constexpr (C::kPersist) {
      const WsTiles<C> tl(smem);
      const int b = (tile_i + 1) & 1;
      emmy::mbar_wait(tl.full + b, ((tile_i + 1) >> 1) & 1);
      const int tn = tl.slot[b];
      if (tn >= 0) {
        QF nqf = qf;
        nqf.base = next_q(tn);
        const int nq0 = next_block(tn) * BQ;
        copy_q_ws<C>(nqf, ws_q_tile<C>(smem, tile_i + 1), wg, ctid, nq0, seq_q);
      }
    }
  };
  const __nv_bfloat16* sQw = sQ + wg * 64 * 64;  // this warpgroup's 64 rows, slab 0

  float acc[DT][4];
  zero_acc<DT>(acc);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  if (n_blocks > 0) {
    uint32_t p[BKV / 16][4];
    float s[NT][4];
    float alpha[2];
    // S_j = Q K_j^T (one wgmma group, no wait), once K_j landed; in turn.
    auto scores = [&](int j) {
      const int n = ring + j;
      emmy::mbar_wait(r.full_k + n % STAGES, (n / STAGES) & 1);
      take_turn<NC>(wg);  // with two or three consumers: after the one before issued
      emmy::wgmma::tile<BKV, D, BQ, BKV, true, 64>(sQw, sK + (n % STAGES) * C::kKVElems, &s[0][0]);
    };
    // O += P_j V_j (one wgmma group, no wait); V_j landed (wait_v) before the turn.
    auto wait_v = [&](int j) {
      const int n = ring + j;
      emmy::mbar_wait(r.full_v + n % STAGES, (n / STAGES) & 1);
    };
    auto values = [&](int j) {
      emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, sV + ((ring + j) % STAGES) * C::kKVElems, &acc[0][0]);
    };
    // This warp is done with K_j (V_j): its buffer may be refilled once every consumer warp is.
    auto release = [&](long long* empty, int j) {
      if (lane == 0) emmy::mbar_arrive(empty + (ring + j) % STAGES);
    };
    // the softmax of key block j; `masked`: MaskTag<false> where no row of the warpgroup needs a
    // mask in it, so that a loop over such blocks carries no mask code
    auto softmax = [&](int j, auto masked) {
      softmax_tile<NT, BKV, true, decltype(masked)::value>(sf, ff, s, alpha, m_run, l_run, j0 + j, q_first, g, t,
                                                           seq_q, seq_kv, causal, causal_offset, window);
    };
    // Masking steps (FlashAttention-3's) with three consumers: the key blocks no mask touches
    // in a loop of their own, then those from the warpgroup's first masked block (the same in
    // its four warps, so they run the same loops and issue the same wgmmas). H200, head dim 64,
    // 32 / 8 heads, 192 x 128 tiles: 2253 us against 2322 at 16384 tokens, 177 against 179 at
    // 4096; with two consumers (head dim 128) the rules' kernel was 1% slower with them (3582
    // against 3540 us at 16384), so two consumers keep one loop
    // (docs/bench/h200-attention-mask-steps-2026-12-05.log).
    // (first_masked_block knows no window: with one, every block goes through block_masked)
    constexpr bool kMaskSteps = NC == 3;
    const int j_masked = kMaskSteps && window == 0 ? max(0, first_masked_block<BKV, true>(j0 + n_blocks, q0 + 64 * wg,
                                                                           q0 + 64 * wg + 63, seq_q, seq_kv,
                                                                           causal, causal_offset) - j0)
                                    : 0;
    first_turn<NC>(wg);  // consumer 0 issues first
    scores(0);
    pass_turn<NC>(wg);
    emmy::wgmma::wait<0>();
    emmy::wgmma::fence_operand<NT * 4>(&s[0][0]);
    release(r.empty_k, 0);
    if (kMaskSteps && j_masked > 0) {
      softmax(0, MaskTag<false>{});
    } else {
      softmax(0, MaskTag<true>{});
    }
    pack_p<BKV>(p, s);
    // key block j: S_j and P_{j-1} V_{j-1} issued together, the softmax of S_j while P V runs
    auto step = [&](int j, auto masked) {
      wait_v(j - 1);
      scores(j);
      values(j - 1);
      pass_turn<NC>(wg);
      emmy::wgmma::wait<1>();  // the scores (committed first); P x V may still run
      emmy::wgmma::fence_operand<NT * 4>(&s[0][0]);
      release(r.empty_k, j);
      softmax(j, masked);
      emmy::wgmma::wait<0>();
      emmy::wgmma::fence_operand<DT * 4>(&acc[0][0]);
      emmy::wgmma::fence_operand_u32<BKV / 4>(&p[0][0]);  // P stays put until P x V is done
      release(r.empty_v, j - 1);
      rescale_acc<DT>(acc, alpha);
      pack_p<BKV>(p, s);
    };
    if constexpr (kMaskSteps) {
#pragma unroll 1
      for (int j = 1; j < j_masked; ++j) step(j, MaskTag<false>{});
#pragma unroll 1
      for (int j = max(j_masked, 1); j < n_blocks; ++j) step(j, MaskTag<true>{});
    } else {
#pragma unroll 1
      for (int j = 1; j < n_blocks; ++j) step(j, MaskTag<true>{});
    }
    copy_next_q();
    // the last block's P x V, in turn (the last consumer's is the last turn: it passes none on)
    wait_v(n_blocks - 1);
    take_turn<NC>(wg);
    values(n_blocks - 1);
    end_turn<NC>(wg);
    emmy::wgmma::wait<0>();
    emmy::wgmma::fence_operand<DT * 4>(&acc[0][0]);
    release(r.empty_v, n_blocks - 1);
  } else {
    copy_next_q();
  }
  if (split.parts > 1 && !merge_parts<C>(acc, m_run, l_run, split, tid - 128, smem)) return;
  if constexpr (C::kStagedOut) {
    store_rows_staged<C>(of, acc, l_run, sQ, wg, (cw & 3) * 16 + g, t, ctid, q0, seq_q);
  } else {
    store_rows<DT>(of, acc, l_run, q_first + g, t, seq_q);
  }
#else
  __trap();  // needs sm_90a
#endif
}

template <class C, class QF, class KF, class VF>
__device__ __forceinline__ void ws_check() {
  constexpr int NC = C::WARPS / 4;
  static_assert(C::kWgmma && C::MT == 1 && NC >= 1 && NC <= 3 && C::STAGES >= 2,
                "wgmma_ws attention: 1, 2 or 3 consumer warpgroups of 64 query rows, 2+ stages");
  static_assert(QF::kDirect && KF::kTma && VF::kTma,
                "wgmma_ws attention: plain Q rows, K and V by tensor maps (fusion = split, copy = tma)");
}

// schedule = grid: one query block per block, the roles apart from the start (REGS_P, REGS_C:
// ws_registers); with split_kv one part of its key blocks (SplitKv).
template <class C, int REGS_P, int REGS_C, class QF, class KF, class VF, class SF, class FF, class OF>
__device__ __forceinline__ void flash_ws(const QF& qf, const KF& kf, const VF& vf, const SF& sf, const FF& ff,
                                         const OF& of, int q_block, int seq_q, int seq_kv, int causal,
                                         int causal_offset, void* smem, SplitKv split = SplitKv{},
                                         int window = 0) {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  ws_check<C, QF, KF, VF>();
  // the key blocks from the window's first (first_key_block) to the causal end
  const int j_first = first_key_block<C::BKV>(q_block * C::BQ, causal_offset, window);
  const int n_all = max(0, key_blocks<C::BQ, C::BKV>(q_block * C::BQ, seq_q, seq_kv, causal, causal_offset) - j_first);
  split.parts = max(1, min(split.parts, n_all));  // a query block of few key blocks has fewer parts
  if (split.part >= split.parts) return;          // (the whole block: no part of this one)
  int2 range = key_parts(split.part, split.parts, n_all);
  range.x += j_first;
  ws_setup<C>(smem);
  if (threadIdx.x < 128) {  // the producer warpgroup
    ws_registers<C::WARPS / 4, REGS_P, REGS_C, true>();
    ws_produce<C>(kf, vf, range.y, seq_kv, 0, smem, range.x);
    return;
  }
  ws_registers<C::WARPS / 4, REGS_P, REGS_C, false>();
  ws_consume<C>(qf, sf, ff, of, q_block, range.y, seq_q, seq_kv, causal, causal_offset, 0, smem, 0, NoNextBlock{},
                NoNextQ{}, range.x, split, window);
#else
  __trap();  // needs sm_90a
#endif
}

}  // namespace detail
}  // namespace attention
}  // namespace emmy
