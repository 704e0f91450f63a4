// LayerNorm CUDA kernels, shaped like RMSNorm's (src/rms_norm/rms_norm_kernels.cuh). Two kernels per direction:
//  * cached: each row is read once into registers (16-byte vectors of x kept packed), so the forward moves exactly
//    x in + y out and the backward x, dy in + dx out. The forward's variance is E[(x - k)^2] - E[x - k]^2 around the
//    row's first element k (one reduction, and none of E[x^2] - mean^2's cancellation). blockDim = (threads per row,
//    row slots per block). Used when a row fits and every pointer and row stride is 16-byte aligned.
//  * uncached: one row per block iteration, any row length, V = 1 for unaligned data. The forward reads the row three
//    times (mean, centred variance, output), the backward twice; repeated reads mostly hit L2.
// Backward dw / db: each thread adds dy * xhat and dy over the rows it visits into fp32 sums, written once per row
// slot as partial rows; cuda::column_sum2 then adds those in a fixed order: deterministic, no atomics.
#pragma once

#include "common/cuda_types.cuh"
#include "common/reduce.cuh"

#include <type_traits>

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
  float inv_cols;  // 1 / cols: a multiply, where a division would call a slow-path routine that costs registers
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
  float inv_cols;  // 1 / cols
};

// Cached forward: up to 4 vectors (32 bf16) of x per thread, packed; 1024 threads per row at most.
constexpr int kFwdMaxThreads = 1024;
// Cached backward: C vectors of each of R rows per thread. The dw and db sums cost 2 * C * V fp32 registers whatever
// R is, so spreading a thread's vectors over rows (R = 2) rather than columns halves them at the same bytes in flight.
// C = 2 or 4 take 84-128 registers, so blocks of at most 512 threads.
constexpr int kBwdMaxThreads = 512;

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

// Element j of a packed vector as a float. bf16 widens by a shift or a mask of its 32-bit word (one instruction).
template <class T, int N>
__device__ __forceinline__ float elem(const cuda::Packed<T, N>& p, int j) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t w = reinterpret_cast<const uint32_t*>(p.u)[j / 2];
    return __uint_as_float(j % 2 ? w & 0xffff0000u : w << 16);
  } else {
    return p[j];
  }
}

// Hides the packed row's value from the compiler, so that floats widened from it before this point cannot be reused
// after it: it widens again (one instruction per element) instead of holding both the packed and the widened row.
template <class T, int N>
__device__ __forceinline__ void launder(cuda::Packed<T, N>& p) {
#pragma unroll
  for (int k = 0; k < cuda::Packed<T, N>::kWords; ++k)
    asm volatile("" : "+r"(p.u[k].x), "+r"(p.u[k].y), "+r"(p.u[k].z), "+r"(p.u[k].w));
}

// (x - mean) * rstd. For 16-bit inputs as one FMA, x rstd + neg_mr with neg_mr = -mean rstd: its rounding error,
// |mean| rstd 2^-24, is far below their outputs' half unit even for rows ~500 deviations off centre, and the kernels
// issue on most cycles (one instruction per element is ~4% of the forward). fp32 inputs keep the subtraction.
template <class TX>
__device__ __forceinline__ float xhat(float x, float mean, float rstd, float neg_mr) {
  if constexpr (sizeof(TX) == 2) return fmaf(x, rstd, neg_mr);
  return (x - mean) * rstd;
}

// Small: blocks of at most kFwdSmallThreads threads (rows of up to 4096 16-bit elements at NV = 4), registers capped
// so that kFwdSmallBlocks of them share an SM (48 registers, 10 blocks, where 54 let 9).
constexpr int kFwdSmallThreads = 128, kFwdSmallBlocks = 10;
template <class TX, class TP, int NV, bool Small = false>
__global__ void __launch_bounds__(Small ? kFwdSmallThreads : kFwdMaxThreads, Small ? kFwdSmallBlocks : 1)
    fwd_cached(FwdArgs a) {
  constexpr int V = 16 / sizeof(TX);
  __shared__ __align__(16) float red[2][64];  // [warps][2] per call; consecutive row groups alternate buffers
  const int cols = int(a.cols);               // the cached kernels' rows are short: int offsets
  const int64_t groups = (a.rows + blockDim.y - 1) / blockDim.y;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t row = g * blockDim.y + threadIdx.y;
    const bool live = row < a.rows;
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    cuda::Packed<TX, V> v[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * blockDim.x + threadIdx.x) * V;  // < 4 * 1024 * 8: an int
      if (live && c < cols)
        v[i].load(x + c);
      else
        v[i].zero();
    }
    // One reduction for both statistics: sums of (x - k) and (x - k)^2 around k = the row's first element (every
    // thread reads it; one L1 line), so var = E[(x-k)^2] - E[x-k]^2 cancels only as much as k is off the mean (a
    // few standard deviations: a digit or two of fp32), unlike E[x^2] - mean^2. A second reduction for a centred
    // sum cost ~5 us per 16384 x 4096 pass in block-wide barriers.
    const float k = live ? cuda::to_f<TX>(x[0]) : 0.f;
    float s[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * blockDim.x + threadIdx.x) * V;  // < 4 * 1024 * 8: an int
      if (c < cols)                                      // padding lanes hold 0, not data: leave them out
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = elem(v[i], j) - k;
          s[0] += d;
          s[1] += d * d;
        }
    }
    cuda::row_sums(s, red[g & 1]);
