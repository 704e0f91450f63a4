// PolyNorm CUDA path: one block per row (grid-stride over rows), 16-byte vectors where the rows allow. A row of up to
// 256 x 8 vectors (forward; 256 x 4 in the backward) stays in registers between its sums and its output (longer rows
// are read twice): the forward's three
// sums of powers, the backward's three projections of dy onto the normalised powers, then y or dx. The backward keeps
// each thread's share of the parameter sums across its rows, which the block adds up at the end into one partial row;
// common/column_sum adds the partial rows in a fixed order (the same bits on every run).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/reduce.cuh"
#include "poly_norm/poly_norm.h"

namespace tigon::poly_norm {
namespace {

using cuda::load_vec;
using cuda::store_vec;

constexpr int kThreads = 256;

struct Args {
  const void *x, *dy;
  void *y, *dx;
  const float *weight, *bias, *rstd_in;
  float* rstd_out;
  float *part_w, *part_b;  // [gridDim.x, 3] and [gridDim.x]
  int64_t rows, cols, x_stride, y_stride, dy_stride, dx_stride;
  float eps;
};

// Forward. NV > 0: the row's vectors stay in registers between the sums and the output (NV per thread at most: rows
// up to blockDim.x * V * NV elements), so the row is read once; NV = 0: any row, read twice. The three sums of powers
// go through one row_sums (one barrier, alternating buffers) rather than three block reductions.
constexpr int kMaxNv = 4;
// The forward keeps one operand a row, so it holds twice the backward's vectors: rows up to 16384 bf16 elements are
// read once (read twice, 12288 and 16384 ran at 60% of the copy rate).
constexpr int kMaxFwdNv = 8;

template <class T, int V, int NV>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const Args a) {
  __shared__ __align__(16) float red[2][4 * kThreads / 32];
  const float w0 = a.weight[0], w1 = a.weight[1], w2 = a.weight[2], b = *a.bias, inv_c = 1.f / float(a.cols);
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, parity ^= 1) {
    const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
    float sums[4] = {0.f, 0.f, 0.f, 0.f};  // x^2, x^4, x^6 and a zero (row_sums wants a power of two)
    const auto add = [&](const float (&v)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float x2 = v[j] * v[j];
        sums[0] += x2, sums[1] = fmaf(x2, x2, sums[1]), sums[2] = fmaf(x2 * x2, x2, sums[2]);
      }
    };
    float kept[NV > 0 ? NV : 1][V];
    if constexpr (NV > 0) {  // every load before any use (load_vec_if); vectors past the row are zeros
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int64_t c = (int64_t(threadIdx.x) + int64_t(i) * blockDim.x) * V;
        cuda::load_vec_if<T, V>(c < a.cols, x + c, kept[i], 0.f);
      }
#pragma unroll
      for (int i = 0; i < NV; ++i) add(kept[i]);
    } else {
      for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
        float v[V];
        load_vec<T, V>(x + c, v);
        add(v);
      }
    }
    cuda::row_sums<4>(sums, red[parity]);
    const float r3 = rsqrtf(sums[2] * inv_c + a.eps), r2 = rsqrtf(sums[1] * inv_c + a.eps);
    const float r1 = rsqrtf(sums[0] * inv_c + a.eps);
    if (a.rstd_out && threadIdx.x == 0) {
      a.rstd_out[row * 3] = r3, a.rstd_out[row * 3 + 1] = r2, a.rstd_out[row * 3 + 2] = r1;
    }
    const float c3 = w0 * r3, c2 = w1 * r2, c1 = w2 * r1;
    T* y = static_cast<T*>(a.y) + row * a.y_stride;
    const auto out = [&](float (&v)[V], int64_t c) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = fmaf(c3 * v[j], v[j] * v[j], fmaf(c2 * v[j], v[j], fmaf(c1, v[j], b)));
      store_vec<T, V>(y + c, v);
    };
    if constexpr (NV > 0) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int64_t c = (int64_t(threadIdx.x) + int64_t(i) * blockDim.x) * V;
        if (c < a.cols) out(kept[i], c);
      }
    } else {
      for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
        float v[V];
        load_vec<T, V>(x + c, v);
        out(v, c);
      }
    }
  }
}

