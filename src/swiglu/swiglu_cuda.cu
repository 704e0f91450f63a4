// SwiGLU / GeGLU CUDA path: launch shape and dtype dispatch.
#include <algorithm>
#include <climits>

#include "common/cuda_types.cuh"
#include "swiglu/swiglu.h"
#include "swiglu/swiglu_launch.cuh"

namespace tigon::swiglu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 16-byte vectors need the row length, every row stride and every first element to fall on 16-byte boundaries.
bool vectorizable(std::initializer_list<const RowMatrix*> ms) {
  for (const RowMatrix* m : ms) {
    const int64_t v = 16 / dtype_bytes(m->dtype);
    if (m->cols % v != 0 || !cuda::aligned16(m->data) || (m->rows > 1 && m->row_stride % v != 0)) return false;
  }
  return true;
}

// Threads along a row: the smallest power of two covering the row's vectors, up to kThreads; the rest of the block's
// threads take further rows, so short rows still fill blocks. Rows beyond the grid's y limit are walked in a loop.
Launch plan(const RowMatrix& m, bool vec) {
  Launch l;
  l.vec = vec;
  const int64_t units = vec ? m.cols / (16 / dtype_bytes(m.dtype)) : m.cols;
  int tx = 1;
  while (tx < kThreads && tx < units) tx *= 2;
  const int ty = kThreads / tx;
  l.block = dim3(unsigned(tx), unsigned(ty));
  l.grid = dim3(unsigned(std::min<int64_t>(ceil_div(units, tx), INT_MAX)),
                unsigned(std::min(ceil_div(m.rows, ty), kMaxGridY)));
  return l;
}

}  // namespace

void fwd_cuda(const FwdProblem& p, void* stream) {
  const FwdArgs a{p.a.data,       p.b.data,       p.c.data,       p.a.rows, p.a.cols,
                  p.a.row_stride, p.b.row_stride, p.c.row_stride, p.gate,   p.down};
  const Launch l = plan(p.a, vectorizable({&p.a, &p.b, &p.c}));
  TIGON_SWITCH_FLOAT(p.a.dtype, T, launch_fwd<T>(a, p.activation, l, static_cast<cudaStream_t>(stream)));
}

void bwd_cuda(const BwdProblem& p, void* stream) {
  const BwdArgs a{p.dc.data,       p.a.data,       p.b.data,       p.da.data,       p.db.data,       p.a.rows, p.a.cols,
                  p.dc.row_stride, p.a.row_stride, p.b.row_stride, p.da.row_stride, p.db.row_stride, p.gate,   p.down};
  const Launch l = plan(p.a, vectorizable({&p.dc, &p.a, &p.b, &p.da, &p.db}));
  TIGON_SWITCH_FLOAT(p.a.dtype, T, launch_bwd<T>(a, p.activation, l, static_cast<cudaStream_t>(stream)));
}

}  // namespace tigon::swiglu
