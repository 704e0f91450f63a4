// Embedding CUDA path. Forward: a warp per output row, 16-byte vectors where rows allow. Backward, deterministic
// without atomics: the indices are radix-sorted with their positions (stable, so each index's positions stay in
// increasing order); for each run of equal indices, a warp per 256 columns of the gradient row sums the run's dy rows
// in fp32 in position order (a frequent index's long run is spread over the row's tiles) and writes them. dweight is
// zeroed first, so rows never indexed (and the padding row) are 0.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "embedding/embedding.h"

namespace tigon::embedding {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kCols = 32 * 8;  // columns a warp sums at once in the backward (8 per lane)

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

int key_bits(int64_t vocab) {  // bits the sort looks at: indices are in [0, vocab], vocab the out-of-range key
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) <= vocab) ++bits;
  return bits;
}

template <class I>
__device__ __forceinline__ int64_t load_index(const void* idx, int64_t i) {
  return int64_t(static_cast<const I*>(idx)[i]);
}

template <class T, class I, int V>
__global__ void __launch_bounds__(kThreads)
    fwd(const void* idx, int64_t n, const T* w, int64_t vocab, int64_t w_stride, T* y, int64_t y_stride, int64_t h) {
  const int lane = threadIdx.x % 32;
  for (int64_t i = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; i < n; i += int64_t(gridDim.x) * kWarps) {
    const int64_t v = load_index<I>(idx, i);
    const bool ok = v >= 0 && v < vocab;
    const T* src = w + (ok ? v : 0) * w_stride;
    T* dst = y + i * y_stride;
    for (int64_t c = int64_t(lane) * V; c < h; c += 32 * V) {
      float vals[V];
      cuda::load_vec<T, V>(src + c, vals);
      if (!ok)
#pragma unroll
        for (int j = 0; j < V; ++j) vals[j] = NAN;
      cuda::store_vec<T, V>(dst + c, vals);
    }
  }
}

// keys[i] = indices[i] (vocab for one out of range or at padding_idx: sorted last, never summed), pos[i] = i.
template <class I>
__global__ void make_keys(const void* idx, int64_t n, int64_t vocab, int64_t padding_idx, int64_t* keys, int64_t* pos) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = load_index<I>(idx, i);
    keys[i] = v >= 0 && v < vocab && v != padding_idx ? v : vocab;
    pos[i] = i;
  }
}

template <class T, class G>
__global__ void __launch_bounds__(kThreads)
    sum_runs(const int64_t* keys, const int64_t* pos, int64_t n, int64_t vocab, const T* dy, int64_t dy_stride, G* dw,
             int64_t dw_stride, int64_t h) {
  const int lane = threadIdx.x % 32;
  for (int64_t s = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; s < n; s += int64_t(gridDim.x) * kWarps) {
    const int64_t v = keys[s];
    if (v >= vocab || (s > 0 && keys[s - 1] == v)) continue;  // not the start of a run of a real index
    int64_t end = s + 1;
    while (end < n && keys[end] == v) ++end;
    // blockIdx.y picks the column tiles: a frequent index's run is summed by as many warps as the row has tiles
    for (int64_t c0 = int64_t(blockIdx.y) * kCols; c0 < h; c0 += int64_t(gridDim.y) * kCols) {
      float acc[kCols / 32] = {};
#pragma unroll 4
      for (int64_t r = s; r < end; ++r) {  // in position order: the same sums every run
        const T* row = dy + pos[r] * dy_stride;
#pragma unroll
        for (int j = 0; j < kCols / 32; ++j) {
          const int64_t c = c0 + j * 32 + lane;
          if (c < h) acc[j] += cuda::to_f<T>(row[c]);
        }
      }
#pragma unroll
      for (int j = 0; j < kCols / 32; ++j) {
        const int64_t c = c0 + j * 32 + lane;
        if (c < h) dw[v * dw_stride + c] = cuda::from_f<G>(acc[j]);
      }
    }
  }
}

unsigned grid_for(int64_t items, int per_block) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((items + per_block - 1) / per_block, 65535)));
}

