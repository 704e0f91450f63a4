// RMSNorm CPU reference. Written for clarity, not speed: fp64 accumulation, and each casting mode's roundings done
// exactly where Hugging Face's modules do them, so the CUDA kernels can be checked against it element by element.
#include <cmath>
#include <vector>

#include "common/host_float.h"
#include "rms_norm/rms_norm.h"

namespace tigon::rms_norm {

namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

// rstd as the kernels produce it: mean of squares accumulated wide, result held in fp32.
float row_rstd(const RowMatrix& x, int64_t r, float eps) {
  double ss = 0;
  for (int64_t c = 0; c < x.cols; ++c) ss += elem(x, r, c) * elem(x, r, c);
  return float(1.0 / std::sqrt(ss / double(x.cols) + double(eps)));
}

// offset + w[c], in fp32 as the kernels hold it (1 with no weight).
std::vector<double> scale_vector(const void* w, DType w_dtype, int64_t cols, float offset) {
  std::vector<double> s(cols, 1.0);
  if (w)
    for (int64_t c = 0; c < cols; ++c) s[c] = float(double(offset) + load_elem(w, w_dtype, c));
  return s;
}

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  if (p.add) {  // h = x + residual, rounded to the dtype by put(); then the norm of h
    for (int64_t r = 0; r < p.x.rows; ++r)
      for (int64_t c = 0; c < p.x.cols; ++c) put(p.h, r, c, elem(p.x, r, c) + elem(p.res, r, c));
    FwdProblem norm = p;
    norm.add = false;
    norm.x = p.h;
    fwd_cpu(norm);
    return;
  }
  const DType tx = p.x.dtype;
  const std::vector<double> scale = scale_vector(p.w, p.w_dtype, p.x.cols, p.offset);
  for (int64_t r = 0; r < p.x.rows; ++r) {
    const float rstd = row_rstd(p.x, r, p.eps);
    if (p.rstd) p.rstd[r] = rstd;
    for (int64_t c = 0; c < p.x.cols; ++c) {
      const double x = elem(p.x, r, c);
      double y;
      switch (p.mode) {
        case TIGON_RMS_NORM_LLAMA:  // (x * rstd).to(x.dtype), then times the weight
          y = double(float(scale[c] * round_to(tx, float(x * rstd))));
          break;
        case TIGON_RMS_NORM_GEMMA:  // all in fp32, rounded once by put()
          y = double(float(float(x * rstd) * scale[c]));
          break;
        default: {  // NONE: every step in x's dtype
          const double xn = round_to(tx, float(x * round_to(tx, rstd)));
          y = round_to(tx, float(xn * round_to(tx, scale[c])));
        }
      }
      put(p.y, r, c, y);
    }
  }
}

void bwd_cpu(const BwdProblem& p) {
  const int64_t rows = p.x.rows, cols = p.x.cols;
  const std::vector<double> scale = scale_vector(p.w, p.w_dtype, cols, p.offset);
  std::vector<double> dw(p.dw ? cols : 0, 0.0);
  std::vector<double> g(cols), xhat(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double rstd = p.rstd[r];
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double dy = elem(p.dy, r, c);
      xhat[c] = elem(p.x, r, c) * rstd;
      g[c] = dy * scale[c];
      dot += g[c] * xhat[c];
      if (p.dw) dw[c] += dy * xhat[c];
    }
    const double mean = dot / double(cols);
    // Written after all reads of the row's dy and x: dx may be dy (or dh, read just before) itself.
    for (int64_t c = 0; c < cols; ++c)
      put(p.dx, r, c, rstd * (g[c] - xhat[c] * mean) + (p.add_dh ? elem(p.dh, r, c) : 0.0));
  }
  if (p.dw)
    for (int64_t c = 0; c < cols; ++c) store_elem(p.dw, p.dw_dtype, c, dw[c]);
}

}  // namespace tigon::rms_norm
