// PolyNorm CUDA path: one block per row (grid-stride over rows), 16-byte vectors where the rows allow. The forward
// reads a row twice (its three sums of powers, then the output); the backward reads x and dy twice (the three
// projections of dy onto the normalised powers, then dx) and keeps each thread's share of the parameter sums across
// its rows, which the block adds up at the end into one partial row; common/column_sum adds the partial rows in a
// fixed order (the same bits on every run).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/reduce.cuh"
#include "poly_norm/poly_norm.h"

namespace tigon::poly_norm {
namespace {

using cuda::load_vec;
using cuda::row_sum;
using cuda::store_vec;

constexpr int kThreads = 256;

struct Args {
  const void *x, *dy;
  void *y, *dx;
  const float *weight, *bias, *rstd_in;
  float* rstd_out;
  float *part_w, *part_b;  // [gridDim.x, 3] and [gridDim.x]
  int64_t rows, cols, x_stride, y_stride, dy_stride, dx_stride;
  float eps;
};

template <class T, int V>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const Args a) {
  __shared__ float smem[kThreads / 32];
  const float w0 = a.weight[0], w1 = a.weight[1], w2 = a.weight[2], b = *a.bias, inv_c = 1.f / float(a.cols);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
    float s2 = 0.f, s4 = 0.f, s6 = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float v[V];
      load_vec<T, V>(x + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float x2 = v[j] * v[j];
        s2 += x2, s4 = fmaf(x2, x2, s4), s6 = fmaf(x2 * x2, x2, s6);
      }
    }
    const float r3 = rsqrtf(row_sum(s6, smem) * inv_c + a.eps), r2 = rsqrtf(row_sum(s4, smem) * inv_c + a.eps);
    const float r1 = rsqrtf(row_sum(s2, smem) * inv_c + a.eps);
    if (a.rstd_out && threadIdx.x == 0) {
      a.rstd_out[row * 3] = r3, a.rstd_out[row * 3 + 1] = r2, a.rstd_out[row * 3 + 2] = r1;
    }
    const float c3 = w0 * r3, c2 = w1 * r2, c1 = w2 * r1;
    T* y = static_cast<T*>(a.y) + row * a.y_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float v[V];
      load_vec<T, V>(x + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = fmaf(c3 * v[j], v[j] * v[j], fmaf(c2 * v[j], v[j], fmaf(c1, v[j], b)));
      store_vec<T, V>(y + c, v);
    }
  }
}

template <class T, int V, bool Sums>
__global__ void __launch_bounds__(kThreads) bwd_kernel(const Args a) {
  __shared__ float smem[kThreads / 32];
  const float w0 = a.weight[0], w1 = a.weight[1], w2 = a.weight[2], inv_c = 1.f / float(a.cols);
  float acc3 = 0.f, acc2 = 0.f, acc1 = 0.f, accb = 0.f;  // this thread's share of the parameter sums
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
    const T* dy = static_cast<const T*>(a.dy) + row * a.dy_stride;
    const float r3 = a.rstd_in[row * 3], r2 = a.rstd_in[row * 3 + 1], r1 = a.rstd_in[row * 3 + 2];
    float t3 = 0.f, t2 = 0.f, t1 = 0.f, tb = 0.f;  // sums of g * x^p (r applied after)
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float v[V], g[V];
      load_vec<T, V>(x + c, v);
      load_vec<T, V>(dy + c, g);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gx = g[j] * v[j];
        t1 += gx, t2 = fmaf(gx, v[j], t2), t3 = fmaf(gx * v[j], v[j], t3), tb += g[j];
      }
    }
    if constexpr (Sums) acc3 = fmaf(t3, r3, acc3), acc2 = fmaf(t2, r2, acc2), acc1 = fmaf(t1, r1, acc1), accb += tb;
    if (!a.dx) continue;  // uniform across the block: no reduction below is skipped by part of it
    const float m3 = row_sum(t3, smem) * r3 * inv_c, m2 = row_sum(t2, smem) * r2 * inv_c;
    const float m1 = row_sum(t1, smem) * r1 * inv_c;
    // dx = sum_p w r (g - x^p r m) p x^(p-1)
    const float a3 = 3.f * w0 * r3, a2 = 2.f * w1 * r2, a1 = w2 * r1;
    T* dx = static_cast<T*>(a.dx) + row * a.dx_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float v[V], g[V];
      load_vec<T, V>(x + c, v);
      load_vec<T, V>(dy + c, g);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float x1 = v[j], x2 = x1 * x1;
        const float d3 = a3 * x2 * (g[j] - x2 * x1 * r3 * m3);
        const float d2 = a2 * x1 * (g[j] - x2 * r2 * m2);
        const float d1 = a1 * (g[j] - x1 * r1 * m1);
        g[j] = d3 + d2 + d1;
      }
      store_vec<T, V>(dx + c, g);
    }
  }
  if constexpr (Sums) {
    const float s3 = row_sum(acc3, smem), s2 = row_sum(acc2, smem), s1 = row_sum(acc1, smem);
    const float sb = row_sum(accb, smem);
    if (threadIdx.x == 0) {
      a.part_w[blockIdx.x * 3] = s3, a.part_w[blockIdx.x * 3 + 1] = s2, a.part_w[blockIdx.x * 3 + 2] = s1;
      a.part_b[blockIdx.x] = sb;
    }
  }
}

