// Typed launchers; included only by the per-dtype instantiation files layer_norm_cuda_<dtype>.cu.
#pragma once

#include <algorithm>

#include "common/cuda_check.h"
#include "common/occupancy.h"
#include "layer_norm/layer_norm_kernels.cuh"
#include "layer_norm/layer_norm_launch.h"

namespace tigon::layer_norm {

using cuda::resident_blocks;

template <class TX, class TP>
void launch_fwd(const FwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached) {
    const bool small = p.block.x * p.block.y <= unsigned(kern::kFwdSmallThreads);
    auto kernel = p.nv == 2 ? kern::fwd_cached<TX, TP, 2>
                  : small   ? kern::fwd_cached<TX, TP, 4, true>
                            : kern::fwd_cached<TX, TP, 4>;
    FwdArgs b = a;
    // One wave of resident blocks ahead: the group a block launched about one block lifetime later will read.
    if (p.prefetch) b.prefetch_ahead = int64_t(resident_blocks(kernel, p.block.x * p.block.y)) * p.sms;
    kernel<<<p.grid, p.block, 0, stream>>>(b);
  } else if (p.vec)
    kern::fwd_uncached<TX, TP, V><<<p.grid, p.block, 0, stream>>>(a);
  else
    kern::fwd_uncached<TX, TP, 1><<<p.grid, p.block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class TX, class TP>
auto bwd_cached_kernel(const Plan& p) {
  if (p.nv == 1) return kern::bwd_cached<TX, TP, 1, 2>;
  if (p.nv == 2 && p.rows == 2) return kern::bwd_cached<TX, TP, 2, 2>;
  if (p.nv == 2) return p.db_smem ? kern::bwd_cached<TX, TP, 2, 1, true> : kern::bwd_cached<TX, TP, 2, 1>;
  return kern::bwd_cached<TX, TP, 4, 1>;
}

template <class TX, class TP>
int64_t launch_bwd(const BwdArgs& a, const Plan& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TX);
  if (p.cached) {
    // As many blocks as stay resident: each walks many rows, so its partial sums stay in registers.
    auto kernel = bwd_cached_kernel<TX, TP>(p);
    const int per_sm = resident_blocks(kernel, p.block.x * p.block.y);
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

// The two parameter dtypes an input dtype T supports: T or fp32.
#define TIGON_LAYER_NORM_INSTANTIATE(T)                                                 \
  template void launch_fwd<T, T>(const FwdArgs&, const Plan&, cudaStream_t);            \
  template void launch_fwd<T, float>(const FwdArgs&, const Plan&, cudaStream_t);        \
  template int64_t launch_bwd<T, T>(const BwdArgs&, const Plan&, cudaStream_t);         \
  template int64_t launch_bwd<T, float>(const BwdArgs&, const Plan&, cudaStream_t);

}  // namespace tigon::layer_norm
