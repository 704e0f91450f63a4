// The re-read row kernel (`reread`, opt-in until timed): a row split over a thread block cluster as in the cluster
// kernel, but nothing holds it. Pass 1 reads the block's slice from DRAM with plain 16-byte loads marked evict-last in
// L2; the blocks exchange statistics; pass 2 reads the slice again, from L2, and stores the gradient marked
// evict-first. The launcher runs only as many clusters at once as keep their rows inside a share of L2 (each walks
// rows with a stride), so pass 2 finds its bytes there and DRAM sees one read and one write per logit.
// Why try it: the classic kernel (plain loads, ~70% occupancy, row read twice) streamed DRAM at 4.12 TB/s under
// Nsight Compute, but ~400 rows of 250 KB in flight overflow L2, so its second read went to DRAM (6.3 GB moved,
// 1.55 ms); the cluster kernel moves only 4.2 GB but at 2.97 TB/s (three 63 KB blocks per SM). This keeps classic's
// many small blocks and plain loads and bounds the rows in flight instead: 256-thread blocks, four or more per SM, one
// row per cluster of (for bf16 x 128256) 8 blocks.
#pragma once

#include <cooperative_groups.h>

#include "common/async_copy.cuh"
#include "cross_entropy/cross_entropy_kernels.cuh"
#include "cross_entropy/cross_entropy_resident.cuh"

namespace tigon::cross_entropy::kern {

constexpr int kRereadThreads = 256;
constexpr int kRereadVecsPerThread = 8;  // the launcher's split: slices of up to 256 x 8 vectors (32 KB) per block

// Five blocks per SM in the plain case (48 registers, no spills), four with options (64: their extra terms spill at 48).
template <class T, int O>
__global__ void __launch_bounds__(kRereadThreads, O == 0 ? 5 : 4) reread_rows_kernel(RowArgs a, int64_t slice_vecs) {
  constexpr int V = kVec<T>, U = 4;  // U vectors in flight per thread per group, as classic
  __shared__ RowStats warp_stats[kRereadThreads / 32];
  __shared__ RowStats rank_stats[2][kMaxCluster];  // [exchange % 2][r]: block r's statistics, written by block r

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const uint32_t tid = threadIdx.x, nthr = blockDim.x;
  const int64_t nvec = a.cols / V, v0 = min(nvec, rank * slice_vecs), v_end = min(v0 + slice_vecs, nvec);
  const int tail = rank == csize - 1 ? int(a.cols - nvec * V) : 0;  // the last block: columns after whole vectors
  const uint64_t keep = cuda::l2_evict_last(), drop = cuda::l2_evict_first();

  __cluster_barrier_arrive_relaxed();  // every block running before another writes into its shared memory
  bool cluster_ready = false;
  uint32_t exchanges = 0;

  for (int64_t row = blockIdx.x / csize; row < a.rows; row += gridDim.x / csize) {
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    uint4* gv = reinterpret_cast<uint4*>(grad);
    const int64_t t = load_target(a, row);
    if (t == a.ignore_index) {  // the same in every block of the cluster: none of them exchanges statistics
      if (rank == 0 && tid == 0) write_ignored(a, row);
      if (grad) {
        for (int64_t k = v0 + tid; k < v_end; k += nthr) __stcg(gv + k, make_uint4(0, 0, 0, 0));
        if (int(tid) < tail) grad[nvec * V + tid] = from_f<T>(0.f);
      }
      continue;
    }
    // Read before the exchange, after which some block may write a gradient over them: the target logit (soft-capped,
    // for the loss) and, in the thread whose vector holds it, the raw value (for its one-hot term).
    const bool in_range = t >= 0 && t < a.cols;
    float xt = NAN;
    if (rank == 0 && tid == 0 && in_range) xt = capped<O>(to_f<T>(x[t]), a);
    const int64_t kt = in_range ? t / V : -1;
    const bool owns_target = kt >= v0 && kt < v_end && (kt - v0) % nthr == tid;
    const float xr = owns_target ? to_f<T>(x[t]) : 0.f;

    RowStats st;
    stats_pass<T, O, U>(st, uint32_t(v0 + tid), uint32_t(v_end), nthr, a,
                        [&](uint32_t k) { return cuda::load16_hint(xv + k, keep); });
    resolve_arg<T, U>(st, int64_t(nthr) * V, (v0 + tid) * V, v_end * V, [&](int64_t c) { return xv[c / V]; });
    const float xtail = accumulate_tail<T, O>(st, x, nvec * V, tail, a);
    st = block_merge(st, warp_stats);
    const RowStats r = exchange_stats(st, rank_stats, exchanges, cluster_ready);
    const GradCoef k = finish_row(a, row, t, xt, r, rank == 0 && tid == 0);
    if (!grad) continue;

    with_fold(k, [&](auto fold) {
      constexpr bool F = decltype(fold)::value;
      grad_pass<T, O, F, U>(
          k, uint32_t(v0 + tid), uint32_t(v_end), nthr, a, [&](uint32_t j) { return cuda::load16_hint(xv + j, drop); },
          [&](uint32_t j, const uint4& g) { cuda::store16_hint(gv + j, g, drop); });
      if (int(tid) < tail) {
        const int64_t c = nvec * V + tid;
        grad[c] = from_f<T>(grad_elem<O, F>(xtail, c, c == t, k, a));
      }
      if (owns_target) fix_target<T, O, F>(grad, xr, k, a);
    });
  }
  if (!cluster_ready) __cluster_barrier_wait();  // arrive and wait pair up also when every row was ignored
}

}  // namespace tigon::cross_entropy::kern
