// SwiGLU / GeGLU activations: the shipped kernels (fast forms with a rounding certificate, common/activation_fast.cuh)
// against the accurate forms alone (torch's expf / IEEE division / tanhf, the kernels before) and against the fast
// forms without the certificate (the speed ceiling, not torch's roundings). Diagnostic only.
//
// Part 1 checks the certificate over every 16-bit input: for each x (and, for the backward, each dy sign and
// mantissa at two exponents), wherever the fast form is not in doubt its rounding must equal the accurate form's.
// It reports the mismatches (must be 0) and the share of inputs in doubt.
// Part 2 times the three forward and backward kernels on rows x cols bf16 (default 8192 x 14336).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/glu_activation bench/micro/glu_activation.cu
//   build/glu_activation [rows cols]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "micro_util.cuh"
#include "swiglu/swiglu_kernels.cuh"

namespace {

using tigon::cuda::round_to;

template <class T>
__device__ float from_bits(uint32_t b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __uint_as_float(b << 16);
  else
    return __half2float(__ushort_as_half(uint16_t(b)));
}

template <class T>
__device__ uint16_t bits_of(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else
    return __half_as_ushort(__float2half_rn(v));
}

// Equal roundings, every NaN alike.
template <class T>
__device__ bool same_rounding(float a, float b) {
  return bits_of<T>(a) == bits_of<T>(b) || (a != a && b != b);
}

struct Counts {
  unsigned long long inputs, doubts, mismatches;
};

__device__ void note(Counts* c, bool doubt, bool mismatch) {
  atomicAdd(&c->inputs, 1ull);
  if (doubt) atomicAdd(&c->doubts, 1ull);
  if (mismatch) atomicAdd(&c->mismatches, 1ull);
}

// Every 16-bit x: act(x).
template <class T, int A>
__global__ void check_fwd(Counts* c) {
  const uint32_t xb = blockIdx.x * blockDim.x + threadIdx.x;
  if (xb >= 65536) return;
  const float x = from_bits<T>(xb);
  bool doubt;
  const float f = tigon::cuda::act_fwd_fast<T, A>(x, doubt);
  const float e = tigon::cuda::act_fwd<A>(x);
  note(c, doubt, !doubt && !same_rounding<T>(f, e));
}

// Every 16-bit x times every dy sign and mantissa at two exponents (dy scales the result exactly elsewhere).
template <class T, int A>
__global__ void check_bwd(Counts* c) {
  constexpr int kMant = std::is_same_v<T, __nv_bfloat16> ? 128 : 1024;
  const uint32_t xb = blockIdx.x;
  const float x = from_bits<T>(xb);
  for (int m = threadIdx.x; m < 4 * kMant; m += blockDim.x) {
    const float mag = (1.f + float(m % kMant) / kMant) * ((m / kMant) & 1 ? 1.f / 4096 : 1.f);
    const float dy = m / (2 * kMant) ? -mag : mag;
    bool doubt;
    const float f = tigon::cuda::act_bwd_fast<T, A>(x, dy, doubt);
    const float e = tigon::cuda::act_bwd<A>(x, dy);
    note(c, doubt, !doubt && !same_rounding<T>(f, e));
  }
}

// ---- part 2: the kernels
// ---------------------------------------------------------------------------------------------

using tigon::swiglu::BwdArgs;
using tigon::swiglu::FwdArgs;
using T = __nv_bfloat16;
constexpr int V = 8;

// Mode 0: the accurate forms alone; 1: the fast forms, certificate ignored (not torch's roundings).
template <int Mode, int A>
__global__ void fwd_variant(FwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += int64_t(gridDim.y)) {
    float a[V], b[V], c[V];
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a);
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.b) + row * p.b_stride + col, b);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float x = round_to<T>(a[j] * p.gate);
      bool d;
      const float y = Mode == 0 ? tigon::cuda::act_fwd<A>(x) : tigon::cuda::act_fwd_fast<T, A>(x, d);
      c[j] = round_to<T>(y) * b[j] * p.down;
    }
    tigon::cuda::store_vec<T, V>(static_cast<T*>(p.c) + row * p.c_stride + col, c);
  }
}

