// The library's GEMM with a fused epilogue, out = act(x · Wᵀ + bias (+ C)) in bf16 (src/common/gemm_sm90.cuh: linear +
// GELU-erf / SiLU at inference, 1 x 1 convolutions), in several tile shapes, clusters and schedules, against cuBLASLt
// with its own epilogues (bare, BIAS, GELU_BIAS) as the library calls it (the heuristic's first algorithm) and the
// fastest of the heuristic's first eight. This program is how the library's choice between the two and its tiles were
// made (docs/performance/linear-act.md). Every CUTLASS output is checked on sampled elements against fp64 dot
// products. Diagnostic only, not part of the library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude -Ibench/micro \
//     -I<cutlass>/include -DTIGON_WITH_CUDA -DTIGON_CUDA_ARCHS_STRING=\"90a\" -o build/linear_act_tiles \
//     bench/micro/linear_act_tiles.cu src/common/device.cpp -lcublasLt
//   build/linear_act_tiles
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/gemm_sm90.cuh"
#include "micro_util.cuh"

namespace {

using T = cutlass::bfloat16_t;

struct Shape3 {
  int m, n, k;  // tokens, out_features, in_features
};

struct Buffers {
  T *x, *w, *bias, *res, *out;
  void* ws;
};

constexpr size_t kWorkspace = size_t(64) << 20;

double act_ref(int act, double z) {
  switch (act) {
    case TIGON_ACT_RELU: return z > 0 ? z : 0;
    case TIGON_ACT_GELU_ERF: return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    case TIGON_ACT_GELU_TANH: return 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    case TIGON_ACT_SILU: return z / (1 + std::exp(-z));
    default: return z;
  }
}

// Largest |out - want| / (|want| + 1e-2 max|want|) over 2048 sampled elements (with C: act(x·Wᵀ + bias + C)).
double sampled_error(const Buffers& b, const Shape3& s, int act, bool with_c) {
  const std::vector<float> x = read_floats(b.x, size_t(s.m) * s.k), w = read_floats(b.w, size_t(s.n) * s.k);
  const std::vector<float> bias = read_floats(b.bias, s.n), out = read_floats(b.out, size_t(s.m) * s.n);
  const std::vector<float> res = with_c ? read_floats(b.res, size_t(s.m) * s.n) : std::vector<float>();
  std::mt19937 rng(3);
  std::vector<double> want(2048), got(2048);
  double scale = 0;
  for (int i = 0; i < 2048; ++i) {
    const int m = int(rng() % s.m), n = int(rng() % s.n);
    double dot = bias[n] + (with_c ? res[size_t(m) * s.n + n] : 0.f);
    for (int k = 0; k < s.k; ++k) dot += double(x[size_t(m) * s.k + k]) * w[size_t(n) * s.k + k];
    want[i] = act_ref(act, dot);
    got[i] = out[size_t(m) * s.n + n];
    scale = std::fmax(scale, std::fabs(want[i]));
  }
  double worst = 0;
  for (int i = 0; i < 2048; ++i)
    worst = std::fmax(worst, std::fabs(got[i] - want[i]) / (std::fabs(want[i]) + 1e-2 * scale));
  return worst;
}

template <class C>
void run(const char* name, const Buffers& b, const Shape3& s, int act, int sms, bool with_c = false) {
  tigon::cuda::sm90::EpilogueGemm g;
  g.m = s.m, g.n = s.n, g.k = s.k;
  g.a = b.x, g.lda = s.k;
  g.b = b.w, g.ldb = s.k;
  g.bias = b.bias;
  if (with_c) g.c = b.res, g.ldc = s.n;
  g.d = b.out, g.ldd = s.n;
  const typename C::Gemm::Arguments args = tigon::cuda::sm90::gemm_arguments<C>(g, 0, sms);
  typename C::Gemm op;
  if (op.can_implement(args) != cutlass::Status::kSuccess || C::Gemm::get_workspace_size(args) > kWorkspace) {
    std::printf("  %-44s refused\n", name);
    return;
  }
  CHECK(cudaMemset(b.out, 0, size_t(s.m) * s.n * sizeof(T)));
  if (op.initialize(args, b.ws) != cutlass::Status::kSuccess) {
    std::printf("  %-44s could not initialize\n", name);
    return;
  }
  const float us = time_us([&] { op.run(); }, 31);
  const double tf = 2.0 * s.m * s.n * double(s.k) / us * 1e-6;
  const double gbs = 2.0 * (double(s.m) * s.k + double(s.n) * s.k + double(s.m) * s.n * (with_c ? 2 : 1)) / us * 1e-3;
  std::printf("  %-44s %9.1f us  %6.1f TFLOP/s  %6.0f GB/s  workspace %zu  sampled error %.2e\n", name, us, tf, gbs,
              size_t(C::Gemm::get_workspace_size(args)), sampled_error(b, s, act, with_c));
}

// cuBLASLt: out (column-major N x M) = Wᵀ · x with the given epilogue; the heuristic's first algorithm, then the
// fastest of its first eight.
void run_cublaslt(cublasLtHandle_t lt, const Buffers& b, const Shape3& s, cublasLtEpilogue_t epi, const char* name,
                  bool with_c = false) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    const void* bias = b.bias;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, s.m, s.k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, s.m, s.n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace, sizeof(kWorkspace));
  cublasLtMatmulHeuristicResult_t heur[8];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, heur, &found);
  const float one = 1, zero = 0;
  const float* beta = with_c ? &one : &zero;
  const void* c = with_c ? static_cast<const void*>(b.res) : b.out;
  float first = 0, best = 1e30f;
  int best_i = -1;
  for (int i = 0; i < found; ++i) {
    const float us = time_us(
        [&] {
          cublasLtMatmul(lt, desc, &one, b.w, la, b.x, lb, &zero, b.out, lc, b.out, lc, &heur[i].algo, b.ws, kWorkspace,
                         0);
        },
        31);
    if (i == 0) first = us;
    if (us < best) best = us, best_i = i;
  }
  const double flop = 2.0 * s.m * s.n * double(s.k);
  if (found == 0)
    std::printf("  %-40s no algorithm\n", name);
  else
    std::printf("  %-40s %9.1f us  %6.1f TFLOP/s  (best of %d: #%d %.1f us, %.1f TFLOP/s)\n", name, first,
                flop / first * 1e-6, found, best_i, best, flop / best * 1e-6);
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
}

