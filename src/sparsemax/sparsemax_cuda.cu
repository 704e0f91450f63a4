// Sparsemax CUDA path: one block per row (grid-stride), the row kept in shared memory as fp32 when it fits.
//
// Forward, Michelot's algorithm: tau starts at (sum(z) - 1) / C, below the answer; each step takes the elements above
// tau (the candidate support) and sets tau = (their sum - 1) / their count, which only rises and only shrinks the
// support, until the support stops shrinking: then tau is exact for it, and it is the sparsemax support. A few steps
// for real rows (each one block reduction over the row), C at most. Then y = max(z - tau, 0).
// Backward: the support's sum of dy and its size (one reduction), then dx.
// The causal form reads a row only as far as its mask keeps and writes zeros past it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/reduce.cuh"
#include "sparsemax/sparsemax.h"

namespace tigon::sparsemax {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxCachedCols = 16384;  // 64 KB of fp32 per block in shared memory

struct Args {
  const void *a, *b;  // forward: x; backward: y, dy
  void* out;          // y or dx
  int64_t rows, cols, a_stride, b_stride, out_stride;
  int64_t causal;  // forward: L of a causal [..., L, L] x (FwdProblem::causal), 0 for none
};

template <class T, bool kCached>
__global__ void __launch_bounds__(kThreads) fwd(const Args a) {
  extern __shared__ float row_s[];                           // [cols] when kCached
  __shared__ __align__(16) float red[2][2 * kThreads / 32];  // row_sums<2>'s two alternating buffers
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.a) + row * a.a_stride;
    const auto z = [&](int64_t c) { return kCached ? row_s[c] : cuda::to_f<T>(x[c]); };
    const int64_t n = a.causal ? row % a.causal + 1 : a.cols;  // the entries the causal mask keeps
    float total[2] = {0.f, 0.f};
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
      const float v = cuda::to_f<T>(x[c]);
      if (kCached) row_s[c] = v;
      total[0] += v;
    }
    cuda::row_sums<2>(total, red[0]);  // a barrier too: the cached row is complete
    float count = float(n), tau = (total[0] - 1.f) / count;
    for (int step = 1;; ++step) {
      float acc[2] = {0.f, 0.f};  // sum and count of the elements above tau
      for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        const float v = z(c);
        if (v > tau) acc[0] += v, acc[1] += 1.f;
      }
      cuda::row_sums<2>(acc, red[step & 1]);
      if (acc[1] >= count || acc[1] == 0.f) break;  // the support stopped shrinking (or rounding emptied it)
      count = acc[1];
      tau = (acc[0] - 1.f) / count;
    }
    T* y = static_cast<T*>(a.out) + row * a.out_stride;
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads)
      y[c] = cuda::from_f<T>(c < n ? fmaxf(z(c) - tau, 0.f) : 0.f);
    __syncthreads();  // the next row may overwrite row_s and red[0]
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) bwd(const Args a) {
  __shared__ __align__(16) float red[2 * kThreads / 32];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* y = static_cast<const T*>(a.a) + row * a.a_stride;
    const T* dy = static_cast<const T*>(a.b) + row * a.b_stride;
    float acc[2] = {0.f, 0.f};  // the support's sum of dy and its size
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads)
      if (cuda::to_f<T>(y[c]) > 0.f) acc[0] += cuda::to_f<T>(dy[c]), acc[1] += 1.f;
    cuda::row_sums<2>(acc, red);
    const float mean = acc[1] > 0.f ? acc[0] / acc[1] : 0.f;
    T* dx = static_cast<T*>(a.out) + row * a.out_stride;
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
      const bool in = cuda::to_f<T>(y[c]) > 0.f;  // read before dx (which may be y or dy) is written
      dx[c] = cuda::from_f<T>(in ? cuda::to_f<T>(dy[c]) - mean : 0.f);
    }
    __syncthreads();  // the next row's reduction reuses red
  }
}

int current_device() {
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

unsigned grid_for(int64_t rows, int device) { return unsigned(std::min<int64_t>(rows, int64_t(sm_count(device)) * 8)); }

template <class T>
void launch_fwd(const Args& a, cudaStream_t stream) {
  const int device = current_device();
  const unsigned grid = grid_for(a.rows, device);
  if (a.cols <= kMaxCachedCols) {
    cuda::allow_max_smem(reinterpret_cast<const void*>(fwd<T, true>), cuda::device_limits(), device);
    fwd<T, true><<<grid, kThreads, size_t(a.cols) * sizeof(float), stream>>>(a);
  } else {
    fwd<T, false><<<grid, kThreads, 0, stream>>>(a);
  }
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fwd_cuda(const FwdProblem& p, void* stream) {
  const Args a{p.x.data, nullptr, p.y.data, p.x.rows, p.x.cols, p.x.row_stride, 0, p.y.row_stride, p.causal};
  TIGON_SWITCH_FLOAT(p.x.dtype, T, launch_fwd<T>(a, static_cast<cudaStream_t>(stream)));
}

void bwd_cuda(const BwdProblem& p, void* stream) {
  const Args a{p.y.data, p.dy.data, p.dx.data, p.y.rows, p.y.cols, p.y.row_stride, p.dy.row_stride, p.dx.row_stride, 0};
  TIGON_SWITCH_FLOAT(p.y.dtype, T, {
    bwd<T><<<grid_for(a.rows, current_device()), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    TIGON_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tigon::sparsemax
