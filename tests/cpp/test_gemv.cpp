// GEMV: the CPU reference (through the C API) against a naive fp64 loop, and every bad argument named.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, int64_t, int64_t, int64_t, bool>;  // dtype, M, N, K, bias

class GemvReference : public ::testing::TestWithParam<Case> {};

TEST_P(GemvReference, MatchesNaiveFp64) {
  const auto [dt, M, N, K, with_bias] = GetParam();
  std::mt19937 rng(17 + M * 31 + N + K);
  HostMat x(dt, M, K, K + 5), w(dt, N, K, K + 3), b(dt, 1, N), y(dt, M, N, N + 2);
  x.fill_random(rng);
  w.fill_random(rng, 0.1);
  b.fill_random(rng);
  y.poison();
  auto xv = x.view(), wv = w.view(), yv = y.view();
  tigon::TensorView bv(b.data(), {N}, to_dl(dt));
  EXPECT_EQ(tigon::gemv_workspace_size(xv, wv), 0u);  // the CPU needs none
  tigon::gemv(xv, wv, with_bias ? &bv : nullptr, yv);
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = with_bias ? b.at(0, n) : 0.0, scale = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        want += x.at(m, k) * w.at(n, k);
        scale += std::fabs(x.at(m, k) * w.at(n, k));
      }
      const double got = y.at(m, n);
      ASSERT_FALSE(std::isnan(got)) << m << ", " << n;
      worst = std::max(worst, std::fabs(got - want) / (rtol_of(dt) * (std::fabs(want) + 1e-3 * scale) + 1e-30));
    }
  EXPECT_LE(worst, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvReference,
                         ::testing::Values(Case{DType::kFloat32, 1, 7, 33, true},
                                           Case{DType::kBFloat16, 3, 17, 64, false},
                                           Case{DType::kFloat16, 16, 5, 24, true},
                                           Case{DType::kBFloat16, 1, 1, 1, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) +
                                  (std::get<4>(c) ? "_bias" : "");
                         });

TEST(GemvReference, EmptyRowsOrColumnsWriteNothing) {
  HostMat x(DType::kFloat32, 0, 8), w(DType::kFloat32, 4, 8), y(DType::kFloat32, 0, 4);
  auto xv = x.view(), wv = w.view(), yv = y.view();
  tigon::gemv(xv, wv, nullptr, yv);
  HostMat x2(DType::kFloat32, 2, 8), w2(DType::kFloat32, 0, 8), y2(DType::kFloat32, 2, 0);
  auto x2v = x2.view(), w2v = w2.view(), y2v = y2.view();
  tigon::gemv(x2v, w2v, nullptr, y2v);
}

TEST(GemvReference, LeadingDimensionsFlattenToRows) {
  std::mt19937 rng(5);
  HostMat x(DType::kFloat32, 6, 16), w(DType::kFloat32, 3, 16), y(DType::kFloat32, 6, 3), y3(DType::kFloat32, 6, 3);
  x.fill_random(rng);
  w.fill_random(rng);
  auto xv = x.view(), wv = w.view(), yv = y.view();
  tigon::gemv(xv, wv, nullptr, yv);
  tigon::TensorView x3(x.data(), {2, 3, 16}, tigon::dtype::float32), y3v(y3.data(), {2, 3, 3}, tigon::dtype::float32);
  tigon::gemv(x3, wv, nullptr, y3v);
  EXPECT_EQ(worst_ratio(y3, y, 0, 0), 0.0);
}

// Weights side by side (tigon_gemv_parts): the concatenated weight's result, bit for bit on the CPU.
TEST(GemvReference, PartsAreTheConcatenatedWeight) {
  std::mt19937 rng(9);
  const int64_t K = 40, rows[3] = {5, 17, 3};
  HostMat x(DType::kBFloat16, 3, K), all(DType::kBFloat16, 25, K), b(DType::kBFloat16, 1, 25);
  x.fill_random(rng);
  all.fill_random(rng, 0.1);
  b.fill_random(rng);
  for (int64_t n = 5; n < 22; ++n) b.set(0, n, 0.0);  // the middle part has no bias
  HostMat want(DType::kBFloat16, 3, 25), got(DType::kBFloat16, 3, 25);
  got.poison();
  auto xv = x.view(), allv = all.view(), wantv = want.view(), gotv = got.view();
  tigon::TensorView bv(b.data(), {25}, tigon::dtype::bfloat16);
  tigon::gemv(xv, allv, &bv, wantv);
  std::vector<tigon::TensorView> w, bias;
  for (int64_t i = 0, first = 0; i < 3; first += rows[i], ++i) {
    w.emplace_back(static_cast<uint8_t*>(all.data()) + first * K * 2, std::vector<int64_t>{rows[i], K},
                   tigon::dtype::bfloat16);
    bias.emplace_back(static_cast<uint8_t*>(b.data()) + first * 2, std::vector<int64_t>{rows[i]},
                      tigon::dtype::bfloat16);
  }
  const tigon_tensor* wp[3] = {w[0], w[1], w[2]};
  const tigon_tensor* bp[3] = {bias[0], nullptr, bias[2]};
  size_t bytes = 1;
  ASSERT_EQ(tigon_gemv_parts_workspace_size(xv, wp, 3, &bytes), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(bytes, 0u);
  ASSERT_EQ(tigon_gemv_parts(xv, wp, bp, 3, gotv, nullptr, 0, nullptr), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(worst_ratio(got, want, 0, 0), 0.0);

  // bad arguments, each named
  tigon::TensorView w_k(all.data(), {4, K - 1}, tigon::dtype::bfloat16),
      y_n(got.data(), {3, 24}, tigon::dtype::bfloat16);
  const tigon_tensor* wk[3] = {w[0], w_k, w[2]};
  const std::vector<std::pair<std::string, std::function<tigon_status_t()>>> cases = {
      {"'parts'", [&] { return tigon_gemv_parts(xv, wp, bp, 0, gotv, nullptr, 0, nullptr); }},
      {"'parts'", [&] { return tigon_gemv_parts(xv, wp, bp, 5, gotv, nullptr, 0, nullptr); }},
      {"'weights'", [&] { return tigon_gemv_parts(xv, nullptr, bp, 3, gotv, nullptr, 0, nullptr); }},
      {"'weights[1]'", [&] { return tigon_gemv_parts(xv, wk, bp, 3, gotv, nullptr, 0, nullptr); }},
      {"'y'", [&] { return tigon_gemv_parts(xv, wp, bp, 3, y_n, nullptr, 0, nullptr); }},
      {"'weights[1]'", [&] { return tigon_gemv_parts_workspace_size(xv, wk, 3, &bytes); }},
  };
  for (const auto& [arg, call] : cases) {
    EXPECT_EQ(call(), TIGON_ERROR_INVALID_ARGUMENT) << arg;
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + arg), std::string::npos) << tigon_last_error();
  }
}

