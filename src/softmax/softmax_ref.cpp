// Softmax CPU reference: fp64 per row (max, then the sum of exponentials), one rounding per output. Each row is read
// whole before any of it is written, so exact aliases are safe.
#include <cmath>
#include <vector>

#include "common/host_float.h"
#include "softmax/softmax.h"

namespace tigon::softmax {
namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  std::vector<double> e(size_t(p.x.cols));
  for (int64_t r = 0; r < p.x.rows; ++r) {
    const int64_t n = p.causal ? r % p.causal + 1 : p.x.cols;  // the entries the mask keeps
    double mx = -INFINITY, sum = 0.0;
    for (int64_t c = 0; c < n; ++c) mx = std::fmax(mx, elem(p.x, r, c));
    for (int64_t c = 0; c < n; ++c) sum += (e[size_t(c)] = std::exp(elem(p.x, r, c) - mx));
    for (int64_t c = 0; c < p.x.cols; ++c) put(p.y, r, c, c < n ? e[size_t(c)] / sum : 0.0);
  }
}

void bwd_cpu(const BwdProblem& p) {
  std::vector<double> y(size_t(p.y.cols)), dy(size_t(p.y.cols));
  for (int64_t r = 0; r < p.y.rows; ++r) {
    double dot = 0.0;
    for (int64_t c = 0; c < p.y.cols; ++c) {
      y[size_t(c)] = elem(p.y, r, c), dy[size_t(c)] = elem(p.dy, r, c);
      dot += y[size_t(c)] * dy[size_t(c)];
    }
    for (int64_t c = 0; c < p.y.cols; ++c) put(p.dx, r, c, y[size_t(c)] * (dy[size_t(c)] - dot));
  }
}

}  // namespace tigon::softmax