// Backward, blocks walking rows (partial_rows of them). NV as in the forward: x and dy kept in registers between the
// projections and dx, else read twice.
template <class T, int V, int NV, bool Sums>
__global__ void __launch_bounds__(kThreads) bwd_kernel(const Args a) {
  __shared__ __align__(16) float red[2][4 * kThreads / 32];
  const float w0 = a.weight[0], w1 = a.weight[1], w2 = a.weight[2], inv_c = 1.f / float(a.cols);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};  // this thread's share of the parameter sums: w0, w1, w2 (r applied), bias
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, parity ^= 1) {
    const T* x = static_cast<const T*>(a.x) + row * a.x_stride;
    const T* dy = static_cast<const T*>(a.dy) + row * a.dy_stride;
    const float r3 = a.rstd_in[row * 3], r2 = a.rstd_in[row * 3 + 1], r1 = a.rstd_in[row * 3 + 2];
    float t[4] = {0.f, 0.f, 0.f, 0.f};  // sums of g x^3, g x^2, g x (r applied after) and of g
    const auto add = [&](const float (&v)[V], const float (&g)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gx = g[j] * v[j];
        t[2] += gx, t[1] = fmaf(gx, v[j], t[1]), t[0] = fmaf(gx * v[j], v[j], t[0]), t[3] += g[j];
      }
    };
    float kx[NV > 0 ? NV : 1][V], kg[NV > 0 ? NV : 1][V];
    if constexpr (NV > 0) {  // every load before any use, as in the forward
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int64_t c = (int64_t(threadIdx.x) + int64_t(i) * blockDim.x) * V;
        cuda::load_vec_if<T, V>(c < a.cols, x + c, kx[i], 0.f);
        cuda::load_vec_if<T, V>(c < a.cols, dy + c, kg[i], 0.f);
      }
#pragma unroll
      for (int i = 0; i < NV; ++i) add(kx[i], kg[i]);
    } else {
      for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
        float v[V], g[V];
        load_vec<T, V>(x + c, v);
        load_vec<T, V>(dy + c, g);
        add(v, g);
      }
    }
    if constexpr (Sums)
      acc[0] = fmaf(t[0], r3, acc[0]), acc[1] = fmaf(t[1], r2, acc[1]), acc[2] = fmaf(t[2], r1, acc[2]), acc[3] += t[3];
    if (!a.dx) continue;  // uniform across the block: no reduction below is skipped by part of it
    cuda::row_sums<4>(t, red[parity]);
    const float m3 = t[0] * r3 * inv_c, m2 = t[1] * r2 * inv_c, m1 = t[2] * r1 * inv_c;
    // dx = sum_p w r (g - x^p r m) p x^(p-1)
    const float a3 = 3.f * w0 * r3, a2 = 2.f * w1 * r2, a1 = w2 * r1;
    T* dx = static_cast<T*>(a.dx) + row * a.dx_stride;
    const auto out = [&](const float (&v)[V], float (&g)[V], int64_t c) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float x1 = v[j], x2 = x1 * x1;
        const float d3 = a3 * x2 * (g[j] - x2 * x1 * r3 * m3);
        const float d2 = a2 * x1 * (g[j] - x2 * r2 * m2);
        const float d1 = a1 * (g[j] - x1 * r1 * m1);
        g[j] = d3 + d2 + d1;
      }
      store_vec<T, V>(dx + c, g);
    };
    if constexpr (NV > 0) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int64_t c = (int64_t(threadIdx.x) + int64_t(i) * blockDim.x) * V;
        if (c < a.cols) out(kx[i], kg[i], c);
      }
    } else {
      for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
        float v[V], g[V];
        load_vec<T, V>(x + c, v);
        load_vec<T, V>(dy + c, g);
        out(v, g, c);
      }
    }
  }
  if constexpr (Sums) {
    __syncthreads();  // both buffers may still be read by the last row's reduction
    cuda::row_sums<4>(acc, red[0]);
    if (threadIdx.x == 0) {
      a.part_w[blockIdx.x * 3] = acc[0], a.part_w[blockIdx.x * 3 + 1] = acc[1], a.part_w[blockIdx.x * 3 + 2] = acc[2];
      a.part_b[blockIdx.x] = acc[3];
    }
  }
}

bool vectorizable(const RowMatrix& m) {
  const int v = 16 / dtype_bytes(m.dtype);
  return m.data == nullptr || (m.cols % v == 0 && cuda::aligned16(m.data) && (m.rows <= 1 || m.row_stride % v == 0));
}

unsigned block_threads(int64_t cols, int v) {
  int t = 32;
  while (t < kThreads && int64_t(t) * v * 2 < cols) t *= 2;  // at least two vectors per thread once the block is full
  return unsigned(t);
}