// ---- argument checks -----------------------------------------------------------------------------------------------

TEST(GemvApi, EveryBadArgumentIsNamed) {
  const auto bf = tigon::dtype::bfloat16;
  HostMat x(DType::kBFloat16, 2, 16), w(DType::kBFloat16, 4, 16), b(DType::kBFloat16, 1, 4), y(DType::kBFloat16, 2, 4);
  auto xv = x.view(), wv = w.view(), yv = y.view();
  tigon::TensorView bv(b.data(), {4}, bf);
  std::vector<uint8_t> other(4096);
  void* o = other.data();
  tigon::TensorView x_i32(x.data(), {2, 16}, tigon::dtype::int32), x_f16(x.data(), {2, 16}, tigon::dtype::float16),
      x_k0(x.data(), {2, 0}, bf), x_col(x.data(), {2, 16}, bf, tigon::cpu(), {1, 2}),
      x_gpu(x.data(), {2, 16}, bf, tigon::cuda(0)), w_3d(o, {1, 4, 16}, bf), w_k(o, {4, 15}, bf),
      w_f16(o, {4, 16}, tigon::dtype::float16), w_col(o, {4, 16}, bf, tigon::cpu(), {1, 4}), b_n(o, {5}, bf),
      b_f32(o, {4}, tigon::dtype::float32), b_strided(o, {4}, bf, tigon::cpu(), {2}), y_n(o, {2, 5}, bf),
      y_m(o, {3, 4}, bf), y_f32(o, {2, 4}, tigon::dtype::float32), y_over_x(x.data(), {2, 4}, bf),
      y_rows0(o, {2, 4}, bf, tigon::cpu(), {0, 1});
  size_t bytes = 0;
  struct Bad {
    std::string arg;
    std::function<tigon_status_t()> call;
  };
  auto run = [&](const tigon_tensor* xx, const tigon_tensor* ww, const tigon_tensor* bb, const tigon_tensor* yy) {
    return tigon_gemv(xx, ww, bb, yy, nullptr, 0, nullptr);
  };
  const std::vector<Bad> cases = {
      {"'x'", [&] { return run(nullptr, wv, bv, yv); }},
      {"'x'", [&] { return run(x_i32, wv, bv, yv); }},
      {"'x'", [&] { return run(x_k0, wv, bv, yv); }},
      {"'x'", [&] { return run(x_col, wv, bv, yv); }},
      {"'weight'", [&] { return run(xv, nullptr, bv, yv); }},
      {"'weight'", [&] { return run(xv, w_3d, bv, yv); }},
      {"'weight'", [&] { return run(xv, w_k, bv, yv); }},
      {"'weight'", [&] { return run(xv, w_f16, bv, yv); }},
      {"'weight'", [&] { return run(x_f16, wv, bv, yv); }},  // x float16 against a bfloat16 weight
      {"'weight'", [&] { return run(xv, w_col, bv, yv); }},
      {"'weight'", [&] { return run(x_gpu, wv, bv, yv); }},  // device mismatch names the second tensor
      {"'bias'", [&] { return run(xv, wv, b_n, yv); }},
      {"'bias'", [&] { return run(xv, wv, b_f32, yv); }},
      {"'bias'", [&] { return run(xv, wv, b_strided, yv); }},
      {"'y'", [&] { return run(xv, wv, bv, nullptr); }},
      {"'y'", [&] { return run(xv, wv, bv, y_n); }},
      {"'y'", [&] { return run(xv, wv, bv, y_m); }},
      {"'y'", [&] { return run(xv, wv, bv, y_f32); }},
      {"'y'", [&] { return run(xv, wv, bv, y_over_x); }},
      {"'y'", [&] { return run(xv, wv, bv, y_rows0); }},
      {"'bytes'", [&] { return tigon_gemv_workspace_size(xv, wv, nullptr); }},
      {"'weight'", [&] { return tigon_gemv_workspace_size(xv, w_k, &bytes); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].call(), TIGON_ERROR_INVALID_ARGUMENT) << "case " << i << ": " << tigon_last_error();
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + cases[i].arg), std::string::npos)
        << "case " << i << ": " << tigon_last_error();
  }
  EXPECT_EQ(run(xv, wv, bv, yv), TIGON_SUCCESS) << tigon_last_error();
}

}  // namespace
