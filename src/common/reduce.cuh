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

}  // namespace tigon::cuda
