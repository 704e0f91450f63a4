// Block-level reductions for row-wise kernels.
#pragma once

#include <cuda_runtime.h>

namespace tigon::cuda {

// Sum of v over the threads of one row. A block holds blockDim.y rows of blockDim.x threads each; blockDim.x is a
// power of two up to 32 (several rows share a warp) or a multiple of 32 (partials go through `smem`, which holds
// blockDim.y * blockDim.x / 32 floats). Every thread of the block must call it. The order of the additions is fixed
// by the launch shape, so results are run-to-run deterministic.
__device__ __forceinline__ float row_sum(float v, float* smem) {
  const int tpr = blockDim.x;
  const int width = tpr < 32 ? tpr : 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (tpr <= 32) return v;
  const int warps = tpr / 32;
  float* mine = smem + threadIdx.y * warps;
  __syncthreads();  // the previous call's readers are done with smem
  if ((threadIdx.x & 31) == 0) mine[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < warps; ++i) s += mine[i];
  return s;
}

// Sums of N values at once over the threads of one row (shapes as row_sum), with one barrier instead of two: the
// barrier before the writes is left out, so consecutive calls must alternate between two smem buffers (each holding
// N * blockDim.y * blockDim.x / 32 floats, 16-byte aligned). A call's writers then never meet the previous call's
// readers, and the call before that finished reading before the previous call's barrier let anyone through. v is
// replaced by the sums, the same bits in every thread of the row.
// Across warps: lane l of every warp loads warp (l mod w)'s partials (w: the warp count rounded up to a power of two;
// 0 past the last warp) and the warp adds them by butterfly over w lanes. Each step adds the same two values in
// every lane that meets them (in either order: the same bits), so every lane of every warp ends with the same sum.
// One load and N * log2(w) shuffle-adds per thread, where every thread adding every warp's partials took `warps`
// loads and N * warps adds (LayerNorm's backward: 16 warps, N = 4, ~80 instructions per row pair).
template <int N>
__device__ __forceinline__ void row_sums(float (&v)[N], float* smem) {
  const int tpr = blockDim.x;
  const int width = tpr < 32 ? tpr : 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width)
#pragma unroll
      for (int n = 0; n < N; ++n) v[n] += __shfl_xor_sync(0xffffffffu, v[n], o);
  if (tpr <= 32) return;
  const int warps = tpr / 32, lane = int(threadIdx.x & 31);
  float* mine = smem + threadIdx.y * warps * N;  // [warp][N]
  if (lane == 0)
#pragma unroll
    for (int n = 0; n < N; ++n) mine[(threadIdx.x / 32) * N + n] = v[n];
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
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < w)
#pragma unroll
      for (int n = 0; n < N; ++n) p[n] += __shfl_xor_sync(0xffffffffu, p[n], o);
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = p[n];
}

}  // namespace tigon::cuda
