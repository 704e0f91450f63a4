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
#include "gemv/gemv_plan.cuh"

namespace tigon::gemv {
namespace {

using kern::kBlockRows;

bool rows_aligned(const RowMatrix& m) {
  return cuda::aligned16(m.data) && (m.rows <= 1 || (m.row_stride * dtype_bytes(m.dtype)) % 16 == 0);
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
template <class T, int MT, class W>
void launch_mma_rows(const kern::Args& base, const Plan& p, cudaStream_t stream) {
  launch_chunks<MT>(base, p, size_t(MT) * (p.tile_k + kern::kMmaPad) * sizeof(T), stream, kern::gemv_mma<T, MT, W>);
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

// From this many rows of x the tensor-core kernel runs (16-bit x, 16-byte rows): with 16-bit W the CUDA cores' M FMAs
// per weight element start to bound the CUDA-core kernel there; with int8 W that kernel reads x element by element
// from 3 rows (registers), 5x the bf16 GEMV's time at 8 rows.
constexpr int64_t kMmaMinRows = 5, kMmaMinRowsInt8 = 3;

bool uses_mma(const Problem& pr) {
  if (pr.x.dtype == DType::kFloat32) return false;
  if (pr.w[0].dtype == DType::kInt8) return pr.x.rows >= kMmaMinRowsInt8 && vectorizable(pr, 16);
  return pr.x.rows >= kMmaMinRows && pr.w[0].dtype == pr.x.dtype && vectorizable(pr, 8);
}

template <class T, class W>
void launch_mma(const Problem& pr, int sms, cudaStream_t stream) {
  const Plan p = make_plan(pr.x.rows, tiles_of(pr, kern::kMmaBlockRows), pr.x.cols, pr.x.dtype, sms);
  const kern::Args a = make_args(pr, p, kern::kMmaBlockRows);
  if (p.mt <= 8)
    launch_mma_rows<T, 8, W>(a, p, stream);
  else
    launch_mma_rows<T, 16, W>(a, p, stream);
}

template <class T>
void launch_mma_w(const Problem& pr, int sms, cudaStream_t stream) {
  if (pr.w[0].dtype == DType::kInt8)
    launch_mma<T, int8_t>(pr, sms, stream);
  else
    launch_mma<T, T>(pr, sms, stream);
}

}  // namespace

// Split K meets in shared memory within a cluster: no workspace.
size_t cuda_workspace_bytes(int64_t, int64_t, int64_t, DType, int) { return 0; }

void run_cuda(const Problem& pr, void*, size_t, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  const int sms = sm_count(device);
  if (uses_mma(pr)) {  // bf16 or fp16 x
    if (pr.x.dtype == DType::kBFloat16)
      launch_mma_w<__nv_bfloat16>(pr, sms, stream);
    else
      launch_mma_w<__half>(pr, sms, stream);
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
