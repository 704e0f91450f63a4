// LayerNorm launch plans and the typed launchers. The plan (which kernel, block shape, grid) is chosen from the
// problem alone; the launchers are instantiated once per dtype pair in layer_norm_cuda_<dtype>.cu, so the dispatch in
// layer_norm_cuda.cu compiles no kernels itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "layer_norm/layer_norm.h"

namespace tigon::layer_norm {

struct FwdArgs;
struct BwdArgs;

struct Plan {
  bool cached = false;  // fwd_cached / bwd_cached, else the uncached kernels
  bool vec = false;     // 16-byte vectors (cached implies vec)
  int nv = 4;           // cached kernels: vectors of a row per thread (forward 2 or 4, backward 1, 2 or 4)
  int rows = 1;         // cached backward: rows per thread (2 with nv 1 or 2, else 1)
  bool prefetch = false;  // cached kernels: prefetch rows ahead into L2 (TIGON_LAYER_NORM_PREFETCH)
  bool db_smem = false;   // cached backward, 2 vectors x 1 row: the db sums in shared memory (..._BWD_DB_SMEM)
  dim3 block;           // (threads per row, row slots per block)
  unsigned grid = 0;    // the backward may launch fewer blocks: as many as stay resident
  int sms = 0;          // multiprocessors of the device
};

// TX: x, y, dy and dx; TP: weight and bias (TX or float).
template <class TX, class TP>
void launch_fwd(const FwdArgs& a, const Plan& plan, cudaStream_t stream);

// Returns the number of partial rows written (blocks launched x rows per block).
template <class TX, class TP>
int64_t launch_bwd(const BwdArgs& a, const Plan& plan, cudaStream_t stream);

}  // namespace tigon::layer_norm
