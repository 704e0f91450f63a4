// Softmax CUDA path on the normalization core's row plans (common/row_plan.h). A row that fits is held in registers
// (nv 16-byte vectors per thread, tpr threads per row): one read and one write per element each way. Longer or
// unaligned rows run the uncached kernels: one block per row, the forward reading x twice (the row's max and sum with
// an online rescaling, then the output) and the backward reading y and dy twice (the dot product, then dx).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <initializer_list>

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/reduce.cuh"
#include "common/row_plan.h"
#include "softmax/softmax.h"

namespace tigon::softmax {
namespace {

using cuda::load_vec;
using cuda::row_max;
using cuda::row_sum;
using cuda::store_vec;

constexpr int kNv = 4;  // 16-byte vectors per thread in the cached kernels
constexpr int kMaxThreads = 1024;

struct Args {
  const void *a, *b;  // forward: x; backward: y, dy
  void* out;          // y or dx
  int64_t rows, cols, a_stride, b_stride, out_stride;
  int64_t causal;  // forward: L of a causal [..., L, L] x (FwdProblem::causal), 0 for none
};

// The entries of a row the forward reads: all, or those the causal mask keeps.
template <bool Causal>
__device__ __forceinline__ int64_t kept(const Args& a, int64_t row) {
  return Causal ? row % a.causal + 1 : a.cols;
}

// Masked entries (at or past n) of the V values from column c become -inf.
template <bool Causal, int V>
__device__ __forceinline__ void mask_tail(float (&v)[V], int64_t c, int64_t n) {
  if constexpr (Causal)
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (c + j >= n) v[j] = -INFINITY;
}

__device__ __forceinline__ int64_t row_step() { return int64_t(gridDim.x) * blockDim.y; }

// Forward, a row in registers: thread x of a row holds vectors x, x + tpr, ... (kNv at most). The max and the sum
// take one barrier each (row_max_once and row_sums<1>, a buffer each). Causal: vectors wholly past the mask are not
// loaded, the mask is applied once every load is in flight, and the masked zeros are still stored.
template <class T, bool Causal>
__global__ void fwd_cached(const Args a) {
  constexpr int V = 16 / sizeof(T);
  __shared__ __align__(16) float buf[2][kMaxThreads / 32];
  const int64_t nvec = a.cols / V;
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < a.rows; r0 += row_step()) {
    const int64_t row = r0 + threadIdx.y;
    bool live[kNv];
#pragma unroll
    for (int i = 0; i < kNv; ++i) live[i] = row < a.rows && threadIdx.x + int64_t(i) * blockDim.x < nvec;
    const T* x = static_cast<const T*>(a.a) + row * a.a_stride + threadIdx.x * V;
    const int64_t n = kept<Causal>(a, row);
    // Every load is issued before any value is used (load_vec_if): one memory round trip per row, not per vector.
    float v[kNv][V];
#pragma unroll
    for (int i = 0; i < kNv; ++i) {
      const int64_t c = (threadIdx.x + int64_t(i) * blockDim.x) * V;
      cuda::load_vec_if<T, V>(live[i] && (!Causal || c < n), x + int64_t(i) * blockDim.x * V, v[i], -INFINITY);
    }
#pragma unroll
    for (int i = 0; i < kNv; ++i) mask_tail<Causal>(v[i], (threadIdx.x + int64_t(i) * blockDim.x) * V, n);
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kNv; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) m = fmaxf(m, v[i][j]);
    m = cuda::row_max_once(m, buf[0]);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kNv; ++i)
      if (live[i])
#pragma unroll
        for (int j = 0; j < V; ++j) s += (v[i][j] = expf(v[i][j] - m));
    float sum[1] = {s};
    cuda::row_sums<1>(sum, buf[1]);
    const float inv = 1.f / sum[0];
    T* y = static_cast<T*>(a.out) + row * a.out_stride + threadIdx.x * V;
#pragma unroll
    for (int i = 0; i < kNv; ++i)
      if (live[i]) {
#pragma unroll
        for (int j = 0; j < V; ++j) v[i][j] *= inv;
        store_vec<T, V>(y + int64_t(i) * blockDim.x * V, v[i]);
      }
  }
}

// Backward, a row of y and dy in registers; the dot product's reductions alternate between two buffers by row.
template <class T>
__global__ void bwd_cached(const Args a) {
  constexpr int V = 16 / sizeof(T);
  __shared__ __align__(16) float buf[2][kMaxThreads / 32];
  const int64_t nvec = a.cols / V;
  int parity = 0;
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < a.rows; r0 += row_step(), parity ^= 1) {
    const int64_t row = r0 + threadIdx.y;
    bool live[kNv];
#pragma unroll
    for (int i = 0; i < kNv; ++i) live[i] = row < a.rows && threadIdx.x + int64_t(i) * blockDim.x < nvec;
    const int64_t at = threadIdx.x * V;
    const T* yp = static_cast<const T*>(a.a) + row * a.a_stride + at;
    const T* gp = static_cast<const T*>(a.b) + row * a.b_stride + at;
    float y[kNv][V], dy[kNv][V];  // every load before any use, as in the forward; a row's dead vectors are zeros
#pragma unroll
    for (int i = 0; i < kNv; ++i) {
      cuda::load_vec_if<T, V>(live[i], yp + int64_t(i) * blockDim.x * V, y[i], 0.f);
      cuda::load_vec_if<T, V>(live[i], gp + int64_t(i) * blockDim.x * V, dy[i], 0.f);
    }
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kNv; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) dot = fmaf(y[i][j], dy[i][j], dot);
    float d[1] = {dot};
    cuda::row_sums<1>(d, buf[parity]);
    dot = d[0];
    T* dx = static_cast<T*>(a.out) + row * a.out_stride + at;
