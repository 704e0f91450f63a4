// GEMV CPU reference: plain loops, fp64 accumulation, each output element rounded once to y's dtype.
#include "common/host_float.h"
#include "gemv/gemv.h"

namespace tigon::gemv {

void run_cpu(const Problem& p) {
  const DType t = p.x.dtype;
  for (int64_t m = 0, first = 0; m < p.x.rows; ++m, first = 0)
    for (int i = 0; i < p.parts; first += p.w[i].rows, ++i) {
      const RowMatrix& w = p.w[i];
      for (int64_t n = 0; n < w.rows; ++n) {
        double acc = 0.0;
        const int64_t xo = m * p.x.row_stride, wo = n * w.row_stride;
        for (int64_t k = 0; k < p.x.cols; ++k)
          acc += load_elem(p.x.data, t, xo + k) * load_elem(w.data, w.dtype, wo + k);
        if (p.w_scale) acc *= double(p.w_scale[n]);
        if (p.bias[i]) acc += load_elem(p.bias[i], t, n);
        store_elem(p.y.data, t, m * p.y.row_stride + first + n, acc);
      }
    }
}

}  // namespace tigon::gemv
