// Cross entropy CUDA path: three launches on the caller's stream, no host reads of device data.
//   1. totals: W (weight sum of non-ignored targets), C (their count), sum of all class weights; one block, fp64
//   2. rows:   per-row ce, z-loss and correctness into the workspace, and the gradient (reads 1. for MEAN's scale)
//   3. finish: the outputs (a copy for NONE, a fixed-order sum for MEAN and SUM); one block, fp64
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "common/async_copy.cuh"
#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "cross_entropy/cross_entropy.h"
#include "cross_entropy/cross_entropy_kernels.cuh"
#include "cross_entropy/cross_entropy_launch.h"

namespace tigon::cross_entropy {
namespace {

// The one-block kernels read their rows kBatch at a time per thread, all loads in flight before any is used: a load
// per row per step waited out DRAM latency 32 times over at 8192 rows (16 us for the totals, 9 for the outputs, 2% of
// the whole cross entropy pass on an H200). 1024 threads: 8192 rows in one round of loads (at 512 threads, two;
// measured within noise of each other, 1.1018-1.1020 against 1.1023-1.1027 ms for the whole pass in one call).
// Per thread, rows in increasing order; then a fixed tree: deterministic.
constexpr int kSerialThreads = 1024, kBatch = 8;

constexpr int kSerialWarps = kSerialThreads / 32;

// Sums three doubles over the block in a fixed tree (deterministic): shuffles within each warp, then the warps' sums
// in warp 0; the result is in thread 0. One barrier: the finish kernel's tail after the row kernel is on every call's
// critical path (a shared-memory tree of 9 barriers took about a microsecond of it).
__device__ void block_sum3(double (&v)[3], double (*smem)[kSerialWarps]) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  for (int k = 0; k < 3; ++k)
    for (int o = 16; o > 0; o /= 2) v[k] += __shfl_down_sync(~0u, v[k], o);
  if (lane == 0)
    for (int k = 0; k < 3; ++k) smem[k][warp] = v[k];
  __syncthreads();
  if (warp != 0) return;
  for (int k = 0; k < 3; ++k) {
    v[k] = lane < kSerialWarps ? smem[k][lane] : 0.0;
    for (int o = 16; o > 0; o /= 2) v[k] += __shfl_down_sync(~0u, v[k], o);
  }
}

// f(r) for this thread's rows r < n (threadIdx.x, + kSerialThreads, ...) in increasing order, kBatch rows' loads
// (load(r)) issued before the first use.
template <class Load, class Use>
__device__ __forceinline__ void for_rows(int64_t n, Load load, Use use) {
  using V = decltype(load(int64_t(0)));
  for (int64_t r0 = threadIdx.x; r0 < n; r0 += int64_t(kSerialThreads) * kBatch) {
    V v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t r = r0 + int64_t(j) * kSerialThreads;
      if (r < n) v[j] = load(r);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t r = r0 + int64_t(j) * kSerialThreads;
      if (r < n) use(r, v[j]);
    }
  }
}

// The row kernel after this one may start at once (launch_rows_as with follows_totals): it waits for these totals
// only where it needs them, after its first pass over the row.
__global__ void __launch_bounds__(kSerialThreads) totals_kernel(RowArgs a, float* totals) {
  cuda::allow_dependents();
  __shared__ double smem[3][kSerialWarps];
  double v[3] = {0, 0, 0};  // W, C, sum of class weights
  for_rows(
      a.rows, [&](int64_t r) { return kern::load_target(a, r); },
      [&](int64_t, int64_t t) {
        if (t == a.ignore_index) return;
        const bool in_range = t >= 0 && t < a.cols;
        v[0] += a.weight ? (in_range ? double(a.weight[t]) : NAN) : 1.0;  // an unreadable weight poisons the mean
        v[1] += 1.0;
      });
  if (a.weight) for_rows(a.cols, [&](int64_t c) { return a.weight[c]; }, [&](int64_t, float w) { v[2] += w; });
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

// Launched as the row kernel's programmatic dependent (launch_finish with follows_rows), it starts while that kernel's
// last blocks run and waits here for its end (and for its rows' results).
__global__ void __launch_bounds__(kSerialThreads) finish_kernel(RowArgs a, Outputs o) {
  cuda::grid_dependency_wait();
  __shared__ double smem[3][kSerialWarps];
  if (o.reduction == TIGON_REDUCTION_NONE) {
    for_rows(
        a.rows, [&](int64_t r) { return make_float3(a.row_ce[r], a.row_z[r], a.row_correct[r]); },
        [&](int64_t r, float3 x) {
          o.loss[r] = x.x + x.y;
          if (o.z_loss) o.z_loss[r] = x.y;
          if (o.accuracy) o.accuracy[r] = x.z;
        });
    return;
  }
  double v[3] = {0, 0, 0};
  for_rows(
      a.rows, [&](int64_t r) { return make_float3(a.row_ce[r], a.row_z[r], a.row_correct[r]); },
      [&](int64_t, float3 x) {
        v[0] += x.x;
        v[1] += x.y;
        v[2] += x.z;
      });
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

// A test's choice of row kernel (tigon_testing_cross_entropy_kernel): "cluster" (the library's plan), "cluster<N>"
// (the cluster kernel, N = 1-8 blocks per row, forced) or "classic".
bool parse_choice(const char* name, KernelChoice* k) {
  if (std::strcmp(name, "classic") == 0) {
    *k = {RowKernel::kClassic, 0};
    return true;
  }
  const char* prefix = "cluster";
  if (std::strncmp(name, prefix, std::strlen(prefix)) != 0) return false;
  const char* rest = name + std::strlen(prefix);
  KernelChoice c;
  if (*rest >= '1' && *rest <= '8') c.cluster = *rest++ - '0';
  if (*rest) return false;
  *k = c;
  return true;
}

// A test's choice, encoded as kind | cluster << 1; -1: the library's plan.
std::atomic<int> g_override{-1};
thread_local const char* g_last_kernel = "";

bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}

// The cluster kernel's condition: whole elements, and the gradient's rows as far from a 16-byte boundary as the
// logits' rows (in place, or the same layout), so one row's vectors line up in both.
bool rows_alike(const RowMatrix& x, const RowMatrix& g) {
  const int64_t b = dtype_bytes(x.dtype);
  const uintptr_t xp = reinterpret_cast<uintptr_t>(x.data), gp = reinterpret_cast<uintptr_t>(g.data);
  if (xp % uintptr_t(b) != 0) return false;
  if (g.data == nullptr) return true;
  return (xp - gp) % 16 == 0 && (x.rows <= 1 || ((x.row_stride - g.row_stride) * b) % 16 == 0);
}

}  // namespace

