// The cluster row kernel: reads each row of logits from DRAM once and writes the gradient with 16-byte stores,
// possibly over the logits. A row is split over a thread block cluster of 1-8 blocks, each holding its slice in shared
// memory. Rows need not be 16-byte aligned (odd vocabularies): a row's columns before its first 16-byte boundary, its
// head, are read one by one by the first block, as the columns after its last whole vector are by the last; the
// gradient's rows must share the logits' alignment (in place, or laid out alike), which the launcher checks. The bulk
// copy engine fills the slice in pieces, each completing on its own mbarrier, so the statistics of the first piece
// overlap the arrival of the rest; the blocks exchange their partial statistics through distributed shared memory, then
// write the gradient from shared memory.
//
// One cluster per row. The launcher sizes slices so that several blocks share an SM (five of ~42 KB for 128256 bf16
// logits) and their phases (loading, computing, writing) overlap, as far as the block scheduler staggers them. A
// persistent form (as many clusters as are resident, each walking rows, its buffer refilled for the next row) ran 2-6%
// slower on an H200 with either refill order (docs/performance/cross-entropy.md).
#pragma once

#include <cooperative_groups.h>

#include "common/async_copy.cuh"
#include "cross_entropy/cross_entropy_kernels.cuh"

namespace tigon::cross_entropy::kern {

constexpr int kClusterThreads = kClusterMaxThreads;
constexpr int kClusterUnroll = 4;  // vectors per group; a piece is a whole number of groups per thread
constexpr int kMaxCluster = 8;     // the portable maximum (larger, non-portable clusters ran 4-30% slower)
constexpr int kMaxPieces = 16;

// How a row is split (in 16-byte vectors): block `rank` holds [rank * slice_vecs, +slice_vecs) in its buffer, copied
// in pieces.
struct SliceShape {
  int64_t slice_vecs = 0;
  int64_t piece_vecs = 1;
};

// The row's statistics over a cluster, in every thread of every block: each block sends its own (st, merged over the
// block) with st.async into slot `rank` of every block, counted in bytes on that block's `bar`, and waits on its own
// `bar` until all csize slots have landed; every block then merges the same values in the same order, so they agree
// bit for bit. No cluster barrier per row: cluster.sync() compiled to a GPU-scope memory fence (MEMBAR.ALL.GPU) and
// the cluster barrier, a wait for the fence and the slowest block that cost 13% of the kernel on an H200
// (docs/performance/cross-entropy.md). bar must have been initialised (count 1) before the cluster's arrival barrier,
// and armed for this exchange's bytes (kStatBytes * csize) by one thread of this block.
struct alignas(16) StatSlot {
  float m, s, best, wx;
  int64_t arg;
};
constexpr uint32_t kStatBytes = 24;  // what st.async writes per slot: m, s, best, wx, arg

// The kernel's static shared memory, at most (the launcher plans blocks per SM with it): its barriers and statistics.
constexpr int kStaticSmemBytes = 1024;
static_assert(kMaxPieces * 8 + (kClusterThreads / 32) * sizeof(RowStats) + kMaxCluster * sizeof(StatSlot) + 8 <=
                  kStaticSmemBytes,
              "cluster_rows_kernel's static shared memory outgrew kStaticSmemBytes");

__device__ __forceinline__ RowStats exchange_stats(const RowStats& st, StatSlot (&slots)[kMaxCluster], uint64_t* bar,
                                                   bool want_arg, bool smooth) {
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank()), tid = int(threadIdx.x);
  // A one-block cluster has no distributed shared memory (st.async into it is outside what the hardware defines:
  // compute-sanitizer flags it), and the block's own statistics are already the row's.
  if (csize == 1) return st;
  __cluster_barrier_wait();  // every block running, its bar initialised, before anyone writes into it
  if (tid < csize) {
    const uint32_t dst = cuda::cluster_addr(&slots[rank], uint32_t(tid));
    const uint32_t rbar = cuda::cluster_addr(bar, uint32_t(tid));
    cuda::st_async_v4(dst, __float_as_uint(st.m), __float_as_uint(st.s), __float_as_uint(st.best),
                      __float_as_uint(st.wx), rbar);
    cuda::st_async_b64(dst + 16, uint64_t(st.arg), rbar);
  }
  cuda::mbar_wait(bar, 0);
  return merge_entries(
      csize,
      [&](int j) {
        RowStats v;
        v.m = slots[j].m, v.s = slots[j].s, v.best = slots[j].best, v.wx = slots[j].wx, v.arg = slots[j].arg;
        return v;
      },
      want_arg, smooth);
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

// The first block's head columns (before the row's first 16-byte boundary, fewer than V), one per thread, into st,
// after the thread's vectors; the thread's logit (0 for none). A head column precedes all of them: it wins a tie.
template <class T, int O>
__device__ __forceinline__ float accumulate_head(RowStats& st, const T* x, int head, const RowArgs& a) {
  if (int(threadIdx.x) >= head) return 0.f;
  const float v = to_f<T>(x[threadIdx.x]);
  accumulate1<O, true>(st, v, threadIdx.x, a);
  return v;
}

// The row is read by the bulk copy with no L2 hint and the gradient stored with st.global.cg. On an H200, bf16
// 8192 x 128256 with a gradient, the read with no hint ran 4% faster than with evict_first or evict_normal (1041
// against 1087 us, in place and out of place); evict_first or .cs stores ran 5% slower. evict_last reads ran 0.8%
// faster still, but lines held at that priority outlive the kernel and crowd the next kernels' data (and a
// persisting-L2 carve-out a user may have set).
template <class T, int O>
__global__ void __launch_bounds__(kClusterThreads, 3) cluster_rows_kernel(RowArgs a, SliceShape sh) {
  constexpr int V = kVec<T>, U = kClusterUnroll;
  extern __shared__ uint4 slice[];       // slice_vecs: this block's part of the row
  __shared__ uint64_t bars[kMaxPieces];  // one per piece
  __shared__ RowStats warp_stats[kClusterThreads / 32];
  __shared__ StatSlot rank_slots[kMaxCluster];  // [r]: block r's statistics, written by block r
  __shared__ uint64_t stat_bar;                 // counts the bytes of rank_slots landed

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t row = blockIdx.x / csize;
  const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
  T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
  // The row's vectors start at its first 16-byte boundary, after `head` columns (0 for aligned rows; the first block
  // reads them); vector k holds columns head + k V + [0, V).
  const int head = int(min(a.cols, int64_t(((16 - (reinterpret_cast<uintptr_t>(x) & 15)) & 15) / sizeof(T))));
  const int first_head = rank == 0 ? head : 0;
  const T* xb = x + head;
  const int64_t nvec = (a.cols - head) / V, v0 = rank * sh.slice_vecs;  // nvec < kMaxRowVecs: 32-bit indices below
  const int64_t count = v0 < nvec ? min(sh.slice_vecs, nvec - v0) : 0, v_end = v0 + count;
  const int tail = rank == csize - 1 ? int(a.cols - head - nvec * V) : 0;  // the last block: columns after them
  const int pieces = int((count + sh.piece_vecs - 1) / sh.piece_vecs);
  const int64_t t = load_target(a, row);
  // The finish kernel, launched as this grid's programmatic dependent, may start once every block has started; it
  // waits for this grid's end before reading anything.
  cuda::allow_dependents();

  if (t == a.ignore_index) {  // the same in every block of the cluster: none of them reads or exchanges anything
    if (rank == 0 && tid == 0) write_ignored(a, row);
    if (grad) {
      uint4* gv = reinterpret_cast<uint4*>(grad + head);
      for (int64_t k = v0 + tid; k < v_end; k += nthr) __stcg(gv + k, make_uint4(0, 0, 0, 0));
      if (tid < first_head) grad[tid] = from_f<T>(0.f);
      if (tid < tail) grad[head + nvec * V + tid] = from_f<T>(0.f);
    }
    // Launched as the totals kernel's dependent, no block may end before the totals do: the finish kernel after this
    // one waits for this grid alone, and reads the totals (a grid of ignored rows only would otherwise let it run
    // while the totals kernel still writes them).
    cuda::grid_dependency_wait();
    return;  // no block touches another's shared memory, so each may leave at once
  }
  // Thread 0 starts every piece of the copy at once: the whole slice is in flight while the statistics follow it.
  if (tid == 0) {
    for (int p = 0; p < pieces; ++p) cuda::mbar_init(&bars[p], 1);
    cuda::mbar_init(&stat_bar, 1);
    cuda::mbar_init_fence();
    if (csize > 1) cuda::mbar_arrive_expect_tx(&stat_bar, kStatBytes * uint32_t(csize));
    for (int p = 0; p < pieces; ++p) {
      const int64_t first = p * sh.piece_vecs;
      const uint32_t bytes = uint32_t(min(sh.piece_vecs, count - first) * 16);
      cuda::mbar_arrive_expect_tx(&bars[p], bytes);
      cuda::bulk_copy_g2s(slice + first, xb + (v0 + first) * V, bytes, &bars[p]);
    }
  }
  // Every block of the cluster must be running before another writes into its shared memory: arrive now, wait
  // before the exchange, by when the wait costs nothing. A one-block cluster exchanges nothing (exchange_stats).
  if (csize > 1) __cluster_barrier_arrive_relaxed();
  __syncthreads();  // the barriers are initialised before anyone waits on them

  // The target logit, read before the exchange, after which some block may write a gradient over it.
  float xt = NAN;
  if ((a.token_scaling || (rank == 0 && tid == 0)) && t >= 0 && t < a.cols) xt = capped<O>(to_f<T>(x[t]), a);

  // Vector k of the row (v0 <= k < v_end) is slice[k - v0].
  const auto from_slice = [&](uint32_t k) { return slice[k - uint32_t(v0)]; };
  RowStats st;
  for (int p = 0; p < pieces; ++p) {
    cuda::mbar_wait(&bars[p], 0);
    const int64_t first = v0 + p * sh.piece_vecs;
    stats_pass<T, O, U>(st, uint32_t(first + tid), uint32_t(min(v_end, first + sh.piece_vecs)), nthr, a, from_slice,
                        head);
  }
  if (a.want_arg)
    resolve_arg<T, U>(st, int64_t(nthr) * V, head + (v0 + tid) * V, head + v_end * V,
                      [&](int64_t c) { return from_slice(uint32_t((c - head) / V)); });
  const float xhead = accumulate_head<T, O>(st, x, first_head, a);
  const float xtail = accumulate_tail<T, O>(st, x, head + nvec * V, tail, a);
  cuda::grid_dependency_wait();  // launched as the totals kernel's dependent: its totals, which finish_row reads
  const RowTotals tot = load_totals(a, t);  // in flight through the merges and the exchange
  st = block_merge(st, warp_stats, a);
  const RowStats r = exchange_stats(st, rank_slots, &stat_bar, a.want_arg, a.smoothing > 0.f);
  const GradCoef k = finish_row(a, row, t, xt, r, tot, rank == 0 && tid == 0);
  if (!grad) return;

  with_fold(k, [&](auto fold) {
    constexpr bool F = decltype(fold)::value;
    uint4* gv = reinterpret_cast<uint4*>(grad + head);
    grad_pass<T, O, F, U>(
        k, uint32_t(v0 + tid), uint32_t(v_end), nthr, a, from_slice,
        [&](uint32_t j, const uint4& g) { __stcg(gv + j, g); }, head);
    if (tid < first_head) grad[tid] = from_f<T>(grad_elem<O, F>(xhead, tid, tid == t, k, a));
    if (tid < tail) {
      const int64_t c = head + nvec * V + tid;
      grad[c] = from_f<T>(grad_elem<O, F>(xtail, c, c == t, k, a));
    }
    const int64_t kt = (t - head) / V;  // the target's vector: its thread adds the one-hot term
    if (t >= head && kt >= v0 && kt < v_end && int(kt - v0) % nthr == tid)  // kt - v0 < slice_vecs: 32 bits
      fix_target<T, O, F>(grad, to_f<T>(reinterpret_cast<const T*>(slice)[t - head - v0 * V]), k, a);
  });
  // No block touches another's shared memory after the exchange barrier, so each may leave once it is done.
}

}  // namespace tigon::cross_entropy::kern
