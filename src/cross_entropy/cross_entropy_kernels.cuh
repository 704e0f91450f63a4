// Cross entropy: the per-row math every row kernel shares (online statistics over groups of 16-byte vectors, the
// row's outputs, the gradient of a vector) and the `classic` row kernel, one block per row, which reads the row twice
// (the fallback for rows the cluster kernel cannot take). cross_entropy_resident.cuh has the cluster kernel, which
// reads a row from DRAM once. All math in fp32, 64-bit offsets, no atomics.
//
// Per-element work is the compute (1.05 G elements per pass at 8192 x 128256; the SFU's 16 ex2 per SM cycle alone
// take ~0.27 ms a pass on an H200), so the hot loops keep to: the bf16 unpack (a shift or a mask), the exponent (one
// FFMA in the exp2 domain, one ex2.approx), the sum (one FADD) and in pass 1 a share of the group's maximum (packed
// 16-bit max, 3 inputs at a time); pass 2 instead packs and stores. Everything else is once per group of vectors (the
// running-max test), once per row (the argmax column, the target's one-hot term) or compiled out (softcap and label
// smoothing: template options).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <climits>
#include <cstring>
#include <type_traits>

#include "common/cuda_types.cuh"
#include "cross_entropy/cross_entropy_launch.h"

namespace tigon::cross_entropy::kern {

using cuda::from_f;
using cuda::to_f;

constexpr int kMaxThreads = 512;  // classic

// Compile-time options of a row kernel; the plain case (0) carries none of their per-element work. The z-loss and
// class weights without smoothing change only per-row coefficients and need no option.
enum Opt : int { kCap = 1, kSmooth = 2 };
inline int options_of(const RowArgs& a) { return (a.softcap > 0.f ? kCap : 0) | (a.smoothing > 0.f ? kSmooth : 0); }

template <class T>
constexpr int kVec = 16 / int(sizeof(T));  // elements per 16-byte vector

// Vector indices within a row are 32-bit in the hot loops (one IMAD.WIDE per address instead of 64-bit pairs): rows
// of this many vectors or more (16 GB) take the scalar kernel.
constexpr int64_t kMaxRowVecs = int64_t(1) << 30;

// exp(x - m) is computed as 2^(x log2e - m log2e): one FMA and one SFU instruction (ex2.approx, 2 ulp) per element.
using cuda::exp2_fast;
using cuda::kLog2e;

// softcap tanh(x / softcap), the division as a product (one FMUL instead of a full-precision divide per element).
template <int O>
__device__ __forceinline__ float capped(float x, const RowArgs& a) {
  if constexpr ((O & kCap) != 0) return a.softcap * tanhf(x * a.inv_softcap);
  return x;
}

__device__ __forceinline__ float weight_of(const RowArgs& a, int64_t c) { return a.weight ? __ldg(a.weight + c) : 1.f; }

using cuda::unpack_word;
using cuda::unpack_words;

// 32-bit word i of U vectors (a compile-time i after unrolling: a register).
template <int U>
__device__ __forceinline__ uint32_t word(const uint4 (&u)[U], int i) {
  const uint4& v = u[i / 4];
  return i % 4 == 0 ? v.x : i % 4 == 1 ? v.y : i % 4 == 2 ? v.z : v.w;
}

// The largest element of U vectors. 16-bit types compare two at a time in their own format (exact; sm_90 has a
// 3-input packed max), then the two halves; NaNs are skipped as fmaxf skips them (they still reach the sum).
template <class T, int U>
__device__ __forceinline__ float group_max(const uint4 (&u)[U]) {
  if constexpr (sizeof(T) == 2) {
    using H2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    uint32_t w = word(u, 0);
    H2 m, v;
    memcpy(&m, &w, 4);
#pragma unroll
    for (int i = 1; i < 4 * U; ++i) {
      w = word(u, i);
      memcpy(&v, &w, 4);
      m = __hmax2(m, v);
    }
    uint32_t mw;
    memcpy(&mw, &m, 4);
    float x[2];
    unpack_word<T>(mw, x);
    return fmaxf(x[0], x[1]);
  } else {
    float m = __uint_as_float(word(u, 0));
#pragma unroll
    for (int i = 1; i < 4 * U; ++i) m = fmaxf(m, __uint_as_float(word(u, i)));
    return m;
  }
}

// What one thread (then the block) knows about a row after pass 1.
struct RowStats {
  float m = -INFINITY;      // running maximum of x'
  float s = 0.f, s2 = 0.f;  // sum of 2^((x' - m) log2e), in two chains of adds
  float nm2 = 0.f;          // -m log2e (0 while m = -inf): the addend of every exponent
  float best = -INFINITY;   // largest raw logit ...
  int64_t arg = -1;         // ... its first column (-1: none); while reading groups, the group's first column
  float wx = 0.f;           // sum of w_c x'_c (label smoothing only)
};

__device__ __forceinline__ void rescale(RowStats& st, float m) {
  const float f = exp2_fast((st.m - m) * kLog2e);  // 0 for the first finite maximum (st.m = -inf)
  st.s *= f;
  st.s2 *= f;
  st.m = m;
  st.nm2 = -m * kLog2e;
}

// Adds a group of U vectors. Vector j holds columns c0 + j * cstride + [0, V), increasing through the group, so the
// first maximum is the first in (j, element) order. The group's maximum is tested once: only when it beats the
// running one does the sum rescale and the group become the argmax candidate (resolve_arg finds the column later).
template <class T, int O, int U>
__device__ __forceinline__ void accumulate(RowStats& st, const uint4 (&u)[U], int64_t c0, int64_t cstride,
                                           const RowArgs& a) {
  constexpr int V = kVec<T>;
  const float vm = group_max<T, U>(u);
  float x[U][V];
#pragma unroll
  for (int j = 0; j < U; ++j) unpack_words<T>(u[j], x[j]);
  if constexpr ((O & kCap) != 0) {
    if (vm > st.best) {
      st.best = vm;
      st.arg = c0;
    }
    float cm = -INFINITY;
#pragma unroll
    for (int j = 0; j < U; ++j)
#pragma unroll
      for (int e = 0; e < V; ++e) cm = fmaxf(cm, x[j][e] = capped<O>(x[j][e], a));
    if (cm > st.m) rescale(st, cm);
  } else if (vm > st.m) {  // x' = x: the running maximum is the best raw logit
    rescale(st, vm);
    st.best = vm;
    st.arg = c0;
  }
#pragma unroll
  for (int j = 0; j < U; ++j)
#pragma unroll
    for (int e = 0; e < V; ++e) (e % 2 ? st.s2 : st.s) += exp2_fast(fmaf(x[j][e], kLog2e, st.nm2));
  if constexpr ((O & kSmooth) != 0) {
#pragma unroll
    for (int j = 0; j < U; ++j)
#pragma unroll
      for (int e = 0; e < V; ++e) st.wx += weight_of(a, c0 + j * cstride + e) * x[j][e];
  }
}

// One logit at column c (tails, unaligned rows): its argmax column is known at once. A thread's first column wins
// while it has seen no maximum (all -inf so far), as the first of equal values. kPrecedes: c comes before every column
// the thread has seen, so it also wins a tie.
template <int O, bool kPrecedes = false>
__device__ __forceinline__ void accumulate1(RowStats& st, float x, int64_t c, const RowArgs& a) {
  if (x > st.best || (kPrecedes && x == st.best) || st.arg < 0) {
    st.best = x;
    st.arg = c;
  }
  const float xc = capped<O>(x, a);
  if (xc > st.m) rescale(st, xc);
  st.s += exp2_fast(fmaf(xc, kLog2e, st.nm2));
  if constexpr ((O & kSmooth) != 0) st.wx += weight_of(a, c) * xc;
}

// After the groups (before any tail): the candidate group's first column becomes the first column holding `best`.
// load(c) reads the vector starting at column c; the row's vectors end at column end. A thread whose groups never
// beat -inf takes its first column (first0, or none when it read no vector).
template <class T, int U, class Load>
__device__ __forceinline__ void resolve_arg(RowStats& st, int64_t cstride, int64_t first0, int64_t end, Load load) {
  if (st.arg < 0) {
    st.arg = first0 < end ? first0 : -1;
    return;
  }
  for (int j = 0; j < U; ++j) {
    const int64_t c = st.arg + j * cstride;
    if (c >= end) break;
    float x[kVec<T>];
    unpack_words<T>(load(c), x);
    for (int e = 0; e < kVec<T>; ++e)
      if (x[e] == st.best) {
        st.arg = c + e;
        return;
      }
  }
}

// The fields a merge reads, one by one (a whole-struct copy through a generic pointer, as into another block's
// shared memory, compiled to byte stores).
__device__ __forceinline__ void put(RowStats* dst, const RowStats& v) {
  dst->m = v.m;
  dst->s = v.s;
  dst->best = v.best;
  dst->arg = v.arg;
  dst->wx = v.wx;
}

// v merged over aligned groups of `width` lanes (a power of two up to 32), the same bits in every lane: the maximum
// first, then each lane's sum rescaled to it once and the sums added, each by butterfly (every step adds or compares
// the same two values in either order). One exponential per lane, where merging whole RowStats at each of the five
// steps took ~400 instructions per warp, once per row, with no bytes in flight. The argmax (largest best among
// lanes with a column, then the smallest such column) only when a.want_arg; wx only with label smoothing.
__device__ __forceinline__ RowStats group_merge(const RowStats& v, int width, bool want_arg, bool smooth) {
  RowStats r;
  float m = v.m;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = m == -INFINITY ? 0.f : v.s * exp2_fast((v.m - m) * kLog2e);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) s += __shfl_xor_sync(0xffffffffu, s, o);
  r.m = m;
  r.s = s;
  if (want_arg) {
    float best = v.arg >= 0 ? v.best : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < width) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
    long long arg = v.arg >= 0 && v.best == best ? (long long)v.arg : LLONG_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < width) arg = min(arg, __shfl_xor_sync(0xffffffffu, arg, o));
    r.best = best;
    r.arg = arg == LLONG_MAX ? -1 : int64_t(arg);
  }
  if (smooth) {
    float wx = v.wx;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < width) wx += __shfl_xor_sync(0xffffffffu, wx, o);
    r.wx = wx;
  }
  return r;
}

