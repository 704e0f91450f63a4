// The CPU reference (through the C API) against a naive fp64 loop of the Hugging Face formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "test_util.h"

using namespace tigon_test;

namespace {

struct Naive {
  std::vector<double> y, rstd, dx, dw;
};

// Exact RMSNorm and its gradients in fp64 with no intermediate rounding.
Naive naive(const HostMat& x, const HostMat* w, const HostMat& dy, double eps, double offset) {
  Naive n;
  const int64_t R = x.rows, C = x.cols;
  n.y.resize(R * C);
  n.dx.resize(R * C);
  n.dw.assign(C, 0.0);
  n.rstd.resize(R);
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x.at(r, c) * x.at(r, c);
    const double rs = 1.0 / std::sqrt(ss / C + eps);
    n.rstd[r] = rs;
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double s = w ? offset + w->at(0, c) : 1.0;
      n.y[r * C + c] = x.at(r, c) * rs * s;
      dot += dy.at(r, c) * s * x.at(r, c) * rs;
      n.dw[c] += dy.at(r, c) * x.at(r, c) * rs;
    }
    for (int64_t c = 0; c < C; ++c) {
      const double s = w ? offset + w->at(0, c) : 1.0;
      n.dx[r * C + c] = rs * (dy.at(r, c) * s - x.at(r, c) * rs * dot / C);
    }
  }
  return n;
}

double max_rel(const std::vector<double>& ref, const HostMat& got, double atol) {
  double worst = 0;
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.cols; ++c) {
      const double g = got.at(r, c), e = ref[r * got.cols + c];
      if (std::isnan(g)) return INFINITY;
      worst = std::max(worst, std::fabs(g - e) / (atol + std::fabs(e)));
    }
  return worst;
}

using Case = std::tuple<DType, DType, int, int64_t, int64_t>;  // x dtype, w dtype, mode, rows, cols

class RmsNormReference : public ::testing::TestWithParam<Case> {};

TEST_P(RmsNormReference, MatchesNaiveFp64) {
  const auto [xt, wt, mode, rows, cols] = GetParam();
  std::mt19937 rng(1234 + rows * 7 + cols);
  const float offset = mode == TIGON_RMS_NORM_GEMMA ? 1.f : 0.f;
  // Output dtype as Hugging Face produces it: promote(x, w) in llama mode, x's dtype otherwise.
  const DType yt = (mode == TIGON_RMS_NORM_LLAMA && wt == DType::kFloat32) ? DType::kFloat32 : xt;
  HostMat x(xt, rows, cols, cols + 3), w(wt, 1, cols), y(yt, rows, cols), dy(yt, rows, cols), dx(xt, rows, cols),
      dw(wt, 1, cols), rstd(DType::kFloat32, 1, rows);
  x.fill_random(rng, 2.0, 0.5);
  w.fill_random(rng, 0.5, mode == TIGON_RMS_NORM_GEMMA ? 0.0 : 1.0);
  dy.fill_random(rng);
  y.poison();
  dx.poison();
  dw.poison();
  const tigon::RMSNormParams p{1e-6f, offset, tigon_rms_norm_casting_t(mode)};

  auto xv = x.view(), yv = y.view(), dyv = dy.view(), dxv = dx.view();
  tigon::TensorView wv(w.data(), {cols}, to_dl(wt)), dwv(dw.data(), {cols}, to_dl(wt)),
      rv(rstd.data(), {rows}, tigon::dtype::float32);
  tigon::rms_norm_fwd(xv, &wv, yv, &rv, p);
  tigon::rms_norm_bwd(dyv, xv, &wv, rv, dxv, &dwv, p, nullptr, 0);

  const Naive n = naive(x, &w, dy, 1e-6, offset);
  // Output: the final rounding plus, in llama and none modes, up to two intermediate roundings in x's dtype.
  const double out_tol = (mode == TIGON_RMS_NORM_GEMMA ? 1 : 3) * rtol_of(yt) / 2 + rtol_of(xt);
  EXPECT_LE(max_rel(n.y, y, 1e-3), out_tol);
  EXPECT_LE(max_rel(n.rstd, rstd, 0), 1e-6);
  // dx can cancel (g - xhat * mean): compare with an absolute floor of one unit of its typical size.
  EXPECT_LE(max_rel(n.dx, dx, 1.0), 2 * rtol_of(xt));
  EXPECT_LE(max_rel(n.dw, dw, 1.0), 2 * rtol_of(wt));
}

