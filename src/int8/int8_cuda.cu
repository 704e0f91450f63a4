// Int8 CUDA path.
//  quantize_rows: one block per row; pass 1 finds max |x| (16-byte loads where rows are aligned), a block max, then
//                 pass 2 re-reads the row (from L1 / L2) and writes round-half-even(x / scale) as int8.
//  int8_linear:   on sm_90 with operands TMA takes, one CUTLASS GEMM with the dequantization in its epilogue
//                 (int8_gemm_sm90.cu); else [cuBLASLt int8 GEMM, int32 accumulation -> workspace (row-major
//                 [M, N])] -> [dequantize + bias + activation: 4 int32 per thread (one 16-byte load), one rounding].
// Row-major [r, c] with row stride s is column-major c x r with leading dimension s, so the int32 products (column-
// major N x M) = q_wᵀ · q_x: cuBLASLt's "TN" form, the one its int8 tensor-core kernels take.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/activation_math.cuh"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/matmul.h"
#include "int8/int8.h"

namespace tigon::int8 {
namespace {

constexpr int kQuantThreads = 256;

__device__ __forceinline__ float block_max(float v, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  float m = smem[0];
#pragma unroll
  for (int i = 1; i < kQuantThreads / 32; ++i) m = fmaxf(m, smem[i]);
  return m;
}

__device__ __forceinline__ int8_t quantize_one(float x, float s) {
  const float r = s > 0.f ? rintf(x / s) : 0.f;
  return int8_t(fminf(127.f, fmaxf(-127.f, r)));
}

// V: elements per load (16 / sizeof(T), or 1).
template <class T, int V>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows(const T* x, int64_t x_stride, int8_t* q, int64_t q_stride, float* scale, int64_t K) {
  __shared__ float smem[kQuantThreads / 32];
  const int64_t m = blockIdx.x;
  const T* row = x + m * x_stride;
  float amax = 0.f;
  for (int64_t k = int64_t(threadIdx.x) * V; k < K; k += int64_t(kQuantThreads) * V) {
    float f[V];
    cuda::load_vec<T, V>(row + k, f);
#pragma unroll
    for (int j = 0; j < V; ++j) amax = fmaxf(amax, fabsf(f[j]));
  }
  amax = block_max(amax, smem);
  const float s = amax / 127.f;
  if (threadIdx.x == 0) scale[m] = s;
  int8_t* qrow = q + m * q_stride;
  for (int64_t k = int64_t(threadIdx.x) * V; k < K; k += int64_t(kQuantThreads) * V) {
    float f[V];
    cuda::load_vec<T, V>(row + k, f);
    if constexpr (V == 1) {
      qrow[k] = quantize_one(f[0], s);
    } else {
      uint32_t w[V / 4];
#pragma unroll
      for (int i = 0; i < V / 4; ++i) {
        w[i] = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) w[i] |= uint32_t(uint8_t(quantize_one(f[4 * i + j], s))) << (8 * j);
      }
      if constexpr (V == 8) {
        *reinterpret_cast<uint2*>(qrow + k) = make_uint2(w[0], w[1]);
      } else {
        *reinterpret_cast<uint32_t*>(qrow + k) = w[0];
      }
    }
  }
}

template <class T>
void launch_quantize(const QuantizeProblem& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const bool vec = p.x.cols % V == 0 && cuda::aligned16(p.x.data) && (p.x.rows <= 1 || p.x.row_stride % V == 0) &&
                   reinterpret_cast<uintptr_t>(p.q.data) % V == 0 && (p.q.rows <= 1 || p.q.row_stride % V == 0);
  const auto* x = static_cast<const T*>(p.x.data);
  auto* q = static_cast<int8_t*>(p.q.data);
  constexpr int64_t kMaxGrid = 2147483647;
  for (int64_t m0 = 0; m0 < p.x.rows; m0 += kMaxGrid) {
    const unsigned blocks = unsigned(std::min(kMaxGrid, p.x.rows - m0));
    if (vec)
      quantize_rows<T, V><<<blocks, kQuantThreads, 0, stream>>>(
          x + m0 * p.x.row_stride, p.x.row_stride, q + m0 * p.q.row_stride, p.q.row_stride, p.scale + m0, p.x.cols);
    else
      quantize_rows<T, 1><<<blocks, kQuantThreads, 0, stream>>>(
          x + m0 * p.x.row_stride, p.x.row_stride, q + m0 * p.q.row_stride, p.q.row_stride, p.scale + m0, p.x.cols);
    TIGON_CUDA_CHECK_LAUNCH();
  }
}

struct EpilogueArgs {
  const int32_t* acc;  // [M, N], row stride N
  const float* scale_x;
  const float* scale_w;
  const void* bias;
  void* out;
  int64_t M, N, out_stride;
};

// out[m, n .. n + 4) = act(float(acc) * scale_x[m] * scale_w[n] + bias[n]); N % 4 == 0, so 4 never cross a row.
// Vec: out's rows take one 4-element store (8 or 16 bytes aligned).
template <class T, int Act, bool Vec>
__global__ void __launch_bounds__(256) dequantize(const EpilogueArgs a) {
  const int64_t per_row = a.N / 4, total = a.M * per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / per_row, n = (i - m * per_row) * 4;
    const int4 v = reinterpret_cast<const int4*>(a.acc)[i];
    const int32_t iv[4] = {v.x, v.y, v.z, v.w};
    const float sx = a.scale_x[m];
    float f[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float y = float(iv[j]) * sx * a.scale_w[n + j];
      if (a.bias) y += cuda::to_f<T>(static_cast<const T*>(a.bias)[n + j]);
      f[j] = cuda::act_fwd<Act>(y);
    }
    T* o = static_cast<T*>(a.out) + m * a.out_stride + n;
    if constexpr (Vec && sizeof(T) == 2) {
      *reinterpret_cast<uint2*>(o) = make_uint2(cuda::pack2<T>(f[0], f[1]), cuda::pack2<T>(f[2], f[3]));
    } else if constexpr (Vec) {
      *reinterpret_cast<float4*>(o) = make_float4(f[0], f[1], f[2], f[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = cuda::from_f<T>(f[j]);
    }
  }
}

template <class T, int Act>
void launch_dequantize_vec(const EpilogueArgs& a, bool vec, cudaStream_t stream) {
  const int64_t total = a.M * (a.N / 4);
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, int64_t(1) << 20));
  if (vec)
    dequantize<T, Act, true><<<blocks, 256, 0, stream>>>(a);
  else
    dequantize<T, Act, false><<<blocks, 256, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_dequantize(const EpilogueArgs& a, int act, bool vec, cudaStream_t stream) {
  switch (act) {
    case TIGON_ACT_RELU: return launch_dequantize_vec<T, TIGON_ACT_RELU>(a, vec, stream);
    case TIGON_ACT_GELU_ERF: return launch_dequantize_vec<T, TIGON_ACT_GELU_ERF>(a, vec, stream);
    case TIGON_ACT_GELU_TANH: return launch_dequantize_vec<T, TIGON_ACT_GELU_TANH>(a, vec, stream);
    case TIGON_ACT_SILU: return launch_dequantize_vec<T, TIGON_ACT_SILU>(a, vec, stream);
    default: return launch_dequantize_vec<T, TIGON_ACT_NONE>(a, vec, stream);
  }
}

}  // namespace

