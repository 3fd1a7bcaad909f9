// Standalone GPU check of Emmy's device building blocks (emmy/backend/runtime/*.cuh).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I emmy/backend/runtime \
//        tools/kernel_checks/blocks_check.cu -o /tmp/blocks_check && /tmp/blocks_check
//   (on sm_80 cards: -arch=sm_80; the wgmma test is then skipped)
//
// Each test runs a small kernel built from one building block against a naive reference and
// prints the max abs error; the GEMM tests also print a time. Exit status 1 if any test fails.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <cmath>
#include "emmy.cuh"

using emmy::bf16;

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(2);} } while (0)

static int failures = 0;

__global__ void ref_gemm(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  int m = blockIdx.y * 16 + threadIdx.y, n = blockIdx.x * 16 + threadIdx.x;
  if (m >= M || n >= N) return;
  float s = 0.f;
  for (int k = 0; k < K; ++k) s += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = s;
}

// ---- block GEMMs over swizzled tiles: STAGES-deep cp.async pipeline, then one of three workers ----
// WORKER 0: mma.sync warps (WARPS_M x WARPS_N), 1: wgmma warpgroups along m, 2: FMA threads
template <int WORKER, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32) gemm(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  constexpr int T = WARPS_M * WARPS_N * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = emmy::align_smem<1024>(smem_raw);
  bf16* sA = reinterpret_cast<bf16*>(smem);
  bf16* sB = sA + STAGES * BM * BK;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  constexpr int NACC = WORKER == 0 ? WM * WN / 32 : (WORKER == 1 ? BN / 2 : BM * BN / T);
  float acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  const int KT = (K + BK - 1) / BK;
  auto load = [&](int kt, int s) {
    for (int c = tid; c < BM * BK / 8; c += T) {
      int r = c / (BK / 8), e = (c % (BK / 8)) * 8, gm = m0 + r, gk = kt * BK + e;
      bool ok = gm < M && gk < K;
      emmy::cp_async16(sA + s * BM * BK + emmy::tile_offset<BK, BM>(r, e), A + (ok ? (size_t)gm * K + gk : 0), ok);
    }
    for (int c = tid; c < BN * BK / 8; c += T) {
      int r = c / (BK / 8), e = (c % (BK / 8)) * 8, gn = n0 + r, gk = kt * BK + e;
      bool ok = gn < N && gk < K;
      emmy::cp_async16(sB + s * BN * BK + emmy::tile_offset<BK, BN>(r, e), B + (ok ? (size_t)gn * K + gk : 0), ok);
    }
  };
  for (int s = 0; s < STAGES - 1; ++s) { if (s < KT) load(s, s); emmy::cp_async_commit(); }
  // thread worker: TY x TX threads, thread owns rows ty + i*TY, cols tx + j*TX
  constexpr int TX = BN >= 32 ? 32 : BN, TY = T / TX, TM = BM / TY, TN = BN / TX;
  for (int kt = 0; kt < KT; ++kt) {
    emmy::cp_async_wait<STAGES - 2>();
    if (WORKER == 1) emmy::fence_proxy_async();
    __syncthreads();
    int nk = kt + STAGES - 1;
    if (nk < KT) load(nk, nk % STAGES);
    emmy::cp_async_commit();
    int s = kt % STAGES;
    const bf16* a = sA + s * BM * BK;
    const bf16* b = sB + s * BN * BK;
    if constexpr (WORKER == 0) {
      const int wm = warp / WARPS_N, wn = warp % WARPS_N;
      emmy::mma::warp_tile<WM, WN, BK, BM, BN>(a + wm * WM * (BK < 64 ? BK : 64), b + wn * WN * (BK < 64 ? BK : 64), acc);
    } else if constexpr (WORKER == 1) {
#if defined(EMMY_CHECK_WGMMA)
      const int wg = tid / 128;
      emmy::wgmma::tile<BN, BK, BM, BN>(a + wg * 64 * (BK < 64 ? BK : 64), b, acc);
      emmy::wgmma::wait<0>();
#endif
    } else {
      emmy::fma::thread_tile<TM, TN, BK, BM, BN, TY, TX>(a, b, tid / TX, tid % TX, acc);
    }
  }
  const int g = lane / 4, t = lane % 4;
  if constexpr (WORKER == 0) {
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    for (int mi = 0; mi < WM / 16; ++mi)
      for (int ni = 0; ni < WN / 8; ++ni)
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 2; ++j) {
            int m = m0 + wm * WM + mi * 16 + g + 8 * h, n = n0 + wn * WN + ni * 8 + 2 * t + j;
            if (m < M && n < N) C[(size_t)m * N + n] = acc[(mi * (WN / 8) + ni) * 4 + h * 2 + j];
          }
  } else if constexpr (WORKER == 1) {
    const int wg = tid / 128, w = (tid % 128) / 32;
    for (int j = 0; j < BN / 8; ++j)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 2; ++i) {
          int m = m0 + wg * 64 + 16 * w + g + 8 * h, n = n0 + 8 * j + 2 * t + i;
          if (m < M && n < N) C[(size_t)m * N + n] = acc[j * 4 + h * 2 + i];
        }
  } else {
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) {
        int m = m0 + tid / TX + i * TY, n = n0 + tid % TX + j * TX;
        if (m < M && n < N) C[(size_t)m * N + n] = acc[i * TN + j];
      }
  }
}

