// Int8: the CPU references (through the C API) against naive loops, and every bad argument named.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "int8_test_util.h"
#include "test_util.h"

using namespace tigon_test;

namespace {

const auto kI8 = tigon::dtype::int8;
const auto kF32 = tigon::dtype::float32;

// ---- quantize_rows -------------------------------------------------------------------------------------------------

using QCase = std::tuple<DType, int64_t, int64_t, int64_t>;  // dtype, M, K, row padding of x

class Int8QuantizeReference : public ::testing::TestWithParam<QCase> {};

TEST_P(Int8QuantizeReference, MatchesNaive) {
  const auto [dt, M, K, pad] = GetParam();
  std::mt19937 rng(11 + M * 7 + K);
  HostMat x(dt, M, K, K + pad), q(DType::kInt8, M, K, K + 4);
  x.fill_random(rng, 3.0);
  for (int64_t k = 0; k < K; ++k) x.set(M - 1, k, 0.0);  // an all-zero row: scale 0, q 0
  std::vector<float> s(size_t(M), -1.f);
  auto xv = x.view(), qv = q.view();
  tigon::TensorView sv(s.data(), {M}, kF32);
  tigon::quantize_rows(xv, qv, sv);
  for (int64_t m = 0; m < M; ++m) {
    const float want_s = naive_scale(x, m);
    ASSERT_EQ(s[size_t(m)], want_s) << "row " << m;
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_EQ(int(q.at(m, k)), naive_q(x.at(m, k), want_s)) << m << ", " << k;
      // the quantization error bound: half a step, plus the rounding of x / scale in fp32 (127 * 2^-24 steps)
      EXPECT_LE(std::fabs(x.at(m, k) - q.at(m, k) * double(want_s)), (0.5 + 1e-5) * want_s);
    }
  }
  EXPECT_EQ(s[size_t(M - 1)], 0.f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8QuantizeReference,
                         ::testing::Values(QCase{DType::kFloat32, 3, 37, 0}, QCase{DType::kBFloat16, 5, 64, 8},
                                           QCase{DType::kFloat16, 4, 33, 1}, QCase{DType::kBFloat16, 1, 1, 0}),
                         [](const ::testing::TestParamInfo<QCase>& info) {
                           const QCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c));
                         });

