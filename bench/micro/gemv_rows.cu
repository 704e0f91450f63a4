// Which GEMV kernel for how many rows of x: the CUDA-core kernel (M FMAs per weight element) against the tensor-core
// one (mma.sync; src/gemv/ runs it from 5 rows) on Llama-3-8B's decode shapes at 1-16 rows (a decode batch), each with
// the library's plan, beside cuBLAS. Times alone and per launch in a chain of dependent launches (how a decode step
// runs them), TB/s of the weight read once; each output is compared with cuBLAS's. Diagnostic only, not part of the
// library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/gemv_rows bench/micro/gemv_rows.cu -lcublas
//   build/gemv_rows
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gemv/gemv_plan.cuh"
#include "micro_util.cuh"

namespace {

namespace gemv = tigon::gemv;
namespace kern = tigon::gemv::kern;
using T = __nv_bfloat16;
constexpr int kChain = 32;

struct Shape {
  const char* name;
  int n, k;
};
const Shape kShapes[] = {{"o", 4096, 4096}, {"qkv", 6144, 4096}, {"gate+up", 28672, 4096}, {"down", 4096, 14336}};
const int kRows[] = {1, 2, 4, 5, 8, 12, 16};

kern::Args args_for(const T* x, const T* w, T* y, const Shape& s, int m, const gemv::Plan& p, int block_rows) {
  kern::Args a{};
  a.x = x, a.y = y, a.M = m, a.K = s.k, a.x_stride = s.k, a.y_stride = s.n, a.parts = 1;
  a.w[0] = w, a.w_stride[0] = s.k, a.rows[0] = s.n;
  a.tile_first[1] = gemv::ceil_div(s.n, block_rows);
  a.k_split = p.k_split;
  a.tile_k = p.tile_k;
  return a;
}

// The CUDA-core kernel as the library plans it for m rows.
void launch_cores(const T* x, const T* w, T* y, const Shape& s, int m, int sms, cudaStream_t st) {
  const gemv::Plan p = gemv::make_plan(m, gemv::ceil_div(s.n, kern::kBlockRows), s.k, tigon::DType::kBFloat16, sms);
  const kern::Args a = args_for(x, w, y, s, m, p, kern::kBlockRows);
  const size_t smem = size_t(p.mt) * p.tile_k * sizeof(T);
  switch (p.mt) {
    case 1: return gemv::launch_chunks<1>(a, p, smem, st, kern::gemv<T, 1, 8, T>);
    case 2: return gemv::launch_chunks<2>(a, p, smem, st, kern::gemv<T, 2, 8, T>);
    case 4: return gemv::launch_chunks<4>(a, p, smem, st, kern::gemv<T, 4, 8, T>);
    case 8: return gemv::launch_chunks<8>(a, p, smem, st, kern::gemv<T, 8, 8, T>);
    default: return gemv::launch_chunks<16>(a, p, smem, st, kern::gemv<T, 16, 8, T>);
  }
}

// The tensor-core kernel as the library plans it (8 or 16 rows of x staged per block).
void launch_mma(const T* x, const T* w, T* y, const Shape& s, int m, int sms, cudaStream_t st) {
  const gemv::Plan p = gemv::make_plan(m, gemv::ceil_div(s.n, kern::kMmaBlockRows), s.k, tigon::DType::kBFloat16, sms);
  const kern::Args a = args_for(x, w, y, s, m, p, kern::kMmaBlockRows);
  if (p.mt <= 8)
    gemv::launch_chunks<8>(a, p, 8 * (p.tile_k + kern::kMmaPad) * sizeof(T), st, kern::gemv_mma<T, 8>);
  else
    gemv::launch_chunks<16>(a, p, 16 * (p.tile_k + kern::kMmaPad) * sizeof(T), st, kern::gemv_mma<T, 16>);
}

}  // namespace

int main() {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  const int sms = device_sms();
  std::printf(
      "gemv_rows: bf16, %d SMs; us alone / per launch in a chain of %d, TB/s of W alone ('!': differs from "
      "cuBLAS)\n",
      sms, kChain);
  std::printf("%-8s %-13s %4s %24s %24s %24s\n", "", "N x K", "rows", "cuBLAS", "CUDA cores", "tensor cores");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  bool ok = true;
  for (const Shape& s : kShapes) {
    const size_t wn = size_t(s.n) * s.k, xn = size_t(16) * s.k, yn = size_t(16) * s.n;
    std::vector<T> hw(wn), hx(xn);
    for (auto& v : hw) v = __float2bfloat16(0.05f * nd(rng));
    for (auto& v : hx) v = __float2bfloat16(nd(rng));
    T *w, *x, *y, *y_ref;
    CHECK(cudaMalloc(&w, wn * sizeof(T)));
    CHECK(cudaMalloc(&x, xn * sizeof(T)));
    CHECK(cudaMalloc(&y, yn * sizeof(T)));
    CHECK(cudaMalloc(&y_ref, yn * sizeof(T)));
    CHECK(cudaMemcpy(w, hw.data(), wn * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(x, hx.data(), xn * sizeof(T), cudaMemcpyHostToDevice));
    const double mb = double(wn) * sizeof(T) * 1e-6;
    for (int m : kRows) {
      const float one = 1.f, zero = 0.f;
      // y [m, N] = x [m, K] W^T with W row-major [N, K]: column-major, y^T = W x^T, op(A) = A^T with A = W^T
      auto cublas = [&](T* out) {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &one, w, CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k, &zero,
                     out, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      auto cell = [&](auto&& launch, T* out, bool check) {
        CHECK(cudaMemset(out, 0xff, yn * sizeof(T)));
        const float us = time_us(launch, 50);
        const float chain = time_us(
                                [&] {
                                  for (int i = 0; i < kChain; ++i) launch();
                                },
                                10) /
                            kChain;
        bool bad = false;
        if (check) {
          const std::vector<float> got = read_floats(out, size_t(m) * s.n), ref = read_floats(y_ref, size_t(m) * s.n);
          for (size_t i = 0; i < got.size(); ++i)
            bad = bad || !(std::fabs(got[i] - ref[i]) <= 2e-2 * (0.05 + std::fabs(ref[i])));
        }
        ok = ok && !bad;
        std::printf(" %7.1f / %6.1f %5.2f%s", us, chain, mb / us, bad ? "!" : " ");
      };
      std::printf("%-8s %6d x %-6d %3d ", s.name, s.n, s.k, m);
      cell([&] { cublas(y_ref); }, y_ref, false);
      cell([&] { launch_cores(x, w, y, s, m, sms, nullptr); }, y, true);
      cell([&] { launch_mma(x, w, y, s, m, sms, nullptr); }, y, true);
      std::printf("\n");
    }
    for (T* p : {w, x, y, y_ref}) CHECK(cudaFree(p));
  }
  cublasDestroy(h);
  std::printf("%s\n", ok ? "all outputs match cuBLAS" : "SOME OUTPUTS DIFFER");
  return ok ? 0 : 1;
}
