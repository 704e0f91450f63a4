// Cross entropy CUDA path: three launches on the caller's stream, no host reads of device data.
//   1. totals: W (weight sum of non-ignored targets), C (their count), sum of all class weights; one block, fp64
//   2. rows:   per-row ce, z-loss and correctness into the workspace, and the gradient (reads 1. for MEAN's scale)
//   3. finish: the outputs (a copy for NONE, a fixed-order sum for MEAN and SUM); one block, fp64
#include <cuda_runtime.h>

#include <cmath>

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "cross_entropy/cross_entropy.h"
#include "cross_entropy/cross_entropy_launch.h"

namespace tigon::cross_entropy {
namespace {

constexpr int kSerialThreads = 256;

// Sums three doubles over the block in a fixed tree (deterministic); the result is in thread 0.
__device__ void block_sum3(double (&v)[3], double (*smem)[kSerialThreads]) {
  for (int k = 0; k < 3; ++k) smem[k][threadIdx.x] = v[k];
  __syncthreads();
  for (int half = kSerialThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half)
      for (int k = 0; k < 3; ++k) smem[k][threadIdx.x] += smem[k][threadIdx.x + half];
    __syncthreads();
  }
  for (int k = 0; k < 3; ++k) v[k] = smem[k][0];
}

__global__ void __launch_bounds__(kSerialThreads) totals_kernel(RowArgs a, float* totals) {
  __shared__ double smem[3][kSerialThreads];
  double v[3] = {0, 0, 0};  // W, C, sum of class weights
  for (int64_t r = threadIdx.x; r < a.rows; r += kSerialThreads) {
    const int64_t t = a.target64 ? static_cast<const int64_t*>(a.target)[r]
                                 : int64_t(static_cast<const int32_t*>(a.target)[r]);
    if (t == a.ignore_index) continue;
    const bool in_range = t >= 0 && t < a.cols;
    v[0] += a.weight ? (in_range ? double(a.weight[t]) : NAN) : 1.0;  // an unreadable weight poisons the mean
    v[1] += 1.0;
  }
  if (a.weight)
    for (int64_t c = threadIdx.x; c < a.cols; c += kSerialThreads) v[2] += a.weight[c];
  block_sum3(v, smem);
  if (threadIdx.x == 0) {
    totals[kWeightSum] = float(v[0]);
    totals[kCount] = float(v[1]);
    totals[kWeightAll] = float(v[2]);
  }
}

struct Outputs {
  float* loss;
  float* z_loss;
  float* accuracy;
  int reduction;
};

__global__ void __launch_bounds__(kSerialThreads) finish_kernel(RowArgs a, Outputs o) {
  __shared__ double smem[3][kSerialThreads];
  if (o.reduction == TIGON_REDUCTION_NONE) {
    for (int64_t r = threadIdx.x; r < a.rows; r += kSerialThreads) {
      o.loss[r] = a.row_ce[r] + a.row_z[r];
      if (o.z_loss) o.z_loss[r] = a.row_z[r];
      if (o.accuracy) o.accuracy[r] = a.row_correct[r];
    }
    return;
  }
  double v[3] = {0, 0, 0};
  for (int64_t r = threadIdx.x; r < a.rows; r += kSerialThreads) {
    v[0] += a.row_ce[r];
    v[1] += a.row_z[r];
    v[2] += a.row_correct[r];
  }
  block_sum3(v, smem);
  if (threadIdx.x != 0) return;
  const double count = a.totals[kCount];
  const bool mean = o.reduction == TIGON_REDUCTION_MEAN;
  const double ce = mean ? v[0] / double(a.totals[kWeightSum]) : v[0];
  const double z = mean ? v[1] / count : v[1];
  o.loss[0] = float(ce + z);
  if (o.z_loss) o.z_loss[0] = float(z);
  if (o.accuracy) o.accuracy[0] = float(v[2] / count);
}

bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}

}  // namespace

void launch_totals(const RowArgs& a, float* totals, cudaStream_t stream) {
  totals_kernel<<<1, kSerialThreads, 0, stream>>>(a, totals);
  TIGON_CUDA_CHECK_LAUNCH();
}

void launch_finish(const RowArgs& a, float* loss, float* z_loss, float* accuracy, int reduction,
                   cudaStream_t stream) {
  finish_kernel<<<1, kSerialThreads, 0, stream>>>(a, Outputs{loss, z_loss, accuracy, reduction});
  TIGON_CUDA_CHECK_LAUNCH();
}

void fwd_cuda(const FwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* ws = static_cast<float*>(workspace);
  const int64_t rows = p.logits.rows;
  RowArgs a;
  a.logits = p.logits.data;
  a.grad = p.grad.data;
  a.rows = rows;
  a.cols = p.logits.cols;
  a.x_stride = p.logits.row_stride;
  a.g_stride = p.grad.data ? p.grad.row_stride : 0;
  a.target = p.target;
  a.target64 = p.target64;
  a.ignore_index = p.ignore_index;
  a.weight = p.weight;
  a.smoothing = p.smoothing;
  a.z_scale = p.z_scale;
  a.softcap = p.softcap;
  a.mean = p.reduction == TIGON_REDUCTION_MEAN;
  a.totals = ws;
  a.row_ce = ws + kTotals;
  a.row_z = a.row_ce + rows;
  a.row_correct = a.row_z + rows;

  launch_totals(a, ws, s);
  if (rows > 0) {
    const bool vec = rows_aligned(p.logits) && (!p.grad.data || rows_aligned(p.grad));
    TIGON_SWITCH_FLOAT(p.logits.dtype, T, launch_rows<T>(a, vec, s));
  }
  launch_finish(a, p.loss, p.z_loss, p.accuracy, p.reduction, s);
}

void bwd_cuda(const BwdProblem& p, void* stream) {
  ScaleArgs a;
  a.grad = p.grad.data;
  a.rows = p.grad.rows;
  a.cols = p.grad.cols;
  a.stride = p.grad.row_stride;
  a.grad_output = p.grad_output;
  a.go_stride = p.per_row ? p.go_stride : 0;
  const bool vec = rows_aligned(p.grad);
  TIGON_SWITCH_FLOAT(p.grad.dtype, T, launch_scale<T>(a, vec, static_cast<cudaStream_t>(stream)));
}

}  // namespace tigon::cross_entropy
