// SwiGLU / GeGLU CUDA kernels: one elementwise kernel per direction, templated on dtype, activation and vector width.
// blockDim = (threads along a row, rows per block); each thread handles V consecutive elements of a row (V = 16 bytes
// of T when every pointer and row stride allows it, else 1) and walks rows with a grid stride, so any number of rows
// fits the grid's y limit. Every element is read before it is written, which makes exact aliases (the in-place
// backward) safe. Included only by the per-dtype files swiglu_cuda_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include "common/cuda_types.cuh"
#include "tigon/swiglu.h"

namespace tigon::swiglu {

struct FwdArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t rows, cols, a_stride, b_stride, c_stride;
  float gate, down;  // the multipliers (tigon/swiglu.h)
};

struct BwdArgs {
  const void* dc;
  const void* a;
  const void* b;
  void* da;
  void* db;
  int64_t rows, cols, dc_stride, a_stride, b_stride, da_stride, db_stride;
  float gate, down;
};

namespace kern {

using cuda::load_vec;
using cuda::round_to;
using cuda::store_vec;

// act(a) and, when Grad, d act / d a, in fp32, each within a few fp32 ulp, so results stay within a rounding of
// torch's. SiLU and erf-GELU use the accurate library functions (expf, erff). The tanh-GELU is written as
// 0.5·a·(1 + tanh u) = a·σ(2u), u = √(2/π)(a + 0.044715a³): one ex2 and one reciprocal on the SFU (2 ulp each) in
// place of tanhf, whose two branches (polynomial below |u| 0.6, exponential above) both ran in most warps and made
// the GeGLU forward ~4% slower than SwiGLU's. σ(2u) needs no cancellation (1 + tanh u loses the digits of small
// results for negative a), and 2^(+large) = inf gives σ = 0 exactly.
template <int Act, bool Grad>
__device__ __forceinline__ float act(float a, float* grad) {
  if constexpr (Act == TIGON_GLU_SILU) {
    const float s = 1.f / (1.f + expf(-a));
    if constexpr (Grad) *grad = s * (1.f + a * (1.f - s));
    return a * s;
  } else if constexpr (Act == TIGON_GLU_GELU_TANH) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
    constexpr float k1 = -2.f * 1.4426950408889634f * kSqrt2OverPi, k3 = k1 * kCubic;  // 2^(a(k1 + k3 a²)) = e^(-2u)
    const float a2 = a * a;
    const float s = cuda::rcp_fast(1.f + cuda::exp2_fast(a * fmaf(k3, a2, k1)));  // σ(2u)
    if constexpr (Grad) *grad = s + 2.f * a * s * (1.f - s) * kSqrt2OverPi * (1.f + 3.f * kCubic * a2);
    return a * s;
  } else {
    constexpr float kInvSqrt2 = 0.7071067811865476f, kInvSqrt2Pi = 0.3989422804014327f;
    const float cdf = 0.5f * (1.f + erff(a * kInvSqrt2));
    if constexpr (Grad) *grad = cdf + a * kInvSqrt2Pi * expf(-0.5f * a * a);
    return a * cdf;
  }
}

template <class T, int Act, int V>
__global__ void glu_fwd(FwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += row_step) {
    float a[V], b[V], c[V];
    load_vec<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a);
    load_vec<T, V>(static_cast<const T*>(p.b) + row * p.b_stride + col, b);
    // Rounded where Hugging Face's `act_fn(a * g) * b` rounds in T (a * 1 and products with 1 are exact: the default
    // costs a few register operations per element, no memory traffic).
#pragma unroll
    for (int j = 0; j < V; ++j)
      c[j] = round_to<T>(act<Act, false>(round_to<T>(a[j] * p.gate), nullptr)) * b[j] * p.down;
    store_vec<T, V>(static_cast<T*>(p.c) + row * p.c_stride + col, c);
  }
}

template <class T, int Act, int V>
__global__ void glu_bwd(BwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += row_step) {
    float a[V], b[V], dc[V], da[V], db[V];
    load_vec<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a);
    load_vec<T, V>(static_cast<const T*>(p.b) + row * p.b_stride + col, b);
    load_vec<T, V>(static_cast<const T*>(p.dc) + row * p.dc_stride + col, dc);
#pragma unroll
    for (int j = 0; j < V; ++j) {  // the roundings autograd takes through Hugging Face's module
      float grad;
      const float f = act<Act, true>(round_to<T>(a[j] * p.gate), &grad), u = dc[j] * p.down;
      da[j] = round_to<T>(round_to<T>(u * b[j]) * grad) * p.gate;
      db[j] = u * round_to<T>(f);
    }
    store_vec<T, V>(static_cast<T*>(p.da) + row * p.da_stride + col, da);
    store_vec<T, V>(static_cast<T*>(p.db) + row * p.db_stride + col, db);
  }
}

}  // namespace kern
}  // namespace tigon::swiglu
