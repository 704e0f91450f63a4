// The GEMV's launch plan and its launch over the plan's grid, shared by the library's launcher (gemv_cuda.cu) and the
// diagnostic programs in bench/micro that time the kernels directly.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/cluster_launch.h"
#include "common/tensor.h"
#include "gemv/gemv_kernels.cuh"

namespace tigon::gemv {

using kern::kKAlign;
using kern::kWarps;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The launch shape, from M, N, K, the dtype and the multiprocessor count alone.
struct Plan {
  int mt = 1;              // rows of x per block: a power of two up to 16
  int64_t row_chunks = 1;  // blocks along z (in launches of at most kMaxGridZ)
  int64_t k_split = 0;     // elements of K per split
  int64_t splits = 1;
  int tile_k = 0;  // elements of K staged in shared memory at a time
};

// Resident warps wanted per multiprocessor: with 8 loads of 16 bytes in flight per lane, 48 warps keep ~190 KB in
// flight per multiprocessor, several times what its share of the memory bandwidth needs across the load latency.
constexpr int64_t kTargetWarpsPerSm = 48;
// Each split keeps at least two steps of the warp's 512-byte stride per lane (bf16: 512 elements).
constexpr int64_t kMinSplitK = 512;
// The splits of K of one tile form a thread block cluster: at most 8 blocks, the portable cluster size.
constexpr int64_t kMaxSplits = 8;
constexpr int64_t kMaxGridZ = 65535;

// tiles: blocks of rows of W (of all parts) along x, as many rows a block as the kernel that runs takes.
inline Plan make_plan(int64_t M, int64_t tiles, int64_t K, DType dtype, int sms) {
  Plan p;
  while (p.mt < kern::kMaxRowsX && p.mt < M) p.mt *= 2;
  p.row_chunks = ceil_div(M, p.mt);
  const int64_t warps = tiles * kWarps * p.row_chunks;
  const int64_t target = kTargetWarpsPerSm * sms;
  if (warps < target) p.splits = std::min({ceil_div(target, warps), std::max<int64_t>(1, K / kMinSplitK), kMaxSplits});
  p.k_split = round_up(ceil_div(K, p.splits), kKAlign);
  p.splits = ceil_div(K, p.k_split);
  const int64_t tile_max = kern::kTileBytes / (p.mt * dtype_bytes(dtype)) / kKAlign * kKAlign;
  p.tile_k = int(std::min(p.k_split, tile_max));
  return p;
}

// Launches kernel over the plan's grid (blocks of rows of W along x, splits of K as clusters along y, chunks of MT
// rows of x along z, in launches of at most kMaxGridZ chunks).
template <int MT>
void launch_chunks(const kern::Args& base, const Plan& p, size_t smem, cudaStream_t stream,
                   void (*kernel)(const kern::Args)) {
  for (int64_t z0 = 0; z0 < p.row_chunks; z0 += kMaxGridZ) {
    kern::Args a = base;
    a.m0 = z0 * MT;
    const dim3 grid(unsigned(a.tile_first[a.parts]), unsigned(p.splits),
                    unsigned(std::min(kMaxGridZ, p.row_chunks - z0)));
    const dim3 cluster = p.splits > 1 ? dim3(1, unsigned(p.splits), 1) : dim3(0, 0, 0);
    cuda::launch_pdl(grid, dim3(kern::kThreads), smem, stream, cluster, kernel, a);
  }
}

}  // namespace tigon::gemv
