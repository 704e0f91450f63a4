// Softmax's CPU reference (through the C API) against the naive fp64 formulas, in place, and C API validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "causal_rowwise_test_util.h"
#include "test_util.h"
#include "tigon/softmax.h"

using namespace tigon_test;

namespace {

TEST(SoftmaxReference, MatchesNaiveFp64AndRunsInPlace) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::mt19937 rng(5);
    const int64_t rows = 4, cols = 37;
    HostMat x(dt, rows, cols, cols + 3), y(dt, rows, cols), dy(dt, rows, cols), dx(dt, rows, cols);
    x.fill_random(rng, 3.0);
    dy.fill_random(rng);
    y.poison();
    dx.poison();
    ASSERT_EQ(tigon_softmax_fwd(x.view(), y.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
    ASSERT_EQ(tigon_softmax_bwd(dy.view(), y.view(), dx.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
    const double tol = rtol_of(dt);
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -INFINITY, sum = 0, dot = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::fmax(mx, x.at(r, c));
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(x.at(r, c) - mx);
      for (int64_t c = 0; c < cols; ++c) dot += y.at(r, c) * dy.at(r, c);
      for (int64_t c = 0; c < cols; ++c) {
        const double want = std::exp(x.at(r, c) - mx) / sum;
        EXPECT_NEAR(y.at(r, c), want, tol * want + 1e-7);
        const double want_dx = y.at(r, c) * (dy.at(r, c) - dot);
        EXPECT_NEAR(dx.at(r, c), want_dx, tol * (std::fabs(want_dx) + 1e-3));
      }
    }
    HostMat xi = x, dyi = dy;  // in place: y over x, dx over dy
    ASSERT_EQ(tigon_softmax_fwd(xi.view(), xi.view(), nullptr), TIGON_SUCCESS);
    EXPECT_EQ(worst_ratio(xi, y, 0, 0), 0.0);
    ASSERT_EQ(tigon_softmax_bwd(dyi.view(), y.view(), dyi.view(), nullptr), TIGON_SUCCESS);
    EXPECT_EQ(worst_ratio(dyi, dx, 0, 0), 0.0);
  }
}

TEST(SoftmaxReference, CausalIsThePlainFormOfEachPrefix) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    expect_causal_is_prefix(tigon_softmax_fwd, tigon_softmax_causal_fwd, dt, 2, 9);
    expect_causal_is_prefix(tigon_softmax_fwd, tigon_softmax_causal_fwd, dt, 1, 1);
  }
}

TEST(SoftmaxApi, CausalNeedsSquareScores) { expect_causal_shape_errors(tigon_softmax_causal_fwd); }

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(SoftmaxApi, RejectsBadArguments) {
  HostMat x(DType::kFloat32, 4, 8), y(DType::kFloat32, 4, 8), y7(DType::kFloat32, 4, 7), h(DType::kFloat16, 4, 8);
  HostMat empty_cols(DType::kFloat32, 4, 0), i32(DType::kInt32, 4, 8);
  expect_error(tigon_softmax_fwd(nullptr, y.view(), nullptr), "x");
  expect_error(tigon_softmax_fwd(i32.view(), y.view(), nullptr), "x");
  expect_error(tigon_softmax_fwd(empty_cols.view(), empty_cols.view(), nullptr), "x");
  expect_error(tigon_softmax_fwd(x.view(), y7.view(), nullptr), "y");
  expect_error(tigon_softmax_fwd(x.view(), h.view(), nullptr), "y");
  expect_error(tigon_softmax_bwd(y7.view(), y.view(), x.view(), nullptr), "dy");
  expect_error(tigon_softmax_bwd(x.view(), y.view(), nullptr, nullptr), "dx");
}

}  // namespace
