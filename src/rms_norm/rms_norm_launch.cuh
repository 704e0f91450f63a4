// Typed launchers; included only by the per-dtype instantiation files rms_norm_cuda_<dtype>.cu.
#pragma once

#include <algorithm>

#include "common/cuda_check.h"
#include "common/occupancy.h"
#include "rms_norm/rms_norm_kernels.cuh"
#include "rms_norm/rms_norm_launch.h"

namespace tigon::rms_norm {

using cuda::resident_blocks;

template <class TX, class TW, class TY>
void launch_fwd(const FwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached && p.nv == 2)
    kern::fwd_cached<TX, TW, TY, 2><<<p.grid, p.block, 0, stream>>>(a);
  else if (p.cached)
    kern::fwd_cached<TX, TW, TY, 4><<<p.grid, p.block, 0, stream>>>(a);
  else if (p.vec)
    kern::fwd_two_pass<TX, TW, TY, V><<<p.grid, p.block, 0, stream>>>(a);
  else
    kern::fwd_two_pass<TX, TW, TY, 1><<<p.grid, p.block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class TX, class TW, class TDY>
int64_t launch_bwd(const BwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached) {
    // As many blocks as stay resident: each walks many rows, so its dw partial sums stay in registers.
    auto kernel = p.nv == 2 ? kern::bwd_cached<TX, TW, TDY, 2> : kern::bwd_cached<TX, TW, TDY, 4>;
    const int per_sm = resident_blocks(kernel, p.block.x * p.block.y);
    const unsigned grid = std::min<unsigned>(p.grid, unsigned(per_sm * p.sms));
    kernel<<<grid, p.block, 0, stream>>>(a);
    TIGON_CUDA_CHECK_LAUNCH();
    return int64_t(grid) * p.block.y;
  }
  if (p.vec)
    kern::bwd_two_pass<TX, TW, TDY, V><<<p.grid, p.block, 0, stream>>>(a);
  else
    kern::bwd_two_pass<TX, TW, TDY, 1><<<p.grid, p.block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
  return p.grid;
}

// The four (weight, output) dtype combinations an input dtype T supports: T or fp32 each.
#define TIGON_RMS_NORM_INSTANTIATE(T)                                                     \
  template void launch_fwd<T, T, T>(const FwdArgs&, const Plan&, cudaStream_t);           \
  template void launch_fwd<T, float, T>(const FwdArgs&, const Plan&, cudaStream_t);       \
  template void launch_fwd<T, T, float>(const FwdArgs&, const Plan&, cudaStream_t);       \
  template void launch_fwd<T, float, float>(const FwdArgs&, const Plan&, cudaStream_t);   \
  template int64_t launch_bwd<T, T, T>(const BwdArgs&, const Plan&, cudaStream_t);           \
  template int64_t launch_bwd<T, float, T>(const BwdArgs&, const Plan&, cudaStream_t);       \
  template int64_t launch_bwd<T, T, float>(const BwdArgs&, const Plan&, cudaStream_t);       \
  template int64_t launch_bwd<T, float, float>(const BwdArgs&, const Plan&, cudaStream_t);

}  // namespace tigon::rms_norm
