// LayerNorm CUDA path: launch planning, dtype dispatch and the deterministic dw / db reduction.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/env.h"
#include "common/row_plan.h"
#include "layer_norm/layer_norm.h"
#include "layer_norm/layer_norm_kernels.cuh"
#include "layer_norm/layer_norm_launch.h"

namespace tigon::layer_norm {
namespace {

using row_plan::cached_shape;
using row_plan::ceil_div;
using row_plan::cols_vectorizable;
using row_plan::rows_aligned;
using row_plan::Shape;

bool param_aligned(const void* p) { return p == nullptr || cuda::aligned16(p); }

// Kernel choices follow RMSNorm's measurements (src/rms_norm/rms_norm_cuda.cu): bytes in flight per multiprocessor
// decide these kernels' speed. The forward holds 4 vectors of a row per thread (48 registers in blocks of 128: 1280
// resident threads). The backward also holds its dw and db sums, 2 * 8 fp32 per vector of columns; by default a
// thread holds 2 vectors of each of 2 rows (128 registers, 512 resident threads, 128 bytes of x and dy in flight per
// thread): at 16384 x 4096 bf16 on an H200 it ran 0.1874-0.1879 ms forward + backward against 0.1922 for 1 vector of
// each of 2 rows (64 registers, 1024 resident threads, half the bytes in flight per thread). For tuning, read once:
//   TIGON_LAYER_NORM_FWD_NV   1 (uncached), 2 or 4 vectors of a row per thread; default 4
//   TIGON_LAYER_NORM_BWD_NV   1 (uncached), 2 or 4 vectors of x (and of dy) per thread; default 4
//   TIGON_LAYER_NORM_BWD_ROWS 1 or 2 rows those vectors are spread over; default 2
//   TIGON_LAYER_NORM_PREFETCH 1: the cached kernels also prefetch rows into L2 one wave (forward) or one row group
//                             (backward) ahead, with the copy engine: more bytes in flight for no registers; default 0
//   TIGON_LAYER_NORM_BWD_DB_SMEM 1: with BWD_NV=2 and BWD_ROWS=1 (RMSNorm's backward shape), the db sums in shared
//                             memory (kern::kDbSmemThreads), where blocks of at most 256 threads allow; default 0
int fwd_nv() {
  static const int nv = env_int("TIGON_LAYER_NORM_FWD_NV");
  return nv == 1 || nv == 2 ? nv : 4;
}
int bwd_nv() {
  static const int nv = env_int("TIGON_LAYER_NORM_BWD_NV");
  return nv == 1 || nv == 2 ? nv : 4;
}
int bwd_rows() {
  static const int r = env_int("TIGON_LAYER_NORM_BWD_ROWS");
  return r == 1 ? 1 : 2;
}
bool prefetch() {
  static const bool on = env_int("TIGON_LAYER_NORM_PREFETCH") == 1;
  return on;
}
bool bwd_db_smem() {
  static const bool on = env_int("TIGON_LAYER_NORM_BWD_DB_SMEM") == 1;
  return on;
}

int current_device() {
  int d = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

Plan fwd_plan(const FwdProblem& pr) {
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.y) && param_aligned(pr.w) &&
                   param_aligned(pr.b);
  if (vec && fwd_nv() != 1) {
    // The preferred nv while the row fits, else 4 vectors per thread.
    for (int nv : {fwd_nv(), 4}) {
      const Shape s = cached_shape(pr.x.cols, pr.x.dtype, nv);
      if (s.tpr > kFwdMaxThreads) continue;
      Plan p;
      p.cached = p.vec = true;
      p.nv = nv;
      p.block = dim3(s.tpr, s.rpb);
      p.grid = unsigned(std::min<int64_t>(ceil_div(pr.x.rows, s.rpb), INT_MAX));
      p.prefetch = prefetch();
      if (p.prefetch) p.sms = sm_count(current_device());
      return p;
    }
  }
  return row_plan::row_per_block_plan<Plan>(pr.x, vec, INT_MAX);
}

// The cached backward's layout: c vectors of each of r rows per thread, and the block shape; tpr 0 when the row is
// too long for it (or the uncached kernel is asked for). The preferred layout while the row fits, else 4 vectors of
// one row per thread.
struct BwdShape {
  int c = 0, r = 1;
  Shape s;
};
BwdShape bwd_shape(const RowMatrix& x) {
  if (bwd_nv() == 1) return {};
  const int r = bwd_rows();
  for (const BwdShape& b : {BwdShape{bwd_nv() / r, r, {}}, BwdShape{4, 1, {}}}) {
    const Shape s = cached_shape(x.cols, x.dtype, b.c);
    if (s.tpr <= bwd_max_threads(b.c)) return {b.c, b.r, s};
  }
  return {};
}

// The backward launches about as many blocks as stay resident (launch_bwd asks the occupancy calculator), so each
// walks many rows and its partial sums stay in registers. The workspace bound may depend on x and the device alone
// (tigon_layer_norm_bwd_workspace_size sees nothing else), so it assumes the most any kernel keeps resident: 2048
// threads per multiprocessor. launch_bwd never launches more blocks than the plan's grid, which this bound sets.
constexpr int kMaxResidentThreads = 2048;

int64_t bwd_max_partial_rows(const RowMatrix& x, int device) {
  const BwdShape b = bwd_shape(x);
  const int64_t sms = sm_count(device);
  if (b.s.tpr == 0) return std::min<int64_t>(x.rows, sms * 2);
  const int threads = b.s.tpr * b.s.rpb;
  const int64_t blocks_per_sm = std::max(1, kMaxResidentThreads / threads);
  return std::min(ceil_div(x.rows, int64_t(b.s.rpb) * b.r), sms * blocks_per_sm) * b.s.rpb;
}

Plan bwd_plan(const BwdProblem& pr, int device) {
  const int64_t max_rows = bwd_max_partial_rows(pr.x, device);
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.dy) && rows_aligned(pr.dx) &&
                   param_aligned(pr.w);
  const BwdShape b = bwd_shape(pr.x);
  Plan p;
  if (vec && b.s.tpr > 0) {
    p.cached = p.vec = true;
    p.nv = b.c;
    p.rows = b.r;
    p.prefetch = prefetch();
    p.block = dim3(b.s.tpr, b.s.rpb);
    p.grid = unsigned(max_rows / b.s.rpb);
    const int threads = b.s.tpr * b.s.rpb, per_vec = 16 / dtype_bytes(pr.x.dtype);
    p.db_smem = bwd_db_smem() && b.c == 2 && b.r == 1 && threads <= kDbSmemThreads &&
                2 * per_vec * threads <= kDbSmemFloats;
  } else {
    p = row_plan::row_per_block_plan<Plan>(pr.x, vec, max_rows);
  }
  p.sms = sm_count(device);
  return p;
}

}  // namespace

void fwd_cuda(const FwdProblem& pr, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const FwdArgs a{pr.x.data, pr.w, pr.b, pr.y.data, pr.mean, pr.rstd, pr.x.rows, pr.x.cols, pr.x.row_stride,
                  pr.y.row_stride, pr.eps, 1.f / float(pr.x.cols), 0};
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
  BwdArgs a{pr.dy.data, pr.x.data, pr.w, pr.mean, pr.rstd, pr.dx.data, pr.dw ? ws : nullptr,
            pr.db ? ws + half : nullptr, pr.x.rows, cols, pr.dy.row_stride, pr.x.row_stride, pr.dx.row_stride,
            1.f / float(cols), plan.prefetch};
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
