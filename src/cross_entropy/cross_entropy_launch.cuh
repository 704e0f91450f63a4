// Typed launchers; included only by the per-dtype instantiation files cross_entropy_cuda_<dtype>.cu.
#pragma once

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "cross_entropy/cross_entropy_kernels.cuh"
#include "cross_entropy/cross_entropy_launch.h"
#include "cross_entropy/cross_entropy_resident.cuh"

namespace tigon::cross_entropy {

using cuda::active_clusters;
using cuda::allow_max_smem;
using cuda::device_limits;
using cuda::DeviceLimits;

// Threads per row: enough for ~4 vectors each on short rows, kMaxThreads on long ones (128256 bf16 logits: 16032
// vectors, 32 per thread), always whole warps.
inline int row_threads(int64_t cols, int per_vec) {
  const int64_t vecs = (cols + per_vec - 1) / per_vec;
  const int64_t want = (vecs + 3) / 4;
  return int(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kern::kMaxThreads));
}

// The cluster kernel's split of a row of nvec 16-byte vectors over its blocks, one buffer each. By default the fewest
// blocks per row that let kBlocksPerSm of them share an SM, else the size that lets the most share one (the fewest
// blocks among ties): several blocks per SM, each at its own phase of its row (waiting on its copy, computing,
// writing), keep bytes moving. Slices are an odd number of vectors (the last block takes what is left): 4008 vectors
// ran 3% slower than 4009, and 2296 or 2304 5% slower than 2291 on an H200 (measured, not understood). With a
// gradient, bf16 x 128256 on an H200, on real logits: 6 blocks of 2673 vectors (42 KB, 5 per SM) at 128 threads ran
// 0.7-1.2% faster than 5 of 3207 (50 KB, 4 per SM) (on the near-constant data of a gradient fed back as logits the
// order flips). Without a gradient (one read, no writes) more, smaller blocks keep more reads in flight: 7 of 2291
// vectors, 6 per SM, ran 0.63 ms against 0.69 for 5 of 3207. `forced` (1-8, tests only) fixes the blocks per row.
// csize 0: the row does not fit in 8 blocks.
struct ClusterPlan {
  int csize = 0, threads = 0;
  size_t smem = 0;  // dynamic shared memory: the buffer
  kern::SliceShape sh;
};
constexpr int kBlocksPerSm = 5, kBlocksPerSmLossOnly = 6;  // (non-portable clusters of 9-16 blocks ran 4-30% slower)
// Threads per block when a gradient is written and at least 4 blocks share an SM; otherwise ~16 vectors per thread.
// On an H200, bf16, real logits: 128 against the formula's 192 ran 1% faster at 128256 (5 blocks
// of 3207 vectors) and 151936 (6 of 3167), 1% at 200064 (8 of 3127), the same at 65536; 96 and 160 ran 1-3% slower.
// With 3 blocks per SM (262144: 7 of 4683) the formula's 256 stays ahead of 192 and 128.
constexpr int kGradThreads = 128, kGradThreadsMinPerSm = 4;
// Without a gradient the classic kernel (plain 16-byte loads, the row read once) ran faster than the cluster plan from
// 128 KB rows on an H200 (bf16, 8192 rows: 65536 columns 294 against 341 us, 128256 578-581 against 638-643, 151936
// 649 against 791) and slower below (32000: 198 against 167): the launcher's own plan takes it there.
constexpr int64_t kClassicLossOnlyBytes = int64_t(128) << 10;
// Shared memory per block besides the buffer: the kernel's static arrays (kern::kStaticSmemBytes) and the 1 KB the
// system reserves per block.
constexpr int64_t kBlockSmemOverhead = kern::kStaticSmemBytes + 1024;

