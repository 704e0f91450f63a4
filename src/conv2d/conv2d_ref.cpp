// 2-D convolution, CPU reference: direct loops, float64 accumulation, one rounding to the output dtype.
#include <algorithm>
#include <vector>

#include "common/host_float.h"
#include "conv2d/conv2d.h"

namespace tigon::conv2d {

void fwd_cpu(const Problem& p) {
  const auto at = [&](const void* base, int64_t i) { return load_elem(base, p.dtype, i); };
  std::vector<double> acc(size_t(p.k));
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oh = 0; oh < p.p; ++oh)
      for (int64_t ow = 0; ow < p.q; ++ow) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t r = 0; r < p.r; ++r) {
          const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t s = 0; s < p.s; ++s) {
            const int64_t iw = ow * p.stride_w - p.pad_w + s * p.dil_w;
            if (iw < 0 || iw >= p.w) continue;
            const int64_t xi = ((n * p.h + ih) * p.w + iw) * p.c;
            for (int64_t k = 0; k < p.k; ++k) {
              const int64_t wi = ((k * p.r + r) * p.s + s) * p.c;
              double sum = 0;
              for (int64_t c = 0; c < p.c; ++c) sum += at(p.x, xi + c) * at(p.weight, wi + c);
              acc[size_t(k)] += sum;
            }
          }
        }
        const int64_t yi = ((n * p.p + oh) * p.q + ow) * p.k;
        for (int64_t k = 0; k < p.k; ++k) {
          double v = acc[size_t(k)];
          if (p.bias) v += at(p.bias, k);
          if (p.residual) v += at(p.residual, yi + k);
          if (p.relu) v = std::max(v, 0.0);
          store_elem(p.y, p.dtype, yi + k, v);
        }
      }
}

}  // namespace tigon::conv2d
