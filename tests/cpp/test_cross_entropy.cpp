// The cross entropy CPU reference (through the C API) against a naive fp64 loop, and the C API's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tigon/cross_entropy.h"

using namespace tigon_test;

namespace {

// Naive smoothed, weighted cross entropy of one row in fp64, with its gradient for a grad_output of 1 (sum).
double naive_row(const HostMat& x, int64_t r, int64_t t, const std::vector<float>& w, double eps,
                 std::vector<double>* grad) {
  const int64_t V = x.cols;
  double mx = -INFINITY, s = 0, wall = 0;
  for (int64_t c = 0; c < V; ++c) mx = std::max(mx, x.at(r, c));
  for (int64_t c = 0; c < V; ++c) s += std::exp(x.at(r, c) - mx);
  const double lse = mx + std::log(s);
  double loss = 0;
  for (int64_t c = 0; c < V; ++c) {
    const double q = (1 - eps) * (c == t) * w[t] + eps / V * w[c];  // the smoothed, weighted target distribution
    loss += q * (lse - x.at(r, c));
    wall += w[c];
  }
  for (int64_t c = 0; c < V; ++c) {
    const double p = std::exp(x.at(r, c) - lse);
    (*grad)[c] = ((1 - eps) * w[t] + eps / V * wall) * p - (1 - eps) * (c == t) * w[t] - eps / V * w[c];
  }
  return loss;
}

tigon_cross_entropy_params params(int reduction, float eps = 0.f) { return {-100, eps, 0.f, 0.f, reduction}; }

TEST(CrossEntropyReference, MatchesNaiveFp64WithWeightsSmoothingAndIgnoredRows) {
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    std::mt19937 rng(5);
    const int64_t N = 6, V = 37;
    HostMat x(dt, N, V, V + 5), grad(dt, N, V);
    x.fill_random(rng, 2.0);
    grad.poison();
    std::vector<int64_t> t = {3, -100, 0, 36, 7, -100};
    std::vector<float> w(V);
    for (int64_t c = 0; c < V; ++c) w[c] = 0.5f + 0.01f * float(c);
    float loss = NAN;
    auto xv = x.view(), gv = grad.view();
    tigon::TensorView tv(t.data(), {N}, tigon::dtype::int64), wv(w.data(), {V}, tigon::dtype::float32),
        lv(&loss, {}, tigon::dtype::float32);
    ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, wv, lv, nullptr, nullptr, nullptr, gv, params(TIGON_REDUCTION_MEAN, 0.2f),
                                      nullptr, 0, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
    double sum = 0, W = 0;
    std::vector<double> g(V);
    std::vector<std::vector<double>> grads(N, std::vector<double>(V, 0.0));
    for (int64_t r = 0; r < N; ++r) {
      if (t[r] == -100) continue;
      sum += naive_row(x, r, t[r], w, 0.2, &grads[r]);
      W += w[t[r]];
    }
    EXPECT_NEAR(loss, sum / W, 1e-5 * std::fabs(sum / W));
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < V; ++c)
        EXPECT_NEAR(grad.at(r, c), grads[r][c] / W, 1e-7 + rtol_of(dt) * std::fabs(grads[r][c] / W))
            << short_name(dt) << " row " << r << " col " << c;
  }
}

TEST(CrossEntropyReference, InPlaceEqualsOutOfPlaceAndScaleMultiplies) {
  std::mt19937 rng(9);
  const int64_t N = 4, V = 50;
  HostMat x(DType::kFloat32, N, V), grad(DType::kFloat32, N, V);
  x.fill_random(rng);
  HostMat logits = x;
  std::vector<int32_t> t = {1, 2, 49, 0};
  std::vector<float> loss(N), loss2(N);
  auto xv = x.view(), gv = grad.view(), lgv = logits.view();
  tigon::TensorView tv(t.data(), {N}, tigon::dtype::int32), lv(loss.data(), {N}, tigon::dtype::float32),
      lv2(loss2.data(), {N}, tigon::dtype::float32);
  ASSERT_EQ(tigon_cross_entropy_fwd(xv, tv, nullptr, lv, nullptr, nullptr, nullptr, gv, params(TIGON_REDUCTION_NONE),
                                    nullptr, 0, nullptr),
            TIGON_SUCCESS);
  ASSERT_EQ(tigon_cross_entropy_fwd(lgv, tv, nullptr, lv2, nullptr, nullptr, nullptr, lgv, params(TIGON_REDUCTION_NONE),
                                    nullptr, 0, nullptr),
            TIGON_SUCCESS);
  EXPECT_EQ(loss, loss2);
  EXPECT_EQ(worst_ratio(logits, grad, 0, 0), 0.0);
  std::vector<float> scale = {2.f, 1.f, 0.f, -1.f};
  tigon::TensorView sv(scale.data(), {N}, tigon::dtype::float32);
  ASSERT_EQ(tigon_cross_entropy_bwd(lgv, sv, nullptr), TIGON_SUCCESS);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < V; ++c) EXPECT_EQ(logits.at(r, c), float(grad.at(r, c) * scale[r]));
}

