// GroupNorm CUDA path: one block per (sample, group), whose C / G channels x S positions are contiguous.
//
// Forward: the group's sum and sum of squares, shifted by its first element (no cancellation when the mean is large
// next to the spread), in one pass; then y in a second pass, which finds the group in L2 (the groups in flight at once
// hold a few MB). Backward: per channel, sum(dy * xhat) and sum(dy) (the weight's and bias's per-sample partials, and
// through the weight the group's two sums the input gradient needs), then dx in a second pass; the partials [N, C]
// are summed over samples by column_sum in a fixed order. A channel's positions go to a warp when there are at least
// 64 of them, else to one thread. 16-byte vectors where a channel's positions are a multiple of one and the tensors
// are aligned; elements otherwise.
#include <cstdint>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/reduce.cuh"
#include "group_norm/group_norm.h"

namespace tigon::group_norm {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWideMin = 64;  // positions per channel from which a warp, not a thread, takes a channel

struct Args {
  const void* x;
  const void* dy;
  void* out;  // y or dx
  const void* weight;
  const void* bias;
  float* mean;
  float* rstd;
  float* part_dw;  // [N, C] or nullptr
  float* part_db;
  int64_t c, s, groups, cg, len;
  float eps;
};

template <class P>
__device__ __forceinline__ float param(const void* p, int64_t c, float none) {
  return p ? cuda::to_f<P>(static_cast<const P*>(p)[c]) : none;
}

// f(index in the group, V values as floats) over the group's elements, each thread taking every kThreads-th vector,
// kBatch of them loaded before f sees any: one block per group leaves few threads per multiprocessor, so each keeps
// several loads in flight. (f may store over what it was given: a batch's loads all precede its stores.)
constexpr int kBatch = 4;

template <class T, int V, class F>
__device__ __forceinline__ void for_group(const T* base, int64_t len, F f) {
  constexpr int64_t kStep = int64_t(kThreads) * V;
  for (int64_t i0 = int64_t(threadIdx.x) * V; i0 < len; i0 += kBatch * kStep) {
    float v[kBatch][V];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * kStep < len) cuda::load_vec<T, V>(base + i0 + b * kStep, v[b]);
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * kStep < len) f(i0 + b * kStep, v[b]);
  }
}

template <class T, class P, int V>
__global__ void __launch_bounds__(kThreads) fwd(const Args a) {
  __shared__ __align__(16) float smem[2 * kThreads / 32];
  const int64_t row = blockIdx.x, n = row / a.groups, g = row % a.groups;
  const int64_t offset = (n * a.c + g * a.cg) * a.s;
  const T* x = static_cast<const T*>(a.x) + offset;
  const float shift = cuda::to_f<T>(x[0]);
  float acc[2] = {0.f, 0.f};
  for_group<T, V>(x, a.len, [&](int64_t, const float (&v)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = v[j] - shift;
      acc[0] += d;
      acc[1] = fmaf(d, d, acc[1]);
    }
  });
  cuda::row_sums<2>(acc, smem);
  const float inv_len = 1.f / float(a.len), dmean = acc[0] * inv_len;
  const float mean = shift + dmean, rstd = rsqrtf(fmaxf(acc[1] * inv_len - dmean * dmean, 0.f) + a.eps);
  if (threadIdx.x == 0) a.mean[row] = mean, a.rstd[row] = rstd;
  T* y = static_cast<T*>(a.out) + offset;
  for_group<T, V>(x, a.len, [&](int64_t i, const float (&v)[V]) {
    float out[V];
    if constexpr (V > 1) {  // V divides S: one channel per vector
      const int64_t c = g * a.cg + i / a.s;
      const float w = param<P>(a.weight, c, 1.f) * rstd, b = param<P>(a.bias, c, 0.f);
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = fmaf(v[j] - mean, w, b);
    } else {
      const int64_t c = g * a.cg + i / a.s;
      out[0] = fmaf(v[0] - mean, param<P>(a.weight, c, 1.f) * rstd, param<P>(a.bias, c, 0.f));
    }
    cuda::store_vec<T, V>(y + i, out);
  });
}

