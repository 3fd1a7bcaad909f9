// Emmy's flash attention: the producers of Q, K and V rows (attention.cuh includes this file
// after its configuration and PTX wrappers). A producer (see the modes at the top of
// attention.cuh) gives one row (D values) of Q, K or V: `Rows` for each mode, `make_rows` from
// a generated kernel's two arguments, `stage_rows` to put rows into a shared-memory tile, and
// `materialize` to write them to global memory (the "split" variant's prologue kernel).
#pragma once

namespace emmy {
namespace attention {
namespace detail {

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

// The values of U rows of a computed producer (kElem, kRowSum) for one warp: each row's
// statistic (kRowSum: the lanes' partial sums, added across the warp), then its elements, lane
// `lane` holding columns lane, lane + 32, ... in v[u]. The rows' loads are issued together, phase
// by phase (see EMMY_ATTENTION_ROW_UNROLL at the top of attention.cuh).
template <int D, int U, class F>
__device__ __forceinline__ void produce_rows(const F& f, const int (&rows)[U], int lane,
                                             float (&v)[U][(D + 31) / 32]) {
  float stat[U];
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
      float v[U][N];
#pragma unroll
      for (int u = 0; u < U; ++u) rows[u] = min(row0 + r0 + u * C::WARPS, limit - 1);
      produce_rows<D>(f, rows, lane, v);
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
  constexpr int N = (D + 31) / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = row0 + warp * U;  // this warp's rows: r0 .. r0 + U - 1
  if (r0 >= limit) return;
  int rows[U];
  float v[U][N];
#pragma unroll
  for (int u = 0; u < U; ++u) rows[u] = min(r0 + u, limit - 1);
  detail::produce_rows<D>(f, rows, lane, v);
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

}  // namespace attention
}  // namespace emmy
