// Embedding CUDA path. Forward: a warp per output row, 16-byte vectors where rows allow. Backward, deterministic
// without atomics: the indices are radix-sorted with their positions (stable, so each index's positions stay in
// increasing order), and the sorted list is cut into fixed chunks of 64 positions. Pass 1: a warp per (chunk, 256
// columns) sums each run of equal indices inside its chunk in fp32, in position order; a run that lies wholly inside
// the chunk is written to dweight, a run that crosses a chunk edge leaves its piece in a partial-sum slot (the chunk's
// first or last run). Pass 2: the warp of the chunk where a crossing run starts adds its pieces in chunk order and
// writes the row. The sums' order depends only on the sorted indices, so the gradient is the same bits every run, and
// no warp walks more than 64 rows: a frequent index (a few percent of real text's tokens are one id) no longer
// serialises on one warp. dweight is zeroed first, so rows never indexed (and the padding row) are 0.
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
constexpr int kTile = 32 * 8;  // columns a warp sums in the backward: 8 contiguous per lane
constexpr int kChunk = 64;     // sorted positions per chunk: the most rows one warp of the backward walks
constexpr int kBatch = 8;      // rows whose loads a warp has in flight at once
constexpr unsigned kFull = 0xffffffffu;

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
__global__ void __launch_bounds__(kThreads) fwd(const void* idx, int64_t n, const T* __restrict__ w, int64_t vocab,
                                                int64_t w_stride, T* __restrict__ y, int64_t y_stride, int64_t h) {
  // Each lane loads kAhead vectors of a row before it stores any: with a store between them the next load waited
  // for it (one memory round trip per 512 bytes of a warp), too few bytes in flight for the copy rate.
  constexpr int kAhead = 4;
  const int lane = threadIdx.x % 32;
  for (int64_t i = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; i < n; i += int64_t(gridDim.x) * kWarps) {
    const int64_t v = load_index<I>(idx, i);
    T* dst = y + i * y_stride;
    if (v < 0 || v >= vocab) {  // out of range: a row of NaN
      float nan[V];
#pragma unroll
      for (int j = 0; j < V; ++j) nan[j] = NAN;
      for (int64_t c = int64_t(lane) * V; c < h; c += 32 * V) cuda::store_vec<T, V>(dst + c, nan);
      continue;
    }
    const T* src = w + v * w_stride;
    for (int64_t c0 = int64_t(lane) * V; c0 < h; c0 += 32 * V * kAhead) {
      float vals[kAhead][V];
#pragma unroll
      for (int u = 0; u < kAhead; ++u)
        if (c0 + u * 32 * V < h) cuda::load_vec<T, V>(src + c0 + u * 32 * V, vals[u]);
#pragma unroll
      for (int u = 0; u < kAhead; ++u)
        if (c0 + u * 32 * V < h) cuda::store_vec<T, V>(dst + c0 + u * 32 * V, vals[u]);
    }
  }
}

// keys[i] = indices[i] (vocab for one out of range or at padding_idx: sorted last, never summed), pos[i] = i.
template <class I>
__global__ void make_keys(const void* idx, int n, int vocab, int64_t padding_idx, int* keys, int* pos) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = load_index<I>(idx, i);
    keys[i] = v >= 0 && v < vocab && v != padding_idx ? int(v) : vocab;
    pos[i] = int(i);
  }
}

