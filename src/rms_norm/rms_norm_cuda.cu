// RMSNorm CUDA path: launch planning, dtype dispatch and the deterministic dw reduction.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/row_plan.h"
#include "rms_norm/rms_norm.h"
#include "rms_norm/rms_norm_launch.cuh"

namespace tigon::rms_norm {
namespace {

using row_plan::cached_shape;
using row_plan::cols_vectorizable;
using row_plan::current_device;
using row_plan::param_aligned;
using row_plan::rows_aligned;
using row_plan::Shape;

// Kernel choices, measured on an H200 (bf16, 16384 x 4096, ncu). Bytes in flight per multiprocessor decide these
// kernels' speed, and the cached forward is register-limited to ~1024 resident threads: 4 vectors of a row per thread
// ran 67-69 us, 2 ran 95 us, 8 ran 77 us (fewer warps), the uncached kernel 72 us (x read twice). Staging rows in
// shared memory through the bulk copy engine did not beat it either: 69.7 us with one row per block, 81 us with
// persistent blocks three row groups ahead; nor did one resident wave of cached blocks walking the rows (73 us against
// 67 us for a block per row group). The backward, which also keeps the dw sums in registers, ran 112 us with 2
// vectors and 116 us with 4 (loading the next row ahead cost occupancy: 148 us); rows too long for 2 take 4.
constexpr int kFwdNv = 4;

Plan fwd_plan(const FwdProblem& pr) {
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.y) && param_aligned(pr.w) &&
                   (!pr.add || (rows_aligned(pr.res) && rows_aligned(pr.h)));
  const Shape s = cached_shape(pr.x.cols, pr.x.dtype, kFwdNv);
  if (vec && !row_plan::uncached_forced() && s.tpr <= kFwdMaxThreads)
    return row_plan::cached_plan(s, kFwdNv, 1, pr.x.rows, INT_MAX);
  return row_plan::uncached_plan(pr.x, vec, INT_MAX);
}

// The cached backward's vectors per thread and block shape; tpr 0 when the row is too long for it (or the uncached
// kernels are forced).
struct BwdShape {
  int nv = 0;
  Shape s;
};
BwdShape bwd_shape(const RowMatrix& x) {
  if (row_plan::uncached_forced()) return {};
  for (int nv : {2, 4}) {
    const Shape s = cached_shape(x.cols, x.dtype, nv);
    if (s.tpr <= kBwdMaxThreads) return {nv, s};
  }
  return {};
}

// The most a kernel with >= 64 registers per thread keeps resident: 1024 threads per multiprocessor (see
// row_plan::max_partial_rows).
constexpr int kBwdMaxResidentThreads = 1024;

int64_t bwd_max_partial_rows(const RowMatrix& x, int device) {
  return row_plan::max_partial_rows(x.rows, bwd_shape(x).s, 1, kBwdMaxResidentThreads, sm_count(device));
}

Plan bwd_plan(const BwdProblem& pr, int device) {
  const int64_t max_rows = bwd_max_partial_rows(pr.x, device);
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.dy) && rows_aligned(pr.dx) &&
                   param_aligned(pr.w) && (!pr.add_dh || rows_aligned(pr.dh));
  const BwdShape b = bwd_shape(pr.x);
  Plan p = vec && b.s.tpr > 0 ? row_plan::cached_plan(b.s, b.nv, 1, pr.x.rows, max_rows / b.s.rpb)
                              : row_plan::uncached_plan(pr.x, vec, max_rows);
  p.sms = sm_count(device);
  return p;
}

template <class TX, template <class, class, class> class Launch, class Args>
auto dispatch(const Args& a, const Plan& plan, DType w_dtype, DType io_dtype, cudaStream_t stream) {
  const bool w32 = w_dtype == DType::kFloat32, io32 = io_dtype == DType::kFloat32;
  if constexpr (std::is_same_v<TX, float>) {
    return Launch<float, float, float>::run(a, plan, stream);
  } else if (!w32 && !io32) {
    return Launch<TX, TX, TX>::run(a, plan, stream);
  } else if (w32 && !io32) {
    return Launch<TX, float, TX>::run(a, plan, stream);
  } else if (!w32) {
    return Launch<TX, TX, float>::run(a, plan, stream);
  } else {
    return Launch<TX, float, float>::run(a, plan, stream);
  }
}

template <class TX, class TW, class TY>
struct Fwd {
  static void run(const FwdArgs& a, const Plan& p, cudaStream_t s) {
    a.res ? launch_fwd<TX, TW, TY, true>(a, p, s) : launch_fwd<TX, TW, TY, false>(a, p, s);
  }
};
template <class TX, class TW, class TDY>
struct Bwd {
  static int64_t run(const BwdArgs& a, const Plan& p, cudaStream_t s) {
    return a.dh ? launch_bwd<TX, TW, TDY, true>(a, p, s) : launch_bwd<TX, TW, TDY, false>(a, p, s);
  }
};

}  // namespace

void fwd_cuda(const FwdProblem& pr, void* stream) {
  FwdArgs a{pr.x.data,       pr.w,   pr.y.data, pr.rstd, pr.x.rows, pr.x.cols, pr.x.row_stride,
            pr.y.row_stride, pr.eps, pr.offset, pr.mode};
  if (pr.add) {
    a.res = pr.res.data, a.h = pr.h.data;
    a.res_stride = pr.res.row_stride, a.h_stride = pr.h.row_stride;
  }
  const Plan plan = fwd_plan(pr);
  TIGON_SWITCH_FLOAT(pr.x.dtype, TX,
                     dispatch<TX, Fwd>(a, plan, pr.w_dtype, pr.y.dtype, static_cast<cudaStream_t>(stream)));
}

size_t bwd_cuda_workspace_bytes(const RowMatrix& x, int device) {
  if (x.rows == 0) return 0;
  return size_t(bwd_max_partial_rows(x, device)) * size_t(x.cols) * sizeof(float);
}

void bwd_cuda(const BwdProblem& pr, void* workspace, size_t, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (pr.x.rows == 0) {
    if (pr.dw) TIGON_CUDA_CHECK(cudaMemsetAsync(pr.dw, 0, size_t(pr.x.cols) * dtype_bytes(pr.dw_dtype), stream));
    return;
  }
  const Plan plan = bwd_plan(pr, current_device());
  float* partial = pr.dw ? static_cast<float*>(workspace) : nullptr;
  BwdArgs a{pr.dy.data,       pr.x.data, pr.w,      pr.rstd,          pr.dx.data,
            partial,          pr.x.rows, pr.x.cols, pr.dy.row_stride, pr.x.row_stride,
            pr.dx.row_stride, pr.offset};
  if (pr.add_dh) a.dh = pr.dh.data, a.dh_stride = pr.dh.row_stride;
  int64_t partial_rows = 0;
  TIGON_SWITCH_FLOAT(pr.x.dtype, TX, partial_rows = dispatch<TX, Bwd>(a, plan, pr.w_dtype, pr.dy.dtype, stream));
  if (!pr.dw) return;
  cuda::column_sum(partial, partial_rows, pr.x.cols, pr.dw, pr.dw_dtype, stream);
}

}  // namespace tigon::rms_norm
