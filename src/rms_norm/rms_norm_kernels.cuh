// RMSNorm CUDA kernels. Two shapes of kernel per direction:
//  * cached: each row is read once into registers (NV vectors of V elements per thread, V = 16 bytes of x), so the
//    forward moves exactly x in + y out and the backward x, dy in + dx out. blockDim = (threads per row, rows per
//    block). Used when a row fits (up to 4 * 8 * 1024 bf16 elements) and every pointer and row stride is 16-byte
//    aligned.
//  * uncached: one row per block iteration, read twice (the second read mostly hits L2); any row length; V = 1 for
//    unaligned data.
// Backward dw: each block adds dy * xhat over the rows it visits into fp32 partials (one row of `partial` per block
// row slot), and cuda::column_sum adds those in a fixed order: deterministic, no atomics.
// kAdd (the fused residual add): the forward normalises h = x + res and writes h beside y; the backward adds dh to dx.
// Without it the kernels compile to exactly the plain RMSNorm's.
#pragma once

#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"
#include "common/reduce.cuh"
#include "tigon/rms_norm.h"

namespace tigon::rms_norm {

struct FwdArgs {
  const void* x;
  const void* w;  // nullptr: no weight
  void* y;
  float* rstd;  // nullptr: not saved
  int64_t rows, cols, x_stride, y_stride;
  float eps, offset;
  int mode;
  const void* res = nullptr;  // kAdd: the residual, and h = x + res written here
  void* h = nullptr;
  int64_t res_stride = 0, h_stride = 0;
};

struct BwdArgs {
  const void* dy;
  const void* x;
  const void* w;
  const float* rstd;
  void* dx;
  float* partial;  // [gridDim.x * blockDim.y, cols] fp32, nullptr: no dw
  int64_t rows, cols, dy_stride, x_stride, dx_stride;
  float offset;
  const void* dh = nullptr;  // kAdd: added to dx
  int64_t dh_stride = 0;
};

// The cached kernels hold NV 16-byte vectors of a row per thread: 4 forward; 2 backward, 4 for rows too long for 2
// (fewer registers and more resident warps against more bytes in flight per thread).
constexpr int kFwdMaxThreads = 1024;  // cached forward: 32 floats of x per thread stay in registers
constexpr int kBwdMaxThreads = 512;   // cached backward: x, g and the dw sums (96 floats) need up to 128 registers

namespace kern {

using cuda::load_vec;
using cuda::round_to;
using cuda::store_vec;
using cuda::to_f;

// s[j] = offset + w[c + j] (1 with no weight), in fp32.
template <class TW, int V>
__device__ __forceinline__ void load_scale(const void* w, int64_t c, float offset, float (&s)[V]) {
  if (w == nullptr) {
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 1.f;
    return;
  }
  load_vec<TW, V>(static_cast<const TW*>(w) + c, s);
#pragma unroll
  for (int j = 0; j < V; ++j) s[j] += offset;
}

// y for one vector under the casting mode (see tigon/rms_norm.h); x is the input value in fp32.
template <class TX, int V>
__device__ __forceinline__ void normalize(int mode, float r, const float (&x)[V], const float (&s)[V], float (&y)[V]) {
  if (mode == TIGON_RMS_NORM_LLAMA) {
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = s[j] * round_to<TX>(x[j] * r);
  } else if (mode == TIGON_RMS_NORM_GEMMA) {
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = (x[j] * r) * s[j];
  } else {
    const float rr = round_to<TX>(r);
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = round_to<TX>(round_to<TX>(x[j] * rr) * round_to<TX>(s[j]));
  }
}

// The fused residual add for one 16-byte vector: v = round(v + res) (the add in the activations' dtype). The
// caller stores h later, with y: a store here would hold the row's next loads behind it (the compiler cannot tell h
// from x or res), one memory round trip per vector.
template <class TX, int V>
__device__ __forceinline__ void add_residual(cuda::Packed<TX, V>& v, const TX* res) {
  static_assert(cuda::Packed<TX, V>::kWords == 1);
  float r[V], sum[V];
  load_vec<TX, V>(res, r);
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = v[j] + r[j];
  v.u[0] = cuda::pack16<TX>(sum);
}

__device__ __forceinline__ float rstd_of(float sum_sq, int64_t cols, float eps) {
  return 1.f / sqrtf(sum_sq / float(cols) + eps);
}

template <class TX, class TW, class TY, int NV, bool kAdd>
__global__ void __launch_bounds__(kFwdMaxThreads) fwd_cached(FwdArgs a) {
  constexpr int V = 16 / sizeof(TX);
  __shared__ float red[32];
  // Launched as a programmatic dependent (decode steps chain these kernels): the kernel ahead's writes first; the
  // next kernel may start its own prologue meanwhile.
  cuda::grid_dependency_wait();
  cuda::allow_dependents();
  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t row = g * blockDim.y + threadIdx.y;
    const bool live = row < a.rows;
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    cuda::Packed<TX, V> v[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (live && c < a.cols) {
        v[i].load(x + c);
        if constexpr (kAdd) add_residual<TX, V>(v[i], static_cast<const TX*>(a.res) + row * a.res_stride + c);
      } else {
        v[i].zero();
      }
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) ss += v[i][j] * v[i][j];
    ss = cuda::row_sum(ss, red);
    const float r = rstd_of(ss, a.cols, a.eps);
    if (!live) continue;
    if (threadIdx.x == 0 && a.rstd) a.rstd[row] = r;
    TY* y = static_cast<TY*>(a.y) + row * a.y_stride;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols) {
        if constexpr (kAdd) __stcg(reinterpret_cast<uint4*>(static_cast<TX*>(a.h) + row * a.h_stride + c), v[i].u[0]);
        float xf[V], s[V], out[V];
#pragma unroll
        for (int j = 0; j < V; ++j) xf[j] = v[i][j];
        load_scale<TW, V>(a.w, c, a.offset, s);
        normalize<TX, V>(a.mode, r, xf, s, out);
        store_vec<TY, V>(y + c, out);
      }
    }
  }
}