inline ClusterPlan cluster_plan(int64_t nvec, bool grad, int forced, const DeviceLimits& d) {
  const int64_t fit = d.smem_block - kern::kStaticSmemBytes;
  const int64_t per_sm_wanted = grad ? kBlocksPerSm : kBlocksPerSmLossOnly;
  const auto slice_vecs = [&](int c) {
    const int64_t share = (nvec + c - 1) / c;  // rounded up to odd
    return std::max<int64_t>(1, share | 1);
  };
  const auto slice_bytes = [&](int c) { return slice_vecs(c) * 16; };
  const auto per_sm = [&](int c) {
    return int(std::min<int64_t>(d.smem_sm / (slice_bytes(c) + kBlockSmemOverhead), per_sm_wanted));
  };
  ClusterPlan p;
  if (forced > 0 && forced <= kern::kMaxCluster && slice_bytes(forced) <= fit) {
    p.csize = forced;
  } else {  // a forced size that does not fit: as if unforced
    for (int c = 1, most = 0; c <= kern::kMaxCluster; ++c) {
      if (slice_bytes(c) > fit) continue;
      if (per_sm(c) > most) most = per_sm(c), p.csize = c;
    }
  }
  if (p.csize == 0) return p;
  p.sh.slice_vecs = slice_vecs(p.csize);
  if (grad && per_sm(p.csize) >= kGradThreadsMinPerSm)
    p.threads = kGradThreads;
  else
    p.threads = int(std::clamp<int64_t>((p.sh.slice_vecs / 16 + 16) / 32 * 32, 64, kern::kClusterThreads));
  // Pieces of whole groups per thread (the statistics start on the first; 8 KB at 128 threads), at most kMaxPieces.
  const int64_t group = int64_t(p.threads) * kern::kClusterUnroll;
  const int64_t pieces = std::clamp<int64_t>((p.sh.slice_vecs + group - 1) / group, 1, kern::kMaxPieces);
  p.sh.piece_vecs = ((p.sh.slice_vecs + pieces - 1) / pieces + group - 1) / group * group;  // rounding up: <= pieces
  p.smem = size_t(p.sh.slice_vecs) * 16;
  return p;
}

// Launches the cluster kernel with plan p, one cluster per row. False (and nothing launched, no error left behind)
// when the cluster cannot be placed or the launch is refused, so the caller tries another size or the classic kernel.
// With pdl, launched as a programmatic dependent of the kernel before it in the stream (the totals kernel, which
// allows it at once): the row kernel's blocks start their copy and first pass while that kernel ends, and wait for
// its totals only before finish_row. Refused, it launches plainly.
template <class T, int O>
bool launch_cluster(const RowArgs& a, const ClusterPlan& p, const DeviceLimits& d, cudaStream_t stream, bool pdl) {
  if (p.csize == 0 || a.rows > INT_MAX / p.csize) return false;
  const auto kernel = kern::cluster_rows_kernel<T, O>;
  const void* key = reinterpret_cast<const void*>(kernel);
  int dev = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&dev));
  allow_max_smem(key, d, dev);
  cuda::LaunchConfig c(dim3(unsigned(a.rows * p.csize)), dim3(unsigned(p.threads)), p.smem, stream,
                       unsigned(p.csize));  // the grid: a multiple of the cluster size
  if (active_clusters(key, c.cfg, dev) == 0) return false;
  return cuda::try_launch(c, pdl, kernel, a, p.sh);
}

