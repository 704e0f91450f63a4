#include "common/column_sum.h"

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"

namespace tigon::cuda {
namespace {

// blockDim = (32 columns, kRows row slices): each thread sums every kRows-th partial row of its column, then the
// slices are added in a fixed order.
constexpr int kRows = 16;

template <class TOut>
__global__ void column_sum_kernel(const float* partial, int64_t rows, int64_t cols, TOut* out) {
  __shared__ float sums[kRows][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRows) s += partial[r * cols + c];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.f;
    for (int i = 0; i < kRows; ++i) t += sums[i][threadIdx.x];
    out[c] = from_f<TOut>(t);
  }
}

}  // namespace

void column_sum(const float* partial, int64_t rows, int64_t cols, void* out, DType out_dtype, cudaStream_t stream) {
  const dim3 block(32, kRows);
  const unsigned grid = unsigned((cols + 31) / 32);
  TIGON_SWITCH_FLOAT(out_dtype, TOut,
                     column_sum_kernel<TOut><<<grid, block, 0, stream>>>(partial, rows, cols, static_cast<TOut*>(out)));
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace tigon::cuda