INSTANTIATE_TEST_SUITE_P(Modes, RmsNormReference,
                         ::testing::Values(Case{DType::kFloat32, DType::kFloat32, TIGON_RMS_NORM_LLAMA, 5, 123},
                                           Case{DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_LLAMA, 7, 64},
                                           Case{DType::kBFloat16, DType::kFloat32, TIGON_RMS_NORM_LLAMA, 3, 100},
                                           Case{DType::kFloat16, DType::kFloat16, TIGON_RMS_NORM_GEMMA, 4, 257},
                                           Case{DType::kBFloat16, DType::kFloat32, TIGON_RMS_NORM_GEMMA, 2, 33},
                                           Case{DType::kFloat16, DType::kFloat16, TIGON_RMS_NORM_NONE, 6, 96},
                                           Case{DType::kFloat32, DType::kFloat32, TIGON_RMS_NORM_NONE, 1, 1},
                                           Case{DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_NONE, 3, 1000}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_w" + short_name(std::get<1>(c)) + "_" +
                                  mode_name(std::get<2>(c)) + "_" + std::to_string(std::get<3>(c)) + "x" +
                                  std::to_string(std::get<4>(c));
                         });

TEST(RmsNormReference, LlamaRoundsTheNormalizedValueBeforeTheWeight) {
  // bf16 x with an fp32 weight: y = w * bf16(x * rstd), so y / w must be exactly a bf16 value.
  HostMat x(DType::kBFloat16, 1, 16), y(DType::kFloat32, 1, 16);
  HostMat w(DType::kFloat32, 1, 16);
  std::mt19937 rng(7);
  x.fill_random(rng);
  for (int c = 0; c < 16; ++c) w.set(0, c, 3.0);
  tigon::TensorView wv(w.data(), {16}, tigon::dtype::float32);
  auto xv = x.view(), yv = y.view();
  tigon::rms_norm_fwd(xv, &wv, yv, nullptr, {1e-6f, 0.f, TIGON_RMS_NORM_LLAMA});
  for (int c = 0; c < 16; ++c) {
    const double q = y.at(0, c) / 3.0;
    EXPECT_EQ(q, tigon::round_to(DType::kBFloat16, q)) << "column " << c;
  }
}

TEST(RmsNormReference, InPlaceBackwardAndNoWeight) {
  std::mt19937 rng(3);
  HostMat x(DType::kFloat32, 4, 50), y(DType::kFloat32, 4, 50), dy(DType::kFloat32, 4, 50), rstd(DType::kFloat32, 1, 4),
      dx(DType::kFloat32, 4, 50);
  x.fill_random(rng);
  dy.fill_random(rng);
  HostMat dy_copy = dy;
  auto xv = x.view(), yv = y.view(), dyv = dy.view(), dxv = dx.view(), dy2 = dy_copy.view();
  tigon::TensorView rv(rstd.data(), {4}, tigon::dtype::float32);
  tigon::rms_norm_fwd(xv, nullptr, yv, &rv, {});
  tigon::rms_norm_bwd(dyv, xv, nullptr, rv, dxv, nullptr, {}, nullptr, 0);  // out of place
  tigon::rms_norm_bwd(dy2, xv, nullptr, rv, dy2, nullptr, {}, nullptr, 0);  // dx written over dy
  EXPECT_EQ(worst_ratio(dy_copy, dx, 0, 0), 0.0);
  const Naive n = naive(x, nullptr, dy, 1e-6, 0);
  EXPECT_LE(max_rel(n.y, y, 1e-3), 1e-5);
}

TEST(RmsNormReference, EmptyRowsGiveZeroWeightGradient) {
  HostMat x(DType::kFloat32, 0, 8), dw(DType::kFloat32, 1, 8), w(DType::kFloat32, 1, 8);
  dw.poison();
  float rstd_dummy = 0;
  auto xv = x.view();
  tigon::TensorView wv(w.data(), {8}, tigon::dtype::float32), dwv(dw.data(), {8}, tigon::dtype::float32),
      rv(&rstd_dummy, {0}, tigon::dtype::float32);
  tigon::rms_norm_bwd(xv, xv, &wv, rv, xv, &dwv, {}, nullptr, 0);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(dw.at(0, c), 0.0);
}

}  // namespace
