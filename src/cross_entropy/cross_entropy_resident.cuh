// Row kernels that read each row of logits from DRAM once (rows 16-byte aligned; the launcher falls back to the
// classic kernel otherwise). Both write the gradient with 16-byte stores, possibly over the logits.
//   cluster: a row split over a thread block cluster of 1-8 blocks, each holding its slice in shared memory. The bulk
//            copy engine fills the slice in pieces, each completing on its own mbarrier, so the statistics of the
//            first piece overlap the arrival of the rest; the blocks exchange their partial statistics through
//            distributed shared memory, then write the gradient from shared memory. One cluster per row, no loop:
//            with ~63 KB slices three blocks share an SM and their phases (loading, writing) overlap.
//   l2:      a persistent grid, one row per block at a time, one block per SM: pass 1 reads the row from DRAM marking
//            it evict-last in L2, pass 2 re-reads it (an L2 hit: 132 rows of 250 KB in flight are 33 MB < 60 MB)
//            marking it evict-first, and writes the gradient.
#pragma once

#include <cooperative_groups.h>

#include "common/async_copy.cuh"
#include "cross_entropy/cross_entropy_kernels.cuh"

namespace tigon::cross_entropy::kern {

constexpr int kClusterThreads = 256;
constexpr int kMaxCluster = 8;    // the portable maximum
constexpr int kMaxPieces = 16;

// How a row is split (in 16-byte vectors): block `rank` holds [rank * slice_vecs, +slice_vecs), copied in pieces.
struct SliceShape {
  int64_t slice_vecs = 0;
  int64_t piece_vecs = 1;
};

template <class T, bool kCap>
__global__ void __launch_bounds__(kClusterThreads, 3) cluster_rows_kernel(RowArgs a, SliceShape sh) {
  constexpr int V = 16 / sizeof(T);
  extern __shared__ uint4 slice[];            // this block's part of the row, as stored in memory
  __shared__ uint64_t bars[kMaxPieces];       // one per piece, each used for one phase
  __shared__ RowStats warp_stats[kClusterThreads / 32];
  __shared__ RowStats rank_stats[kMaxCluster];  // slot r: block r's statistics, written by block r

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t row = blockIdx.x / csize;
  const int64_t nvec = a.cols / V, v0 = rank * sh.slice_vecs;
  const int64_t count = v0 < nvec ? min(sh.slice_vecs, nvec - v0) : 0;
  const int tail = rank == csize - 1 ? int(a.cols - nvec * V) : 0;  // the last block: columns after whole vectors
  const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
  T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
  const int64_t t = load_target(a, row);

  if (t == a.ignore_index) {  // the same in every block of the cluster, so none of them uses the cluster barrier
    if (rank == 0 && tid == 0) write_ignored(a, row);
    if (grad) {
      const float zero[V] = {};
      for (int64_t k = tid; k < count; k += nthr) store_vec<T, V>(grad + (v0 + k) * V, zero);
      if (tid < tail) grad[nvec * V + tid] = cuda::from_f<T>(0.f);
    }
    return;
  }

  // Thread 0 starts every piece's copy at once: the whole slice is in flight while the statistics follow it.
  const int pieces = int((count + sh.piece_vecs - 1) / sh.piece_vecs);
  if (tid == 0) {
    for (int p = 0; p < pieces; ++p) cuda::mbar_init(&bars[p], 1);
    cuda::mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    const uint64_t policy = cuda::l2_evict_first();  // read once
    for (int p = 0; p < pieces; ++p) {
      const int64_t first = p * sh.piece_vecs;
      const uint32_t bytes = uint32_t(min(sh.piece_vecs, count - first) * 16);
      cuda::mbar_arrive_expect_tx(&bars[p], bytes);
      cuda::bulk_copy_g2s(slice + first, x + (v0 + first) * V, bytes, &bars[p], policy);
    }
  }
  // Every block of the cluster must be running before another writes into its shared memory: arrive now, wait
  // after the statistics, by when the wait costs nothing.
  __cluster_barrier_arrive_relaxed();

  // The target logit, read before the cluster barrier below, after which some block may write a gradient over it.
  float xt = NAN;
  if (rank == 0 && tid == 0 && t >= 0 && t < a.cols) xt = capped<kCap>(cuda::to_f<T>(x[t]), a.softcap);

  const bool smooth = a.smoothing > 0.f;
  RowStats st{-INFINITY, 0.f, -INFINITY, -1, 0.f};
  for (int p = 0; p < pieces; ++p) {
    cuda::mbar_wait(&bars[p], 0);
    const int64_t end = min(count, (p + 1) * sh.piece_vecs);
    for (int64_t k = p * sh.piece_vecs + tid; k < end; k += nthr) {
      float v[V];
      load_vec<T, V>(reinterpret_cast<const T*>(slice + k), v);
      accumulate<kCap, V>(st, v, (v0 + k) * V, a, smooth);
    }
  }
  float xtail[1] = {0.f};  // the tail is read straight from global memory (fewer than V elements)
  if (tid < tail) {
    xtail[0] = cuda::to_f<T>(x[nvec * V + tid]);
    accumulate<kCap, 1>(st, xtail, nvec * V + tid, a, smooth);
  }
  st = block_merge(st, warp_stats);

  // Each block writes its statistics into slot `rank` of every block's rank_stats; after the barrier every block
  // merges the same values in the same order (so they agree bit for bit), and no block touches another's memory again
  // (so each may leave whenever it is done).
  __cluster_barrier_wait();
  if (tid < csize) *cluster.map_shared_rank(&rank_stats[rank], tid) = st;
  cluster.sync();
  RowStats r = rank_stats[0];
  for (int i = 1; i < csize; ++i) r = merge(r, rank_stats[i]);
  const GradCoef k = finish_row(a, row, t, xt, r, rank == 0 && tid == 0);
  if (!grad) return;

#pragma unroll 2
  for (int64_t i = tid; i < count; i += nthr) {
    float v[V], g[V];
    load_vec<T, V>(reinterpret_cast<const T*>(slice + i), v);
    gradient<kCap, V>(v, g, (v0 + i) * V, k, a);
    store_vec<T, V>(grad + (v0 + i) * V, g);
  }
  if (tid < tail) {
    float g[1];
    gradient<kCap, 1>(xtail, g, nvec * V + tid, k, a);
    grad[nvec * V + tid] = cuda::from_f<T>(g[0]);
  }
}

constexpr int kL2Threads = 1024;
// Vectors per thread in flight: 1024 x 4 x 16 B = 64 KB per SM; 2 with a softcap, whose tanhf needs the registers
// (64 at 1024 threads; 4 spilled).
template <bool kCap>
constexpr int kL2Unroll = kCap ? 2 : 4;

template <class T, bool kCap>
__global__ void __launch_bounds__(kL2Threads, 1) l2_rows_kernel(RowArgs a) {
  constexpr int V = 16 / sizeof(T), U = kL2Unroll<kCap>;
  __shared__ RowStats smem[kL2Threads / 32];
  const bool smooth = a.smoothing > 0.f;
  const int64_t nvec = a.cols / V, tail0 = nvec * V;
  const int64_t step = int64_t(blockDim.x);
  const uint64_t keep = cuda::l2_evict_last(), drop = cuda::l2_evict_first();
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    const int64_t t = load_target(a, row);
    if (t == a.ignore_index) {
      if (threadIdx.x == 0) write_ignored(a, row);
      if (grad) {
        const float zero[V] = {};
        for (int64_t k = threadIdx.x; k < nvec; k += step) store_vec<T, V>(grad + k * V, zero);
        for (int64_t c = tail0 + threadIdx.x; c < a.cols; c += step) grad[c] = cuda::from_f<T>(0.f);
      }
      continue;
    }
    // Read before pass 2 (and before block_merge's barrier): pass 2 may overwrite x[t] with its gradient.
    const float xt = t >= 0 && t < a.cols ? capped<kCap>(cuda::to_f<T>(x[t]), a.softcap) : NAN;

    // Pass 1: U loads issued back to back, then their statistics; each thread's columns still increase.
    RowStats st{-INFINITY, 0.f, -INFINITY, -1, 0.f};
    for (int64_t k0 = threadIdx.x; k0 < nvec; k0 += U * step) {
      uint4 u[U];
#pragma unroll
      for (int j = 0; j < U; ++j)
        if (k0 + j * step < nvec) u[j] = cuda::load16_hint(x + (k0 + j * step) * V, keep);
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const int64_t k = k0 + j * step;
        if (k >= nvec) break;
        float v[V];
        cuda::unpack16<T>(u[j], v);
        accumulate<kCap, V>(st, v, k * V, a, smooth);
      }
    }
    for (int64_t c = tail0 + threadIdx.x; c < a.cols; c += step) {
      const float v[1] = {cuda::to_f<T>(x[c])};
      accumulate<kCap, 1>(st, v, c, a, smooth);
    }
    st = block_merge(st, smem);
    const GradCoef k = finish_row(a, row, t, xt, st, threadIdx.x == 0);
    if (!grad) continue;

    // Pass 2: the same vectors again, from L2, for the last time.
    for (int64_t k0 = threadIdx.x; k0 < nvec; k0 += U * step) {
      uint4 u[U];
#pragma unroll
      for (int j = 0; j < U; ++j)
        if (k0 + j * step < nvec) u[j] = cuda::load16_hint(x + (k0 + j * step) * V, drop);
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const int64_t i = k0 + j * step;
        if (i >= nvec) break;
        float v[V], g[V];
        cuda::unpack16<T>(u[j], v);
        gradient<kCap, V>(v, g, i * V, k, a);
        cuda::store16_hint(grad + i * V, cuda::pack16<T>(g), drop);
      }
    }
    for (int64_t c = tail0 + threadIdx.x; c < a.cols; c += step) {
      const float v[1] = {cuda::to_f<T>(x[c])};
      float g[1];
      gradient<kCap, 1>(v, g, c, k, a);
      grad[c] = cuda::from_f<T>(g[0]);
    }
  }
}

}  // namespace tigon::cross_entropy::kern
