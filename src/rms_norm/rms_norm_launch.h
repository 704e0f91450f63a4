// RMSNorm launch plans and the typed launchers. The plan (which kernel, block shape, grid) is chosen from the
// problem alone; the launchers are instantiated once per dtype combination in rms_norm_cuda_<dtype>.cu, so the
// dispatch in rms_norm_cuda.cu compiles no kernels itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "rms_norm/rms_norm.h"

namespace tigon::rms_norm {

struct FwdArgs;
struct BwdArgs;

struct Plan {
  bool cached = false;  // fwd_cached / bwd_cached, else the two-pass kernels
  bool vec = false;     // 16-byte vectors (cached implies vec)
  int nv = 4;           // vectors per thread of the cached kernels: 2 or 4
  dim3 block;           // (threads per row, rows per block)
  unsigned grid = 0;          // the backward may launch fewer blocks: as many as stay resident
  int sms = 0;                // multiprocessors of the device
};

template <class TX, class TW, class TY>
void launch_fwd(const FwdArgs& a, const Plan& plan, cudaStream_t stream);

// Returns the number of dw partial rows written (blocks launched x rows per block).
template <class TX, class TW, class TDY>
int64_t launch_bwd(const BwdArgs& a, const Plan& plan, cudaStream_t stream);

}  // namespace tigon::rms_norm
