// Where the cross entropy row kernel's time goes: its skeleton (a row over a cluster of blocks, each slice bulk-copied
// into shared memory in pieces, then written back from shared memory with 16-byte stores, in place) with the pieces
// of real work switched on one at a time, against an in-place streaming kernel on the same buffer. Diagnostic only,
// not part of the library: bf16 8192 x 128256 (2.1 GB, far past L2), in place, CUDA events, median of 15.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Isrc -Iinclude -o build/ce_stream bench/micro/ce_stream.cu -Lbuild -ltigon
//   LD_LIBRARY_PATH=build build/ce_stream [rows cols [library variant ...]]
// With variants named (tigon_testing_cross_entropy_kernel's names), only the library's forward (gradient over the
// logits, MEAN) runs, each variant on the same buffer, with every 17th row ignored and with none.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_util.cuh"
#include "common/async_copy.cuh"
#include "tigon/cross_entropy.h"

extern "C" tigon_status_t tigon_testing_cross_entropy_kernel(const char* name);

namespace {

namespace tc = tigon::cuda;

// What the skeleton does besides moving the bytes.
enum Flags : int {
  kTarget = 1,       // load the row's 8-byte target before issuing the copy (and branch on it), as the library does
  kTargetAfter = 2,  // load it after issuing the copy instead
  kExchange = 4,     // exchange one float per block through distributed shared memory (st.async + mbarrier)
  kStats = 8,        // one ex2 + FFMA + FADD per element as each piece lands
  kGrad = 16,        // one FFMA + ex2 per element before the store
  kOutOfPlace = 32,  // write to another buffer (y) instead of over the row
  kBulkStore = 64,   // write back with one bulk copy (shared -> global) per block instead of 16-byte stores
  kNoSync = 128,     // no cluster barrier (and no exchange): the blocks of a cluster independent once launched
};

constexpr int kMaxPieces = 16;

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int F>
__global__ void __launch_bounds__(128)
    skeleton(uint4* x, uint4* y, const int64_t* target, int64_t row_vecs, int64_t slice_vecs, int64_t piece_vecs) {
  extern __shared__ uint4 slice[];
  __shared__ uint64_t bars[kMaxPieces];
  __shared__ float4 slots[8];
  __shared__ float warp_sum[4];
  __shared__ uint64_t stat_bar;
  const auto cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank()), tid = int(threadIdx.x);
  const int64_t row = blockIdx.x / csize, v0 = rank * slice_vecs;
  const int64_t count = min(slice_vecs, row_vecs - v0);
  const int pieces = int((count + piece_vecs - 1) / piece_vecs);
  uint4* xr = x + row * row_vecs;
  uint4* yr = (F & kOutOfPlace ? y : x) + row * row_vecs;
  int64_t t = 0;
  if (F & kTarget) {
    t = target[row];
    if (t == -100) return;  // never, on this input; the branch is what costs
  }
  if (tid == 0) {
    for (int p = 0; p < pieces; ++p) tc::mbar_init(&bars[p], 1);
    tc::mbar_init(&stat_bar, 1);
    tc::mbar_init_fence();
    tc::mbar_arrive_expect_tx(&stat_bar, 16 * uint32_t(csize));
    for (int p = 0; p < pieces; ++p) {
      const int64_t first = p * piece_vecs;
      const uint32_t bytes = uint32_t(min(piece_vecs, count - first) * 16);
      tc::mbar_arrive_expect_tx(&bars[p], bytes);
      tc::bulk_copy_g2s(slice + first, xr + v0 + first, bytes, &bars[p], tc::l2_evict_first());
    }
  }
  if (!(F & kNoSync)) __cluster_barrier_arrive_relaxed();
  __syncthreads();
  if (F & kTargetAfter) {
    t = target[row];
    if (t == -100) return;
  }
  float s = 0.f;
  for (int p = 0; p < pieces; ++p) {
    tc::mbar_wait(&bars[p], 0);
    if (F & kStats) {
      const int64_t end = min(count, (p + 1) * piece_vecs);
      for (int64_t k = p * piece_vecs + tid; k < end; k += blockDim.x) {
        const uint4 v = slice[k];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s += ex2(__uint_as_float(w[j] << 16) * 1.4427f - 3.f);
          s += ex2(__uint_as_float(w[j] & 0xffff0000u) * 1.4427f - 3.f);
        }
      }
    }
  }
  if (F & kStats) {  // a block sum, as the library's merge
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(~0u, s, o);
    if (tid % 32 == 0) warp_sum[tid / 32] = s;
    __syncthreads();
    s = warp_sum[0] + warp_sum[1] + warp_sum[2] + warp_sum[3];
  }
  if (!(F & kNoSync)) __cluster_barrier_wait();
  if ((F & kExchange) && !(F & kNoSync)) {
    if (tid < csize)
      tc::st_async_v4(tc::cluster_addr(&slots[rank], uint32_t(tid)), __float_as_uint(s), 0, 0, 0,
                      tc::cluster_addr(&stat_bar, uint32_t(tid)));
    tc::mbar_wait(&stat_bar, 0);
    s = slots[0].x + float(t);
  }
  const float m = s * 1e-30f;  // 0 in practice, but not known to the compiler
  if constexpr ((F & kBulkStore) != 0) {
    if (tid == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(yr + v0),
                   "r"(tc::smem_addr(slice)), "r"(uint32_t(count * 16))
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // before the buffer is given back
    }
  } else {
    for (int64_t k = tid; k < count; k += blockDim.x) {
      uint4 v = slice[k];
      if (F & kGrad) {
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float a = ex2(__uint_as_float(w[j] << 16) * 1.4427f - m);
          const float b = ex2(__uint_as_float(w[j] & 0xffff0000u) * 1.4427f - m);
          const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
          w[j] = *reinterpret_cast<const uint32_t*>(&h);
        }
        v = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
        v.x ^= __float_as_uint(m);
      }
      __stcg(yr + v0 + k, v);
    }
  }
}

