#include "common/column_sum.h"

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"

namespace tigon::cuda {
namespace {

// blockDim = (32 columns, kRows row slices): each thread sums every kRows-th partial row of its column, then the
// slices are added in a fixed order. blockIdx.y picks one of up to two sums, so dW and dB share a launch.
constexpr int kRows = 16;

struct Sum {
  const float* partial;
  void* out;
  DType dtype;
};

__device__ __forceinline__ void store_as(void* out, DType dtype, int64_t c, float v) {
  switch (dtype) {  // uniform across the block: no divergence
    case DType::kFloat16: static_cast<__half*>(out)[c] = from_f<__half>(v); break;
    case DType::kBFloat16: static_cast<__nv_bfloat16*>(out)[c] = from_f<__nv_bfloat16>(v); break;
    default: static_cast<float*>(out)[c] = v; break;
  }
}

__global__ void column_sum_kernel(Sum a, Sum b, int64_t rows, int64_t cols) {
  __shared__ float sums[kRows][33];
  const bool second = blockIdx.y != 0;  // fields picked one by one: a reference to either parameter costs a stack copy
  const float* partial = second ? b.partial : a.partial;
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRows) s += partial[r * cols + c];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.f;
    for (int i = 0; i < kRows; ++i) t += sums[i][threadIdx.x];
    store_as(second ? b.out : a.out, second ? b.dtype : a.dtype, c, t);
  }
}

void launch(const Sum& a, const Sum& b, unsigned sums, int64_t rows, int64_t cols, cudaStream_t stream) {
  for (const Sum* s : {&a, &b})
    if (s->dtype != DType::kFloat32 && s->dtype != DType::kFloat16 && s->dtype != DType::kBFloat16)
      fail(TIGON_ERROR_INTERNAL, "unexpected dtype ", dtype_name(s->dtype));
  const dim3 block(32, kRows), grid(unsigned((cols + 31) / 32), sums);
  column_sum_kernel<<<grid, block, 0, stream>>>(a, b, rows, cols);
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void column_sum(const float* partial, int64_t rows, int64_t cols, void* out, DType out_dtype, cudaStream_t stream) {
  const Sum a{partial, out, out_dtype};
  launch(a, a, 1, rows, cols, stream);
}

void column_sum2(const float* partial_a, void* out_a, DType a_dtype, const float* partial_b, void* out_b, DType b_dtype,
                 int64_t rows, int64_t cols, cudaStream_t stream) {
  launch(Sum{partial_a, out_a, a_dtype}, Sum{partial_b, out_b, b_dtype}, 2, rows, cols, stream);
}

}  // namespace tigon::cuda
