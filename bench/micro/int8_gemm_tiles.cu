// Tile shapes, cluster shapes and schedules of the fused W8A8 GEMM that src/int8/ ships (int8_gemm_sm90.cuh: int8
// operands, int32 accumulation, scale_x[m] * scale_w[n] * acc + bias[n] in the epilogue, bf16 out), timed on square
// and LLM projection shapes, against cuBLASLt's int8 GEMM alone (int32 out, no dequantization). The library ships
// two (int8_gemm_sm90.cu: wide tiles in clusters, 128 x 128 when those would not fill the GPU); this program is how a
// change to them is chosen. Every configuration's output is
// checked on sampled elements against exact int32 dot products. Diagnostic only, not part of the library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude -Ibench/micro \
//     -I<cutlass>/include -DTIGON_WITH_CUDA -o build/int8_gemm_tiles bench/micro/int8_gemm_tiles.cu \
//     src/common/device.cpp -lcublasLt
//   build/int8_gemm_tiles
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "int8/int8_gemm_sm90.cuh"
#include "micro_util.cuh"

namespace {

using Out = cutlass::bfloat16_t;

struct Shape3 {
  int m, n, k;
};

struct Buffers {
  int8_t *x, *w;
  float *sx, *sw;
  Out *bias, *out;
  int32_t* acc;
  void* ws;
};

constexpr size_t kWorkspace = size_t(64) << 20;

tigon::int8::LinearProblem problem(const Buffers& b, const Shape3& s) {
  tigon::int8::LinearProblem p;
  p.qx = {b.x, tigon::DType::kInt8, s.m, s.k, s.k};
  p.qw = {b.w, tigon::DType::kInt8, s.n, s.k, s.k};
  p.scale_x = b.sx, p.scale_w = b.sw, p.bias = b.bias;
  p.out = {b.out, tigon::DType::kBFloat16, s.m, s.n, s.n};
  return p;
}

// Largest |out - want| / (|want| + 1e-2 max|want|) over 4096 sampled elements, want from exact int32 dot products.
double sampled_error(const Buffers& b, const Shape3& s) {
  std::vector<int8_t> x(size_t(s.m) * s.k), w(size_t(s.n) * s.k);
  std::vector<float> sx(s.m), sw(s.n);
  std::vector<__nv_bfloat16> bias(s.n), out(size_t(s.m) * s.n);
  CHECK(cudaMemcpy(x.data(), b.x, x.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(w.data(), b.w, w.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sx.data(), b.sx, sx.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sw.data(), b.sw, sw.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(bias.data(), b.bias, bias.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(out.data(), b.out, out.size() * 2, cudaMemcpyDeviceToHost));
  std::mt19937 rng(3);
  std::vector<double> want(4096), got(4096);
  double scale = 0;
  for (int i = 0; i < 4096; ++i) {
    const int m = int(rng() % s.m), n = int(rng() % s.n);
    int64_t dot = 0;
    for (int k = 0; k < s.k; ++k) dot += int64_t(x[size_t(m) * s.k + k]) * w[size_t(n) * s.k + k];
    want[i] = double(dot) * sx[m] * sw[n] + double(__bfloat162float(bias[n]));
    got[i] = __bfloat162float(out[size_t(m) * s.n + n]);
    scale = std::fmax(scale, std::fabs(want[i]));
  }
  double worst = 0;
  for (int i = 0; i < 4096; ++i)
    worst = std::fmax(worst, std::fabs(got[i] - want[i]) / (std::fabs(want[i]) + 1e-2 * scale));
  return worst;
}

template <class C>
void run(const char* name, const Buffers& b, const Shape3& s, int sms) {
  const tigon::int8::LinearProblem p = problem(b, s);
  const typename C::Gemm::Arguments args = tigon::int8::sm90::arguments<C>(p, 0, sms);
  typename C::Gemm op;
  if (op.can_implement(args) != cutlass::Status::kSuccess || C::Gemm::get_workspace_size(args) > kWorkspace) {
    std::printf("  %-36s refused\n", name);
    return;
  }
  CHECK(cudaMemset(b.out, 0, size_t(s.m) * s.n * sizeof(Out)));
  if (op.initialize(args, b.ws) != cutlass::Status::kSuccess) {
    std::printf("  %-36s could not initialize\n", name);
    return;
  }
  const float us = time_us([&] { op.run(); });
  const double tops = 2.0 * s.m * s.n * double(s.k) / us * 1e-6;
  std::printf("  %-36s %9.1f us  %7.1f TOPS  sampled error %.2e\n", name, us, tops, sampled_error(b, s));
}

// cuBLASLt's int8 GEMM into int32 (the library's other path, before its dequantize pass): acc (column-major N x M) =
// wᵀ · x, the "TN" form.
void run_cublaslt(cublasLtHandle_t lt, const Buffers& b, const Shape3& s) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I);
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n));
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, s.k, s.n, s.k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, s.k, s.m, s.k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, s.n, s.m, s.n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace, sizeof(kWorkspace));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found);
  if (found == 0) {
    std::printf("  %-36s no algorithm\n", "cuBLASLt int8 -> int32");
    return;
  }
  const int32_t one = 1, zero = 0;
  const float us = time_us([&] {
    cublasLtMatmul(lt, desc, &one, b.w, la, b.x, lb, &zero, b.acc, lc, b.acc, lc, &heur.algo, b.ws, kWorkspace, 0);
  });
  std::printf("  %-36s %9.1f us  %7.1f TOPS  (no dequantization)\n", "cuBLASLt int8 -> int32", us,
              2.0 * s.m * s.n * double(s.k) / us * 1e-6);
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
}

