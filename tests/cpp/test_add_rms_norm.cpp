// RMSNorm with the residual add fused in front, through the C API on the CPU: the reference against the add followed
// by the plain RMSNorm, in-place forms (h over x, dx over dh) and arguments named on bad input.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "add_rms_norm_test_util.h"

using namespace tigon_test;

namespace {

class AddRmsNormReference : public ::testing::TestWithParam<AddNormCase> {};

TEST_P(AddRmsNormReference, IsTheAddThenRmsNorm) {
  const AddNormCase c = GetParam();
  std::mt19937 rng(7 + c.rows + c.cols);
  Tensors t(c, rng);
  run_host(t, c.dh);

  // h = round(x + residual); then the plain op on h gives the same y, rstd and (less dh) dx
  HostMat h(c.xt, c.rows, c.cols), y = t.y, rstd = t.rstd, dx = t.dx, dw = t.dw;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t col = 0; col < c.cols; ++col) h.set(r, col, t.x.at(r, col) + t.res.at(r, col));
  EXPECT_EQ(worst_ratio(t.h, h, 0, 0), 0.0) << "h";
  auto wv = vec(t.w, c.cols), rv = vec(rstd, c.rows), dwv = vec(dw, c.cols);
  tigon::rms_norm_fwd(h.view(), &wv, y.view(), &rv, kParams);
  tigon::rms_norm_bwd(t.dy.view(), h.view(), &wv, rv, dx.view(), &dwv, kParams, nullptr, 0);
  EXPECT_EQ(worst_ratio(t.y, y, 0, 0), 0.0) << "y";
  EXPECT_EQ(worst_ratio(t.rstd, rstd, 0, 0), 0.0) << "rstd";
  EXPECT_EQ(worst_ratio(t.dw, dw, 0, 0), 0.0) << "dw";
  // dx: the plain op's (rounded) plus dh, against the fused op's one rounding of the sum
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t col = 0; col < c.cols; ++col) dx.set(r, col, dx.at(r, col) + (c.dh ? t.dh.at(r, col) : 0.0));
  const double tol = rtol_of(c.xt);
  EXPECT_LE(worst_ratio(t.dx, dx, tol, 2 * tol), 1.0) << "dx";  // dh and dx are O(1): one rounding unit of either
}

TEST(AddRmsNormReferenceInPlace, HOverXAndDxOverDhGiveTheSameBits) {
  const AddNormCase c{DType::kBFloat16, 5, 96, 0, true};
  std::mt19937 rng(3);
  Tensors t(c, rng);
  Tensors in_place = t;
  run_host(t, true);
  auto wv = vec(in_place.w, c.cols), rv = vec(in_place.rstd, c.rows), dwv = vec(in_place.dw, c.cols);
  auto xv = in_place.x.view(), dhv = in_place.dh.view();
  tigon::add_rms_norm_fwd(xv, in_place.res.view(), &wv, in_place.y.view(), xv, &rv, kParams);      // h over x
  tigon::add_rms_norm_bwd(in_place.dy.view(), &dhv, xv, &wv, rv, dhv, &dwv, kParams, nullptr, 0);  // dx over dh
  EXPECT_EQ(worst_ratio(in_place.x, t.h, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(in_place.dh, t.dx, 0, 0), 0.0);
}

TEST(AddRmsNormApi, BadArgumentsAreNamed) {
  const AddNormCase c{DType::kFloat32, 4, 32, 0, true};
  std::mt19937 rng(5);
  Tensors t(c, rng);
  HostMat other(DType::kFloat16, 4, 32), narrow(DType::kFloat32, 4, 16), y_on_h(DType::kFloat32, 4, 32);
  auto wv = vec(t.w, 32), rv = vec(t.rstd, 4);
  const tigon_rms_norm_params p = kParams;
  auto expect_named = [](tigon_status_t st, const char* arg) {
    EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find(std::string("'") + arg + "'"), std::string::npos)
        << tigon_last_error();
  };
  auto x = t.x.view(), res = t.res.view(), y = t.y.view(), h = t.h.view(), dy = t.dy.view(), dx = t.dx.view();
  expect_named(tigon_add_rms_norm_fwd(x, other.view(), wv, y, h, rv, p, nullptr), "residual");
  expect_named(tigon_add_rms_norm_fwd(x, res, wv, y, narrow.view(), rv, p, nullptr), "h");
  expect_named(tigon_add_rms_norm_fwd(x, nullptr, wv, y, h, rv, p, nullptr), "residual");
  expect_named(tigon_add_rms_norm_fwd(x, res, wv, y, y, rv, p, nullptr), "y");
  expect_named(tigon_add_rms_norm_bwd(dy, narrow.view(), h, wv, rv, dx, nullptr, p, nullptr, 0, nullptr), "dh");
  expect_named(tigon_add_rms_norm_bwd(dy, nullptr, narrow.view(), wv, rv, dx, nullptr, p, nullptr, 0, nullptr), "dy");
}

const AddNormCase kCpuCases[] = {
    {DType::kFloat32, 3, 64, 0, true}, {DType::kBFloat16, 7, 130, 2, true}, {DType::kFloat16, 4, 33, 0, false}};
INSTANTIATE_TEST_SUITE_P(Cases, AddRmsNormReference, ::testing::ValuesIn(kCpuCases), case_name);

}  // namespace
