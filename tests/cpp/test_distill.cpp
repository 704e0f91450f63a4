// The distillation CPU reference (through the C API) against naive fp64 formulas (the divergences written out, the
// gradient by central differences of the naive loss), and the C API's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tigon/distill.h"

using namespace tigon_test;

namespace {

using Row = std::vector<double>;

Row log_softmax(Row v) {
  double mx = -INFINITY, s = 0;
  for (double e : v) mx = std::max(mx, e);
  for (double e : v) s += std::exp(e - mx);
  for (double& e : v) e -= mx + std::log(s);
  return v;
}

// sum_c a_c log(a_c / b_c) over a_c > 0.
double kl(const Row& a, const Row& b) {
  double s = 0;
  for (size_t c = 0; c < a.size(); ++c)
    if (a[c] > 0) s += a[c] * std::log(a[c] / b[c]);
  return s;
}

// The naive divergence of one row of student logits z (teacher row t given as `mode` says).
double naive(const Row& z, const Row& t, const tigon_distill_params& p) {
  const size_t V = z.size();
  Row zs(V), q(V), pt(V);
  for (size_t c = 0; c < V; ++c) zs[c] = z[c] / p.temperature;
  const Row x = log_softmax(zs);
  Row ts(V);
  for (size_t c = 0; c < V; ++c) ts[c] = t[c] / p.temperature;
  const Row y = log_softmax(ts);
  for (size_t c = 0; c < V; ++c) {
    q[c] = std::exp(x[c]);
    pt[c] = p.teacher == TIGON_DISTILL_TEACHER_LOGITS      ? std::exp(y[c])
            : p.teacher == TIGON_DISTILL_TEACHER_LOG_PROBS ? std::exp(t[c])
                                                           : t[c];
  }
  if (p.divergence == TIGON_DIVERGENCE_TVD) {
    double s = 0;
    for (size_t c = 0; c < V; ++c) s += 0.5 * std::fabs(q[c] - pt[c]);
    return s;
  }
  if (p.divergence == TIGON_DIVERGENCE_KL || p.beta == 0) return kl(pt, q);
  if (p.beta == 1) return kl(q, pt);
  Row m(V);
  for (size_t c = 0; c < V; ++c) m[c] = p.beta * pt[c] + (1 - p.beta) * q[c];
  return p.beta * kl(pt, m) + (1 - p.beta) * kl(q, m);
}

tigon_distill_params params(int div, int teacher, int reduction, float beta = 0.5f, float temp = 1.f) {
  return {div, teacher, reduction, beta, temp, -100};
}

struct Case {
  int div, teacher, reduction;
  float beta, temp;
};

// The reference's loss against the naive one, and its gradient against central differences of the naive loss.
void check(const Case& k) {
  std::mt19937 rng(7 + k.div * 10 + k.teacher);
  const int64_t N = 5, V = 23;
  HostMat x(DType::kFloat32, N, V, V + 3), t(DType::kFloat32, N, V), grad(DType::kFloat32, N, V);
  x.fill_random(rng, 1.5);
  t.fill_random(rng, 1.5);
  for (int64_t r = 0; r < N; ++r) {  // a teacher distribution as the mode wants it
    Row row(V);
    for (int64_t c = 0; c < V; ++c) row[c] = t.at(r, c);
    const Row lp = log_softmax(row);
    for (int64_t c = 0; c < V; ++c) {
      if (k.teacher == TIGON_DISTILL_TEACHER_LOG_PROBS) t.set(r, c, lp[c]);
      if (k.teacher == TIGON_DISTILL_TEACHER_PROBS) t.set(r, c, std::exp(lp[c]));
    }
  }
  grad.poison();
  std::vector<int64_t> labels = {1, -100, 3, 4, -100};
  const int64_t n_out = k.reduction == TIGON_DISTILL_REDUCTION_NONE ? N : 1;
  std::vector<float> loss(n_out, NAN);
  const tigon_distill_params p = params(k.div, k.teacher, k.reduction, k.beta, k.temp);
  auto xv = x.view(), tv = t.view(), gv = grad.view();
  tigon::TensorView lv(labels.data(), {N}, tigon::dtype::int64), ov(loss.data(), {n_out}, tigon::dtype::float32);
  ASSERT_EQ(tigon_distill_fwd(xv, tv, lv, ov, gv, p, nullptr, 0, nullptr), TIGON_SUCCESS) << tigon_last_error();

  const double C = 3, scale = k.reduction == TIGON_DISTILL_REDUCTION_BATCHMEAN ? 1 / C
                              : k.reduction == TIGON_DISTILL_REDUCTION_MEAN    ? 1 / (C * V)
                                                                               : 1.0;
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    Row z(V), tr(V);
    for (int64_t c = 0; c < V; ++c) z[c] = x.at(r, c), tr[c] = t.at(r, c);
    const bool skip = labels[r] == -100;
    const double l = skip ? 0.0 : naive(z, tr, p);
    total += l;
    if (k.reduction == TIGON_DISTILL_REDUCTION_NONE) EXPECT_NEAR(loss[r], l, 1e-6 + 1e-5 * std::fabs(l)) << r;
    for (int64_t c = 0; c < V; ++c) {
      double want = 0;
      if (!skip) {
        const double h = 1e-5;
        Row up = z, down = z;
        up[c] += h;
        down[c] -= h;
        want = (naive(up, tr, p) - naive(down, tr, p)) / (2 * h) * scale;
      }
      EXPECT_NEAR(grad.at(r, c), want, 1e-6 + 1e-4 * std::fabs(want)) << "row " << r << " col " << c;
    }
  }
  if (k.reduction != TIGON_DISTILL_REDUCTION_NONE)
    EXPECT_NEAR(loss[0], total * scale, 1e-6 + 1e-5 * std::fabs(total * scale));
}