TEST(Int8QuantizeReference, HalfwayValuesRoundToEven) {
  // max 127 -> scale 1: x / scale is x itself, and halfway values go to the even neighbour
  std::vector<float> xs = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f};
  const int want[] = {127, 0, 2, 2, 0, -2, -2, 126};
  std::vector<int8_t> q(8);
  float s = 0;
  tigon::TensorView xv(xs.data(), {1, 8}, kF32), qv(q.data(), {1, 8}, kI8), sv(&s, {1}, kF32);
  ASSERT_EQ(tigon_quantize_rows(xv, qv, sv, nullptr), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(s, 1.f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(int(q[size_t(i)]), want[i]) << i;
}

// ---- int8_linear ---------------------------------------------------------------------------------------------------

using LCase = std::tuple<DType, int64_t, int64_t, int64_t, int, bool>;  // out dtype, M, N, K, activation, bias

class Int8LinearReference : public ::testing::TestWithParam<LCase> {};

TEST_P(Int8LinearReference, MatchesNaive) {
  const auto [dt, M, N, K, act, with_bias] = GetParam();
  std::mt19937 rng(5 + M + N * 3 + K * 7 + act);
  HostMat qx(DType::kInt8, M, K, K + 4), qw(DType::kInt8, N, K, K + 8), b(dt, 1, N), out(dt, M, N, N + 1);
  fill_int8(qx, rng);
  fill_int8(qw, rng);
  b.fill_random(rng);
  out.poison();
  const auto sx = random_scales(M, rng, 0.02), sw = random_scales(N, rng, 1.0 / (127.0 * std::sqrt(double(K))));
  auto xv = qx.view(), wv = qw.view(), ov = out.view();
  tigon::TensorView sxv(const_cast<float*>(sx.data()), {M}, kF32), swv(const_cast<float*>(sw.data()), {N}, kF32),
      bv(b.data(), {N}, to_dl(dt));
  EXPECT_EQ(tigon::int8_linear_workspace_size(xv, wv), 0u);  // the CPU needs none
  tigon::int8_linear(xv, sxv, wv, swv, with_bias ? &bv : nullptr, ov, {act});
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double want = naive_int8_linear(qx, qw, sx, sw, with_bias ? &b : nullptr, act, m, n);
      EXPECT_EQ(out.at(m, n), tigon::round_to(dt, want)) << m << ", " << n;  // the same fp64 value, one rounding
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8LinearReference,
                         ::testing::Values(LCase{DType::kBFloat16, 3, 8, 12, TIGON_ACT_NONE, true},
                                           LCase{DType::kFloat16, 5, 12, 64, TIGON_ACT_RELU, false},
                                           LCase{DType::kBFloat16, 2, 4, 4, TIGON_ACT_GELU_TANH, true},
                                           LCase{DType::kFloat32, 7, 16, 36, TIGON_ACT_GELU_ERF, true},
                                           LCase{DType::kBFloat16, 1, 20, 128, TIGON_ACT_SILU, false}),
                         [](const ::testing::TestParamInfo<LCase>& info) {
                           const LCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_act" +
                                  std::to_string(std::get<4>(c)) + (std::get<5>(c) ? "_bias" : "");
                         });

// ---- gemv_int8 -----------------------------------------------------------------------------------------------------

using GCase = std::tuple<DType, int64_t, int64_t, int64_t, bool>;  // dtype, M, N, K, bias

class GemvInt8Reference : public ::testing::TestWithParam<GCase> {};

TEST_P(GemvInt8Reference, MatchesNaiveFp64) {
  const auto [dt, M, N, K, with_bias] = GetParam();
  std::mt19937 rng(29 + M * 31 + N + K);
  HostMat x(dt, M, K, K + 5), qw(DType::kInt8, N, K, K + 3), b(dt, 1, N), y(dt, M, N, N + 2);
  x.fill_random(rng);
  fill_int8(qw, rng);
  b.fill_random(rng);
  y.poison();
  const auto sw = random_scales(N, rng, 0.01);
  auto xv = x.view(), wv = qw.view(), yv = y.view();
  tigon::TensorView swv(const_cast<float*>(sw.data()), {N}, kF32), bv(b.data(), {N}, to_dl(dt));
  EXPECT_EQ(tigon::gemv_int8_workspace_size(xv, wv), 0u);
  tigon::gemv_int8(xv, wv, swv, with_bias ? &bv : nullptr, yv);  // the C++ layer (throws on an error)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double dot = 0;
      for (int64_t k = 0; k < K; ++k) dot += x.at(m, k) * qw.at(n, k);
      const double want = dot * sw[size_t(n)] + (with_bias ? b.at(0, n) : 0.0);
      EXPECT_EQ(y.at(m, n), tigon::round_to(dt, want)) << m << ", " << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvInt8Reference,
                         ::testing::Values(GCase{DType::kFloat32, 1, 7, 33, true},
                                           GCase{DType::kBFloat16, 3, 17, 64, false},
                                           GCase{DType::kFloat16, 16, 5, 24, true},
                                           GCase{DType::kBFloat16, 1, 1, 1, false}),
                         [](const ::testing::TestParamInfo<GCase>& info) {
                           const GCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) +
                                  (std::get<4>(c) ? "_bias" : "");
                         });

// ---- argument checks -----------------------------------------------------------------------------------------------

struct Bad {
  std::string arg;
  std::function<tigon_status_t()> call;
};

void expect_named(const std::vector<Bad>& cases) {
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].call(), TIGON_ERROR_INVALID_ARGUMENT) << "case " << i << ": " << tigon_last_error();
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + cases[i].arg), std::string::npos)
        << "case " << i << ": " << tigon_last_error();
  }
}

TEST(Int8Api, QuantizeBadArgumentsAreNamed) {
  const auto bf = tigon::dtype::bfloat16;
  HostMat x(DType::kBFloat16, 2, 16), q(DType::kInt8, 2, 16);
  std::vector<float> s(4);
  std::vector<uint8_t> other(4096);
  void* o = other.data();
  auto xv = x.view(), qv = q.view();
  tigon::TensorView sv(s.data(), {2}, kF32), x_i32(x.data(), {2, 16}, tigon::dtype::int32),
      x_gpu(x.data(), {2, 16}, bf, tigon::cuda(0)), q_f16(o, {2, 16}, tigon::dtype::float16), q_k(o, {2, 15}, kI8),
      q_m(o, {3, 16}, kI8), q_over_x(x.data(), {2, 16}, kI8), s_n(s.data(), {3}, kF32), s_bf(s.data(), {2}, bf),
      s_strided(s.data(), {2}, kF32, tigon::cpu(), {2});
  expect_named({
      {"'x'", [&] { return tigon_quantize_rows(nullptr, qv, sv, nullptr); }},
      {"'x'", [&] { return tigon_quantize_rows(x_i32, qv, sv, nullptr); }},
      {"'q'", [&] { return tigon_quantize_rows(x_gpu, qv, sv, nullptr); }},
      {"'q'", [&] { return tigon_quantize_rows(xv, nullptr, sv, nullptr); }},
      {"'q'", [&] { return tigon_quantize_rows(xv, q_f16, sv, nullptr); }},
      {"'q'", [&] { return tigon_quantize_rows(xv, q_k, sv, nullptr); }},
      {"'q'", [&] { return tigon_quantize_rows(xv, q_m, sv, nullptr); }},
      {"'q'", [&] { return tigon_quantize_rows(xv, q_over_x, sv, nullptr); }},
      {"'scale'", [&] { return tigon_quantize_rows(xv, qv, nullptr, nullptr); }},
      {"'scale'", [&] { return tigon_quantize_rows(xv, qv, s_n, nullptr); }},
      {"'scale'", [&] { return tigon_quantize_rows(xv, qv, s_bf, nullptr); }},
      {"'scale'", [&] { return tigon_quantize_rows(xv, qv, s_strided, nullptr); }},
  });
  EXPECT_EQ(tigon_quantize_rows(xv, qv, sv, nullptr), TIGON_SUCCESS) << tigon_last_error();
}

