// The fused linear + cross entropy CPU reference (through the C API) against a naive fp64 loop, its gradient
// plumbing (narrowed dW, per-token grad_output, the backward scale), and the C API's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tigon/fused_linear_cross_entropy.h"

using namespace tigon_test;

namespace {

using Params = tigon_fused_linear_cross_entropy_params;

Params params(int reduction, int64_t chunk_rows = 0) {
  Params p{};
  p.ce = {-100, 0.f, 0.f, 0.f, reduction};
  p.chunk_rows = chunk_rows;
  return p;
}

// Everything one call needs, host memory.
struct Case {
  int64_t N, H, V;
  DType dt;
  HostMat x, w, b, dx, dw, db;
  std::vector<int64_t> t;
  Case(int64_t n, int64_t h, int64_t v, DType d, unsigned seed)
      : N(n),
        H(h),
        V(v),
        dt(d),
        x(d, n, h),
        w(d, v, h),
        b(d, 1, v),
        dx(d, n, h),
        dw(DType::kFloat32, v, h),
        db(DType::kFloat32, 1, v),
        t(size_t(n)) {
    std::mt19937 rng(seed);
    x.fill_random(rng);
    w.fill_random(rng, 1.0 / std::sqrt(double(h)));
    b.fill_random(rng, 0.5);
    for (auto& v_ : t) v_ = int64_t(rng() % uint32_t(v));
    dx.poison();
    dw.poison();
    db.poison();
  }
  // runs the op; loss has 1 or N values
  tigon_status_t run(std::vector<float>& loss, const Params& p, const HostMat* dwm = nullptr,
                     const std::vector<float>* grad_output = nullptr, bool bias = true) {
    auto xv = x.view(), wv = w.view(), dxv = dx.view();
    HostMat& dwh = dwm ? const_cast<HostMat&>(*dwm) : dw;
    tigon::TensorView bv(b.data(), {V}, to_dl(dt)), tv(t.data(), {N}, tigon::dtype::int64),
        lv(loss.data(), {int64_t(loss.size())}, tigon::dtype::float32), dwv(dwh.data(), {V, H}, to_dl(dwh.dtype)),
        dbv(db.data(), {V}, tigon::dtype::float32),
        gv(grad_output ? const_cast<float*>(grad_output->data()) : nullptr,
           {grad_output ? int64_t(grad_output->size()) : 0}, tigon::dtype::float32);
    return tigon_fused_linear_cross_entropy_fwd(xv, wv, bias ? bv.get() : nullptr, tv, nullptr,
                                                grad_output ? gv.get() : nullptr, lv, nullptr, nullptr, nullptr, dxv,
                                                dwv, bias ? dbv.get() : nullptr, p, nullptr, 0, nullptr);
  }
};

TEST(FusedLinearCrossEntropyReference, MatchesNaiveFp64) {
  Case c(6, 8, 13, DType::kFloat32, 3);
  c.t[2] = -100;
  std::vector<float> loss(1, NAN);
  ASSERT_EQ(c.run(loss, params(TIGON_REDUCTION_MEAN)), TIGON_SUCCESS) << tigon_last_error();

  // logits, softmax, the mean over the 5 kept tokens, then the three products
  double total = 0;
  std::vector<double> g(size_t(c.N * c.V), 0.0);
  for (int64_t i = 0; i < c.N; ++i) {
    if (c.t[size_t(i)] == -100) continue;
    std::vector<double> z(size_t(c.V));
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < c.V; ++v) {
      double acc = c.b.at(0, v);
      for (int64_t h = 0; h < c.H; ++h) acc += c.x.at(i, h) * c.w.at(v, h);
      z[size_t(v)] = acc;
      mx = std::max(mx, acc);
    }
    for (double v : z) s += std::exp(v - mx);
    const double lse = mx + std::log(s);
    total += lse - z[size_t(c.t[size_t(i)])];
    for (int64_t v = 0; v < c.V; ++v)
      g[size_t(i * c.V + v)] = (std::exp(z[size_t(v)] - lse) - (v == c.t[size_t(i)] ? 1.0 : 0.0)) / 5.0;
  }
  EXPECT_NEAR(loss[0], total / 5.0, 1e-5);
  for (int64_t i = 0; i < c.N; ++i)
    for (int64_t h = 0; h < c.H; ++h) {
      double e = 0;
      for (int64_t v = 0; v < c.V; ++v) e += g[size_t(i * c.V + v)] * c.w.at(v, h);
      EXPECT_NEAR(c.dx.at(i, h), e, 1e-6) << "dx " << i << "," << h;
    }
  for (int64_t v = 0; v < c.V; ++v) {
    double eb = 0;
    for (int64_t i = 0; i < c.N; ++i) eb += g[size_t(i * c.V + v)];
    EXPECT_NEAR(c.db.at(0, v), eb, 1e-6) << "db " << v;
    for (int64_t h = 0; h < c.H; ++h) {
      double e = 0;
      for (int64_t i = 0; i < c.N; ++i) e += g[size_t(i * c.V + v)] * c.x.at(i, h);
      EXPECT_NEAR(c.dw.at(v, h), e, 1e-6) << "dw " << v << "," << h;
    }
  }
}

