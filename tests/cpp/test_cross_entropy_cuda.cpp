// Cross entropy CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "test_util.h"
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

class CrossEntropyCuda : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, N, V, pad, reduction, eps, zs, cap, weighted, in_place] = GetParam();
  std::mt19937 rng(17 + N + V);
  HostMat x(dt, N, V, V + pad), grad(dt, N, V, V + pad);
  x.fill_random(rng, 3.0);
  grad.poison();
  std::vector<int64_t> t(N);
  for (int64_t r = 0; r < N; ++r) t[r] = (r % 5 == 2) ? -100 : int64_t(rng() % V);  // some rows ignored
  std::vector<float> w(V);
  for (auto& v : w) v = 0.25f + float(rng() % 100) / 50.f;
  const int64_t n_out = reduction == TIGON_REDUCTION_NONE ? N : 1;
  std::vector<float> loss(n_out, NAN), z(n_out, NAN), acc(n_out, NAN);
  const tigon_cross_entropy_params p{-100, eps, zs, cap, reduction};

  // reference on the host
  HostMat rgrad = grad;
  std::vector<float> rloss = loss, rz = z, racc = acc;
  {
    auto xv = x.view(), gv = rgrad.view();
    tigon::TensorView tv(t.data(), {N}, tigon::dtype::int64), wv(w.data(), {V}, tigon::dtype::float32),
        lv(rloss.data(), {n_out}, tigon::dtype::float32), zv(rz.data(), {n_out}, tigon::dtype::float32),
        av(racc.data(), {n_out}, tigon::dtype::float32);
    ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, weighted ? wv.get() : nullptr, lv, zv, av, gv, p, nullptr, 0, nullptr),
              TIGON_SUCCESS) << tigon_last_error();
  }
  // the same on the GPU; in place the gradient lands in the logits' buffer
  Dev gx(x.data(), x.span_bytes()), gg(grad.data(), grad.span_bytes()), gt(t.data(), N * 8), gw(w.data(), V * 4),
      gl(loss.data(), n_out * 4), gz(z.data(), n_out * 4), ga(acc.data(), n_out * 4);
  size_t ws_bytes = 0;
  auto xv = x.view(tigon::cuda(0), gx.ptr);
  auto gv = in_place ? xv : grad.view(tigon::cuda(0), gg.ptr);
  ASSERT_EQ(tigon_cross_entropy_fwd_workspace_size(xv, &ws_bytes), TIGON_SUCCESS);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  tigon::TensorView tv(gt.ptr, {N}, tigon::dtype::int64, tigon::cuda(0)),
      wv(gw.ptr, {V}, tigon::dtype::float32, tigon::cuda(0)),
      lv(gl.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0)),
      zv(gz.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0)),
      av(ga.ptr, {n_out}, tigon::dtype::float32, tigon::cuda(0));
  ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, weighted ? wv.get() : nullptr, lv, zv, av, gv, p, ws.get(), ws.size(),
                                    nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  (in_place ? gx : gg).fetch(grad.data());
  gl.fetch(loss.data());
  gz.fetch(z.data());
  ga.fetch(acc.data());

  const double tol = rtol_of(dt) < 1e-4 ? 1e-4 : 1e-3;  // fp32 sums over a row in another order, __expf
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

constexpr int kNone = TIGON_REDUCTION_NONE, kMean = TIGON_REDUCTION_MEAN, kSum = TIGON_REDUCTION_SUM;

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyCuda,
    ::testing::Values(
        Case{DType::kBFloat16, 64, 4096, 0, kMean, 0.f, 0.f, 0.f, false, true},
        Case{DType::kBFloat16, 16, 32000, 0, kMean, 0.1f, 1e-4f, 0.f, true, false},
        Case{DType::kFloat16, 9, 32001, 0, kSum, 0.f, 0.f, 30.f, false, true},     // odd vocab: scalar path
        Case{DType::kFloat32, 7, 1001, 3, kNone, 0.2f, 1e-3f, 0.f, true, false},   // unaligned rows
        Case{DType::kBFloat16, 5, 262144, 8, kMean, 0.05f, 0.f, 50.f, true, true},  // largest vocab, padded rows
        Case{DType::kFloat32, 3, 1001, 0, kMean, 0.f, 0.f, 0.f, false, false},
        Case{DType::kBFloat16, 1, 1, 0, kNone, 0.f, 0.f, 0.f, false, false},
        Case{DType::kFloat16, 300, 136, 0, kNone, 0.1f, 1e-4f, 5.f, true, true},   // many short rows
        Case{DType::kFloat32, 12, 128256, 0, kSum, 0.f, 1e-4f, 0.f, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
             std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c)) + "_red" +
             std::to_string(std::get<4>(c)) + (std::get<5>(c) > 0 ? "_smooth" : "") +
             (std::get<6>(c) > 0 ? "_z" : "") + (std::get<7>(c) > 0 ? "_cap" : "") +
             (std::get<8>(c) ? "_w" : "") + (std::get<9>(c) ? "_inplace" : "");
    });

TEST(CrossEntropyCudaApi, WorkspaceTooSmallIsAnError) {
  SKIP_WITHOUT_GPU();
  HostMat x(DType::kFloat32, 4, 8);
  std::vector<int64_t> t = {0, 1, 2, 3};
  float loss = 0;
  Dev gx(x.data(), x.span_bytes()), gt(t.data(), 32), gl(&loss, 4);
  auto xv = x.view(tigon::cuda(0), gx.ptr);
  tigon::TensorView tv(gt.ptr, {4}, tigon::dtype::int64, tigon::cuda(0)),
      lv(gl.ptr, {}, tigon::dtype::float32, tigon::cuda(0));
  EXPECT_EQ(tigon_cross_entropy_fwd(xv, tv, nullptr, lv, nullptr, nullptr, nullptr,
                                    tigon_cross_entropy_params{-100, 0.f, 0.f, 0.f, 1}, nullptr, 0, nullptr),
            TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("'workspace'"), std::string::npos);
}

}  // namespace
