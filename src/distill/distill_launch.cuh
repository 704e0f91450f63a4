// Typed launchers; included only by the per-dtype instantiation files distill_cuda_<dtype>.cu.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "distill/distill_kernels.cuh"
#include "distill/distill_launch.h"

namespace tigon::distill {

// The cluster kernel's split of a row of nvec 16-byte vectors (student and teacher each) over 1-8 blocks: the size
// that lets the most blocks share an SM (at most kBlocksPerSm; the fewest blocks per row among ties), so blocks at
// different phases of their rows (copying, computing, writing) overlap. bf16 x 128256: 7 blocks of 2291 vectors of
// each (73 KB), 3 per SM. csize 0: the row does not fit in 8 blocks.
struct ClusterPlan {
  int csize = 0, threads = 0;
  size_t smem = 0;
  kern::SliceShape sh;
};
constexpr int kBlocksPerSm = 3;
constexpr int64_t kBlockSmemOverhead = kern::kStaticSmem + 1024;  // static arrays and the system's 1 KB per block

inline ClusterPlan cluster_plan(int64_t nvec, const cuda::DeviceLimits& d) {
  const int64_t fit = d.smem_block - kern::kStaticSmem;
  const auto slice_vecs = [&](int c) { return std::max<int64_t>(1, (nvec + c - 1) / c); };
  const auto bytes = [&](int c) { return 2 * slice_vecs(c) * 16; };
  ClusterPlan p;
  for (int c = 1, most = 0; c <= kern::kMaxCluster; ++c) {
    if (bytes(c) > fit) continue;
    const int per_sm = int(std::min<int64_t>(d.smem_sm / (bytes(c) + kBlockSmemOverhead), kBlocksPerSm));
    if (per_sm > most) most = per_sm, p.csize = c;
  }
  if (p.csize == 0) return p;
  p.sh.slice_vecs = slice_vecs(p.csize);
  p.threads = int(std::clamp<int64_t>((p.sh.slice_vecs / 4 + 31) / 32 * 32, 64, kern::kThreads));
  // Pieces of up to kVecsPerThread vectors a thread (pass 1 holds a thread's vectors of a piece in registers and pays
  // a fixed cost per piece), at most kMaxPieces: the statistics start on the first.
  const int64_t pieces = (p.sh.slice_vecs + kern::kVecsPerThread * p.threads - 1) / (kern::kVecsPerThread * p.threads);
  // kMaxPieces x kVecsPerThread x kThreads vectors (122 KB of each input) is more than a block's shared memory holds
  static_assert(kern::kMaxPieces * kern::kVecsPerThread * kern::kThreads * 32 > 232448, "pieces for a full slice");
  if (pieces > kern::kMaxPieces) return ClusterPlan{};
  p.sh.piece_vecs = (p.sh.slice_vecs + pieces - 1) / pieces;
  p.smem = size_t(2 * p.sh.slice_vecs * 16);
  return p;
}

// One cluster per row; false (nothing launched, no error left behind) when the cluster cannot be placed.
template <class T, Kind K, bool P>
bool launch_cluster(const RowArgs& a, const ClusterPlan& p, const cuda::DeviceLimits& d, cudaStream_t stream,
                    bool pdl) {
  if (p.csize == 0 || a.rows > INT_MAX / p.csize) return false;
  const auto kernel = kern::cluster_rows_kernel<T, K, P>;
  const void* key = reinterpret_cast<const void*>(kernel);
  int dev = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&dev));
  cuda::allow_max_smem(key, d, dev);
  cuda::LaunchConfig c(dim3(unsigned(a.rows * p.csize)), dim3(unsigned(p.threads)), p.smem, stream, unsigned(p.csize));
  if (cuda::active_clusters(key, c.cfg, dev) == 0) return false;
  return cuda::try_launch(c, pdl, kernel, a, p.sh);
}

template <class T, Kind K, bool P>
void launch_classic(const RowArgs& a, cudaStream_t stream) {
  const int threads = int(std::clamp<int64_t>((a.cols / 8 + 31) / 32 * 32, 32, kern::kThreads));
  kern::classic_rows_kernel<T, K, P><<<unsigned(std::min<int64_t>(a.rows, INT_MAX)), threads, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

inline const char* cluster_name(int csize) {
  static const char* const names[kern::kMaxCluster + 1] = {"",         "cluster1", "cluster2", "cluster3", "cluster4",
                                                           "cluster5", "cluster6", "cluster7", "cluster8"};
  return names[csize];
}

template <class T, Kind K, bool P>
const char* launch_kind(const RowArgs& a, bool vec, RowKernel choice, cudaStream_t stream, bool follows_totals) {
  const int64_t nvec = a.cols / kern::kVec<T>;
  if (vec && choice == RowKernel::kCluster && nvec > 0 && nvec < kern::kMaxRowVecs) {
    const cuda::DeviceLimits d = cuda::device_limits();
    const ClusterPlan p = cluster_plan(nvec, d);
    if (launch_cluster<T, K, P>(a, p, d, stream, follows_totals)) return cluster_name(p.csize);
  }
  launch_classic<T, K, P>(a, stream);
  return "classic";
}

template <class T, bool P>
const char* launch_mode(const RowArgs& a, Kind kind, bool vec, RowKernel choice, cudaStream_t stream, bool pdl) {
  switch (kind) {
    case Kind::kForwardKL: return launch_kind<T, Kind::kForwardKL, P>(a, vec, choice, stream, pdl);
    case Kind::kReverseKL: return launch_kind<T, Kind::kReverseKL, P>(a, vec, choice, stream, pdl);
    case Kind::kJSD: return launch_kind<T, Kind::kJSD, P>(a, vec, choice, stream, pdl);
    case Kind::kTVD: return launch_kind<T, Kind::kTVD, P>(a, vec, choice, stream, pdl);
  }
  return "";
}

template <class T>
const char* launch_rows(const RowArgs& a, Kind kind, bool probs, bool vec, RowKernel choice, cudaStream_t stream,
                        bool follows_totals) {
  return probs ? launch_mode<T, true>(a, kind, vec, choice, stream, follows_totals)
               : launch_mode<T, false>(a, kind, vec, choice, stream, follows_totals);
}

#define TIGON_DISTILL_INSTANTIATE(T) \
  template const char* launch_rows<T>(const RowArgs&, Kind, bool, bool, RowKernel, cudaStream_t, bool);

}  // namespace tigon::distill