TEST(DistillReference, MatchesNaiveFp64EveryDivergenceTeacherAndReduction) {
  for (int div : {TIGON_DIVERGENCE_KL, TIGON_DIVERGENCE_JSD, TIGON_DIVERGENCE_TVD})
    for (int teacher : {TIGON_DISTILL_TEACHER_LOGITS, TIGON_DISTILL_TEACHER_LOG_PROBS, TIGON_DISTILL_TEACHER_PROBS})
      for (int red : {TIGON_DISTILL_REDUCTION_NONE, TIGON_DISTILL_REDUCTION_MEAN, TIGON_DISTILL_REDUCTION_SUM,
                      TIGON_DISTILL_REDUCTION_BATCHMEAN}) {
        SCOPED_TRACE(::testing::Message() << "divergence " << div << " teacher " << teacher << " reduction " << red);
        check({div, teacher, red, 0.5f, 1.f});
      }
}

TEST(DistillReference, JsdBetaEndPointsAndTemperature) {
  for (float beta : {0.f, 0.1f, 0.9f, 1.f})
    for (float temp : {1.f, 2.5f}) {
      SCOPED_TRACE(::testing::Message() << "beta " << beta << " temperature " << temp);
      check({TIGON_DIVERGENCE_JSD, TIGON_DISTILL_TEACHER_LOGITS, TIGON_DISTILL_REDUCTION_SUM, beta, temp});
    }
  check({TIGON_DIVERGENCE_KL, TIGON_DISTILL_TEACHER_LOGITS, TIGON_DISTILL_REDUCTION_BATCHMEAN, 0.5f, 0.7f});
  check({TIGON_DIVERGENCE_TVD, TIGON_DISTILL_TEACHER_LOGITS, TIGON_DISTILL_REDUCTION_BATCHMEAN, 0.5f, 3.f});
}

