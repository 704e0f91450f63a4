// LayerNorm CUDA kernels, shaped like RMSNorm's (src/rms_norm/rms_norm_kernels.cuh). Two kernels per direction:
//  * cached: each row is read once into registers (NV vectors of V elements per thread, V = 16 bytes of x), so the
//    forward moves exactly x in + y out and the backward x, dy in + dx out. The variance is taken around the mean
//    from those registers (no E[x^2] - mean^2 cancellation). blockDim = (threads per row, rows per block). Used when
//    a row fits and every pointer and row stride is 16-byte aligned.
//  * uncached: one row per block iteration, any row length, V = 1 for unaligned data. The forward reads the row three
//    times (mean, centred variance, output), the backward twice; repeated reads mostly hit L2.
// Backward dw / db: each block adds dy * xhat and dy over the rows it visits into fp32 partials (one row of each
// partial array per block row slot), and param_reduce sums those in a fixed order: deterministic, no atomics.
#pragma once

#include "common/cuda_types.cuh"
#include "common/reduce.cuh"

namespace tigon::layer_norm {

struct FwdArgs {
  const void* x;
  const void* w;  // nullptr: scale 1
  const void* b;  // nullptr: shift 0
  void* y;
  float* mean;  // nullptr: statistics not saved (then rstd is nullptr too)
  float* rstd;
  int64_t rows, cols, x_stride, y_stride;
  float eps;
};

struct BwdArgs {
  const void* dy;
  const void* x;
  const void* w;
  const float* mean;
  const float* rstd;
  void* dx;
  float* dw_partial;  // [partial rows, cols] fp32 each; nullptr: not wanted
  float* db_partial;
  int64_t rows, cols, dy_stride, x_stride, dx_stride;
};

constexpr int kFwdMaxThreads = 1024;  // cached forward: NV * V floats of x per thread stay packed in registers
constexpr int kBwdMaxThreads = 512;   // cached backward: x, dy and two sets of partial sums need up to 128 registers

namespace kern {

using cuda::load_vec;
using cuda::store_vec;

// v[j] = p[c + j] in fp32, or `fill` when the parameter is absent.
template <class TP, int V>
__device__ __forceinline__ void load_param(const void* p, int64_t c, float fill, float (&v)[V]) {
  if (p == nullptr) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = fill;
    return;
  }
  load_vec<TP, V>(static_cast<const TP*>(p) + c, v);
}

template <class TX, class TP, int NV>
__global__ void __launch_bounds__(kFwdMaxThreads) fwd_cached(FwdArgs a) {
  constexpr int V = 16 / sizeof(TX);
  __shared__ float red[32];
  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t row = g * blockDim.y + threadIdx.y;
    const bool live = row < a.rows;
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    cuda::Packed<TX, V> v[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (live && c < a.cols)
        v[i].load(x + c);
      else
        v[i].zero();
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) s += v[i][j];
    const float mean = cuda::row_sum(s, red) / float(a.cols);
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols)  // padding lanes hold 0, not the mean: leave them out of the centred sum
#pragma unroll
        for (int j = 0; j < V; ++j) sq += (v[i][j] - mean) * (v[i][j] - mean);
    }
    const float rstd = rsqrtf(cuda::row_sum(sq, red) / float(a.cols) + a.eps);
    if (!live) continue;
    if (threadIdx.x == 0 && a.mean) {
      a.mean[row] = mean;
      a.rstd[row] = rstd;
    }
    TX* y = static_cast<TX*>(a.y) + row * a.y_stride;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols) {
        float w[V], b[V], out[V];
        load_param<TP, V>(a.w, c, 1.f, w);
        load_param<TP, V>(a.b, c, 0.f, b);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = (v[i][j] - mean) * rstd * w[j] + b[j];
        store_vec<TX, V>(y + c, out);
      }
    }
  }
}

template <class TX, class TP, int V>
__global__ void __launch_bounds__(1024) fwd_uncached(FwdArgs a) {
  __shared__ float red[32];
  const int64_t step = int64_t(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    float s = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V];
      load_vec<TX, V>(x + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) s += v[j];
    }
    const float mean = cuda::row_sum(s, red) / float(a.cols);
    float sq = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V];
      load_vec<TX, V>(x + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) sq += (v[j] - mean) * (v[j] - mean);
    }
    const float rstd = rsqrtf(cuda::row_sum(sq, red) / float(a.cols) + a.eps);
    if (threadIdx.x == 0 && a.mean) {
      a.mean[row] = mean;
      a.rstd[row] = rstd;
    }
    TX* y = static_cast<TX*>(a.y) + row * a.y_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V], w[V], b[V], out[V];
      load_vec<TX, V>(x + c, v);
      load_param<TP, V>(a.w, c, 1.f, w);
      load_param<TP, V>(a.b, c, 0.f, b);
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = (v[j] - mean) * rstd * w[j] + b[j];
      store_vec<TX, V>(y + c, out);
    }
  }
}