// n entries (n <= 32, get(j) returns entry j) merged in every lane of every warp: lane l takes entry l mod width, width
// being n rounded up to a power of two, so every group of width lanes merges the same values to the same bits; lanes
// past the last entry take nothing (-inf, 0, no column). The block merge and the cluster exchange both end with it.
template <class Get>
__device__ __forceinline__ RowStats merge_entries(int n, Get get, bool want_arg, bool smooth) {
  int width = 1;
  while (width < n) width *= 2;
  const int j = int(threadIdx.x & 31) & (width - 1);
  RowStats v;
  if (j < n) v = get(j);
  return group_merge(v, width, want_arg, smooth);
}

// The block's merged stats, in every thread: each warp's by group_merge, then every warp merges all warps' (smem
// holds one RowStats per warp) by merge_entries.
__device__ __forceinline__ RowStats block_merge(RowStats v, RowStats* smem, const RowArgs& a) {
  v.s += v.s2;
  const bool smooth = a.smoothing > 0.f;
  v = group_merge(v, 32, a.want_arg, smooth);
  const int lane = int(threadIdx.x & 31), warps = int(blockDim.x / 32);
  if (warps == 1) return v;
  __syncthreads();  // the previous row's readers are done with smem
  if (lane == 0) put(&smem[threadIdx.x / 32], v);
  __syncthreads();
  return merge_entries(
      warps,
      [&](int j) {
        RowStats w;  // the fields put() wrote
        w.m = smem[j].m, w.s = smem[j].s, w.best = smem[j].best, w.arg = smem[j].arg, w.wx = smem[j].wx;
        return w;
      },
      a.want_arg, smooth);
}