TEST(DistillReference, InPlaceOverStudentOrTeacherEqualsOutOfPlace) {
  std::mt19937 rng(3);
  const int64_t N = 4, V = 40;
  HostMat x(DType::kBFloat16, N, V), t(DType::kBFloat16, N, V), grad(DType::kBFloat16, N, V);
  x.fill_random(rng, 2.0);
  t.fill_random(rng, 2.0);
  const tigon_distill_params p = params(TIGON_DIVERGENCE_JSD, TIGON_DISTILL_TEACHER_LOGITS, 0, 0.3f, 1.5f);
  std::vector<float> loss(N), loss_x(N), loss_t(N);
  auto xv = x.view(), tv = t.view(), gv = grad.view();
  tigon::TensorView ov(loss.data(), {N}, tigon::dtype::float32), ox(loss_x.data(), {N}, tigon::dtype::float32),
      ot(loss_t.data(), {N}, tigon::dtype::float32);
  ASSERT_EQ(tigon_distill_fwd(xv, tv, nullptr, ov, gv, p, nullptr, 0, nullptr), TIGON_SUCCESS);
  HostMat x2 = x, t2 = t;
  auto x2v = x2.view(), t2v = t2.view();
  ASSERT_EQ(tigon_distill_fwd(x2v, tv, nullptr, ox, x2v, p, nullptr, 0, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_distill_fwd(xv, t2v, nullptr, ot, t2v, p, nullptr, 0, nullptr), TIGON_SUCCESS);
  EXPECT_EQ(loss, loss_x);
  EXPECT_EQ(loss, loss_t);
  EXPECT_EQ(worst_ratio(x2, grad, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(t2, grad, 0, 0), 0.0);
}

TEST(DistillReference, EveryRowIgnoredGivesNanMeansAndZeroGradients) {
  HostMat x(DType::kFloat32, 3, 8), t(DType::kFloat32, 3, 8), grad(DType::kFloat32, 3, 8);
  std::mt19937 rng(1);
  x.fill_random(rng);
  t.fill_random(rng);
  std::vector<int32_t> labels = {-100, -100, -100};
  auto xv = x.view(), tv = t.view(), gv = grad.view();
  tigon::TensorView lv(labels.data(), {3}, tigon::dtype::int32);
  for (int red : {TIGON_DISTILL_REDUCTION_SUM, TIGON_DISTILL_REDUCTION_BATCHMEAN}) {
    float loss = 7;
    tigon::TensorView ov(&loss, {}, tigon::dtype::float32);
    grad.poison();
    ASSERT_EQ(tigon_distill_fwd(xv, tv, lv, ov, gv, params(0, 0, red), nullptr, 0, nullptr), TIGON_SUCCESS);
    EXPECT_EQ(std::isnan(loss), red == TIGON_DISTILL_REDUCTION_BATCHMEAN);
    if (red == TIGON_DISTILL_REDUCTION_SUM) EXPECT_EQ(loss, 0.f);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(grad.at(r, c), 0.0);
  }
}

// Each call must fail with INVALID_ARGUMENT and a message naming `arg`.
void expect_arg_error(tigon_status_t status, const char* arg) {
  EXPECT_EQ(status, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("'") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(DistillApi, EveryBadArgumentIsNamed) {
  HostMat x(DType::kFloat32, 4, 8), t(DType::kFloat32, 4, 8), t16(DType::kFloat16, 4, 8), t9(DType::kFloat32, 4, 9),
      xi(DType::kInt32, 4, 8), g(DType::kFloat32, 4, 8), g16(DType::kFloat16, 4, 8), empty(DType::kFloat32, 4, 0);
  std::vector<int64_t> labels = {0, 1, 2, 3};
  std::vector<float> loss(4), fl(4);
  auto xv = x.view(), tv = t.view(), t16v = t16.view(), t9v = t9.view(), xiv = xi.view(), gv = g.view(),
       g16v = g16.view(), ev = empty.view();
  tigon::TensorView lv(labels.data(), {4}, tigon::dtype::int64), lshort(labels.data(), {3}, tigon::dtype::int64),
      lfloat(fl.data(), {4}, tigon::dtype::float32), ov(loss.data(), {}, tigon::dtype::float32),
      orows(loss.data(), {4}, tigon::dtype::float32);
  // A strided teacher view whose last dimension is not contiguous.
  tigon::TensorView tstrided(t.data(), {4, 4}, tigon::dtype::float32, tigon::cpu(), {8, 2});
  // grad aliasing the student with another stride.
  tigon::TensorView galias(x.data(), {2, 8}, tigon::dtype::float32, tigon::cpu(), {16, 1});
  const auto fwd = [](const tigon_tensor* x, const tigon_tensor* t, const tigon_tensor* l, const tigon_tensor* o,
                      const tigon_tensor* g,
                      tigon_distill_params p) { return tigon_distill_fwd(x, t, l, o, g, p, nullptr, 0, nullptr); };
  const auto ok = params(TIGON_DIVERGENCE_JSD, 0, TIGON_DISTILL_REDUCTION_BATCHMEAN);
  ASSERT_EQ(fwd(xv, tv, lv, ov, gv, ok), TIGON_SUCCESS) << tigon_last_error();
  expect_arg_error(fwd(nullptr, tv, lv, ov, gv, ok), "student");
  expect_arg_error(fwd(xiv, tv, lv, ov, gv, ok), "student");
  expect_arg_error(fwd(ev, ev, nullptr, ov, nullptr, ok), "student");
  expect_arg_error(fwd(xv, nullptr, lv, ov, gv, ok), "teacher");
  expect_arg_error(fwd(xv, t16v, lv, ov, gv, ok), "teacher");
  expect_arg_error(fwd(xv, t9v, lv, ov, gv, ok), "teacher");
  expect_arg_error(fwd(xv, tstrided, lv, ov, gv, ok), "teacher");
  expect_arg_error(fwd(xv, xv, lv, ov, gv, ok), "teacher");
  expect_arg_error(fwd(xv, tv, lshort, ov, gv, ok), "labels");
  expect_arg_error(fwd(xv, tv, lfloat, ov, gv, ok), "labels");
  expect_arg_error(fwd(xv, tv, lv, nullptr, gv, ok), "loss");
  expect_arg_error(fwd(xv, tv, lv, orows, gv, ok), "loss");
  expect_arg_error(fwd(xv, tv, lv, ov, g16v, ok), "grad");
  expect_arg_error(fwd(xv, tv, lv, ov, t9v, ok), "grad");
  expect_arg_error(fwd(xv, tv, lv, ov, galias, ok), "grad");
  for (auto [p, arg] : {std::pair{params(3, 0, 3), "divergence"}, std::pair{params(1, 3, 3), "teacher_mode"},
                        std::pair{params(1, 0, 4), "reduction"}, std::pair{params(1, 0, 3, 1.5f), "beta"},
                        std::pair{params(1, 0, 3, -0.1f), "beta"}, std::pair{params(1, 0, 3, NAN), "beta"},
                        std::pair{params(1, 0, 3, 0.5f, 0.f), "temperature"},
                        std::pair{params(1, 0, 3, 0.5f, INFINITY), "temperature"}})
    expect_arg_error(fwd(xv, tv, lv, ov, gv, p), arg);
  size_t bytes = 1;
  ASSERT_EQ(tigon_distill_fwd_workspace_size(xv, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // the CPU path needs none
  expect_arg_error(tigon_distill_fwd_workspace_size(xv, nullptr), "bytes");
  expect_arg_error(tigon_distill_fwd_workspace_size(nullptr, &bytes), "student");
}

}  // namespace
