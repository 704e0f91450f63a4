// The normalization core shared by RMSNorm and LayerNorm on the host: one plan struct, the alignment tests, the block
// shape of the cached kernels (a row held in registers, nv 16-byte vectors per thread) and of the uncached ones (one
// row per block iteration, any length), and the bound on the backward's partial rows that column_sum adds up.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/norm_testing.h"
#include "common/tensor.h"

namespace tigon::row_plan {

struct Plan {
  bool cached = false;  // fwd_cached / bwd_cached (a row in registers), else fwd_uncached / bwd_uncached
  bool vec = false;     // 16-byte vectors (cached implies vec)
  int nv = 4;           // cached kernels: 16-byte vectors of a row per thread
  int rows = 1;         // cached backward: rows per thread
  dim3 block;           // (threads per row, row slots per block)
  unsigned grid = 0;    // the backward may launch fewer blocks: as many as stay resident
  int sms = 0;          // multiprocessors of the device (backward)
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every row starts 16-byte aligned.
inline bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}
// A row is whole 16-byte vectors.
inline bool cols_vectorizable(const RowMatrix& x) { return x.cols % (16 / dtype_bytes(x.dtype)) == 0; }
// An optional parameter vector (weight, bias) is absent or 16-byte aligned.
inline bool param_aligned(const void* p) { return p == nullptr || cuda::aligned16(p); }

// Threads per row (tpr) and row slots per block (rpb) of a kernel holding nv 16-byte vectors of a row per thread:
// rows shorter than a warp share one, and short rows are packed into ~128-thread blocks.
struct Shape {
  int tpr = 0, rpb = 0;
};
inline Shape cached_shape(int64_t cols, DType dtype, int nv) {
  const int v = 16 / dtype_bytes(dtype);
  const int64_t need = ceil_div(ceil_div(cols, v), nv);
  Shape s;
  if (need <= 32) {
    s.tpr = 1;
    while (s.tpr < need) s.tpr *= 2;
  } else {
    s.tpr = int(std::min<int64_t>(ceil_div(need, 32) * 32, INT_MAX));
  }
  s.rpb = s.tpr < 128 ? 128 / s.tpr : 1;
  return s;
}

// Plan of a cached kernel with shape s, r rows per thread, over `rows` rows, at most max_grid blocks.
inline Plan cached_plan(const Shape& s, int nv, int r, int64_t rows, int64_t max_grid) {
  Plan p;
  p.cached = p.vec = true;
  p.nv = nv;
  p.rows = r;
  p.block = dim3(s.tpr, s.rpb);
  p.grid = unsigned(std::min<int64_t>(ceil_div(rows, int64_t(s.rpb) * r), max_grid));
  return p;
}

// Plan of the uncached kernels: a quarter of the row's vectors per thread in whole warps (32 to 1024 threads), one
// block per row up to max_grid.
inline Plan uncached_plan(const RowMatrix& x, bool vec, int64_t max_grid) {
  Plan p;
  p.vec = vec;
  const int64_t vecs = vec ? x.cols / (16 / dtype_bytes(x.dtype)) : x.cols;
  p.block = dim3(unsigned(std::clamp<int64_t>(ceil_div(ceil_div(vecs, 4), 32) * 32, 32, 1024)), 1);
  p.grid = unsigned(std::min<int64_t>(x.rows, max_grid));
  return p;
}

// Partial rows the backward writes at most (its workspace is that many fp32 rows per sum). The cached backward
// launches about as many blocks as stay resident, so each walks many rows and keeps its sums in registers; the bound
// may depend on x and the device alone (the workspace-size entry sees nothing else), so it assumes the kernel keeps
// max_resident threads per multiprocessor. s.tpr == 0: the uncached backward, at most two blocks per multiprocessor.
inline int64_t max_partial_rows(int64_t rows, const Shape& s, int r, int max_resident, int64_t sms) {
  if (s.tpr == 0) return std::min<int64_t>(rows, sms * 2);
  const int64_t blocks_per_sm = std::max(1, max_resident / (s.tpr * s.rpb));
  return std::min(ceil_div(rows, int64_t(s.rpb) * r), sms * blocks_per_sm) * s.rpb;
}

inline int current_device() {
  int d = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

}  // namespace tigon::row_plan
