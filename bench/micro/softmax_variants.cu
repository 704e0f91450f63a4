// Softmax over rows held in registers, bf16 16384 x 4096 (a row per block), in variants of the shipped kernels'
// structure (src/softmax/), and the library's own entry points in the same harness: what closes the distance to the
// copy rate. Each forward writes y, each backward dx; the outputs are compared with the first row's. Diagnostic only.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iinclude -o build/softmax_variants bench/micro/softmax_variants.cu \
//     -Lbuild -ltigon -Xlinker -rpath=build
//   build/softmax_variants [rows cols]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "micro_util.cuh"
#include "tigon/softmax.h"

namespace {

using T = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    v[2 * j] = f.x, v[2 * j + 1] = f.y;
  }
}
__device__ __forceinline__ void store8(T* p, const float (&v)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Sum or max over the block's threads (one row per block, blockDim.x a multiple of 32, at most 1024).
template <bool Max>
__device__ __forceinline__ float block_reduce(float v, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, w) : v + w;
  }
  const int warps = blockDim.x / 32;
  if (warps == 1) return v;
  __syncthreads();  // the previous call's readers are done
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < warps ? smem[threadIdx.x & 31] : (Max ? -INFINITY : 0.f);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, w) : v + w;
  }
  return v;
}

// (max, sum of exp(x - max)) pairs merged in one reduction.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  s = (m == -INFINITY ? 0.f : s * ex2((m - mm) * kLog2e)) + (m2 == -INFINITY ? 0.f : s2 * ex2((m2 - mm) * kLog2e));
  m = mm;
}
__device__ __forceinline__ void block_online(float& m, float& s, float2* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int warps = blockDim.x / 32;
  if (warps == 1) return;
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x / 32] = make_float2(m, s);
  __syncthreads();
  const bool live = (threadIdx.x & 31) < warps;
  m = live ? smem[threadIdx.x & 31].x : -INFINITY;
  s = live ? smem[threadIdx.x & 31].y : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

struct Args {
  const T *a, *b;
  T* out;
  int rows, cols;
};

// Forward: NV vectors of 8 per thread, blockDim.x = cols / (8 NV); Fast: ex2.approx in place of expf; Online: one
// (max, sum) reduction; rows walked by grid stride (a grid smaller than rows: persistent blocks).
template <int NV, bool Fast, bool Online>
__global__ void fwd(const Args a) {
  __shared__ float smem[64];
  for (int row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = a.a + size_t(row) * a.cols;
    float v[NV][8];
#pragma unroll
    for (int i = 0; i < NV; ++i) load8(x + (threadIdx.x + i * blockDim.x) * 8, v[i]);
    float m = -INFINITY, s = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) m = fmaxf(m, v[i][j]);
    if constexpr (Online) {
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) s += ex2((v[i][j] - m) * kLog2e);
      __syncthreads();
      block_online(m, s, reinterpret_cast<float2*>(smem));
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i][j] = ex2((v[i][j] - m) * kLog2e);
    } else {
      m = block_reduce<true>(m, smem);
      const float ml = m * kLog2e;
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) s += (v[i][j] = Fast ? ex2(fmaf(v[i][j], kLog2e, -ml)) : expf(v[i][j] - m));
      s = block_reduce<false>(s, smem + 32);
    }
    const float inv = 1.f / s;
    T* y = a.out + size_t(row) * a.cols;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[i][j] *= inv;
      store8(y + (threadIdx.x + i * blockDim.x) * 8, v[i]);
    }
  }
}

template <int NV>
__global__ void bwd(const Args a) {
  __shared__ float smem[32];
  for (int row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const size_t off = size_t(row) * a.cols;
    float y[NV][8], g[NV][8], dot = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      load8(a.a + off + (threadIdx.x + i * blockDim.x) * 8, y[i]);
      load8(a.b + off + (threadIdx.x + i * blockDim.x) * 8, g[i]);
    }
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) dot = fmaf(y[i][j], g[i][j], dot);
    dot = block_reduce<false>(dot, smem);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) y[i][j] *= g[i][j] - dot;
      store8(a.out + off + (threadIdx.x + i * blockDim.x) * 8, y[i]);
    }
  }
}

