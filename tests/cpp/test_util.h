// Host tensors with random contents for the C++ tests, and the naive fp64 RMSNorm the reference is checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/host_float.h"
#include "tigon/tigon.hpp"

namespace tigon_test {

using tigon::DType;

inline tigon_dtype to_dl(DType t) {
  switch (t) {
    case DType::kFloat32: return tigon::dtype::float32;
    case DType::kFloat16: return tigon::dtype::float16;
    case DType::kBFloat16: return tigon::dtype::bfloat16;
    case DType::kInt32: return tigon::dtype::int32;
    case DType::kInt64: return tigon::dtype::int64;
    case DType::kInt8: return tigon::dtype::int8;
  }
  return tigon::dtype::float32;
}

inline const char* short_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    default: return "int";
  }
}

inline const char* mode_name(int mode) { return mode == 0 ? "llama" : mode == 1 ? "gemma" : "none"; }

// rows x cols with a row stride (elements), host memory.
struct HostMat {
  DType dtype;
  int64_t rows, cols, stride;
  std::vector<uint8_t> bytes;
  HostMat(DType t, int64_t r, int64_t c, int64_t s = -1)
      : dtype(t),
        rows(r),
        cols(c),
        stride(s < 0 ? c : s),
        bytes(size_t((r > 0 ? (r - 1) * stride + c : 0) * tigon::dtype_bytes(t)) + 16) {}
  void* data() { return bytes.data(); }
  double at(int64_t r, int64_t c) const { return tigon::load_elem(bytes.data(), dtype, r * stride + c); }
  void set(int64_t r, int64_t c, double v) { tigon::store_elem(bytes.data(), dtype, r * stride + c, v); }
  void fill_random(std::mt19937& rng, double scale = 1.0, double mean = 0.0) {
    std::normal_distribution<double> d(mean, scale);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) set(r, c, d(rng));
  }
  void poison() {  // NaN everywhere: an element the op forgets to write fails every comparison
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) set(r, c, std::nan(""));
  }
  tigon::TensorView view(tigon_device dev = tigon::cpu(), void* ptr = nullptr) {
    return tigon::TensorView(ptr ? ptr : data(), {rows, cols}, to_dl(dtype), dev, {stride, 1});
  }
  size_t span_bytes() const { return bytes.size(); }
};

// Largest |a - b| / (atol + rtol * |b|) over the matrix; <= 1 passes.
inline double worst_ratio(const HostMat& a, const HostMat& b, double atol, double rtol) {
  double worst = 0;
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t c = 0; c < a.cols; ++c) {
      const double x = a.at(r, c), y = b.at(r, c);
      if (std::isnan(x) != std::isnan(y)) return INFINITY;
      if (std::isnan(x)) continue;
      worst = std::max(worst, std::fabs(x - y) / (atol + rtol * std::fabs(y)));
    }
  return worst;
}

// The largest magnitude in m.
inline double max_abs(const HostMat& m) {
  double a = 0;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) a = std::max(a, std::fabs(m.at(r, c)));
  return a;
}

// One ulp-ish tolerance per dtype (relative), shared by the C++ tests; mirrors tests/python/tolerances.py.
inline double rtol_of(DType t) {
  switch (t) {
    case DType::kFloat32: return 2e-5;
    case DType::kFloat16: return 2e-3;
    case DType::kBFloat16: return 1.6e-2;
    default: return 0;
  }
}

}  // namespace tigon_test
