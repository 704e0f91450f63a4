#include "common/column_sum.h"

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/env.h"

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

// The wide form (TIGON_COLUMN_SUM=wide, opt-in until timed): blockDim = (8 threads of 4 columns each, kWideRows row
// slices), 16-byte loads, four independent sums per thread, so each thread has 64 bytes in flight where the scalar
// form has one 4-byte load in a dependent chain (RMSNorm's 528 x 4096 partials: 5.4 us, ~1.6 TB/s). The slices are
// then added by a fixed tree: still the same bits every run (not the scalar form's bits: another order).
constexpr int kWideRows = 64;

__device__ __forceinline__ float4 add4(float4 x, float4 y) {
  return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

__global__ void __launch_bounds__(8 * kWideRows) column_sum_wide_kernel(Sum a, Sum b, int64_t rows, int64_t cols) {
  __shared__ float4 sums[kWideRows][8];  // a warp writes 4 consecutive 128-byte rows: no bank conflicts
  const bool second = blockIdx.y != 0;
  const float* partial = second ? b.partial : a.partial;
  const int64_t c = (int64_t(blockIdx.x) * 8 + threadIdx.x) * 4;  // cols % 4 == 0 (the launcher checks)
  const int y = int(threadIdx.y);
  float4 s[4] = {};
  if (c < cols) {
    const auto at = [&](int64_t r) { return *reinterpret_cast<const float4*>(partial + r * cols + c); };
    int64_t r = y;
    for (; r + 3 * kWideRows < rows; r += 4 * kWideRows) {
      const float4 v0 = at(r), v1 = at(r + kWideRows), v2 = at(r + 2 * kWideRows), v3 = at(r + 3 * kWideRows);
      s[0] = add4(s[0], v0);
      s[1] = add4(s[1], v1);
      s[2] = add4(s[2], v2);
      s[3] = add4(s[3], v3);
    }
    for (; r < rows; r += kWideRows) s[0] = add4(s[0], at(r));
  }
  sums[y][threadIdx.x] = add4(add4(s[0], s[1]), add4(s[2], s[3]));
  for (int half = kWideRows / 2; half > 0; half /= 2) {  // the fixed tree
    __syncthreads();
    if (y < half) sums[y][threadIdx.x] = add4(sums[y][threadIdx.x], sums[y + half][threadIdx.x]);
  }
  if (y == 0 && c < cols) {
    const float4 t = sums[0][threadIdx.x];
    void* out = second ? b.out : a.out;
    const DType dtype = second ? b.dtype : a.dtype;
    store_as(out, dtype, c, t.x);
    store_as(out, dtype, c + 1, t.y);
    store_as(out, dtype, c + 2, t.z);
    store_as(out, dtype, c + 3, t.w);
  }
}

bool wide_asked() {
  static const bool on = env_is("TIGON_COLUMN_SUM", "wide");
  return on;
}

void launch(const Sum& a, const Sum& b, unsigned sums, int64_t rows, int64_t cols, cudaStream_t stream) {
  for (const Sum* s : {&a, &b})
    if (s->dtype != DType::kFloat32 && s->dtype != DType::kFloat16 && s->dtype != DType::kBFloat16)
      fail(TIGON_ERROR_INTERNAL, "unexpected dtype ", dtype_name(s->dtype));
  if (wide_asked() && cols % 4 == 0 && aligned16(a.partial) && aligned16(b.partial)) {
    const dim3 block(8, kWideRows), grid(unsigned((cols + 31) / 32), sums);
    column_sum_wide_kernel<<<grid, block, 0, stream>>>(a, b, rows, cols);
  } else {
    const dim3 block(32, kRows), grid(unsigned((cols + 31) / 32), sums);
    column_sum_kernel<<<grid, block, 0, stream>>>(a, b, rows, cols);
  }
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void column_sum(const float* partial, int64_t rows, int64_t cols, void* out, DType out_dtype, cudaStream_t stream) {
  const Sum a{partial, out, out_dtype};
  launch(a, a, 1, rows, cols, stream);
}

void column_sum2(const float* partial_a, void* out_a, DType a_dtype, const float* partial_b, void* out_b,
                 DType b_dtype, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch(Sum{partial_a, out_a, a_dtype}, Sum{partial_b, out_b, b_dtype}, 2, rows, cols, stream);
}

}  // namespace tigon::cuda
