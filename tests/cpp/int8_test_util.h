// Int8 tests' shared pieces: random int8 matrices and the naive quantization and dequantized products the CPU
// reference and the CUDA path are checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>

#include "common/activation_math.h"
#include "test_util.h"

namespace tigon_test {

// Uniform integers in [-127, 127].
inline void fill_int8(HostMat& m, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-127, 127);
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) m.set(r, c, d(rng));
}

// Positive fp32 scales around `mean`.
inline std::vector<float> random_scales(int64_t n, std::mt19937& rng, double mean) {
  std::uniform_real_distribution<double> d(0.5 * mean, 1.5 * mean);
  std::vector<float> s(size_t(n) + 1);
  for (int64_t i = 0; i < n; ++i) s[size_t(i)] = float(d(rng));
  return s;
}

// The row's scale: max |x| / 127 as one fp32 division.
inline float naive_scale(const HostMat& x, int64_t r) {
  double amax = 0;
  for (int64_t c = 0; c < x.cols; ++c) amax = std::max(amax, std::fabs(x.at(r, c)));
  return float(amax / 127.0);
}

inline int naive_q(double x, float s) {
  if (!(s > 0.f)) return 0;
  const float r = std::nearbyint(float(x / double(s)));
  return int(std::min(127.f, std::max(-127.f, r)));
}

// act(acc * sx * sw + b) in fp64, acc the exact integer dot product.
inline double naive_int8_linear(const HostMat& qx, const HostMat& qw, const std::vector<float>& sx,
                                const std::vector<float>& sw, const HostMat* bias, int act, int64_t m, int64_t n) {
  int64_t acc = 0;
  for (int64_t k = 0; k < qx.cols; ++k) acc += int64_t(qx.at(m, k)) * int64_t(qw.at(n, k));
  double v = double(acc) * sx[size_t(m)] * sw[size_t(n)];
  if (bias) v += bias->at(0, n);
  return tigon::activation_ref(act, v).act;
}

}  // namespace tigon_test