// The gradient's coefficients (see cross_entropy_ref.cpp for the same in fp64):
//   g_c = (a p_c - b w_c - (c == t ? d : 0)) dx'_c/dx_c,  p_c = 2^(x'_c log2e - lse log2e).
// With 0 < a < inf (every row of the plain case), a moves into the exponent: a p_c = 2^(x'_c log2e + log2(a) - lse
// log2e), so the plain gradient is one FFMA and one ex2 per element.
struct GradCoef {
  float c;  // the exponent's addend: log2(a) - lse log2e when folded, else -lse log2e
  float a, b, d;
  bool fold;
  int64_t t;
};

template <int O, bool kFold>
__device__ __forceinline__ float grad_elem(float x, int64_t c, bool target, const GradCoef& k, const RowArgs& a) {
  float xc = x, dcap = 1.f;
  if constexpr ((O & kCap) != 0) {
    const float th = tanhf(x * a.inv_softcap);
    xc = a.softcap * th;
    dcap = 1.f - th * th;
  }
  float g = exp2_fast(fmaf(xc, kLog2e, k.c));
  if constexpr (!kFold) g *= k.a;
  if constexpr ((O & kSmooth) != 0) g -= k.b * weight_of(a, c);
  if (target) g -= k.d;
  if constexpr ((O & kCap) != 0) g *= dcap;
  return g;
}

