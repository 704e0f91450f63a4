// DyT CPU reference: fp64 math, one rounding per output; sums in fp64 over rows in order.
#include <cmath>
#include <vector>

#include "common/host_float.h"
#include "dyt/dyt.h"

namespace tigon::dyt {
namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const double alpha = *p.alpha;
  for (int64_t r = 0; r < p.x.rows; ++r)
    for (int64_t c = 0; c < p.x.cols; ++c) {
      const double g = load_elem(p.gamma, p.param_dtype, c), b = p.beta ? load_elem(p.beta, p.param_dtype, c) : 0.0;
      store_elem(p.y.data, p.y.dtype, r * p.y.row_stride + c, g * std::tanh(alpha * elem(p.x, r, c)) + b);
    }
}

void bwd_cpu(const BwdProblem& p) {
  const double alpha = *p.alpha;
  const int64_t C = p.x.cols;
  std::vector<double> dgamma(size_t(C), 0.0), dbeta(size_t(C), 0.0);
  double dalpha = 0.0;
  for (int64_t r = 0; r < p.x.rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double x = elem(p.x, r, c), dy = elem(p.dy, r, c), g = load_elem(p.gamma, p.param_dtype, c);
      const double t = std::tanh(alpha * x), d = 1.0 - t * t;
      dgamma[size_t(c)] += dy * t;
      dbeta[size_t(c)] += dy;
      dalpha += dy * g * x * d;
      if (p.dx.data) store_elem(p.dx.data, p.dx.dtype, r * p.dx.row_stride + c, dy * g * alpha * d);
    }
  for (int64_t c = 0; c < C; ++c) {
    if (p.dgamma) store_elem(p.dgamma, p.grad_dtype, c, dgamma[size_t(c)]);
    if (p.dbeta) store_elem(p.dbeta, p.grad_dtype, c, dbeta[size_t(c)]);
  }
  if (p.dalpha) *p.dalpha = float(dalpha);
}

}  // namespace tigon::dyt
