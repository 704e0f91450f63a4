// SwiGLU / GeGLU CPU reference. Written for clarity, not speed: the activation and its derivative in fp64 straight
// from their definitions, rounded to the dtype where Hugging Face's module rounds (a g, act, the product; in backward
// dc b), so the CUDA kernels, which round at the same points, can be checked against it.
#include <cmath>

#include "common/host_float.h"
#include "swiglu/swiglu.h"

namespace tigon::swiglu {

namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

struct ActAndGrad {
  double act, grad;  // act(a) and d act / d a
};

ActAndGrad activation(int kind, double a) {
  switch (kind) {
    case TIGON_GLU_SILU: {
      const double s = 1.0 / (1.0 + std::exp(-a));
      return {a * s, s * (1.0 + a * (1.0 - s))};
    }
    case TIGON_GLU_GELU_TANH: {
      const double inner = kSqrt2OverPi * (a + kGeluCubic * a * a * a);
      const double t = std::tanh(inner);
      const double dinner = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * a * a);
      return {0.5 * a * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * dinner};
    }
    default: {  // TIGON_GLU_GELU_ERF
      const double cdf = 0.5 * (1.0 + std::erf(a * kInvSqrt2));
      return {a * cdf, cdf + a * kInvSqrt2Pi * std::exp(-0.5 * a * a)};
    }
  }
}

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const DType t = p.a.dtype;
  for (int64_t r = 0; r < p.a.rows; ++r)
    for (int64_t c = 0; c < p.a.cols; ++c) {
      const double a = round_to(t, elem(p.a, r, c) * p.gate), b = elem(p.b, r, c);
      put(p.c, r, c, round_to(t, activation(p.activation, a).act) * b * p.down);  // c may be a or b: read first
    }
}

void bwd_cpu(const BwdProblem& p) {
  const DType t = p.a.dtype;
  for (int64_t r = 0; r < p.a.rows; ++r)
    for (int64_t c = 0; c < p.a.cols; ++c) {
      // All three reads first: da may be a or dc, db may be b or dc.
      const double a = round_to(t, elem(p.a, r, c) * p.gate), b = elem(p.b, r, c), u = elem(p.dc, r, c) * p.down;
      const ActAndGrad f = activation(p.activation, a);
      put(p.da, r, c, round_to(t, round_to(t, u * b) * f.grad) * p.gate);
      put(p.db, r, c, u * round_to(t, f.act));
    }
}

}  // namespace tigon::swiglu