// A lane's 8 columns [c, c + 8) of a row: one or two 16-byte vectors (Vec: h and the row start are multiples of 8
// elements, 16-byte aligned), else elements; columns past h read as 0 and are not written.
template <class T, bool Vec>
__device__ __forceinline__ void load8(const T* __restrict__ row, int64_t c, int64_t h, float (&out)[8]) {
  if constexpr (Vec) {
    if (c < h) {
      cuda::load_vec<T, 8>(row + c, out);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = c + j < h ? cuda::to_f<T>(row[c + j]) : 0.f;
}

template <class G, bool Vec>
__device__ __forceinline__ void store8(G* __restrict__ row, int64_t c, int64_t h, const float (&in)[8]) {
  if constexpr (Vec) {
    if (c < h) cuda::store_vec<G, 8>(row + c, in);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (c + j < h) row[c + j] = cuda::from_f<G>(in[j]);
  }
}

// Partial sums: two fp32 rows per chunk (slot 0: the piece of a crossing run that begins at the chunk's first
// position; slot 1: the piece that begins later and reaches the chunk's end), part_cols (h rounded up to whole tiles)
// wide, so they always take vectors.
template <class F>
__device__ __forceinline__ F* slot_row(F* part, int64_t chunk, int slot, int64_t part_cols) {
  return part + (2 * chunk + slot) * part_cols;
}

// Pass 1: a warp per (chunk, tile). The chunk's keys and positions sit in the lanes' registers (two per lane) and are
// broadcast with shuffles; each batch issues its kBatch row loads before adding them in position order.
template <class T, class G, bool Vec>
__global__ void __launch_bounds__(kThreads, 2)  // two blocks an SM: twice the rows in flight
    sum_chunks(const int* __restrict__ keys, const int* __restrict__ pos, int n, int vocab, const T* __restrict__ dy,
               int64_t dy_stride, G* __restrict__ dw, int64_t dw_stride, int64_t h, float* __restrict__ part,
               int64_t part_cols) {
  const int lane = threadIdx.x % 32;
  const int64_t chunks = (int64_t(n) + kChunk - 1) / kChunk;
  for (int64_t k = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; k < chunks; k += int64_t(gridDim.x) * kWarps) {
    const int k0 = int(k * kChunk), len = min(n - k0, kChunk);
    int key[2], at[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = half * 32 + lane;
      key[half] = i < len ? keys[k0 + i] : vocab;
      at[half] = i < len ? pos[k0 + i] : 0;
    }
    const int before = k0 > 0 ? keys[k0 - 1] : -1, after = k0 + len < n ? keys[k0 + len] : -1;
    for (int64_t c0 = int64_t(blockIdx.y) * kTile; c0 < h; c0 += int64_t(gridDim.y) * kTile) {
      const int64_t c = c0 + lane * 8;
      // the run [s, e) of index v (chunk-relative) ends: its whole sum to dweight, or its piece to a slot
      auto flush = [&](int v, int s, int e, const float (&acc)[8]) {
        if (v >= vocab) return;
        if ((s > 0 || before != v) && (e < len || after != v))
          store8<G, Vec>(dw + int64_t(v) * dw_stride, c, h, acc);
        else
          store8<float, true>(slot_row(part, k, s == 0 ? 0 : 1, part_cols), c, part_cols, acc);
      };
      float acc[8] = {};
      int v = __shfl_sync(kFull, key[0], 0), s = 0;
      for (int i0 = 0; i0 < len; i0 += kBatch) {
        int kb[kBatch];
        float x[kBatch][8];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int i = min(i0 + b, len - 1);  // i is the same in every lane: the shuffles stay warp-uniform
          kb[b] = __shfl_sync(kFull, i < 32 ? key[0] : key[1], i % 32);
          const int p = __shfl_sync(kFull, i < 32 ? at[0] : at[1], i % 32);
          if (i0 + b < len && kb[b] < vocab)
            load8<T, Vec>(dy + int64_t(p) * dy_stride, c, h, x[b]);
          else
#pragma unroll
            for (int j = 0; j < 8; ++j) x[b][j] = 0.f;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (i0 + b >= len) break;
          if (kb[b] != v) {
            flush(v, s, i0 + b, acc);
            v = kb[b], s = i0 + b;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[j] = 0.f;
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[j] += x[b][j];
        }
      }
      flush(v, s, len, acc);
    }
  }
}

// Pass 2: a warp per (chunk, tile) whose last run starts in it and crosses its end adds the run's pieces (this
// chunk's slot, then slot 0 of each chunk the run reaches, in order) and writes the row.
template <class G, bool Vec>
__global__ void __launch_bounds__(kThreads)
    sum_crossing_runs(const int* __restrict__ keys, int n, int vocab, G* __restrict__ dw, int64_t dw_stride, int64_t h,
                      const float* __restrict__ part, int64_t part_cols) {
  const int lane = threadIdx.x % 32;
  const int64_t chunks = (int64_t(n) + kChunk - 1) / kChunk;
  for (int64_t k = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; k < chunks; k += int64_t(gridDim.x) * kWarps) {
    const int64_t k0 = k * kChunk, k1 = k0 + kChunk;
    if (k1 >= n) continue;  // the last chunk: no run crosses its end
    const int v = keys[k1 - 1];
    if (v >= vocab || keys[k1] != v) continue;
    const bool whole = keys[k0] == v;                    // sorted: the whole chunk is v
    if (whole && k0 > 0 && keys[k0 - 1] == v) continue;  // the run started in an earlier chunk: its warp's
    int64_t more = 0;  // chunks after k that the run reaches: each begins with v (sorted, so a prefix of the lanes)
    for (;;) {
      const int64_t start = (k + 1 + more + lane) * kChunk;
      const unsigned hits = __ballot_sync(kFull, start < n && keys[start] == v);
      const int run = hits == kFull ? 32 : __ffs(~hits) - 1;
      more += run;
      if (run < 32) break;
    }
    for (int64_t c0 = int64_t(blockIdx.y) * kTile; c0 < h; c0 += int64_t(gridDim.y) * kTile) {
      const int64_t c = c0 + lane * 8;
      float acc[8];
      cuda::load_vec<float, 8>(slot_row(part, k, whole ? 0 : 1, part_cols) + c, acc);
#pragma unroll 4
      for (int64_t j = 1; j <= more; ++j) {
        float x[8];
        cuda::load_vec<float, 8>(slot_row(part, k + j, 0, part_cols) + c, x);
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[t] += x[t];
      }
      store8<G, Vec>(dw + int64_t(v) * dw_stride, c, h, acc);
    }
  }
}

unsigned grid_for(int64_t items, int per_block) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((items + per_block - 1) / per_block, 65535)));
}

