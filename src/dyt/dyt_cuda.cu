// DyT CUDA path. Forward: one elementwise pass (row_launch shapes, 8+ rows per thread; gamma and beta read once per
// thread). Backward: one pass writing dx and, per block, fp32 partial column sums of dy * t (dgamma), dy (dbeta) and
// dy * gamma * x * (1 - t^2) (dalpha, per column); then common/column_sum adds the partial rows in a fixed order, and
// adds dalpha's per-column sums into its one value the same way (the same bits on every run).
#include <cuda_runtime.h>

#include <algorithm>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/row_launch.cuh"
#include "dyt/dyt.h"

namespace tigon::dyt {
namespace {

using cuda::load_vec;
using cuda::round_to;
using cuda::store_vec;

struct Args {
  const void *x, *dy;
  void *y, *dx;
  const float* alpha;
  const void *gamma, *beta;
  float *part_g, *part_b, *part_a;  // [gridDim.y, cols] each
  int64_t rows, cols, x_stride, y_stride, dy_stride, dx_stride;
};

template <class P>
__device__ __forceinline__ float param(const void* p, int64_t c) {
  return cuda::to_f<P>(static_cast<const P*>(p)[c]);
}

// Each thread keeps its columns' gamma and beta in registers across the rows it walks (kFwdRows at a time, their
// loads in flight together): read once per row, the parameters were the kernel's busiest traffic (fp32 gamma and beta
// are 4x the bytes of a bf16 x vector), so a block walks many rows rather than one.
constexpr int kFwdRows = 4;

template <class P, int V, bool VecParams>
__device__ __forceinline__ void load_params(const void* p, int64_t col, float (&out)[V]) {
  if (!p) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = 0.f;
  } else if constexpr (VecParams) {
    cuda::load_vec<P, V>(static_cast<const P*>(p) + col, out);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = param<P>(p, col + j);
  }
}

// tanh(z) = 1 - 2 / (1 + e^(2z)): two SFU operations (2^x, 1/x) and three others, against tanhf's polynomial branch
// as well. Within ~2.5e-7 of tanh absolutely (saturating to +-1, NaN kept), far below a 16-bit output's rounding, so
// the forward takes it for 16-bit outputs; fp32 outputs (and the backward's 1 - t^2) keep the accurate tanhf.
__device__ __forceinline__ float tanh_sfu(float z) {
  return 1.f - 2.f * cuda::rcp_fast(1.f + cuda::exp2_fast(z * 2.8853900817779268f));
}

template <class T, class P, int V, bool VecParams>
__global__ void dyt_fwd_kernel(const Args a) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= a.cols) return;
  const float alpha = *a.alpha;
  float g[V], b[V];
  load_params<P, V, VecParams>(a.gamma, col, g);
  load_params<P, V, VecParams>(a.beta, col, b);
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t row0 = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row0 < a.rows; row0 += kFwdRows * step) {
    float x[kFwdRows][V];
#pragma unroll
    for (int r = 0; r < kFwdRows; ++r) {
      const int64_t row = row0 + r * step;
      if (row < a.rows) load_vec<T, V>(static_cast<const T*>(a.x) + row * a.x_stride + col, x[r]);
    }
#pragma unroll
    for (int r = 0; r < kFwdRows; ++r) {
      const int64_t row = row0 + r * step;
      if (row >= a.rows) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float z = alpha * x[r][j];
        x[r][j] = fmaf(g[j], sizeof(T) == 2 ? tanh_sfu(z) : tanhf(z), b[j]);
      }
      store_vec<T, V>(static_cast<T*>(a.y) + row * a.y_stride + col, x[r]);
    }
  }
}

