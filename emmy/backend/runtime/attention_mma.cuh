// Emmy's flash attention on mma.sync (sm_80+, WGMMA == 0): the main loop over producers,
// FlashAttention-2's warp layout (each warp owns MT m16 tiles of query rows and all BKV keys of a
// block). attention.cuh includes this file after its helpers (Config, the producers' Rows,
// stage_rows, softmax_row, store_rows) and calls flash from emmy::attention::run.
#pragma once

namespace emmy {
namespace attention {
namespace detail {

template <class C, class QF, class KF, class VF, class SF, class FF, class OF>
__device__ __forceinline__ void flash(const QF& qf, const KF& kf, const VF& vf, const SF& sf, const FF& ff,
                                      const OF& of, int q_block, int seq_q, int seq_kv,
                                      int causal, int causal_offset, void* smem, int window = 0) {
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
  const int j0 = first_key_block<BKV>(q0, causal_offset, window);  // the key blocks j0 .. n_blocks - 1

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
      if (j0 + j < n_blocks) stage_kv(j0 + j);
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
  for (int j = j0; j < n_blocks; ++j) {
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
      if (j == j0) {
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
    if (block_masked<BKV>(k0, k0, q0 + wq0, q0 + wq0 + MT * 16 - 1, seq_q, seq_kv, causal, causal_offset, window)) {
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

}  // namespace detail
}  // namespace attention
}  // namespace emmy