// kLanes threads per channel (32: a warp; 1: a thread), V elements per load.
template <class T, class P, int V, int kLanes>
__global__ void __launch_bounds__(kThreads) bwd(const Args a) {
  __shared__ __align__(16) float smem[2 * kThreads / 32];
  const int64_t row = blockIdx.x, n = row / a.groups, g = row % a.groups;
  const int64_t offset = (n * a.c + g * a.cg) * a.s;
  const T* x = static_cast<const T*>(a.x) + offset;
  const T* dy = static_cast<const T*>(a.dy) + offset;
  const float mean = a.mean[row], rstd = a.rstd[row];
  constexpr int kWorkers = kThreads / kLanes;
  const int worker = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float tot[2] = {0.f, 0.f};  // sum of dy * w and of dy * w * xhat over the group
  for (int64_t cl = worker; cl < a.cg; cl += kWorkers) {
    float sdx = 0.f, sd = 0.f;  // this channel's sum of dy * xhat and of dy
    for (int64_t s = int64_t(lane) * V; s < a.s; s += int64_t(kLanes) * V) {
      float xv[V], dv[V];
      cuda::load_vec<T, V>(x + cl * a.s + s, xv);
      cuda::load_vec<T, V>(dy + cl * a.s + s, dv);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sdx = fmaf(dv[j], (xv[j] - mean) * rstd, sdx);
        sd += dv[j];
      }
    }
#pragma unroll
    for (int o = kLanes / 2; o > 0; o /= 2) {
      sdx += __shfl_xor_sync(0xffffffffu, sdx, o);
      sd += __shfl_xor_sync(0xffffffffu, sd, o);
    }
    if (lane == 0) {
      const int64_t c = g * a.cg + cl;
      const float w = param<P>(a.weight, c, 1.f);
      tot[0] = fmaf(w, sd, tot[0]);
      tot[1] = fmaf(w, sdx, tot[1]);
      if (a.part_dw) a.part_dw[n * a.c + c] = sdx, a.part_db[n * a.c + c] = sd;
    }
  }
  if (!a.out) return;  // the whole block agrees: no barrier is skipped by some threads only
  cuda::row_sums<2>(tot, smem);
  const float inv_len = 1.f / float(a.len), mg = tot[0] * inv_len, mgx = tot[1] * inv_len;
  T* dx = static_cast<T*>(a.out) + offset;
  constexpr int64_t kStep = int64_t(kThreads) * V;
  constexpr int kPairs = kBatch / 2;  // two loads each: for_group's loads in flight, in fewer registers
  for (int64_t i0 = int64_t(threadIdx.x) * V; i0 < a.len; i0 += kPairs * kStep) {
    float xv[kPairs][V], dv[kPairs][V];  // a batch's loads first (for_group's reason), then its stores
#pragma unroll
    for (int b = 0; b < kPairs; ++b)
      if (i0 + b * kStep < a.len) {
        cuda::load_vec<T, V>(x + i0 + b * kStep, xv[b]);
        cuda::load_vec<T, V>(dy + i0 + b * kStep, dv[b]);
      }
#pragma unroll
    for (int b = 0; b < kPairs; ++b) {
      const int64_t i = i0 + b * kStep;
      if (i >= a.len) break;
      float out[V];
      const int64_t c0 = g * a.cg + i / a.s;  // V divides S when V > 1: one channel per vector
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t c = V > 1 ? c0 : g * a.cg + (i + j) / a.s;
        const float xhat = (xv[b][j] - mean) * rstd;
        out[j] = rstd * (fmaf(dv[b][j], param<P>(a.weight, c, 1.f), -mg) - xhat * mgx);
      }
      cuda::store_vec<T, V>(dx + i, out);
    }
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T>
constexpr int vec_of() {
  return int(16 / sizeof(T));
}

