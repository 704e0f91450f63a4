// SwiGLU / GeGLU activations: the shipped kernels (SiLU's forward fast with a rounding certificate,
// common/activation_fast.cuh; the rest in the accurate forms: torch's expf / IEEE division / tanhf) against the
// accurate forms alone, certified fast forms of the rest (defined here, in namespace lab: tanh-GELU's forward and both
// backwards) and the fast forms without the certificate (the speed ceiling, not torch's roundings). Diagnostic only.
//
// Part 1 checks the certificate over every 16-bit input: for each x (and, for the backward, each dy sign and
// mantissa at two exponents), wherever the fast form is not in doubt its rounding must equal the accurate form's.
// It reports the mismatches (must be 0) and the share of inputs in doubt.
// Part 2 times the forward and backward kernels on rows x cols bf16 (default 8192 x 14336).
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

namespace lab {

using namespace tigon::cuda;

// gelu-tanh's tanh argument, and dy times its derivative given t = tanh of that argument, in torch's order (as
// act_fwd / act_bwd in activation_math.cuh compute them with tanhf).
__device__ __forceinline__ float gelu_tanh_inner(float x) {
  const float x_cube = x * x * x;
  return kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
}
__device__ __forceinline__ float gelu_tanh_bwd_given(float x, float tanh_inner, float dy, float& inner_derivative) {
  const float x_sq = x * x;
  const float left = 0.5f * x, right = 1.f + tanh_inner;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
  inner_derivative = kGeluTanhBeta * (1.f + 3.f * kGeluTanhKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

// tanh(u) = 1 - 2 / (1 + 2^(2u log2 e)). Against tanhf: the exponential's argument is rounded once (relative error
// of e at most |2u log2 e| 2^-24 ln 2, weighed by 2e / (1 + e)^2 <= 0.22 / |2u log2 e| away from 0: <= 2^-25 absolute),
// ex2.approx (2 ulp from the rounded result, 2^-21.7 relative, weighed by <= 0.5), 1 + e (2^-24, weighed alike),
// rcp.approx (2^-23 of 2r <= 2), the subtraction (2^-25) and tanhf's own 2 ulp (2^-23): |t - tanhf| < 2^-20.7, taken
// as 2^-20.
__device__ __forceinline__ float tanh_fast(float u) {
  return 1.f - 2.f * rcp_fast(1.f + exp2_fast(u * (2.f * kLog2e)));
}
constexpr float kTanhFastError = 1.f / (1 << 20);

// act(x) certified: the library's SiLU, and a tanh-GELU, 0.5x (1 + t) with u computed as torch does: 1 + t moves by
// |t - tanhf| plus its two roundings (2^-24 |1 + t| each), scaled by 0.5|x|, plus the product's: 0.5|x| 2^-20.7 +
// 2^-22 |F|, taken as |x| 2^-21 + |F| 2^-22.
template <class T, int Act>
__device__ __forceinline__ float act_fwd_certified(float x, bool& doubt) {
  if constexpr (Act == TIGON_ACT_SILU) {
    return act_fwd_fast<T, Act>(x, doubt);
  } else {
    const float f = 0.5f * x * (1.f + tanh_fast(gelu_tanh_inner(x)));
    const float g = fabsf(x) * (0.5f * kTanhFastError) + fabsf(f) * (1.f / (1 << 22));
    doubt = rounding_in_doubt<T>(f, g);
    return f;
  }
}

// The relative error of e = 2^(-x log2 e) against expf(-x) for |x| <= 8: the argument's rounding and log2 e's own
// (|x| 2^-23.7), ex2.approx (2 ulp from the rounded result, 2^-21.7) and expf (2 ulp, 2^-22): < 2^-19.75. Below -8 the
// elements take the accurate forms. Then s = 1 / (1 + e) moves by at most s ((1 - s) e_err + 2^-21.7): 1 + e weighs
// e's error by e / (1 + e) = 1 - s, and 1 + e's two roundings, rcp.approx (1 ulp) and the IEEE division add 2^-21.7.
constexpr float kSiluFastMin = -8.f;

// The backward's certified fast form, as it stood when measured (the library's backward keeps the accurate forms):
// dy act'(x), fast, in torch's order of operations (act_bwd<Act>), and whether its rounding to T may differ. The
// exhaustive test covers every x but dy's mantissas at two exponents: the bounds are relative, and dy scales both
// forms exactly, except where a step falls below fp32's normal range; there each step may round by 2^-150 more,
// which kSubnormalSlack covers.
constexpr float kSubnormalSlack = 0x1p-146f;
//  - silu, F = (dy s) (1 + x (1 - s)): s's error moves dy s by |dy| ds and 1 + x (1 - s) by |x| ds, and each of the
//    four steps may round apart: |F - T| <= (|F| + |dy s x|) ((1 - s) 2^-19.75 + 2^-21.7) + 2^-21.4 |F| +
//    2^-23 (1 - s) |dy s x|, taken as g = (|F| + |dy s x|) ((1 - s) 2^-19 + 2^-20).
//  - gelu-tanh, F = dy (0.5 (1 + t) + 0.5x (1 - t^2) inner'): t's error moves F by |dy| |0.5 - x t inner'| |dt|
//    (|dt| <= 2^-20.7), t^2 and 1 - t^2 round by 2^-25 each in both forms (|dy| |x| inner' 2^-24), 1 + t by 2^-24
//    twice, the two products of the right term by 2^-24 |dy rd| each and the sum and the product with dy by 2^-24
//    |F| each: g = |dy| (|0.5 - x t inner'| 2^-20 + (1 + |x| inner') 2^-22) + |F| 2^-22.
template <class T, int Act>
__device__ __forceinline__ float act_bwd_certified(float x, float dy, bool& doubt) {
  if constexpr (Act == TIGON_ACT_SILU) {
    const float s = rcp_fast(1.f + exp2_fast(-x * kLog2e));
    const float ds = dy * s, one_minus_s = 1.f - s;
    const float f = ds * (1.f + x * one_minus_s);
    const float g = fmaf(fmaf(fabsf(ds), fabsf(x), fabsf(f)), fmaf(one_minus_s, 0x1p-19f, 0x1p-20f), kSubnormalSlack);
    doubt = (x < kSiluFastMin) | rounding_in_doubt<T>(f, g);
    return f;
  } else {
    static_assert(Act == TIGON_ACT_GELU_TANH, "activations with a fast form: kHasFastForm");
    float inner_derivative;
    const float t = tanh_fast(gelu_tanh_inner(x));
    const float f = gelu_tanh_bwd_given(x, t, dy, inner_derivative);
    const float dt_weight = fabsf(fmaf(-x * t, inner_derivative, 0.5f));
    const float steps = fmaf(fabsf(x), inner_derivative, 1.f);
    const float g =
        fmaf(fabsf(dy), fmaf(dt_weight, 0x1p-20f, steps * 0x1p-22f), fmaf(fabsf(f), 0x1p-22f, kSubnormalSlack));
    doubt = rounding_in_doubt<T>(f, g);
    return f;
  }
}

}  // namespace lab

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
  const float f = lab::act_fwd_certified<T, A>(x, doubt);
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
    const float f = lab::act_bwd_certified<T, A>(x, dy, doubt);
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

// Mode 0: the accurate forms alone; 1: the fast forms, certificate ignored (not torch's roundings); 2: the certified
// fast forms, the elements in doubt recomputed accurately.
template <int Mode, int A>
__global__ void fwd_variant(FwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += int64_t(gridDim.y)) {
    float a[V], b[V], c[V];
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a);
    tigon::cuda::load_vec<T, V>(static_cast<const T*>(p.b) + row * p.b_stride + col, b);
    float x[V], y[V];
    unsigned doubt = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      x[j] = round_to<T>(a[j] * p.gate);
      bool d;
      y[j] = Mode == 0 ? tigon::cuda::act_fwd<A>(x[j]) : lab::act_fwd_certified<T, A>(x[j], d);
      if (Mode == 2) doubt |= unsigned(d) << j;
    }
    if (Mode == 2 && doubt) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (doubt >> j & 1u) y[j] = tigon::cuda::act_fwd<A>(x[j]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) c[j] = round_to<T>(y[j]) * b[j] * p.down;
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
    float x[V], dy[V], g[V], f[V];
    unsigned doubt = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      x[j] = round_to<T>(a[j] * p.gate), dc[j] *= p.down, dy[j] = round_to<T>(dc[j] * b[j]);
      bool dg, df;
      g[j] = Mode == 0 ? tigon::cuda::act_bwd<A>(x[j], dy[j]) : lab::act_bwd_certified<T, A>(x[j], dy[j], dg);
      f[j] = Mode == 0 ? tigon::cuda::act_fwd<A>(x[j]) : lab::act_fwd_certified<T, A>(x[j], df);
      if (Mode == 2) doubt |= unsigned(dg || df) << j;
    }
    if (Mode == 2 && doubt) {  // the certified form: the elements in doubt again, accurately
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (doubt >> j & 1u) g[j] = tigon::cuda::act_bwd<A>(x[j], dy[j]), f[j] = tigon::cuda::act_fwd<A>(x[j]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) da[j] = round_to<T>(g[j]) * p.gate, db[j] = dc[j] * round_to<T>(f[j]);
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
    lab::act_fwd_certified<T, TIGON_ACT_SILU>(x, d1);
    lab::act_bwd_certified<T, TIGON_ACT_SILU>(x, dy, d2);
  } else {
    lab::act_fwd_certified<T, TIGON_ACT_GELU_TANH>(x, d1);
    lab::act_bwd_certified<T, TIGON_ACT_GELU_TANH>(x, dy, d2);
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
  report("gelu_tanh fwd certified", time_us([&] { fwd_variant<2, TIGON_ACT_GELU_TANH><<<grid, block>>>(fa); }), fbytes);
  report("gelu_tanh fwd shipped (accurate)", time_us([&] { glu_fwd<T, TIGON_GLU_GELU_TANH, V><<<grid, block>>>(fa); }),
         fbytes);
  report("gelu_tanh fwd fast, no certificate",
         time_us([&] { fwd_variant<1, TIGON_ACT_GELU_TANH><<<grid, block>>>(fa); }), fbytes);
  report("silu bwd shipped (accurate)", time_us([&] { glu_bwd<T, TIGON_GLU_SILU, V><<<grid, block>>>(ba); }), bbytes);
  report("silu bwd certified", time_us([&] { bwd_variant<2, TIGON_ACT_SILU><<<grid, block>>>(ba); }), bbytes);
  report("silu bwd fast, no certificate", time_us([&] { bwd_variant<1, TIGON_ACT_SILU><<<grid, block>>>(ba); }),
         bbytes);
  report("gelu_tanh bwd shipped (accurate)", time_us([&] { glu_bwd<T, TIGON_GLU_GELU_TANH, V><<<grid, block>>>(ba); }),
         bbytes);
  report("gelu_tanh bwd certified", time_us([&] { bwd_variant<2, TIGON_ACT_GELU_TANH><<<grid, block>>>(ba); }), bbytes);
  report("gelu_tanh bwd fast, no certificate",
         time_us([&] { bwd_variant<1, TIGON_ACT_GELU_TANH><<<grid, block>>>(ba); }), bbytes);
  for (T* p : {a, b, c, dc, da, db}) CHECK(cudaFree(p));
  return 0;
}
