// What every GPU-vs-reference test needs: the skip without a device, and device copies of host matrices.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "common/norm_testing.h"
#include "test_util.h"

namespace tigon_test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU()       \
  if (!::tigon_test::have_gpu()) \
  GTEST_SKIP() << "no CUDA device: the GPU tests run on the GPU machine (scripts/gpu-check)"

// Runs a test on the normalizations' uncached kernels (RMSNorm, LayerNorm), restoring the library's plan after.
class UncachedNorms : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tigon_testing_norm_uncached(1), TIGON_SUCCESS); }
  void TearDown() override { tigon_testing_norm_uncached(0); }
};

// A device copy of a host matrix (same layout and strides), fetched back on demand.
struct DevMat {
  HostMat& host;
  void* ptr = nullptr;
  explicit DevMat(HostMat& h) : host(h) {
    EXPECT_EQ(cudaMalloc(&ptr, h.span_bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.data(), h.span_bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevMat() { cudaFree(ptr); }
  DevMat(const DevMat&) = delete;
  DevMat& operator=(const DevMat&) = delete;

  tigon::TensorView view() { return host.view(tigon::cuda(0), ptr); }
  tigon::TensorView vec_view(int64_t n) { return tigon::TensorView(ptr, {n}, to_dl(host.dtype), tigon::cuda(0)); }
  // columns [first, first + cols) of every row
  tigon::TensorView cols_view(int64_t first, int64_t cols) {
    return tigon::TensorView(static_cast<char*>(ptr) + first * tigon::dtype_bytes(host.dtype), {host.rows, cols},
                             to_dl(host.dtype), tigon::cuda(0), {host.stride, 1});
  }
  HostMat fetch() {
    HostMat out = host;
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, out.span_bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

}  // namespace tigon_test