template <class T>
void fwd_typed(const Args& a, bool vec, unsigned grid, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  const unsigned vt = block_threads(a.cols, V);
  if (vec && a.cols <= int64_t(vt) * V * 2)  // the registers a row needs, no more: two vectors, four or eight
    fwd_kernel<T, V, 2><<<grid, vt, 0, s>>>(a);
  else if (vec && a.cols <= int64_t(vt) * V * kMaxNv)
    fwd_kernel<T, V, kMaxNv><<<grid, vt, 0, s>>>(a);
  else if (vec && a.cols <= int64_t(vt) * V * kMaxFwdNv)
    fwd_kernel<T, V, kMaxFwdNv><<<grid, vt, 0, s>>>(a);
  else if (vec)
    fwd_kernel<T, V, 0><<<grid, vt, 0, s>>>(a);
  else
    fwd_kernel<T, 1, 0><<<grid, block_threads(a.cols, 1), 0, s>>>(a);
}

template <class T, int V, int NV>
void bwd_launch(const Args& a, bool sums, unsigned grid, unsigned threads, cudaStream_t s) {
  if (sums)
    bwd_kernel<T, V, NV, true><<<grid, threads, 0, s>>>(a);
  else
    bwd_kernel<T, V, NV, false><<<grid, threads, 0, s>>>(a);
}

template <class T>
void bwd_typed(const Args& a, bool vec, bool sums, unsigned grid, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  const unsigned vt = block_threads(a.cols, V);
  if (vec && a.cols <= int64_t(vt) * V * 2)
    bwd_launch<T, V, 2>(a, sums, grid, vt, s);
  else if (vec && a.cols <= int64_t(vt) * V * kMaxNv)
    bwd_launch<T, V, kMaxNv>(a, sums, grid, vt, s);
  else if (vec)
    bwd_launch<T, V, 0>(a, sums, grid, vt, s);
  else
    bwd_launch<T, 1, 0>(a, sums, grid, block_threads(a.cols, 1), s);
}

}  // namespace

// Blocks of the backward, each walking rows: as many as stay resident at full occupancy (8 of 256 threads per
// multiprocessor), so loads of many rows are in flight at once.
int64_t partial_rows(int64_t rows, int device) {
  return std::max<int64_t>(1, std::min<int64_t>(rows, 8 * int64_t(sm_count(device))));
}

size_t cuda_workspace_bytes(int64_t rows, int device) {
  return size_t(partial_rows(rows, device)) * 4 * sizeof(float);  // [blocks, 4]: the three weights' sums and bias's
}

void fwd_cuda(const FwdProblem& p, void* stream) {
  Args a{};
  a.x = p.x.data, a.y = p.y.data, a.weight = p.weight, a.bias = p.bias, a.rstd_out = p.rstd, a.eps = p.eps;
  a.rows = p.x.rows, a.cols = p.x.cols, a.x_stride = p.x.row_stride, a.y_stride = p.y.row_stride;
  const unsigned grid = unsigned(std::min<int64_t>(p.x.rows, 65535 * 32));
  const bool vec = vectorizable(p.x) && vectorizable(p.y);
  TIGON_SWITCH_FLOAT(p.x.dtype, T, fwd_typed<T>(a, vec, grid, static_cast<cudaStream_t>(stream)));
  TIGON_CUDA_CHECK_LAUNCH();
}

void bwd_cuda(const BwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool sums = p.dweight || p.dbias;
  if (p.x.rows == 0) {  // empty sums
    if (p.dweight) TIGON_CUDA_CHECK(cudaMemsetAsync(p.dweight, 0, 3 * sizeof(float), s));
    if (p.dbias) TIGON_CUDA_CHECK(cudaMemsetAsync(p.dbias, 0, sizeof(float), s));
    return;
  }
  if (!sums && !p.dx.data) return;
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  Args a{};
  a.x = p.x.data, a.dy = p.dy.data, a.dx = p.dx.data, a.weight = p.weight, a.rstd_in = p.rstd;
  a.rows = p.x.rows, a.cols = p.x.cols, a.x_stride = p.x.row_stride, a.dy_stride = p.dy.row_stride;
  a.dx_stride = p.dx.row_stride;
  const int64_t P = partial_rows(p.x.rows, device);
  if (sums) {
    a.part_w = static_cast<float*>(workspace);
    a.part_b = a.part_w + P * 3;
  }
  const bool vec = vectorizable(p.x) && vectorizable(p.dy) && vectorizable(p.dx);
  TIGON_SWITCH_FLOAT(p.x.dtype, T, bwd_typed<T>(a, vec, sums, unsigned(P), s));
  TIGON_CUDA_CHECK_LAUNCH();
  if (p.dweight) cuda::column_sum(a.part_w, P, 3, p.dweight, DType::kFloat32, s);
  if (p.dbias) cuda::column_sum(a.part_b, P, 1, p.dbias, DType::kFloat32, s);
}

}  // namespace tigon::poly_norm