TEST(Int8Api, LinearBadArgumentsAreNamed) {
  const auto bf = tigon::dtype::bfloat16;
  alignas(16) int8_t qx[2 * 16] = {}, qw[8 * 16] = {};
  alignas(16) uint8_t other[4096] = {};
  void* o = other;
  std::vector<float> sx(2, 1.f), sw(8, 1.f);
  std::vector<uint16_t> bias(8), out(2 * 8);
  tigon::TensorView xv(qx, {2, 16}, kI8), wv(qw, {8, 16}, kI8), sxv(sx.data(), {2}, kF32), swv(sw.data(), {8}, kF32),
      bv(bias.data(), {8}, bf), ov(out.data(), {2, 8}, bf);
  tigon::TensorView x_bf(qx, {2, 16}, bf), x_k(o, {2, 18}, kI8), x_stride(qx, {2, 12}, kI8, tigon::cpu(), {14, 1}),
      x_unaligned(other + 1, {2, 16}, kI8), x_3d(qx, {1, 2, 16}, kI8), x_gpu(qx, {2, 16}, kI8, tigon::cuda(0)),
      w_k(o, {8, 12}, kI8), w_n(o, {6, 16}, kI8), w_f32(o, {8, 16}, kF32), sx_n(o, {3}, kF32), sx_bf(o, {2}, bf),
      sw_n(o, {7}, kF32), b_f16(o, {8}, tigon::dtype::float16), b_n(o, {9}, bf), o_m(o, {3, 8}, bf),
      o_i8(o, {2, 8}, kI8), o_over_w(qw, {2, 8}, bf), x_long(o, {1, 131076}, kI8);
  auto run = [&](const tigon_tensor* x, const tigon_tensor* s1, const tigon_tensor* w, const tigon_tensor* s2,
                 const tigon_tensor* b, const tigon_tensor* y,
                 int act = 0) { return tigon_int8_linear(x, s1, w, s2, b, y, {act}, nullptr, 0, nullptr); };
  size_t bytes = 0;
  expect_named({
      {"'q_x'", [&] { return run(nullptr, sxv, wv, swv, bv, ov); }},
      {"'q_x'", [&] { return run(x_bf, sxv, wv, swv, bv, ov); }},
      {"'q_x'", [&] { return run(x_k, sxv, w_k, swv, bv, ov); }},         // K = 18: not a multiple of 4
      {"'q_x'", [&] { return run(x_stride, sxv, w_k, swv, bv, ov); }},    // row stride 14
      {"'q_x'", [&] { return run(x_unaligned, sxv, wv, swv, bv, ov); }},  // not 4-byte aligned
      {"'q_x'", [&] { return run(x_3d, sxv, wv, swv, bv, ov); }},
      {"'q_x'", [&] { return run(x_long, sxv, wv, swv, bv, ov); }},
      {"'q_w'", [&] { return run(x_gpu, sxv, wv, swv, bv, ov); }},
      {"'q_w'", [&] { return run(xv, sxv, nullptr, swv, bv, ov); }},
      {"'q_w'", [&] { return run(xv, sxv, w_k, swv, bv, ov); }},
      {"'q_w'", [&] { return run(xv, sxv, w_n, swv, bv, ov); }},  // N = 6: not a multiple of 4
      {"'q_w'", [&] { return run(xv, sxv, w_f32, swv, bv, ov); }},
      {"'scale_x'", [&] { return run(xv, nullptr, wv, swv, bv, ov); }},
      {"'scale_x'", [&] { return run(xv, sx_n, wv, swv, bv, ov); }},
      {"'scale_x'", [&] { return run(xv, sx_bf, wv, swv, bv, ov); }},
      {"'scale_w'", [&] { return run(xv, sxv, wv, nullptr, bv, ov); }},
      {"'scale_w'", [&] { return run(xv, sxv, wv, sw_n, bv, ov); }},
      {"'bias'", [&] { return run(xv, sxv, wv, swv, b_f16, ov); }},
      {"'bias'", [&] { return run(xv, sxv, wv, swv, b_n, ov); }},
      {"'out'", [&] { return run(xv, sxv, wv, swv, bv, nullptr); }},
      {"'out'", [&] { return run(xv, sxv, wv, swv, bv, o_m); }},
      {"'out'", [&] { return run(xv, sxv, wv, swv, bv, o_i8); }},
      {"'out'", [&] { return run(xv, sxv, wv, swv, bv, o_over_w); }},
      {"'activation'", [&] { return run(xv, sxv, wv, swv, bv, ov, 5); }},
      {"'bytes'", [&] { return tigon_int8_linear_workspace_size(xv, wv, nullptr); }},
      {"'q_w'", [&] { return tigon_int8_linear_workspace_size(xv, w_n, &bytes); }},
  });
  EXPECT_EQ(run(xv, sxv, wv, swv, bv, ov), TIGON_SUCCESS) << tigon_last_error();
}

