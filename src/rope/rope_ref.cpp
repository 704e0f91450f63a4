// RoPE CPU reference: plain loops over the heads, fp64 math, one rounding at the store (host_float.h), so the CUDA
// kernels (fp32 math) can be checked against it element by element.
#include <vector>

#include "common/host_float.h"
#include "rope/rope.h"

namespace tigon::rope {

void run_cpu(const Problem& p) {
  const int64_t D = p.dim, R = p.rotary, half = R / 2;
  std::vector<double> x(D), out(D);
  for (int64_t i0 = 0; i0 < p.size[0]; ++i0)
    for (int64_t i1 = 0; i1 < p.size[1]; ++i1)
      for (int64_t i2 = 0; i2 < p.size[2]; ++i2) {
        const int64_t xo = i0 * p.x_stride[0] + i1 * p.x_stride[1] + i2 * p.x_stride[2];
        const int64_t oo = i0 * p.out_stride[0] + i1 * p.out_stride[1] + i2 * p.out_stride[2];
        const int64_t co = i0 * p.cos_stride[0] + i1 * p.cos_stride[1] + i2 * p.cos_stride[2];
        const int64_t so = i0 * p.sin_stride[0] + i1 * p.sin_stride[1] + i2 * p.sin_stride[2];
        auto cos = [&](int64_t j) { return load_elem(p.cos, p.cs_dtype, co + j); };
        auto sin = [&](int64_t j) { return load_elem(p.sin, p.cs_dtype, so + j); };
        // Read the whole head first: out may be x itself.
        for (int64_t j = 0; j < D; ++j) x[j] = load_elem(p.x, p.dtype, xo + j);
        for (int64_t j = 0; j < D; ++j) out[j] = x[j];
        for (int64_t k = 0; k < half; ++k) {
          const int64_t a = p.interleaved ? 2 * k : k, b = p.interleaved ? 2 * k + 1 : k + half;
          if (p.backward) {  // transpose of the forward
            out[a] = x[a] * cos(a) + x[b] * sin(b);
            out[b] = x[b] * cos(b) - x[a] * sin(a);
          } else {
            out[a] = x[a] * cos(a) - x[b] * sin(a);
            out[b] = x[b] * cos(b) + x[a] * sin(b);
          }
        }
        for (int64_t j = 0; j < D; ++j) store_elem(p.out, p.dtype, oo + j, out[j]);
      }
}

}  // namespace tigon::rope
