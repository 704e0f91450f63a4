// LayerNorm's typed launchers, one per (input dtype, parameter dtype) pair; included by layer_norm_cuda.cu only.
#pragma once

#include <algorithm>

#include "common/cuda_check.h"
#include "common/occupancy.h"
#include "common/row_plan.h"
#include "layer_norm/layer_norm_kernels.cuh"

namespace tigon::layer_norm {

using Plan = row_plan::Plan;

// TX: x, y, dy and dx; TP: weight and bias (TX or float).
template <class TX, class TP>
void launch_fwd(const FwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached) {
    const bool small = p.block.x * p.block.y <= unsigned(kern::kFwdSmallThreads);
    auto kernel = small ? kern::fwd_cached<TX, TP, 4, true> : kern::fwd_cached<TX, TP, 4>;
    kernel<<<p.grid, p.block, 0, stream>>>(a);
  } else if (p.vec)
    kern::fwd_uncached<TX, TP, V><<<p.grid, p.block, 0, stream>>>(a);
  else
    kern::fwd_uncached<TX, TP, 1><<<p.grid, p.block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

// Returns the number of partial rows written (blocks launched x rows per block).
template <class TX, class TP>
int64_t launch_bwd(const BwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached) {
    // As many blocks as stay resident: each walks many rows, so its partial sums stay in registers.
    auto kernel = p.rows == 2 ? kern::bwd_cached<TX, TP, 2, 2> : kern::bwd_cached<TX, TP, 4, 1>;
    const int per_sm = cuda::resident_blocks(kernel, p.block.x * p.block.y);
    const unsigned grid = std::min<unsigned>(p.grid, unsigned(per_sm * p.sms));
    kernel<<<grid, p.block, 0, stream>>>(a);
    TIGON_CUDA_CHECK_LAUNCH();
    return int64_t(grid) * p.block.y;
  }
  if (p.vec)
    kern::bwd_uncached<TX, TP, V><<<p.grid, p.block, 0, stream>>>(a);
  else
    kern::bwd_uncached<TX, TP, 1><<<p.grid, p.block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
  return p.grid;
}

}  // namespace tigon::layer_norm