#pragma unroll
    for (int i = 0; i < NV; ++i) launder(v[i]);
    const float shift = s[0] * a.inv_cols, mean = k + shift;
    const float var = fmaxf(s[1] * a.inv_cols - shift * shift, 0.f);
    const float rstd = rsqrtf(var + a.eps);
    if (!live) continue;
    if (threadIdx.x == 0 && a.mean) {
      a.mean[row] = mean;
      a.rstd[row] = rstd;
    }
    TX* y = static_cast<TX*>(a.y) + row * a.y_stride;
    const float neg_mr = -mean * rstd;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = (i * blockDim.x + threadIdx.x) * V;  // < 4 * 1024 * 8: an int
      if (c < cols) {
        float w[V], b[V], out[V];
        load_param<TP, V>(a.w, c, 1.f, w);
        load_param<TP, V>(a.b, c, 0.f, b);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = fmaf(xhat<TX>(elem(v[i], j), mean, rstd, neg_mr), w[j], b[j]);
        store_vec<TX, V>(y + c, out);
      }
    }
  }
}

template <class TX, class TP, int V>
__global__ void __launch_bounds__(1024) fwd_uncached(FwdArgs a) {
  __shared__ __align__(16) float red[2][32];
  const int64_t step = int64_t(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    float s[1] = {0.f};
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V];
      load_vec<TX, V>(x + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) s[0] += v[j];
    }
    cuda::row_sums(s, red[0]);
    const float mean = s[0] * a.inv_cols;
    float sq[1] = {0.f};
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float v[V];
      load_vec<TX, V>(x + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) sq[0] += (v[j] - mean) * (v[j] - mean);
    }
    cuda::row_sums(sq, red[1]);
    const float rstd = rsqrtf(sq[0] * a.inv_cols + a.eps);
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

// C vectors of each of R consecutive rows per thread (see kBwdMaxThreads); the row slot (blockIdx.x, threadIdx.y)
// walks groups of R rows and keeps its dw and db sums for its columns in registers until the end.
template <class TX, class TW, int C, int R>
__global__ void __launch_bounds__(kBwdMaxThreads, 1) bwd_cached(BwdArgs a) {
  constexpr int V = 16 / sizeof(TX);
  __shared__ __align__(16) float red[2][2 * R * 32];  // row_sums alternates buffers
  const int cols = int(a.cols);                       // the cached kernels' rows are short: int offsets
  float acc_w[C][V], acc_b[C][V];
#pragma unroll
  for (int i = 0; i < C; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) acc_w[i][j] = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) acc_b[i][j] = 0.f;

  const int64_t groups = (a.rows + int64_t(blockDim.y) * R - 1) / (int64_t(blockDim.y) * R);
  int flip = 0;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x, flip ^= 1) {
    const int64_t row0 = (g * blockDim.y + threadIdx.y) * R;
    // x and dy stay packed in registers between the two sweeps (half the registers of floats for 16-bit types).
    cuda::Packed<TX, V> xv[R][C], dv[R][C];
    float mu[R], r[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t row = row0 + k;
      const bool live = row < a.rows;
      const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
      const TX* dy = static_cast<const TX*>(a.dy) + row * a.dy_stride;
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int c = (i * blockDim.x + threadIdx.x) * V;
        if (live && c < cols) {
          xv[k][i].load(x + c);
          dv[k][i].load(dy + c);
        } else {  // zeros add nothing to any sum below
          xv[k][i].zero();
          dv[k][i].zero();
        }
      }
      mu[k] = live ? a.mean[row] : 0.f;
      r[k] = live ? a.rstd[row] : 0.f;
    }
    // sums[2k] = sum(g), sums[2k + 1] = sum(g * xhat) over row k, g = dy * w (means after row_sums).
    float sums[2 * R], neg_mr[R];