template <class TX, class TW, class TY, int V, bool kAdd>
__global__ void __launch_bounds__(1024) fwd_uncached(FwdArgs a) {
  __shared__ float red[32];
  // Launched as a programmatic dependent (decode steps chain these kernels): the kernel ahead's writes first; the
  // next kernel may start its own prologue meanwhile.
  cuda::grid_dependency_wait();
  cuda::allow_dependents();
  const int64_t step = int64_t(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    float ss = 0.f;
#pragma unroll 4
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V];
      load_vec<TX, V>(x + c, v);
      if constexpr (kAdd) {  // h = x + res, rounded; the second sweep reads h back (this thread wrote these columns)
        float r[V];
        load_vec<TX, V>(static_cast<const TX*>(a.res) + row * a.res_stride + c, r);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = round_to<TX>(v[j] + r[j]);
        store_vec<TX, V>(static_cast<TX*>(a.h) + row * a.h_stride + c, v);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) ss += v[j] * v[j];
    }
    if constexpr (kAdd) x = static_cast<const TX*>(a.h) + row * a.h_stride;
    ss = cuda::row_sum(ss, red);
    const float r = rstd_of(ss, a.cols, a.eps);
    if (threadIdx.x == 0 && a.rstd) a.rstd[row] = r;
    TY* y = static_cast<TY*>(a.y) + row * a.y_stride;
#pragma unroll 4
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V], s[V], out[V];
      load_vec<TX, V>(x + c, v);
      load_scale<TW, V>(a.w, c, a.offset, s);
      normalize<TX, V>(a.mode, r, v, s, out);
      store_vec<TY, V>(y + c, out);
    }
  }
}

// The fused residual add's backward: the gradient reaching h from elsewhere joins dx.
template <class TX, int V>
__device__ __forceinline__ void add_grad(const BwdArgs& a, int64_t row, int64_t c, float (&out)[V]) {
  float g[V];
  load_vec<TX, V>(static_cast<const TX*>(a.dh) + row * a.dh_stride + c, g);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] += g[j];
}

