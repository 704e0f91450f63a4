// LayerNorm: the CPU reference (through the C API) against a naive fp64 loop, and the C API's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "test_util.h"
#include "tigon/layer_norm.h"

using namespace tigon_test;

namespace {

struct Naive {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

// Exact LayerNorm and its gradients in fp64 with no intermediate rounding.
Naive naive(const HostMat& x, const HostMat* w, const HostMat* b, const HostMat& dy, double eps) {
  Naive n;
  const int64_t R = x.rows, C = x.cols;
  n.y.resize(R * C);
  n.dx.resize(R * C);
  n.dw.assign(C, 0.0);
  n.db.assign(C, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    double s = 0, sq = 0;
    for (int64_t c = 0; c < C; ++c) s += x.at(r, c);
    const double mu = s / C;
    for (int64_t c = 0; c < C; ++c) sq += (x.at(r, c) - mu) * (x.at(r, c) - mu);
    const double rs = 1.0 / std::sqrt(sq / C + eps);
    n.mean.push_back(mu);
    n.rstd.push_back(rs);
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double wc = w ? w->at(0, c) : 1.0, xh = (x.at(r, c) - mu) * rs;
      n.y[r * C + c] = xh * wc + (b ? b->at(0, c) : 0.0);
      sum_g += dy.at(r, c) * wc;
      sum_gx += dy.at(r, c) * wc * xh;
      n.dw[c] += dy.at(r, c) * xh;
      n.db[c] += dy.at(r, c);
    }
    for (int64_t c = 0; c < C; ++c) {
      const double wc = w ? w->at(0, c) : 1.0, xh = (x.at(r, c) - mu) * rs;
      n.dx[r * C + c] = rs * (dy.at(r, c) * wc - sum_g / C - xh * sum_gx / C);
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

using Case = std::tuple<DType, DType, bool, bool, int64_t, int64_t>;  // x dtype, param dtype, weight, bias, rows, cols

class LayerNormReference : public ::testing::TestWithParam<Case> {};

TEST_P(LayerNormReference, MatchesNaiveFp64) {
  const auto [xt, pt, has_w, has_b, rows, cols] = GetParam();
  std::mt19937 rng(4321 + rows * 7 + cols);
  HostMat x(xt, rows, cols, cols + 3), w(pt, 1, cols), b(pt, 1, cols), y(xt, rows, cols), dy(xt, rows, cols),
      dx(xt, rows, cols), dw(DType::kFloat32, 1, cols), db(pt, 1, cols), mean(DType::kFloat32, 1, rows),
      rstd(DType::kFloat32, 1, rows);
  x.fill_random(rng, 2.0, 3.0);  // a mean well away from 0: the variance must not cancel
  w.fill_random(rng, 0.5, 1.0);
  b.fill_random(rng, 0.5);
  dy.fill_random(rng);
  for (HostMat* m : {&y, &dx, &dw, &db, &mean, &rstd}) m->poison();

  auto xv = x.view(), yv = y.view(), dyv = dy.view(), dxv = dx.view();
  tigon::TensorView wv(w.data(), {cols}, to_dl(pt)), bv(b.data(), {cols}, to_dl(pt)),
      dwv(dw.data(), {cols}, tigon::dtype::float32), dbv(db.data(), {cols}, to_dl(pt)),
      mv(mean.data(), {rows}, tigon::dtype::float32), rv(rstd.data(), {rows}, tigon::dtype::float32);
  const tigon_tensor* wp = has_w ? wv.get() : nullptr;
  const tigon_tensor* bp = has_b ? bv.get() : nullptr;
  ASSERT_EQ(tigon_layer_norm_fwd(xv, wp, bp, yv, mv, rv, {1e-5f}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_layer_norm_bwd(dyv, xv, wp, mv, rv, dxv, has_w ? dwv.get() : nullptr, dbv, nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();

  const Naive n = naive(x, has_w ? &w : nullptr, has_b ? &b : nullptr, dy, 1e-5);
  EXPECT_LE(max_rel(n.y, y, 1.0), rtol_of(xt));
  EXPECT_LE(max_rel(n.mean, mean, 1e-3), 1e-6);
  EXPECT_LE(max_rel(n.rstd, rstd, 0), 1e-6);
  // dx can cancel (g - mean(g) - xhat * mean(g xhat)): compare with an absolute floor of its typical size.
  EXPECT_LE(max_rel(n.dx, dx, 1.0), 2 * rtol_of(xt));
  if (has_w) EXPECT_LE(max_rel(n.dw, dw, 1.0), 2 * rtol_of(DType::kFloat32));
  EXPECT_LE(max_rel(n.db, db, 1.0), 2 * rtol_of(pt));
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormReference,
                         ::testing::Values(Case{DType::kFloat32, DType::kFloat32, true, true, 5, 123},
                                           Case{DType::kBFloat16, DType::kBFloat16, true, true, 7, 64},
                                           Case{DType::kBFloat16, DType::kFloat32, true, false, 3, 100},
                                           Case{DType::kFloat16, DType::kFloat16, false, true, 4, 257},
                                           Case{DType::kFloat16, DType::kFloat32, false, false, 2, 33},
                                           Case{DType::kFloat32, DType::kFloat32, true, true, 1, 1},
                                           Case{DType::kBFloat16, DType::kBFloat16, true, true, 3, 1000}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_p" + short_name(std::get<1>(c)) +
                                  (std::get<2>(c) ? "_w" : "") + (std::get<3>(c) ? "_b" : "") + "_" +
                                  std::to_string(std::get<4>(c)) + "x" + std::to_string(std::get<5>(c));
                         });

TEST(LayerNormReference, InPlaceBackwardEqualsOutOfPlace) {
  std::mt19937 rng(3);
  HostMat x(DType::kFloat32, 4, 50), y(DType::kFloat32, 4, 50), dy(DType::kFloat32, 4, 50), mean(DType::kFloat32, 1, 4),
      rstd(DType::kFloat32, 1, 4), dx(DType::kFloat32, 4, 50);
  x.fill_random(rng);
  dy.fill_random(rng);
  HostMat dy_copy = dy;
  auto xv = x.view(), yv = y.view(), dyv = dy.view(), dxv = dx.view(), dy2 = dy_copy.view();
  tigon::TensorView mv(mean.data(), {4}, tigon::dtype::float32), rv(rstd.data(), {4}, tigon::dtype::float32);
  ASSERT_EQ(tigon_layer_norm_fwd(xv, nullptr, nullptr, yv, mv, rv, {1e-5f}, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_layer_norm_bwd(dyv, xv, nullptr, mv, rv, dxv, nullptr, nullptr, nullptr, 0, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_layer_norm_bwd(dy2, xv, nullptr, mv, rv, dy2, nullptr, nullptr, nullptr, 0, nullptr), TIGON_SUCCESS);
  EXPECT_EQ(worst_ratio(dy_copy, dx, 0, 0), 0.0);
}

TEST(LayerNormReference, EmptyRowsGiveZeroParameterGradients) {
  HostMat x(DType::kFloat32, 0, 8), dw(DType::kFloat32, 1, 8), db(DType::kFloat32, 1, 8), w(DType::kFloat32, 1, 8);
  dw.poison();
  db.poison();
  float stat_dummy = 0;
  auto xv = x.view();
  tigon::TensorView wv(w.data(), {8}, tigon::dtype::float32), dwv(dw.data(), {8}, tigon::dtype::float32),
      dbv(db.data(), {8}, tigon::dtype::float32), sv(&stat_dummy, {0}, tigon::dtype::float32);
  ASSERT_EQ(tigon_layer_norm_bwd(xv, xv, wv, sv, sv, xv, dwv, dbv, nullptr, 0, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  for (int c = 0; c < 8; ++c) EXPECT_EQ(dw.at(0, c) + db.at(0, c), 0.0);
}

// ---- C API validation: INVALID_ARGUMENT and a message naming the argument ----------------------------------------

void expect_bad(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT) << tigon_last_error();
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("'") + arg + "'"), std::string::npos)
      << "message does not name '" << arg << "': " << tigon_last_error();
}

struct Fixture {
  HostMat x{DType::kFloat32, 4, 16}, y{DType::kFloat32, 4, 16}, w{DType::kFloat32, 1, 16}, b{DType::kFloat32, 1, 16},
      mean{DType::kFloat32, 1, 4}, rstd{DType::kFloat32, 1, 4}, dx{DType::kFloat32, 4, 16}, hw{DType::kBFloat16, 1, 16};
  tigon::TensorView xv = x.view(), yv = y.view(), dxv = dx.view();
  tigon::TensorView wv{w.data(), {16}, tigon::dtype::float32}, bv{b.data(), {16}, tigon::dtype::float32};
  tigon::TensorView mv{mean.data(), {4}, tigon::dtype::float32}, rv{rstd.data(), {4}, tigon::dtype::float32};
  tigon_layer_norm_params p{1e-5f};
};

TEST(LayerNormApi, ForwardValidation) {
  Fixture f;
  ASSERT_EQ(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, f.mv, f.rv, f.p, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  expect_bad(tigon_layer_norm_fwd(nullptr, f.wv, f.bv, f.yv, f.mv, f.rv, f.p, nullptr), "x");
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, nullptr, f.mv, f.rv, f.p, nullptr), "y");
  tigon::TensorView int_x(f.x.data(), {4, 16}, tigon::dtype::int64);
  expect_bad(tigon_layer_norm_fwd(int_x, f.wv, f.bv, f.yv, f.mv, f.rv, f.p, nullptr), "x");
  tigon::TensorView col_major(f.x.data(), {4, 16}, tigon::dtype::float32, tigon::cpu(), {1, 4});
  expect_bad(tigon_layer_norm_fwd(col_major, f.wv, f.bv, f.yv, f.mv, f.rv, f.p, nullptr), "x");
  tigon::TensorView empty_cols(f.x.data(), {4, 0}, tigon::dtype::float32);
  expect_bad(tigon_layer_norm_fwd(empty_cols, nullptr, nullptr, empty_cols, nullptr, nullptr, f.p, nullptr), "x");
  tigon::TensorView short_w(f.w.data(), {15}, tigon::dtype::float32);
  expect_bad(tigon_layer_norm_fwd(f.xv, short_w, f.bv, f.yv, f.mv, f.rv, f.p, nullptr), "weight");
  tigon::TensorView int_b(f.b.data(), {16}, tigon::dtype::int32);
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, int_b, f.yv, f.mv, f.rv, f.p, nullptr), "bias");
  tigon::TensorView gpu_b(f.b.data(), {16}, tigon::dtype::float32, tigon::cuda(0));
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, gpu_b, f.yv, f.mv, f.rv, f.p, nullptr), "bias");
  tigon::TensorView y_rows(f.y.data(), {3, 16}, tigon::dtype::float32);
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, y_rows, f.mv, f.rv, f.p, nullptr), "y");
  tigon::TensorView bf16_y(f.y.data(), {4, 16}, tigon::dtype::bfloat16);
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, bf16_y, f.mv, f.rv, f.p, nullptr), "y");
  tigon::TensorView short_mean(f.mean.data(), {3}, tigon::dtype::float32);
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, short_mean, f.rv, f.p, nullptr), "mean");
  tigon::TensorView bf16_rstd(f.rstd.data(), {4}, tigon::dtype::bfloat16);
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, f.mv, bf16_rstd, f.p, nullptr), "rstd");
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, f.mv, nullptr, f.p, nullptr), "rstd");
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, nullptr, f.rv, f.p, nullptr), "mean");
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, f.mv, f.rv, {-1.f}, nullptr), "eps");
  expect_bad(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, f.mv, f.rv, {NAN}, nullptr), "eps");
  // bf16 x: weight and bias in bf16 or fp32, but the same dtype when both are given.
  HostMat hx(DType::kBFloat16, 4, 16), hy(DType::kBFloat16, 4, 16);
  auto hxv = hx.view(), hyv = hy.view();
  tigon::TensorView hwv(f.hw.data(), {16}, tigon::dtype::bfloat16);
  EXPECT_EQ(tigon_layer_norm_fwd(hxv, hwv, nullptr, hyv, nullptr, nullptr, f.p, nullptr), TIGON_SUCCESS);
  EXPECT_EQ(tigon_layer_norm_fwd(hxv, nullptr, f.bv, hyv, nullptr, nullptr, f.p, nullptr), TIGON_SUCCESS);
  expect_bad(tigon_layer_norm_fwd(hxv, hwv, f.bv, hyv, nullptr, nullptr, f.p, nullptr), "bias");
  tigon::TensorView half_w(f.hw.data(), {16}, tigon::dtype::float16);
  expect_bad(tigon_layer_norm_fwd(hxv, half_w, nullptr, hyv, nullptr, nullptr, f.p, nullptr), "weight");
}

