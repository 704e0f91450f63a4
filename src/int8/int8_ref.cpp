// Int8 CPU references: plain loops. Quantization reproduces the CUDA path's fp32 divisions exactly (a quotient of
// two floats computed in fp64 and rounded to fp32 is the correctly rounded fp32 quotient), so q and scale match it
// bit for bit; the linear layer sums in int64 (exact) and applies the scales, bias and activation in fp64.
#include <algorithm>
#include <cmath>

#include "common/activation_math.h"
#include "common/host_float.h"
#include "int8/int8.h"

namespace tigon::int8 {

void quantize_cpu(const QuantizeProblem& p) {
  const DType t = p.x.dtype;
  for (int64_t m = 0; m < p.x.rows; ++m) {
    const int64_t xo = m * p.x.row_stride;
    double amax = 0;
    for (int64_t k = 0; k < p.x.cols; ++k) amax = std::max(amax, std::fabs(load_elem(p.x.data, t, xo + k)));
    const float s = float(amax / 127.0);
    p.scale[m] = s;
    auto* q = static_cast<int8_t*>(p.q.data) + m * p.q.row_stride;
    for (int64_t k = 0; k < p.x.cols; ++k) {
      float r = s > 0.f ? std::nearbyint(float(load_elem(p.x.data, t, xo + k) / double(s))) : 0.f;
      q[k] = int8_t(std::min(127.f, std::max(-127.f, r)));
    }
  }
}

void linear_cpu(const LinearProblem& p) {
  const int64_t M = p.qx.rows, N = p.qw.rows, K = p.qx.cols;
  const DType t = p.out.dtype;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const auto* a = static_cast<const int8_t*>(p.qx.data) + m * p.qx.row_stride;
      const auto* b = static_cast<const int8_t*>(p.qw.data) + n * p.qw.row_stride;
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += int64_t(a[k]) * int64_t(b[k]);
      double v = double(acc) * double(p.scale_x[m]) * double(p.scale_w[n]);
      if (p.bias) v += load_elem(p.bias, t, n);
      store_elem(p.out.data, t, m * p.out.row_stride + n, activation_ref(p.activation, v).act);
    }
}

}  // namespace tigon::int8