__global__ void group_sum_kernel(const float* x, float* out_sum, float* out_max) {
  __shared__ float scratch[32];
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  float s64 = emmy::group_sum<64>(v, scratch);
  float m64 = emmy::group_max<64>(v, scratch);
  float s8 = emmy::group_sum<8>(v, scratch);
  float s256 = emmy::group_sum<256>(v, scratch);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out_sum[3 * i] = s64; out_sum[3 * i + 1] = s8; out_sum[3 * i + 2] = s256;
  out_max[i] = m64;
}

static void fill(std::vector<bf16>& v, unsigned seed) {
  srand(seed);
  for (auto& x : v) x = __float2bfloat16((rand() / (float)RAND_MAX) * 2.f - 1.f);
}

static void report(const char* name, double err, double tol, float ms = -1.f, double flops = 0) {
  bool ok = err <= tol;
  if (!ok) ++failures;
  if (ms >= 0) printf("%-44s max_err %.3e  %s  %.3f ms  %.1f TFLOP/s\n", name, err, ok ? "OK" : "FAIL", ms, flops / ms / 1e9);
  else printf("%-44s max_err %.3e  %s\n", name, err, ok ? "OK" : "FAIL");
}

template <class F>
static float time_it(F f, int reps = 20) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  f(); CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
  float ms; CK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

