// RMSNorm forward, bf16, 8192 rows of 4096 to 24576 columns: the shipped cached kernel as planned (4 vectors of 8
// elements a thread, a row per block past 1024 columns) against the same kernel with 2 vectors a thread (a row over
// twice the threads), the uncached kernel, one block a row that first prefetches a later row into L2 with the
// bulk-copy engine (bytes in flight across the reductions, at no register cost), and a row split over a thread block
// cluster of 2 or 4 blocks that exchange their sums of squares through distributed shared memory (on an H100 the
// cluster lost at every length: docs/performance/load-order.md). What the H200's long rows need. Diagnostic only.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/rms_norm_rows bench/micro/rms_norm_rows.cu
//   build/rms_norm_rows [rows]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cooperative_groups.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_util.cuh"
#include "rms_norm/rms_norm_kernels.cuh"

namespace {

using T = __nv_bfloat16;
constexpr int V = 8;

__global__ void fill(T* p, int64_t n, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(scale * __sinf(float(i % 1000003) * 0.37f));
}

// A row over C blocks (a thread block cluster when C > 1), 4 vectors a thread, each block a C-th of the row (cols a
// multiple of 32 * V * C). ahead > 0: each row's first thread first asks the bulk-copy engine to fetch row `ahead`
// rows further into L2 (cp.async.bulk.prefetch: no registers, nothing to wait for), for the block that will take
// that row once a resident one finishes: more bytes in flight across the reductions.
template <int C>
__global__ void __launch_bounds__(1024) fwd_variant(tigon::rms_norm::FwdArgs a, int64_t ahead) {
  namespace rk = tigon::rms_norm::kern;
  constexpr int NV = 4;
  __shared__ float red[32];
  __shared__ float part[C];
  int rank = 0;
  if constexpr (C > 1) rank = int(cooperative_groups::this_cluster().block_rank());
  const int64_t row = blockIdx.x / C, seg = a.cols / C, c0 = rank * seg;
  const T* x = static_cast<const T*>(a.x) + row * a.x_stride + c0;
  if (ahead > 0 && threadIdx.x == 0 && row + ahead < a.rows) {
    const T* next = x + ahead * a.x_stride;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(next), "r"(uint32_t(seg * sizeof(T))) : "memory");
  }
  tigon::cuda::Packed<T, V> v[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
    if (c < seg)
      v[i].load(x + c);
    else
      v[i].zero();
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) ss += v[i][j] * v[i][j];
  ss = tigon::cuda::row_sum(ss, red);
  if constexpr (C > 1) {
    auto cluster = cooperative_groups::this_cluster();
    if (threadIdx.x < C) *cluster.map_shared_rank(&part[rank], int(threadIdx.x)) = ss;
    cluster.sync();  // every block's sum in every block; nobody reads a peer's memory after this
    ss = 0.f;
#pragma unroll
    for (int k = 0; k < C; ++k) ss += part[k];
  }
  const float r = rk::rstd_of(ss, a.cols, a.eps);
  if (rank == 0 && threadIdx.x == 0) a.rstd[row] = r;
  T* y = static_cast<T*>(a.y) + row * a.y_stride + c0;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t c = (int64_t(i) * blockDim.x + threadIdx.x) * V;
    if (c < seg) {
      float xf[V], s[V], out[V];
#pragma unroll
      for (int j = 0; j < V; ++j) xf[j] = v[i][j];
      rk::load_scale<T, V>(a.w, c0 + c, a.offset, s);
      rk::normalize<T, V>(a.mode, r, xf, s, out);
      tigon::cuda::store_vec<T, V>(y + c, out);
    }
  }
}

// Launches kernel over `grid` blocks, as clusters of c along x when c > 1.
template <class Kernel>
void launch(Kernel kernel, unsigned grid, unsigned block, unsigned c, const tigon::rms_norm::FwdArgs& a,
            int64_t ahead) {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  cfg.gridDim = dim3(grid), cfg.blockDim = dim3(block);
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = c, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.attrs = &attr, cfg.numAttrs = c > 1 ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, a, ahead));
}

