// Pointwise activation CPU reference: the activation and its derivative in fp64 (common/activation_math.h), rounded
// once to the dtype. Every element is read before it is written, so exact aliases (in place) are safe.
#include <cmath>

#include "activation/activation.h"
#include "common/activation_math.h"
#include "common/host_float.h"

namespace tigon::activation {
namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  for (int64_t r = 0; r < p.x.rows; ++r)
    for (int64_t c = 0; c < p.x.cols; ++c) {
      const double res = p.residual.data ? elem(p.residual, r, c) : 0.0;
      put(p.y, r, c, activation_ref(p.activation, elem(p.x, r, c)).act + res);
    }
}

void bwd_cpu(const BwdProblem& p) {
  if (!p.dx.data) return;
  for (int64_t r = 0; r < p.dy.rows; ++r)
    for (int64_t c = 0; c < p.dy.cols; ++c) {
      const double s = elem(p.saved, r, c);
      const double grad = p.activation == kActRelu2FromOutput ? (s > 0 ? 2.0 * std::sqrt(s) : 0.0)
                                                              : activation_ref(p.activation, s).grad;
      put(p.dx, r, c, elem(p.dy, r, c) * grad);
    }
}

}  // namespace tigon::activation