template <int M, int N, int CM, bool PP>
using Config = tigon::int8::sm90::Config<Out, TIGON_ACT_NONE, M, N, CM, PP>;

}  // namespace

int main() {
  const int sms = device_sms();
  const Shape3 shapes[] = {
      {8192, 8192, 8192}, {8192, 14336, 4096}, {8192, 4096, 14336}, {4096, 4096, 4096}, {512, 4096, 4096}};
  size_t max_mk = 0, max_nk = 0, max_mn = 0;
  int max_m = 0, max_n = 0;
  for (const Shape3& s : shapes) {
    max_mk = std::max(max_mk, size_t(s.m) * s.k), max_nk = std::max(max_nk, size_t(s.n) * s.k);
    max_mn = std::max(max_mn, size_t(s.m) * s.n), max_m = std::max(max_m, s.m), max_n = std::max(max_n, s.n);
  }
  Buffers b;
  CHECK(cudaMalloc(&b.x, max_mk));
  CHECK(cudaMalloc(&b.w, max_nk));
  CHECK(cudaMalloc(&b.sx, max_m * 4));
  CHECK(cudaMalloc(&b.sw, max_n * 4));
  CHECK(cudaMalloc(&b.bias, max_n * 2));
  CHECK(cudaMalloc(&b.out, max_mn * 2));
  CHECK(cudaMalloc(&b.acc, max_mn * 4));
  CHECK(cudaMalloc(&b.ws, kWorkspace));
  std::mt19937 rng(1);
  {
    std::vector<int8_t> h(std::max(max_mk, max_nk));
    for (auto& v : h) v = int8_t(int(rng() % 255) - 127);
    CHECK(cudaMemcpy(b.x, h.data(), max_mk, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.w, h.data() + 17, max_nk - 17, cudaMemcpyHostToDevice));
    std::vector<float> sc(std::max(max_m, max_n));
    for (auto& v : sc) v = 1e-3f * (1.f + float(rng() % 1000) / 1000.f);
    CHECK(cudaMemcpy(b.sx, sc.data(), max_m * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.sw, sc.data(), max_n * 4, cudaMemcpyHostToDevice));
    std::vector<__nv_bfloat16> bias(max_n);
    for (auto& v : bias) v = __float2bfloat16(float(int(rng() % 200) - 100) / 50.f);
    CHECK(cudaMemcpy(b.bias, bias.data(), max_n * 2, cudaMemcpyHostToDevice));
  }
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  for (const Shape3& s : shapes) {
    std::printf("M %d N %d K %d\n", s.m, s.n, s.k);
    run_cublaslt(lt, b, s);
    run<Config<128, 256, 1, false>>("128x256 coop", b, s, sms);
    run<Config<128, 256, 2, false>>("128x256 coop cluster 2x1 (library)", b, s, sms);
    run<Config<256, 128, 1, false>>("256x128 coop", b, s, sms);
    run<Config<256, 128, 2, false>>("256x128 coop cluster 2x1", b, s, sms);
    run<Config<128, 128, 1, false>>("128x128 coop (library, small M)", b, s, sms);
    run<Config<128, 128, 1, true>>("128x128 pingpong", b, s, sms);
    run<Config<128, 128, 2, true>>("128x128 pingpong cluster 2x1", b, s, sms);
  }
  cublasLtDestroy(lt);
  return 0;
}