bool vectorizable(const RowMatrix& m) {
  const int v = 16 / dtype_bytes(m.dtype);
  return m.data == nullptr || (m.cols % v == 0 && cuda::aligned16(m.data) && (m.rows <= 1 || m.row_stride % v == 0));
}

unsigned block_threads(int64_t cols, int v) {
  int t = 32;
  while (t < kThreads && int64_t(t) * v * 2 < cols) t *= 2;  // at least two vectors per thread once the block is full
  return unsigned(t);
}

template <class T>
void fwd_typed(const Args& a, bool vec, unsigned grid, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  if (vec)
    fwd_kernel<T, V><<<grid, block_threads(a.cols, V), 0, s>>>(a);
  else
    fwd_kernel<T, 1><<<grid, block_threads(a.cols, 1), 0, s>>>(a);
}

template <class T>
void bwd_typed(const Args& a, bool vec, bool sums, unsigned grid, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  const unsigned vt = block_threads(a.cols, V), st = block_threads(a.cols, 1);
  if (vec && sums)
    bwd_kernel<T, V, true><<<grid, vt, 0, s>>>(a);
  else if (vec)
    bwd_kernel<T, V, false><<<grid, vt, 0, s>>>(a);
  else if (sums)
    bwd_kernel<T, 1, true><<<grid, st, 0, s>>>(a);
  else
    bwd_kernel<T, 1, false><<<grid, st, 0, s>>>(a);
}

}  // namespace

int64_t partial_rows(int64_t rows, int device) {
  return std::max<int64_t>(1, std::min<int64_t>(rows, 2 * int64_t(sm_count(device))));
}

size_t cuda_workspace_bytes(int64_t rows, int device) {
  return size_t(partial_rows(rows, device)) * 4 * sizeof(float);  // [blocks, 4]: the three weights' sums and bias's
}

void fwd_cuda(const FwdProblem& p, void* stream) {
  Args a{};
  a.x = p.x.data, a.y = p.y.data, a.weight = p.weight, a.bias = p.bias, a.rstd_out = p.rstd, a.eps = p.eps;
  a.rows = p.x.rows, a.cols = p.x.cols, a.x_stride = p.x.row_stride, a.y_stride = p.y.row_stride;
  const unsigned grid = unsigned(std::min<int64_t>(p.x.rows, 65535 * 32));
  const bool vec = vectorizable(p.x) && vectorizable(p.y);
  TIGON_SWITCH_FLOAT(p.x.dtype, T, fwd_typed<T>(a, vec, grid, static_cast<cudaStream_t>(stream)));
  TIGON_CUDA_CHECK_LAUNCH();
}

void bwd_cuda(const BwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool sums = p.dweight || p.dbias;
  if (p.x.rows == 0) {  // empty sums
    if (p.dweight) TIGON_CUDA_CHECK(cudaMemsetAsync(p.dweight, 0, 3 * sizeof(float), s));
    if (p.dbias) TIGON_CUDA_CHECK(cudaMemsetAsync(p.dbias, 0, sizeof(float), s));
    return;
  }
  if (!sums && !p.dx.data) return;
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  Args a{};
  a.x = p.x.data, a.dy = p.dy.data, a.dx = p.dx.data, a.weight = p.weight, a.rstd_in = p.rstd;
  a.rows = p.x.rows, a.cols = p.x.cols, a.x_stride = p.x.row_stride, a.dy_stride = p.dy.row_stride;
  a.dx_stride = p.dx.row_stride;
  const int64_t P = partial_rows(p.x.rows, device);
  if (sums) {
    a.part_w = static_cast<float*>(workspace);
    a.part_b = a.part_w + P * 3;
  }
  const bool vec = vectorizable(p.x) && vectorizable(p.dy) && vectorizable(p.dx);
  TIGON_SWITCH_FLOAT(p.x.dtype, T, bwd_typed<T>(a, vec, sums, unsigned(P), s));
  TIGON_CUDA_CHECK_LAUNCH();
  if (p.dweight) cuda::column_sum(a.part_w, P, 3, p.dweight, DType::kFloat32, s);
  if (p.dbias) cuda::column_sum(a.part_b, P, 1, p.dbias, DType::kFloat32, s);
}

}  // namespace tigon::poly_norm
