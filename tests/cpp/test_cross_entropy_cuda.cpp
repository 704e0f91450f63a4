// Cross entropy CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "test_util.h"
#include "cross_entropy/cross_entropy.h"  // the test-only kernel selection
#include "tigon/cross_entropy.h"

using namespace tigon_test;

namespace {

// A device copy of host bytes, fetched back on demand.
struct Dev {
  void* ptr = nullptr;
  size_t bytes;
  Dev(const void* host, size_t n) : bytes(n) {
    EXPECT_EQ(cudaMalloc(&ptr, n), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(ptr); }
  void fetch(void* host) { EXPECT_EQ(cudaMemcpy(host, ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess); }
};

// dtype, rows, vocab, row pad, reduction, label smoothing, z-loss, softcap, class weights, in place
using Case = std::tuple<DType, int64_t, int64_t, int64_t, int, float, float, float, bool, bool>;

// Selects a row kernel for one test (nullptr: the library's plan) and restores the library's plan after.
struct KernelScope {
  explicit KernelScope(const char* name) {
    EXPECT_EQ(tigon_testing_cross_entropy_kernel(name), TIGON_SUCCESS) << tigon_last_error();
  }
  ~KernelScope() { tigon_testing_cross_entropy_kernel(nullptr); }
};

// The kernel a variant should have run: the cluster kernel takes unaligned rows too (the tests' gradients share the
// logits' layout); a forced cluster size is kept when its buffer fits in an H200 block's 227 KB of shared memory
// (less the kernel's 1.5 KB).
std::string expected_kernel(const std::string& variant, DType dt, int64_t V) {
  const int64_t elem = tigon::dtype_bytes(dt);
  if (variant == "classic") return "classic";
  const int64_t nvec = V * elem / 16;
  const auto fits = [&](int64_t blocks) { return (nvec + blocks - 1) / blocks * 16 <= 227 * 1024 - 1536; };
  if (variant.size() == 8 && fits(variant.back() - '0')) return variant;  // "clusterN"
  return "cluster";  // a size of the launcher's choosing: only the prefix is checked
}

// Runs one case with the given variant against the CPU reference, logits ~ mean + 3 N(0, 1). Rows r % 5 == 2 are
// ignored; rows r % 5 == 3 and r % 5 == 4 get their maximum twice (so the accuracy checks the first index wins,
// across blocks of a cluster too) and target the first or the second copy; rows r % 5 == 1 of unaligned layouts tie
// their last head column (before the row's first 16-byte boundary, from a 16-byte aligned buffer) with the first
// element of the same thread's first vector. The predicted tokens are checked on every case; scaling turns token
// scaling on.
void run_case(const Case& c, const char* variant, double mean = 0.0, bool scaling = false) {
  const auto [dt, N, V, pad, reduction, eps, zs, cap, weighted, in_place] = c;
  KernelScope scope(variant);
  std::mt19937 rng(17 + N + V);
  HostMat x(dt, N, V, V + pad), grad(dt, N, V, V + pad);
  x.fill_random(rng, 3.0, mean);
  grad.poison();
  std::vector<int64_t> t(N);
  for (int64_t r = 0; r < N; ++r) {
    t[r] = (r % 5 == 2) ? -100 : int64_t(rng() % V);
    if (V > 1 && (r % 5 == 3 || r % 5 == 4)) {
      int64_t c1 = 0;
      for (int64_t k = 1; k < V; ++k)
        if (x.at(r, k) > x.at(r, c1)) c1 = k;
      const int64_t c2 = (c1 + V / 2) % V, first = std::min(c1, c2), second = std::max(c1, c2);
      x.set(r, c2, x.at(r, c1));
      t[r] = r % 5 == 3 ? first : second;
    }
    const int64_t elem = tigon::dtype_bytes(dt), head = ((16 - r * (V + pad) * elem % 16) % 16) / elem;
    if (r % 5 == 1 && head > 0 && head + (head - 1) * (16 / elem) < V) {
      const int64_t h1 = head - 1, h2 = head + (head - 1) * (16 / elem);
      double mx = x.at(r, 0);
      for (int64_t k = 1; k < V; ++k) mx = std::max(mx, x.at(r, k));
      x.set(r, h1, mx + 1);
      x.set(r, h2, x.at(r, h1));
      t[r] = h2;
    }
  }
  std::vector<float> w(V);
  for (auto& v : w) v = 0.25f + float(rng() % 100) / 50.f;
  const int64_t n_out = reduction == TIGON_REDUCTION_NONE ? N : 1;
  std::vector<float> loss(n_out, NAN), z(n_out, NAN), acc(n_out, NAN);
  std::vector<int64_t> pred(N, -7);
  const tigon_cross_entropy_params p{-100, eps, zs, cap, reduction, scaling ? 1 : 0};

  // reference on the host
  HostMat rgrad = grad;
  std::vector<float> rloss = loss, rz = z, racc = acc;
  std::vector<int64_t> rpred = pred;
  {
    auto xv = x.view(), gv = rgrad.view();
    tigon::TensorView tv(t.data(), {N}, tigon::dtype::int64), wv(w.data(), {V}, tigon::dtype::float32),
        lv(rloss.data(), {n_out}, tigon::dtype::float32), zv(rz.data(), {n_out}, tigon::dtype::float32),
        av(racc.data(), {n_out}, tigon::dtype::float32), pv(rpred.data(), {N}, tigon::dtype::int64);
    ASSERT_EQ(
        tigon_cross_entropy_fwd(xv, tv, weighted ? wv.get() : nullptr, lv, zv, av, pv, gv, p, nullptr, 0, nullptr),
        TIGON_SUCCESS)
        << tigon_last_error();
  }
  // the same on the GPU; in place the gradient lands in the logits' buffer
  Dev gx(x.data(), x.span_bytes()), gg(grad.data(), grad.span_bytes()), gt(t.data(), N * 8), gw(w.data(), V * 4),
      gl(loss.data(), n_out * 4), gz(z.data(), n_out * 4), ga(acc.data(), n_out * 4), gp(pred.data(), N * 8);
  size_t ws_bytes = 0;
  auto xv = x.view(tigon::cuda(0), gx.ptr);
  auto gv = in_place ? xv : grad.view(tigon::cuda(0), gg.ptr);
  ASSERT_EQ(tigon_cross_entropy_fwd_workspace_size(xv, &ws_bytes), TIGON_SUCCESS);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  tigon::TensorView tv(gt.ptr, {N}, tigon::dtype::int64, tigon::cuda(0)),
      wv(gw.ptr, {V}, tigon::dtype::float32, tigon::cuda(0)),
      lv(gl.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0)),
      zv(gz.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0)),
      av(ga.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0)), pv(gp.ptr, {N}, tigon::dtype::int64, tigon::cuda(0));
  ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, weighted ? wv.get() : nullptr, lv, zv, av, pv, gv, p, ws.get(), ws.size(),
                                    nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (variant) {
    const std::string ran = tigon_testing_cross_entropy_last_kernel(), want = expected_kernel(variant, dt, V);
    EXPECT_EQ(ran.substr(0, want.size()), want) << "variant " << variant << " ran " << ran;
  }
  (in_place ? gx : gg).fetch(grad.data());
  gl.fetch(loss.data());
  gz.fetch(z.data());
  ga.fetch(acc.data());
  gp.fetch(pred.data());
  EXPECT_EQ(pred, rpred) << "predicted tokens";

