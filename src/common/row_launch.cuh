// Launch shapes of the elementwise kernels over rows (SwiGLU / GeGLU, the pointwise activations): blockDim = (threads
// along a row, rows per block), each thread V consecutive elements (16-byte vectors where every matrix allows them).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "common/cuda_types.cuh"
#include "common/tensor.h"

namespace tigon::cuda {

struct RowLaunch {
  bool vec = false;  // 16-byte vectors (V = 16 / sizeof(T)), else one element per thread
  dim3 block, grid;
};

// 16-byte vectors need the row length, every row stride and every first element on 16-byte boundaries. Matrices
// without data (optional operands not given) do not count.
inline bool vectorizable(std::initializer_list<const RowMatrix*> ms) {
  for (const RowMatrix* m : ms) {
    if (!m->data) continue;
    const int64_t v = 16 / dtype_bytes(m->dtype);
    if (m->cols % v != 0 || !aligned16(m->data) || (m->rows > 1 && m->row_stride % v != 0)) return false;
  }
  return true;
}

// Threads along a row: the smallest power of two covering the row's vectors, up to 256; the rest of the block's
// threads take further rows, so short rows still fill blocks. Rows beyond the grid's y limit are walked in a loop.
inline RowLaunch row_launch(const RowMatrix& m, bool vec) {
  constexpr int kThreads = 256;
  constexpr int64_t kMaxGridY = 65535;
  RowLaunch l;
  l.vec = vec;
  const int64_t units = vec ? m.cols / (16 / dtype_bytes(m.dtype)) : m.cols;
  int tx = 1;
  while (tx < kThreads && tx < units) tx *= 2;
  const int ty = kThreads / tx;
  l.block = dim3(unsigned(tx), unsigned(ty));
  l.grid = dim3(unsigned(std::min<int64_t>((units + tx - 1) / tx, INT_MAX)),
                unsigned(std::min((m.rows + ty - 1) / ty, kMaxGridY)));
  return l;
}

}  // namespace tigon::cuda