KernelChoice row_kernel_choice() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o < 0) return {};
  return {RowKernel(o & 1), o >> 1};
}

RowArgs loss_args(const FwdProblem& p, int64_t rows, float* ws) {
  RowArgs a;
  a.rows = rows;
  a.cols = p.logits.cols;
  a.target = p.target;
  a.target64 = p.target64;
  a.ignore_index = p.ignore_index;
  a.weight = p.weight;
  a.smoothing = p.smoothing;
  a.z_scale = p.z_scale;
  a.softcap = p.softcap;
  a.mean = p.reduction == TIGON_REDUCTION_MEAN;
  a.want_arg = p.accuracy != nullptr || p.predicted != nullptr;
  a.token_scaling = p.token_scaling;
  a.predicted = p.predicted;
  a.totals = ws;
  a.row_ce = ws + kTotals;
  a.row_z = a.row_ce + rows;
  a.row_correct = a.row_z + rows;
  return a;
}

void launch_totals(const RowArgs& a, float* totals, cudaStream_t stream) {
  totals_kernel<<<1, kSerialThreads, 0, stream>>>(a, totals);
  TIGON_CUDA_CHECK_LAUNCH();
}

void launch_finish(const RowArgs& a, float* loss, float* z_loss, float* accuracy, int reduction, cudaStream_t stream,
                   bool follows_rows) {
  const Outputs o{loss, z_loss, accuracy, reduction};
  // As the row kernel's dependent: saves the launch latency after its last block (refused: a plain launch).
  cuda::LaunchConfig c(dim3(1), dim3(kSerialThreads), 0, stream);
  if (cuda::try_launch(c, follows_rows, finish_kernel, a, o)) return;
  finish_kernel<<<1, kSerialThreads, 0, stream>>>(a, o);
  TIGON_CUDA_CHECK_LAUNCH();
}

void fwd_cuda(const FwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* ws = static_cast<float*>(workspace);
  const int64_t rows = p.logits.rows;
  RowArgs a = loss_args(p, rows, ws);
  a.logits = p.logits.data;
  a.grad = p.grad.data;
  a.x_stride = p.logits.row_stride;
  a.g_stride = p.grad.data ? p.grad.row_stride : 0;

  launch_totals(a, ws, s);
  if (rows > 0) {
    const bool vec = rows_aligned(p.logits) && (!p.grad.data || rows_aligned(p.grad));
    const bool alike = rows_alike(p.logits, p.grad);
    const KernelChoice k = row_kernel_choice();
    // As the totals kernel's programmatic dependent: every block of the cluster kernel waits for the totals kernel
    // before it ends (ignored rows too), so the finish kernel, which waits for the row grid alone, sees the totals.
    TIGON_SWITCH_FLOAT(p.logits.dtype, T,
                       g_last_kernel = launch_rows_as<T>(a, vec, alike, k, s, /*follows_totals=*/true));
  }
  launch_finish(a, p.loss, p.z_loss, p.accuracy, p.reduction, s, /*follows_rows=*/true);
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

extern "C" {

tigon_status_t tigon_testing_cross_entropy_kernel(const char* name) {
  return tigon::api_guard("tigon_testing_cross_entropy_kernel", [&] {
    using namespace tigon::cross_entropy;
    KernelChoice k;
    if (name && !parse_choice(name, &k)) tigon::fail_arg("name", "is not a cross entropy kernel: ", name);
    g_override.store(name ? int(k.kind) | k.cluster << 1 : -1);
  });
}

const char* tigon_testing_cross_entropy_last_kernel(void) { return tigon::cross_entropy::g_last_kernel; }

}  // extern "C"