// blockDim (32, kSumRows); thread x owns columns (blockIdx.x * 32 + x) * V .. + V; rows by grid stride over y.
template <class T, class P, int V, bool Sums>
__global__ void dyt_bwd_kernel(const Args a) {
  const int64_t col = (int64_t(blockIdx.x) * 32 + threadIdx.x) * V;
  const bool live = col < a.cols;
  const float alpha = *a.alpha;
  float g[V], sg[V], sb[V], sa[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    g[j] = live ? param<P>(a.gamma, col + j) : 0.f;
    sg[j] = sb[j] = sa[j] = 0.f;
  }
  const int64_t step = int64_t(gridDim.y) * kSumRows;
  for (int64_t row = int64_t(blockIdx.y) * kSumRows + threadIdx.y; live && row < a.rows; row += step) {
    float x[V], dy[V], dx[V];
    load_vec<T, V>(static_cast<const T*>(a.x) + row * a.x_stride + col, x);
    load_vec<T, V>(static_cast<const T*>(a.dy) + row * a.dy_stride + col, dy);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float t = tanhf(alpha * x[j]), d = 1.f - t * t;
      dx[j] = dy[j] * g[j] * alpha * d;
      if constexpr (Sums) {
        sg[j] = fmaf(dy[j], t, sg[j]);
        sb[j] += dy[j];
        sa[j] = fmaf(dy[j] * g[j], x[j] * d, sa[j]);
      }
    }
    if (a.dx) store_vec<T, V>(static_cast<T*>(a.dx) + row * a.dx_stride + col, dx);
  }
  if constexpr (Sums) {
    // The block's kSumRows row slices added in a fixed order: one partial row per blockIdx.y and quantity. Element j
    // of thread x sits at j * 32 + x, so stores and loads hit 32 different banks.
    __shared__ float part[3][kSumRows][32 * V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      part[0][threadIdx.y][j * 32 + threadIdx.x] = sg[j];
      part[1][threadIdx.y][j * 32 + threadIdx.x] = sb[j];
      part[2][threadIdx.y][j * 32 + threadIdx.x] = sa[j];
    }
    __syncthreads();
    for (int i = threadIdx.y * 32 + threadIdx.x; i < 3 * 32 * V; i += 32 * kSumRows) {
      const int q = i / (32 * V), k = i % (32 * V);
      const int64_t c = (int64_t(blockIdx.x) * 32 + k % 32) * V + k / 32;  // thread k % 32's element k / 32
      if (c >= a.cols) continue;
      float t = 0.f;
      for (int y = 0; y < kSumRows; ++y) t += part[q][y][k];
      float* out = q == 0 ? a.part_g : q == 1 ? a.part_b : a.part_a;  // no array of pointers: it would sit on the stack
      out[int64_t(blockIdx.y) * a.cols + c] = t;
    }
  }
}

template <class T, class P>
void fwd_typed(const Args& a, const cuda::RowLaunch& l, bool vec_params, cudaStream_t s) {
  if (l.vec && vec_params)
    dyt_fwd_kernel<T, P, 16 / sizeof(T), true><<<l.grid, l.block, 0, s>>>(a);
  else if (l.vec)
    dyt_fwd_kernel<T, P, 16 / sizeof(T), false><<<l.grid, l.block, 0, s>>>(a);
  else
    dyt_fwd_kernel<T, P, 1, false><<<l.grid, l.block, 0, s>>>(a);
}

template <class T, class P, bool Sums>
void bwd_typed(const Args& a, bool vec, dim3 grid, cudaStream_t s) {
  const dim3 block(32, kSumRows);
  if (vec)
    dyt_bwd_kernel<T, P, 16 / sizeof(T), Sums><<<grid, block, 0, s>>>(a);
  else
    dyt_bwd_kernel<T, P, 1, Sums><<<grid, block, 0, s>>>(a);
}

// Runs F<T, P> for the activations' dtype T and the parameters' dtype P (T or fp32).
#define TIGON_DYT_SWITCH(xdt, pdt, F, ...) \
  TIGON_SWITCH_FLOAT(xdt, T, {             \
    if ((pdt) == DType::kFloat32)          \
      F<T, float>(__VA_ARGS__);            \
    else                                   \
      F<T, T>(__VA_ARGS__);                \
  })

