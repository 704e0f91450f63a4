// Sparsemax CPU reference: fp64 per row, tau from the sorted row (the largest k with 1 + k z_(k) > the sum of the k
// largest), one rounding per output. Each row is read whole before any of it is written, so exact aliases are safe.
#include <algorithm>
#include <functional>
#include <vector>

#include "common/host_float.h"
#include "sparsemax/sparsemax.h"

namespace tigon::sparsemax {
namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  std::vector<double> z, sorted;
  for (int64_t r = 0; r < p.x.rows; ++r) {
    const size_t n = size_t(p.causal ? r % p.causal + 1 : p.x.cols);  // the entries the mask keeps
    z.resize(n);
    for (size_t c = 0; c < n; ++c) z[c] = elem(p.x, r, int64_t(c));
    sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    double prefix = 0.0, tau = 0.0;
    for (size_t k = 0; k < n; ++k) {  // the support is a prefix of the sorted row
      prefix += sorted[k];
      if (1.0 + double(k + 1) * sorted[k] > prefix) tau = (prefix - 1.0) / double(k + 1);
    }
    for (int64_t c = 0; c < p.x.cols; ++c) put(p.y, r, c, size_t(c) < n ? std::max(z[size_t(c)] - tau, 0.0) : 0.0);
  }
}

void bwd_cpu(const BwdProblem& p) {
  const size_t n = size_t(p.y.cols);
  std::vector<double> y(n), dy(n);
  for (int64_t r = 0; r < p.y.rows; ++r) {
    double sum = 0.0;
    int64_t support = 0;
    for (size_t c = 0; c < n; ++c) {
      y[c] = elem(p.y, r, int64_t(c)), dy[c] = elem(p.dy, r, int64_t(c));
      if (y[c] > 0) sum += dy[c], ++support;
    }
    const double mean = support ? sum / double(support) : 0.0;
    for (size_t c = 0; c < n; ++c) put(p.dx, r, int64_t(c), y[c] > 0 ? dy[c] - mean : 0.0);
  }
}

}  // namespace tigon::sparsemax
