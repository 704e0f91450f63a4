// SwiGLU / GeGLU CPU reference. Written for clarity, not speed: the activation and its derivative in fp64 straight
// from their definitions, each output rounded once to the dtype, so the CUDA kernels can be checked against it.
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
  for (int64_t r = 0; r < p.a.rows; ++r)
    for (int64_t c = 0; c < p.a.cols; ++c) {
      const double a = elem(p.a, r, c), b = elem(p.b, r, c);
      put(p.c, r, c, activation(p.activation, a).act * b);  // c may be a or b: read before written
    }
}

void bwd_cpu(const BwdProblem& p) {
  for (int64_t r = 0; r < p.a.rows; ++r)
    for (int64_t c = 0; c < p.a.cols; ++c) {
      // All three reads first: da may be a or dc, db may be b or dc.
      const double a = elem(p.a, r, c), b = elem(p.b, r, c), dc = elem(p.dc, r, c);
      const ActAndGrad f = activation(p.activation, a);
      put(p.da, r, c, dc * b * f.grad);
      put(p.db, r, c, dc * f.act);
    }
}

}  // namespace tigon::swiglu
