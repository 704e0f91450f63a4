// Host-side launch planning shared by the row-wise kernels (RMSNorm, LayerNorm): alignment tests and the block shape
// of kernels that hold a row in registers, nv 16-byte vectors per thread.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/cuda_types.cuh"
#include "common/tensor.h"

namespace tigon::row_plan {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every row starts 16-byte aligned.
inline bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}
// A row is whole 16-byte vectors.
inline bool cols_vectorizable(const RowMatrix& x) { return x.cols % (16 / dtype_bytes(x.dtype)) == 0; }

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

// Plan of the kernels that take one row per block iteration (any row length): a quarter of the row's vectors per
// thread in whole warps (32 to 1024 threads), one block per row up to max_grid. Plan has vec, block and grid.
template <class Plan>
Plan row_per_block_plan(const RowMatrix& x, bool vec, int64_t max_grid) {
  Plan p;
  p.vec = vec;
  const int64_t vecs = vec ? x.cols / (16 / dtype_bytes(x.dtype)) : x.cols;
  p.block = dim3(unsigned(std::clamp<int64_t>(ceil_div(ceil_div(vecs, 4), 32) * 32, 32, 1024)), 1);
  p.grid = unsigned(std::min<int64_t>(x.rows, max_grid));
  return p;
}

}  // namespace tigon::row_plan
