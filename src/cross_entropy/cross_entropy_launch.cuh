// Typed launchers; included only by the per-dtype instantiation files cross_entropy_cuda_<dtype>.cu.
#pragma once

#include <algorithm>
#include <climits>

#include "common/cuda_check.h"
#include "cross_entropy/cross_entropy_kernels.cuh"
#include "cross_entropy/cross_entropy_launch.h"

namespace tigon::cross_entropy {

// Threads per row: enough for ~4 vectors each on short rows, kMaxThreads on long ones (128256 bf16 logits: 16032
// vectors, 32 per thread), always whole warps.
inline int row_threads(int64_t cols, int per_vec) {
  const int64_t vecs = (cols + per_vec - 1) / per_vec;
  const int64_t want = (vecs + 3) / 4;
  return int(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kern::kMaxThreads));
}

template <class T>
void launch_rows(const RowArgs& a, bool vec, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const unsigned grid = unsigned(std::min<int64_t>(a.rows, INT_MAX));
  const int threads = row_threads(a.cols, vec ? V : 1);
  const bool cap = a.softcap > 0.f;
  if (vec && cap)
    kern::rows_kernel<T, V, true><<<grid, threads, 0, stream>>>(a);
  else if (vec)
    kern::rows_kernel<T, V, false><<<grid, threads, 0, stream>>>(a);
  else if (cap)
    kern::rows_kernel<T, 1, true><<<grid, threads, 0, stream>>>(a);
  else
    kern::rows_kernel<T, 1, false><<<grid, threads, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_scale(const ScaleArgs& a, bool vec, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const unsigned grid = unsigned(std::min<int64_t>(a.rows, INT_MAX));
  if (vec)
    kern::scale_kernel<T, V><<<grid, 256, 0, stream>>>(a);
  else
    kern::scale_kernel<T, 1><<<grid, 256, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

#define TIGON_CROSS_ENTROPY_INSTANTIATE(T)                                 \
  template void launch_rows<T>(const RowArgs&, bool, cudaStream_t);        \
  template void launch_scale<T>(const ScaleArgs&, bool, cudaStream_t);

}  // namespace tigon::cross_entropy