template <class TX, class TW, class TDY, int NV, bool kAdd>
__global__ void __launch_bounds__(kBwdMaxThreads) bwd_cached(BwdArgs a) {
  constexpr int V = 16 / sizeof(TX);
  __shared__ float red[32];
  float acc[NV][V];
#pragma unroll
  for (int i = 0; i < NV; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) acc[i][j] = 0.f;

  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t row = g * blockDim.y + threadIdx.y;
    const bool live = row < a.rows;
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    const TDY* dy = static_cast<const TDY*>(a.dy) + row * a.dy_stride;
    // x and dy stay packed in registers between the two sweeps (half the registers of floats for 16-bit types).
    // kAdd: dh too, with them (loaded beside its use, after the previous vector's store of dx, it waited for it).
    cuda::Packed<TX, V> xv[NV], hv[kAdd ? NV : 1];
    cuda::Packed<TDY, V> dv[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (live && c < a.cols) {
        xv[i].load(x + c);
        dv[i].load(dy + c);
        if constexpr (kAdd) hv[i].load(static_cast<const TX*>(a.dh) + row * a.dh_stride + c);
      } else {
        xv[i].zero();
        dv[i].zero();
        if constexpr (kAdd) hv[i].zero();
      }
    }
    const float r = live ? a.rstd[row] : 0.f;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols) {
        float s[V];
        load_scale<TW, V>(a.w, c, a.offset, s);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xh = xv[i][j] * r;
          dot += dv[i][j] * s[j] * xh;
          acc[i][j] += dv[i][j] * xh;
        }
      }
    }
    dot = cuda::row_sum(dot, red);
    if (!live) continue;
    const float mean = dot / float(a.cols);
    TX* dx = static_cast<TX*>(a.dx) + row * a.dx_stride;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
      if (c < a.cols) {
        float s[V], out[V];
        load_scale<TW, V>(a.w, c, a.offset, s);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = r * (dv[i][j] * s[j] - xv[i][j] * r * mean);
        if constexpr (kAdd)
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] += hv[i][j];
        store_vec<TX, V>(dx + c, out);
      }
    }
  }
  if (a.partial == nullptr) return;
  float* part = a.partial + (int64_t(blockIdx.x) * blockDim.y + threadIdx.y) * a.cols;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
    if (c < a.cols) store_vec<float, V>(part + c, acc[i]);
  }
}

// One row per block iteration; the block's partial row is read-modified-written by the thread owning each column.
// The grid never exceeds the row count, so every block writes its whole partial row.
template <class TX, class TW, class TDY, int V, bool kAdd>
__global__ void __launch_bounds__(1024) bwd_uncached(BwdArgs a) {
  __shared__ float red[32];
  const int64_t step = int64_t(blockDim.x) * V;
  float* part = a.partial ? a.partial + int64_t(blockIdx.x) * a.cols : nullptr;
  bool first = true;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, first = false) {
    const float r = a.rstd[row];
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    const TDY* dy = static_cast<const TDY*>(a.dy) + row * a.dy_stride;
    float dot = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float xv[V], d[V], s[V];
      load_vec<TX, V>(x + c, xv);
      load_vec<TDY, V>(dy + c, d);
      load_scale<TW, V>(a.w, c, a.offset, s);
#pragma unroll
      for (int j = 0; j < V; ++j) dot += d[j] * s[j] * (xv[j] * r);
    }
    dot = cuda::row_sum(dot, red);
    const float mean = dot / float(a.cols);
    TX* dx = static_cast<TX*>(a.dx) + row * a.dx_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float xv[V], d[V], s[V], out[V], pacc[V] = {};
      load_vec<TX, V>(x + c, xv);
      load_vec<TDY, V>(dy + c, d);
      load_scale<TW, V>(a.w, c, a.offset, s);
      if (part && !first) load_vec<float, V>(part + c, pacc);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xh = xv[j] * r;
        out[j] = r * (d[j] * s[j] - xh * mean);
        pacc[j] += d[j] * xh;
      }
      if constexpr (kAdd) add_grad<TX, V>(a, row, c, out);
      store_vec<TX, V>(dx + c, out);
      if (part) store_vec<float, V>(part + c, pacc);
    }
  }
}

}  // namespace kern
}  // namespace tigon::rms_norm
