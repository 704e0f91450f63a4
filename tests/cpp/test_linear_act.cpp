// The linear + activation CPU reference (through the C API) against naive fp64 formulas, and C API validation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "linear_act_test_util.h"
#include "test_util.h"
#include "tigon/linear_act.h"

using namespace tigon_test;

namespace {

// Largest |got - want| / (atol + rtol |want|) with atol = rtol * max(1, max |want|).
template <class F>
double worst(const HostMat& got, F want, double rtol) {
  double scale = 1, w = 0;
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.cols; ++c) scale = std::max(scale, std::fabs(want(r, c)));
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.cols; ++c) {
      const double g = got.at(r, c), e = want(r, c);
      if (std::isnan(g)) return INFINITY;
      w = std::max(w, std::fabs(g - e) / (rtol * scale + rtol * std::fabs(e)));
    }
  return w;
}

class LinearActReference : public ::testing::TestWithParam<LinearActCase> {};

TEST_P(LinearActReference, MatchesNaiveFp64) {
  LinearActProblem p(GetParam());
  const auto& c = p.c;
  run_linear_act(p, [](HostMat& m) { return m.view(); }, nullptr, 0, nullptr, 0);
  if (HasFatalFailure()) return;

  // naive: z = x Wᵀ + b, out = act(z) + res; dz = dy act'(z), dx = dz W, dw = dzᵀ x, db = Σ dz
  std::vector<double> z(size_t(c.M * c.N)), dz(size_t(c.M * c.N));
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t n = 0; n < c.N; ++n) {
      double s = c.bias ? p.b.at(0, n) : 0.0;
      for (int64_t k = 0; k < c.K; ++k) s += p.x.at(i, k) * p.w.at(n, k);
      z[size_t(i * c.N + n)] = s;
      dz[size_t(i * c.N + n)] = p.dy.at(i, n) * naive_grad(c.act, tigon::round_to(c.dt, s));
    }
  const auto Z = [&](int64_t i, int64_t n) { return z[size_t(i * c.N + n)]; };
  const auto dZ = [&](int64_t i, int64_t n) { return dz[size_t(i * c.N + n)]; };
  // a rounding of z (and of dZ) before the next step, the output's own rounding, and fp32 rounding of the GEMMs
  const double tol = 2 * rtol_of(c.dt) + 1e-6;
  EXPECT_LE(
      worst(
          p.out, [&](int64_t i, int64_t n) { return naive_act(c.act, Z(i, n)) + (c.residual ? p.res.at(i, n) : 0.0); },
          tol),
      1.0)
      << "out";
  if (p.wants_z()) EXPECT_LE(worst(p.z, Z, tol), 1.0) << "z";
  EXPECT_LE(worst(
                p.dx,
                [&](int64_t i, int64_t k) {
                  double s = 0;
                  for (int64_t n = 0; n < c.N; ++n) s += dZ(i, n) * p.w.at(n, k);
                  return s;
                },
                tol),
            1.0)
      << "dx";
  EXPECT_LE(worst(
                p.dw,
                [&](int64_t n, int64_t k) {
                  double s = 0;
                  for (int64_t i = 0; i < c.M; ++i) s += dZ(i, n) * p.x.at(i, k);
                  return s;
                },
                tol),
            1.0)
      << "dw";
  if (c.bias)
    EXPECT_LE(worst(
                  p.db,
                  [&](int64_t, int64_t n) {
                    double s = 0;
                    for (int64_t i = 0; i < c.M; ++i) s += dZ(i, n);
                    return s;
                  },
                  tol),
              1.0)
        << "db";
}

std::vector<LinearActCase> reference_cases() {
  std::vector<LinearActCase> cases;
  for (int act = TIGON_ACT_NONE; act <= TIGON_ACT_SILU; ++act) {
    cases.push_back({DType::kFloat32, act, 5, 19, 13, true, false, 0});
    cases.push_back({DType::kBFloat16, act, 3, 16, 24, true, true, 3});
    cases.push_back({DType::kFloat16, act, 1, 7, 9, false, true, 0});
    cases.push_back({DType::kBFloat16, act, 6, 33, 5, false, false, 1});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, LinearActReference, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<LinearActCase>& info) { return case_name(info.param); });

