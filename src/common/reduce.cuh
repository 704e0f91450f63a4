// Block-level reductions for row-wise kernels.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace tigon::cuda {

// f(v) over the threads of one row (f: an associative, commutative combine with identity `init`: + and 0, max and
// -inf). A block holds blockDim.y rows of blockDim.x threads each; blockDim.x is a power of two up to 32 (several rows
// share a warp) or a multiple of 32 (partials go through `smem`, which holds blockDim.y * blockDim.x / 32 floats).
// Every thread of the block must call it. The order of the combines is fixed by the launch shape, so results are
// run-to-run deterministic.
template <class F>
__device__ __forceinline__ float row_reduce(float v, float* smem, float init, F f) {
  const int tpr = blockDim.x;
  const int width = tpr < 32 ? tpr : 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (tpr <= 32) return v;
  const int warps = tpr / 32;
  float* mine = smem + threadIdx.y * warps;
  __syncthreads();  // the previous call's readers are done with smem
  if ((threadIdx.x & 31) == 0) mine[threadIdx.x / 32] = v;
  __syncthreads();
  float s = init;
  for (int i = 0; i < warps; ++i) s = f(s, mine[i]);
  return s;
}

// Sum of v over the threads of one row (row_reduce with +).
__device__ __forceinline__ float row_sum(float v, float* smem) {
  return row_reduce(v, smem, 0.f, [](float a, float b) { return a + b; });
}

// Max of v over the threads of one row (row_reduce with fmaxf).
__device__ __forceinline__ float row_max(float v, float* smem) {
  return row_reduce(v, smem, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
}

// Reduce-scatter of N sums (a power of two) over aligned groups of `width` lanes (a power of two, N <= width <= 32):
// each halving step sends half of a lane's remaining values to its partner and adds the half it keeps, then the one
// value left takes the remaining butterfly steps. Returns the group's sum of value (lane % width) / (width / N): the
// same bits in every lane that holds it (each step adds the same two values in either order). For N = 4 over 32 lanes
// that is 6 shuffles and 6 adds where four butterflies take 20 and 20.
template <int N>
__device__ __forceinline__ float reduce_scatter(float (&v)[N], int width) {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "N must be a power of two");
  const int lane = int(threadIdx.x);  // only bits below width are read: the lane's place in its group
  int o = width / 2;
#pragma unroll
  for (int n = N; n > 1; n /= 2, o /= 2) {  // a fixed number of steps (log2 N): unrolled
    const bool upper = (lane & o) != 0;     // the upper lanes keep the upper half
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? v[i] : v[i + n / 2], keep = upper ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  float s = v[0];
#pragma unroll
  for (int q = 16; q > 0; q >>= 1)  // the offsets below o * 2 = width / N
    if (q <= o) s += __shfl_xor_sync(0xffffffffu, s, q);
  return s;
}

// v[n] = the sum of value n after reduce_scatter over groups of `width` lanes (s: its result), in every lane.
template <int N>
__device__ __forceinline__ void all_gather(float s, float (&v)[N], int width) {
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = __shfl_sync(0xffffffffu, s, n * (width / N), width);
}

// Sums of N values at once over the threads of one row (shapes as row_sum), with one barrier instead of two: the
// barrier before the writes is left out, so consecutive calls must alternate between two smem buffers (each holding
// N * blockDim.y * blockDim.x / 32 floats, 16-byte aligned). A call's writers then never meet the previous call's
// readers, and the call before that finished reading before the previous call's barrier let anyone through. v is
// replaced by the sums, the same bits in every thread of the row.
// Within a warp: reduce_scatter where N is a power of two no wider than the row's lanes, else N butterflies. Across
// warps: lane l of every warp loads warp (l mod w)'s partials (w: the warp count rounded up to a power of two; 0 past
// the last warp) and the warp reduces them over w lanes the same way, then gathers the N sums. Every warp does the
// same adds on the same values, so every lane of every warp ends with the same sums. LayerNorm's backward (16 warps,
// N = 4) takes ~40 instructions here per row pair, where N butterflies twice took ~75.
template <int N>
__device__ __forceinline__ void row_sums(float (&v)[N], float* smem) {
  constexpr bool kPow2 = (N & (N - 1)) == 0;
  const int tpr = blockDim.x;
  const int width = tpr < 32 ? tpr : 32;
  const bool scatter = kPow2 && N > 1 && width >= N;
  float s = 0.f;  // scatter: this lane's share of the warp's sums
  if (scatter) {
    s = reduce_scatter(v, width);
    if (tpr <= 32) {
      all_gather(s, v, width);
      return;
    }
  } else {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < width)
#pragma unroll
        for (int n = 0; n < N; ++n) v[n] += __shfl_xor_sync(0xffffffffu, v[n], o);
    if (tpr <= 32) return;
  }
  const int warps = tpr / 32, lane = int(threadIdx.x & 31);
  float* mine = smem + threadIdx.y * warps * N;  // [warp][N]
  if (scatter) {
    if (lane % (32 / N) == 0) mine[(threadIdx.x / 32) * N + lane / (32 / N)] = s;
  } else if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) mine[(threadIdx.x / 32) * N + n] = v[n];
  }
  __syncthreads();
  int w = 1;
  while (w < warps) w *= 2;
  const int src = lane & (w - 1);
  float p[N];
  if (src < warps) {
    const float* from = mine + src * N;
    if constexpr (N % 4 == 0) {  // 16-byte loads (smem is 16-byte aligned)
#pragma unroll
      for (int n = 0; n < N; n += 4) *reinterpret_cast<float4*>(p + n) = *reinterpret_cast<const float4*>(from + n);
    } else if constexpr (N % 2 == 0) {
#pragma unroll
      for (int n = 0; n < N; n += 2) *reinterpret_cast<float2*>(p + n) = *reinterpret_cast<const float2*>(from + n);
    } else {
#pragma unroll
      for (int n = 0; n < N; ++n) p[n] = from[n];
    }
  } else {
#pragma unroll
    for (int n = 0; n < N; ++n) p[n] = 0.f;
  }
  if (kPow2 && N > 1 && w >= N) {
    all_gather(reduce_scatter(p, w), v, w);
    return;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < w)
#pragma unroll
      for (int n = 0; n < N; ++n) p[n] += __shfl_xor_sync(0xffffffffu, p[n], o);
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = p[n];
}

// Max of v over the threads of one row with one barrier: row_sums<1>'s shapes and its rule of alternating buffers
// (blockDim.y * blockDim.x / 32 floats each). Every warp combines the row's warp maxima by the same shuffles.
__device__ __forceinline__ float row_max_once(float v, float* buf) {
  const int tpr = blockDim.x, width = tpr < 32 ? tpr : 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (tpr <= 32) return v;
  const int warps = tpr / 32, lane = int(threadIdx.x & 31);
  float* mine = buf + threadIdx.y * warps;
  if (lane == 0) mine[threadIdx.x / 32] = v;
  __syncthreads();
  float p = lane < warps ? mine[lane] : -INFINITY;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) p = fmaxf(p, __shfl_xor_sync(0xffffffffu, p, o));
  return p;
}

}  // namespace tigon::cuda
