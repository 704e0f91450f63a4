// Pointwise activation CUDA kernels, templated on dtype, activation and vector width. blockDim = (threads along a
// row, rows per block); each thread handles V consecutive elements of a row (V = 16 bytes of T when every pointer and
// row stride allows it, else 1) and walks rows with a grid stride, so any number of rows fits the grid's y limit.
// Every element is read before it is written, which makes exact aliases (in place) safe.
//  - act_fwd_kernel: y = act(x (+ bias)) (+ residual), one rounding (linear + activation's SiLU / GELU-erf / residual
//    step; the bias per column when the GEMM before it ran bare).
//  - act_bwd_kernel: dx = dy * act'(saved), one rounding; with Sum, also the column sums of the rounded dx over the
//    block's rows (blockDim must then be (32, kSumRows)), written as one fp32 partial row per blockIdx.y: linear +
//    activation's bias gradient, finished by common/column_sum in a fixed order (deterministic).
#pragma once

#include <cuda_runtime.h>

#include "activation/activation.h"
#include "common/activation_math.cuh"
#include "common/cuda_types.cuh"

namespace tigon::activation {

struct FwdArgs {
  const void* x;
  const void* bias;      // [cols], added before the activation; nullptr: none
  const void* residual;  // nullptr: none
  void* y;
  int64_t rows, cols, x_stride, r_stride, y_stride;
};

struct BwdArgs {
  const void* dy;
  const void* saved;
  void* dx;        // nullptr: not written
  float* partial;  // nullptr: no sums
  int64_t rows, cols, dy_stride, s_stride, dx_stride;
};

namespace kern {

using cuda::load_vec;
using cuda::round_to;
using cuda::store_vec;

template <class T, int Act, int V, bool Residual>
__global__ void act_fwd_kernel(FwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  float b[V];  // a thread's columns are the same on every row it walks: their bias is read once
  if (p.bias) load_vec<T, V>(static_cast<const T*>(p.bias) + col, b);
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += row_step) {
    float x[V], y[V], r[V];
    const T* xp = static_cast<const T*>(p.x) + row * p.x_stride + col;
    if constexpr (Residual)
      cuda::load_vecs<T, V>(xp, x, static_cast<const T*>(p.residual) + row * p.r_stride + col, r);
    else
      load_vec<T, V>(xp, x);
    if (p.bias)
#pragma unroll
      for (int j = 0; j < V; ++j) x[j] += b[j];
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = cuda::act_fwd<Act>(x[j]);
    if constexpr (Residual) {
#pragma unroll
      for (int j = 0; j < V; ++j) y[j] += r[j];
    }
    store_vec<T, V>(static_cast<T*>(p.y) + row * p.y_stride + col, y);
  }
}

template <class T, int Act, int V, bool Sum>
__global__ void act_bwd_kernel(BwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const bool live = col < p.cols;
  if (!Sum && !live) return;
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; live && row < p.rows; row += row_step) {
    float dy[V], s[V], dx[V];
    const T* dyp = static_cast<const T*>(p.dy) + row * p.dy_stride + col;
    if constexpr (Act != TIGON_ACT_NONE)
      cuda::load_vecs<T, V>(dyp, dy, static_cast<const T*>(p.saved) + row * p.s_stride + col, s);
    else
      load_vec<T, V>(dyp, dy);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (Act == TIGON_ACT_NONE)
        dx[j] = dy[j];
      else if constexpr (Act == kActRelu2FromOutput)
        dx[j] = round_to<T>(cuda::act_bwd_relu2_from_output(s[j], dy[j]));
      else
        dx[j] = round_to<T>(cuda::act_bwd<Act>(s[j], dy[j]));
      if constexpr (Sum) sum[j] += dx[j];
    }
    if (p.dx) store_vec<T, V>(static_cast<T*>(p.dx) + row * p.dx_stride + col, dx);
  }
  if constexpr (Sum) {
    // The block's kSumRows row slices, added in a fixed order: one partial row per blockIdx.y. Element j of thread
    // x sits at j * 32 + x, so a warp's stores and each summing thread's loads hit 32 different banks.
    __shared__ float part[kSumRows][32 * V];
#pragma unroll
    for (int j = 0; j < V; ++j) part[threadIdx.y][j * 32 + threadIdx.x] = sum[j];
    __syncthreads();
    for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < 32 * V; i += blockDim.x * blockDim.y) {
      const int64_t c = (int64_t(blockIdx.x) * 32 + i % 32) * V + i / 32;  // thread i % 32's element i / 32
      if (c >= p.cols) continue;
      float t = 0.f;
      for (int y = 0; y < kSumRows; ++y) t += part[y][i];
      p.partial[int64_t(blockIdx.y) * p.cols + c] = t;
    }
  }
}

}  // namespace kern
}  // namespace tigon::activation