#pragma unroll
    for (int n = 0; n < 2 * R; ++n) sums[n] = 0.f;
#pragma unroll
    for (int k = 0; k < R; ++k) neg_mr[k] = -mu[k] * r[k];
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int c = (i * blockDim.x + threadIdx.x) * V;
      if (c < cols) {
        float w[V];
        load_param<TW, V>(a.w, c, 1.f, w);
#pragma unroll
        for (int k = 0; k < R; ++k)
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float xh = xhat<TX>(elem(xv[k][i], j), mu[k], r[k], neg_mr[k]), d = elem(dv[k][i], j);
            sums[2 * k] += d * w[j];
            sums[2 * k + 1] += d * w[j] * xh;
            acc_w[i][j] += d * xh;
            acc_b[i][j] += d;
          }
      }
    }
    cuda::row_sums(sums, red[flip]);
#pragma unroll
    for (int k = 0; k < R; ++k)
#pragma unroll
      for (int i = 0; i < C; ++i) {
        launder(xv[k][i]);
        launder(dv[k][i]);
      }
#pragma unroll
    for (int k = 0; k < R; ++k) {
      sums[2 * k] *= a.inv_cols;
      sums[2 * k + 1] *= a.inv_cols;
    }
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int c = (i * blockDim.x + threadIdx.x) * V;
      if (c < cols) {
        float w[V];
        load_param<TW, V>(a.w, c, 1.f, w);
#pragma unroll
        for (int k = 0; k < R; ++k) {
          const int64_t row = row0 + k;
          if (row >= a.rows) continue;
          // dx = r (dy w - mean_g - xhat mean_gx) = dy (r w) + (x - mu) B + C with B = -r^2 mean_gx, C = -r mean_g:
          // 4 instructions per element instead of 6 (this kernel issues on ~72% of cycles: instructions are time);
          // 16-bit inputs take x B + (C - mu B) in one FMA (3), as xhat does.
          const float B = -r[k] * r[k] * sums[2 * k + 1], Cc = -r[k] * sums[2 * k], Cmu = fmaf(-mu[k], B, Cc);
          float out[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float xB = sizeof(TX) == 2 ? fmaf(elem(xv[k][i], j), B, Cmu) : fmaf(elem(xv[k][i], j) - mu[k], B, Cc);
            out[j] = fmaf(elem(dv[k][i], j), r[k] * w[j], xB);
          }
          store_vec<TX, V>(static_cast<TX*>(a.dx) + row * a.dx_stride + c, out);
        }
      }
    }
  }
  const int64_t slot = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = (i * blockDim.x + threadIdx.x) * V;
    if (c < cols) {
      if (a.dw_partial) store_vec<float, V>(a.dw_partial + slot * a.cols + c, acc_w[i]);
      if (a.db_partial) store_vec<float, V>(a.db_partial + slot * a.cols + c, acc_b[i]);
    }
  }
}

// One row per block iteration; the block's partial rows are read-modified-written by the thread owning each column.
// The grid never exceeds the row count, so every block writes its whole partial rows.
template <class TX, class TW, int V>
__global__ void __launch_bounds__(1024) bwd_uncached(BwdArgs a) {
  __shared__ __align__(16) float red[2][2 * 32];
  const int64_t step = int64_t(blockDim.x) * V;
  float* pw = a.dw_partial ? a.dw_partial + int64_t(blockIdx.x) * a.cols : nullptr;
  float* pb = a.db_partial ? a.db_partial + int64_t(blockIdx.x) * a.cols : nullptr;
  bool first = true;
  int flip = 0;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, first = false, flip ^= 1) {
    const float mu = a.mean[row], r = a.rstd[row];
    const TX* x = static_cast<const TX*>(a.x) + row * a.x_stride;
    const TX* dy = static_cast<const TX*>(a.dy) + row * a.dy_stride;
    float sums[2] = {0.f, 0.f};  // sum(g), sum(g * xhat)
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += step) {
      float xv[V], d[V], w[V];
      load_vec<TX, V>(x + c, xv);
      load_vec<TX, V>(dy + c, d);
      load_param<TW, V>(a.w, c, 1.f, w);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sums[0] += d[j] * w[j];
        sums[1] += d[j] * w[j] * ((xv[j] - mu) * r);
      }
    }
    cuda::row_sums(sums, red[flip]);
    const float mean_g = sums[0] * a.inv_cols, mean_gx = sums[1] * a.inv_cols;
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
