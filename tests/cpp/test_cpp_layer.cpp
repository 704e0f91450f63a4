// The header-only C++ layer over every op family: each wrapper reaches its C entry point (CPU path here) and turns a
// bad argument into tigon::Error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tigon/tigon.hpp"

namespace {

using tigon::TensorView;
namespace dt = tigon::dtype;

// Runs f and expects a tigon::Error whose message names `arg`.
template <class F>
void expect_error_naming(F f, const char* arg) {
  try {
    f();
    FAIL() << "expected tigon::Error naming '" << arg << "'";
  } catch (const tigon::Error& e) {
    EXPECT_EQ(e.status(), TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find(std::string("'") + arg + "'"), std::string::npos) << e.what();
  }
}

TEST(CppLayer, LayerNorm) {
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 9}, w(4, 1.f), b(4, 0.f), y(8), mean(2), rstd(2), dx(8), dw(4), db(4);
  TensorView xv(x.data(), {2, 4}, dt::float32), wv(w.data(), {4}, dt::float32), bv(b.data(), {4}, dt::float32),
      yv(y.data(), {2, 4}, dt::float32), mv(mean.data(), {2}, dt::float32), rv(rstd.data(), {2}, dt::float32),
      dxv(dx.data(), {2, 4}, dt::float32), dwv(dw.data(), {4}, dt::float32), dbv(db.data(), {4}, dt::float32);
  tigon::layer_norm_fwd(xv, &wv, &bv, yv, &mv, &rv);
  EXPECT_NEAR(mean[0], 2.5f, 1e-6f);
  EXPECT_NEAR(y[0] + y[1] + y[2] + y[3], 0.f, 1e-5f);
  EXPECT_EQ(tigon::layer_norm_bwd_workspace_size(xv), 0u);  // the CPU path needs none
  tigon::layer_norm_bwd(yv, xv, &wv, mv, rv, dxv, &dwv, &dbv, nullptr, 0);
  TensorView short_w(w.data(), {3}, dt::float32);
  expect_error_naming([&] { tigon::layer_norm_fwd(xv, &short_w, nullptr, yv, nullptr, nullptr); }, "weight");
}

TEST(CppLayer, Dyt) {
  std::vector<float> x{0.f, 1.f, -2.f, 3.f}, alpha{0.5f}, g(2, 2.f), b(2, 1.f), y(4), dx(4), da(1), dg(2), db(2);
  TensorView xv(x.data(), {2, 2}, dt::float32), av(alpha.data(), {1}, dt::float32), gv(g.data(), {2}, dt::float32),
      bv(b.data(), {2}, dt::float32), yv(y.data(), {2, 2}, dt::float32), dxv(dx.data(), {2, 2}, dt::float32),
      dav(da.data(), {1}, dt::float32), dgv(dg.data(), {2}, dt::float32), dbv(db.data(), {2}, dt::float32);
  tigon::dyt_fwd(xv, av, gv, &bv, yv);
  EXPECT_NEAR(y[1], 2.f * std::tanh(0.5f) + 1.f, 1e-6f);
  EXPECT_EQ(tigon::dyt_bwd_workspace_size(xv), 0u);  // the CPU path needs none
  tigon::dyt_bwd(yv, xv, av, gv, &dxv, &dav, &dgv, &dbv, nullptr, 0);
  EXPECT_NEAR(db[0], y[0] + y[2], 1e-5f);
  TensorView short_g(g.data(), {1}, dt::float32);
  expect_error_naming([&] { tigon::dyt_fwd(xv, av, short_g, nullptr, yv); }, "gamma");
}

TEST(CppLayer, Embedding) {
  std::vector<int64_t> idx{2, 0, 2};
  std::vector<float> w{0.f, 1.f, 2.f, 3.f, 4.f, 5.f}, y(6), dw(6);
  TensorView iv(idx.data(), {3}, dt::int64), wv(w.data(), {3, 2}, dt::float32), yv(y.data(), {3, 2}, dt::float32),
      dwv(dw.data(), {3, 2}, dt::float32);
  tigon::embedding_fwd(iv, wv, yv);
  EXPECT_EQ(y[0], 4.f);
  EXPECT_EQ(tigon::embedding_bwd_workspace_size(iv, wv), 0u);  // the CPU path needs none
  tigon::embedding_bwd(iv, yv, dwv, {-1}, nullptr, 0);
  EXPECT_EQ(dw[4], 8.f);  // row 2 picked twice
  EXPECT_EQ(dw[2], 0.f);  // row 1 never
  expect_error_naming([&] { tigon::embedding_bwd(iv, yv, dwv, {3}, nullptr, 0); }, "params.padding_idx");
}

