// RMSNorm's typed launchers, one per (input, weight, output) dtype combination; included by rms_norm_cuda.cu only.
#pragma once

#include <algorithm>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/occupancy.h"
#include "common/row_plan.h"
#include "rms_norm/rms_norm_kernels.cuh"

namespace tigon::rms_norm {

using cuda::resident_blocks;
using Plan = row_plan::Plan;

// kAdd: the fused residual add (rms_norm_kernels.cuh). The forward launches as a programmatic dependent of the kernel
// before it (the kernels wait for it first), so a decode step's chain of small kernels overlaps their launches.
template <class TX, class TW, class TY, bool kAdd>
void launch_fwd(const FwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  const dim3 grid(p.grid);
  if (p.cached)
    cuda::launch_pdl(grid, p.block, 0, stream, kern::fwd_cached<TX, TW, TY, 4, kAdd>, a);
  else if (p.vec)
    cuda::launch_pdl(grid, p.block, 0, stream, kern::fwd_uncached<TX, TW, TY, V, kAdd>, a);
  else
    cuda::launch_pdl(grid, p.block, 0, stream, kern::fwd_uncached<TX, TW, TY, 1, kAdd>, a);
}

// Returns the number of dw partial rows written (blocks launched x rows per block).
template <class TX, class TW, class TDY, bool kAdd>
int64_t launch_bwd(const BwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached) {
    // As many blocks as stay resident: each walks many rows, so its dw partial sums stay in registers.
    auto kernel = p.nv == 2 ? kern::bwd_cached<TX, TW, TDY, 2, kAdd> : kern::bwd_cached<TX, TW, TDY, 4, kAdd>;
    const int per_sm = resident_blocks(kernel, p.block.x * p.block.y);
    const unsigned grid = std::min<unsigned>(p.grid, unsigned(per_sm * p.sms));
    kernel<<<grid, p.block, 0, stream>>>(a);
    TIGON_CUDA_CHECK_LAUNCH();
    return int64_t(grid) * p.block.y;
  }
  if (p.vec)
    kern::bwd_uncached<TX, TW, TDY, V, kAdd><<<p.grid, p.block, 0, stream>>>(a);
  else
    kern::bwd_uncached<TX, TW, TDY, 1, kAdd><<<p.grid, p.block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
  return p.grid;
}

}  // namespace tigon::rms_norm
