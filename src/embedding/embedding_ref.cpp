// Embedding CPU reference: the forward copies rows (NaN for an index out of range); the backward sums dy rows per
// index in fp64, in increasing position, one rounding per element.
#include <cmath>
#include <limits>
#include <vector>

#include "common/host_float.h"
#include "embedding/embedding.h"

namespace tigon::embedding {
namespace {

int64_t index_at(const Indices& idx, int64_t i) {
  return idx.dtype == DType::kInt64 ? static_cast<const int64_t*>(idx.data)[i]
                                    : static_cast<const int32_t*>(idx.data)[i];
}

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const int64_t vocab = p.weight.rows, h = p.weight.cols;
  for (int64_t i = 0; i < p.idx.n; ++i) {
    const int64_t v = index_at(p.idx, i);
    for (int64_t c = 0; c < h; ++c) {
      const double val = v >= 0 && v < vocab ? load_elem(p.weight.data, p.weight.dtype, v * p.weight.row_stride + c)
                                             : std::numeric_limits<double>::quiet_NaN();
      store_elem(p.y.data, p.y.dtype, i * p.y.row_stride + c, val);
    }
  }
}

void bwd_cpu(const BwdProblem& p) {
  const int64_t vocab = p.dweight.rows, h = p.dweight.cols;
  std::vector<double> sum(size_t(vocab * h), 0.0);
  for (int64_t i = 0; i < p.idx.n; ++i) {
    const int64_t v = index_at(p.idx, i);
    if (v < 0 || v >= vocab || v == p.padding_idx) continue;
    for (int64_t c = 0; c < h; ++c) sum[size_t(v * h + c)] += load_elem(p.dy.data, p.dy.dtype, i * p.dy.row_stride + c);
  }
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t c = 0; c < h; ++c)
      store_elem(p.dweight.data, p.dweight.dtype, v * p.dweight.row_stride + c, sum[size_t(v * h + c)]);
}

}  // namespace tigon::embedding
