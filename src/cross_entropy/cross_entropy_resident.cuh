// The cluster row kernel: reads each row of logits from DRAM once (rows 16-byte aligned; the launcher falls back to
// the classic kernel otherwise) and writes the gradient with 16-byte stores, possibly over the logits. A row is split
// over a thread block cluster of 1-8 blocks, each holding its slice in shared memory. The bulk copy engine fills the
// slice in pieces, each completing on its own mbarrier, so the statistics of the first piece overlap the arrival of
// the rest; the blocks exchange their partial statistics through distributed shared memory, then write the gradient
// from shared memory.
//
// Two ways to run it (the launcher's grid):
// - `cluster`: one cluster per row. With ~63 KB slices three blocks share an SM and their phases (loading, writing)
//   overlap, as far as the block scheduler staggers them.
// - `walk`: as many clusters as are resident, each walking rows with a stride: no cluster is launched after the first
//   wave, so an SM's slots are never left empty waiting for a cluster's worth of free slots in one GPC. The one
//   buffer is refilled piece by piece: as soon as this row's gradient of a piece is written, the next row's copy of
//   that piece starts, so a block's reads of its next row overlap the writes of this one (with no gradient, the
//   whole next row starts once the statistics have read the buffer).
#pragma once

#include <cooperative_groups.h>

#include "common/async_copy.cuh"
#include "cross_entropy/cross_entropy_kernels.cuh"

namespace tigon::cross_entropy::kern {

constexpr int kClusterThreads = 256;
constexpr int kClusterUnroll = 4;  // vectors per group; a piece is a whole number of groups per thread
constexpr int kMaxCluster = 8;    // the portable maximum
constexpr int kMaxPieces = 16;

// How a row is split (in 16-byte vectors): block `rank` holds [rank * slice_vecs, +slice_vecs) in its buffer, copied
// in pieces.
struct SliceShape {
  int64_t slice_vecs = 0;
  int64_t piece_vecs = 1;
};

// The row's statistics over a cluster, in every thread of every block: each block writes its own (st, merged over
// the block) into slot `rank` of every block's `slots`; after the barrier every block merges the same values in the
// same order, so they agree bit for bit. The slot arrays alternate between exchanges (`exchanges` counts them): a
// block through this barrier may write the next exchange's statistics while another still reads this one's, but
// cannot get further ahead without that block reaching the next barrier. The first exchange first waits for the
// cluster's arrival barrier (every block running before another writes into its shared memory); `ready` remembers.
__device__ __forceinline__ RowStats exchange_stats(const RowStats& st, RowStats (&slots)[2][kMaxCluster],
                                                   uint32_t& exchanges, bool& ready) {
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank()), tid = int(threadIdx.x);
  if (!ready) {
    __cluster_barrier_wait();
    ready = true;
  }
  RowStats* mine = slots[exchanges++ & 1];
  if (tid < csize) put(cluster.map_shared_rank(&mine[rank], tid), st);
  cluster.sync();
  RowStats r = mine[0];
  for (int j = 1; j < csize; ++j) r = merge(r, mine[j]);
  return r;
}

// The last block's columns after the whole vectors (fewer than V, from global memory), one per thread from c0, into
// st; the thread's logit (0 for none), which its gradient needs again.
template <class T, int O>
__device__ __forceinline__ float accumulate_tail(RowStats& st, const T* x, int64_t c0, int tail, const RowArgs& a) {
  if (int(threadIdx.x) >= tail) return 0.f;
  const float v = to_f<T>(x[c0 + threadIdx.x]);
  accumulate1<O>(st, v, c0 + threadIdx.x, a);
  return v;
}