  const double tol = rtol_of(dt) < 1e-4 ? 1e-4 : 1e-3;  // fp32 sums over a row in another order, ex2.approx
  for (int64_t i = 0; i < n_out; ++i) {
    EXPECT_NEAR(loss[i], rloss[i], tol * (1 + std::fabs(rloss[i]))) << "loss " << i;
    EXPECT_NEAR(z[i], rz[i], tol * (1 + std::fabs(rz[i]))) << "z " << i;
    EXPECT_NEAR(acc[i], racc[i], 1e-6) << "accuracy " << i;
  }
  // The gradient: one rounding to the dtype apart, with an absolute floor below the largest |p| / W.
  EXPECT_LE(worst_ratio(grad, rgrad, 1e-6 + 2 * rtol_of(dt) / double(N), 2 * rtol_of(dt)), 1.0);

  // grad *= grad_output on the device: a per-row scale (NONE) or one scalar.
  std::vector<float> scale(n_out);
  for (int64_t i = 0; i < n_out; ++i) scale[i] = i % 3 == 0 ? 1.f : 0.5f - float(i);
  Dev gs(scale.data(), n_out * 4);
  tigon::TensorView sv(gs.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0));
  ASSERT_EQ(tigon_cross_entropy_bwd(gv, sv, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostMat scaled = grad;
  (in_place ? gx : gg).fetch(scaled.data());
  HostMat expect = grad;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < V; ++c) expect.set(r, c, grad.at(r, c) * scale[n_out == 1 ? 0 : r]);
  EXPECT_EQ(worst_ratio(scaled, expect, 0, 0), 0.0);
}

