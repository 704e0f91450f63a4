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

// act(a) and dy · act'(a) in fp32 by the formulas, and in the order, of torch's own CUDA kernels for silu and gelu
// (and their backward), so that each result lands on the rounding Hugging Face's module gets: one fp32 ulp apart is
// enough to flip a bf16 rounding, and at Liger's test tolerance a few flipped activations move near-zero outputs of
// the next projection past 1e-2. (A faster tanh-GELU form, a·σ(2u) on the SFU, cost that parity and was dropped:
// docs/performance/swiglu-geglu.md.) Compiled without fast-math, expf / tanhf / erff are the accurate library
// functions torch uses too.
constexpr float kGeluTanhBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluTanhKappa = 0.044715f;
constexpr float kGeluErfAlpha = 0.7071067811865476f;  // 1 / sqrt(2)
constexpr float kGeluErfBeta = 0.3989422804014327f;   // 1 / sqrt(2 pi)

template <int Act>
__device__ __forceinline__ float act_fwd(float x) {
  if constexpr (Act == TIGON_GLU_SILU) {
    return x / (1.f + expf(-x));
  } else if constexpr (Act == TIGON_GLU_GELU_TANH) {
    const float x_cube = x * x * x;
    const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
    return 0.5f * x * (1.f + tanhf(inner));
  } else {
    return x * 0.5f * (1.f + erff(x * kGeluErfAlpha));
  }
}

template <int Act>
__device__ __forceinline__ float act_bwd(float x, float dy) {
  if constexpr (Act == TIGON_GLU_SILU) {
    const float sigmoid = 1.f / (1.f + expf(-x));
    return dy * sigmoid * (1.f + x * (1.f - sigmoid));
  } else if constexpr (Act == TIGON_GLU_GELU_TANH) {
    const float x_sq = x * x, x_cube = x_sq * x;
    const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
    const float tanh_inner = tanhf(inner);
    const float left = 0.5f * x, right = 1.f + tanh_inner;
    const float left_derivative = 0.5f * right;
    const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
    const float inner_derivative = kGeluTanhBeta * (1.f + 3.f * kGeluTanhKappa * x_sq);
    const float right_derivative = left * tanh_derivative * inner_derivative;
    return dy * (left_derivative + right_derivative);
  } else {
    const float cdf = 0.5f * (1.f + erff(x * kGeluErfAlpha));
    const float pdf = expf(-0.5f * x * x) * kGeluErfBeta;
    return dy * (cdf + x * pdf);
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
    for (int j = 0; j < V; ++j) c[j] = round_to<T>(act_fwd<Act>(round_to<T>(a[j] * p.gate))) * b[j] * p.down;
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
      const float x = round_to<T>(a[j] * p.gate), u = dc[j] * p.down;
      da[j] = round_to<T>(act_bwd<Act>(x, round_to<T>(u * b[j]))) * p.gate;
      db[j] = u * round_to<T>(act_fwd<Act>(x));
    }
    store_vec<T, V>(static_cast<T*>(p.da) + row * p.da_stride + col, da);
    store_vec<T, V>(static_cast<T*>(p.db) + row * p.db_stride + col, db);
  }
}

}  // namespace kern
}  // namespace tigon::swiglu
