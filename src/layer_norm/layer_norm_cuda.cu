// LayerNorm CUDA path: launch planning, dtype dispatch and the deterministic dw / db reduction. The plans are
// RMSNorm's (src/rms_norm/rms_norm_cuda.cu records the measurements behind them): the forward caches 4 vectors of a
// row per thread, the backward 2, and only while the row fits in kBwdMaxThreads threads (8192 bf16 / 4096 fp32
// elements): with 4 vectors, x, dy and the dw and db sums need more than 128 registers and spill.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "layer_norm/layer_norm.h"
#include "layer_norm/layer_norm_kernels.cuh"
#include "layer_norm/layer_norm_launch.h"

namespace tigon::layer_norm {
namespace {

constexpr int kFwdNv = 4, kBwdNv = 2;  // the kernels' NV, see launch_fwd / launch_bwd

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}
bool cols_vectorizable(const RowMatrix& x) { return x.cols % (16 / dtype_bytes(x.dtype)) == 0; }
bool param_aligned(const void* p) { return p == nullptr || cuda::aligned16(p); }

// Threads per row and rows per block of the cached kernels: nv vectors of 16 bytes of x per thread; rows shorter
// than a warp share one, and short rows are packed into ~128-thread blocks.
struct Shape {
  int tpr = 0, rpb = 0;
};
Shape cached_shape(int64_t cols, DType x_dtype, int nv) {
  const int v = 16 / dtype_bytes(x_dtype);
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

Plan uncached_plan(const RowMatrix& x, bool vec, int64_t max_grid) {
  Plan p;
  p.vec = vec;
  const int64_t vecs = vec ? x.cols / (16 / dtype_bytes(x.dtype)) : x.cols;
  p.block = dim3(unsigned(std::clamp<int64_t>(ceil_div(ceil_div(vecs, 4), 32) * 32, 32, 1024)), 1);
  p.grid = unsigned(std::min<int64_t>(x.rows, max_grid));
  return p;
}

Plan fwd_plan(const FwdProblem& pr) {
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.y) && param_aligned(pr.w) &&
                   param_aligned(pr.b);
  const Shape s = cached_shape(pr.x.cols, pr.x.dtype, kFwdNv);
  if (vec && s.tpr <= kFwdMaxThreads) {
    Plan p;
    p.cached = p.vec = true;
    p.block = dim3(s.tpr, s.rpb);
    p.grid = unsigned(std::min<int64_t>(ceil_div(pr.x.rows, s.rpb), INT_MAX));
    return p;
  }
  return uncached_plan(pr.x, vec, INT_MAX);
}

// The workspace bound may depend on x and the device alone (tigon_layer_norm_bwd_workspace_size sees nothing else),
// so it assumes the most a kernel with >= 64 registers per thread keeps resident: 1024 threads per multiprocessor.
// launch_bwd never launches more blocks than the plan's grid, which this bound sets.
constexpr int kBwdMaxResidentThreads = 1024;

Shape bwd_shape(const RowMatrix& x) { return cached_shape(x.cols, x.dtype, kBwdNv); }

int64_t bwd_max_partial_rows(const RowMatrix& x, int device) {
  const Shape s = bwd_shape(x);
  const int64_t sms = sm_count(device);
  if (s.tpr <= kBwdMaxThreads) {
    const int64_t blocks_per_sm = std::max(1, kBwdMaxResidentThreads / (s.tpr * s.rpb));
    return std::min(ceil_div(x.rows, s.rpb), sms * blocks_per_sm) * s.rpb;
  }
  return std::min<int64_t>(x.rows, sms * 2);
}

Plan bwd_plan(const BwdProblem& pr, int device) {
  const int64_t max_rows = bwd_max_partial_rows(pr.x, device);
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.dy) && rows_aligned(pr.dx) &&
                   param_aligned(pr.w);
  const Shape s = bwd_shape(pr.x);
  Plan p;
  if (vec && s.tpr <= kBwdMaxThreads) {
    p.cached = p.vec = true;
    p.block = dim3(s.tpr, s.rpb);
    p.grid = unsigned(max_rows / s.rpb);
  } else {
    p = uncached_plan(pr.x, vec, max_rows);
  }
  p.sms = sm_count(device);
  return p;
}

int current_device() {
  int d = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

// Sums `partial_rows` rows of `partial` into out (cols elements of out_dtype), in a fixed order.
void reduce_params(const float* partial, int64_t partial_rows, int64_t cols, void* out, DType out_dtype,
                   cudaStream_t stream) {
  cuda::column_sum(partial, partial_rows, cols, out, out_dtype, stream);
}

}  // namespace

void fwd_cuda(const FwdProblem& pr, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const FwdArgs a{pr.x.data, pr.w, pr.b, pr.y.data, pr.mean, pr.rstd, pr.x.rows, pr.x.cols, pr.x.row_stride,
                  pr.y.row_stride, pr.eps};
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
            pr.db ? ws + half : nullptr, pr.x.rows, cols, pr.dy.row_stride, pr.x.row_stride, pr.dx.row_stride};
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
  if (pr.dw) reduce_params(a.dw_partial, partial_rows, cols, pr.dw, pr.dw_dtype, stream);
  if (pr.db) reduce_params(a.db_partial, partial_rows, cols, pr.db, pr.db_dtype, stream);
}

}  // namespace tigon::layer_norm