#pragma unroll
    for (int i = 0; i < kNv; ++i)
      if (live[i]) {
#pragma unroll
        for (int j = 0; j < V; ++j) y[i][j] *= dy[i][j] - dot;
        store_vec<T, V>(dx + int64_t(i) * blockDim.x * V, y[i]);
      }
  }
}

// Forward, any row: one row per block iteration, V elements per step (16-byte vectors, or 1). Causal: the vectors
// that start past the mask are not read.
template <class T, int V, bool Causal>
__global__ void fwd_uncached(const Args a) {
  __shared__ float smem[kMaxThreads / 32];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.a) + row * a.a_stride;
    const int64_t n = kept<Causal>(a, row);
    float m = -INFINITY, s = 0.f;  // this thread's running max and sum of exp(x - m)
    for (int64_t c = int64_t(threadIdx.x) * V; c < n; c += int64_t(blockDim.x) * V) {
      float v[V];
      load_vec<T, V>(x + c, v);
      mask_tail<Causal>(v, c, n);
      float mv = m;
#pragma unroll
      for (int j = 0; j < V; ++j) mv = fmaxf(mv, v[j]);
      if (mv != -INFINITY) {
        s *= expf(m - mv);  // m = -inf (first values): s is 0 and stays 0
#pragma unroll
        for (int j = 0; j < V; ++j) s += expf(v[j] - mv);
      }
      m = mv;
    }
    const float mm = row_max(m, smem);
    const float inv = 1.f / row_sum(m == -INFINITY ? 0.f : s * expf(m - mm), smem);
    T* y = static_cast<T*>(a.out) + row * a.out_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float v[V];
      if (!Causal || c < n) {
        load_vec<T, V>(x + c, v);
        mask_tail<Causal>(v, c, n);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = expf(v[j] - mm) * inv;
      store_vec<T, V>(y + c, v);
    }
  }
}

// Backward, any row: the dot product, then dx.
template <class T, int V>
__global__ void bwd_uncached(const Args a) {
  __shared__ float smem[kMaxThreads / 32];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* y = static_cast<const T*>(a.a) + row * a.a_stride;
    const T* dy = static_cast<const T*>(a.b) + row * a.b_stride;
    float dot = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float yv[V], gv[V];
      load_vec<T, V>(y + c, yv);
      load_vec<T, V>(dy + c, gv);
#pragma unroll
      for (int j = 0; j < V; ++j) dot = fmaf(yv[j], gv[j], dot);
    }
    dot = row_sum(dot, smem);
    T* dx = static_cast<T*>(a.out) + row * a.out_stride;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
      float yv[V], gv[V];
      load_vec<T, V>(y + c, yv);
      load_vec<T, V>(dy + c, gv);
#pragma unroll
      for (int j = 0; j < V; ++j) yv[j] *= gv[j] - dot;
      store_vec<T, V>(dx + c, yv);
    }
  }
}

// The plan: rows in registers when aligned and a row needs at most kMaxThreads threads of kNv vectors.
row_plan::Plan plan(const RowMatrix& lead, std::initializer_list<const RowMatrix*> all) {
  bool vec = row_plan::cols_vectorizable(lead);
  for (const RowMatrix* m : all) vec = vec && row_plan::rows_aligned(*m);
  const row_plan::Shape s = row_plan::cached_shape(lead.cols, lead.dtype, kNv);
  if (vec && s.tpr <= kMaxThreads) return row_plan::cached_plan(s, kNv, 1, lead.rows, INT_MAX);
  return row_plan::uncached_plan(lead, vec, INT_MAX);  // at most 1024 threads: kMaxThreads
}

template <class T, bool Causal>
void launch_fwd(const Args& a, const row_plan::Plan& p, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  if (p.cached)
    fwd_cached<T, Causal><<<p.grid, p.block, 0, s>>>(a);
  else if (p.vec)
    fwd_uncached<T, V, Causal><<<p.grid, p.block, 0, s>>>(a);
  else
    fwd_uncached<T, 1, Causal><<<p.grid, p.block, 0, s>>>(a);
}

template <class T>
void launch_bwd(const Args& a, const row_plan::Plan& p, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  if (p.cached)
    bwd_cached<T><<<p.grid, p.block, 0, s>>>(a);
  else if (p.vec)
    bwd_uncached<T, V><<<p.grid, p.block, 0, s>>>(a);
  else
    bwd_uncached<T, 1><<<p.grid, p.block, 0, s>>>(a);
}

}  // namespace

void fwd_cuda(const FwdProblem& p, void* stream) {
  const Args a{p.x.data, nullptr, p.y.data, p.x.rows, p.x.cols, p.x.row_stride, 0, p.y.row_stride, p.causal};
  const row_plan::Plan pl = plan(p.x, {&p.x, &p.y});
  const auto s = static_cast<cudaStream_t>(stream);
  TIGON_SWITCH_FLOAT(p.x.dtype, T, {
    if (p.causal)
      launch_fwd<T, true>(a, pl, s);
    else
      launch_fwd<T, false>(a, pl, s);
  });
  TIGON_CUDA_CHECK_LAUNCH();
}

void bwd_cuda(const BwdProblem& p, void* stream) {
  const Args a{p.y.data, p.dy.data, p.dx.data, p.y.rows, p.y.cols, p.y.row_stride, p.dy.row_stride, p.dx.row_stride, 0};
  const row_plan::Plan pl = plan(p.y, {&p.y, &p.dy, &p.dx});
  TIGON_SWITCH_FLOAT(p.y.dtype, T, launch_bwd<T>(a, pl, static_cast<cudaStream_t>(stream)));
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace tigon::softmax
