// One linear + activation problem on the host for the C++ tests: random inputs, poisoned outputs, the C API calls on
// views of it (host memory, or device copies made by the GPU tests), and naive fp64 formulas to check against.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "test_util.h"
#include "tigon/linear_act.h"

namespace tigon_test {

inline const char* act_name(int act) {
  switch (act) {
    case TIGON_ACT_RELU: return "relu";
    case TIGON_ACT_GELU_ERF: return "gelu_erf";
    case TIGON_ACT_GELU_TANH: return "gelu_tanh";
    case TIGON_ACT_SILU: return "silu";
    case TIGON_ACT_RELU2: return "relu2";
    default: return "none";
  }
}

// The activations as torch documents them, in fp64; derivatives by central differences (ReLU's exactly, 0 at 0),
// so a wrong analytic derivative in the reference cannot hide.
inline double naive_act(int act, double x) {
  const double pi = 3.14159265358979323846;
  switch (act) {
    case TIGON_ACT_RELU: return x > 0 ? x : 0;
    case TIGON_ACT_RELU2: return x > 0 ? x * x : 0;
    case TIGON_ACT_SILU: return x / (1.0 + std::exp(-x));
    case TIGON_ACT_GELU_TANH: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
    case TIGON_ACT_GELU_ERF: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    default: return x;
  }
}

inline double naive_grad(int act, double x) {
  if (act == TIGON_ACT_RELU) return x > 0 ? 1 : 0;
  const double h = 1e-5;
  return (naive_act(act, x + h) - naive_act(act, x - h)) / (2 * h);
}

struct LinearActCase {
  DType dt;
  int act;
  int64_t M, K, N;
  bool bias, residual;
  int64_t pad;  // extra elements per row of x, z, dy (row strides that are not the row length)
};

inline std::string case_name(const LinearActCase& c) {
  return std::string(short_name(c.dt)) + "_" + act_name(c.act) + "_" + std::to_string(c.M) + "x" + std::to_string(c.K) +
         "x" + std::to_string(c.N) + (c.bias ? "_bias" : "") + (c.residual ? "_res" : "") + "_pad" +
         std::to_string(c.pad);
}

// Inputs, outputs and gradients of one problem in host memory. dw and db are fp32 (the op's fp32 option).
struct LinearActProblem {
  LinearActCase c;
  HostMat x, w, b, res, out, z, dy, dz, dx, dw, db;
  explicit LinearActProblem(const LinearActCase& cs)
      : c(cs),
        x(cs.dt, cs.M, cs.K, cs.K + cs.pad),
        w(cs.dt, cs.N, cs.K),
        b(cs.dt, 1, cs.N),
        res(cs.dt, cs.M, cs.N),
        out(cs.dt, cs.M, cs.N),
        z(cs.dt, cs.M, cs.N, cs.N + cs.pad),
        dy(cs.dt, cs.M, cs.N, cs.N + cs.pad),
        dz(cs.dt, cs.M, cs.N),
        dx(cs.dt, cs.M, cs.K),
        dw(DType::kFloat32, cs.N, cs.K),
        db(DType::kFloat32, 1, cs.N) {
    std::mt19937 rng(unsigned(cs.M * 131 + cs.K * 7 + cs.N + cs.act));
    x.fill_random(rng);
    w.fill_random(rng, 1.5 / std::sqrt(double(cs.K)));
    b.fill_random(rng, 0.5);
    res.fill_random(rng);
    dy.fill_random(rng);
    for (HostMat* m : {&out, &z, &dz, &dx, &dw, &db}) m->poison();
  }

  tigon_linear_act_params params() const { return {c.act}; }
  // z is what the backward reads (and the forward writes) for every activation but NONE
  bool wants_z() const { return c.act != TIGON_ACT_NONE; }
};

// The C API calls on views of the problem's matrices (each a host view, or its device copy's).
template <class View>
void run_linear_act(LinearActProblem& p, View view, void* fwd_ws, size_t fwd_bytes, void* bwd_ws, size_t bwd_bytes) {
  auto xv = view(p.x), wv = view(p.w), bv = view(p.b), rv = view(p.res), ov = view(p.out), zv = view(p.z),
       dyv = view(p.dy), dzv = view(p.dz), dxv = view(p.dx), dwv = view(p.dw), dbv = view(p.db);
  const tigon_tensor* bias = p.c.bias ? bv.get() : nullptr;
  const tigon_tensor* z = p.wants_z() ? zv.get() : nullptr;
  ASSERT_EQ(tigon_linear_act_fwd(xv, wv, bias, p.c.residual ? rv.get() : nullptr, ov, z, p.params(), fwd_ws, fwd_bytes,
                                 nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(tigon_linear_act_bwd(dyv, xv, wv, z, nullptr, p.wants_z() ? dzv.get() : nullptr, dxv, dwv,
                                 p.c.bias ? dbv.get() : nullptr, p.params(), bwd_ws, bwd_bytes, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
}

}  // namespace tigon_test
