// The SwiGLU / GeGLU CPU reference (through the C API) against naive fp64 formulas, whose derivatives are taken by
// central differences so a wrong analytic derivative in the reference cannot hide; and C API argument validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "test_util.h"
#include "tigon/swiglu.h"

using namespace tigon_test;

namespace {

const char* act_name(int act) { return act == 0 ? "silu" : act == 1 ? "gelu_tanh" : "gelu_erf"; }

// The activations as torch documents them, in fp64.
double naive_act(int act, double a) {
  const double pi = 3.14159265358979323846;
  if (act == TIGON_GLU_SILU) return a / (1.0 + std::exp(-a));
  if (act == TIGON_GLU_GELU_TANH) return 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (a + 0.044715 * a * a * a)));
  return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
}

double naive_grad(int act, double a) {
  const double h = 1e-5;
  return (naive_act(act, a + h) - naive_act(act, a - h)) / (2 * h);
}

// Largest |got - want| / (atol + |want|).
template <class F>
double worst(const HostMat& got, F want, double atol) {
  double w = 0;
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.cols; ++c) {
      const double g = got.at(r, c), e = want(r, c);
      if (std::isnan(g)) return INFINITY;
      w = std::max(w, std::fabs(g - e) / (atol + std::fabs(e)));
    }
  return w;
}

using Case = std::tuple<DType, int, int64_t, int64_t, int64_t>;  // dtype, activation, rows, cols, row padding

class SwigluReference : public ::testing::TestWithParam<Case> {};