std::string case_name(const Case& c) {
  return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
         std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c)) + "_red" +
         std::to_string(std::get<4>(c)) + (std::get<5>(c) > 0 ? "_smooth" : "") + (std::get<6>(c) > 0 ? "_z" : "") +
         (std::get<7>(c) > 0 ? "_cap" : "") + (std::get<8>(c) ? "_w" : "") + (std::get<9>(c) ? "_inplace" : "");
}

// The library's plan.
class CrossEntropyCuda : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  run_case(GetParam(), nullptr);
}

// Every row kernel explicitly, on shapes that take the cluster path (1-8 blocks, the launcher's size or a forced
// one), the fallbacks and the tails.
class CrossEntropyCudaKernels : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(CrossEntropyCudaKernels, MatchesReference) {
  SKIP_WITHOUT_GPU();
  run_case(std::get<1>(GetParam()), std::get<0>(GetParam()).c_str());
}

constexpr int kNone = TIGON_REDUCTION_NONE, kMean = TIGON_REDUCTION_MEAN, kSum = TIGON_REDUCTION_SUM;

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyCuda,
    ::testing::Values(
        Case{DType::kBFloat16, 64, 4096, 0, kMean, 0.f, 0.f, 0.f, false, true},
        Case{DType::kBFloat16, 16, 32000, 0, kMean, 0.1f, 1e-4f, 0.f, true, false},
        Case{DType::kFloat16, 9, 32001, 0, kSum, 0.f, 0.f, 30.f, false, true},      // odd vocab: unaligned rows
        Case{DType::kFloat32, 7, 1001, 3, kNone, 0.2f, 1e-3f, 0.f, true, false},    // aligned rows, a 1-element tail
        Case{DType::kBFloat16, 5, 262144, 8, kMean, 0.05f, 0.f, 50.f, true, true},  // largest vocab, padded rows
        Case{DType::kFloat32, 3, 1001, 0, kMean, 0.f, 0.f, 0.f, false, false},      // unaligned rows
        Case{DType::kBFloat16, 1, 1, 0, kNone, 0.f, 0.f, 0.f, false, false},
        Case{DType::kFloat16, 300, 136, 0, kNone, 0.1f, 1e-4f, 5.f, true, true},  // many short rows
        Case{DType::kFloat32, 12, 128256, 0, kSum, 0.f, 1e-4f, 0.f, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

INSTANTIATE_TEST_SUITE_P(
    Variants, CrossEntropyCudaKernels,
    ::testing::Combine(
        ::testing::Values("cluster", "cluster1", "cluster2", "cluster3", "cluster4", "cluster5", "cluster6", "cluster7",
                          "cluster8", "classic"),
        ::testing::Values(
            Case{DType::kBFloat16, 3, 128256, 0, kMean, 0.f, 0.f, 0.f, false, true},       // the headline row
            Case{DType::kBFloat16, 257, 128256, 0, kMean, 0.f, 0.f, 0.f, false, true},     // more rows than SMs
            Case{DType::kBFloat16, 6000, 4096, 0, kMean, 0.f, 0.f, 0.f, false, true},      // many rows
            Case{DType::kBFloat16, 257, 32001, 7, kSum, 0.1f, 1e-4f, 0.f, true, false},    // strided, 1-column tail
            Case{DType::kFloat16, 3, 32001, 0, kNone, 0.f, 0.f, 30.f, false, true},        // unaligned rows
            Case{DType::kBFloat16, 37, 50257, 0, kMean, 0.1f, 1e-4f, 0.f, true, false},    // every head length
            Case{DType::kFloat32, 9, 30522, 0, kSum, 0.f, 0.f, 0.f, false, true},          // fp32 heads (BERT)
            Case{DType::kBFloat16, 133, 151936, 0, kMean, 0.1f, 1e-4f, 0.f, true, false},  // Qwen vocabulary
            Case{DType::kFloat16, 3, 128256, 0, kNone, 0.f, 0.f, 30.f, false, false},      // softcap
            Case{DType::kBFloat16, 3, 262144, 8, kMean, 0.05f, 1e-4f, 50.f, true, true},   // 512 KB rows: 8 blocks
            Case{DType::kFloat32, 1, 151936, 0, kNone, 0.f, 1e-4f, 0.f, true, true},       // 594 KB, one row
            Case{DType::kFloat32, 3, 262144, 4, kSum, 0.1f, 0.f, 0.f, false, true},        // 1 MB rows
            Case{DType::kFloat32, 7, 1001, 3, kNone, 0.2f, 1e-3f, 0.f, true, false},       // small, tail
            Case{DType::kFloat16, 257, 1001, 7, kMean, 0.f, 1e-4f, 5.f, false, true},      // small, tail of 1
            Case{DType::kBFloat16, 1, 1, 0, kNone, 0.f, 0.f, 0.f, false, false},           // no whole vector
            Case{DType::kFloat16, 300, 136, 0, kNone, 0.1f, 1e-4f, 5.f, true, true})),     // many short rows
    [](const ::testing::TestParamInfo<std::tuple<std::string, Case>>& info) {
      std::string v = std::get<0>(info.param);
      for (char& ch : v)
        if (ch == '-') ch = '_';  // test names are letters, digits and underscores
      return v + "_" + case_name(std::get<1>(info.param));
    });

// Logits around -60 with a z-loss of 0.1 and SUM: the gradient's scale of p, 1 + 0.2 lse, is negative, which the
// kernels cannot fold into the exponent (every other case does): this reaches their second gradient loop.
class CrossEntropyCudaNegativeScale : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossEntropyCudaNegativeScale, MatchesReference) {
  SKIP_WITHOUT_GPU();
  run_case(Case{DType::kBFloat16, 7, 32001, 7, kSum, 0.f, 0.1f, 0.f, false, true}, GetParam().c_str(), -60.0);  // tail
  run_case(Case{DType::kFloat32, 5, 1001, 0, kSum, 0.f, 0.1f, 0.f, false, false}, GetParam().c_str(),
           -60.0);  // unaligned
}

INSTANTIATE_TEST_SUITE_P(Variants, CrossEntropyCudaNegativeScale, ::testing::Values("cluster", "cluster8", "classic"));

// Token scaling: every thread of every block needs the target's logit (the cluster kernel's other blocks included).
class CrossEntropyCudaTokenScaling : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossEntropyCudaTokenScaling, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const char* v = GetParam().c_str();
  run_case(Case{DType::kBFloat16, 257, 128256, 0, kMean, 0.f, 0.f, 0.f, false, true}, v, 0.0, true);
  run_case(Case{DType::kFloat16, 33, 32001, 7, kNone, 0.1f, 1e-4f, 30.f, true, false}, v, 0.0, true);
  run_case(Case{DType::kFloat32, 9, 1001, 0, kSum, 0.f, 1e-3f, 0.f, true, true}, v, 0.0, true);
}

