// GroupNorm's CPU reference (through the C API) against the naive fp64 formulas: y, mean, rstd, every gradient, no
// affine, in place; and C API validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "group_norm_test_util.h"
#include "test_util.h"
#include "tigon/group_norm.h"

using namespace tigon_test;

namespace {

class GroupNormReference : public ::testing::TestWithParam<GroupNormCase> {};

TEST_P(GroupNormReference, MatchesNaiveFp64) {
  const GroupNormCase c = GetParam();
  const int64_t cols = c.c * c.s, cg = c.c / c.groups, len = cg * c.s;
  std::mt19937 rng(unsigned(c.n * 31 + cols));
  HostMat x(c.dtype, c.n, cols), y(c.dtype, c.n, cols), dy(c.dtype, c.n, cols), dx(c.dtype, c.n, cols);
  HostMat w(c.param_dtype, 1, c.c), b(c.param_dtype, 1, c.c), dw(DType::kFloat32, 1, c.c), db(DType::kFloat32, 1, c.c);
  HostMat mean(DType::kFloat32, c.n, c.groups), rstd(DType::kFloat32, c.n, c.groups);
  x.fill_random(rng, 2.0, 3.0);  // a mean well away from 0
  dy.fill_random(rng);
  w.fill_random(rng, 0.5, 1.0);
  b.fill_random(rng, 0.3);
  for (HostMat* m : {&y, &dx, &dw, &db, &mean, &rstd}) m->poison();
  const auto prm = group_norm_params(c);
  auto wv = w.view(), bv = b.view();
  const tigon_tensor* wp = c.affine ? wv.get() : nullptr;
  ASSERT_EQ(tigon_group_norm_fwd(nchw(x.data(), c.dtype, c), wp, c.affine ? bv.get() : nullptr,
                                 nchw(y.data(), c.dtype, c), mean.view(), rstd.view(), prm, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  size_t bytes = 1;
  ASSERT_EQ(tigon_group_norm_bwd_workspace_size(nchw(x.data(), c.dtype, c), prm, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // the CPU takes none
  ASSERT_EQ(tigon_group_norm_bwd(nchw(dy.data(), c.dtype, c), nchw(x.data(), c.dtype, c), wp, mean.view(), rstd.view(),
                                 nchw(dx.data(), c.dtype, c), dw.view(), db.view(), prm, nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();

  const double tol = rtol_of(c.dtype);
  std::vector<double> want_dw(size_t(c.c), 0.0), want_db(size_t(c.c), 0.0);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t g = 0; g < c.groups; ++g) {
      const int64_t base = g * len;
      double mu = 0, var = 0;
      for (int64_t i = 0; i < len; ++i) mu += x.at(n, base + i);
      mu /= double(len);
      for (int64_t i = 0; i < len; ++i) var += (x.at(n, base + i) - mu) * (x.at(n, base + i) - mu);
      const double rs = 1 / std::sqrt(var / double(len) + 1e-5);
      EXPECT_NEAR(mean.at(n, g), mu, 1e-6 * (1 + std::fabs(mu)));
      EXPECT_NEAR(rstd.at(n, g), rs, 1e-6 * rs);
      double mg = 0, mgx = 0;
      for (int64_t i = 0; i < len; ++i) {
        const int64_t ch = g * cg + i / c.s;
        const double wc = c.affine ? w.at(0, ch) : 1.0, bc = c.affine ? b.at(0, ch) : 0.0;
        const double xhat = (x.at(n, base + i) - mu) * rs, want_y = xhat * wc + bc;
        EXPECT_NEAR(y.at(n, base + i), want_y, tol * (1e-2 + std::fabs(want_y)));
        mg += dy.at(n, base + i) * wc / double(len), mgx += dy.at(n, base + i) * wc * xhat / double(len);
        want_dw[size_t(ch)] += dy.at(n, base + i) * xhat, want_db[size_t(ch)] += dy.at(n, base + i);
      }
      for (int64_t i = 0; i < len; ++i) {
        const int64_t ch = g * cg + i / c.s;
        const double wc = c.affine ? w.at(0, ch) : 1.0, xhat = (x.at(n, base + i) - mu) * rs;
        const double want = rs * (dy.at(n, base + i) * wc - mg - xhat * mgx);
        EXPECT_NEAR(dx.at(n, base + i), want, tol * (2e-2 * rs + std::fabs(want)));
      }
    }
  for (int64_t ch = 0; ch < c.c; ++ch) {
    EXPECT_NEAR(dw.at(0, ch), want_dw[size_t(ch)], 1e-5 * (1 + std::fabs(want_dw[size_t(ch)])));
    EXPECT_NEAR(db.at(0, ch), want_db[size_t(ch)], 1e-5 * (1 + std::fabs(want_db[size_t(ch)])));
  }

  // In place: y over x, dx over dy.
  HostMat xi = x, dyi = dy;
  ASSERT_EQ(tigon_group_norm_fwd(nchw(xi.data(), c.dtype, c), wp, c.affine ? bv.get() : nullptr,
                                 nchw(xi.data(), c.dtype, c), mean.view(), rstd.view(), prm, nullptr),
            TIGON_SUCCESS);
  EXPECT_EQ(worst_ratio(xi, y, 0, 0), 0.0) << "y over x";
  ASSERT_EQ(tigon_group_norm_bwd(nchw(dyi.data(), c.dtype, c), nchw(x.data(), c.dtype, c), wp, mean.view(), rstd.view(),
                                 nchw(dyi.data(), c.dtype, c), nullptr, nullptr, prm, nullptr, 0, nullptr),
            TIGON_SUCCESS);
  EXPECT_EQ(worst_ratio(dyi, dx, 0, 0), 0.0) << "dx over dy";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupNormReference,
                         ::testing::Values(GroupNormCase{DType::kFloat32, DType::kFloat32, 3, 8, 2, 5, true},
                                           GroupNormCase{DType::kBFloat16, DType::kFloat32, 2, 6, 3, 64, true},
                                           GroupNormCase{DType::kBFloat16, DType::kBFloat16, 4, 12, 4, 1, true},
                                           GroupNormCase{DType::kFloat16, DType::kFloat16, 1, 4, 1, 9, false},
                                           GroupNormCase{DType::kFloat32, DType::kFloat32, 2, 5, 5, 3, true}),
                         group_norm_case_name);

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(GroupNormApi, RejectsBadArguments) {
  const GroupNormCase c{DType::kBFloat16, DType::kBFloat16, 2, 8, 4, 3, true};
  HostMat x(DType::kBFloat16, 2, 24), y(DType::kBFloat16, 2, 24), f16(DType::kFloat16, 2, 24);
  HostMat w(DType::kBFloat16, 1, 8), short_w(DType::kBFloat16, 1, 7), f16_w(DType::kFloat16, 1, 8);
  HostMat mean(DType::kFloat32, 2, 4), rstd(DType::kFloat32, 2, 4), mean_bf(DType::kBFloat16, 2, 4);
  HostMat short_mean(DType::kFloat32, 2, 3), dw16(DType::kFloat16, 1, 8), db32(DType::kFloat32, 1, 8);
  const auto xv = nchw(x.data(), c.dtype, c), yv = nchw(y.data(), c.dtype, c);
  const auto prm = group_norm_params(c);
  expect_error(tigon_group_norm_fwd(nullptr, w.view(), nullptr, yv, mean.view(), rstd.view(), prm, nullptr), "x");
  expect_error(tigon_group_norm_fwd(x.view(), w.view(), nullptr, y.view(), mean.view(), rstd.view(), prm, nullptr),
               "weight");  // [2, 24]: 24 channels, not the weight's 8
  expect_error(tigon_group_norm_fwd(xv, w.view(), nullptr, yv, mean.view(), rstd.view(), {1e-5f, 3}, nullptr),
               "params.num_groups");
  expect_error(tigon_group_norm_fwd(xv, w.view(), nullptr, yv, mean.view(), rstd.view(), {1e-5f, 0}, nullptr),
               "params.num_groups");
  expect_error(tigon_group_norm_fwd(xv, w.view(), nullptr, yv, mean.view(), rstd.view(), {-1.f, 4}, nullptr),
               "params.eps");
  expect_error(tigon_group_norm_fwd(xv, short_w.view(), nullptr, yv, mean.view(), rstd.view(), prm, nullptr), "weight");
  expect_error(tigon_group_norm_fwd(xv, f16_w.view(), nullptr, yv, mean.view(), rstd.view(), prm, nullptr), "weight");
  expect_error(tigon_group_norm_fwd(xv, w.view(), db32.view(), yv, mean.view(), rstd.view(), prm, nullptr), "bias");
  expect_error(tigon_group_norm_fwd(xv, w.view(), nullptr, nchw(f16.data(), DType::kFloat16, c), mean.view(),
                                    rstd.view(), prm, nullptr),
               "y");
  expect_error(tigon_group_norm_fwd(xv, w.view(), nullptr, yv, mean_bf.view(), rstd.view(), prm, nullptr), "mean");
  expect_error(tigon_group_norm_fwd(xv, w.view(), nullptr, yv, mean.view(), short_mean.view(), prm, nullptr), "rstd");
  // x with a gap between samples is not contiguous
  const tigon::TensorView gappy(x.data(), {2, 8, 1}, to_dl(DType::kBFloat16), tigon::cpu(), {12, 1, 1});
  expect_error(tigon_group_norm_fwd(gappy, w.view(), nullptr, yv, mean.view(), rstd.view(), prm, nullptr), "x");
  expect_error(tigon_group_norm_bwd(yv, xv, w.view(), mean.view(), rstd.view(), nullptr, dw16.view(), nullptr, prm,
                                    nullptr, 0, nullptr),
               "dweight");
  expect_error(
      tigon_group_norm_bwd(yv, xv, w.view(), mean.view(), rstd.view(), xv, nullptr, nullptr, prm, nullptr, 0, nullptr),
      "dx");
  expect_error(tigon_group_norm_bwd(nullptr, xv, w.view(), mean.view(), rstd.view(), nullptr, nullptr, nullptr, prm,
                                    nullptr, 0, nullptr),
               "dy");
  expect_error(tigon_group_norm_bwd_workspace_size(xv, prm, nullptr), "bytes");
}

}  // namespace
