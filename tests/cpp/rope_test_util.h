// 4-D host tensors for the RoPE tests: a (possibly padded) slice of a bigger buffer, so the strides are not the
// contiguous ones, plus the random cos/sin tables and the case description both RoPE test files share.
#pragma once

#include <array>
#include <functional>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tigon/rope.h"

namespace tigon_test {

struct Host4 {
  DType dtype;
  std::array<int64_t, 4> shape, stride;
  std::vector<uint8_t> bytes;
  // pad[i] extra entries along dim i of the enclosing buffer (pad[3]: extra elements at the end of each row).
  Host4(DType t, std::array<int64_t, 4> s, std::array<int64_t, 4> pad = {0, 0, 0, 0}) : dtype(t), shape(s) {
    stride[3] = 1;
    for (int i = 2; i >= 0; --i) stride[i] = stride[i + 1] * (shape[i + 1] + pad[i + 1]);
    bytes.resize(size_t(stride[0] * (shape[0] + pad[0]) * tigon::dtype_bytes(t)) + 16);
  }
  int64_t index(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3];
  }
  double at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return tigon::load_elem(bytes.data(), dtype, index(a, b, c, d));
  }
  void set(int64_t a, int64_t b, int64_t c, int64_t d, double v) {
    tigon::store_elem(bytes.data(), dtype, index(a, b, c, d), v);
  }
  template <class F>
  void each(F f) const {
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        for (int64_t c = 0; c < shape[2]; ++c)
          for (int64_t d = 0; d < shape[3]; ++d) f(a, b, c, d);
  }
  void fill_random(std::mt19937& rng) {
    std::normal_distribution<double> n(0.0, 1.0);
    each([&](int64_t a, int64_t b, int64_t c, int64_t d) { set(a, b, c, d, n(rng)); });
  }
  void poison() {
    each([&](int64_t a, int64_t b, int64_t c, int64_t d) { set(a, b, c, d, std::nan("")); });
  }
  tigon::TensorView view(void* ptr = nullptr, tigon_device dev = tigon::cpu()) {
    return tigon::TensorView(ptr ? ptr : bytes.data(), {shape[0], shape[1], shape[2], shape[3]}, to_dl(dtype), dev,
                             {stride[0], stride[1], stride[2], stride[3]});
  }
};

// cos/sin tables (Bc, T, R) as Hugging Face builds them: rotate-half duplicates the angles over the two halves,
// interleaved repeats each angle twice. When `hf_like` is false the entries are independent random values, which
// checks that the op reads both members of a pair at their own positions.
inline void fill_tables(Host4& cos, Host4& sin, bool interleaved, bool hf_like, std::mt19937& rng) {
  std::uniform_real_distribution<double> ang(-3.1, 3.1);
  const int64_t R = cos.shape[3];
  for (int64_t b = 0; b < cos.shape[1]; ++b)
    for (int64_t t = 0; t < cos.shape[2]; ++t)
      for (int64_t j = 0; j < R; ++j) {
        const int64_t k = interleaved ? j / 2 : j % (R / 2);  // angle index HF would use
        const double th = hf_like ? 0.1 * (t + 1) * (k + 1) + 0.3 * b : ang(rng);
        const double th2 = hf_like ? th : ang(rng);
        cos.set(0, b, t, j, std::cos(th));
        sin.set(0, b, t, j, std::sin(th2));
      }
}

// A 3-D view over dims 1..3 of a Host4 whose dim 0 has size 1.
inline tigon::TensorView table_view(Host4& h, void* ptr = nullptr, tigon_device dev = tigon::cpu()) {
  return tigon::TensorView(ptr ? ptr : h.bytes.data(), {h.shape[1], h.shape[2], h.shape[3]}, to_dl(h.dtype), dev,
                           {h.stride[1], h.stride[2], h.stride[3]});
}

}  // namespace tigon_test