__global__ void copy(const uint4* in, uint4* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

// The library's entry points with the kernels' signature: x / y in a, dy in b, y / dx in out.
tigon_tensor matrix(const T* p, const int64_t* shape) {
  return tigon_tensor{const_cast<T*>(p), {2, 0}, 2, {TIGON_DTYPE_CODE_BFLOAT, 16, 1}, shape, nullptr, 0};
}
void library_check(tigon_status_t s) {
  if (s != TIGON_SUCCESS) {
    std::fprintf(stderr, "tigon: %s\n", tigon_last_error());
    std::exit(1);
  }
}

// Each call gets its own input and output copy (kCopies, rotated) so L2 holds none of them.
constexpr int kCopies = 4;
struct Bufs {
  T *a[kCopies], *b[kCopies], *out[kCopies];
};

template <class K>
auto kernel(K k, dim3 grid, dim3 block) {
  return [=](const Args& a) { k<<<grid, block>>>(a); };
}

template <class Launch>
void report(const char* name, Launch launch, const Bufs& B, int rows, int cols, double bytes, double copy_us,
            std::vector<float>* ref) {
  int c = 0;
  const float us = time_us([&] {
    launch(Args{B.a[c], B.b[c], B.out[c], rows, cols});
    c = (c + 1) % kCopies;
  });
  launch(Args{B.a[0], B.b[0], B.out[0], rows, cols});
  CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = read_floats(B.out[0], size_t(rows) * cols);
  float err = 0.f;
  if (ref->empty())
    *ref = y;
  else
    for (size_t i = 0; i < y.size(); ++i) err = std::fmax(err, std::fabs(y[i] - (*ref)[i]));
  std::printf("  %-34s %7.1f us  %6.0f GB/s  %3.0f%% of copy  max diff %.1e\n", name, us, bytes / us * 1e-3,
              100.0 * copy_us / us * bytes / (2.0 * size_t(rows) * cols * sizeof(T)), err);
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 2 ? std::atoi(argv[1]) : 16384, cols = argc > 2 ? std::atoi(argv[2]) : 4096;
  if (cols % 1024 != 0) {
    std::fprintf(stderr, "cols must be a multiple of 1024\n");
    return 1;
  }
  const size_t n = size_t(rows) * cols;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<T> ha(n), hb(n);
  for (auto& v : ha) v = __float2bfloat16(nd(rng));
  for (auto& v : hb) v = __float2bfloat16(nd(rng) * 0.01f);
  Bufs B{};
  for (int c = 0; c < kCopies; ++c) {  // the same values in each copy: only their addresses must differ
    CHECK(cudaMalloc(&B.a[c], n * sizeof(T)));
    CHECK(cudaMalloc(&B.b[c], n * sizeof(T)));
    CHECK(cudaMalloc(&B.out[c], n * sizeof(T)));
    CHECK(cudaMemcpy(B.a[c], ha.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(B.b[c], hb.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int k = 0;
  const float copy_us = time_us([&] {
    copy<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(B.a[k]), reinterpret_cast<uint4*>(B.out[k]), n / 8);
    k = (k + 1) % kCopies;
  });
  std::printf("softmax bf16 %d x %d: copy of x %.1f us (%.0f GB/s read + write)\n", rows, cols, copy_us,
              2.0 * n * sizeof(T) / copy_us * 1e-3);
  const double fb = 2.0 * n * sizeof(T), bb = 3.0 * n * sizeof(T);
  const int v8 = cols / 8;
  std::vector<float> ref;
  std::printf("forward (floor: one copy)\n");
  const int64_t shape[2] = {rows, cols};
  const auto lib_fwd = [&](const Args& a) {
    const tigon_tensor x = matrix(a.a, shape), y = matrix(a.out, shape);
    library_check(tigon_softmax_fwd(&x, &y, nullptr));
  };
  const auto lib_bwd = [&](const Args& a) {
    const tigon_tensor y = matrix(a.a, shape), dy = matrix(a.b, shape), dx = matrix(a.out, shape);
    library_check(tigon_softmax_bwd(&dy, &y, &dx, nullptr));
  };
  report("nv4 expf (shipped structure)", kernel(fwd<4, false, false>, rows, v8 / 4), B, rows, cols, fb, copy_us, &ref);
  report("library tigon_softmax_fwd", lib_fwd, B, rows, cols, fb, copy_us, &ref);
  report("nv4 ex2.approx", kernel(fwd<4, true, false>, rows, v8 / 4), B, rows, cols, fb, copy_us, &ref);
  report("nv4 ex2.approx, one online reduction", kernel(fwd<4, true, true>, rows, v8 / 4), B, rows, cols, fb, copy_us,
         &ref);
  report("nv2 ex2.approx", kernel(fwd<2, true, false>, rows, v8 / 2), B, rows, cols, fb, copy_us, &ref);
  report("nv8 ex2.approx", kernel(fwd<8, true, false>, rows, v8 / 8), B, rows, cols, fb, copy_us, &ref);
  report("nv4 expf, persistent 16/SM", kernel(fwd<4, false, false>, sms * 16, v8 / 4), B, rows, cols, fb, copy_us,
         &ref);
  report("nv4 ex2.approx, persistent 16/SM", kernel(fwd<4, true, false>, sms * 16, v8 / 4), B, rows, cols, fb, copy_us,
         &ref);
  ref.clear();
  std::printf("backward (floor: 1.5 copies)\n");
  report("nv4 (shipped structure)", kernel(bwd<4>, rows, v8 / 4), B, rows, cols, bb, copy_us, &ref);
  report("library tigon_softmax_bwd", lib_bwd, B, rows, cols, bb, copy_us, &ref);
  report("nv2", kernel(bwd<2>, rows, v8 / 2), B, rows, cols, bb, copy_us, &ref);
  report("nv8", kernel(bwd<8>, rows, v8 / 8), B, rows, cols, bb, copy_us, &ref);
  report("nv4 persistent 16/SM", kernel(bwd<4>, sms * 16, v8 / 4), B, rows, cols, bb, copy_us, &ref);
  report("nv2 persistent 8/SM", kernel(bwd<2>, sms * 8, v8 / 2), B, rows, cols, bb, copy_us, &ref);
  return 0;
}