void quantize_cuda(const QuantizeProblem& p, void* stream) {
  TIGON_SWITCH_FLOAT(p.x.dtype, T, launch_quantize<T>(p, static_cast<cudaStream_t>(stream)));
}

void linear_cuda(const LinearProblem& p, void* workspace, void* stream) {
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  if (linear_fused_applies(p, device)) return linear_fused_cuda(p, workspace, kGemmWorkspace, device, stream);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t M = p.qx.rows, N = p.qw.rows;
  auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(workspace) + (kGemmWorkspace + 255) / 256 * 256);
  cuda::Matmul mm;  // acc (column-major N x M) = q_w (K x N)ᵀ · q_x (K x M)
  mm.ab = DType::kInt8;
  mm.d = DType::kInt32;
  mm.trans_a = true;
  mm.m = N, mm.n = M, mm.k = p.qx.cols;
  mm.a = p.qw.data, mm.lda = p.qw.row_stride;
  mm.b = p.qx.data, mm.ldb = p.qx.row_stride;
  mm.dst = acc, mm.ldd = N;
  cuda::matmul(mm, workspace, kGemmWorkspace, s);
  const EpilogueArgs a{acc, p.scale_x, p.scale_w, p.bias, p.out.data, M, N, p.out.row_stride};
  const int64_t elt = dtype_bytes(p.out.dtype);
  const bool vec = reinterpret_cast<uintptr_t>(p.out.data) % (4 * elt) == 0 && (M <= 1 || p.out.row_stride % 4 == 0);
  TIGON_SWITCH_FLOAT(p.out.dtype, T, launch_dequantize<T>(a, p.activation, vec, s));
}

}  // namespace tigon::int8