TEST(FusedLinearCrossEntropyReference, NarrowedDwIsTheWeightDtypeGradient) {
  Case c(9, 16, 21, DType::kBFloat16, 5);
  std::vector<float> loss(1);
  HostMat direct(DType::kBFloat16, c.V, c.H);
  ASSERT_EQ(c.run(loss, params(TIGON_REDUCTION_SUM), &direct), TIGON_SUCCESS) << tigon_last_error();  // one chunk
  Params p = params(TIGON_REDUCTION_SUM, 2);  // 5 chunks: fp32 accumulation, then narrowed in place
  p.narrow_dw = 1;
  ASSERT_EQ(c.run(loss, p), TIGON_SUCCESS) << tigon_last_error();
  HostMat narrowed(DType::kBFloat16, c.V, c.H);
  std::memcpy(narrowed.data(), c.dw.data(), size_t(c.V * c.H * 2));
  EXPECT_EQ(worst_ratio(narrowed, direct, 0, 0), 0.0);
}

TEST(FusedLinearCrossEntropyReference, PerTokenGradOutputIsMaskingForZerosAndOnes) {
  // NONE: a per-token grad_output of 0 or 1 gives the gradients of the kept tokens alone, which is what ignoring the
  // zeroed tokens gives.
  Case c(7, 8, 11, DType::kFloat32, 7);
  std::vector<float> loss(size_t(c.N)), go = { 1, 0, 1, 1, 0, 0, 1 };
  ASSERT_EQ(c.run(loss, params(TIGON_REDUCTION_NONE, 3), nullptr, &go), TIGON_SUCCESS) << tigon_last_error();
  const HostMat dx = c.dx, dw = c.dw, db = c.db;
  for (size_t i = 0; i < go.size(); ++i)
    if (go[i] == 0) c.t[i] = -100;
  ASSERT_EQ(c.run(loss, params(TIGON_REDUCTION_NONE)), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(worst_ratio(dx, c.dx, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(dw, c.dw, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(db, c.db, 0, 0), 0.0);
}

TEST(FusedLinearCrossEntropyReference, BackwardScalesEveryGradient) {
  Case c(5, 8, 9, DType::kFloat32, 11);
  std::vector<float> loss(1);
  ASSERT_EQ(c.run(loss, params(TIGON_REDUCTION_MEAN)), TIGON_SUCCESS) << tigon_last_error();
  const HostMat dx = c.dx, dw = c.dw, db = c.db;
  float half = 0.5f;
  auto dxv = c.dx.view();
  tigon::TensorView dwv(c.dw.data(), {c.V, c.H}, tigon::dtype::float32), dbv(c.db.data(), {c.V}, tigon::dtype::float32),
      gv(&half, {}, tigon::dtype::float32);
  ASSERT_EQ(tigon_fused_linear_cross_entropy_bwd(dxv, dwv, dbv, gv, nullptr), TIGON_SUCCESS) << tigon_last_error();
  for (int64_t v = 0; v < c.V; ++v) {
    EXPECT_EQ(c.db.at(0, v), db.at(0, v) * 0.5);
    for (int64_t h = 0; h < c.H; ++h) EXPECT_EQ(c.dw.at(v, h), dw.at(v, h) * 0.5);
  }
  for (int64_t i = 0; i < c.N; ++i)
    for (int64_t h = 0; h < c.H; ++h) EXPECT_EQ(c.dx.at(i, h), dx.at(i, h) * 0.5);
}

TEST(FusedLinearCrossEntropyApi, ChunkPlanAndWorkspace) {
  HostMat x(DType::kBFloat16, 257, 128), w(DType::kBFloat16, 32003, 128);
  auto xv = x.view(), wv = w.view();
  size_t bytes = 1;
  int64_t rows = 0;
  Params p = params(TIGON_REDUCTION_MEAN);
  ASSERT_EQ(tigon_fused_linear_cross_entropy_workspace_size(xv, wv, p, &bytes, &rows), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);              // the CPU path needs none
  EXPECT_EQ(rows, 257);              // all in one chunk under the default budget
  p.memory_budget = 50 * 32008 * 2;  // 50 rows of logits (V padded to 8)
  ASSERT_EQ(tigon_fused_linear_cross_entropy_workspace_size(xv, wv, p, nullptr, &rows), TIGON_SUCCESS);
  EXPECT_EQ(rows, 43);  // 6 chunks, evened out
}

// Each call must fail with INVALID_ARGUMENT and a message naming `arg`.
void expect_arg_error(tigon_status_t status, const char* arg) {
  EXPECT_EQ(status, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("'") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(FusedLinearCrossEntropyApi, EveryBadArgumentIsNamed) {
  HostMat x(DType::kBFloat16, 4, 8), xi(DType::kInt32, 4, 8), w(DType::kBFloat16, 5, 8), w7(DType::kBFloat16, 5, 7),
      w32(DType::kFloat32, 5, 8), dx3(DType::kBFloat16, 3, 8), dw16(DType::kBFloat16, 5, 8), dwh(DType::kFloat16, 5, 8),
      dw32(DType::kFloat32, 5, 8);
  std::vector<int64_t> t = {0, 1, 2, 3}, t_bad = {0, 9, 2, 3};
  std::vector<float> f(64, 1.f);
  auto xv = x.view(), xiv = xi.view(), wv = w.view(), w7v = w7.view(), w32v = w32.view(), dx3v = dx3.view();
  tigon::TensorView tv(t.data(), {4}, tigon::dtype::int64), tbad(t_bad.data(), {4}, tigon::dtype::int64),
      tshort(t.data(), {3}, tigon::dtype::int64), loss(f.data(), {}, tigon::dtype::float32),
      loss4(f.data(), {4}, tigon::dtype::float32), cw4(f.data(), {4}, tigon::dtype::float32),
      b4(dw16.data(), {4}, tigon::dtype::bfloat16), go4(f.data(), {4}, tigon::dtype::float32),
      w3d(w.data(), {5, 8, 1}, tigon::dtype::bfloat16), dw16v(dw16.data(), {5, 8}, tigon::dtype::bfloat16),
      dwhv(dwh.data(), {5, 8}, tigon::dtype::float16), dw32v(dw32.data(), {5, 8}, tigon::dtype::float32),
      db(f.data(), {5}, tigon::dtype::float32);
  const Params mean = params(TIGON_REDUCTION_MEAN);
  auto fwd = [&](const tigon_tensor* x_, const tigon_tensor* w_, const tigon_tensor* t_, const tigon_tensor* l_,
                 Params p = params(TIGON_REDUCTION_MEAN), const tigon_tensor* b_ = nullptr,
                 const tigon_tensor* cw_ = nullptr, const tigon_tensor* go_ = nullptr,
                 const tigon_tensor* dx_ = nullptr, const tigon_tensor* dw_ = nullptr,
                 const tigon_tensor* db_ = nullptr) {
    return tigon_fused_linear_cross_entropy_fwd(x_, w_, b_, t_, cw_, go_, l_, nullptr, nullptr, nullptr, dx_, dw_, db_,
                                                p, nullptr, 0, nullptr);
  };
  expect_arg_error(fwd(nullptr, wv, tv, loss), "x");
  expect_arg_error(fwd(xiv, wv, tv, loss), "x");
  expect_arg_error(fwd(xv, w32v, tv, loss), "weight");
  expect_arg_error(fwd(xv, w7v, tv, loss), "weight");
  expect_arg_error(fwd(xv, w3d, tv, loss), "weight");
  expect_arg_error(fwd(xv, wv, tshort, loss), "target");
  expect_arg_error(fwd(xv, wv, tbad, loss), "target");
  expect_arg_error(fwd(xv, wv, tv, loss4), "loss");
  expect_arg_error(fwd(xv, wv, tv, loss, mean, b4), "bias");
  expect_arg_error(fwd(xv, wv, tv, loss, mean, nullptr, cw4), "class_weight");
  expect_arg_error(fwd(xv, wv, tv, loss, mean, nullptr, nullptr, go4), "grad_output");  // per token needs NONE
  expect_arg_error(fwd(xv, wv, tv, loss, mean, nullptr, nullptr, nullptr, dx3v), "dx");
  expect_arg_error(fwd(xv, wv, tv, loss, mean, nullptr, nullptr, nullptr, nullptr, dwhv), "dw");
  expect_arg_error(fwd(xv, wv, tv, loss, params(TIGON_REDUCTION_MEAN, 1), nullptr, nullptr, nullptr, nullptr, dw16v),
                   "dw");  // 4 chunks would round a bf16 dW after each
  Params narrow = mean;
  narrow.narrow_dw = 1;
  expect_arg_error(fwd(xv, wv, tv, loss, narrow, nullptr, nullptr, nullptr, nullptr, dw16v), "dw");
  expect_arg_error(fwd(xv, wv, tv, loss, mean, nullptr, nullptr, nullptr, nullptr, nullptr, db), "db");
  Params bad = mean;
  bad.chunk_rows = -1;
  expect_arg_error(fwd(xv, wv, tv, loss, bad), "chunk_rows");
  bad = mean;
  bad.dw_accumulation = 7;
  expect_arg_error(fwd(xv, wv, tv, loss, bad), "dw_accumulation");
  bad = mean;
  bad.narrow_dw = 3;
  expect_arg_error(fwd(xv, wv, tv, loss, bad), "narrow_dw");
  bad = mean;
  bad.ce.label_smoothing = 2.f;
  expect_arg_error(fwd(xv, wv, tv, loss, bad), "label_smoothing");
  // allowed: a bf16 dW in one chunk, or in several when asked for
  EXPECT_EQ(fwd(xv, wv, tv, loss, mean, nullptr, nullptr, nullptr, nullptr, dw16v), TIGON_SUCCESS)
      << tigon_last_error();
  Params lowp = params(TIGON_REDUCTION_MEAN, 1);
  lowp.dw_accumulation = TIGON_DW_ACCUMULATE_DTYPE;
  EXPECT_EQ(fwd(xv, wv, tv, loss, lowp, nullptr, nullptr, nullptr, nullptr, dw16v), TIGON_SUCCESS)
      << tigon_last_error();
  expect_arg_error(tigon_fused_linear_cross_entropy_bwd(nullptr, dw32v, nullptr, go4, nullptr), "grad_output");
  expect_arg_error(tigon_fused_linear_cross_entropy_workspace_size(xv, w7v, mean, nullptr, nullptr), "weight");
}

}  // namespace