template <int WORKER, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
static void gemm_case(int M, int N, int K) {
#if !defined(EMMY_CHECK_WGMMA)
  if (WORKER == 1) return;
#endif
  std::vector<bf16> hA((size_t)M * K), hB((size_t)N * K);
  fill(hA, 1); fill(hB, 2);
  bf16 *A, *B; float *C, *R;
  CK(cudaMalloc(&A, hA.size() * 2)); CK(cudaMalloc(&B, hB.size() * 2));
  CK(cudaMalloc(&C, (size_t)M * N * 4)); CK(cudaMalloc(&R, (size_t)M * N * 4));
  CK(cudaMemcpy(A, hA.data(), hA.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(B, hB.data(), hB.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(C, 0, (size_t)M * N * 4));
  ref_gemm<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16)>>>(A, B, R, M, N, K);
  CK(cudaGetLastError());
  size_t smem = (size_t)STAGES * (BM + BN) * BK * 2 + 1024;
  auto k = gemm<WORKER, BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  float ms = time_it([&] { k<<<dim3((N + BN - 1) / BN, (M + BM - 1) / BM), WARPS_M * WARPS_N * 32, smem>>>(A, B, C, M, N, K); });
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  std::vector<float> hC((size_t)M * N), hR((size_t)M * N);
  CK(cudaMemcpy(hC.data(), C, hC.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hR.data(), R, hR.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0;
  for (size_t i = 0; i < hC.size(); ++i) err = fmax(err, fabs(hC[i] - hR[i]));
  char name[160];
  static const char* names[] = {"mma_sync", "wgmma", "fma"};
  snprintf(name, sizeof name, "%s %dx%dx%d BM%d BN%d BK%d S%d", names[WORKER], M, N, K, BM, BN, BK, STAGES);
  report(name, err, 1e-2 * sqrt((double)K) / 8, ms, 2.0 * M * N * K);
  cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(R);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--sweep") {
    // pipeline depth and tile shape on the running example's shape and a large square one
    for (int big = 0; big < 2; ++big) {
      int M = big ? 4096 : 512, N = 4096, K = big ? 4096 : 1024;
#if defined(EMMY_CHECK_WGMMA)
      gemm_case<1, 128, 128, 64, 8, 1, 2>(M, N, K);
      gemm_case<1, 128, 128, 64, 8, 1, 3>(M, N, K);
      gemm_case<1, 128, 128, 64, 8, 1, 4>(M, N, K);
      gemm_case<1, 128, 128, 64, 8, 1, 5>(M, N, K);
      gemm_case<1, 128, 128, 64, 8, 1, 6>(M, N, K);
      gemm_case<1, 128, 128, 32, 8, 1, 8>(M, N, K);
      gemm_case<1, 128, 256, 64, 8, 1, 4>(M, N, K);
      gemm_case<1, 64, 128, 64, 4, 1, 4>(M, N, K);
      gemm_case<1, 64, 256, 64, 4, 1, 4>(M, N, K);
#endif
      gemm_case<0, 128, 128, 32, 2, 4, 4>(M, N, K);
      gemm_case<0, 128, 128, 64, 2, 4, 4>(M, N, K);
    }
    return failures ? 1 : 0;
  }
  int dev; CK(cudaGetDevice(&dev));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, dev));
  printf("device: %s (sm_%d%d, %d SMs)\n", p.name, p.major, p.minor, p.multiProcessorCount);
  // reductions
  {
    const int n = 4 * 256;
    std::vector<float> h(n);
    for (int i = 0; i < n; ++i) h[i] = (float)((i * 37) % 101) - 50.f;
    float *x, *s, *m; CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&s, 3 * n * 4)); CK(cudaMalloc(&m, n * 4));
    CK(cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice));
    group_sum_kernel<<<4, 256>>>(x, s, m);
    CK(cudaGetLastError());
    std::vector<float> hs(3 * n), hm(n);
    CK(cudaMemcpy(hs.data(), s, 3 * n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hm.data(), m, n * 4, cudaMemcpyDeviceToHost));
    double err = 0;
    for (int i = 0; i < n; ++i) {
      float r64 = 0, r8 = 0, r256 = 0, mx = -INFINITY;
      for (int j = i / 64 * 64; j < i / 64 * 64 + 64; ++j) { r64 += h[j]; mx = fmaxf(mx, h[j]); }
      for (int j = i / 8 * 8; j < i / 8 * 8 + 8; ++j) r8 += h[j];
      for (int j = i / 256 * 256; j < i / 256 * 256 + 256; ++j) r256 += h[j];
      err = fmax(err, fabs(hs[3 * i] - r64)); err = fmax(err, fabs(hs[3 * i + 1] - r8));
      err = fmax(err, fabs(hs[3 * i + 2] - r256)); err = fmax(err, fabs(hm[i] - mx));
    }
    report("group_sum/group_max (8, 64, 256)", err, 1e-3);
  }
  // mma.sync: every slab width, edge tiles
  gemm_case<0, 128, 128, 64, 2, 4, 3>(256, 256, 512);
  gemm_case<0, 128, 128, 32, 2, 4, 3>(200, 136, 520);
  gemm_case<0, 64, 64, 16, 2, 2, 4>(200, 136, 520);
  gemm_case<0, 128, 64, 128, 4, 2, 3>(200, 136, 520);
  gemm_case<0, 64, 40, 64, 2, 1, 2>(200, 136, 520);   // WN % 16 == 8 path
  gemm_case<0, 128, 128, 64, 2, 4, 3>(512, 4096, 1024);
  // wgmma: every slab width, edge tiles, two warpgroups
  gemm_case<1, 128, 128, 64, 8, 1, 4>(256, 256, 512);
  gemm_case<1, 64, 64, 32, 4, 1, 3>(200, 136, 520);
  gemm_case<1, 64, 128, 16, 4, 1, 4>(200, 136, 520);
  gemm_case<1, 128, 256, 128, 8, 1, 2>(200, 136, 520);
  gemm_case<1, 128, 128, 64, 8, 1, 4>(512, 4096, 1024);
  // fma threads
  gemm_case<2, 64, 64, 32, 2, 2, 2>(200, 136, 520);
  printf(failures ? "FAILED: %d\n" : "ALL OK\n", failures);
  return failures ? 1 : 0;
}
