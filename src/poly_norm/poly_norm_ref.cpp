// PolyNorm CPU reference: fp64 per row, one rounding per output; the parameter sums in fp64 in row order.
#include <cmath>

#include "common/host_float.h"
#include "poly_norm/poly_norm.h"

namespace tigon::poly_norm {
namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
constexpr int kPower[3] = {3, 2, 1};  // the power of x in term k (weight[k], rstd[k])

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const int64_t C = p.x.cols;
  for (int64_t r = 0; r < p.x.rows; ++r) {
    double s[3] = {0, 0, 0};
    for (int64_t c = 0; c < C; ++c) {
      const double x2 = elem(p.x, r, c) * elem(p.x, r, c);
      s[0] += x2 * x2 * x2, s[1] += x2 * x2, s[2] += x2;
    }
    double rs[3];
    for (int k = 0; k < 3; ++k) {
      rs[k] = 1.0 / std::sqrt(s[k] / double(C) + double(p.eps));
      if (p.rstd) p.rstd[r * 3 + k] = float(rs[k]);
    }
    for (int64_t c = 0; c < C; ++c) {
      const double x = elem(p.x, r, c);
      double y = double(*p.bias);
      for (int k = 0; k < 3; ++k) y += double(p.weight[k]) * std::pow(x, kPower[k]) * rs[k];
      store_elem(p.y.data, p.y.dtype, r * p.y.row_stride + c, y);
    }
  }
}

void bwd_cpu(const BwdProblem& p) {
  const int64_t C = p.x.cols;
  double dw[3] = {0, 0, 0}, db = 0;
  for (int64_t r = 0; r < p.x.rows; ++r) {
    double m[3] = {0, 0, 0};
    for (int64_t c = 0; c < C; ++c) {
      const double x = elem(p.x, r, c), g = elem(p.dy, r, c);
      for (int k = 0; k < 3; ++k) m[k] += g * std::pow(x, kPower[k]) * double(p.rstd[r * 3 + k]);
      db += g;
    }
    for (int k = 0; k < 3; ++k) dw[k] += m[k], m[k] /= double(C);
    if (!p.dx.data) continue;
    for (int64_t c = 0; c < C; ++c) {
      const double x = elem(p.x, r, c), g = elem(p.dy, r, c);
      double dx = 0;
      for (int k = 0; k < 3; ++k) {
        const double rs = double(p.rstd[r * 3 + k]), n = std::pow(x, kPower[k]) * rs;
        dx += double(p.weight[k]) * rs * (g - n * m[k]) * kPower[k] * std::pow(x, kPower[k] - 1);
      }
      store_elem(p.dx.data, p.dx.dtype, r * p.dx.row_stride + c, dx);
    }
  }
  if (p.dweight)
    for (int k = 0; k < 3; ++k) p.dweight[k] = float(dw[k]);
  if (p.dbias) *p.dbias = float(db);
}

}  // namespace tigon::poly_norm