template <class T, int O>
void launch_classic(const RowArgs& a, bool vec, cudaStream_t stream) {
  const unsigned grid = unsigned(std::min<int64_t>(a.rows, INT_MAX));
  if (vec)
    kern::rows_kernel<T, O><<<grid, row_threads(a.cols, kern::kVec<T>), 0, stream>>>(a);
  else
    kern::scalar_rows_kernel<T, O><<<grid, row_threads(a.cols, 1), 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

// Calls f(std::integral_constant<int, O>) with the row kernel options of a.
template <class F>
void with_options(const RowArgs& a, F f) {
  switch (kern::options_of(a)) {
    case 0: f(std::integral_constant<int, 0>()); break;
    case kern::kCap: f(std::integral_constant<int, kern::kCap>()); break;
    case kern::kSmooth: f(std::integral_constant<int, kern::kSmooth>()); break;
    default: f(std::integral_constant<int, kern::kCap | kern::kSmooth>()); break;
  }
}

// The name of a cluster kernel run, as tests and the profiler see it: "cluster4".
inline const char* cluster_name(int csize) {
  static const char* const names[kern::kMaxCluster + 1] = {"",         "cluster1", "cluster2", "cluster3", "cluster4",
                                                           "cluster5", "cluster6", "cluster7", "cluster8"};
  return names[csize];
}

template <class T>
const char* launch_rows_as(const RowArgs& args, bool vec, bool alike, KernelChoice k, cudaStream_t stream,
                           bool follows_totals) {
  RowArgs a = args;
  a.inv_softcap = a.softcap > 0.f ? 1.f / a.softcap : 0.f;
  const char* ran = "classic";
  const bool short_rows = a.cols / kern::kVec<T> < kern::kMaxRowVecs;  // the vector kernels index vectors in 32 bits
  vec = vec && short_rows;
  alike = alike && short_rows;
  // The launcher's own plan, loss only (no gradient), aligned rows of kClassicLossOnlyBytes or more: the classic
  // kernel, whose plain loads stream one read faster than the cluster kernel's bulk copies there.
  const bool own_plan = k.kind == RowKernel::kCluster && k.cluster == 0;
  const bool classic_loss =
      own_plan && vec && a.grad == nullptr && a.cols * int64_t(sizeof(T)) >= kClassicLossOnlyBytes;
  with_options(a, [&](auto opt) {
    constexpr int O = decltype(opt)::value;
    if (alike && k.kind != RowKernel::kClassic && !classic_loss) {
      // The planned size first, then any other that fits; never a launch error for the choice of size.
      const DeviceLimits d = device_limits();
      const int64_t nvec = a.cols / kern::kVec<T>;  // the most a row holds, whatever its head
      const ClusterPlan first = cluster_plan(nvec, a.grad != nullptr, k.cluster, d);
      if (launch_cluster<T, O>(a, first, d, stream, follows_totals)) {
        ran = cluster_name(first.csize);
        return;
      }
      for (int c = 1; c <= kern::kMaxCluster; c *= 2) {
        const ClusterPlan p = cluster_plan(nvec, a.grad != nullptr, c, d);
        if (p.csize == c && c != first.csize && launch_cluster<T, O>(a, p, d, stream, follows_totals)) {
          ran = cluster_name(c);
          return;
        }
      }
    }
    launch_classic<T, O>(a, vec, stream);
  });
  return ran;
}

template <class T>
void launch_rows(const RowArgs& a, bool vec, cudaStream_t stream) {
  launch_rows_as<T>(a, vec, vec, row_kernel_choice(), stream);
}

template <class T>
void launch_scale(const ScaleArgs& a, bool vec, cudaStream_t stream) {
  constexpr int V = kern::kVec<T>;
  // At most kScaleBlocks blocks, each walking rows: with the usual scalar 1.0 every block leaves at once, and a
  // block per row of fused linear + CE's dW (V rows) cost ~90 us of launches alone on an H200. 1024 blocks of 256
  // threads are about as many as an H200 keeps resident (132 SMs x 2048 threads), enough to stream a real scale,
  // and a quarter of the launches of the scalar-1.0 case.
  constexpr int64_t kScaleBlocks = 1024;
  const unsigned grid = unsigned(std::min<int64_t>(a.rows, kScaleBlocks));
  if (vec)
    kern::scale_kernel<T, V><<<grid, 256, 0, stream>>>(a);
  else
    kern::scale_kernel<T, 1><<<grid, 256, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

#define TIGON_CROSS_ENTROPY_INSTANTIATE(T)                                                              \
  template void launch_rows<T>(const RowArgs&, bool, cudaStream_t);                                     \
  template const char* launch_rows_as<T>(const RowArgs&, bool, bool, KernelChoice, cudaStream_t, bool); \
  template void launch_scale<T>(const ScaleArgs&, bool, cudaStream_t);

}  // namespace tigon::cross_entropy
