// Distillation CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "distill/distill.h"  // the test-only kernel selection
#include "test_util.h"
#include "tigon/distill.h"

using namespace tigon_test;

namespace {

// Selects a row kernel for one test (nullptr: the library's plan) and restores the library's plan after.
struct KernelScope {
  explicit KernelScope(const char* name) {
    EXPECT_EQ(tigon_testing_distill_kernel(name), TIGON_SUCCESS) << tigon_last_error();
  }
  ~KernelScope() { tigon_testing_distill_kernel(nullptr); }
};

// variant ("cluster" or "classic"), dtype, rows, vocab, row pad, divergence, beta, teacher mode, reduction,
// in place (0: out of place, 1: over the student, 2: over the teacher)
using Case = std::tuple<const char*, DType, int64_t, int64_t, int64_t, int, float, int, int, int>;

void run_case(const Case& c) {
  const auto [variant, dt, N, V, pad, div, beta, teacher, reduction, in_place] = c;
  KernelScope scope(variant);
  std::mt19937 rng(11 + N + V + div);
  HostMat x(dt, N, V, V + pad), t(dt, N, V, V + pad), grad(dt, N, V, V + pad);
  x.fill_random(rng, 3.0);
  t.fill_random(rng, 3.0);
  if (teacher != TIGON_DISTILL_TEACHER_LOGITS)  // log-probabilities (or probabilities) of the random logits
    for (int64_t r = 0; r < N; ++r) {
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < V; ++k) mx = std::max(mx, t.at(r, k));
      for (int64_t k = 0; k < V; ++k) s += std::exp(t.at(r, k) - mx);
      for (int64_t k = 0; k < V; ++k) {
        const double lp = t.at(r, k) - mx - std::log(s);
        t.set(r, k, teacher == TIGON_DISTILL_TEACHER_PROBS ? std::exp(lp) : lp);
      }
    }
  grad.poison();
  std::vector<int64_t> labels(N);
  for (int64_t r = 0; r < N; ++r) labels[r] = r % 4 == 1 ? -100 : int64_t(rng() % V);
  const int64_t n_out = reduction == TIGON_DISTILL_REDUCTION_NONE ? N : 1;
  std::vector<float> loss(n_out, NAN), rloss(n_out, NAN);
  const tigon_distill_params p{div, teacher, reduction, beta, 1.5f, -100};

