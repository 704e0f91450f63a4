// PolyNorm's C API on the CPU: a small case against the formula, and every bad argument named.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "test_util.h"
#include "tigon/poly_norm.h"

using namespace tigon_test;

namespace {

TEST(PolyNormReference, MatchesTheFormula) {
  HostMat x(DType::kFloat32, 2, 3), y(DType::kFloat32, 2, 3), w(DType::kFloat32, 1, 3), b(DType::kFloat32, 1, 1);
  HostMat rstd(DType::kFloat32, 2, 3), dx(DType::kFloat32, 2, 3), dw(DType::kFloat32, 1, 3), db(DType::kFloat32, 1, 1);
  const float xs[6] = {1.f, -2.f, 0.5f, 3.f, 0.f, -1.f}, ws[3] = {0.2f, -0.3f, 0.9f};
  for (int i = 0; i < 6; ++i) tigon::store_elem(x.bytes.data(), x.dtype, i, xs[i]);
  for (int k = 0; k < 3; ++k) tigon::store_elem(w.bytes.data(), w.dtype, k, ws[k]);
  tigon::store_elem(b.bytes.data(), b.dtype, 0, 0.25);
  ASSERT_EQ(tigon_poly_norm_fwd(x.view(), w.view(), b.view(), y.view(), rstd.view(), {1e-6f}, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  for (int r = 0; r < 2; ++r) {
    double s[3] = {0, 0, 0};
    for (int c = 0; c < 3; ++c) {
      const double v = xs[r * 3 + c];
      s[0] += std::pow(v, 6), s[1] += std::pow(v, 4), s[2] += v * v;
    }
    for (int c = 0; c < 3; ++c) {
      const double v = xs[r * 3 + c];
      const double want = ws[0] * v * v * v / std::sqrt(s[0] / 3 + 1e-6) + ws[1] * v * v / std::sqrt(s[1] / 3 + 1e-6) +
                          ws[2] * v / std::sqrt(s[2] / 3 + 1e-6) + 0.25;
      EXPECT_NEAR(y.at(r, c), want, 1e-5 * (1 + std::fabs(want)));
    }
  }
  ASSERT_EQ(tigon_poly_norm_bwd(y.view(), x.view(), w.view(), rstd.view(), dx.view(), dw.view(), db.view(), nullptr, 0,
                                nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  EXPECT_NEAR(db.at(0, 0), y.at(0, 0) + y.at(0, 1) + y.at(0, 2) + y.at(1, 0) + y.at(1, 1) + y.at(1, 2), 1e-5);
}

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(PolyNormApi, RejectsBadArguments) {
  HostMat x(DType::kBFloat16, 4, 8), y(DType::kBFloat16, 4, 8), w(DType::kFloat32, 1, 3), b(DType::kFloat32, 1, 1);
  HostMat w2(DType::kFloat32, 1, 2), wbf(DType::kBFloat16, 1, 3), rstd(DType::kFloat32, 4, 3),
      rs2(DType::kFloat32, 4, 2);
  expect_error(tigon_poly_norm_fwd(x.view(), w.view(), b.view(), y.view(), nullptr, {0.f}, nullptr), "eps");
  expect_error(tigon_poly_norm_fwd(x.view(), w2.view(), b.view(), y.view(), nullptr, {1e-6f}, nullptr), "weight");
  expect_error(tigon_poly_norm_fwd(x.view(), wbf.view(), b.view(), y.view(), nullptr, {1e-6f}, nullptr), "weight");
  expect_error(tigon_poly_norm_fwd(x.view(), w.view(), nullptr, y.view(), nullptr, {1e-6f}, nullptr), "bias");
  expect_error(tigon_poly_norm_fwd(x.view(), w.view(), b.view(), y.view(), rs2.view(), {1e-6f}, nullptr), "rstd");
  expect_error(
      tigon_poly_norm_bwd(y.view(), x.view(), w.view(), nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
      "rstd");
  expect_error(tigon_poly_norm_bwd_workspace_size(x.view(), nullptr), "bytes");
}

}  // namespace