INSTANTIATE_TEST_SUITE_P(Variants, CrossEntropyCudaTokenScaling,
                         ::testing::Values("cluster", "cluster1", "cluster4", "cluster8", "classic"));

// A target outside [0, V) that is not ignore_index: that row's loss and gradient are NaN, the others unharmed.
class CrossEntropyCudaBadTarget : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossEntropyCudaBadTarget, RowIsNaN) {
  SKIP_WITHOUT_GPU();
  KernelScope scope(GetParam().c_str());
  const int64_t N = 3, V = 128256;
  std::mt19937 rng(5);
  HostMat x(DType::kBFloat16, N, V);
  x.fill_random(rng, 2.0);
  std::vector<int32_t> t = {7, int32_t(V), 9};  // int32 targets; row 1 out of range
  std::vector<float> loss(N, 0.f);
  Dev gx(x.data(), x.span_bytes()), gt(t.data(), N * 4), gl(loss.data(), N * 4);
  auto xv = x.view(tigon::cuda(0), gx.ptr);
  size_t ws_bytes = 0;
  ASSERT_EQ(tigon_cross_entropy_fwd_workspace_size(xv, &ws_bytes), TIGON_SUCCESS);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  tigon::TensorView tv(gt.ptr, {N}, tigon::dtype::int32, tigon::cuda(0)),
      lv(gl.ptr, {N}, tigon::dtype::float32, tigon::cuda(0));
  ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, nullptr, lv, nullptr, nullptr, nullptr, xv,
                                    tigon_cross_entropy_params{-100, 0.f, 0.f, 0.f, TIGON_REDUCTION_NONE}, ws.get(),
                                    ws.size(), nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  gl.fetch(loss.data());
  HostMat g = x;
  gx.fetch(g.data());
  EXPECT_TRUE(std::isfinite(loss[0]) && std::isfinite(loss[2])) << loss[0] << " " << loss[2];
  EXPECT_TRUE(std::isnan(loss[1])) << loss[1];
  for (int64_t c = 0; c < V; c += 997) {
    EXPECT_TRUE(std::isnan(g.at(1, c))) << "column " << c;
    EXPECT_TRUE(std::isfinite(g.at(0, c)) && std::isfinite(g.at(2, c))) << "column " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CrossEntropyCudaBadTarget, ::testing::Values("cluster", "cluster2", "classic"));

// The loss alone (no gradient): the launcher's own plan runs the classic kernel from 128 KB rows (faster there
// without a gradient) and the cluster kernel below; a forced cluster size keeps the cluster kernel. Both match the
// reference, loss, z-loss and accuracy.
class CrossEntropyCudaLossOnly : public ::testing::TestWithParam<std::tuple<std::string, int64_t>> {};

TEST_P(CrossEntropyCudaLossOnly, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [variant, V] = GetParam();
  KernelScope scope(variant.c_str());
  const int64_t N = 37;
  std::mt19937 rng(11 + V);
  HostMat x(DType::kBFloat16, N, V);
  x.fill_random(rng, 3.0);
  std::vector<int64_t> t(N);
  for (int64_t r = 0; r < N; ++r) t[r] = r % 7 == 3 ? -100 : int64_t(rng() % V);
  const tigon_cross_entropy_params p{-100, 0.f, 1e-4f, 0.f, TIGON_REDUCTION_MEAN};
  float rloss = NAN, rz = NAN, racc = NAN;
  {
    tigon::TensorView tv(t.data(), {N}, tigon::dtype::int64), lv(&rloss, {1}, tigon::dtype::float32),
        zv(&rz, {1}, tigon::dtype::float32), av(&racc, {1}, tigon::dtype::float32);
    ASSERT_EQ(tigon_cross_entropy_fwd(x.view(), tv, nullptr, lv, zv, av, nullptr, nullptr, p, nullptr, 0, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
  }
  const float poison[3] = {NAN, NAN, NAN};
  Dev gx(x.data(), x.span_bytes()), gt(t.data(), N * 8), go(poison, sizeof poison);
  auto xv = x.view(tigon::cuda(0), gx.ptr);
  size_t ws_bytes = 0;
  ASSERT_EQ(tigon_cross_entropy_fwd_workspace_size(xv, &ws_bytes), TIGON_SUCCESS);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  float* out = static_cast<float*>(go.ptr);
  tigon::TensorView tv(gt.ptr, {N}, tigon::dtype::int64, tigon::cuda(0)),
      lv(out, {1}, tigon::dtype::float32, tigon::cuda(0)), zv(out + 1, {1}, tigon::dtype::float32, tigon::cuda(0)),
      av(out + 2, {1}, tigon::dtype::float32, tigon::cuda(0));
  ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, nullptr, lv, zv, av, nullptr, nullptr, p, ws.get(), ws.size(), nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::string ran = tigon_testing_cross_entropy_last_kernel();
  const bool aligned = V * 2 % 16 == 0;  // unaligned rows take the cluster kernel whatever their length
  const std::string want = variant == "cluster" && aligned && V * 2 >= (128 << 10) ? "classic" : "cluster";
  EXPECT_EQ(ran.substr(0, want.size()), want) << variant << " ran " << ran;
  float got[3];
  go.fetch(got);
  EXPECT_NEAR(got[0], rloss, 1e-3 * (1 + std::fabs(rloss)));
  EXPECT_NEAR(got[1], rz, 1e-3 * (1 + std::fabs(rz)));
  EXPECT_NEAR(got[2], racc, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Variants, CrossEntropyCudaLossOnly,
                         ::testing::Combine(::testing::Values("cluster", "cluster7"),
                                            ::testing::Values(int64_t(32000), int64_t(65536), int64_t(65537),
                                                              int64_t(128256))),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int64_t>>& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

// The names the selector takes; anything else, the removed variants' names included, is refused with the argument
// named. Host code only: runs without a GPU.
TEST(CrossEntropyCudaApi, KernelNames) {
  for (const char* name : {"cluster", "cluster1", "cluster2", "cluster3", "cluster4", "cluster5", "cluster6",
                           "cluster7", "cluster8", "classic"})
    EXPECT_EQ(tigon_testing_cross_entropy_kernel(name), TIGON_SUCCESS) << name << ": " << tigon_last_error();
  for (const char* name : {"",
                           "cluster0",
                           "cluster9",
                           "cluster16",
                           "cluster08",
                           "clusterx",
                           "cluster8-",
                           "cluster4-t64",
                           "cluster7-t128-a8",
                           "cluster-h8",
                           "cluster6-a1-p5",
                           "classic4",
                           "classics",
                           "walk",
                           "walk4",
                           "pipe",
                           "pipe8",
                           "regs",
                           "regswalk4",
                           "l2",
                           "cluster-poly"}) {
    EXPECT_EQ(tigon_testing_cross_entropy_kernel(name), TIGON_ERROR_INVALID_ARGUMENT) << name;
    EXPECT_NE(std::string(tigon_last_error()).find("'name'"), std::string::npos) << tigon_last_error();
  }
  EXPECT_EQ(tigon_testing_cross_entropy_kernel(nullptr), TIGON_SUCCESS);
}

TEST(CrossEntropyCudaApi, WorkspaceTooSmallIsAnError) {
  SKIP_WITHOUT_GPU();
  HostMat x(DType::kFloat32, 4, 8);
  std::vector<int64_t> t = {0, 1, 2, 3};
  float loss = 0;
  Dev gx(x.data(), x.span_bytes()), gt(t.data(), 32), gl(&loss, 4);
  auto xv = x.view(tigon::cuda(0), gx.ptr);
  tigon::TensorView tv(gt.ptr, {4}, tigon::dtype::int64, tigon::cuda(0)),
      lv(gl.ptr, {}, tigon::dtype::float32, tigon::cuda(0));
  EXPECT_EQ(tigon_cross_entropy_fwd(xv, tv, nullptr, lv, nullptr, nullptr, nullptr, nullptr,
                                    tigon_cross_entropy_params{-100, 0.f, 0.f, 0.f, 1}, nullptr, 0, nullptr),
            TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("'workspace'"), std::string::npos);
}

}  // namespace