template <class TX, class TW, int NV>
__global__ void __launch_bounds__(kBwdMaxThreads) bwd_cached(BwdArgs a) {
  constexpr int V = 16 / sizeof(TX);
  __shared__ float red[32];
  float acc_w[NV][V], acc_b[NV][V];
#pragma unroll
  for (int i = 0; i < NV; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) acc_w[i][j] = acc_b[i][j] = 0.f;

  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t row = g * blockDim.y + threadIdx.y;
    const bool live = row < a.rows;
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    const TX* dy = static_cast<const TX*>(a.dy) + row * a.dy_stride;
    // x and dy stay packed in registers between the two sweeps (half the registers of floats for 16-bit types).
    cuda::Packed<TX, V> xv[NV], dv[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (live && c < a.cols) {
        xv[i].load(x + c);
        dv[i].load(dy + c);
      } else {
        xv[i].zero();
        dv[i].zero();
      }
    }
    const float mu = live ? a.mean[row] : 0.f, r = live ? a.rstd[row] : 0.f;
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols) {
        float w[V];
        load_param<TW, V>(a.w, c, 1.f, w);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xh = (xv[i][j] - mu) * r, d = dv[i][j];
          sum_g += d * w[j];
          sum_gx += d * w[j] * xh;
          acc_w[i][j] += d * xh;
          acc_b[i][j] += d;
        }
      }
    }
    const float mean_g = cuda::row_sum(sum_g, red) / float(a.cols);
    const float mean_gx = cuda::row_sum(sum_gx, red) / float(a.cols);
    if (!live) continue;
    TX* dx = static_cast<TX*>(a.dx) + row * a.dx_stride;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols) {
        float w[V], out[V];
        load_param<TW, V>(a.w, c, 1.f, w);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = r * (dv[i][j] * w[j] - mean_g - (xv[i][j] - mu) * r * mean_gx);
        store_vec<TX, V>(dx + c, out);
      }
    }
  }
  const int64_t slot = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
    if (c < a.cols) {
      if (a.dw_partial) store_vec<float, V>(a.dw_partial + slot * a.cols + c, acc_w[i]);
      if (a.db_partial) store_vec<float, V>(a.db_partial + slot * a.cols + c, acc_b[i]);
    }
  }
}

// One row per block iteration; the block's partial rows are read-modified-written by the thread owning each column.
// The grid never exceeds the row count, so every block writes its whole partial rows.
template <class TX, class TW, int V>
__global__ void __launch_bounds__(1024) bwd_uncached(BwdArgs a) {
  __shared__ float red[32];
  const int64_t step = int64_t(blockDim.x) * V;
  float* pw = a.dw_partial ? a.dw_partial + int64_t(blockIdx.x) * a.cols : nullptr;
  float* pb = a.db_partial ? a.db_partial + int64_t(blockIdx.x) * a.cols : nullptr;
  bool first = true;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, first = false) {
    const float mu = a.mean[row], r = a.rstd[row];
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    const TX* dy = static_cast<const TX*>(a.dy) + row * a.dy_stride;
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float xv[V], d[V], w[V];
      load_vec<TX, V>(x + c, xv);
      load_vec<TX, V>(dy + c, d);
      load_param<TW, V>(a.w, c, 1.f, w);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sum_g += d[j] * w[j];
        sum_gx += d[j] * w[j] * ((xv[j] - mu) * r);
      }
    }
    const float mean_g = cuda::row_sum(sum_g, red) / float(a.cols);
    const float mean_gx = cuda::row_sum(sum_gx, red) / float(a.cols);
    TX* dx = static_cast<TX*>(a.dx) + row * a.dx_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float xv[V], d[V], w[V], out[V], aw[V] = {}, ab[V] = {};
      load_vec<TX, V>(x + c, xv);
      load_vec<TX, V>(dy + c, d);  // read before dx is written: dx may be dy
      load_param<TW, V>(a.w, c, 1.f, w);
      if (pw && !first) load_vec<float, V>(pw + c, aw);
      if (pb && !first) load_vec<float, V>(pb + c, ab);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xh = (xv[j] - mu) * r;
        out[j] = r * (d[j] * w[j] - mean_g - xh * mean_gx);
        aw[j] += d[j] * xh;
        ab[j] += d[j];
      }
      store_vec<TX, V>(dx + c, out);
      if (pw) store_vec<float, V>(pw + c, aw);
      if (pb) store_vec<float, V>(pb + c, ab);
    }
  }
}

}  // namespace kern
}  // namespace tigon::layer_norm
