// DyT's CPU reference (through the C API) against the naive fp64 formulas, every gradient, in place, without beta;
// and C API validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "dyt_test_util.h"
#include "test_util.h"
#include "tigon/dyt.h"

using namespace tigon_test;

namespace {

using Case = DytCase;

class DytReference : public ::testing::TestWithParam<Case> {};

TEST_P(DytReference, MatchesNaiveFp64) {
  const auto [dt, pdt, rows, cols, pad, has_beta] = GetParam();
  std::mt19937 rng(unsigned(rows * 7 + cols));
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  HostMat alpha(DType::kFloat32, 1, 1), gamma(pdt, 1, cols), beta(pdt, 1, cols), dalpha(DType::kFloat32, 1, 1);
  HostMat dgamma(DType::kFloat32, 1, cols), dbeta(DType::kFloat32, 1, cols);
  x.fill_random(rng, 2.0);
  dy.fill_random(rng);
  gamma.fill_random(rng, 0.5, 1.0);
  beta.fill_random(rng, 0.3);
  alpha.fill_random(rng, 0.1, 0.7);
  for (HostMat* m : {&y, &dx, &dalpha, &dgamma, &dbeta}) m->poison();
  auto bv = beta.view();
  ASSERT_EQ(tigon_dyt_fwd(x.view(), alpha.view(), gamma.view(), has_beta ? bv.get() : nullptr, y.view(), nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  size_t bytes = 1;
  ASSERT_EQ(tigon_dyt_bwd_workspace_size(x.view(), &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // the CPU takes none
  ASSERT_EQ(tigon_dyt_bwd(dy.view(), x.view(), alpha.view(), gamma.view(), dx.view(), dalpha.view(), dgamma.view(),
                          dbeta.view(), nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  const double a = alpha.at(0, 0), tol = rtol_of(dt);
  double want_dalpha = 0;
  for (int64_t c = 0; c < cols; ++c) {
    double want_dg = 0, want_db = 0;
    const double g = gamma.at(0, c), b = has_beta ? beta.at(0, c) : 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const double xv = x.at(r, c), t = std::tanh(a * xv), d = 1 - t * t, dyv = dy.at(r, c);
      EXPECT_NEAR(y.at(r, c), g * t + b, tol * (1e-3 + std::fabs(g * t + b)));
      EXPECT_NEAR(dx.at(r, c), dyv * g * a * d, tol * (1e-3 + std::fabs(dyv * g * a * d)) + 1e-6);
      want_dg += dyv * t, want_db += dyv, want_dalpha += dyv * g * xv * d;
    }
    EXPECT_NEAR(dgamma.at(0, c), want_dg, 1e-5 * (1 + std::fabs(want_dg)));
    EXPECT_NEAR(dbeta.at(0, c), want_db, 1e-5 * (1 + std::fabs(want_db)));
  }
  EXPECT_NEAR(dalpha.at(0, 0), want_dalpha, 1e-5 * (1 + std::fabs(want_dalpha)));

  // In place: y over x, dx over dy.
  HostMat xi = x, dyi = dy;
  ASSERT_EQ(tigon_dyt_fwd(xi.view(), alpha.view(), gamma.view(), has_beta ? bv.get() : nullptr, xi.view(), nullptr),
            TIGON_SUCCESS);
  EXPECT_EQ(worst_ratio(xi, y, 0, 0), 0.0) << "y over x";
  ASSERT_EQ(tigon_dyt_bwd(dyi.view(), x.view(), alpha.view(), gamma.view(), dyi.view(), nullptr, nullptr, nullptr,
                          nullptr, 0, nullptr),
            TIGON_SUCCESS);
  EXPECT_EQ(worst_ratio(dyi, dx, 0, 0), 0.0) << "dx over dy";
}

INSTANTIATE_TEST_SUITE_P(Shapes, DytReference,
                         ::testing::Values(Case{DType::kFloat32, DType::kFloat32, 5, 33, 0, true},
                                           Case{DType::kBFloat16, DType::kFloat32, 7, 64, 3, true},
                                           Case{DType::kBFloat16, DType::kBFloat16, 3, 17, 0, false},
                                           Case{DType::kFloat16, DType::kFloat16, 1, 1, 0, true},
                                           Case{DType::kFloat16, DType::kFloat32, 0, 8, 0, true}),
                         dyt_case_name);

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(DytApi, RejectsBadArguments) {
  HostMat x(DType::kBFloat16, 4, 8), y(DType::kBFloat16, 4, 8), alpha(DType::kFloat32, 1, 1);
  HostMat gamma(DType::kBFloat16, 1, 8), short_gamma(DType::kBFloat16, 1, 7), f16_gamma(DType::kFloat16, 1, 8);
  HostMat alpha2(DType::kFloat32, 1, 2), alpha_bf(DType::kBFloat16, 1, 1), i32(DType::kInt32, 4, 8);
  HostMat dgamma16(DType::kFloat16, 1, 8), dbeta32(DType::kFloat32, 1, 8), dgamma_bf(DType::kBFloat16, 1, 8);
  expect_error(tigon_dyt_fwd(nullptr, alpha.view(), gamma.view(), nullptr, y.view(), nullptr), "x");
  expect_error(tigon_dyt_fwd(i32.view(), alpha.view(), gamma.view(), nullptr, y.view(), nullptr), "x");
  expect_error(tigon_dyt_fwd(x.view(), alpha2.view(), gamma.view(), nullptr, y.view(), nullptr), "alpha");
  expect_error(tigon_dyt_fwd(x.view(), alpha_bf.view(), gamma.view(), nullptr, y.view(), nullptr), "alpha");
  expect_error(tigon_dyt_fwd(x.view(), alpha.view(), short_gamma.view(), nullptr, y.view(), nullptr), "gamma");
  expect_error(tigon_dyt_fwd(x.view(), alpha.view(), f16_gamma.view(), nullptr, y.view(), nullptr), "gamma");
  expect_error(tigon_dyt_fwd(x.view(), alpha.view(), gamma.view(), dbeta32.view(), y.view(), nullptr), "beta");
  expect_error(tigon_dyt_fwd(x.view(), alpha.view(), gamma.view(), nullptr, i32.view(), nullptr), "y");
  expect_error(tigon_dyt_bwd(y.view(), x.view(), alpha.view(), gamma.view(), nullptr, nullptr, dgamma16.view(), nullptr,
                             nullptr, 0, nullptr),
               "dgamma");
  expect_error(tigon_dyt_bwd(y.view(), x.view(), alpha.view(), gamma.view(), nullptr, nullptr, dgamma_bf.view(),
                             dbeta32.view(), nullptr, 0, nullptr),
               "dbeta");
  expect_error(tigon_dyt_bwd(nullptr, x.view(), alpha.view(), gamma.view(), nullptr, nullptr, nullptr, nullptr, nullptr,
                             0, nullptr),
               "dy");
  expect_error(tigon_dyt_bwd_workspace_size(x.view(), nullptr), "bytes");
}

}  // namespace
