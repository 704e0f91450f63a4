// GroupNorm CPU reference: fp64 statistics and math, one rounding per output; sums in fp64 in index order.
#include <cmath>
#include <vector>

#include "common/host_float.h"
#include "group_norm/group_norm.h"

namespace tigon::group_norm {

void fwd_cpu(const FwdProblem& p) {
  const Shape& s = p.shape;
  const int64_t cg = s.group_channels(), len = s.group_size();
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      const int64_t base = (n * s.c + g * cg) * s.s;
      double sum = 0.0;
      for (int64_t i = 0; i < len; ++i) sum += load_elem(p.x, s.dtype, base + i);
      const double mean = sum / double(len);
      double sq = 0.0;
      for (int64_t i = 0; i < len; ++i) {
        const double d = load_elem(p.x, s.dtype, base + i) - mean;
        sq += d * d;
      }
      const double rstd = 1.0 / std::sqrt(sq / double(len) + double(p.eps));
      p.mean[n * s.groups + g] = float(mean);
      p.rstd[n * s.groups + g] = float(rstd);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t c = g * cg + i / s.s;
        const double w = p.weight ? load_elem(p.weight, p.param_dtype, c) : 1.0;
        const double b = p.bias ? load_elem(p.bias, p.param_dtype, c) : 0.0;
        store_elem(p.y, s.dtype, base + i, (load_elem(p.x, s.dtype, base + i) - mean) * rstd * w + b);
      }
    }
}

void bwd_cpu(const BwdProblem& p) {
  const Shape& s = p.shape;
  const int64_t cg = s.group_channels(), len = s.group_size();
  std::vector<double> dw(size_t(s.c), 0.0), db(size_t(s.c), 0.0);
  std::vector<double> dy(static_cast<size_t>(len));  // one group's dy
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      const int64_t base = (n * s.c + g * cg) * s.s;
      const double mean = p.mean[n * s.groups + g], rstd = p.rstd[n * s.groups + g];
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t i = 0; i < len; ++i) {
        const int64_t c = g * cg + i / s.s;
        const double w = p.weight ? load_elem(p.weight, p.param_dtype, c) : 1.0;
        const double xhat = (load_elem(p.x, s.dtype, base + i) - mean) * rstd;
        dy[size_t(i)] = load_elem(p.dy, s.dtype, base + i);  // read before dx (which may be dy) is written
        sum_g += dy[size_t(i)] * w;
        sum_gx += dy[size_t(i)] * w * xhat;
        dw[size_t(c)] += dy[size_t(i)] * xhat;
        db[size_t(c)] += dy[size_t(i)];
      }
      if (!p.dx) continue;
      const double mg = sum_g / double(len), mgx = sum_gx / double(len);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t c = g * cg + i / s.s;
        const double w = p.weight ? load_elem(p.weight, p.param_dtype, c) : 1.0;
        const double xhat = (load_elem(p.x, s.dtype, base + i) - mean) * rstd;
        store_elem(p.dx, s.dtype, base + i, rstd * (dy[size_t(i)] * w - mg - xhat * mgx));
      }
    }
  for (int64_t c = 0; c < s.c; ++c) {
    if (p.dweight) store_elem(p.dweight, p.grad_dtype, c, dw[size_t(c)]);
    if (p.dbias) store_elem(p.dbias, p.grad_dtype, c, db[size_t(c)]);
  }
}

}  // namespace tigon::group_norm
