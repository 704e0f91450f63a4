// Decode attention CPU reference. Written to be read: one query token and head at a time, scores and sums in fp64,
// each output element rounded once to its dtype; and the cache append, row by row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/host_float.h"
#include "decode_attention/decode_attention.h"

namespace tigon::decode_attention {
namespace {

std::vector<double> load_row(const Tensor4& t, DType dt, int64_t b, int64_t s, int64_t h, int64_t dim) {
  std::vector<double> out(dim);
  const int64_t base = b * t.batch_stride + s * t.seq_stride + h * t.head_stride;
  for (int64_t d = 0; d < dim; ++d) out[d] = load_elem(t.data, dt, base + d);
  return out;
}

}  // namespace

void run_cpu(const Problem& p) {
  const Shape& s = p.s;
  const int64_t D = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = p.seqlens[b];                  // checked to lie in [0, s_max] by the C API
    const int64_t start = p.starts ? p.starts[b] : 0;  // and this in [0, len]
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / s.group();
      for (int64_t t = 0; t < s.tq; ++t) {
        const int64_t i = len - s.tq + t;  // the token's position in the cache
        const int64_t first = std::max(start, s.window_left >= 0 ? i - s.window_left : 0);
        const int64_t last = std::min(i, len - 1);
        std::vector<double> out(D, 0.0);
        double lse = -std::numeric_limits<double>::infinity();
        if (first <= last) {
          const std::vector<double> q = load_row(p.q, s.dtype, b, t, h, D);
          std::vector<double> sc(last - first + 1);
          for (int64_t j = first; j <= last; ++j) {
            const std::vector<double> k = load_row(p.k, s.dtype, b, j, hk, D);
            double x = 0;
            for (int64_t d = 0; d < D; ++d) x += q[d] * k[d];
            x *= double(s.scale);
            sc[j - first] = s.softcap > 0.f ? double(s.softcap) * std::tanh(x / double(s.softcap)) : x;
          }
          const double mx = *std::max_element(sc.begin(), sc.end());
          double sum = 0;
          for (double x : sc) sum += std::exp(x - mx);
          lse = mx + std::log(sum);
          for (int64_t j = first; j <= last; ++j) {
            const std::vector<double> v = load_row(p.v, s.dtype, b, j, hk, D);
            const double pj = std::exp(sc[j - first] - lse);
            for (int64_t d = 0; d < D; ++d) out[d] += pj * v[d];
          }
        }
        const int64_t base = b * p.out.batch_stride + t * p.out.seq_stride + h * p.out.head_stride;
        for (int64_t d = 0; d < D; ++d) store_elem(p.out.data, s.dtype, base + d, out[d]);
        if (p.lse) p.lse[(b * s.heads_q + h) * s.tq + t] = float(lse);
      }
    }
  }
}

void append_cpu(const AppendProblem& p) {
  const size_t row_bytes = size_t(p.head_dim) * size_t(dtype_bytes(p.dtype));
  auto row = [&](const Tensor4& t, int64_t b, int64_t s, int64_t h) {
    return static_cast<char*>(t.data) +
           (b * t.batch_stride + s * t.seq_stride + h * t.head_stride) * dtype_bytes(p.dtype);
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 0; t < p.tq; ++t) {
      const int64_t pos = int64_t(p.seqlens[b]) - p.tq + t;
      if (pos < 0 || pos >= p.s_max) continue;
      for (int64_t h = 0; h < p.heads; ++h) {
        std::memcpy(row(p.k, b, pos, h), row(p.k_new, b, t, h), row_bytes);
        std::memcpy(row(p.v, b, pos, h), row(p.v_new, b, t, h), row_bytes);
      }
    }
}

}  // namespace tigon::decode_attention
