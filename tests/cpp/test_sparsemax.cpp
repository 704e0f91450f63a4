// Sparsemax's CPU reference (through the C API) against tau found independently by bisection in fp64, the output's
// sum and exact zeros, the backward's formula, in place, and C API validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "causal_rowwise_test_util.h"
#include "test_util.h"
#include "tigon/sparsemax.h"

using namespace tigon_test;

namespace {

// tau with sum(max(z - tau, 0)) = 1, by bisection on [max - 1, max].
double bisect_tau(const HostMat& x, int64_t r) {
  double hi = -INFINITY;
  for (int64_t c = 0; c < x.cols; ++c) hi = std::max(hi, x.at(r, c));
  double lo = hi - 1;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    double f = 0;
    for (int64_t c = 0; c < x.cols; ++c) f += std::max(x.at(r, c) - mid, 0.0);
    (f >= 1 ? lo : hi) = mid;
  }
  return lo;
}

TEST(SparsemaxReference, MatchesBisectionAndRunsInPlace) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::mt19937 rng(9);
    const int64_t rows = 5, cols = 41;
    HostMat x(dt, rows, cols, cols + 3), y(dt, rows, cols), dy(dt, rows, cols), dx(dt, rows, cols);
    x.fill_random(rng, 2.0);
    dy.fill_random(rng);
    y.poison();
    dx.poison();
    ASSERT_EQ(tigon_sparsemax_fwd(x.view(), y.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
    ASSERT_EQ(tigon_sparsemax_bwd(dy.view(), y.view(), dx.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
    const double tol = rtol_of(dt);
    for (int64_t r = 0; r < rows; ++r) {
      const double tau = bisect_tau(x, r);
      double sum = 0, dsum = 0;
      int64_t support = 0, zeros = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double want = std::max(x.at(r, c) - tau, 0.0);
        EXPECT_NEAR(y.at(r, c), want, tol * (1 + std::fabs(x.at(r, c))));
        sum += y.at(r, c), zeros += y.at(r, c) == 0;
        if (y.at(r, c) > 0) dsum += dy.at(r, c), ++support;
      }
      EXPECT_NEAR(sum, 1.0, 4 * tol) << "row " << r;
      EXPECT_GT(zeros, 0) << "row " << r << ": random rows of 41 have elements below tau";
      for (int64_t c = 0; c < cols; ++c) {
        const double want_dx = y.at(r, c) > 0 ? dy.at(r, c) - dsum / double(support) : 0.0;
        EXPECT_NEAR(dx.at(r, c), want_dx, tol * (std::fabs(want_dx) + 1e-2));
      }
    }
    HostMat xi = x, dyi = dy;  // in place: y over x, dx over dy
    ASSERT_EQ(tigon_sparsemax_fwd(xi.view(), xi.view(), nullptr), TIGON_SUCCESS);
    EXPECT_EQ(worst_ratio(xi, y, 0, 0), 0.0);
    ASSERT_EQ(tigon_sparsemax_bwd(dyi.view(), y.view(), dyi.view(), nullptr), TIGON_SUCCESS);
    EXPECT_EQ(worst_ratio(dyi, dx, 0, 0), 0.0);
  }
}

TEST(SparsemaxReference, OneElementAndTies) {
  HostMat one(DType::kFloat32, 2, 1), y1(DType::kFloat32, 2, 1), tie(DType::kFloat32, 1, 4), yt(DType::kFloat32, 1, 4);
  std::mt19937 rng(1);
  one.fill_random(rng);
  for (int64_t c = 0; c < 4; ++c) tie.set(0, c, c < 2 ? 3.0 : -1.0);
  ASSERT_EQ(tigon_sparsemax_fwd(one.view(), y1.view(), nullptr), TIGON_SUCCESS);
  EXPECT_EQ(y1.at(0, 0), 1.0);
  EXPECT_EQ(y1.at(1, 0), 1.0);
  ASSERT_EQ(tigon_sparsemax_fwd(tie.view(), yt.view(), nullptr), TIGON_SUCCESS);
  EXPECT_EQ(yt.at(0, 0), 0.5);  // two equal maxima share the mass
  EXPECT_EQ(yt.at(0, 1), 0.5);
  EXPECT_EQ(yt.at(0, 2), 0.0);
}

TEST(SparsemaxReference, CausalIsThePlainFormOfEachPrefix) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    expect_causal_is_prefix(tigon_sparsemax_fwd, tigon_sparsemax_causal_fwd, dt, 2, 9);
    expect_causal_is_prefix(tigon_sparsemax_fwd, tigon_sparsemax_causal_fwd, dt, 1, 1);
  }
}

TEST(SparsemaxApi, CausalNeedsSquareScores) { expect_causal_shape_errors(tigon_sparsemax_causal_fwd); }

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(SparsemaxApi, RejectsBadArguments) {
  HostMat x(DType::kFloat32, 4, 8), y(DType::kFloat32, 4, 8), y7(DType::kFloat32, 4, 7), h(DType::kFloat16, 4, 8);
  HostMat empty_cols(DType::kFloat32, 4, 0), i32(DType::kInt32, 4, 8);
  expect_error(tigon_sparsemax_fwd(nullptr, y.view(), nullptr), "x");
  expect_error(tigon_sparsemax_fwd(i32.view(), y.view(), nullptr), "x");
  expect_error(tigon_sparsemax_fwd(empty_cols.view(), empty_cols.view(), nullptr), "x");
  expect_error(tigon_sparsemax_fwd(x.view(), y7.view(), nullptr), "y");
  expect_error(tigon_sparsemax_fwd(x.view(), h.view(), nullptr), "y");
  expect_error(tigon_sparsemax_bwd(y7.view(), y.view(), x.view(), nullptr), "dy");
  expect_error(tigon_sparsemax_bwd(x.view(), y.view(), nullptr, nullptr), "dx");
}

}  // namespace