template <int Act, int M, int N, int CM, bool PP = false>
using Config = tigon::cuda::sm90::GemmConfig<T, Act, M, N, CM, PP>;

// SiLU as 0.5 x (1 + tanh(x / 2)) with the hardware's tanh.approx.f32: one MUFU operation where x / (1 + exp(-x))
// takes an ex2 and a division (is the epilogue's arithmetic what costs?)
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class V>
struct FastSilu {
  CUTLASS_DEVICE V operator()(V const& x) const {
    if constexpr (std::is_same_v<V, float>) {
      const float h = 0.5f * x;
      return h + h * tanh_approx(h);
    } else {
      V y;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < int(V::kElements); ++i) y[i] = (*this)(x[i]);
      return y;
    }
  }
};

template <int M, int N, int CM, bool PP = false>
using FastSiluConfig = tigon::cuda::sm90::GemmConfig<T, TIGON_ACT_SILU, M, N, CM, PP, FastSilu>;

}  // namespace

int main() {
  const int sms = device_sms();
  // Llama-3-8B's up projection over 8192 tokens, a square GEMM, BERT-base's intermediate dense at 32 x 256, 8 x 512
  // and 1 x 128 tokens
  const Shape3 shapes[] = {
      {8192, 14336, 4096}, {4096, 4096, 4096}, {8192, 3072, 768}, {4096, 3072, 768}, {128, 3072, 768}};
  // ResNet-50's 1 x 1 convolutions at batch 64 as GEMMs (pixels x out channels x in channels)
  const Shape3 convs[] = {{200704, 256, 64},  {200704, 64, 256},  {50176, 512, 128},
                          {12544, 256, 1024}, {12544, 1024, 256}, {3136, 2048, 512}};
  size_t max_mk = 0, max_nk = 0, max_mn = 0;
  int max_n = 0;
  for (const Shape3& s : convs) {
    max_mk = std::max(max_mk, size_t(s.m) * s.k), max_nk = std::max(max_nk, size_t(s.n) * s.k);
    max_mn = std::max(max_mn, size_t(s.m) * s.n), max_n = std::max(max_n, s.n);
  }
  for (const Shape3& s : shapes) {
    max_mk = std::max(max_mk, size_t(s.m) * s.k), max_nk = std::max(max_nk, size_t(s.n) * s.k);
    max_mn = std::max(max_mn, size_t(s.m) * s.n), max_n = std::max(max_n, s.n);
  }
  Buffers b;
  CHECK(cudaMalloc(&b.x, max_mk * 2));
  CHECK(cudaMalloc(&b.w, max_nk * 2));
  CHECK(cudaMalloc(&b.bias, max_n * 2));
  CHECK(cudaMalloc(&b.out, max_mn * 2));
  CHECK(cudaMalloc(&b.res, max_mn * 2));
  CHECK(cudaMalloc(&b.ws, kWorkspace));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  {
    std::vector<T> h(std::max(max_mk, max_nk));
    for (auto& v : h) v = T(normal(rng));
    CHECK(cudaMemcpy(b.x, h.data(), max_mk * 2, cudaMemcpyHostToDevice));
    for (auto& v : h) v = T(normal(rng) * 0.02f);  // unit-ish outputs at K = 4096
    CHECK(cudaMemcpy(b.w, h.data(), max_nk * 2, cudaMemcpyHostToDevice));
    std::vector<T> bias(max_n);
    for (auto& v : bias) v = T(normal(rng) * 0.1f);
    CHECK(cudaMemcpy(b.bias, bias.data(), max_n * 2, cudaMemcpyHostToDevice));
    std::vector<T> res(max_mn);
    for (auto& v : res) v = T(normal(rng));
    CHECK(cudaMemcpy(b.res, res.data(), max_mn * 2, cudaMemcpyHostToDevice));
  }
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  for (const Shape3& s : shapes) {
    std::printf("M %d N %d K %d\n", s.m, s.n, s.k);
    run_cublaslt(lt, b, s, CUBLASLT_EPILOGUE_DEFAULT, "cuBLASLt bare");
    run_cublaslt(lt, b, s, CUBLASLT_EPILOGUE_BIAS, "cuBLASLt BIAS");
    run_cublaslt(lt, b, s, CUBLASLT_EPILOGUE_GELU_BIAS, "cuBLASLt GELU_BIAS (tanh)");
    run<Config<TIGON_ACT_NONE, 128, 256, 2>>("none 128x256 coop cluster 2x1", b, s, TIGON_ACT_NONE, sms);
    run<Config<TIGON_ACT_NONE, 128, 128, 1>>("none 128x128 coop", b, s, TIGON_ACT_NONE, sms);
    run<Config<TIGON_ACT_GELU_TANH, 128, 256, 2>>("gelu_tanh 128x256 coop cluster 2x1", b, s, TIGON_ACT_GELU_TANH, sms);
    run<Config<TIGON_ACT_GELU_TANH, 128, 128, 1>>("gelu_tanh 128x128 coop", b, s, TIGON_ACT_GELU_TANH, sms);
    run<Config<TIGON_ACT_SILU, 128, 256, 2>>("silu 128x256 coop cluster 2x1", b, s, TIGON_ACT_SILU, sms);
    run<Config<TIGON_ACT_SILU, 128, 256, 1>>("silu 128x256 coop", b, s, TIGON_ACT_SILU, sms);
    run<Config<TIGON_ACT_SILU, 128, 128, 1>>("silu 128x128 coop", b, s, TIGON_ACT_SILU, sms);
    run<FastSiluConfig<128, 256, 2>>("silu (tanh.approx) 128x256 coop cluster 2x1", b, s, TIGON_ACT_SILU, sms);
    run<FastSiluConfig<128, 128, 1>>("silu (tanh.approx) 128x128 coop", b, s, TIGON_ACT_SILU, sms);
  }
  for (const Shape3& s : convs) {
    std::printf("1x1 convolution as a GEMM: M %d N %d K %d\n", s.m, s.n, s.k);
    run_cublaslt(lt, b, s, CUBLASLT_EPILOGUE_RELU_BIAS, "cuBLASLt RELU_BIAS");
    run_cublaslt(lt, b, s, CUBLASLT_EPILOGUE_RELU_BIAS, "cuBLASLt RELU_BIAS + C", true);
    run<Config<TIGON_ACT_RELU, 128, 256, 2>>("relu 128x256 coop cluster 2x1", b, s, TIGON_ACT_RELU, sms);
    run<Config<TIGON_ACT_RELU, 128, 256, 2>>("relu + C 128x256 coop cluster 2x1", b, s, TIGON_ACT_RELU, sms, true);
    run<Config<TIGON_ACT_RELU, 128, 128, 1>>("relu 128x128 coop", b, s, TIGON_ACT_RELU, sms);
    run<Config<TIGON_ACT_RELU, 128, 128, 1>>("relu + C 128x128 coop", b, s, TIGON_ACT_RELU, sms, true);
    run<Config<TIGON_ACT_RELU, 128, 64, 1, true>>("relu + C 128x64 pingpong", b, s, TIGON_ACT_RELU, sms, true);
  }
  cublasLtDestroy(lt);
  return 0;
}
