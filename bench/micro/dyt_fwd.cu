// DyT's forward (y = gamma * tanh(alpha * x) + beta, bf16 x and y, fp32 gamma and beta) in several load plans and
// block shapes, against copies of x: what keeps its bytes in flight. Diagnostic only.
//
//   shipped    the library's plan: >= 8 rows a thread, 4 rows' loads written first, each under its own row test
//   pred       the same, the 4 loads predicated (load_vec_if) and tied together (load_together), so all issue first
//   pipe       pred, and the next 4 rows' loads issued before this 4's stores (a thread always has loads in flight)
//   one_row    one row a thread (every row its own thread: gamma and beta read per row, from L2)
//   one_r512   one row a thread, blocks of 512 threads (a 4096-column row is one block: Liger's widest shape)
//   one_r128   one row a thread, blocks of 128 threads
//   pred_8     pred with 8 rows' loads in flight
//
// Timed in steady state as the benchmark times ops (a CUDA graph of back-to-back calls, each on its own copy of the
// tensors), beside two copies: an SM kernel shaped like torch's elementwise copy (4 vectors a thread) and
// cudaMemcpyAsync.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/dyt_fwd bench/micro/dyt_fwd.cu
//   build/dyt_fwd
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/cuda_types.cuh"
#include "micro_util.cuh"

namespace {

using T = __nv_bfloat16;
constexpr int V = 8;

struct Args {
  const T* x;
  T* y;
  const float *alpha, *gamma, *beta;
  int64_t rows, cols;
};

__device__ __forceinline__ float tanh_sfu(float z) {
  return 1.f - 2.f * tigon::cuda::rcp_fast(1.f + tigon::cuda::exp2_fast(z * 2.8853900817779268f));
}

__device__ __forceinline__ void apply(float (&v)[V], const float (&g)[V], const float (&b)[V], float alpha) {
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = fmaf(g[j], tanh_sfu(alpha * v[j]), b[j]);
}

// Rows by grid stride over y; R rows' loads at a time. Pred: predicated loads tied together; Pipe: the next group's
// loads before this group's stores.
template <int R, bool Pred, bool Pipe>
__global__ void dyt_fwd(const Args a) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= a.cols) return;
  const float alpha = *a.alpha;
  float g[V], b[V];
  tigon::cuda::load_vec<float, V>(a.gamma + col, g);
  tigon::cuda::load_vec<float, V>(a.beta + col, b);
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  int64_t row0 = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  float x[R][V];
  const auto load = [&](int64_t base) {
    if constexpr (Pred) {
      uint4 u[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t row = base + r * step;
        u[r] = row < a.rows ? *reinterpret_cast<const uint4*>(a.x + row * a.cols + col) : uint4{};
      }
#pragma unroll
      for (int r = 1; r < R; ++r) tigon::cuda::load_together(u[0].x, u[r].x);
#pragma unroll
      for (int r = 0; r < R; ++r) tigon::cuda::unpack16<T>(u[r], x[r]);
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t row = base + r * step;
        if (row < a.rows) tigon::cuda::load_vec<T, V>(a.x + row * a.cols + col, x[r]);
      }
    }
  };
  if (row0 >= a.rows) return;
  load(row0);
  for (; row0 < a.rows; row0 += R * step) {
    float out[R][V];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[r][j] = x[r][j];
      apply(out[r], g, b, alpha);
    }
    if constexpr (Pipe) load(row0 + R * step);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r * step;
      if (row < a.rows) tigon::cuda::store_vec<T, V>(a.y + row * a.cols + col, out[r]);
    }
    if constexpr (!Pipe) load(row0 + R * step);
  }
}

// The library's launch shape: 256 threads, tx the power of two covering the row's vectors, rows_per_thread rows each.
// threads: the block size (256 in the library); tx the power of two covering the row's vectors up to it.
template <int R, bool Pred, bool Pipe>
void launch(const Args& a, int64_t rows_per_thread, cudaStream_t s, int threads = 256) {
  const int64_t units = a.cols / V;
  int tx = 1;
  while (tx < threads && tx < units) tx *= 2;
  const int ty = threads / tx;
  const dim3 block(tx, ty);
  const int64_t gy = std::max<int64_t>(1, (a.rows + ty * rows_per_thread - 1) / (ty * rows_per_thread));
  const dim3 grid(unsigned((units + tx - 1) / tx), unsigned(std::min<int64_t>(gy, 65535)));
  dyt_fwd<R, Pred, Pipe><<<grid, block, 0, s>>>(a);
}

// The copy as torch's elementwise kernels shape it: every thread 4 vectors, 128 threads a block, one pass.
__global__ void copy4_kernel(const uint4* x, uint4* y, int64_t n) {
  const int64_t base = (int64_t(blockIdx.x) * blockDim.x * 4) + threadIdx.x;
  uint4 v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (base + k * blockDim.x < n) v[k] = x[base + k * blockDim.x];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (base + k * blockDim.x < n) y[base + k * blockDim.x] = v[k];
}

// Steady state, as the benchmark times it: one CUDA graph of kCalls back-to-back launches, each on its own copy of x
// and y (kCopies of them, more bytes than the L2 holds), replayed; median replay / kCalls, in microseconds.
constexpr int kCopies = 4, kCalls = 24;
template <class Launch>
float steady_us(Launch launch) {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));  // blocking: time_us's events on the legacy stream order around its work
  for (int i = 0; i < kCopies; ++i) launch(i, s);  // outside capture: lazy loading
  CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCalls; ++i) launch(i % kCopies, s);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  const float us = time_us([&] { CHECK(cudaGraphLaunch(ge, s)); }, 7);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  return us / kCalls;
}

}  // namespace