// Threads per row and rows per block as the library plans a cached kernel with nv vectors a thread.
dim3 cached_block(int64_t cols, int nv) {
  const int64_t need = (cols / V + nv - 1) / nv;
  const int tpr = int((need + 31) / 32 * 32);
  return dim3(tpr, tpr < 128 ? 128 / tpr : 1);
}

}  // namespace

int main(int argc, char** argv) {
  namespace rk = tigon::rms_norm::kern;
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t max_cols = 24576;
  T *x, *y, *w;
  float* rstd;
  CHECK(cudaMalloc(&x, rows * max_cols * sizeof(T)));
  CHECK(cudaMalloc(&y, rows * max_cols * sizeof(T)));
  CHECK(cudaMalloc(&w, max_cols * sizeof(T)));
  CHECK(cudaMalloc(&rstd, rows * sizeof(float)));
  fill<<<1024, 256>>>(x, rows * max_cols, 1.f);
  fill<<<64, 256>>>(w, max_cols, 0.5f);
  std::printf("rms_norm fwd %lld rows, bf16, weight, rstd saved: median us, %% of the copy's rate\n", (long long)rows);
  for (int64_t cols : {4096, 8192, 12288, 16384, 24576}) {
    const double bytes = 2.0 * rows * cols * sizeof(T);
    const float copy =
        time_us([&] { CHECK(cudaMemcpyAsync(y, x, rows * cols * sizeof(T), cudaMemcpyDeviceToDevice)); });
    std::printf(" %lld columns: copy %.1f us (%.0f GB/s)\n", (long long)cols, copy, bytes / copy * 1e-3);
    auto report = [&](const char* what, dim3 block, float us) {
      std::printf("  %-34s block %4u x %u  %8.1f us  %5.1f%%\n", what, block.x, block.y, us, 100.f * copy / us);
    };
    tigon::rms_norm::FwdArgs a{x, w, y, rstd, rows, cols, cols, cols, 1e-6f, 0.f, TIGON_RMS_NORM_LLAMA};
    auto cached = [&](auto kernel, int nv, const char* what) {
      const dim3 block = cached_block(cols, nv);
      if (block.x * block.y > 1024) return;
      const unsigned grid = unsigned((rows + block.y - 1) / block.y);
      report(what, block, time_us([&] { kernel<<<grid, block>>>(a); }));
    };
    cached(rk::fwd_cached<T, T, T, 4, false>, 4, "cached, 4 vectors (shipped)");
    const std::vector<float> ref = read_floats(y, 64 * cols);
    cached(rk::fwd_cached<T, T, T, 2, false>, 2, "cached, 2 vectors");
    const dim3 ub(unsigned(std::min<int64_t>(std::max<int64_t>((cols / V / 4 + 31) / 32 * 32, 32), 1024)));
    // A row over c blocks, optionally prefetching `ahead` rows further, checked against the shipped kernel's output
    // over the first 64 rows (the sums' order differs across blocks: a unit apart at most, rarely).
    auto variant = [&](auto kernel, int c, int64_t ahead, const char* what) {
      const dim3 block(unsigned(cols / c / V / 4));
      if (cols % (32 * V * c) != 0 || block.x > 1024) return;
      report(what, block, time_us([&] { launch(kernel, unsigned(rows * c), block.x, c, a, ahead); }));
      const std::vector<float> got = read_floats(y, 64 * cols);
      float worst = 0.f;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
      std::printf("  %-34s largest difference from shipped over 64 rows: %g\n", "", worst);
    };
    // Blocks resident at once for a one-block row (54 registers: 1152 threads an SM): the rows in progress.
    const int64_t resident = int64_t(device_sms()) * std::max<int64_t>(1, 1152 / (cols / V / 4));
    variant(fwd_variant<1>, 1, resident, "one block, L2 prefetch a wave ahead");
    variant(fwd_variant<1>, 1, 2 * resident, "one block, prefetch two waves ahead");
    variant(fwd_variant<2>, 2, 0, "cluster of 2 blocks a row");
    variant(fwd_variant<4>, 4, 0, "cluster of 4 blocks a row");
    report("uncached", ub, time_us([&] { rk::fwd_uncached<T, T, T, V, false><<<unsigned(rows), ub>>>(a); }));
  }
  return 0;
}
