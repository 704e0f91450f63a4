// DyT's forward (y = gamma * tanh(alpha * x) + beta, bf16 x and y, fp32 gamma and beta) in several load plans, against
// a plain copy of x: what keeps its bytes in flight. Diagnostic only.
//
//   shipped    the library's plan: >= 8 rows a thread, 4 rows' loads written first, each under its own row test
//   pred       the same, the 4 loads predicated (load_vec_if) and tied together (load_together), so all issue first
//   pipe       pred, and the next 4 rows' loads issued before this 4's stores (a thread always has loads in flight)
//   one_row    one row a thread (every row its own thread: gamma and beta read per row, from L2)
//   pred_8     pred with 8 rows' loads in flight
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

__global__ void copy_kernel(const uint4* x, uint4* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i];
}

// The library's launch shape: 256 threads, tx the power of two covering the row's vectors, rows_per_thread rows each.
template <int R, bool Pred, bool Pipe>
void launch(const Args& a, int64_t rows_per_thread) {
  const int64_t units = a.cols / V;
  int tx = 1;
  while (tx < 256 && tx < units) tx *= 2;
  const int ty = 256 / tx;
  const dim3 block(tx, ty);
  const int64_t gy = std::max<int64_t>(1, (a.rows + ty * rows_per_thread - 1) / (ty * rows_per_thread));
  const dim3 grid(unsigned((units + tx - 1) / tx), unsigned(std::min<int64_t>(gy, 65535)));
  dyt_fwd<R, Pred, Pipe><<<grid, block>>>(a);
}

}  // namespace

int main() {
  const int64_t shapes[][2] = {{8192, 2048}, {8192, 4096}, {4097, 4096}, {8192, 8192}, {8192, 16384}, {16384, 4096}};
  const int64_t max_n = 8192LL * 16384;
  T *x, *y, *y_ref;
  float *alpha, *gamma, *beta;
  CHECK(cudaMalloc(&x, max_n * sizeof(T)));
  CHECK(cudaMalloc(&y, max_n * sizeof(T)));
  CHECK(cudaMalloc(&y_ref, max_n * sizeof(T)));
  CHECK(cudaMalloc(&alpha, sizeof(float)));
  CHECK(cudaMalloc(&gamma, 16384 * sizeof(float)));
  CHECK(cudaMalloc(&beta, 16384 * sizeof(float)));
  {
    std::vector<T> hx(max_n);
    for (int64_t i = 0; i < max_n; ++i) hx[i] = __float2bfloat16(float((i * 2654435761u) % 2001) / 500.f - 2.f);
    CHECK(cudaMemcpy(x, hx.data(), max_n * sizeof(T), cudaMemcpyHostToDevice));
    std::vector<float> hg(16384), hb(16384);
    for (int i = 0; i < 16384; ++i) hg[i] = 1.f + 0.001f * (i % 97), hb[i] = 0.01f * (i % 13);
    CHECK(cudaMemcpy(gamma, hg.data(), hg.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(beta, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
    const float a = 0.5f;
    CHECK(cudaMemcpy(alpha, &a, 4, cudaMemcpyHostToDevice));
  }
  const int sms = device_sms();
  std::printf("%-14s %9s %9s %9s %9s %9s %9s %9s  (us; %% of the copy's time in brackets for the best)\n", "shape",
              "copy", "shipped", "pred", "pipe", "pipe16", "one_row", "pred_8");
  for (auto& s : shapes) {
    const Args a{x, y, alpha, gamma, beta, s[0], s[1]};
    const int64_t n = s[0] * s[1];
    const float t_copy = time_us(
        [&] { copy_kernel<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(y), n / V); });
    Args ref = a;
    ref.y = y_ref;
    launch<4, false, false>(ref, 8);
    const auto check = [&](const char* name) {
      std::vector<float> got = read_floats(y, n), want = read_floats(y_ref, n);
      for (int64_t i = 0; i < n; ++i)
        if (got[i] != want[i]) {
          std::printf("  %s differs at %lld: %g vs %g\n", name, (long long)i, got[i], want[i]);
          return;
        }
    };
    float t[6];
    t[0] = time_us([&] { launch<4, false, false>(a, 8); });
    t[1] = time_us([&] { launch<4, true, false>(a, 8); });
    check("pred");
    t[2] = time_us([&] { launch<4, true, true>(a, 8); });
    check("pipe");
    t[3] = time_us([&] { launch<4, true, true>(a, 16); });
    check("pipe16");
    t[4] = time_us([&] { launch<1, true, false>(a, 1); });
    check("one_row");
    t[5] = time_us([&] { launch<8, true, false>(a, 8); });
    check("pred_8");
    const float best = *std::min_element(t, t + 6);
    std::printf("%6lldx%-7lld %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f  (best %.0f%%)\n", (long long)s[0],
                (long long)s[1], t_copy, t[0], t[1], t[2], t[3], t[4], t[5], 100.f * t_copy / best);
  }
  return 0;
}