TEST(LayerNormApi, BackwardValidation) {
  Fixture f;
  HostMat dw(DType::kFloat32, 1, 16), db(DType::kFloat32, 1, 16);
  tigon::TensorView dwv(dw.data(), {16}, tigon::dtype::float32), dbv(db.data(), {16}, tigon::dtype::float32);
  ASSERT_EQ(tigon_layer_norm_fwd(f.xv, f.wv, f.bv, f.yv, f.mv, f.rv, f.p, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_layer_norm_bwd(f.yv, f.xv, f.wv, f.mv, f.rv, f.dxv, dwv, dbv, nullptr, 0, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  expect_bad(tigon_layer_norm_bwd(nullptr, f.xv, f.wv, f.mv, f.rv, f.dxv, dwv, dbv, nullptr, 0, nullptr), "dy");
  expect_bad(tigon_layer_norm_bwd(f.yv, nullptr, f.wv, f.mv, f.rv, f.dxv, dwv, dbv, nullptr, 0, nullptr), "x");
  expect_bad(tigon_layer_norm_bwd(f.yv, f.xv, f.wv, nullptr, f.rv, f.dxv, dwv, dbv, nullptr, 0, nullptr), "mean");
  expect_bad(tigon_layer_norm_bwd(f.yv, f.xv, f.wv, f.mv, nullptr, f.dxv, dwv, dbv, nullptr, 0, nullptr), "rstd");
  expect_bad(tigon_layer_norm_bwd(f.yv, f.xv, f.wv, f.mv, f.rv, nullptr, dwv, dbv, nullptr, 0, nullptr), "dx");
  expect_bad(tigon_layer_norm_bwd(f.yv, f.xv, nullptr, f.mv, f.rv, f.dxv, dwv, dbv, nullptr, 0, nullptr), "dw");
  tigon::TensorView short_db(db.data(), {15}, tigon::dtype::float32);
  expect_bad(tigon_layer_norm_bwd(f.yv, f.xv, f.wv, f.mv, f.rv, f.dxv, dwv, short_db, nullptr, 0, nullptr), "db");
  tigon::TensorView int_dw(dw.data(), {16}, tigon::dtype::int32);
  expect_bad(tigon_layer_norm_bwd(f.yv, f.xv, f.wv, f.mv, f.rv, f.dxv, int_dw, dbv, nullptr, 0, nullptr), "dw");
  tigon::TensorView dy_rows(f.y.data(), {2, 16}, tigon::dtype::float32);
  expect_bad(tigon_layer_norm_bwd(dy_rows, f.xv, f.wv, f.mv, f.rv, f.dxv, dwv, dbv, nullptr, 0, nullptr), "dy");
  // dx over dy must keep dy's strides.
  HostMat wide(DType::kFloat32, 4, 16, 32);
  auto wide_v = wide.view();
  tigon::TensorView same_data(wide.data(), {4, 16}, tigon::dtype::float32, tigon::cpu(), {16, 1});
  expect_bad(tigon_layer_norm_bwd(wide_v, f.xv, f.wv, f.mv, f.rv, same_data, dwv, dbv, nullptr, 0, nullptr), "dx");
  size_t bytes = 1;
  EXPECT_EQ(tigon_layer_norm_bwd_workspace_size(f.xv, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // the CPU path needs no scratch
  expect_bad(tigon_layer_norm_bwd_workspace_size(f.xv, nullptr), "bytes");
}

}  // namespace
