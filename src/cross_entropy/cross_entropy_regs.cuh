// The register row kernel (`regs`, opt-in until timed): like the cluster kernel (cross_entropy_resident.cuh), a row
// is split over a thread block cluster and read from DRAM once, but each thread loads its part of the slice straight
// into registers (kRegsVecs 16-byte vectors, all loads issued at once) instead of the copy engine filling shared
// memory. Why try it: the row kernels' loss-only pass read at 3.3 TB/s with plain loads (classic) against 2.5 TB/s
// through bulk copies into shared memory (cluster), and a register-resident split is how memory-bound softmax kernels
// reach ~90% of HBM bandwidth on Hopper. Two 256-thread blocks per SM, each with 64 KB of loads in flight.
#pragma once

#include <cooperative_groups.h>

#include "cross_entropy/cross_entropy_kernels.cuh"
#include "cross_entropy/cross_entropy_resident.cuh"

namespace tigon::cross_entropy::kern {

constexpr int kRegsThreads = 256;
constexpr int kRegsVecs = 16;  // per thread: 64 registers of data; a slice is at most 256 x 16 vectors (64 KB)
constexpr int kRegsGroup = 4;  // vectors per statistics group (accumulate's U)

// One row per cluster at a time: a grid of one cluster per row (`regs`), or of as many clusters as are resident, each
// walking rows with a stride (`regswalk`). Vector i of a thread is slice vector i * blockDim.x + threadIdx.x
// (coalesced); vectors past the slice's end are neither counted nor stored.
template <class T, int O>
__global__ void __launch_bounds__(kRegsThreads, 2) regs_rows_kernel(RowArgs a, int64_t slice_vecs) {
  constexpr int V = kVec<T>, N = kRegsVecs, U = kRegsGroup;
  static_assert(N % U == 0, "whole groups");
  __shared__ RowStats warp_stats[kRegsThreads / 32];
  __shared__ RowStats rank_stats[2][kMaxCluster];  // [exchange % 2][r]: block r's statistics, written by block r

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t nvec = a.cols / V, v0 = rank * slice_vecs;
  const int64_t v_end = min(v0 + slice_vecs, nvec);
  const int tail = rank == csize - 1 ? int(a.cols - nvec * V) : 0;  // the last block: columns after whole vectors
  const auto vec_index = [&](int i) { return v0 + int64_t(i) * nthr + tid; };

  // Every block of the cluster must be running before another writes into its shared memory: arrive now, wait before
  // the first exchange.
  __cluster_barrier_arrive_relaxed();
  bool cluster_ready = false;
  uint32_t exchanges = 0;  // rank_stats slot: a block can be one exchange ahead of another, never two

  for (int64_t row = blockIdx.x / csize; row < a.rows; row += gridDim.x / csize) {
    const T* x = static_cast<const T*>(a.logits) + row * a.x_stride;
    T* grad = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    uint4* gv = reinterpret_cast<uint4*>(grad);
    const int64_t t = load_target(a, row);
    if (t == a.ignore_index) {  // the same in every block: none of them exchanges statistics
      if (rank == 0 && tid == 0) write_ignored(a, row);
      if (grad) {
        for (int64_t k = v0 + tid; k < v_end; k += nthr) __stcg(gv + k, make_uint4(0, 0, 0, 0));
        if (tid < tail) grad[nvec * V + tid] = from_f<T>(0.f);
      }
      continue;
    }

    uint4 u[N];
#pragma unroll
    for (int i = 0; i < N; ++i)
      u[i] = vec_index(i) < v_end ? __ldcs(reinterpret_cast<const uint4*>(x) + vec_index(i)) : make_uint4(0, 0, 0, 0);
    // Read before the exchange, after which some block may write a gradient over them: the target logit (soft-capped,
    // for the loss) and, in the thread whose vector holds it, the raw value (for its one-hot term).
    const bool in_range = t >= 0 && t < a.cols;
    float xt = NAN;
    if (rank == 0 && tid == 0 && in_range) xt = capped<O>(to_f<T>(x[t]), a);
    const int64_t kt = in_range ? t / V : -1;
    const bool owns_target = kt >= v0 && kt < v_end && (kt - v0) % nthr == tid;
    const float xr = owns_target ? to_f<T>(x[t]) : 0.f;

    RowStats st;
#pragma unroll
    for (int g = 0; g < N / U; ++g) {
      const int i0 = g * U;
      if (vec_index(i0 + U - 1) < v_end) {  // a whole group
        const uint4 grp[U] = {u[i0], u[i0 + 1], u[i0 + 2], u[i0 + 3]};
        accumulate<T, O, U>(st, grp, vec_index(i0) * V, int64_t(nthr) * V, a);
      } else {
#pragma unroll
        for (int j = 0; j < U; ++j)
          if (vec_index(i0 + j) < v_end) {
            const uint4 one[1] = {u[i0 + j]};
            accumulate<T, O, 1>(st, one, vec_index(i0 + j) * V, int64_t(nthr) * V, a);
          }
      }
    }
    // The argmax column from the candidate group, re-read from global memory (L2): nobody writes before the exchange.
    resolve_arg<T, U>(st, int64_t(nthr) * V, (v0 + tid) * V, v_end * V,
                      [&](int64_t c) { return reinterpret_cast<const uint4*>(x)[c / V]; });
    const float xtail = accumulate_tail<T, O>(st, x, nvec * V, tail, a);
    st = block_merge(st, warp_stats);
    const RowStats r = exchange_stats(st, rank_stats, exchanges, cluster_ready);
    const GradCoef k = finish_row(a, row, t, xt, r, rank == 0 && tid == 0);
    if (!grad) continue;

    with_fold(k, [&](auto fold) {
      constexpr bool F = decltype(fold)::value;
#pragma unroll
      for (int i = 0; i < N; ++i)
        if (vec_index(i) < v_end) __stcg(gv + vec_index(i), grad_vec<T, O, F>(u[i], vec_index(i) * V, k, a));
      if (tid < tail) {
        const int64_t c = nvec * V + tid;
        grad[c] = from_f<T>(grad_elem<O, F>(xtail, c, c == t, k, a));
      }
      if (owns_target) fix_target<T, O, F>(grad, xr, k, a);
    });
  }
  // Arrive and wait pair up also in a cluster whose rows were all ignored.
  if (!cluster_ready) __cluster_barrier_wait();
}

}  // namespace tigon::cross_entropy::kern
