// RMSNorm CUDA path: launch planning, dtype dispatch and the deterministic dw reduction.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/env.h"
#include "common/row_plan.h"
#include "rms_norm/rms_norm.h"
#include "rms_norm/rms_norm_kernels.cuh"
#include "rms_norm/rms_norm_launch.h"

namespace tigon::rms_norm {
namespace {

using row_plan::ceil_div;
using row_plan::cols_vectorizable;
using row_plan::rows_aligned;

// Kernel choices, measured on the H200 (bf16, 16384 x 4096, ncu). Bytes in flight per multiprocessor decide these
// kernels' speed, and the cached forward is register-limited to ~1024 resident threads: 4 vectors of a row per thread
// ran 67-69 us, 2 ran 95 us, 8 ran 77 us (fewer warps), the two-pass kernel 72 us (x read twice). Staging rows in
// shared memory through the bulk copy engine did not beat it either: 69.7 us with one row per block, 81 us with
// persistent blocks three row groups ahead; nor did one resident wave of cached blocks walking the rows (73 us against
// 67 us for a block per row group). Those were tried and reverted, see the history. The backward, which also keeps the
// dw sums in registers, ran 112 us with 2 vectors and 116 us with 4 (loading the next row ahead cost occupancy:
// 148 us). TIGON_RMS_NORM_FWD_NV (1 = two-pass, 2, 4) and TIGON_RMS_NORM_BWD_NV (2, 4) override, for tuning.
int fwd_nv() {  // 1: the two-pass kernel
  static const int nv = env_int("TIGON_RMS_NORM_FWD_NV");
  return nv == 2 || nv == 1 ? nv : 4;
}
int bwd_nv() {
  static const int nv = env_int("TIGON_RMS_NORM_BWD_NV");
  return nv == 4 ? 4 : 2;
}

// Threads per row and rows per block of the cached kernels (row_plan::cached_shape) with their nv.
struct Shape {
  int nv = 4, tpr = 0, rpb = 0;
};
Shape cached_shape(int64_t cols, DType x_dtype, int nv) {
  const row_plan::Shape r = row_plan::cached_shape(cols, x_dtype, nv);
  return Shape{nv, r.tpr, r.rpb};
}
// The shape for a direction: its preferred nv while the row fits in max_threads, else 4 vectors per thread.
Shape cached_shape(int64_t cols, DType x_dtype, int nv, int max_threads) {
  const Shape s = cached_shape(cols, x_dtype, nv);
  return s.tpr <= max_threads || nv == 4 ? s : cached_shape(cols, x_dtype, 4);
}

Plan fwd_plan(const FwdProblem& pr) {
  const bool vec = cols_vectorizable(pr.x) && rows_aligned(pr.x) && rows_aligned(pr.y) &&
                   (pr.w == nullptr || cuda::aligned16(pr.w));
  const Shape s = cached_shape(pr.x.cols, pr.x.dtype, fwd_nv() == 1 ? 4 : fwd_nv(), kFwdMaxThreads);
  if (vec && s.tpr <= kFwdMaxThreads && fwd_nv() != 1) {
    Plan p;
    p.cached = p.vec = true;
    p.nv = s.nv;
    p.block = dim3(s.tpr, s.rpb);
    p.grid = unsigned(std::min<int64_t>(ceil_div(pr.x.rows, s.rpb), INT_MAX));
    return p;
  }
  return row_plan::row_per_block_plan<Plan>(pr.x, vec, INT_MAX);
}

// The backward launches about as many blocks as stay resident (launch_bwd asks the occupancy calculator), so each
// block walks many rows and its dw partial sums stay in registers. The workspace bound must not depend on anything
// but x and the device (tigon_rms_norm_bwd_workspace_size sees nothing else), so it assumes the most a kernel with
// >= 64 registers per thread can keep resident: 1024 threads per multiprocessor.
constexpr int kBwdMaxResidentThreads = 1024;

Shape bwd_shape(const RowMatrix& x) { return cached_shape(x.cols, x.dtype, bwd_nv(), kBwdMaxThreads); }

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
                   (pr.w == nullptr || cuda::aligned16(pr.w));
  const Shape s = bwd_shape(pr.x);
  Plan p;
  if (vec && s.tpr <= kBwdMaxThreads) {
    p.cached = p.vec = true;
    p.nv = s.nv;
    p.block = dim3(s.tpr, s.rpb);
    p.grid = unsigned(max_rows / s.rpb);
  } else {
    p = row_plan::row_per_block_plan<Plan>(pr.x, vec, max_rows);
  }
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
  static void run(const FwdArgs& a, const Plan& p, cudaStream_t s) { launch_fwd<TX, TW, TY>(a, p, s); }
};
template <class TX, class TW, class TDY>
struct Bwd {
  static int64_t run(const BwdArgs& a, const Plan& p, cudaStream_t s) { return launch_bwd<TX, TW, TDY>(a, p, s); }
};

int current_device() {
  int d = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

}  // namespace

void fwd_cuda(const FwdProblem& pr, void* stream) {
  FwdArgs a{pr.x.data, pr.w, pr.y.data, pr.rstd, pr.x.rows, pr.x.cols, pr.x.row_stride, pr.y.row_stride,
            pr.eps, pr.offset, pr.mode};
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
  BwdArgs a{pr.dy.data, pr.x.data, pr.w, pr.rstd, pr.dx.data, partial, pr.x.rows, pr.x.cols,
            pr.dy.row_stride, pr.x.row_stride, pr.dx.row_stride, pr.offset};
  int64_t partial_rows = 0;
  TIGON_SWITCH_FLOAT(pr.x.dtype, TX, partial_rows = dispatch<TX, Bwd>(a, plan, pr.w_dtype, pr.dy.dtype, stream));
  if (!pr.dw) return;
  cuda::column_sum(partial, partial_rows, pr.x.cols, pr.dw, pr.dw_dtype, stream);
}

}  // namespace tigon::rms_norm
