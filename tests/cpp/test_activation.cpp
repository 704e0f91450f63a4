// The pointwise activation CPU reference (through the C API) against naive fp64 formulas, in place and from ReLU's
// output; and C API validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "linear_act_test_util.h"
#include "test_util.h"
#include "tigon/activation.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, int, int64_t, int64_t, int64_t>;  // dtype, activation, rows, cols, row padding

class ActivationReference : public ::testing::TestWithParam<Case> {};

TEST_P(ActivationReference, MatchesNaiveFp64) {
  const auto [dt, act, rows, cols, pad] = GetParam();
  std::mt19937 rng(17 + rows * 5 + cols + act);
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  x.fill_random(rng, 2.5);
  dy.fill_random(rng);
  y.poison();
  dx.poison();
  ASSERT_EQ(tigon_activation_fwd(x.view(), y.view(), {act, 0}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_activation_bwd(dy.view(), x.view(), dx.view(), {act, 0}, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  const double tol = rtol_of(dt);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double a = x.at(r, c);
      EXPECT_NEAR(y.at(r, c), naive_act(act, a), tol * (1e-3 + std::fabs(naive_act(act, a))));
      const double want = naive_grad(act, a) * dy.at(r, c);
      EXPECT_NEAR(dx.at(r, c), want, tol * (1e-3 + std::fabs(want)) + 1e-6);
    }

  // In place: y over x, then dx over dy, equal the out-of-place results; ReLU, RELU2 and NONE also from their output
  // (the squared ReLU's 2 sqrt(y) then carries y's rounding: within the dtype's tolerance, not the same bits).
  HostMat xi = x, dyi = dy;
  ASSERT_EQ(tigon_activation_fwd(xi.view(), xi.view(), {act, 0}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(worst_ratio(xi, y, 0, 0), 0.0) << "y over x";
  const bool from_output = act == TIGON_ACT_RELU || act == TIGON_ACT_RELU2 || act == TIGON_ACT_NONE;
  ASSERT_EQ(
      tigon_activation_bwd(dyi.view(), from_output ? xi.view() : x.view(), dyi.view(), {act, from_output}, nullptr),
      TIGON_SUCCESS)
      << tigon_last_error();
  if (act == TIGON_ACT_RELU2)
    EXPECT_LE(worst_ratio(dyi, dx, tol, tol), 1.0) << "dx over dy, from the output";
  else
    EXPECT_EQ(worst_ratio(dyi, dx, 0, 0), 0.0) << "dx over dy";
}

INSTANTIATE_TEST_SUITE_P(
    Activations, ActivationReference,
    ::testing::Values(
        Case{DType::kFloat32, TIGON_ACT_NONE, 3, 17, 0}, Case{DType::kBFloat16, TIGON_ACT_RELU, 5, 64, 3},
        Case{DType::kFloat16, TIGON_ACT_RELU, 1, 1, 0}, Case{DType::kFloat32, TIGON_ACT_GELU_ERF, 4, 33, 1},
        Case{DType::kBFloat16, TIGON_ACT_GELU_ERF, 2, 40, 0}, Case{DType::kFloat32, TIGON_ACT_GELU_TANH, 6, 21, 5},
        Case{DType::kFloat16, TIGON_ACT_GELU_TANH, 3, 100, 0}, Case{DType::kBFloat16, TIGON_ACT_SILU, 7, 9, 2},
        Case{DType::kFloat32, TIGON_ACT_SILU, 2, 1001, 0}, Case{DType::kBFloat16, TIGON_ACT_RELU2, 5, 64, 3},
        Case{DType::kFloat16, TIGON_ACT_RELU2, 3, 17, 0}, Case{DType::kFloat32, TIGON_ACT_RELU2, 2, 9, 1}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(short_name(std::get<0>(c))) + "_" + act_name(std::get<1>(c)) + "_" +
             std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
             std::to_string(std::get<4>(c));
    });

// ---- C API validation: every bad argument is an INVALID_ARGUMENT naming it ---------------------------------------

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(ActivationApi, RejectsBadArguments) {
  HostMat x(DType::kFloat32, 4, 8), y(DType::kFloat32, 4, 8), dx(DType::kFloat32, 4, 8), i32(DType::kInt32, 4, 8),
      bf(DType::kBFloat16, 4, 8), wide(DType::kFloat32, 4, 9);
  auto xv = x.view(), yv = y.view(), dxv = dx.view();
  expect_error(tigon_activation_fwd(xv, yv, {6, 0}, nullptr), "activation");
  expect_error(tigon_activation_fwd(xv, yv, {-1, 0}, nullptr), "activation");
  expect_error(tigon_activation_fwd(xv, yv, {0, 2}, nullptr), "saved_output");
  expect_error(tigon_activation_fwd(nullptr, yv, {1, 0}, nullptr), "x");
  expect_error(tigon_activation_fwd(xv, nullptr, {1, 0}, nullptr), "y");
  expect_error(tigon_activation_fwd(i32.view(), yv, {1, 0}, nullptr), "x");
  expect_error(tigon_activation_fwd(xv, bf.view(), {1, 0}, nullptr), "y");
  expect_error(tigon_activation_fwd(xv, wide.view(), {1, 0}, nullptr), "y");
  tigon::TensorView x_rows_of_16(x.data(), {2, 8}, tigon::dtype::float32, tigon::cpu(), {16, 1});
  tigon::TensorView y_over_x(x.data(), {2, 8}, tigon::dtype::float32, tigon::cpu(), {8, 1});
  expect_error(tigon_activation_fwd(x_rows_of_16, y_over_x, {1, 0}, nullptr), "y");
  expect_error(tigon_activation_bwd(xv, yv, dxv, {TIGON_ACT_SILU, 1}, nullptr), "saved_output");
  expect_error(tigon_activation_bwd(xv, yv, dxv, {TIGON_ACT_GELU_TANH, 1}, nullptr), "saved_output");
  expect_error(tigon_activation_bwd(nullptr, yv, dxv, {1, 1}, nullptr), "dy");
  expect_error(tigon_activation_bwd(xv, nullptr, dxv, {1, 1}, nullptr), "saved");
  expect_error(tigon_activation_bwd(xv, yv, nullptr, {1, 1}, nullptr), "dx");
  expect_error(tigon_activation_bwd(xv, bf.view(), dxv, {1, 1}, nullptr), "saved");
  expect_error(tigon_activation_bwd(xv, yv, wide.view(), {1, 1}, nullptr), "dx");
  EXPECT_EQ(tigon_activation_bwd(xv, yv, dxv, {TIGON_ACT_RELU, 1}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(tigon_activation_bwd(xv, yv, dxv, {TIGON_ACT_RELU2, 1}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  HostMat empty(DType::kBFloat16, 0, 8);
  EXPECT_EQ(tigon_activation_fwd(empty.view(), empty.view(), {3, 0}, nullptr), TIGON_SUCCESS) << tigon_last_error();
}

}  // namespace