TEST(CppLayer, Conv2d) {
  // 1 sample, 1 channel, 2 x 2 input; a 1 x 1 filter of 2, bias -3, ReLU: relu(2 * x - 3); channels-last = row-major
  std::vector<float> x{1.f, 2.f, 3.f, 4.f}, w{2.f}, b{-3.f}, y(4);
  TensorView xv(x.data(), {1, 1, 2, 2}, dt::float32), wv(w.data(), {1, 1, 1, 1}, dt::float32),
      bv(b.data(), {1}, dt::float32), yv(y.data(), {1, 1, 2, 2}, dt::float32);
  tigon::conv2d_fwd(xv, wv, &bv, nullptr, yv, {1, 1, 0, 0, 1, 1, TIGON_ACT_RELU});
  EXPECT_EQ(y, (std::vector<float>{0.f, 1.f, 3.f, 5.f}));
  expect_error_naming([&] { tigon::conv2d_fwd(xv, wv, &bv, nullptr, yv, {0, 1, 0, 0, 1, 1, 0}); }, "params.stride_h");
}

TEST(CppLayer, GroupNorm) {
  // 1 sample, 4 channels in 2 groups, 2 positions each
  std::vector<float> x{0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f}, w(4, 2.f), b(4, 1.f), y(8), mean(2), rstd(2), dx(8),
      dw(4), db(4);
  TensorView xv(x.data(), {1, 4, 2}, dt::float32), wv(w.data(), {4}, dt::float32), bv(b.data(), {4}, dt::float32),
      yv(y.data(), {1, 4, 2}, dt::float32), mv(mean.data(), {1, 2}, dt::float32), rv(rstd.data(), {1, 2}, dt::float32),
      dxv(dx.data(), {1, 4, 2}, dt::float32), dwv(dw.data(), {4}, dt::float32), dbv(db.data(), {4}, dt::float32);
  const tigon_group_norm_params prm{1e-5f, 2};
  tigon::group_norm_fwd(xv, &wv, &bv, yv, mv, rv, prm);
  EXPECT_NEAR(mean[1], 5.5f, 1e-6f);
  EXPECT_NEAR(y[0] + y[1] + y[2] + y[3], 4.f, 1e-5f);            // 4 x the bias: the group's xhat sums to 0
  EXPECT_EQ(tigon::group_norm_bwd_workspace_size(xv, prm), 0u);  // the CPU path needs none
  tigon::group_norm_bwd(yv, xv, &wv, mv, rv, &dxv, &dwv, &dbv, prm, nullptr, 0);
  EXPECT_NEAR(db[0], y[0] + y[1], 1e-5f);
  expect_error_naming([&] { tigon::group_norm_fwd(xv, &wv, &bv, yv, mv, rv, {1e-5f, 3}); }, "params.num_groups");
}

TEST(CppLayer, Softmax) {
  std::vector<float> x{0.f, 1.f, 2.f, 3.f}, y(4), dx(4);
  TensorView xv(x.data(), {1, 4}, dt::float32), yv(y.data(), {1, 4}, dt::float32), dxv(dx.data(), {1, 4}, dt::float32);
  tigon::softmax_fwd(xv, yv);
  EXPECT_NEAR(y[0] + y[1] + y[2] + y[3], 1.f, 1e-6f);
  tigon::softmax_bwd(yv, yv, dxv);
  TensorView short_y(y.data(), {1, 3}, dt::float32);
  expect_error_naming([&] { tigon::softmax_fwd(xv, short_y); }, "y");
}

TEST(CppLayer, Sparsemax) {
  std::vector<float> x{0.f, 1.f, 2.f, 3.f}, y(4), dx(4);
  TensorView xv(x.data(), {1, 4}, dt::float32), yv(y.data(), {1, 4}, dt::float32), dxv(dx.data(), {1, 4}, dt::float32);
  tigon::sparsemax_fwd(xv, yv);
  EXPECT_EQ(y[0], 0.f);  // tau = 2.5: only the largest two pass
  EXPECT_NEAR(y[2] + y[3], 1.f, 1e-6f);
  tigon::sparsemax_bwd(yv, yv, dxv);
  TensorView short_y(y.data(), {1, 3}, dt::float32);
  expect_error_naming([&] { tigon::sparsemax_fwd(xv, short_y); }, "y");
}

TEST(CppLayer, PolyNorm) {
  std::vector<float> x{1.f, 2.f, -1.f, 0.5f}, w{0.3f, 0.3f, 0.4f}, b{1.f}, y(4), rstd(6), dx(4), dw(3), db(1);
  TensorView xv(x.data(), {2, 2}, dt::float32), wv(w.data(), {3}, dt::float32), bv(b.data(), {1}, dt::float32),
      yv(y.data(), {2, 2}, dt::float32), rv(rstd.data(), {2, 3}, dt::float32), dxv(dx.data(), {2, 2}, dt::float32),
      dwv(dw.data(), {3}, dt::float32), dbv(db.data(), {1}, dt::float32);
  tigon::poly_norm_fwd(xv, wv, bv, yv, &rv);
  EXPECT_EQ(tigon::poly_norm_bwd_workspace_size(xv), 0u);  // the CPU path needs none
  tigon::poly_norm_bwd(yv, xv, wv, rv, &dxv, &dwv, &dbv, nullptr, 0);
  EXPECT_NEAR(db[0], y[0] + y[1] + y[2] + y[3], 1e-5f);
  expect_error_naming([&] { tigon::poly_norm_fwd(xv, wv, bv, yv, &rv, 0.f); }, "eps");
}