  HostMat rgrad = grad;
  {
    auto xv = x.view(), tv = t.view(), gv = rgrad.view();
    tigon::TensorView lv(labels.data(), {N}, tigon::dtype::int64), ov(rloss.data(), {n_out}, tigon::dtype::float32);
    ASSERT_EQ(tigon_distill_fwd(xv, tv, lv, ov, gv, p, nullptr, 0, nullptr), TIGON_SUCCESS) << tigon_last_error();
  }
  DevMat dx(x), dt_(t), dg(grad);
  void* dl = nullptr;
  void* dloss = nullptr;
  ASSERT_EQ(cudaMalloc(&dl, N * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dloss, n_out * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dl, labels.data(), N * 8, cudaMemcpyHostToDevice), cudaSuccess);
  auto xv = dx.view(), tv = dt_.view();
  auto gv = in_place == 1 ? xv : in_place == 2 ? tv : dg.view();
  size_t ws_bytes = 0;
  ASSERT_EQ(tigon_distill_fwd_workspace_size(xv, &ws_bytes), TIGON_SUCCESS);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  tigon::TensorView lv(dl, {N}, tigon::dtype::int64, tigon::cuda(0)),
      ov(dloss, {n_out}, tigon::dtype::float32, tigon::cuda(0));
  ASSERT_EQ(tigon_distill_fwd(xv, tv, lv, ov, gv, p, ws.get(), ws.size(), nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::string ran = tigon_testing_distill_last_kernel();
  const bool aligned = (N <= 1 || ((V + pad) * tigon::dtype_bytes(dt)) % 16 == 0);
  // A row (student and teacher) past 8 blocks' shared memory falls back to the classic kernel: fp32 x 262144 (2 MiB).
  int smem_block = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  const bool fits = 2 * V * tigon::dtype_bytes(dt) <= 8 * (int64_t(smem_block) - 1024);
  const std::string want = std::string(variant) == "classic" || !aligned || !fits ? "classic" : "cluster";
  EXPECT_EQ(ran.substr(0, want.size()), want) << "variant " << variant << " ran " << ran;
  HostMat got = (in_place == 1 ? dx : in_place == 2 ? dt_ : dg).fetch();
  ASSERT_EQ(cudaMemcpy(loss.data(), dloss, n_out * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dl);
  cudaFree(dloss);

  const double tol = rtol_of(dt) < 1e-4 ? 2e-4 : 2e-3;  // fp32 sums over a row in another order, ex2/lg2.approx
  for (int64_t i = 0; i < n_out; ++i) EXPECT_NEAR(loss[i], rloss[i], tol * (1 + std::fabs(rloss[i]))) << "loss " << i;
  // The gradient: one rounding to the dtype apart, with an absolute floor below the largest element.
  double mx = 0;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < V; ++k) mx = std::max(mx, std::fabs(rgrad.at(r, k)));
  EXPECT_LE(worst_ratio(got, rgrad, 1e-6 + 4 * rtol_of(dt) * mx, 2 * rtol_of(dt)), 1.0);
  // Tighter than the table for 16-bit rows: the kernels' own error (the cluster kernel keeps JSD's and TVD's gradient
  // terms in fp16) stays within a thousandth of the largest element, besides a unit in the last place of each.
  if (dt != DType::kFloat32) {
    const double ulp = dt == DType::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    EXPECT_LE(worst_ratio(got, rgrad, 1e-6 + 1e-3 * mx, ulp), 1.0) << "gradient beyond 1e-3 of its largest element";
  }
}

class DistillCuda : public ::testing::TestWithParam<Case> {};

TEST_P(DistillCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  run_case(GetParam());
}

const char* div_name(int div, float beta) {
  if (div == TIGON_DIVERGENCE_KL) return "kl";
  if (div == TIGON_DIVERGENCE_TVD) return "tvd";
  return beta == 0.f ? "jsd0" : beta == 1.f ? "jsd1" : "jsd";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [variant, dt, N, V, pad, div, beta, teacher, reduction, in_place] = info.param;
  const char* modes[] = {"logits", "logprobs", "probs"};
  const char* places[] = {"", "_inplace", "_overteacher"};
  return std::string(variant) + "_" + short_name(dt) + "_" + std::to_string(N) + "x" + std::to_string(V) + "_pad" +
         std::to_string(pad) + "_" + div_name(div, beta) + "_" + modes[teacher] + "_red" + std::to_string(reduction) +
         places[in_place];
}

constexpr int kKL = TIGON_DIVERGENCE_KL, kJSD = TIGON_DIVERGENCE_JSD, kTVD = TIGON_DIVERGENCE_TVD;
constexpr int kLogits = TIGON_DISTILL_TEACHER_LOGITS, kLogProbs = TIGON_DISTILL_TEACHER_LOG_PROBS,
              kProbs = TIGON_DISTILL_TEACHER_PROBS;
constexpr int kNone = TIGON_DISTILL_REDUCTION_NONE, kMean = TIGON_DISTILL_REDUCTION_MEAN,
              kSum = TIGON_DISTILL_REDUCTION_SUM, kBatch = TIGON_DISTILL_REDUCTION_BATCHMEAN;
const auto kBf16 = DType::kBFloat16, kF16 = DType::kFloat16, kF32 = DType::kFloat32;

// Every divergence and teacher mode on both kernels; aligned rows (the cluster kernel) and odd ones (classic).
INSTANTIATE_TEST_SUITE_P(Kernels, DistillCuda,
                         ::testing::Combine(::testing::Values("cluster", "classic"), ::testing::Values(kBf16),
                                            ::testing::Values(int64_t(9)),
                                            ::testing::Values(int64_t(4096), int64_t(1001)),
                                            ::testing::Values(int64_t(0)), ::testing::Values(kKL, kJSD, kTVD),
                                            ::testing::Values(0.3f), ::testing::Values(kLogits, kLogProbs, kProbs),
                                            ::testing::Values(kBatch), ::testing::Values(0)),
                         case_name);

// Dtypes, reductions, JSD's end points, in place over either input, padded rows, long rows (the cluster split over
// several blocks: 128256 and 262144 columns; fp32 x 262144 does not fit and runs the classic kernel).
INSTANTIATE_TEST_SUITE_P(Shapes, DistillCuda,
                         ::testing::Values(Case{"cluster", kF32, 7, 1001, 3, kJSD, 0.5f, kLogits, kSum, 0},
                                           Case{"cluster", kF16, 5, 32000, 8, kKL, 0.5f, kProbs, kMean, 1},
                                           Case{"cluster", kF32, 4, 32003, 0, kTVD, 0.5f, kLogits, kNone, 2},
                                           Case{"cluster", kBf16, 3, 128256, 0, kJSD, 0.5f, kLogits, kBatch, 1},
                                           Case{"cluster", kBf16, 3, 128256, 0, kKL, 0.5f, kLogits, kBatch, 1},
                                           Case{"cluster", kBf16, 3, 128256, 0, kJSD, 0.f, kLogits, kNone, 0},
                                           Case{"cluster", kBf16, 3, 128256, 0, kJSD, 1.f, kLogits, kSum, 2},
                                           Case{"cluster", kF32, 2, 262144, 8, kJSD, 0.7f, kLogProbs, kBatch, 0},
                                           Case{"cluster", kBf16, 2, 262144, 0, kKL, 0.5f, kLogits, kMean, 1},
                                           Case{"cluster", kBf16, 64, 4096, 0, kTVD, 0.5f, kLogits, kMean, 1},
                                           Case{"cluster", kBf16, 1, 8, 0, kJSD, 0.5f, kLogits, kBatch, 0},
                                           // aligned rows with a tail past the last whole vector (from global memory)
                                           Case{"cluster", kBf16, 5, 32003, 5, kKL, 0.5f, kLogits, kBatch, 1},
                                           Case{"cluster", kBf16, 3, 32003, 5, kJSD, 1.f, kLogProbs, kSum, 0},
                                           Case{"cluster", kBf16, 3, 32001, 7, kTVD, 0.5f, kProbs, kSum, 2},
                                           Case{"cluster", kF16, 4, 50257, 7, kJSD, 0.3f, kLogProbs, kMean, 0},
                                           Case{"cluster", kF16, 3, 65536, 0, kTVD, 0.5f, kLogits, kNone, 1}),
                         case_name);

}  // namespace