// The gradient of the vector at columns [c0, c0 + V), packed. The target's term is not here: fix_target adds it.
template <class T, int O, bool kFold>
__device__ __forceinline__ uint4 grad_vec(const uint4& u, int64_t c0, const GradCoef& k, const RowArgs& a) {
  float x[kVec<T>], g[kVec<T>];
  unpack_words<T>(u, x);
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) g[e] = grad_elem<O, kFold>(x[e], c0 + e, false, k, a);
  return cuda::pack16<T>(g);
}

// The target column's gradient, written over what its vector's store put there by the thread that stored it (so in
// program order): one scalar store per row instead of a column test per element. xr: the raw target logit.
template <class T, int O, bool kFold>
__device__ __forceinline__ void fix_target(T* grad, float xr, const GradCoef& k, const RowArgs& a) {
  grad[k.t] = from_f<T>(grad_elem<O, kFold>(xr, k.t, true, k, a));
}

// Pass 1 over this thread's vectors first, first + step, ... < end (vector indices in the row), U loads issued
// together per group; load(k) reads vector k, which holds columns c_base + k * V + [0, V).
template <class T, int O, int U, class Load>
__device__ __forceinline__ void stats_pass(RowStats& st, uint32_t first, uint32_t end, uint32_t step, const RowArgs& a,
                                           Load load, int64_t c_base = 0) {
  constexpr int V = kVec<T>;
  uint32_t k = first;
  for (; k + (U - 1) * step < end; k += U * step) {
    uint4 u[U];
#pragma unroll
    for (int j = 0; j < U; ++j) u[j] = load(k + j * step);
    accumulate<T, O, U>(st, u, c_base + int64_t(k) * V, int64_t(step) * V, a);
  }
  for (; k < end; k += step) {
    const uint4 u[1] = {load(k)};
    accumulate<T, O, 1>(st, u, c_base + int64_t(k) * V, int64_t(step) * V, a);
  }
}

// Pass 2 over the same vectors: store(k, gradient of vector k).
template <class T, int O, bool kFold, int U, class Load, class Store>
__device__ __forceinline__ void grad_pass(const GradCoef& kc, uint32_t first, uint32_t end, uint32_t step,
                                          const RowArgs& a, Load load, Store store, int64_t c_base = 0) {
  constexpr int V = kVec<T>;
  uint32_t k = first;
  for (; k + (U - 1) * step < end; k += U * step) {
    uint4 u[U];
#pragma unroll
    for (int j = 0; j < U; ++j) u[j] = load(k + j * step);
#pragma unroll
    for (int j = 0; j < U; ++j)
      store(k + j * step, grad_vec<T, O, kFold>(u[j], c_base + int64_t(k + j * step) * V, kc, a));
  }
  for (; k < end; k += step) store(k, grad_vec<T, O, kFold>(load(k), c_base + int64_t(k) * V, kc, a));
}

