// The cluster row kernel: reads each row of logits from DRAM once (rows 16-byte aligned; the launcher falls back to
// the classic kernel otherwise) and writes the gradient with 16-byte stores, possibly over the logits. A row is split
// over a thread block cluster of 1-8 blocks, each holding its slice in shared memory. The bulk copy engine fills the
// slice in pieces, each completing on its own mbarrier, so the statistics of the first piece overlap the arrival of
// the rest; the blocks exchange their partial statistics through distributed shared memory, then write the gradient
// from shared memory. One cluster per row, no loop: with ~63 KB slices three blocks share an SM and their phases
// (loading, writing) overlap.
#pragma once

#include <cooperative_groups.h>

#include "common/async_copy.cuh"
#include "cross_entropy/cross_entropy_kernels.cuh"

namespace tigon::cross_entropy::kern {

constexpr int kClusterThreads = 256;
constexpr int kClusterUnroll = 4;  // vectors per group; a piece is a whole number of groups per thread
constexpr int kMaxCluster = 8;    // the portable maximum
constexpr int kMaxPieces = 16;

// How a row is split (in 16-byte vectors): block `rank` holds [rank * slice_vecs, +slice_vecs), copied in pieces.
struct SliceShape {
  int64_t slice_vecs = 0;
  int64_t piece_vecs = 1;
};

template <class T, int O>
__global__ void __launch_bounds__(kClusterThreads, 3) cluster_rows_kernel(RowArgs a, SliceShape sh) {
  constexpr int V = kVec<T>, U = kClusterUnroll;
  extern __shared__ uint4 slice[];            // this block's part of the row, as stored in memory
  __shared__ uint64_t bars[kMaxPieces];       // one per piece, each used for one phase
  __shared__ RowStats warp_stats[kClusterThreads / 32];
  __shared__ RowStats rank_stats[kMaxCluster];  // slot r: block r's statistics, written by block r

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t row = blockIdx.x / csize;
  const int64_t nvec = a.cols / V, v0 = rank * sh.slice_vecs;  // nvec < kMaxRowVecs: 32-bit vector indices below
  const int64_t count = v0 < nvec ? min(sh.slice_vecs, nvec - v0) : 0, v_end = v0 + count;
  const int tail = rank == csize - 1 ? int(a.cols - nvec * V) : 0;  // the last block: columns after whole vectors
  const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
  T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
  uint4* gv = reinterpret_cast<uint4*>(grad);
  const int64_t t = load_target(a, row);

  if (t == a.ignore_index) {  // the same in every block of the cluster, so none of them uses the cluster barrier
    if (rank == 0 && tid == 0) write_ignored(a, row);
    if (grad) {
      for (int64_t k = v0 + tid; k < v_end; k += nthr) __stcg(gv + k, make_uint4(0, 0, 0, 0));
      if (tid < tail) grad[nvec * V + tid] = from_f<T>(0.f);
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
  if (rank == 0 && tid == 0 && t >= 0 && t < a.cols) xt = capped<O>(to_f<T>(x[t]), a);

  // Vector k of the row (v0 <= k < v_end) is slice[k - v0].
  const auto from_slice = [&](uint32_t k) { return slice[k - uint32_t(v0)]; };
  RowStats st;
  for (int p = 0; p < pieces; ++p) {
    cuda::mbar_wait(&bars[p], 0);
    const int64_t first = v0 + p * sh.piece_vecs;
    stats_pass<T, O, U>(st, uint32_t(first + tid), uint32_t(min(v_end, first + sh.piece_vecs)), nthr, a, from_slice);
  }
  resolve_arg<T, U>(st, int64_t(nthr) * V, (v0 + tid) * V, v_end * V, [&](int64_t c) { return from_slice(uint32_t(c / V)); });
  float xtail = 0.f;  // the tail is read straight from global memory (fewer than V elements)
  if (tid < tail) {
    xtail = to_f<T>(x[nvec * V + tid]);
    accumulate1<O>(st, xtail, nvec * V + tid, a);
  }
  st = block_merge(st, warp_stats);

  // Each block writes its statistics into slot `rank` of every block's rank_stats; after the barrier every block
  // merges the same values in the same order (so they agree bit for bit), and no block touches another's memory again
  // (so each may leave whenever it is done).
  __cluster_barrier_wait();
  if (tid < csize) put(cluster.map_shared_rank(&rank_stats[rank], tid), st);
  cluster.sync();
  RowStats r = rank_stats[0];
  for (int i = 1; i < csize; ++i) r = merge(r, rank_stats[i]);
  const GradCoef k = finish_row(a, row, t, xt, r, rank == 0 && tid == 0);
  if (!grad) return;

  with_fold(k, [&](auto fold) {
    constexpr bool F = decltype(fold)::value;
    grad_pass<T, O, F, U>(k, uint32_t(v0 + tid), uint32_t(v_end), nthr, a, from_slice,
                          [&](uint32_t i, const uint4& g) { __stcg(gv + i, g); });
    if (tid < tail) {
      const int64_t c = nvec * V + tid;
      grad[c] = from_f<T>(grad_elem<O, F>(xtail, c, c == t, k, a));
    }
    const int64_t kt = t / V;  // the target's vector: its thread adds the one-hot term
    if (t >= 0 && kt >= v0 && kt < v_end && (kt - v0) % nthr == tid)
      fix_target<T, O, F>(grad, to_f<T>(reinterpret_cast<const T*>(slice)[t - v0 * V]), k, a);
  });
}

}  // namespace tigon::cross_entropy::kern