template <int Mode, int A>
__global__ void bwd_variant(BwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += int64_t(gridDim.y)) {
    float a[V], b[V], dc[V], da[V], db[V];
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a);
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.b) + row * p.b_stride + col, b);
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.dc) + row * p.dc_stride + col, dc);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float x = round_to<T>(a[j] * p.gate), u = dc[j] * p.down, dy = round_to<T>(u * b[j]);
      bool d;
      const float g = Mode == 0 ? tigon::cuda::act_bwd<A>(x, dy) : tigon::cuda::act_bwd_fast<T, A>(x, dy, d);
      const float f = Mode == 0 ? tigon::cuda::act_fwd<A>(x) : tigon::cuda::act_fwd_fast<T, A>(x, d);
      da[j] = round_to<T>(g) * p.gate;
      db[j] = u * round_to<T>(f);
    }
    tigon::cuda::store_vec<T, V>(static_cast<T*>(p.da) + row * p.da_stride + col, da);
    tigon::cuda::store_vec<T, V>(static_cast<T*>(p.db) + row * p.db_stride + col, db);
  }
}

__global__ void count_doubts(const T* a, const T* b, const T* dc, int64_t n, unsigned long long* out, int act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = __bfloat162float(a[i]), dy = round_to<T>(__bfloat162float(dc[i]) * __bfloat162float(b[i]));
  bool d1, d2;
  if (act == TIGON_ACT_SILU) {
    tigon::cuda::act_fwd_fast<T, TIGON_ACT_SILU>(x, d1);
    tigon::cuda::act_bwd_fast<T, TIGON_ACT_SILU>(x, dy, d2);
  } else {
    tigon::cuda::act_fwd_fast<T, TIGON_ACT_GELU_TANH>(x, d1);
    tigon::cuda::act_bwd_fast<T, TIGON_ACT_GELU_TANH>(x, dy, d2);
  }
  if (d1) atomicAdd(out, 1ull);
  if (d1 || d2) atomicAdd(out + 1, 1ull);
}