// What finish_row reads from global memory besides the statistics: the totals (the totals kernel's) and the target's
// class weight. Loaded together, ahead of the block's merges and the cluster's exchange, so one memory round trip
// overlaps them; read inside finish_row, after the writer's stores (which the compiler must assume may alias them),
// they cost two serial round trips at the end of every row of every block.
struct RowTotals {
  float weight_sum, count, weight_all;  // kWeightSum, kCount, and kWeightAll (or V without class weights)
  float wt;                             // the target's class weight (NaN for a target out of range)
};
__device__ __forceinline__ RowTotals load_totals(const RowArgs& a, int64_t t) {
  const bool in_range = t >= 0 && t < a.cols;
  RowTotals r;
  r.weight_sum = a.totals[kWeightSum];
  r.count = a.totals[kCount];
  r.weight_all = a.weight ? a.totals[kWeightAll] : float(a.cols);
  r.wt = in_range ? (a.weight ? a.weight[t] : 1.f) : NAN;
  return r;
}

// The row's loss terms from its merged statistics (written when `writer`) and its gradient's coefficients. xt: the
// soft-capped target logit (NaN for a target out of range, which makes the row's loss and gradient NaN); with token
// scaling every thread needs it, else the writer alone.
__device__ __forceinline__ GradCoef finish_row(const RowArgs& a, int64_t row, int64_t t, float xt, const RowStats& st,
                                               const RowTotals& tot, bool writer) {
  const float lse = st.m + __logf(st.s);
  const float eps = a.smoothing, eps_v = eps / float(a.cols);
  const float wt = tot.wt, weight_all = tot.weight_all;
  const float s = a.token_scaling ? __expf(xt - lse) : 1.f;  // the target's probability, a constant to the gradient
  if (writer) {
    float ce = (1.f - eps) * wt * (lse - xt);
    if (eps > 0.f) ce += eps_v * (lse * weight_all - st.wx);
    a.row_ce[row] = s * ce;
    a.row_z[row] = s * a.z_scale * lse * lse;
    a.row_correct[row] = a.want_arg && st.arg == t ? 1.f : 0.f;
    if (a.predicted) a.predicted[row] = st.arg;
  }
  const float ce_scale = s * (a.mean ? 1.f / tot.weight_sum : 1.f);
  const float z_scale = s * (a.mean ? 1.f / tot.count : 1.f);
  GradCoef k;
  k.t = t;
  k.a = ce_scale * ((1.f - eps) * wt + eps_v * weight_all) + z_scale * 2.f * a.z_scale * lse;
  k.b = ce_scale * eps_v;
  k.d = ce_scale * (1.f - eps) * wt;
  k.fold = k.a > 0.f && k.a < INFINITY;
  k.c = (k.fold ? log2f(k.a) : 0.f) - lse * kLog2e;
  return k;
}

// An ignored row: no loss, a zero gradient.
__device__ __forceinline__ void write_ignored(const RowArgs& a, int64_t row) {
  a.row_ce[row] = a.row_z[row] = a.row_correct[row] = 0.f;
  if (a.predicted) a.predicted[row] = -1;
}

__device__ __forceinline__ int64_t load_target(const RowArgs& a, int64_t row) {
  return a.target64 ? static_cast<const int64_t*>(a.target)[row] : int64_t(static_cast<const int32_t*>(a.target)[row]);
}

// Runs f(std::true_type) when the row's gradient folds its scale into the exponent, else f(std::false_type): one
// uniform branch per row picks between two compiled loops.
template <class F>
__device__ __forceinline__ void with_fold(const GradCoef& k, F f) {
  if (k.fold)
    f(std::true_type());
  else
    f(std::false_type());
}

