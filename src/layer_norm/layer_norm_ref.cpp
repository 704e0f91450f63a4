// LayerNorm CPU reference. Written for clarity, not speed: fp64 sums, statistics held in fp32 as the kernels hold
// them, and each output rounded once, so the CUDA kernels can be checked against it element by element.
#include <cmath>
#include <vector>

#include "common/host_float.h"
#include "layer_norm/layer_norm.h"

namespace tigon::layer_norm {

namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

// A [cols] parameter as doubles, or `fill` when absent.
std::vector<double> param_vector(const void* p, DType dtype, int64_t cols, double fill) {
  std::vector<double> v(cols, fill);
  if (p)
    for (int64_t c = 0; c < cols; ++c) v[c] = load_elem(p, dtype, c);
  return v;
}

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const int64_t cols = p.x.cols;
  const std::vector<double> w = param_vector(p.w, p.p_dtype, cols, 1.0);
  const std::vector<double> b = param_vector(p.b, p.p_dtype, cols, 0.0);
  for (int64_t r = 0; r < p.x.rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += elem(p.x, r, c);
    const double mean = sum / double(cols);
    double sq = 0;  // centred second pass: no cancellation for rows with a large mean
    for (int64_t c = 0; c < cols; ++c) sq += (elem(p.x, r, c) - mean) * (elem(p.x, r, c) - mean);
    const float mean_f = float(mean), rstd_f = float(1.0 / std::sqrt(sq / double(cols) + double(p.eps)));
    if (p.mean) {
      p.mean[r] = mean_f;
      p.rstd[r] = rstd_f;
    }
    for (int64_t c = 0; c < cols; ++c) put(p.y, r, c, (elem(p.x, r, c) - mean_f) * rstd_f * w[c] + b[c]);
  }
}

void bwd_cpu(const BwdProblem& p) {
  const int64_t rows = p.x.rows, cols = p.x.cols;
  const std::vector<double> w = param_vector(p.w, p.w_dtype, cols, 1.0);
  std::vector<double> dw(cols, 0.0), db(cols, 0.0), g(cols), xhat(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double mean = p.mean[r], rstd = p.rstd[r];
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double dy = elem(p.dy, r, c);
      xhat[c] = (elem(p.x, r, c) - mean) * rstd;
      g[c] = dy * w[c];
      sum_g += g[c];
      sum_gx += g[c] * xhat[c];
      dw[c] += dy * xhat[c];
      db[c] += dy;
    }
    const double mean_g = sum_g / double(cols), mean_gx = sum_gx / double(cols);
    // Written after all reads of the row: dx may be dy itself.
    for (int64_t c = 0; c < cols; ++c) put(p.dx, r, c, rstd * (g[c] - mean_g - xhat[c] * mean_gx));
  }
  for (int64_t c = 0; c < cols; ++c) {
    if (p.dw) store_elem(p.dw, p.dw_dtype, c, dw[c]);
    if (p.db) store_elem(p.db, p.db_dtype, c, db[c]);
  }
}

}  // namespace tigon::layer_norm
