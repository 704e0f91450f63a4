// MoE experts' CPU reference through the C API: the forward against a loop written here (one pair at a time, no
// rounding but the dtype's), sentinel ids and experts nobody chose, gradients against finite differences of the
// forward in fp32; and C API validation naming the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "moe_test_util.h"

using namespace tigon_test;

namespace {

double silu(double a) { return a / (1.0 + std::exp(-a)); }

TEST(MoeReference, ForwardMatchesAPlainLoop) {
  MoeCase c(5, 2, 4, 8, 6, DType::kFloat32, 3, /*sentinel_every=*/3, /*x_stride=*/11);
  const HostMat out = c.reference_out();
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t col = 0; col < c.H; ++col) {
      double want = 0;
      for (int64_t j = 0; j < c.k; ++j) {
        const int64_t e = c.ids[size_t(t * c.k + j)];
        if (e >= c.E) continue;
        double y = 0;
        for (int64_t n = 0; n < c.I; ++n) {
          double g = 0, u = 0;
          for (int64_t q = 0; q < c.H; ++q) {
            g += c.x.at(t, q) * c.gate_up.at(e * 2 * c.I + n, q);
            u += c.x.at(t, q) * c.gate_up.at(e * 2 * c.I + c.I + n, q);
          }
          y += silu(g) * u * c.down.at(e * c.H + col, n);
        }
        want += c.w.at(t, j) * y;
      }
      EXPECT_NEAR(out.at(t, col), want, 1e-4 * (1 + std::fabs(want))) << t << "," << col;
    }
}

// Loss L = sum(out * dout): its gradient in each input, against central differences of the reference forward.
TEST(MoeReference, GradientsMatchFiniteDifferences) {
  MoeCase c(4, 2, 3, 8, 4, DType::kFloat32, 2, /*sentinel_every=*/5);  // expert 2 never chosen
  const MoeCase::Grads g = c.reference_grads();
  auto loss = [&] {
    const HostMat out = c.reference_out();
    double s = 0;
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t col = 0; col < c.H; ++col) s += out.at(t, col) * c.dout.at(t, col);
    return s;
  };
  auto check = [&](HostMat& m, const HostMat& grad, const char* name) {
    for (int64_t r = 0; r < m.rows; r += 3)
      for (int64_t col = 0; col < m.cols; col += 2) {
        const double v = m.at(r, col), h = 1e-2;
        m.set(r, col, v + h);
        const double up = loss();
        m.set(r, col, v - h);
        const double dn = loss();
        m.set(r, col, v);
        const double want = (up - dn) / (2 * h);
        EXPECT_NEAR(grad.at(r, col), want, 2e-3 * (1 + std::fabs(want))) << name << " " << r << "," << col;
      }
  };
  check(c.x, g.dx, "dx");
  check(c.w, g.dw, "dweights");
  check(c.gate_up, g.dgate_up, "dgate_up_weight");
  check(c.down, g.ddown, "ddown_weight");
  for (int64_t r = 2 * 2 * c.I; r < 3 * 2 * c.I; ++r)  // expert 2's rows: exactly zero
    for (int64_t col = 0; col < c.H; ++col) EXPECT_EQ(g.dgate_up.at(r, col), 0.0);
  for (size_t q = 0; q < c.ids.size(); q += 5) EXPECT_EQ(g.dw.at(int64_t(q) / c.k, int64_t(q) % c.k), 0.0);
}

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(MoeApi, RejectsBadArguments) {
  MoeCase c(4, 2, 3, 8, 4, DType::kBFloat16, 3);
  HostMat out(DType::kBFloat16, 4, 8), out16(DType::kFloat16, 4, 8);
  const tigon::TensorView ids32(c.ids.data(), {4, 2}, tigon::dtype::float32),
      ids_short(c.ids.data(), {3, 2}, tigon::dtype::int64);
  const auto x = c.x.view(), ids = c.ids_view(), w = c.w_view(), gu = c.gate_up_view(), d = c.down_view();
  expect_error(tigon_moe_fwd(x, ids32, w, gu, d, out.view(), {0}, nullptr, 0, nullptr), "ids");
  expect_error(tigon_moe_fwd(x, ids_short, w, gu, d, out.view(), {0}, nullptr, 0, nullptr), "ids");
  expect_error(tigon_moe_fwd(x, ids, nullptr, gu, d, out.view(), {0}, nullptr, 0, nullptr), "weights");
  expect_error(tigon_moe_fwd(x, ids, w, d, gu, out.view(), {0}, nullptr, 0, nullptr), "gate_up_weight");
  expect_error(
      tigon_moe_fwd(x, ids, w, gu, MoeCase::experts_view(c.down, 3, 4, 8), out.view(), {0}, nullptr, 0, nullptr),
      "down_weight");
  expect_error(tigon_moe_fwd(x, ids, w, gu, d, out16.view(), {0}, nullptr, 0, nullptr), "out");
  expect_error(tigon_moe_fwd(x, ids, w, gu, d, out.view(), {7}, nullptr, 0, nullptr), "params.activation");
  HostMat dw16(DType::kFloat16, 4, 2);
  const tigon::TensorView dwv(dw16.data(), {4, 2}, tigon::dtype::float16);
  expect_error(tigon_moe_bwd(x, ids, w, gu, d, out.view(), nullptr, dwv, nullptr, nullptr, {0}, nullptr, 0, nullptr),
               "dweights");
  size_t bytes = 1;
  ASSERT_EQ(tigon_moe_workspace_size(x, ids, gu, d, 1, &bytes), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(bytes, 0u);  // the CPU needs none
}

}  // namespace