int main() {
  const int64_t shapes[][2] = {{8192, 2048}, {8192, 4096}, {4097, 4096}, {8192, 8192}, {8192, 16384}, {16384, 4096}};
  const int64_t max_n = 8192LL * 16384;
  T *x[kCopies], *y[kCopies], *y_ref;
  float *alpha, *gamma, *beta;
  for (int i = 0; i < kCopies; ++i) {
    CHECK(cudaMalloc(&x[i], max_n * sizeof(T)));
    CHECK(cudaMalloc(&y[i], max_n * sizeof(T)));
  }
  CHECK(cudaMalloc(&y_ref, max_n * sizeof(T)));
  CHECK(cudaMalloc(&alpha, sizeof(float)));
  CHECK(cudaMalloc(&gamma, 16384 * sizeof(float)));
  CHECK(cudaMalloc(&beta, 16384 * sizeof(float)));
  {
    std::vector<T> hx(max_n);
    for (int64_t i = 0; i < max_n; ++i) hx[i] = __float2bfloat16(float((i * 2654435761u) % 2001) / 500.f - 2.f);
    for (int i = 0; i < kCopies; ++i) CHECK(cudaMemcpy(x[i], hx.data(), max_n * sizeof(T), cudaMemcpyHostToDevice));
    std::vector<float> hg(16384), hb(16384);
    for (int i = 0; i < 16384; ++i) hg[i] = 1.f + 0.001f * (i % 97), hb[i] = 0.01f * (i % 13);
    CHECK(cudaMemcpy(gamma, hg.data(), hg.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(beta, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
    const float a = 0.5f;
    CHECK(cudaMemcpy(alpha, &a, 4, cudaMemcpyHostToDevice));
  }
  const char* names[] = {"shipped", "pred", "pipe", "pipe16", "one_row", "one_r512", "one_r128", "pred_8"};
  constexpr int kVariants = 8;
  std::printf("steady-state us per call (CUDA graph of %d calls over %d input copies); %% = copy4's time / variant's\n",
              kCalls, kCopies);
  std::printf("%-14s %8s %8s", "shape", "copy4", "memcpy");
  for (const char* n : names) std::printf(" %9s", n);
  std::printf("\n");
  for (auto& sh : shapes) {
    const int64_t n = sh[0] * sh[1];
    const auto args = [&](int i) { return Args{x[i], y[i], alpha, gamma, beta, sh[0], sh[1]}; };
    const int64_t vecs = n / V;
    const float t_copy = steady_us([&](int i, cudaStream_t s) {
      copy4_kernel<<<unsigned((vecs + 511) / 512), 128, 0, s>>>(reinterpret_cast<const uint4*>(x[i]),
                                                                reinterpret_cast<uint4*>(y[i]), vecs);
    });
    const float t_memcpy = steady_us(
        [&](int i, cudaStream_t s) { CHECK(cudaMemcpyAsync(y[i], x[i], n * sizeof(T), cudaMemcpyDeviceToDevice, s)); });
    Args ref = args(0);
    ref.y = y_ref;
    launch<4, false, false>(ref, 8, 0);
    CHECK(cudaDeviceSynchronize());
    const auto check = [&](const char* name) {  // bit for bit against the shipped plan, on the smaller shapes
      if (n > 8192LL * 4096) return;
      std::vector<float> got = read_floats(y[0], n), want = read_floats(y_ref, n);
      for (int64_t i = 0; i < n; ++i)
        if (got[i] != want[i]) {
          std::printf("  %s differs at %lld: %g vs %g\n", name, (long long)i, got[i], want[i]);
          return;
        }
    };
    float t[kVariants];
    t[0] = steady_us([&](int i, cudaStream_t s) { launch<4, false, false>(args(i), 8, s); });
    t[1] = steady_us([&](int i, cudaStream_t s) { launch<4, true, false>(args(i), 8, s); });
    check(names[1]);
    t[2] = steady_us([&](int i, cudaStream_t s) { launch<4, true, true>(args(i), 8, s); });
    check(names[2]);
    t[3] = steady_us([&](int i, cudaStream_t s) { launch<4, true, true>(args(i), 16, s); });
    check(names[3]);
    t[4] = steady_us([&](int i, cudaStream_t s) { launch<1, true, false>(args(i), 1, s); });
    check(names[4]);
    t[5] = steady_us([&](int i, cudaStream_t s) { launch<1, true, false>(args(i), 1, s, 512); });
    check(names[5]);
    t[6] = steady_us([&](int i, cudaStream_t s) { launch<1, true, false>(args(i), 1, s, 128); });
    check(names[6]);
    t[7] = steady_us([&](int i, cudaStream_t s) { launch<8, true, false>(args(i), 8, s); });
    check(names[7]);
    std::printf("%6lldx%-7lld %8.1f %8.1f", (long long)sh[0], (long long)sh[1], t_copy, t_memcpy);
    for (float v : t) std::printf(" %5.1f(%2.0f)", v, 100.f * t_copy / v);
    std::printf("\n");
  }
  return 0;
}
