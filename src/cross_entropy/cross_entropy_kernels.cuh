// Cross entropy: the per-row math every row kernel shares (online statistics, the row's outputs, the gradient of a
// vector of logits) and the classic row kernel. The classic kernel is one block per row (grid-stride over rows):
// pass 1 reads the row for the online max and sum of exponentials (plus the argmax and, with label smoothing, the
// weighted sum of the logits); pass 2 reads it again (from L2 when it is still there) and writes the gradient,
// possibly over the logits. It takes any row; cross_entropy_resident.cuh has the kernels that read a row from DRAM
// once. All math in fp32, 64-bit offsets, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/cuda_types.cuh"
#include "cross_entropy/cross_entropy_launch.h"

namespace tigon::cross_entropy::kern {

using cuda::load_vec;
using cuda::store_vec;

constexpr int kMaxThreads = 512;

// What one thread (then the block) knows about a row after pass 1.
struct RowStats {
  float m;        // running maximum of x'
  float s;        // sum of exp(x' - m)
  float best;     // largest raw logit ...
  int64_t arg;    // ... and its first index (-1: none seen yet)
  float wx;       // sum of w[c] * x'_c (label smoothing only)
};

__device__ __forceinline__ RowStats merge(const RowStats& a, const RowStats& b) {
  // Commutative bit for bit (so every lane of a butterfly ends with the same value).
  RowStats r;
  r.m = fmaxf(a.m, b.m);
  r.s = r.m == -INFINITY ? 0.f : a.s * __expf(a.m - r.m) + b.s * __expf(b.m - r.m);
  const bool take_b = a.arg < 0 || (b.arg >= 0 && (b.best > a.best || (b.best == a.best && b.arg < a.arg)));
  r.best = take_b ? b.best : a.best;
  r.arg = take_b ? b.arg : a.arg;
  r.wx = a.wx + b.wx;
  return r;
}

// The block's merged stats, in every thread. smem holds one RowStats per warp.
__device__ __forceinline__ RowStats block_merge(RowStats v, RowStats* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    RowStats other;
    other.m = __shfl_xor_sync(0xffffffffu, v.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, v.s, o);
    other.best = __shfl_xor_sync(0xffffffffu, v.best, o);
    other.arg = __shfl_xor_sync(0xffffffffu, v.arg, o);
    other.wx = __shfl_xor_sync(0xffffffffu, v.wx, o);
    v = merge(v, other);
  }
  __syncthreads();  // the previous row's readers are done with smem
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  RowStats r = smem[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) r = merge(r, smem[w]);  // fixed order: deterministic
  return r;
}

template <bool kCap>
__device__ __forceinline__ float capped(float x, float cap) {
  if constexpr (kCap) return cap * tanhf(x / cap);
  return x;
}

// exp(x - m) is computed as 2^(x * log2e - m * log2e): one FMA and one SFU instruction (ex2.approx, 2 ulp) per
// element, which matters at ~4 elements per SM cycle.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Adds V consecutive logits starting at column c0 (in increasing column order per thread: the argmax keeps the first).
template <bool kCap, int V>
__device__ __forceinline__ void accumulate(RowStats& st, const float (&x)[V], int64_t c0, const RowArgs& a,
                                           bool smooth) {
  // The argmax of the raw logits: the vector's maximum first, its first index only when it beats the best so far.
  float rm = x[0];
#pragma unroll
  for (int j = 1; j < V; ++j) rm = fmaxf(rm, x[j]);
  if (rm > st.best || st.arg < 0) {
    int first = 0;
#pragma unroll
    for (int j = V - 1; j >= 0; --j)
      if (x[j] == rm) first = j;
    st.best = rm;
    st.arg = c0 + first;
  }
  float xc[V];
  float cm = rm;  // without a cap the maximum of x' is the raw maximum
#pragma unroll
  for (int j = 0; j < V; ++j) xc[j] = capped<kCap>(x[j], a.softcap);
  if constexpr (kCap) {
    cm = xc[0];
#pragma unroll
    for (int j = 1; j < V; ++j) cm = fmaxf(cm, xc[j]);
  }
  if (cm > st.m) {
    st.s *= exp2_fast((st.m - cm) * kLog2e);
    st.m = cm;
  }
  if (st.m != -INFINITY) {  // NaN logits fall through to the sum and make it NaN, as they should
    const float mk = st.m * kLog2e;
#pragma unroll
    for (int j = 0; j < V; ++j) st.s += exp2_fast(fmaf(xc[j], kLog2e, -mk));
  }
  if (smooth) {
#pragma unroll
    for (int j = 0; j < V; ++j) st.wx += (a.weight ? __ldg(a.weight + c0 + j) : 1.f) * xc[j];
  }
}

// The gradient of V consecutive elements starting at column c0 (see cross_entropy_ref.cpp for the same in fp64).
struct GradCoef {
  float lse2, a, b, d;  // g_c = (a * p_c - b * w_c - (c == t ? d : 0)) * dx'_c/dx_c, p_c = 2^(x'_c log2e - lse2)
  int64_t t;
};

template <bool kCap, int V>
__device__ __forceinline__ void gradient(const float (&x)[V], float (&g)[V], int64_t c0, const GradCoef& k,
                                         const RowArgs& a) {
  float dcap[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float xc = x[j];
    dcap[j] = 1.f;
    if constexpr (kCap) {
      const float th = tanhf(x[j] / a.softcap);
      xc = a.softcap * th;
      dcap[j] = 1.f - th * th;
    }
    float v = k.a * exp2_fast(fmaf(xc, kLog2e, -k.lse2));
    if (k.b != 0.f) v -= k.b * (a.weight ? __ldg(a.weight + c0 + j) : 1.f);
    g[j] = v;
  }
  // The target's column, at most one per row: one test per vector instead of a 64-bit compare per element.
  const uint64_t jt = uint64_t(k.t - c0);
  if (jt < uint64_t(V)) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (uint64_t(j) == jt) g[j] -= k.d;
  }
  if constexpr (kCap) {
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] *= dcap[j];
  }
}