__global__ void fill_normal(T* p, int64_t n, float scale, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    // Box-Muller on a counter hash: plenty for a timing input.
    uint32_t h = uint32_t(i) * 2654435761u ^ seed, k = h * 2246822519u + 374761393u;
    const float u1 = (float((h >> 8) | 1) / 16777216.f), u2 = float(k >> 8) / 16777216.f;
    p[i] = __float2bfloat16_rn(scale * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

template <class Tc, int A>
void run_checks(const char* name) {
  Counts* c;
  CHECK(cudaMallocManaged(&c, 2 * sizeof(Counts)));
  CHECK(cudaMemset(c, 0, 2 * sizeof(Counts)));
  check_fwd<Tc, A><<<256, 256>>>(c);
  check_bwd<Tc, A><<<65536, 256>>>(c + 1);
  CHECK(cudaDeviceSynchronize());
  for (int k = 0; k < 2; ++k)
    std::printf("%-16s %s: %llu inputs, %llu in doubt (%.4f%%), %llu mismatches where not in doubt%s\n", name,
                k ? "bwd" : "fwd", c[k].inputs, c[k].doubts, 100.0 * c[k].doubts / c[k].inputs, c[k].mismatches,
                c[k].mismatches ? "  <-- FAIL" : "");
  CHECK(cudaFree(c));
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 2 ? std::atoll(argv[1]) : 8192, cols = argc > 2 ? std::atoll(argv[2]) : 14336;
  std::printf("== part 1: the certificate over every 16-bit input\n");
  run_checks<__nv_bfloat16, TIGON_ACT_SILU>("bf16 silu");
  run_checks<__nv_bfloat16, TIGON_ACT_GELU_TANH>("bf16 gelu_tanh");
  run_checks<__half, TIGON_ACT_SILU>("fp16 silu");
  run_checks<__half, TIGON_ACT_GELU_TANH>("fp16 gelu_tanh");

  const int64_t n = rows * cols;
  T *a, *b, *c, *dc, *da, *db;
  for (T** p : {&a, &b, &c, &dc, &da, &db}) CHECK(cudaMalloc(p, n * sizeof(T)));
  fill_normal<<<4096, 256>>>(a, n, 1.f, 1);
  fill_normal<<<4096, 256>>>(b, n, 1.f, 2);
  fill_normal<<<4096, 256>>>(dc, n, 1.f, 3);
  unsigned long long* cnt;
  CHECK(cudaMallocManaged(&cnt, 2 * sizeof(unsigned long long)));
  for (int act : {TIGON_ACT_SILU, TIGON_ACT_GELU_TANH}) {
    for (float scale : {1.f, 3.f}) {
      fill_normal<<<4096, 256>>>(a, n, scale, 1);
      cnt[0] = cnt[1] = 0;
      count_doubts<<<unsigned((n + 255) / 256), 256>>>(a, b, dc, n, cnt, act);
      CHECK(cudaDeviceSynchronize());
      std::printf("%s, a ~ N(0, %.0f^2): forward elements in doubt %.4f%%, backward %.4f%%\n",
                  act == TIGON_ACT_SILU ? "silu" : "gelu_tanh", scale, 100.0 * cnt[0] / n, 100.0 * cnt[1] / n);
    }
  }
  fill_normal<<<4096, 256>>>(a, n, 1.f, 1);

  std::printf("== part 2: %lld x %lld bf16, median us and GB/s (fwd 3, bwd 5 tensors)\n", (long long)rows,
              (long long)cols);
  const FwdArgs fa{a, b, c, rows, cols, cols, cols, cols, 1.f, 1.f};
  const BwdArgs ba{dc, a, b, da, db, rows, cols, cols, cols, cols, cols, cols, 1.f, 1.f};
  const dim3 block(256, 1), grid(unsigned((cols / V + 255) / 256), unsigned(std::min<int64_t>(rows, 65535)));
  const double fbytes = 3.0 * n * sizeof(T), bbytes = 5.0 * n * sizeof(T);
  auto report = [&](const char* what, float us, double bytes) {
    std::printf("  %-34s %8.1f us  %6.0f GB/s\n", what, us, bytes / us * 1e-3);
  };
  report("copy (cudaMemcpy, 2 tensors)",
         time_us([&] { CHECK(cudaMemcpyAsync(c, a, n * sizeof(T), cudaMemcpyDeviceToDevice)); }), 2.0 * n * sizeof(T));
  using namespace tigon::swiglu::kern;
  report("silu fwd accurate", time_us([&] { fwd_variant<0, TIGON_ACT_SILU><<<grid, block>>>(fa); }), fbytes);
  report("silu fwd shipped (certified)", time_us([&] { glu_fwd<T, TIGON_GLU_SILU, V><<<grid, block>>>(fa); }), fbytes);
  report("silu fwd fast, no certificate", time_us([&] { fwd_variant<1, TIGON_ACT_SILU><<<grid, block>>>(fa); }),
         fbytes);
  report("gelu_tanh fwd accurate", time_us([&] { fwd_variant<0, TIGON_ACT_GELU_TANH><<<grid, block>>>(fa); }), fbytes);
  report("gelu_tanh fwd shipped (certified)", time_us([&] { glu_fwd<T, TIGON_GLU_GELU_TANH, V><<<grid, block>>>(fa); }),
         fbytes);
  report("gelu_tanh fwd fast, no certificate",
         time_us([&] { fwd_variant<1, TIGON_ACT_GELU_TANH><<<grid, block>>>(fa); }), fbytes);
  report("silu bwd accurate", time_us([&] { bwd_variant<0, TIGON_ACT_SILU><<<grid, block>>>(ba); }), bbytes);
  report("silu bwd shipped (certified)", time_us([&] { glu_bwd<T, TIGON_GLU_SILU, V><<<grid, block>>>(ba); }), bbytes);
  report("silu bwd fast, no certificate", time_us([&] { bwd_variant<1, TIGON_ACT_SILU><<<grid, block>>>(ba); }),
         bbytes);
  report("gelu_tanh bwd accurate", time_us([&] { bwd_variant<0, TIGON_ACT_GELU_TANH><<<grid, block>>>(ba); }), bbytes);
  report("gelu_tanh bwd shipped (certified)", time_us([&] { glu_bwd<T, TIGON_GLU_GELU_TANH, V><<<grid, block>>>(ba); }),
         bbytes);
  report("gelu_tanh bwd fast, no certificate",
         time_us([&] { bwd_variant<1, TIGON_ACT_GELU_TANH><<<grid, block>>>(ba); }), bbytes);
  for (T* p : {a, b, c, dc, da, db}) CHECK(cudaFree(p));
  return 0;
}
