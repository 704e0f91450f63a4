// How far K is split for the GEMV that src/gemv/ ships (bf16, one row of x): the library splits K over a thread
// block cluster until ~48 warps per multiprocessor are busy, at most 8 splits. At 1 x 4096 -> 4096 that is 4 splits
// of 1024, and the kernel trails cuBLAS there (docs/performance/decode.md); this program times every split count on
// the decode shapes of Llama-3-8B, alone and as a chain of dependent launches (how a decode step runs them), beside
// cuBLAS's GEMV, with copies of W rotated past the L2. Each configuration's output is compared with cuBLAS's.
// Diagnostic only, not part of the library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/gemv_splits bench/micro/gemv_splits.cu -lcublas
//   build/gemv_splits
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/cluster_launch.h"
#include "gemv/gemv_kernels.cuh"
#include "micro_util.cuh"

namespace {

namespace kern = tigon::gemv::kern;
using T = __nv_bfloat16;
constexpr int kChain = 32;  // dependent launches per timed chain (a decode step's GEMVs follow one another)

struct Shape {
  int n, k;
};
const Shape kShapes[] = {{4096, 4096}, {1024, 4096}, {6144, 4096}, {14336, 4096}, {4096, 14336}, {28672, 4096}};

kern::Args args_for(const T* x, const T* w, T* y, const Shape& s, int splits) {
  kern::Args a{};
  a.x = x, a.y = y, a.M = 1, a.K = s.k, a.x_stride = s.k, a.y_stride = s.n, a.parts = 1;
  a.w[0] = w, a.w_stride[0] = s.k, a.rows[0] = s.n;
  a.tile_first[1] = (s.n + kern::kBlockRows - 1) / kern::kBlockRows;
  const int64_t per = (s.k + splits - 1) / splits;
  a.k_split = (per + kern::kKAlign - 1) / kern::kKAlign * kern::kKAlign;
  a.tile_k = int(std::min<int64_t>(a.k_split, kern::kTileBytes / int64_t(sizeof(T)) / kern::kKAlign * kern::kKAlign));
  return a;
}

void launch(const kern::Args& a, cudaStream_t st) {
  const int real_splits = int((a.K + a.k_split - 1) / a.k_split);
  const dim3 grid(unsigned(a.tile_first[1]), unsigned(real_splits), 1);
  const dim3 cluster = real_splits > 1 ? dim3(1, unsigned(real_splits), 1) : dim3(0, 0, 0);
  tigon::cuda::launch_pdl(grid, dim3(kern::kThreads), size_t(a.tile_k) * sizeof(T), st, cluster, kern::gemv<T, 1, 8, T>,
                          a);
}

}  // namespace

int main() {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  const int sms = device_sms();
  std::printf("gemv_splits: bf16, 1 row of x, %d SMs; us alone / per launch in a chain of %d, TB/s of W alone\n", sms,
              kChain);
  std::printf("%-14s %22s", "N x K", "cuBLAS");
  for (int s : {1, 2, 4, 8}) std::printf(" %18s%d", "splits ", s);
  std::printf("\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const Shape& s : kShapes) {
    const size_t wn = size_t(s.n) * s.k;
    std::vector<T> hw(wn), hx(s.k);
    for (auto& v : hw) v = __float2bfloat16(0.05f * nd(rng));
    for (auto& v : hx) v = __float2bfloat16(nd(rng));
    // Copies of W rotated through the chain, past the 50 MB L2 (a decode step's weights are never in it).
    const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / (wn * sizeof(T)) + 1));
    std::vector<T*> ws(copies);
    T *x, *y, *y_ref;
    for (T*& p : ws) {
      CHECK(cudaMalloc(&p, wn * sizeof(T)));
      CHECK(cudaMemcpy(p, hw.data(), wn * sizeof(T), cudaMemcpyHostToDevice));
    }
    CHECK(cudaMalloc(&x, s.k * sizeof(T)));
    CHECK(cudaMalloc(&y, s.n * sizeof(T)));
    CHECK(cudaMalloc(&y_ref, s.n * sizeof(T)));
    CHECK(cudaMemcpy(x, hx.data(), s.k * sizeof(T), cudaMemcpyHostToDevice));
    const float one = 1.f, zero = 0.f;
    // y = W x with W row-major [N, K]: column-major W^T [K, N], so op(A) = A^T with A = W^T
    auto cublas = [&](T* out, int copy) {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, 1, s.k, &one, ws[copy % copies], CUDA_R_16BF, s.k, x, CUDA_R_16BF,
                   s.k, &zero, out, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    const double mb = double(wn) * sizeof(T) * 1e-6;
    int next = 0;
    const float cb = time_us([&] { cublas(y_ref, next++); }, 50);
    const float cb_chain = time_us(
                               [&] {
                                 for (int i = 0; i < kChain; ++i) cublas(y_ref, i);
                               },
                               10) /
                           kChain;
    std::printf("%6d x %-6d %6.1f / %5.1f %5.2f", s.n, s.k, cb, cb_chain, mb / cb);
    const std::vector<float> ref = read_floats(y_ref, s.n);
    for (int splits : {1, 2, 4, 8}) {
      std::vector<kern::Args> as;
      for (T* p : ws) as.push_back(args_for(x, p, y, s, splits));
      CHECK(cudaMemset(y, 0xff, s.n * sizeof(T)));
      int next = 0;
      const float us = time_us([&] { launch(as[next++ % copies], nullptr); }, 50);
      const float chain = time_us(
                              [&] {
                                for (int i = 0; i < kChain; ++i) launch(as[i % copies], nullptr);
                              },
                              10) /
                          kChain;
      const std::vector<float> got = read_floats(y, s.n);
      double worst = 0;
      for (int i = 0; i < s.n; ++i)
        worst = std::max(worst, double(std::fabs(got[i] - ref[i])) / (0.05 + std::fabs(ref[i])));
      std::printf("  %6.1f / %5.1f %5.2f%s", us, chain, mb / us, worst > 2e-2 || std::isnan(worst) ? "!" : " ");
    }
    std::printf("\n");
    for (T* p : ws) CHECK(cudaFree(p));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(y_ref));
  }
  cublasDestroy(h);
  return 0;
}