// Each call must fail with INVALID_ARGUMENT and a message naming `arg`.
void expect_arg_error(tigon_status_t status, const char* arg) {
  EXPECT_EQ(status, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("'") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(CrossEntropyApi, EveryBadArgumentIsNamed) {
  HostMat x(DType::kFloat32, 4, 8), xi(DType::kInt32, 4, 8), g16(DType::kFloat16, 4, 8);
  std::vector<int64_t> t = {0, 1, 2, 3}, t_bad = {0, 1, 8, 3};
  std::vector<float> loss(4), w(7);
  auto xv = x.view(), xiv = xi.view(), g16v = g16.view();
  tigon::TensorView tv(t.data(), {4}, tigon::dtype::int64), tbad(t_bad.data(), {4}, tigon::dtype::int64),
      tshort(t.data(), {3}, tigon::dtype::int64), tfloat(loss.data(), {4}, tigon::dtype::float32),
      lv(loss.data(), {}, tigon::dtype::float32), lrows(loss.data(), {4}, tigon::dtype::float32),
      wv(w.data(), {7}, tigon::dtype::float32), one(loss.data(), {1}, tigon::dtype::float32),
      three(loss.data(), {3}, tigon::dtype::float32);
  // The forward on the CPU (no workspace, no stream).
  const auto fwd = [](const tigon_tensor* x, const tigon_tensor* t, const tigon_tensor* w, const tigon_tensor* l,
                      const tigon_tensor* z, const tigon_tensor* a, const tigon_tensor* pr, const tigon_tensor* g,
                      tigon_cross_entropy_params p) {
    return tigon_cross_entropy_fwd(x, t, w, l, z, a, pr, g, p, nullptr, 0, nullptr);
  };
  const auto mean = params(TIGON_REDUCTION_MEAN);
  expect_arg_error(fwd(nullptr, tv, nullptr, lv, nullptr, nullptr, nullptr, nullptr, mean), "logits");
  expect_arg_error(fwd(xiv, tv, nullptr, lv, nullptr, nullptr, nullptr, nullptr, mean), "logits");
  expect_arg_error(fwd(xv, tshort, nullptr, lv, nullptr, nullptr, nullptr, nullptr, mean), "target");
  expect_arg_error(fwd(xv, tfloat, nullptr, lv, nullptr, nullptr, nullptr, nullptr, mean), "target");
  expect_arg_error(fwd(xv, tbad, nullptr, lv, nullptr, nullptr, nullptr, nullptr, mean), "target");
  expect_arg_error(fwd(xv, tv, wv, lv, nullptr, nullptr, nullptr, nullptr, mean), "weight");
  expect_arg_error(fwd(xv, tv, nullptr, lrows, nullptr, nullptr, nullptr, nullptr, mean), "loss");
  expect_arg_error(fwd(xv, tv, nullptr, lv, lrows, nullptr, nullptr, nullptr, mean), "z_loss");
  expect_arg_error(fwd(xv, tv, nullptr, lv, nullptr, lrows, nullptr, nullptr, mean), "accuracy");
  expect_arg_error(fwd(xv, tv, nullptr, lv, nullptr, nullptr, nullptr, g16v, mean), "grad");
  for (auto [p, arg] : {std::pair{tigon_cross_entropy_params{-100, 1.5f, 0.f, 0.f, 1}, "label_smoothing"},
                        std::pair{tigon_cross_entropy_params{-100, 0.f, -1.f, 0.f, 1}, "lse_square_scale"},
                        std::pair{tigon_cross_entropy_params{-100, 0.f, 0.f, -2.f, 1}, "softcap"},
                        std::pair{tigon_cross_entropy_params{-100, 0.f, 0.f, 0.f, 3}, "reduction"},
                        std::pair{tigon_cross_entropy_params{-100, 0.f, 0.f, 0.f, 1, 2}, "token_scaling"}})
    expect_arg_error(fwd(xv, tv, nullptr, lv, nullptr, nullptr, nullptr, nullptr, p), arg);
  // predicted: int64, one per row whatever the reduction
  expect_arg_error(fwd(xv, tv, nullptr, lv, nullptr, nullptr, one, nullptr, mean), "predicted");
  expect_arg_error(tigon_cross_entropy_bwd(xiv, one, nullptr), "grad");
  expect_arg_error(tigon_cross_entropy_bwd(xv, three, nullptr), "grad_output");
  expect_arg_error(tigon_cross_entropy_bwd(xv, nullptr, nullptr), "grad_output");
  size_t bytes = 1;
  ASSERT_EQ(tigon_cross_entropy_fwd_workspace_size(xv, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // the CPU path needs none
  expect_arg_error(tigon_cross_entropy_fwd_workspace_size(xv, nullptr), "bytes");
}

}  // namespace