TEST(Int8Api, GemvBadArgumentsAreNamed) {
  const auto bf = tigon::dtype::bfloat16;
  HostMat x(DType::kBFloat16, 2, 16), w(DType::kInt8, 4, 16), b(DType::kBFloat16, 1, 4), y(DType::kBFloat16, 2, 4);
  std::vector<float> s(4, 1.f);
  std::vector<uint8_t> other(4096);
  void* o = other.data();
  auto xv = x.view(), wv = w.view(), yv = y.view();
  tigon::TensorView bv(b.data(), {4}, bf), sv(s.data(), {4}, kF32), x_i8(x.data(), {2, 16}, kI8),
      x_k0(x.data(), {2, 0}, bf), w_bf(o, {4, 16}, bf), w_k(o, {4, 15}, kI8), w_3d(o, {1, 4, 16}, kI8),
      s_n(o, {5}, kF32), s_bf(o, {4}, bf), b_n(o, {5}, bf), y_n(o, {2, 5}, bf), y_f16(o, {2, 4}, tigon::dtype::float16),
      y_over_x(x.data(), {2, 4}, bf), x_gpu(x.data(), {2, 16}, bf, tigon::cuda(0));
  auto run = [&](const tigon_tensor* xx, const tigon_tensor* ww, const tigon_tensor* ss, const tigon_tensor* bb,
                 const tigon_tensor* yy) { return tigon_gemv_int8(xx, ww, ss, bb, yy, nullptr, 0, nullptr); };
  size_t bytes = 0;
  expect_named({
      {"'x'", [&] { return run(nullptr, wv, sv, bv, yv); }},
      {"'x'", [&] { return run(x_i8, wv, sv, bv, yv); }},
      {"'x'", [&] { return run(x_k0, wv, sv, bv, yv); }},
      {"'q_w'", [&] { return run(x_gpu, wv, sv, bv, yv); }},
      {"'q_w'", [&] { return run(xv, nullptr, sv, bv, yv); }},
      {"'q_w'", [&] { return run(xv, w_bf, sv, bv, yv); }},
      {"'q_w'", [&] { return run(xv, w_k, sv, bv, yv); }},
      {"'q_w'", [&] { return run(xv, w_3d, sv, bv, yv); }},
      {"'scale_w'", [&] { return run(xv, wv, nullptr, bv, yv); }},
      {"'scale_w'", [&] { return run(xv, wv, s_n, bv, yv); }},
      {"'scale_w'", [&] { return run(xv, wv, s_bf, bv, yv); }},
      {"'bias'", [&] { return run(xv, wv, sv, b_n, yv); }},
      {"'y'", [&] { return run(xv, wv, sv, bv, nullptr); }},
      {"'y'", [&] { return run(xv, wv, sv, bv, y_n); }},
      {"'y'", [&] { return run(xv, wv, sv, bv, y_f16); }},
      {"'y'", [&] { return run(xv, wv, sv, bv, y_over_x); }},
      {"'bytes'", [&] { return tigon_gemv_int8_workspace_size(xv, wv, nullptr); }},
      {"'q_w'", [&] { return tigon_gemv_int8_workspace_size(xv, w_k, &bytes); }},
  });
  EXPECT_EQ(run(xv, wv, sv, bv, yv), TIGON_SUCCESS) << tigon_last_error();
}

}  // namespace