size_t sort_temp_bytes(int64_t n, int64_t vocab) {
  size_t bytes = 0;
  TIGON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                                   static_cast<int64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                   static_cast<int64_t*>(nullptr), int(n), 0, key_bits(vocab)));
  return bytes;
}

template <class T, class I>
void run_fwd(const FwdProblem& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const bool vec = p.weight.cols % V == 0 && p.weight.row_stride % V == 0 && p.y.row_stride % V == 0 &&
                   reinterpret_cast<uintptr_t>(p.weight.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.y.data) % 16 == 0;
  const auto* w = static_cast<const T*>(p.weight.data);
  auto* y = static_cast<T*>(p.y.data);
  const unsigned grid = grid_for(p.idx.n, kWarps);
  if (vec)
    fwd<T, I, V><<<grid, kThreads, 0, stream>>>(p.idx.data, p.idx.n, w, p.weight.rows, p.weight.row_stride, y,
                                                p.y.row_stride, p.weight.cols);
  else
    fwd<T, I, 1><<<grid, kThreads, 0, stream>>>(p.idx.data, p.idx.n, w, p.weight.rows, p.weight.row_stride, y,
                                                p.y.row_stride, p.weight.cols);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T, class G>
void run_sums(const BwdProblem& p, const int64_t* keys, const int64_t* pos, cudaStream_t stream) {
  const dim3 grid(grid_for(p.idx.n, kWarps), unsigned(std::min<int64_t>((p.dweight.cols + kCols - 1) / kCols, 65535)));
  sum_runs<T, G><<<grid, kThreads, 0, stream>>>(keys, pos, p.idx.n, p.dweight.rows, static_cast<const T*>(p.dy.data),
                                                p.dy.row_stride, static_cast<G*>(p.dweight.data), p.dweight.row_stride,
                                                p.dweight.cols);
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t cuda_workspace_bytes(int64_t n, int64_t vocab) {
  if (n == 0) return 0;
  return 4 * align256(size_t(n) * sizeof(int64_t)) + align256(sort_temp_bytes(n, vocab));
}

void fwd_cuda(const FwdProblem& p, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const bool i64 = p.idx.dtype == DType::kInt64;
  TIGON_SWITCH_FLOAT(p.weight.dtype, T, i64 ? run_fwd<T, int64_t>(p, st) : run_fwd<T, int32_t>(p, st));
}

void bwd_cuda(const BwdProblem& p, void* workspace, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const size_t elt = size_t(dtype_bytes(p.dweight.dtype));
  TIGON_CUDA_CHECK(cudaMemset2DAsync(p.dweight.data, size_t(p.dweight.row_stride) * elt, 0,
                                     size_t(p.dweight.cols) * elt, size_t(p.dweight.rows), st));
  if (p.idx.n == 0 || p.dweight.cols == 0) return;
  const int64_t n = p.idx.n, vocab = p.dweight.rows;
  const size_t one = align256(size_t(n) * sizeof(int64_t));
  char* ws = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<int64_t*>(ws);
  auto* keys = reinterpret_cast<int64_t*>(ws + one);
  auto* pos_in = reinterpret_cast<int64_t*>(ws + 2 * one);
  auto* pos = reinterpret_cast<int64_t*>(ws + 3 * one);
  void* temp = ws + 4 * one;
  size_t temp_bytes = sort_temp_bytes(n, vocab);
  const unsigned grid = grid_for(n, kThreads);
  if (p.idx.dtype == DType::kInt64)
    make_keys<int64_t><<<grid, kThreads, 0, st>>>(p.idx.data, n, vocab, p.padding_idx, keys_in, pos_in);
  else
    make_keys<int32_t><<<grid, kThreads, 0, st>>>(p.idx.data, n, vocab, p.padding_idx, keys_in, pos_in);
  TIGON_CUDA_CHECK_LAUNCH();
  TIGON_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, pos_in, pos, int(n), 0, key_bits(vocab), st));
  TIGON_SWITCH_FLOAT(p.dy.dtype, T, {
    if (p.dweight.dtype == DType::kFloat32)
      run_sums<T, float>(p, keys, pos, st);
    else
      run_sums<T, T>(p, keys, pos, st);
  });
}

}  // namespace tigon::embedding