template <class T, int O>
__global__ void __launch_bounds__(kClusterThreads, 3) cluster_rows_kernel(RowArgs a, SliceShape sh) {
  constexpr int V = kVec<T>, U = kClusterUnroll;
  extern __shared__ uint4 slice[];       // slice_vecs: this block's part of a row
  __shared__ uint64_t bars[kMaxPieces];  // one per piece, a phase per copy
  __shared__ RowStats warp_stats[kClusterThreads / 32];
  __shared__ RowStats rank_stats[2][kMaxCluster];  // [exchange % 2][r]: block r's statistics, written by block r

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t first_row = blockIdx.x / csize, row_step = gridDim.x / csize;
  const int64_t nvec = a.cols / V, v0 = rank * sh.slice_vecs;  // nvec < kMaxRowVecs: 32-bit vector indices below
  const int64_t count = v0 < nvec ? min(sh.slice_vecs, nvec - v0) : 0, v_end = v0 + count;
  const int tail = rank == csize - 1 ? int(a.cols - nvec * V) : 0;  // the last block: columns after whole vectors
  const int pieces = int((count + sh.piece_vecs - 1) / sh.piece_vecs);

  if (tid == 0) {
    for (int p = 0; p < pieces; ++p) cuda::mbar_init(&bars[p], 1);
    cuda::mbar_init_fence();
  }
  __syncthreads();
  // Thread 0 starts every piece of a row's copy at once: the whole slice is in flight while the statistics follow
  // it. Ignored rows are not read (every thread skips their wait alike).
  const auto wanted = [&](int64_t row) { return row < a.rows && load_target(a, row) != a.ignore_index; };
  const auto copy_piece = [&](int64_t row, int p) {  // thread 0 alone
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    const int64_t first = p * sh.piece_vecs;
    const uint32_t bytes = uint32_t(min(sh.piece_vecs, count - first) * 16);
    cuda::mbar_arrive_expect_tx(&bars[p], bytes);
    cuda::bulk_copy_g2s(slice + first, x + (v0 + first) * V, bytes, &bars[p], cuda::l2_evict_first());  // read once
  };
  const auto copy_row = [&](int64_t row) {
    if (tid != 0 || !wanted(row)) return;
    for (int p = 0; p < pieces; ++p) copy_piece(row, p);
  };
  // Refilling the buffer for `next` once every thread is done reading it (or one piece of it): the barrier, then the
  // proxy fence orders those generic-proxy reads before the copy engine's writes.
  const auto refill = [&](int64_t next, int p) {
    __syncthreads();
    if (tid != 0 || !wanted(next)) return;
    cuda::fence_proxy_async_shared();
    if (p < 0)
      for (int q = 0; q < pieces; ++q) copy_piece(next, q);
    else
      copy_piece(next, p);
  };
  copy_row(first_row);
  // Every block of the cluster must be running before another writes into its shared memory: arrive now, wait
  // before the first exchange, by when the wait costs nothing.
  __cluster_barrier_arrive_relaxed();
  bool cluster_ready = false;
  // The barriers' phase that the next copy completes: it flips with every row copied (an ignored row is not).
  uint32_t parity = 0;
  uint32_t exchanges = 0;  // rank_stats slot: a block can be one exchange ahead of another, never two

  for (int64_t row = first_row; row < a.rows; row += row_step) {
    const int64_t next = row + row_step;
    bool refilled = next >= a.rows;  // nothing to copy after the block's last row
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    uint4* gv = reinterpret_cast<uint4*>(grad);
    const int64_t t = load_target(a, row);

    if (t == a.ignore_index) {  // the same in every block of the cluster: none of them exchanges statistics
      if (rank == 0 && tid == 0) write_ignored(a, row);
      if (grad) {
        for (int64_t k = v0 + tid; k < v_end; k += nthr) __stcg(gv + k, make_uint4(0, 0, 0, 0));
        if (tid < tail) grad[nvec * V + tid] = from_f<T>(0.f);
      }
    } else {
      // The target logit, read before the exchange, after which some block may write a gradient over it.
      float xt = NAN;
      if (rank == 0 && tid == 0 && t >= 0 && t < a.cols) xt = capped<O>(to_f<T>(x[t]), a);

      // Vector k of the row (v0 <= k < v_end) is slice[k - v0].
      const auto from_slice = [&](uint32_t k) { return slice[k - uint32_t(v0)]; };
      RowStats st;
      for (int p = 0; p < pieces; ++p) {
        cuda::mbar_wait(&bars[p], parity);
        const int64_t first = v0 + p * sh.piece_vecs;
        stats_pass<T, O, U>(st, uint32_t(first + tid), uint32_t(min(v_end, first + sh.piece_vecs)), nthr, a,
                            from_slice);
      }
      parity ^= 1;
      resolve_arg<T, U>(st, int64_t(nthr) * V, (v0 + tid) * V, v_end * V,
                        [&](int64_t c) { return from_slice(uint32_t(c / V)); });
      if (!grad && !refilled) {  // the statistics were the buffer's last readers
        refill(next, -1);
        refilled = true;
      }
      const float xtail = accumulate_tail<T, O>(st, x, nvec * V, tail, a);
      st = block_merge(st, warp_stats);
      const RowStats r = exchange_stats(st, rank_stats, exchanges, cluster_ready);
      const GradCoef k = finish_row(a, row, t, xt, r, rank == 0 && tid == 0);

      if (grad) {
        with_fold(k, [&](auto fold) {
          constexpr bool F = decltype(fold)::value;
          const int64_t kt = t / V;  // the target's vector: its thread adds the one-hot term
          for (int p = 0; p < pieces; ++p) {
            const int64_t first = v0 + p * sh.piece_vecs, end = min(v_end, first + sh.piece_vecs);
            grad_pass<T, O, F, U>(k, uint32_t(first + tid), uint32_t(end), nthr, a, from_slice,
                                  [&](uint32_t j, const uint4& g) { __stcg(gv + j, g); });
            // after its vector's store (same thread), before the piece is refilled
            if (t >= 0 && kt >= first && kt < end && (kt - v0) % nthr == tid)
              fix_target<T, O, F>(grad, to_f<T>(reinterpret_cast<const T*>(slice)[t - v0 * V]), k, a);
            if (!refilled) refill(next, p);
          }
          if (tid < tail) {
            const int64_t c = nvec * V + tid;
            grad[c] = from_f<T>(grad_elem<O, F>(xtail, c, c == t, k, a));
          }
        });
        refilled = true;
      }
    }
    if (!refilled) refill(next, -1);
  }
  // Arrive and wait pair up also in a cluster whose rows were all ignored. No block touches another's shared memory
  // after its last exchange barrier, so each may leave once it is done.
  if (!cluster_ready) __cluster_barrier_wait();
}

}  // namespace tigon::cross_entropy::kern