TEST_P(SwigluReference, MatchesNaiveFp64) {
  const auto [dt, act, rows, cols, pad] = GetParam();
  std::mt19937 rng(42 + rows * 3 + cols + act);
  HostMat a(dt, rows, cols, cols + pad), b(dt, rows, cols, cols + 2 * pad), dc(dt, rows, cols), c(dt, rows, cols),
      da(dt, rows, cols, cols + pad), db(dt, rows, cols);
  a.fill_random(rng, 2.5);
  b.fill_random(rng);
  dc.fill_random(rng);
  c.poison();
  da.poison();
  db.poison();
  const tigon_swiglu_params p{act};
  auto av = a.view(), bv = b.view(), cv = c.view(), dcv = dc.view(), dav = da.view(), dbv = db.view();
  ASSERT_EQ(tigon_swiglu_fwd(av, bv, cv, p, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_swiglu_bwd(dcv, av, bv, dav, dbv, p, nullptr), TIGON_SUCCESS) << tigon_last_error();

  // One rounding to the dtype per output (half a unit), plus the finite-difference error for da.
  const double tol = rtol_of(dt);
  EXPECT_LE(worst(c, [&](int64_t r, int64_t k) { return naive_act(act, a.at(r, k)) * b.at(r, k); }, 1e-3), tol);
  EXPECT_LE(worst(db, [&](int64_t r, int64_t k) { return naive_act(act, a.at(r, k)) * dc.at(r, k); }, 1e-3), tol);
  EXPECT_LE(worst(
                da, [&](int64_t r, int64_t k) { return naive_grad(act, a.at(r, k)) * b.at(r, k) * dc.at(r, k); }, 1e-3),
            tol + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Activations, SwigluReference,
                         ::testing::Values(Case{DType::kFloat32, TIGON_GLU_SILU, 5, 123, 0},
                                           Case{DType::kBFloat16, TIGON_GLU_SILU, 3, 64, 7},
                                           Case{DType::kFloat16, TIGON_GLU_SILU, 1, 1, 0},
                                           Case{DType::kFloat32, TIGON_GLU_GELU_TANH, 4, 77, 3},
                                           Case{DType::kBFloat16, TIGON_GLU_GELU_TANH, 6, 32, 0},
                                           Case{DType::kFloat16, TIGON_GLU_GELU_TANH, 2, 100, 1},
                                           Case{DType::kFloat32, TIGON_GLU_GELU_ERF, 3, 1001, 0},
                                           Case{DType::kBFloat16, TIGON_GLU_GELU_ERF, 7, 9, 5},
                                           Case{DType::kFloat16, TIGON_GLU_GELU_ERF, 2, 40, 0}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + act_name(std::get<1>(c)) + "_" +
                                  std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
                                  std::to_string(std::get<4>(c));
                         });

// Falcon-H1's multipliers: c = act(a g) b d, da = act'(a g) g b dc d, db = act(a g) dc d. A few roundings to the
// dtype (a g, act, the product; dc b in backward), each half a unit.
TEST(SwigluReference, MultipliersMatchNaiveFp64) {
  const float g = 0.75f, d = 1.625f;
  for (const DType dt : {DType::kFloat32, DType::kBFloat16})
    for (int act = 0; act < 3; ++act) {
      const int64_t rows = 4, cols = 50;
      std::mt19937 rng(11 + act);
      HostMat a(dt, rows, cols), b(dt, rows, cols), dc(dt, rows, cols), c(dt, rows, cols), da(dt, rows, cols),
          db(dt, rows, cols);
      a.fill_random(rng, 2.5);
      b.fill_random(rng);
      dc.fill_random(rng);
      const tigon_swiglu_params p{act, g, d};
      ASSERT_EQ(tigon_swiglu_fwd(a.view(), b.view(), c.view(), p, nullptr), TIGON_SUCCESS) << tigon_last_error();
      ASSERT_EQ(tigon_swiglu_bwd(dc.view(), a.view(), b.view(), da.view(), db.view(), p, nullptr), TIGON_SUCCESS);
      const double tol = 2 * rtol_of(dt);
      // a g as the op defines it, rounded to the dtype: act' moves by more than a rounding near its zeros
      const auto x = [&](int64_t r, int64_t k) { return tigon::round_to(dt, a.at(r, k) * g); };
      EXPECT_LE(worst(c, [&](int64_t r, int64_t k) { return naive_act(act, x(r, k)) * b.at(r, k) * d; }, 1e-3), tol);
      EXPECT_LE(worst(db, [&](int64_t r, int64_t k) { return naive_act(act, x(r, k)) * dc.at(r, k) * d; }, 1e-3), tol);
      const auto da_want = [&](int64_t r, int64_t k) {
        return naive_grad(act, x(r, k)) * g * b.at(r, k) * dc.at(r, k) * d;
      };
      EXPECT_LE(worst(da, da_want, 1e-3), tol + 1e-6);
    }
}

TEST(SwigluReference, InPlaceBackwardOverTheHalvesOfGateUp) {
  // a and b are the two halves of one [rows, 2I] gate_up buffer; da, db written over them equal the out-of-place run.
  const int64_t rows = 4, I = 37;
  std::mt19937 rng(5);
  HostMat gu(DType::kFloat32, rows, 2 * I), dc(DType::kFloat32, rows, I), da(DType::kFloat32, rows, I),
      db(DType::kFloat32, rows, I);
  gu.fill_random(rng);
  dc.fill_random(rng);
  auto half = [&](int k) {
    return tigon::TensorView(static_cast<char*>(gu.data()) + k * I * 4, {rows, I}, tigon::dtype::float32, tigon::cpu(),
                             {2 * I, 1});
  };
  auto a = half(0), b = half(1), dcv = dc.view(), dav = da.view(), dbv = db.view();
  for (int act = 0; act < 3; ++act) {
    HostMat saved = gu;
    const tigon_swiglu_params p{act};
    ASSERT_EQ(tigon_swiglu_bwd(dcv, a, b, dav, dbv, p, nullptr), TIGON_SUCCESS) << tigon_last_error();
    ASSERT_EQ(tigon_swiglu_bwd(dcv, a, b, a, b, p, nullptr), TIGON_SUCCESS) << tigon_last_error();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < I; ++c) {
        EXPECT_EQ(gu.at(r, c), da.at(r, c));
        EXPECT_EQ(gu.at(r, I + c), db.at(r, c));
      }
    gu = saved;
  }
}

// ---- C API validation: every bad argument is an INVALID_ARGUMENT naming it ---------------------------------------

struct SwigluApi : ::testing::Test {
  HostMat a{DType::kFloat32, 4, 8}, b{DType::kFloat32, 4, 8}, c{DType::kFloat32, 4, 8}, d{DType::kFloat32, 4, 8},
      e{DType::kFloat32, 4, 8};
  void expect_error(tigon_status_t st, const char* arg) {
    EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
        << tigon_last_error();
  }
};

TEST_F(SwigluApi, ForwardRejectsBadArguments) {
  auto av = a.view(), bv = b.view(), cv = c.view();
  expect_error(tigon_swiglu_fwd(av, bv, cv, {3}, nullptr), "activation");
  expect_error(tigon_swiglu_fwd(av, bv, cv, {-1}, nullptr), "activation");
  expect_error(tigon_swiglu_fwd(av, bv, cv, {0, NAN, 1.f}, nullptr), "gate_multiplier");
  expect_error(tigon_swiglu_fwd(av, bv, cv, {0, 1.f, INFINITY}, nullptr), "down_multiplier");
  expect_error(tigon_swiglu_fwd(nullptr, bv, cv, {0}, nullptr), "a");
  expect_error(tigon_swiglu_fwd(av, nullptr, cv, {0}, nullptr), "b");
  expect_error(tigon_swiglu_fwd(av, bv, nullptr, {0}, nullptr), "c");
  HostMat i32(DType::kInt32, 4, 8), bf(DType::kBFloat16, 4, 8), short_rows(DType::kFloat32, 3, 8),
      short_cols(DType::kFloat32, 4, 7);
  expect_error(tigon_swiglu_fwd(i32.view(), bv, cv, {0}, nullptr), "a");
  expect_error(tigon_swiglu_fwd(av, bf.view(), cv, {0}, nullptr), "b");
  expect_error(tigon_swiglu_fwd(av, bv, short_rows.view(), {0}, nullptr), "c");
  expect_error(tigon_swiglu_fwd(av, short_cols.view(), cv, {0}, nullptr), "b");
  tigon::TensorView transposed(a.data(), {8, 4}, tigon::dtype::float32, tigon::cpu(), {1, 8});
  expect_error(tigon_swiglu_fwd(transposed, transposed, transposed, {0}, nullptr), "a");
  tigon::TensorView on_gpu(c.data(), {4, 8}, tigon::dtype::float32, tigon::cuda(0));
  expect_error(tigon_swiglu_fwd(av, bv, on_gpu, {0}, nullptr), "c");
  tigon::TensorView a_rows_of_16(a.data(), {2, 8}, tigon::dtype::float32, tigon::cpu(), {16, 1});
  tigon::TensorView c_over_a(a.data(), {2, 8}, tigon::dtype::float32, tigon::cpu(), {8, 1});
  HostMat b2(DType::kFloat32, 2, 8);
  expect_error(tigon_swiglu_fwd(a_rows_of_16, b2.view(), c_over_a, {0}, nullptr), "c");
}

TEST_F(SwigluApi, BackwardRejectsBadArguments) {
  auto av = a.view(), bv = b.view(), dcv = c.view(), dav = d.view(), dbv = e.view();
  expect_error(tigon_swiglu_bwd(dcv, av, bv, dav, dbv, {7}, nullptr), "activation");
  expect_error(tigon_swiglu_bwd(dcv, av, bv, dav, dbv, {0, -INFINITY, 1.f}, nullptr), "gate_multiplier");
  expect_error(tigon_swiglu_bwd(nullptr, av, bv, dav, dbv, {0}, nullptr), "dc");
  expect_error(tigon_swiglu_bwd(dcv, nullptr, bv, dav, dbv, {0}, nullptr), "a");
  expect_error(tigon_swiglu_bwd(dcv, av, nullptr, dav, dbv, {0}, nullptr), "b");
  expect_error(tigon_swiglu_bwd(dcv, av, bv, nullptr, dbv, {0}, nullptr), "da");
  expect_error(tigon_swiglu_bwd(dcv, av, bv, dav, nullptr, {0}, nullptr), "db");
  expect_error(tigon_swiglu_bwd(dcv, av, bv, dav, dav, {0}, nullptr), "db");
  HostMat f16(DType::kFloat16, 4, 8), wide(DType::kFloat32, 4, 9);
  expect_error(tigon_swiglu_bwd(f16.view(), av, bv, dav, dbv, {0}, nullptr), "dc");
  expect_error(tigon_swiglu_bwd(dcv, av, bv, wide.view(), dbv, {0}, nullptr), "da");
  expect_error(tigon_swiglu_bwd(dcv, av, bv, dav, f16.view(), {0}, nullptr), "db");
}

TEST_F(SwigluApi, EmptyTensorsAreANoOp) {
  HostMat z(DType::kBFloat16, 0, 8);
  auto zv = z.view();
  EXPECT_EQ(tigon_swiglu_fwd(zv, zv, zv, {0}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  HostMat z2(DType::kBFloat16, 0, 8), z3(DType::kBFloat16, 0, 8);
  EXPECT_EQ(tigon_swiglu_bwd(zv, zv, zv, z2.view(), z3.view(), {1}, nullptr), TIGON_SUCCESS) << tigon_last_error();
}

}  // namespace