template <class T, class P>
void bwd_dispatch(const Args& a, bool vec, dim3 grid, bool sums, cudaStream_t s) {
  if (sums)
    bwd_typed<T, P, true>(a, vec, grid, s);
  else
    bwd_typed<T, P, false>(a, vec, grid, s);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

void fwd_cuda(const FwdProblem& p, void* stream) {
  Args a{};
  a.x = p.x.data, a.y = p.y.data, a.alpha = p.alpha, a.gamma = p.gamma, a.beta = p.beta;
  a.rows = p.x.rows, a.cols = p.x.cols, a.x_stride = p.x.row_stride, a.y_stride = p.y.row_stride;
  cuda::RowLaunch l = cuda::row_launch(p.x, cuda::vectorizable({&p.x, &p.y}));
  // At least kFwdMinRows rows per thread where the matrix has them (the grid stays several waves deep: 16384 x 4096
  // bf16 is 4096 blocks of 256 threads), so the parameters' loads are paid once per 8 rows, not per row.
  constexpr int64_t kFwdMinRows = 8;
  const int64_t rows_per_y = int64_t(l.block.y) * kFwdMinRows;
  l.grid.y = unsigned(std::max<int64_t>(1, std::min<int64_t>(l.grid.y, (p.x.rows + rows_per_y - 1) / rows_per_y)));
  const bool vec_params = cuda::aligned16(p.gamma) && (!p.beta || cuda::aligned16(p.beta));
  TIGON_DYT_SWITCH(p.x.dtype, p.param_dtype, fwd_typed, a, l, vec_params, static_cast<cudaStream_t>(stream));
  TIGON_CUDA_CHECK_LAUNCH();
}

void bwd_cuda(const BwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool sums = p.dalpha || p.dgamma || p.dbeta;
  if (p.x.cols == 0) {
    if (p.dalpha) TIGON_CUDA_CHECK(cudaMemsetAsync(p.dalpha, 0, sizeof(float), s));
    return;
  }
  if (!sums && (!p.dx.data || p.x.rows == 0)) return;
  Args a{};
  a.x = p.x.data, a.dy = p.dy.data, a.dx = p.dx.data, a.alpha = p.alpha, a.gamma = p.gamma;
  a.rows = p.x.rows, a.cols = p.x.cols, a.x_stride = p.x.row_stride, a.dy_stride = p.dy.row_stride;
  a.dx_stride = p.dx.row_stride;
  const int64_t P = partial_rows(p.x.rows, p.x.cols, p.x.dtype);
  const size_t part_bytes = align256(size_t(P) * size_t(p.x.cols) * sizeof(float));
  char* ws = static_cast<char*>(workspace);
  if (sums) {
    a.part_g = reinterpret_cast<float*>(ws);
    a.part_b = reinterpret_cast<float*>(ws + part_bytes);
    a.part_a = reinterpret_cast<float*>(ws + 2 * part_bytes);
  }
  const bool vec = cuda::vectorizable({&p.x, &p.dy, &p.dx});
  const int64_t lanes = 32 * (vec ? 16 / dtype_bytes(p.x.dtype) : 1);
  const dim3 grid(unsigned((p.x.cols + lanes - 1) / lanes), unsigned(sums ? P : std::min<int64_t>(P, 65535)));
  TIGON_DYT_SWITCH(p.x.dtype, p.param_dtype, bwd_dispatch, a, vec, grid, sums, s);
  TIGON_CUDA_CHECK_LAUNCH();
  if (!sums) return;
  if (p.dgamma && p.dbeta)
    cuda::column_sum2(a.part_g, p.dgamma, p.grad_dtype, a.part_b, p.dbeta, p.grad_dtype, P, p.x.cols, s);
  else if (p.dgamma)
    cuda::column_sum(a.part_g, P, p.x.cols, p.dgamma, p.grad_dtype, s);
  else if (p.dbeta)
    cuda::column_sum(a.part_b, P, p.x.cols, p.dbeta, p.grad_dtype, s);
  if (p.dalpha) {  // per column, then the columns (as one column of cols rows)
    float* per_col = reinterpret_cast<float*>(ws + 3 * part_bytes);
    cuda::column_sum(a.part_a, P, p.x.cols, per_col, DType::kFloat32, s);
    cuda::column_sum(per_col, p.x.cols, 1, p.dalpha, DType::kFloat32, s);
  }
}

}  // namespace tigon::dyt