// ReLU's backward from its output (no z saved) equals the backward from z.
TEST(LinearActReference, ReluBackwardFromTheOutput) {
  LinearActProblem p({DType::kBFloat16, TIGON_ACT_RELU, 7, 24, 40, true, false, 0});
  run_linear_act(p, [](HostMat& m) { return m.view(); }, nullptr, 0, nullptr, 0);
  HostMat dx2 = p.dx, dw2 = p.dw, db2 = p.db, dz2 = p.dz;
  ASSERT_EQ(tigon_linear_act_bwd(p.dy.view(), p.x.view(), p.w.view(), nullptr, p.out.view(), dz2.view(), dx2.view(),
                                 dw2.view(), db2.view(), p.params(), nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  EXPECT_EQ(worst_ratio(dx2, p.dx, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(dw2, p.dw, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(db2, p.db, 0, 0), 0.0);
}

// dz written over dy, or over z: the same gradients as a separate buffer.
TEST(LinearActReference, DzOverDyOrZ) {
  for (const bool over_dy : {true, false}) {
    LinearActProblem p({DType::kFloat32, TIGON_ACT_SILU, 4, 12, 10, true, false, 0});
    run_linear_act(p, [](HostMat& m) { return m.view(); }, nullptr, 0, nullptr, 0);
    HostMat dx2 = p.dx, dw2 = p.dw, dy2 = p.dy, z2 = p.z;
    HostMat& target = over_dy ? dy2 : z2;
    ASSERT_EQ(tigon_linear_act_bwd(dy2.view(), p.x.view(), p.w.view(), z2.view(), nullptr, target.view(), dx2.view(),
                                   dw2.view(), nullptr, p.params(), nullptr, 0, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
    EXPECT_EQ(worst_ratio(dx2, p.dx, 0, 0), 0.0) << over_dy;
    EXPECT_EQ(worst_ratio(dw2, p.dw, 0, 0), 0.0) << over_dy;
    EXPECT_EQ(worst_ratio(target, p.dz, 0, 0), 0.0) << over_dy;
  }
}

// ---- C API validation: every bad argument is an INVALID_ARGUMENT naming it ---------------------------------------

struct LinearActApi : ::testing::Test {
  HostMat x{DType::kFloat32, 4, 8}, w{DType::kFloat32, 6, 8}, b{DType::kFloat32, 1, 6}, out{DType::kFloat32, 4, 6},
      z{DType::kFloat32, 4, 6}, dy{DType::kFloat32, 4, 6}, dz{DType::kFloat32, 4, 6}, dx{DType::kFloat32, 4, 8},
      dw{DType::kFloat32, 6, 8};
  void expect_error(tigon_status_t st, const char* arg) {
    EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
        << tigon_last_error();
  }
  tigon_status_t fwd(const tigon_tensor* xv, const tigon_tensor* wv, const tigon_tensor* bv, const tigon_tensor* rv,
                     const tigon_tensor* ov, const tigon_tensor* zv, int act = TIGON_ACT_GELU_TANH) {
    return tigon_linear_act_fwd(xv, wv, bv, rv, ov, zv, {act}, nullptr, 0, nullptr);
  }
};

TEST_F(LinearActApi, ForwardRejectsBadArguments) {
  auto xv = x.view(), wv = w.view(), bv = b.view(), ov = out.view(), zv = z.view();
  expect_error(fwd(xv, wv, bv, nullptr, ov, zv, 5), "activation");
  expect_error(fwd(xv, wv, bv, nullptr, ov, zv, -1), "activation");
  expect_error(fwd(nullptr, wv, bv, nullptr, ov, zv), "x");
  expect_error(fwd(xv, nullptr, bv, nullptr, ov, zv), "weight");
  expect_error(fwd(xv, wv, bv, nullptr, nullptr, zv), "out");
  HostMat i64(DType::kInt64, 4, 8), bf_w(DType::kBFloat16, 6, 8), w7(DType::kFloat32, 6, 7), b5(DType::kFloat32, 1, 5),
      bf_b(DType::kBFloat16, 1, 6), o5(DType::kFloat32, 4, 5), r3(DType::kFloat32, 3, 6), z_bf(DType::kBFloat16, 4, 6),
      x0(DType::kFloat32, 4, 0), w0(DType::kFloat32, 6, 0);
  expect_error(fwd(i64.view(), wv, bv, nullptr, ov, zv), "x");
  expect_error(fwd(x0.view(), w0.view(), bv, nullptr, ov, zv), "x");
  expect_error(fwd(xv, bf_w.view(), bv, nullptr, ov, zv), "weight");
  expect_error(fwd(xv, w7.view(), bv, nullptr, ov, zv), "weight");
  tigon::TensorView w3d(w.data(), {2, 3, 8}, tigon::dtype::float32);
  expect_error(fwd(xv, w3d, bv, nullptr, ov, zv), "weight");
  expect_error(fwd(xv, wv, b5.view(), nullptr, ov, zv), "bias");
  expect_error(fwd(xv, wv, bf_b.view(), nullptr, ov, zv), "bias");
  expect_error(fwd(xv, wv, bv, nullptr, o5.view(), zv), "out");
  expect_error(fwd(xv, wv, bv, r3.view(), ov, zv), "residual");
  expect_error(fwd(xv, wv, bv, nullptr, ov, z_bf.view()), "z");
  expect_error(fwd(xv, wv, bv, nullptr, ov, ov), "out");
  expect_error(fwd(xv, wv, bv, ov, ov, zv), "out");
  tigon::TensorView transposed(x.data(), {8, 4}, tigon::dtype::float32, tigon::cpu(), {1, 8});
  expect_error(fwd(transposed, wv, bv, nullptr, ov, zv), "x");
  tigon::TensorView on_gpu(out.data(), {4, 6}, tigon::dtype::float32, tigon::cuda(0));
  expect_error(fwd(xv, wv, bv, nullptr, on_gpu, zv), "out");
}

TEST_F(LinearActApi, BackwardRejectsBadArguments) {
  auto xv = x.view(), wv = w.view(), zv = z.view(), dyv = dy.view(), dzv = dz.view(), dxv = dx.view(), dwv = dw.view(),
       ov = out.view();
  const auto bwd = [&](const tigon_tensor* dyt, const tigon_tensor* zt, const tigon_tensor* yt, const tigon_tensor* dzt,
                       const tigon_tensor* dxt, const tigon_tensor* dwt, const tigon_tensor* dbt, int act) {
    return tigon_linear_act_bwd(dyt, xv, wv, zt, yt, dzt, dxt, dwt, dbt, {act}, nullptr, 0, nullptr);
  };
  EXPECT_EQ(bwd(dyv, zv, nullptr, dzv, dxv, dwv, nullptr, TIGON_ACT_SILU), TIGON_SUCCESS) << tigon_last_error();
  expect_error(bwd(dyv, zv, nullptr, dzv, dxv, dwv, nullptr, 9), "activation");
  expect_error(bwd(nullptr, zv, nullptr, dzv, dxv, dwv, nullptr, TIGON_ACT_SILU), "dy");
  expect_error(bwd(dyv, nullptr, nullptr, dzv, dxv, dwv, nullptr, TIGON_ACT_SILU), "z");
  expect_error(bwd(dyv, nullptr, ov, dzv, dxv, dwv, nullptr, TIGON_ACT_GELU_ERF), "z");  // only relu reads y
  expect_error(bwd(dyv, zv, nullptr, nullptr, dxv, dwv, nullptr, TIGON_ACT_SILU), "dz");
  expect_error(bwd(dyv, zv, nullptr, nullptr, dxv, dwv, nullptr, TIGON_ACT_NONE), "z");
  expect_error(bwd(dyv, nullptr, nullptr, dzv, dxv, dwv, nullptr, TIGON_ACT_NONE), "dz");
  HostMat dy5(DType::kFloat32, 4, 5), dx7(DType::kFloat32, 4, 7), dw_bf(DType::kBFloat16, 6, 8),
      dw_small(DType::kFloat32, 6, 7), db5(DType::kFloat32, 1, 5), db_i32(DType::kInt32, 1, 6);
  expect_error(bwd(dy5.view(), zv, nullptr, dzv, dxv, dwv, nullptr, TIGON_ACT_SILU), "dy");
  expect_error(bwd(dyv, zv, nullptr, dzv, dx7.view(), dwv, nullptr, TIGON_ACT_SILU), "dx");
  expect_error(bwd(dyv, zv, nullptr, dzv, dxv, dw_bf.view(), nullptr, TIGON_ACT_SILU), "dw");
  expect_error(bwd(dyv, zv, nullptr, dzv, dxv, dw_small.view(), nullptr, TIGON_ACT_SILU), "dw");
  expect_error(bwd(dyv, zv, nullptr, dzv, dxv, dwv, db5.view(), TIGON_ACT_SILU), "db");
  expect_error(bwd(dyv, zv, nullptr, dzv, dxv, dwv, db_i32.view(), TIGON_ACT_SILU), "db");
  expect_error(
      tigon_linear_act_bwd(dyv, xv, wv, zv, nullptr, dyv, dyv, nullptr, nullptr, {TIGON_ACT_SILU}, nullptr, 0, nullptr),
      "dx");
}

TEST_F(LinearActApi, WorkspaceIsZeroOnTheCpu) {
  size_t bytes = 1;
  ASSERT_EQ(tigon_linear_act_fwd_workspace_size(x.view(), w.view(), {TIGON_ACT_RELU}, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);
  bytes = 1;
  ASSERT_EQ(tigon_linear_act_bwd_workspace_size(x.view(), w.view(), {TIGON_ACT_RELU}, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);
  expect_error(tigon_linear_act_fwd_workspace_size(x.view(), w.view(), {TIGON_ACT_RELU}, nullptr), "bytes");
}

TEST_F(LinearActApi, NoRowsGiveZeroWeightGradients) {
  HostMat x0(DType::kFloat32, 0, 8), dy0(DType::kFloat32, 0, 6), o0(DType::kFloat32, 0, 6), db(DType::kFloat32, 1, 6);
  dw.poison();
  db.poison();
  ASSERT_EQ(tigon_linear_act_fwd(x0.view(), w.view(), nullptr, nullptr, o0.view(), nullptr, {TIGON_ACT_NONE}, nullptr,
                                 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(tigon_linear_act_bwd(dy0.view(), x0.view(), w.view(), nullptr, nullptr, nullptr, nullptr, dw.view(),
                                 db.view(), {TIGON_ACT_NONE}, nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  EXPECT_EQ(max_abs(dw), 0.0);
  EXPECT_EQ(max_abs(db), 0.0);
}

}  // namespace