// The row's loss terms from its merged statistics (written when `writer`) and its gradient's coefficients. xt: the
// soft-capped target logit (NaN for a target out of range, which makes the row's loss and gradient NaN).
__device__ __forceinline__ GradCoef finish_row(const RowArgs& a, int64_t row, int64_t t, float xt, const RowStats& st,
                                               bool writer) {
  const bool in_range = t >= 0 && t < a.cols;
  const float lse = st.m + __logf(st.s);
  const float eps = a.smoothing, eps_v = eps / float(a.cols);
  const float wt = in_range ? (a.weight ? a.weight[t] : 1.f) : NAN;
  const float weight_all = a.weight ? a.totals[kWeightAll] : float(a.cols);
  if (writer) {
    float ce = (1.f - eps) * wt * (lse - xt);
    if (eps > 0.f) ce += eps_v * (lse * weight_all - st.wx);
    a.row_ce[row] = ce;
    a.row_z[row] = a.z_scale * lse * lse;
    a.row_correct[row] = st.arg == t ? 1.f : 0.f;
  }
  const float ce_scale = a.mean ? 1.f / a.totals[kWeightSum] : 1.f;
  const float z_scale = a.mean ? 1.f / a.totals[kCount] : 1.f;
  GradCoef k;
  k.lse2 = lse * kLog2e;
  k.t = t;
  k.a = ce_scale * ((1.f - eps) * wt + eps_v * weight_all) + z_scale * 2.f * a.z_scale * lse;
  k.b = ce_scale * eps_v;
  k.d = ce_scale * (1.f - eps) * wt;
  return k;
}

// An ignored row: no loss, a zero gradient.
__device__ __forceinline__ void write_ignored(const RowArgs& a, int64_t row) {
  a.row_ce[row] = a.row_z[row] = a.row_correct[row] = 0.f;
}

__device__ __forceinline__ int64_t load_target(const RowArgs& a, int64_t row) {
  return a.target64 ? static_cast<const int64_t*>(a.target)[row] : int64_t(static_cast<const int32_t*>(a.target)[row]);
}

template <class T, int V, bool kCap>
__global__ void __launch_bounds__(kMaxThreads) rows_kernel(RowArgs a) {
  __shared__ RowStats smem[kMaxThreads / 32];
  const bool smooth = a.smoothing > 0.f;
  const int64_t nvec = a.cols / V, tail0 = nvec * V;  // V > 1: whole vectors, then a scalar tail
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    const int64_t t = load_target(a, row);
    if (t == a.ignore_index) {  // uniform over the block: no loss, a zero gradient row
      if (threadIdx.x == 0) write_ignored(a, row);
      if (grad) {
        float zero[V] = {};
        for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) store_vec<T, V>(grad + k * V, zero);
        for (int64_t c = tail0 + threadIdx.x; c < a.cols; c += blockDim.x) grad[c] = cuda::from_f<T>(0.f);
      }
      continue;
    }
    const bool in_range = t >= 0 && t < a.cols;
    // Read before pass 2 starts (and before block_merge's barrier): pass 2 may overwrite x[t] with its gradient.
    const float xt = in_range ? capped<kCap>(cuda::to_f<T>(x[t]), a.softcap) : NAN;

    RowStats st{-INFINITY, 0.f, -INFINITY, -1, 0.f};
    for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
      float v[V];
      load_vec<T, V>(x + k * V, v);
      accumulate<kCap, V>(st, v, k * V, a, smooth);
    }
    for (int64_t c = tail0 + threadIdx.x; c < a.cols; c += blockDim.x) {
      const float v[1] = {cuda::to_f<T>(x[c])};
      accumulate<kCap, 1>(st, v, c, a, smooth);
    }
    st = block_merge(st, smem);
    const GradCoef k = finish_row(a, row, t, xt, st, threadIdx.x == 0);
    if (!grad) continue;

    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      float v[V], g[V];
      load_vec<T, V>(x + i * V, v);
      gradient<kCap, V>(v, g, i * V, k, a);
      store_vec<T, V>(grad + i * V, g);
    }
    for (int64_t c = tail0 + threadIdx.x; c < a.cols; c += blockDim.x) {
      const float v[1] = {cuda::to_f<T>(x[c])};
      float g[1];
      gradient<kCap, 1>(v, g, c, k, a);
      grad[c] = cuda::from_f<T>(g[0]);
    }
  }
}

// grad *= grad_output: one block per row (grid-stride); a block whose scale is exactly 1 leaves at once, so the
// usual scalar 1.0 of a mean loss costs one launch and no traffic.
template <class T, int V>
__global__ void __launch_bounds__(256) scale_kernel(ScaleArgs a) {
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float s = a.grad_output[row * a.go_stride];
    if (s == 1.f) {
      if (a.go_stride == 0) return;
      continue;
    }
    T* g = static_cast<T*>(a.grad) + row * a.stride;
    const int64_t nvec = a.cols / V;
    for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
      float v[V];
      load_vec<T, V>(g + k * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] *= s;
      store_vec<T, V>(g + k * V, v);
    }
    for (int64_t c = nvec * V + threadIdx.x; c < a.cols; c += blockDim.x)
      g[c] = cuda::from_f<T>(cuda::to_f<T>(g[c]) * s);
  }
}

}  // namespace tigon::cross_entropy::kern