template <class T, class P>
void run_fwd(const FwdProblem& p, cudaStream_t stream) {
  const Shape& s = p.shape;
  Args a{};
  a.x = p.x, a.out = p.y, a.weight = p.weight, a.bias = p.bias, a.mean = p.mean, a.rstd = p.rstd, a.eps = p.eps;
  a.c = s.c, a.s = s.s, a.groups = s.groups, a.cg = s.group_channels(), a.len = s.group_size();
  constexpr int V = vec_of<T>();
  const unsigned grid = unsigned(s.n * s.groups);
  if (s.s % V == 0 && aligned16(p.x) && aligned16(p.y))
    fwd<T, P, V><<<grid, kThreads, 0, stream>>>(a);
  else
    fwd<T, P, 1><<<grid, kThreads, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T, class P>
void run_bwd(const BwdProblem& p, void* workspace, cudaStream_t stream) {
  const Shape& s = p.shape;
  const bool sums = p.dweight || p.dbias;
  float* part_dw = sums ? static_cast<float*>(workspace) : nullptr;
  float* part_db = sums ? part_dw + (cuda_workspace_bytes(s) / 2) / sizeof(float) : nullptr;
  Args a{};
  a.x = p.x, a.dy = p.dy, a.out = p.dx, a.weight = p.weight, a.part_dw = part_dw, a.part_db = part_db;
  a.mean = const_cast<float*>(p.mean), a.rstd = const_cast<float*>(p.rstd);  // read only in the backward
  a.c = s.c, a.s = s.s, a.groups = s.groups, a.cg = s.group_channels(), a.len = s.group_size();
  constexpr int V = vec_of<T>();
  const unsigned grid = unsigned(s.n * s.groups);
  const bool vec = s.s % V == 0 && aligned16(p.x) && aligned16(p.dy) && aligned16(p.dx);
  if (s.s >= kWideMin) {
    if (vec)
      bwd<T, P, V, 32><<<grid, kThreads, 0, stream>>>(a);
    else
      bwd<T, P, 1, 32><<<grid, kThreads, 0, stream>>>(a);
  } else {
    if (vec)
      bwd<T, P, V, 1><<<grid, kThreads, 0, stream>>>(a);
    else
      bwd<T, P, 1, 1><<<grid, kThreads, 0, stream>>>(a);
  }
  TIGON_CUDA_CHECK_LAUNCH();
  if (p.dweight) cuda::column_sum(part_dw, s.n, s.c, p.dweight, p.grad_dtype, stream);
  if (p.dbias) cuda::column_sum(part_db, s.n, s.c, p.dbias, p.grad_dtype, stream);
}

}  // namespace

void fwd_cuda(const FwdProblem& p, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  switch (p.shape.dtype) {
    case DType::kFloat32: return run_fwd<float, float>(p, st);
    case DType::kFloat16:
      return p.param_dtype == DType::kFloat32 ? run_fwd<__half, float>(p, st) : run_fwd<__half, __half>(p, st);
    case DType::kBFloat16:
      return p.param_dtype == DType::kFloat32 ? run_fwd<__nv_bfloat16, float>(p, st)
                                              : run_fwd<__nv_bfloat16, __nv_bfloat16>(p, st);
    default: fail(TIGON_ERROR_INTERNAL, "group norm: unexpected dtype ", dtype_name(p.shape.dtype));
  }
}

void bwd_cuda(const BwdProblem& p, void* workspace, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  switch (p.shape.dtype) {
    case DType::kFloat32: return run_bwd<float, float>(p, workspace, st);
    case DType::kFloat16:
      return p.param_dtype == DType::kFloat32 ? run_bwd<__half, float>(p, workspace, st)
                                              : run_bwd<__half, __half>(p, workspace, st);
    case DType::kBFloat16:
      return p.param_dtype == DType::kFloat32 ? run_bwd<__nv_bfloat16, float>(p, workspace, st)
                                              : run_bwd<__nv_bfloat16, __nv_bfloat16>(p, workspace, st);
    default: fail(TIGON_ERROR_INTERNAL, "group norm: unexpected dtype ", dtype_name(p.shape.dtype));
  }
}

}  // namespace tigon::group_norm
