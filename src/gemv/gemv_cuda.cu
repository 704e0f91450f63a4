// GEMV CUDA path: the plan (CUDA cores or tensor cores, rows of x per block, K split over a cluster, tile), dtype and
// vector-width dispatch. The kernel launches as a programmatic dependent of the kernel before it: in a decode step,
// where one small GEMV follows another, each starts its weight stream while the one ahead finishes
// (docs/performance/decode.md).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "gemv/gemv.h"
#include "gemv/gemv_kernels.cuh"

namespace tigon::gemv {
namespace {

using kern::kBlockRows;
using kern::kKAlign;
using kern::kWarps;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The launch shape, from M, N, K, the dtype and the multiprocessor count alone.
struct Plan {
  int mt = 1;              // rows of x per block: a power of two up to 16
  int64_t row_chunks = 1;  // blocks along z (in launches of at most kMaxGridZ)
  int64_t k_split = 0;     // elements of K per split
  int64_t splits = 1;
  int tile_k = 0;  // elements of K staged in shared memory at a time
};

// Resident warps wanted per multiprocessor: with 8 loads of 16 bytes in flight per lane, 48 warps keep ~190 KB in
// flight per multiprocessor, several times what its share of the memory bandwidth needs across the load latency.
constexpr int64_t kTargetWarpsPerSm = 48;
// Each split keeps at least two steps of the warp's 512-byte stride per lane (bf16: 512 elements).
constexpr int64_t kMinSplitK = 512;
// The splits of K of one tile form a thread block cluster: at most 8 blocks, the portable cluster size.
constexpr int64_t kMaxSplits = 8;
constexpr int64_t kMaxGridZ = 65535;

// tiles: blocks of kBlockRows rows of W (of all parts) along x.
Plan make_plan(int64_t M, int64_t tiles, int64_t K, DType dtype, int sms) {
  Plan p;
  while (p.mt < kern::kMaxRowsX && p.mt < M) p.mt *= 2;
  p.row_chunks = ceil_div(M, p.mt);
  const int64_t warps = tiles * kWarps * p.row_chunks;
  const int64_t target = kTargetWarpsPerSm * sms;
  if (warps < target) p.splits = std::min({ceil_div(target, warps), std::max<int64_t>(1, K / kMinSplitK), kMaxSplits});
  p.k_split = round_up(ceil_div(K, p.splits), kKAlign);
  p.splits = ceil_div(K, p.k_split);
  const int64_t tile_max = kern::kTileBytes / (p.mt * dtype_bytes(dtype)) / kKAlign * kKAlign;
  p.tile_k = int(std::min(p.k_split, tile_max));
  return p;
}

bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
}

// Launches kernel over the plan's grid (blocks of rows of W along x, splits of K as clusters along y, chunks of MT
// rows of x along z, in launches of at most kMaxGridZ chunks).
template <int MT>
void launch_chunks(const kern::Args& base, const Plan& p, size_t smem, cudaStream_t stream,
                   void (*kernel)(const kern::Args)) {
  for (int64_t z0 = 0; z0 < p.row_chunks; z0 += kMaxGridZ) {
    kern::Args a = base;
    a.m0 = z0 * MT;
    const dim3 grid(unsigned(a.tile_first[a.parts]), unsigned(p.splits),
                    unsigned(std::min(kMaxGridZ, p.row_chunks - z0)));
    const dim3 cluster = p.splits > 1 ? dim3(1, unsigned(p.splits), 1) : dim3(0, 0, 0);
    cuda::launch_pdl(grid, dim3(kern::kThreads), smem, stream, cluster, kernel, a);
  }
}

template <class T, int MT, int V, class W>
void launch_rows(const kern::Args& base, const Plan& p, cudaStream_t stream) {
  launch_chunks<MT>(base, p, size_t(MT) * p.tile_k * sizeof(T), stream, kern::gemv<T, MT, V, W>);
}

template <class T, int V, class W>
void launch_mt(const kern::Args& a, const Plan& p, cudaStream_t stream) {
  switch (p.mt) {
    case 1: return launch_rows<T, 1, V, W>(a, p, stream);
    case 2: return launch_rows<T, 2, V, W>(a, p, stream);
    case 4: return launch_rows<T, 4, V, W>(a, p, stream);
    case 8: return launch_rows<T, 8, V, W>(a, p, stream);
    default: return launch_rows<T, 16, V, W>(a, p, stream);
  }
}

// block_rows: rows of W per block of the kernel that runs (kBlockRows, or kMmaBlockRows on tensor cores).
kern::Args make_args(const Problem& pr, const Plan& p, int64_t block_rows) {
  static_assert(kern::kMaxParts == kMaxParts);
  kern::Args a{};
  a.x = pr.x.data;
  a.y = pr.y.data;
  a.w_scale = pr.w_scale;
  a.M = pr.x.rows;
  a.K = pr.x.cols;
  a.x_stride = pr.x.row_stride;
  a.y_stride = pr.y.row_stride;
  a.parts = pr.parts;
  for (int i = 0; i < pr.parts; ++i) {
    a.w[i] = pr.w[i].data;
    a.bias[i] = pr.bias[i];
    a.w_stride[i] = pr.w[i].row_stride;
    a.rows[i] = pr.w[i].rows;
    a.y_first[i] = i == 0 ? 0 : a.y_first[i - 1] + a.rows[i - 1];
    a.tile_first[i + 1] = a.tile_first[i] + ceil_div(pr.w[i].rows, block_rows);
  }
  a.k_split = p.k_split;
  a.tile_k = p.tile_k;
  return a;
}

int64_t tiles_of(const Problem& pr, int64_t block_rows) {
  int64_t tiles = 0;
  for (int i = 0; i < pr.parts; ++i) tiles += ceil_div(pr.w[i].rows, block_rows);
  return tiles;
}

// Tensor cores: MT (8 or 16) rows of x per block, rows of x staged with kMmaPad extra elements.
template <class T, int MT>
void launch_mma_rows(const kern::Args& base, const Plan& p, cudaStream_t stream) {
  launch_chunks<MT>(base, p, size_t(MT) * (p.tile_k + kern::kMmaPad) * sizeof(T), stream, kern::gemv_mma<T, MT>);
}

// Whether every row of x and W starts on 16 bytes and holds whole 16-byte vectors (the vector kernels' loads).
bool vectorizable(const Problem& pr, int elems_per_load) {
  bool vec = pr.x.cols % elems_per_load == 0 && rows_aligned(pr.x);
  for (int i = 0; i < pr.parts; ++i) vec = vec && rows_aligned(pr.w[i]);
  return vec;
}

// W: the weight's element type, T or int8_t (then pr.w_scale holds a scale per row of W).
template <class T, class W>
void launch(const Problem& pr, const Plan& p, cudaStream_t stream) {
  const kern::Args a = make_args(pr, p, kBlockRows);
  constexpr int V = 16 / sizeof(W);  // elements of W per 16-byte load (x: 16 / sizeof(T) per load, V per W load)
  if (vectorizable(pr, V))
    launch_mt<T, V, W>(a, p, stream);
  else
    launch_mt<T, 1, W>(a, p, stream);
}

// From this many rows of x the tensor-core kernel runs (16-bit x and W with 16-byte rows): the CUDA cores' M FMAs per
// weight element start to bound the CUDA-core kernel there.
constexpr int64_t kMmaMinRows = 5;

bool uses_mma(const Problem& pr) {
  return pr.x.rows >= kMmaMinRows && pr.x.dtype != DType::kFloat32 && pr.w[0].dtype == pr.x.dtype &&
         vectorizable(pr, 8);
}

template <class T>
void launch_mma(const Problem& pr, int sms, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    fail(TIGON_ERROR_INTERNAL, "gemv: the tensor-core kernel takes 16-bit types");
  } else {
    const Plan p = make_plan(pr.x.rows, tiles_of(pr, kern::kMmaBlockRows), pr.x.cols, pr.x.dtype, sms);
    const kern::Args a = make_args(pr, p, kern::kMmaBlockRows);
    if (p.mt <= 8)
      launch_mma_rows<T, 8>(a, p, stream);
    else
      launch_mma_rows<T, 16>(a, p, stream);
  }
}

}  // namespace

// Split K meets in shared memory within a cluster: no workspace.
size_t cuda_workspace_bytes(int64_t, int64_t, int64_t, DType, int) { return 0; }

void run_cuda(const Problem& pr, void*, size_t, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  const int sms = sm_count(device);
  if (uses_mma(pr)) {
    TIGON_SWITCH_FLOAT(pr.x.dtype, T, launch_mma<T>(pr, sms, stream));
    return;
  }
  const Plan p = make_plan(pr.x.rows, tiles_of(pr, kBlockRows), pr.x.cols, pr.x.dtype, sms);
  if (pr.w[0].dtype == DType::kInt8) {
    TIGON_SWITCH_FLOAT(pr.x.dtype, T, launch<T, int8_t>(pr, p, stream));
  } else {
    TIGON_SWITCH_FLOAT(pr.x.dtype, T, launch<T, T>(pr, p, stream));
  }
}

}  // namespace tigon::gemv
