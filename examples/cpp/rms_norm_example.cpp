// RMSNorm from C++ without Python: y = x * rstd * w over rows of 8 floats, on the CPU reference path.
// Build: part of the CMake project (target rms_norm_example). The same calls take CUDA tensors (tigon::cuda(0) and a
// cudaStream_t) when the data lives on the GPU.
#include <cstdio>
#include <vector>

#include "tigon/tigon.hpp"

int main() {
  const int64_t rows = 2, cols = 8;
  std::vector<float> x(rows * cols), w(cols, 1.5f), y(rows * cols), rstd(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3.f;

  tigon::TensorView xv(x.data(), {rows, cols}, tigon::dtype::float32);
  tigon::TensorView wv(w.data(), {cols}, tigon::dtype::float32);
  tigon::TensorView yv(y.data(), {rows, cols}, tigon::dtype::float32);
  tigon::TensorView rv(rstd.data(), {rows}, tigon::dtype::float32);

  tigon::RMSNormParams params;
  params.eps = 1e-6f;
  try {
    tigon::rms_norm_fwd(xv, &wv, yv, &rv, params);
    // Errors come back as tigon::Error with a message naming the argument:
    tigon::TensorView bad_w(w.data(), {cols - 1}, tigon::dtype::float32);
    tigon::rms_norm_fwd(xv, &bad_w, yv, nullptr, params);
  } catch (const tigon::Error& e) {
    std::printf("expected error: %s\n", e.what());
  }
  std::printf("tigon %s\n", tigon_version());
  for (int64_t r = 0; r < rows; ++r) {
    std::printf("row %lld (rstd %.5f):", (long long)r, rstd[r]);
    for (int64_t c = 0; c < cols; ++c) std::printf(" %.4f", y[r * cols + c]);
    std::printf("\n");
  }
  return 0;
}
