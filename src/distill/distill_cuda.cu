// Distillation CUDA path: up to three launches on the caller's stream, no host reads of device data.
//   1. totals: C, the rows not ignored (one block), which the means' gradients divide by
//   2. rows:   each row's loss into the workspace (the output itself for NONE) and its gradient
//   3. finish: MEAN, SUM, BATCHMEAN: the fixed-order sum of the rows' losses times the reduction's scale (one block)
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>

#include "common/async_copy.cuh"
#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "distill/distill.h"
#include "distill/distill_launch.h"

namespace tigon::distill {
namespace {

constexpr int kSerialThreads = 1024;

// Sum of v over the block in a fixed tree (deterministic); the result in thread 0.
__device__ double block_sum(double v, double* smem) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(~0u, v, o);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < kSerialThreads / 32 ? smem[lane] : 0.0;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(~0u, v, o);
  }
  return v;
}

__device__ bool kept(const RowArgs& a, int64_t r) {
  if (a.labels == nullptr) return true;
  const int64_t l =
      a.labels64 ? static_cast<const int64_t*>(a.labels)[r] : int64_t(static_cast<const int32_t*>(a.labels)[r]);
  return l != a.ignore_index;
}

// The row kernel after this one may start at once: it waits for the count only before its gradient pass.
__global__ void __launch_bounds__(kSerialThreads) totals_kernel(RowArgs a, float* totals) {
  cuda::allow_dependents();
  __shared__ double smem[kSerialThreads / 32];
  double c = 0;
  for (int64_t r = threadIdx.x; r < a.rows; r += kSerialThreads) c += kept(a, r) ? 1.0 : 0.0;
  c = block_sum(c, smem);
  if (threadIdx.x == 0) totals[kCount] = float(c);
}

// Launched as the row kernel's programmatic dependent, it waits here for that kernel's end (and its rows' losses).
__global__ void __launch_bounds__(kSerialThreads) finish_kernel(RowArgs a, float* loss) {
  cuda::grid_dependency_wait();
  __shared__ double smem[kSerialThreads / 32];
  double s = 0;
  for (int64_t r = threadIdx.x; r < a.rows; r += kSerialThreads) s += a.row_loss[r];
  s = block_sum(s, smem);
  if (threadIdx.x != 0) return;
  const double count = a.totals[kCount];
  if (a.reduction == TIGON_DISTILL_REDUCTION_BATCHMEAN) s /= count;
  if (a.reduction == TIGON_DISTILL_REDUCTION_MEAN) s /= count * double(a.cols);
  loss[0] = float(s);
}

std::atomic<int> g_override{-1};  // a test's choice of row kernel; -1: the library's plan
thread_local const char* g_last_kernel = "";

bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}

// As the row kernel's programmatic dependent (refused: a plain launch).
void launch_finish(const RowArgs& a, float* loss, cudaStream_t stream) {
  cuda::LaunchConfig c(dim3(1), dim3(kSerialThreads), 0, stream);
  if (cuda::try_launch(c, true, finish_kernel, a, loss)) return;
  finish_kernel<<<1, kSerialThreads, 0, stream>>>(a, loss);
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace

RowKernel row_kernel_choice() {
  const int o = g_override.load(std::memory_order_relaxed);
  return o < 0 ? RowKernel::kCluster : RowKernel(o);
}

void fwd_cuda(const FwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* ws = static_cast<float*>(workspace);
  constexpr float kLog2e = 1.4426950408889634f;
  RowArgs a;
  a.student = p.student.data;
  a.teacher = p.teacher.data;
  a.grad = p.grad.data;
  a.rows = p.student.rows;
  a.cols = p.student.cols;
  a.x_stride = p.student.row_stride;
  a.t_stride = p.teacher.row_stride;
  a.g_stride = p.grad.data ? p.grad.row_stride : 0;
  a.labels = p.labels;
  a.labels64 = p.labels64;
  a.ignore_index = p.ignore_index;
  a.teacher_logits = p.teacher_mode == TIGON_DISTILL_TEACHER_LOGITS;
  a.inv_temp = 1.f / p.temperature;
  a.z_scale = kLog2e * a.inv_temp;
  a.t_scale = a.teacher_logits ? a.z_scale : kLog2e;
  a.t_log = a.teacher_logits ? a.inv_temp : 1.f;
  a.beta = p.beta;
  a.reduction = p.reduction;
  a.totals = ws;
  const bool none = p.reduction == TIGON_DISTILL_REDUCTION_NONE;
  a.row_loss = none ? p.loss : ws + kTotals;

  totals_kernel<<<1, kSerialThreads, 0, s>>>(a, ws);
  TIGON_CUDA_CHECK_LAUNCH();
  if (a.rows > 0) {
    const bool vec = rows_aligned(p.student) && rows_aligned(p.teacher) && (!p.grad.data || rows_aligned(p.grad));
    const bool probs = p.teacher_mode == TIGON_DISTILL_TEACHER_PROBS;
    const RowKernel k = row_kernel_choice();
    TIGON_SWITCH_FLOAT(p.student.dtype, T, g_last_kernel = launch_rows<T>(a, p.kind, probs, vec, k, s, true));
  }
  if (!none) launch_finish(a, p.loss, s);
}

}  // namespace tigon::distill

extern "C" {

tigon_status_t tigon_testing_distill_kernel(const char* name) {
  return tigon::api_guard("tigon_testing_distill_kernel", [&] {
    using tigon::distill::RowKernel;
    int o = -1;
    if (name && std::strcmp(name, "cluster") == 0)
      o = int(RowKernel::kCluster);
    else if (name && std::strcmp(name, "classic") == 0)
      o = int(RowKernel::kClassic);
    else if (name)
      tigon::fail_arg("name", "is not a distillation kernel: ", name);
    tigon::distill::g_override.store(o);
  });
}

const char* tigon_testing_distill_last_kernel(void) { return tigon::distill::g_last_kernel; }

}  // extern "C"