// A row of 16-byte aligned vectors per block iteration (grid-stride over rows), U vectors in flight per thread; pass 2
// re-reads the row from wherever it is (L2 or DRAM).
template <class T, int O>
__global__ void __launch_bounds__(kMaxThreads) rows_kernel(RowArgs a) {
  constexpr int V = kVec<T>, U = 4;
  __shared__ RowStats smem[kMaxThreads / 32];
  const uint32_t nvec = uint32_t(a.cols / V), tid = threadIdx.x, step = blockDim.x;
  const int64_t tail0 = int64_t(nvec) * V;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    uint4* gv = reinterpret_cast<uint4*>(grad);
    const int64_t t = load_target(a, row);
    if (t == a.ignore_index) {  // uniform over the block: no loss, a zero gradient row
      if (tid == 0) write_ignored(a, row);
      if (grad) {
        for (uint32_t k = tid; k < nvec; k += step) __stcg(gv + k, make_uint4(0, 0, 0, 0));
        for (int64_t c = tail0 + tid; c < a.cols; c += step) grad[c] = from_f<T>(0.f);
      }
      continue;
    }
    const bool in_range = t >= 0 && t < a.cols;
    // Read before pass 2 starts (and before block_merge's barrier): pass 2 may overwrite x[t] with its gradient.
    const float xr = in_range ? to_f<T>(x[t]) : NAN;

    RowStats st;
    const auto load = [&](uint32_t k) { return xv[k]; };
    stats_pass<T, O, U>(st, tid, nvec, step, a, load);
    if (a.want_arg)
      resolve_arg<T, U>(st, int64_t(step) * V, int64_t(tid) * V, tail0, [&](int64_t c) { return xv[c / V]; });
    for (int64_t c = tail0 + tid; c < a.cols; c += step) accumulate1<O>(st, to_f<T>(x[c]), c, a);
    const RowTotals tot = load_totals(a, t);
    st = block_merge(st, smem, a);
    const GradCoef k = finish_row(a, row, t, capped<O>(xr, a), st, tot, tid == 0);
    if (!grad) continue;

    with_fold(k, [&](auto fold) {
      constexpr bool F = decltype(fold)::value;
      grad_pass<T, O, F, U>(k, tid, nvec, step, a, load, [&](uint32_t i, const uint4& g) { __stcg(gv + i, g); });
      for (int64_t c = tail0 + tid; c < a.cols; c += step)
        grad[c] = from_f<T>(grad_elem<O, F>(to_f<T>(x[c]), c, c == t, k, a));
      if (in_range && t < tail0 && uint32_t(t / V) % step == tid) fix_target<T, O, F>(grad, xr, k, a);
    });
  }
}

// Rows that are not 16-byte aligned: element by element, the same math.
template <class T, int O>
__global__ void __launch_bounds__(kMaxThreads) scalar_rows_kernel(RowArgs a) {
  __shared__ RowStats smem[kMaxThreads / 32];
  const int64_t tid = threadIdx.x, step = blockDim.x;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    const int64_t t = load_target(a, row);
    if (t == a.ignore_index) {
      if (tid == 0) write_ignored(a, row);
      if (grad)
        for (int64_t c = tid; c < a.cols; c += step) grad[c] = from_f<T>(0.f);
      continue;
    }
    const float xt = t >= 0 && t < a.cols ? capped<O>(to_f<T>(x[t]), a) : NAN;  // before pass 2 (in place)
    RowStats st;
    for (int64_t c = tid; c < a.cols; c += step) accumulate1<O>(st, to_f<T>(x[c]), c, a);
    const RowTotals tot = load_totals(a, t);
    st = block_merge(st, smem, a);
    const GradCoef k = finish_row(a, row, t, xt, st, tot, tid == 0);
    if (!grad) continue;
    with_fold(k, [&](auto fold) {
      for (int64_t c = tid; c < a.cols; c += step)
        grad[c] = from_f<T>(grad_elem<O, decltype(fold)::value>(to_f<T>(x[c]), c, c == t, k, a));
    });
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
      cuda::load_vec<T, V>(g + k * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] *= s;
      cuda::store_vec<T, V>(g + k * V, v);
    }
    for (int64_t c = nvec * V + threadIdx.x; c < a.cols; c += blockDim.x) g[c] = from_f<T>(to_f<T>(g[c]) * s);
  }
}

}  // namespace tigon::cross_entropy::kern