__global__ void stream(const uint4* x, uint4* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint4 v = __ldcs(x + i);
    v.x ^= 1u;
    __stcs(y + i, v);
  }
}

// Better-fed streaming kernels, to find an SM kernel's ceiling: U independent 16-byte loads in flight per thread,
// either grid-stride (the whole grid sweeps the buffer together) or each block over contiguous chunks of `chunk`
// vectors.
template <int U>
__global__ void stream_unroll(const uint4* x, uint4* y, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += U * step) {
    uint4 v[U];
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * step < n) v[j] = __ldcs(x + i + j * step);
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * step < n) {
        v[j].x ^= 1u;
        __stcs(y + i + j * step, v[j]);
      }
  }
}

template <int U>
__global__ void stream_chunks(const uint4* x, uint4* y, int64_t n, int64_t chunk) {
  for (int64_t c0 = blockIdx.x * chunk; c0 < n; c0 += int64_t(gridDim.x) * chunk) {
    const int64_t end = min(n, c0 + chunk);
    for (int64_t i = c0 + threadIdx.x; i < end; i += U * blockDim.x) {
      uint4 v[U];
#pragma unroll
      for (int j = 0; j < U; ++j)
        if (i + j * blockDim.x < end) v[j] = __ldcs(x + i + j * blockDim.x);
#pragma unroll
      for (int j = 0; j < U; ++j)
        if (i + j * blockDim.x < end) {
          v[j].x ^= 1u;
          __stcs(y + i + j * blockDim.x, v[j]);
        }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192, cols = argc > 2 ? std::atoll(argv[2]) : 128256;
  const int64_t row_vecs = cols / 8, nvec = rows * row_vecs;
  const double bytes = 2.0 * double(nvec) * 16;
  uint4* x = nullptr;
  int64_t* target = nullptr;
  uint4* y = nullptr;
  CHECK(cudaMalloc(&x, nvec * 16));
  CHECK(cudaMalloc(&y, nvec * 16));
  CHECK(cudaMalloc(&target, rows * 8));
  CHECK(cudaMemset(x, 0x3c, nvec * 16));
  {
    std::vector<int64_t> t(rows);
    for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7919) % cols;
    CHECK(cudaMemcpy(target, t.data(), rows * 8, cudaMemcpyHostToDevice));
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const auto report = [&](const char* name, float us) {
    std::printf("%-40s %8.1f us %7.0f GB/s\n", name, us, bytes / (us * 1e-6) / 1e9);
  };

  // The references: device-to-device copies (1 GiB, as the benchmark's copy rate, and the whole buffer), and a
  // streaming kernel over the whole buffer, in place and out of place.
  for (const size_t n : {std::min(size_t(1) << 30, size_t(nvec) * 16), size_t(nvec) * 16}) {
    const float us = time_us([&] { CHECK(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice)); });
    std::printf("%-40s %8.1f us %7.0f GB/s (%zu MB)\n", "memcpy d2d", us, 2.0 * n / (us * 1e-6) / 1e9, n >> 20);
  }
  for (int per_sm : {8, 16}) {
    char name[64];
    std::snprintf(name, sizeof name, "stream in place (%d x 256 / SM)", per_sm);
    report(name, time_us([&] { stream<<<sms * per_sm, 256>>>(x, x, nvec); }));
    std::snprintf(name, sizeof name, "stream out of place (%d x 256 / SM)", per_sm);
    report(name, time_us([&] { stream<<<sms * per_sm, 256>>>(x, y, nvec); }));
  }
  for (int per_sm : {4, 8}) {
    for (int inplace : {1, 0}) {
      uint4* out = inplace ? x : y;
      char name[80];
      std::snprintf(name, sizeof name, "unroll4 %s (%d x 256 / SM)", inplace ? "in place" : "out of place", per_sm);
      report(name, time_us([&] { stream_unroll<4><<<sms * per_sm, 256>>>(x, out, nvec); }));
      std::snprintf(name, sizeof name, "unroll8 %s (%d x 256 / SM)", inplace ? "in place" : "out of place", per_sm);
      report(name, time_us([&] { stream_unroll<8><<<sms * per_sm, 256>>>(x, out, nvec); }));
      for (int64_t chunk : {1024, 4096}) {
        std::snprintf(name, sizeof name, "chunks %lld x4 %s (%d x 256 / SM)", (long long)chunk,
                      inplace ? "in place" : "out of place", per_sm);
        report(name, time_us([&] { stream_chunks<4><<<sms * per_sm, 256>>>(x, out, nvec, chunk); }));
      }
    }
  }
  if (argc > 3) {  // the library's row kernel variants on the same buffer
    size_t ws_bytes = 0;
    const int64_t shape[2] = {rows, cols};
    const tigon_device dev{TIGON_DEVICE_CUDA, 0};
    const tigon_tensor logits{x, dev, 2, {TIGON_DTYPE_CODE_BFLOAT, 16, 1}, shape, nullptr, 0};
    const tigon_tensor tgt{target, dev, 1, {TIGON_DTYPE_CODE_INT, 64, 1}, shape, nullptr, 0};
    float* loss = nullptr;
    void* ws = nullptr;
    CHECK(cudaMalloc(&loss, 4));
    const int64_t one = 1;
    const tigon_tensor loss_t{loss, dev, 1, {TIGON_DTYPE_CODE_FLOAT, 32, 1}, &one, nullptr, 0};
    if (tigon_cross_entropy_fwd_workspace_size(&logits, &ws_bytes) != TIGON_SUCCESS) return 1;
    CHECK(cudaMalloc(&ws, ws_bytes));
    const tigon_cross_entropy_params params{-100, 0.f, 0.f, 0.f, TIGON_REDUCTION_MEAN};
    std::vector<int64_t> t(rows);
    for (int every : {17, 0}) {
      for (int64_t r = 0; r < rows; ++r) t[r] = every > 0 && r % every == 0 ? -100 : (r * 7919) % cols;
      CHECK(cudaMemcpy(target, t.data(), rows * 8, cudaMemcpyHostToDevice));
      for (int i = 3; i < argc; ++i) {
        if (tigon_testing_cross_entropy_kernel(argv[i]) != TIGON_SUCCESS) return 1;
        const float us = time_us([&] {
          if (tigon_cross_entropy_fwd(&logits, &tgt, nullptr, &loss_t, nullptr, nullptr, nullptr, &logits, params, ws,
                                      ws_bytes, nullptr) != TIGON_SUCCESS)
            std::exit(1);
        });
        char name[96];
        std::snprintf(name, sizeof name, "%s (ignore every %d)", argv[i], every);
        report(name, us);
      }
    }
    return 0;
  }
  using Kernel = void (*)(uint4*, uint4*, const int64_t*, int64_t, int64_t, int64_t);
  // Rows of row_vecs vectors over clusters of csize blocks (csize 1 and row_vecs = one block's slice: independent
  // blocks), as many rows as fit in the buffer.
  // align: slices a whole number of this many vectors (8: 128-byte lines; the last slice takes what is left).
  const auto skeleton_us = [&](const char* name, Kernel kernel, int csize, int64_t rvecs, int64_t align = 1) {
    const int64_t slice_vecs = ((rvecs + csize - 1) / csize + align - 1) / align * align, nrows = nvec / rvecs;
    const int64_t group = 128 * 4, pieces = std::min<int64_t>(kMaxPieces, (slice_vecs + group - 1) / group);
    const int64_t piece_vecs = ((slice_vecs + pieces - 1) / pieces + group - 1) / group * group;
    const size_t smem = size_t(slice_vecs) * 16;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(csize);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(nrows * csize));
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    const float us =
        time_us([&] { CHECK(cudaLaunchKernelEx(&cfg, kernel, x, y, target, rvecs, slice_vecs, piece_vecs)); });
    std::printf("%-40s c%d %6zu B x%4d resident %8.1f us %7.0f GB/s\n", name, csize, smem, clusters * csize, us,
                2.0 * double(nrows * rvecs) * 16 / (us * 1e-6) / 1e9);
  };

  struct Variant {
    const char* name;
    Kernel kernel;
  };
  const Variant full[] = {
      {"copy only", skeleton<0>},
      {"+ target first", skeleton<kTarget>},
      {"+ stats + grad + exchange", skeleton<kStats | kGrad | kExchange>},
      {"all (target first)", skeleton<kTarget | kStats | kGrad | kExchange>},
      {"copy only, out of place", skeleton<kOutOfPlace>},
      {"copy only, bulk store", skeleton<kBulkStore>},
      {"copy only, bulk store, out of place", skeleton<kBulkStore | kOutOfPlace>},
  };
  for (int csize : {7, 4}) {
    std::printf("-- rows of %lld: cluster %d\n", (long long)cols, csize);
    for (const Variant& v : full) skeleton_us(v.name, v.kernel, csize, row_vecs);
  }
  // Cluster sizes with the work on, the blocks of a cluster exchanging (as the library) or not (what the cluster
  // launch alone costs), slices 16-byte aligned or whole 128-byte lines.
  for (int csize = 3; csize <= 8; ++csize) {
    std::printf("-- cluster %d\n", csize);
    skeleton_us("all", skeleton<kTarget | kStats | kGrad | kExchange>, csize, row_vecs);
    skeleton_us("all, no sync", skeleton<kTarget | kStats | kGrad | kNoSync>, csize, row_vecs);
    skeleton_us("all, whole lines", skeleton<kTarget | kStats | kGrad | kExchange>, csize, row_vecs, 8);
    skeleton_us("copy only, whole lines", skeleton<0>, csize, row_vecs, 8);
  }
  const Variant lone[] = {
      {"copy only", skeleton<0>},
      {"copy only, out of place", skeleton<kOutOfPlace>},
      {"copy only, bulk store", skeleton<kBulkStore>},
      {"stats + grad", skeleton<kStats | kGrad>},
  };
  for (int64_t kb : {16, 24, 36, 48, 72, 110}) {
    std::printf("-- independent blocks of %lld KB\n", (long long)kb);
    for (const Variant& v : lone) skeleton_us(v.name, v.kernel, 1, kb * 1024 / 16);
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(target));
  return 0;
}