TEST(CppLayer, Rope) {
  std::vector<float> x(1 * 1 * 2 * 4, 1.f), out(8), cs(2 * 4, 1.f), sn(2 * 4, 0.f);
  TensorView xv(x.data(), {1, 1, 2, 4}, dt::float32), ov(out.data(), {1, 1, 2, 4}, dt::float32),
      cv(cs.data(), {1, 2, 4}, dt::float32), sv(sn.data(), {1, 2, 4}, dt::float32);
  const tigon_rope_params p{0, TIGON_ROPE_BHTD};
  tigon::rope_fwd(xv, cv, sv, ov, p);  // cos 1, sin 0: the identity
  for (float v : out) EXPECT_EQ(v, 1.f);
  tigon::rope_bwd(ov, cv, sv, xv, p);
  TensorView short_cos(cs.data(), {1, 2, 6}, dt::float32);
  expect_error_naming([&] { tigon::rope_fwd(xv, short_cos, sv, ov, p); }, "cos");
}

TEST(CppLayer, SwigluAndCrossEntropy) {
  std::vector<float> a{0.f, 1.f}, b{2.f, 3.f}, c(2), da(2), db(2);
  TensorView av(a.data(), {1, 2}, dt::float32), bv(b.data(), {1, 2}, dt::float32), cv(c.data(), {1, 2}, dt::float32),
      dav(da.data(), {1, 2}, dt::float32), dbv(db.data(), {1, 2}, dt::float32);
  const tigon_swiglu_params sp{TIGON_GLU_SILU};
  tigon::swiglu_fwd(av, bv, cv, sp);
  EXPECT_NEAR(c[1], 3.f / (1.f + std::exp(-1.f)), 1e-6f);  // silu(1) * 3
  tigon::swiglu_bwd(cv, av, bv, dav, dbv, sp);

  std::vector<float> logits{0.f, 0.f, 0.f, 0.f}, grad(4), loss(1);
  std::vector<int64_t> target{1};
  TensorView lv(logits.data(), {1, 4}, dt::float32), tv(target.data(), {1}, dt::int64),
      gv(grad.data(), {1, 4}, dt::float32), lossv(loss.data(), {}, dt::float32);
  tigon_cross_entropy_params cp{-100, 0.f, 0.f, 0.f, TIGON_REDUCTION_MEAN};
  std::vector<unsigned char> ws(tigon::cross_entropy_fwd_workspace_size(lv) + 1);
  tigon::cross_entropy_fwd(lv, tv, nullptr, lossv, nullptr, nullptr, nullptr, &gv, cp, ws.data(), ws.size());
  EXPECT_NEAR(loss[0], std::log(4.f), 1e-6f);  // uniform logits over 4 classes
  TensorView bad_target(target.data(), {1}, dt::float32);
  expect_error_naming(
      [&] {
        tigon::cross_entropy_fwd(lv, bad_target, nullptr, lossv, nullptr, nullptr, nullptr, &gv, cp, ws.data(),
                                 ws.size());
      },
      "target");
}

TEST(CppLayer, FusedLinearCrossEntropy) {
  // x = 0: every logit is 0, the loss is log(V), and dW row v = (p_v - [v == t]) x = 0.
  std::vector<float> x(2 * 8, 0.f), w(4 * 8, 1.f), dx(16), dw(32), loss(1), half{0.5f};
  std::vector<int64_t> target{1, 3};
  TensorView xv(x.data(), {2, 8}, dt::float32), wv(w.data(), {4, 8}, dt::float32), tv(target.data(), {2}, dt::int64),
      lossv(loss.data(), {}, dt::float32), dxv(dx.data(), {2, 8}, dt::float32), dwv(dw.data(), {4, 8}, dt::float32),
      hv(half.data(), {}, dt::float32);
  tigon_fused_linear_cross_entropy_params p{};
  p.ce = {-100, 0.f, 0.f, 0.f, TIGON_REDUCTION_MEAN};
  const auto [bytes, rows] = tigon::fused_linear_cross_entropy_workspace_size(xv, wv, p);
  EXPECT_EQ(bytes, 0u);  // the CPU path needs none
  EXPECT_EQ(rows, 2);
  tigon::fused_linear_cross_entropy_fwd(xv, wv, nullptr, tv, nullptr, nullptr, lossv, nullptr, nullptr, nullptr, &dxv,
                                        &dwv, nullptr, p, nullptr, 0);
  EXPECT_NEAR(loss[0], std::log(4.f), 1e-6f);
  EXPECT_NEAR(dx[0], 0.f, 1e-7f);  // sum over v of (p_v - [v == t]) * 1
  tigon::fused_linear_cross_entropy_bwd(&dxv, &dwv, nullptr, hv);
  TensorView short_target(target.data(), {1}, dt::int64);
  expect_error_naming(
      [&] {
        tigon::fused_linear_cross_entropy_fwd(xv, wv, nullptr, short_target, nullptr, nullptr, lossv, nullptr, nullptr,
                                              nullptr, nullptr, nullptr, nullptr, p, nullptr, 0);
      },
      "target");
}

}  // namespace
