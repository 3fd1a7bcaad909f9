// Emmy's flash attention on wgmma (sm_90a, WGMMA == 1): the software-pipelined main loop
// (flash_wgmma) and its two-warpgroup ping-pong (flash_wgmma_pingpong), and the pieces they share
// with the warp-specialized loop of attention_ws.cuh (tma_barriers, zero_acc, pack_p, rescale_acc,
// softmax_tile). attention.cuh includes this file after its helpers and calls flash_wgmma from
// emmy::attention::run.
#pragma once

namespace emmy {
namespace attention {
namespace detail {

// The mbarriers of the tensor-map copies: STAGES `full` ones (a key block's copies landed),
// then STAGES `empty` ones (every warp is done with a key block's buffer), 8 bytes each. They
// take no shared memory of their own: the kernel's dynamic shared memory is the tiles plus 1024
// bytes, and aligning the tiles to 1024 bytes (`smem`) leaves that slack before or after them;
// the barriers go in front when the slack there holds them, else right after the tiles.
// (flash_ws has 4 * STAGES: K's and V's full and empty ones apart, N = 4.)
template <class C, int N = 2>
__device__ __forceinline__ long long* tma_barriers(void* smem) {
  // (flash_ws with schedule = persistent: 4 more barriers and 2 tile slots after the ring's;
  // with the grid, the flag of split_kv's last part: merge_parts in attention_ws.cuh)
  constexpr int kBytes = 8 * N * C::STAGES + (N == 4 ? (C::kPersist ? 40 : 8) : 0);
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
// MAYBE_MASKED = false: the caller knows no mask touches the block (first_masked_block), and
// the masked path is not even compiled in.
template <int NT, int BKV, bool SHIFT, bool MAYBE_MASKED = true, class SF, class FF>
__device__ __forceinline__ void softmax_tile(const SF& sf, const FF& ff, float (*s)[4], float* alpha, float* m_run,
                                             float* l_run, int j, int q_first, int g, int t, int seq_q, int seq_kv,
                                             int causal, int causal_offset, int window = 0) {
  const int k0 = key_start<BKV, SHIFT>(j, seq_kv);
  auto rows = [&](auto mask) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      alpha[h] = softmax_row<NT, decltype(mask)::value>(sf, ff, s, h, q_first + g + h * 8, k0, j * BKV, t, seq_q,
                                                        seq_kv, m_run[h], l_run[h]);
  };
  if constexpr (MAYBE_MASKED) {
    if (block_masked<BKV>(k0, j * BKV, q_first, q_first + 15, seq_q, seq_kv, causal, causal_offset, window)) {
      rows(MaskTag<true>{});
      return;
    }
  }
  rows(MaskTag<false>{});
}

// The first of a block's n_blocks key blocks that needs a mask for any of the rows [q_first,
// q_last] (n_blocks where none does). Every condition of block_masked holds from some key block
// on (the causal diagonal moves right with the keys; the shifted or short last block is the
// last; rows past the queries need it everywhere), so the blocks before it need none and those
// from it may.
template <int BKV, bool SHIFT>
__device__ __forceinline__ int first_masked_block(int n_blocks, int q_first, int q_last, int seq_q, int seq_kv,
                                                  int causal, int causal_offset) {
  int j = n_blocks;
  while (j > 0 && block_masked<BKV>(key_start<BKV, SHIFT>(j - 1, seq_kv), (j - 1) * BKV, q_first, q_last, seq_q,
                                    seq_kv, causal, causal_offset))
    --j;
  return j;
}

// flash_wgmma's loop for two warpgroups taking turns (kPingPong, see flash_wgmma): K and V by
// tensor-map copies that thread 0 issues, Q rows staged by every thread.
template <class C, class QF, class KF, class VF, class SF, class FF, class OF>
__device__ __forceinline__ void flash_wgmma_pingpong(const QF& qf, const KF& kf, const VF& vf, const SF& sf, const FF& ff,
                                                     const OF& of, int q0, int n_blocks, int seq_q, int seq_kv,
                                                     int causal, int causal_offset, void* smem, long long* full,
                                                     long long* empty, int window, int j0) {
#if defined(__CUDA_ARCH__) && EMMY_HAS_WGMMA
  constexpr int BQ = C::BQ, BKV = C::BKV, NT = C::NT, DT = C::DT, STAGES = C::STAGES;
  constexpr int AHEAD = STAGES - 2;  // key blocks in flight ahead of the one multiplied
  // warp through a shuffle: known warp-uniform, so the wgmma descriptors stay uniform (flash_ws)
  const int tid = threadIdx.x, warp = __shfl_sync(0xffffffffu, tid >> 5, 0), lane = tid & 31, g = lane >> 2,
            t = lane & 3;
  const int wg = warp >> 2;  // this warpgroup: named barrier kTurnBarrier + wg is its turn to issue
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sK = sQ + C::kQElems;
  __nv_bfloat16* sV = sK + STAGES * C::kKVElems;
  const __nv_bfloat16* sQw = sQ + wg * 64 * 64;  // this warpgroup's 64 rows, slab 0
  // K and V of the loop's block j (key block j0 + j) into buffer j % STAGES (thread 0; the
  // buffer's last block released)
  auto copy_kv = [&](int j) {
    const int buf = j % STAGES;
    if (j >= STAGES) emmy::mbar_wait(empty + buf, (j / STAGES - 1) & 1);
    emmy::mbar_arrive_expect_tx(full + buf, 2 * BKV * C::DP * 2);
    kf.template copy<C::DP, BKV>(sK + buf * C::kKVElems, key_start<BKV, true>(j0 + j, seq_kv), full + buf);
    vf.template copy<C::DP, BKV>(sV + buf * C::kKVElems, key_start<BKV, true>(j0 + j, seq_kv), full + buf);
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
    first_turn<2>(wg);  // warpgroup 0 issues first
    uint32_t p[BKV / 16][4];
    float s[NT][4];
    float alpha[2];
    // Block j's scores into s (its copies landed), after the other warpgroup issued its own.
    auto turn = [&](int j) {
      emmy::mbar_wait(full + j % STAGES, (j / STAGES) & 1);
      take_turn<2>(wg);
      emmy::wgmma::tile<BKV, C::D, BQ, BKV, true, 64>(sQw, sK + (j % STAGES) * C::kKVElems, &s[0][0]);
    };
    // The other warpgroup's turn; thread 0 then refills the buffer of block j + AHEAD.
    auto pass = [&](int j) {
      pass_turn<2>(wg);
      if (tid == 0 && j + AHEAD < n_blocks) copy_kv(j + AHEAD);
      __syncwarp();
    };
    auto softmax = [&](int j) {
      softmax_tile<NT, BKV, true>(sf, ff, s, alpha, m_run, l_run, j0 + j, q0 + warp * 16, g, t, seq_q, seq_kv,
                                  causal, causal_offset, window);
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
    take_turn<2>(wg);
    emmy::wgmma::tile_rs<C::D, BKV / 16, BKV>(p, sV + ((n_blocks - 1) % STAGES) * C::kKVElems, &acc[0][0]);
    end_turn<2>(wg);
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
                                            int causal, int causal_offset, void* smem, int window = 0) {
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

  // the key blocks from a sliding window's first (first_key_block; the ring's block j is key
  // block j0 + j) to the causal end
  const int j0 = first_key_block<BKV>(q0, causal_offset, window);
  const int n_blocks = max(0, key_blocks<BQ, BKV>(q0, seq_q, seq_kv, causal, causal_offset) - j0);

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

  auto stage_kv = [&](int j) {  // the ring's block j: key block j0 + j
    const int buf = j % STAGES, k0 = key_start<BKV, kAnyTma>(j0 + j, seq_kv);
    __nv_bfloat16* tK = sK + buf * C::kKVElems;
    __nv_bfloat16* tV = sV + buf * C::kKVElems;
    if constexpr (kAnyTma) {
      if (tid == 0) {
        emmy::mbar_arrive_expect_tx(full + buf, kTmaBytes);
        if constexpr (KF::kTma) kf.template copy<C::DP, BKV>(tK, k0, full + buf);
        if constexpr (VF::kTma) vf.template copy<C::DP, BKV>(tV, k0, full + buf);
      }
    }
    if constexpr (!KF::kTma) stage_rows<C, BKV>(kf, tK, k0, seq_kv, warp, lane, tid);
    if constexpr (!VF::kTma) stage_rows<C, BKV>(vf, tV, k0, seq_kv, warp, lane, tid);
  };

  if constexpr (kPingPong) {
    flash_wgmma_pingpong<C>(qf, kf, vf, sf, ff, of, q0, n_blocks, seq_q, seq_kv, causal, causal_offset, smem, full,
                            empty, window, j0);
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
    softmax_tile<NT, BKV, kAnyTma>(sf, ff, s, alpha, m_run, l_run, j0 + j, q0 + wq0, g, t, seq_q, seq_kv, causal,
                                   causal_offset, window);
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

}  // namespace detail
}  // namespace attention
}  // namespace emmy