size_t sort_temp_bytes(int64_t n, int64_t vocab) {
  size_t bytes = 0;
  TIGON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), int(n), 0, key_bits(vocab)));
  return bytes;
}

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }
int64_t part_cols_of(int64_t h) { return (h + kTile - 1) / kTile * kTile; }

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

template <class T, class G, bool Vec>
void run_sums(const BwdProblem& p, const int* keys, const int* pos, float* part, cudaStream_t stream) {
  const int n = int(p.idx.n), vocab = int(p.dweight.rows);
  const int64_t h = p.dweight.cols, part_cols = part_cols_of(h);
  const dim3 grid(grid_for(chunks_of(n), kWarps), unsigned(std::min<int64_t>(part_cols / kTile, 65535)));
  auto* dw = static_cast<G*>(p.dweight.data);
  sum_chunks<T, G, Vec><<<grid, kThreads, 0, stream>>>(keys, pos, n, vocab, static_cast<const T*>(p.dy.data),
                                                       p.dy.row_stride, dw, p.dweight.row_stride, h, part, part_cols);
  TIGON_CUDA_CHECK_LAUNCH();
  if (n <= kChunk) return;  // one chunk: every run lay inside it
  sum_crossing_runs<G, Vec>
      <<<grid, kThreads, 0, stream>>>(keys, n, vocab, dw, p.dweight.row_stride, h, part, part_cols);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T, class G>
void run_sums(const BwdProblem& p, const int* keys, const int* pos, float* part, cudaStream_t stream) {
  const bool vec = p.dweight.cols % 8 == 0 && p.dy.row_stride % 8 == 0 && p.dweight.row_stride % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(p.dy.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.dweight.data) % 16 == 0;
  if (vec)
    run_sums<T, G, true>(p, keys, pos, part, stream);
  else
    run_sums<T, G, false>(p, keys, pos, part, stream);
}

}  // namespace

size_t cuda_workspace_bytes(int64_t n, int64_t vocab, int64_t cols) {
  if (n == 0) return 0;
  const size_t part = size_t(2 * chunks_of(n) * part_cols_of(cols)) * sizeof(float);
  return 4 * align256(size_t(n) * sizeof(int)) + align256(sort_temp_bytes(n, vocab)) + align256(part);
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
  const int n = int(p.idx.n), vocab = int(p.dweight.rows);
  const size_t one = align256(size_t(n) * sizeof(int));
  const size_t temp_bytes = sort_temp_bytes(n, vocab);
  char* ws = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<int*>(ws);
  auto* keys = reinterpret_cast<int*>(ws + one);
  auto* pos_in = reinterpret_cast<int*>(ws + 2 * one);
  auto* pos = reinterpret_cast<int*>(ws + 3 * one);
  void* temp = ws + 4 * one;
  auto* part = reinterpret_cast<float*>(ws + 4 * one + align256(temp_bytes));
  const unsigned grid = grid_for(n, kThreads);
  if (p.idx.dtype == DType::kInt64)
    make_keys<int64_t><<<grid, kThreads, 0, st>>>(p.idx.data, n, vocab, p.padding_idx, keys_in, pos_in);
  else
    make_keys<int32_t><<<grid, kThreads, 0, st>>>(p.idx.data, n, vocab, p.padding_idx, keys_in, pos_in);
  TIGON_CUDA_CHECK_LAUNCH();
  size_t sort_bytes = temp_bytes;
  TIGON_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys_in, keys, pos_in, pos, n, 0, key_bits(vocab), st));
  TIGON_SWITCH_FLOAT(p.dy.dtype, T, {
    if (p.dweight.dtype == DType::kFloat32)
      run_sums<T, float>(p, keys, pos, part, st);
    else
      run_sums<T, T>(p, keys, pos, part, st);
  });
}

}  // namespace tigon::embedding
