// LayerNorm CUDA path: launch planning, dtype dispatch and the deterministic dw / db reduction.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/row_plan.h"
#include "layer_norm/layer_norm.h"
#include "layer_norm/layer_norm_launch.cuh"

namespace tigon::layer_norm {
namespace {

using row_plan::cached_shape;
using row_plan::cols_vectorizable;
using row_plan::current_device;
using row_plan::param_aligned;
using row_plan::rows_aligned;
using row_plan::Shape;

// Bytes in flight per multiprocessor decide these kernels' speed (as RMSNorm's). The forward holds 4 vectors of a row
// per thread (48 registers in blocks of 128: 1280 resident threads). The backward also holds its dw and db sums,
// 2 * 8 fp32 per vector of columns, so a thread holds 2 vectors of each of 2 rows (128 registers, 512 resident
// threads, 128 bytes of x and dy in flight per thread): at 16384 x 4096 bf16 on an H200 that ran 0.1874-0.1879 ms
// forward + backward against 0.1922 for 1 vector of each of 2 rows (64 registers, 1024 resident threads). Rows too
// long for that layout take 4 vectors of one row per thread; longer or unaligned rows the uncached kernels.
constexpr int kFwdNv = 4;

Plan fwd_plan(const FwdProblem& pr) {
  const bool vec =
      cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.y) && param_aligned(pr.w) && param_aligned(pr.b);
  const Shape s = cached_shape(pr.x.cols, pr.x.dtype, kFwdNv);
  if (vec && !row_plan::uncached_forced() && s.tpr <= kFwdMaxThreads)
    return row_plan::cached_plan(s, kFwdNv, 1, pr.x.rows, INT_MAX);
  return row_plan::uncached_plan(pr.x, vec, INT_MAX);
}

// The cached backward's layout: c vectors of each of r rows per thread, and the block shape; tpr 0 when the row is
// too long for either layout (or the uncached kernels are forced).
struct BwdShape {
  int c = 0, r = 1;
  Shape s;
};
BwdShape bwd_shape(const RowMatrix& x) {
  if (row_plan::uncached_forced()) return {};
  for (const BwdShape& b : {BwdShape{2, 2, {}}, BwdShape{4, 1, {}}}) {
    const Shape s = cached_shape(x.cols, x.dtype, b.c);
    if (s.tpr <= kBwdMaxThreads) return {b.c, b.r, s};
  }
  return {};
}

// The most any kernel keeps resident: 2048 threads per multiprocessor (see row_plan::max_partial_rows).
constexpr int kMaxResidentThreads = 2048;

int64_t bwd_max_partial_rows(const RowMatrix& x, int device) {
  const BwdShape b = bwd_shape(x);
  return row_plan::max_partial_rows(x.rows, b.s, b.r, kMaxResidentThreads, sm_count(device));
}

Plan bwd_plan(const BwdProblem& pr, int device) {
  const int64_t max_rows = bwd_max_partial_rows(pr.x, device);
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.dy) && rows_aligned(pr.dx) &&
                   param_aligned(pr.w);
  const BwdShape b = bwd_shape(pr.x);
  Plan p = vec && b.s.tpr > 0 ? row_plan::cached_plan(b.s, b.c, b.r, pr.x.rows, max_rows / b.s.rpb)
                              : row_plan::uncached_plan(pr.x, vec, max_rows);
  p.sms = sm_count(device);
  return p;
}

}  // namespace

void fwd_cuda(const FwdProblem& pr, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const FwdArgs a{pr.x.data,       pr.w,      pr.b,
                  pr.y.data,       pr.mean,   pr.rstd,
                  pr.x.rows,       pr.x.cols, pr.x.row_stride,
                  pr.y.row_stride, pr.eps,    1.f / float(pr.x.cols)};
  const Plan plan = fwd_plan(pr);
  const bool p32 = pr.p_dtype == DType::kFloat32;
  TIGON_SWITCH_FLOAT(pr.x.dtype, TX, {
    if constexpr (std::is_same_v<TX, float>)
      launch_fwd<float, float>(a, plan, stream);
    else if (p32)
      launch_fwd<TX, float>(a, plan, stream);
    else
      launch_fwd<TX, TX>(a, plan, stream);
  });
}

size_t bwd_cuda_workspace_bytes(const RowMatrix& x, int device) {
  if (x.rows == 0) return 0;
  // Two partial arrays: dw's, then db's.
  return 2 * size_t(bwd_max_partial_rows(x, device)) * size_t(x.cols) * sizeof(float);
}

void bwd_cuda(const BwdProblem& pr, void* workspace, size_t, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t cols = pr.x.cols;
  if (pr.x.rows == 0) {  // sums over no rows
    if (pr.dw) TIGON_CUDA_CHECK(cudaMemsetAsync(pr.dw, 0, size_t(cols) * dtype_bytes(pr.dw_dtype), stream));
    if (pr.db) TIGON_CUDA_CHECK(cudaMemsetAsync(pr.db, 0, size_t(cols) * dtype_bytes(pr.db_dtype), stream));
    return;
  }
  const int device = current_device();
  const Plan plan = bwd_plan(pr, device);
  float* ws = static_cast<float*>(workspace);
  const int64_t half = bwd_max_partial_rows(pr.x, device) * cols;  // db's partials start here
  BwdArgs a{pr.dy.data,
            pr.x.data,
            pr.w,
            pr.mean,
            pr.rstd,
            pr.dx.data,
            pr.dw ? ws : nullptr,
            pr.db ? ws + half : nullptr,
            pr.x.rows,
            cols,
            pr.dy.row_stride,
            pr.x.row_stride,
            pr.dx.row_stride,
            1.f / float(cols)};
  int64_t partial_rows = 0;
  const bool w32 = pr.w_dtype == DType::kFloat32;
  TIGON_SWITCH_FLOAT(pr.x.dtype, TX, {
    if constexpr (std::is_same_v<TX, float>)
      partial_rows = launch_bwd<float, float>(a, plan, stream);
    else if (w32)
      partial_rows = launch_bwd<TX, float>(a, plan, stream);
    else
      partial_rows = launch_bwd<TX, TX>(a, plan, stream);
  });
  if (pr.dw && pr.db)  // one launch for both
    cuda::column_sum2(a.dw_partial, pr.dw, pr.dw_dtype, a.db_partial, pr.db, pr.db_dtype, partial_rows, cols, stream);
  else if (pr.dw)
    cuda::column_sum(a.dw_partial, partial_rows, cols, pr.dw, pr.dw_dtype, stream);
  else if (pr.db)
    cuda::column_sum(a.db_partial, partial_rows, cols, pr.db, pr.db_dtype, stream);
}

}  // namespace tigon::layer_norm
