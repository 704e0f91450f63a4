// RoPE, bf16 q (B, Hq, T, D) and k (B, Hk, T, D) with cos/sin (1, T, D): the shipped kernel (one thread per position
// and unit, walking its heads with the next one loaded ahead) against a flat kernel with one thread per head,
// position and unit that reads the tables per thread (from L1 / L2), written with the shipped kernel's generality
// (both parts in one launch, any strides, interleaved pairs, partial rotary with the pass-through copy, the
// backward, in place) so that it can replace it. Each case first checks the flat kernel's output bit for bit against
// the shipped one's, then times both. Diagnostic only.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -DTIGON_CUDA_ARCHS_STRING=\"90a\" \
//     -Isrc -Iinclude -o build/rope_variants bench/micro/rope_variants.cu src/common/device.cpp
//   build/rope_variants [B Hq Hk T D]   (default: the sweep's layouts, and the feature cases at 4 x 32 / 8 x 4096 x
//   128)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/device.h"
#include "micro_util.cuh"
#include "rope/rope_kernels.cuh"

namespace {

using T = __nv_bfloat16;
constexpr int V = 8;
namespace rk = tigon::rope::kern;

// One part's item i (unit fastest, then the inner one of head and position, then the other, then batch).
template <class TT, class TC, int VV, int PV, bool INTERLEAVED, bool BWD>
__device__ __forceinline__ void flat_item(const rk::Args& a, const rk::Part& p, int64_t i, bool head_inner) {
  const int units = a.rot_units + a.pass_units;
  const int u = int(i % units);
  const int64_t r = i / units;
  int64_t h, t, b;
  if (head_inner) {
    h = r % p.heads, t = (r / p.heads) % a.seq, b = r / p.heads / a.seq;
  } else {
    t = r % a.seq, h = (r / a.seq) % p.heads, b = r / a.seq / p.heads;
  }
  const TT* x = static_cast<const TT*>(p.x) + b * p.x_b + t * p.x_t + h * p.x_h;
  TT* o = static_cast<TT*>(p.out) + b * p.o_b + t * p.o_t + h * p.o_h;
  if (u >= a.rot_units) {  // pass-through dims: a plain copy, out of place only
    if (!p.copy_pass) return;
    const int e = a.rotary + (u - a.rot_units) * PV;
    float v[PV];
    tigon::cuda::load_vec<TT, PV>(x + e, v);
    tigon::cuda::store_vec<TT, PV>(o + e, v);
    return;
  }
  const int e = u * VV, f = INTERLEAVED ? e : e + a.half;
  rk::Regs<TT, VV> va, vb;
  va.load(x + e);
  if constexpr (!INTERLEAVED) vb.load(x + f);
  const TC* cs = static_cast<const TC*>(a.cos) + b * a.c_b + t * a.c_t;
  const TC* sn = static_cast<const TC*>(a.sin) + b * a.s_b + t * a.s_t;
  rk::Regs<TC, VV> ca, cb, sa, sb;
  ca.load(cs + e);
  sa.load(sn + e);
  if constexpr (!INTERLEAVED) {
    cb.load(cs + f);
    sb.load(sn + f);
  }
  float av[VV], bv[VV];
  if constexpr (INTERLEAVED) {
#pragma unroll
    for (int j = 0; j < VV; j += 2) {
      av[j] = va[j], av[j + 1] = va[j + 1];
      rk::rotate_pair(av[j], av[j + 1], ca[j], ca[j + 1], sa[j], sa[j + 1], BWD);
    }
    tigon::cuda::store_vec<TT, VV>(o + e, av);
  } else {
#pragma unroll
    for (int j = 0; j < VV; ++j) {
      av[j] = va[j], bv[j] = vb[j];
      rk::rotate_pair(av[j], bv[j], ca[j], cb[j], sa[j], sb[j], BWD);
    }
    tigon::cuda::store_vec<TT, VV>(o + e, av);
    tigon::cuda::store_vec<TT, VV>(o + f, bv);
  }
}

template <class TT, class TC, int VV, int PV, bool INTERLEAVED, bool BWD>
__global__ void __launch_bounds__(256) flat(rk::Args a, bool head_inner) {
  tigon::cuda::grid_dependency_wait();
  tigon::cuda::allow_dependents();
  const int64_t per_head = a.batch * a.seq * (a.rot_units + a.pass_units);
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n0 = per_head * a.part[0].heads;
  if (i < n0) {  // parts by constant index (a runtime index copies both into registers)
    flat_item<TT, TC, VV, PV, INTERLEAVED, BWD>(a, a.part[0], i, head_inner);
  } else if (a.parts > 1 && (i -= n0) < per_head * a.part[1].heads) {
    flat_item<TT, TC, VV, PV, INTERLEAVED, BWD>(a, a.part[1], i, head_inner);
  }
}

__global__ void fill(T* p, int64_t n, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(scale * __sinf(float(i % 1000003) * 0.37f));
}

__global__ void count_diff(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* out) {
  unsigned long long c = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    c += a[i] != b[i];
  if (c) atomicAdd(out, c);
}

struct Case {
  const char* name;
  int64_t B, Hq, Hk, S, D, R;  // R: rotary dims (D: all)
  bool interleaved = false, bwd = false, bthd = false, in_place = false;
};

struct Buffers {
  T *q, *k, *qo, *ko, *qr, *kr, *cs, *sn;
  int64_t nq, nk;
};

// Runs the shipped kernel (as rope_cuda.cu plans it) or the flat one for case c.
void run(const Case& c, const Buffers& m, bool use_flat) {
  rk::Args a{};
  const int64_t B = c.B, S = c.S, D = c.D;
  auto part = [&](const T* x, T* o, int64_t H) {
    // (B, H, T, D) storage, or (B, T, H, D) seen through strides
    const int64_t xb = H * S * D, xh = c.bthd ? D : S * D, xt = c.bthd ? H * D : D;
    return rk::Part{x, c.in_place ? const_cast<T*>(x) : o, H, xb, xh, xt, xb, xh, xt, !c.in_place};
  };
  a.parts = 2;
  a.part[0] = part(m.q, m.qo, c.Hq);
  a.part[1] = part(m.k, m.ko, c.Hk);
  a.cos = m.cs, a.sin = m.sn;
  a.c_b = 0, a.c_t = D, a.s_b = 0, a.s_t = D;
  a.batch = B, a.seq = S;
  a.rotary = int(c.R), a.half = int(c.R / 2);
  a.rot_units = int(c.interleaved ? c.R / V : c.R / 2 / V);
  a.pass_units = c.in_place ? 0 : int((D - c.R) / V);
  const int64_t items = B * S * (a.rot_units + a.pass_units);
  if (use_flat) {
    const unsigned grid = unsigned((items * (c.Hq + c.Hk) + 255) / 256);
    const bool inner = c.bthd;
#define FLAT(I, W) flat<T, T, V, V, I, W><<<grid, 256>>>(a, inner)
    if (c.interleaved)
      c.bwd ? FLAT(true, true) : FLAT(true, false);
    else
      c.bwd ? FLAT(false, true) : FLAT(false, false);
#undef FLAT
    return;
  }
  const int64_t want = int64_t(tigon::sm_count(0)) * 2048;
  a.head_split = std::clamp<int64_t>((want + items - 1) / items, 1, std::max(c.Hq, c.Hk));
  const unsigned grid = unsigned((items * a.head_split + 255) / 256);
#define SHIPPED(I, W) rk::rope<T, T, V, V, I, W, 1><<<grid, 256>>>(a)
  if (c.interleaved)
    c.bwd ? SHIPPED(true, true) : SHIPPED(true, false);
  else
    c.bwd ? SHIPPED(false, true) : SHIPPED(false, false);
#undef SHIPPED
}

// Bit-for-bit check of the flat kernel against the shipped one, then both timed; copy: q and k copied once.
void run_case(const Case& c, const Buffers& m, unsigned long long* diff) {
  const int64_t nq = c.B * c.Hq * c.S * c.D, nk = c.B * c.Hk * c.S * c.D;
  auto reset = [&] {  // fresh inputs (in place overwrites them) and poisoned outputs
    fill<<<1024, 256>>>(m.q, nq, 1.f);
    fill<<<1024, 256>>>(m.k, nk, 2.f);
    CHECK(cudaMemset(m.qo, 0xff, nq * sizeof(T)));
    CHECK(cudaMemset(m.ko, 0xff, nk * sizeof(T)));
  };
  const T* outq = c.in_place ? m.q : m.qo;
  const T* outk = c.in_place ? m.k : m.ko;
  reset();
  run(c, m, false);
  CHECK(cudaMemcpy(m.qr, outq, nq * sizeof(T), cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(m.kr, outk, nk * sizeof(T), cudaMemcpyDeviceToDevice));
  reset();
  run(c, m, true);
  CHECK(cudaMemset(diff, 0, sizeof(*diff)));
  count_diff<<<1024, 256>>>(reinterpret_cast<const uint16_t*>(outq), reinterpret_cast<const uint16_t*>(m.qr), nq, diff);
  count_diff<<<1024, 256>>>(reinterpret_cast<const uint16_t*>(outk), reinterpret_cast<const uint16_t*>(m.kr), nk, diff);
  unsigned long long bad = 0;
  CHECK(cudaMemcpy(&bad, diff, sizeof(bad), cudaMemcpyDeviceToHost));
  const double bytes = 2.0 * (nq + nk) * sizeof(T);
  const float copy = time_us([&] {
    CHECK(cudaMemcpyAsync(m.qo, m.q, nq * sizeof(T), cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpyAsync(m.ko, m.k, nk * sizeof(T), cudaMemcpyDeviceToDevice));
  });
  const float shipped = time_us([&] { run(c, m, false); }), flat_us = time_us([&] { run(c, m, true); });
  std::printf(
      "%-34s %lldx%lld/%lldx%lldx%lld R%lld  copy %7.1f  shipped %7.1f  flat %7.1f us (%4.0f GB/s)  "
      "%llu elements differ\n",
      c.name, (long long)c.B, (long long)c.Hq, (long long)c.Hk, (long long)c.S, (long long)c.D, (long long)c.R, copy,
      shipped, flat_us, bytes / flat_us * 1e-3, bad);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases;
  if (argc > 5) {
    const int64_t B = std::atoll(argv[1]), Hq = std::atoll(argv[2]), Hk = std::atoll(argv[3]), S = std::atoll(argv[4]),
                  D = std::atoll(argv[5]);
    cases.push_back({"rotate-half", B, Hq, Hk, S, D, D});
  } else {
    for (auto s : std::vector<std::vector<int64_t>>{{4, 32, 8, 4096, 128},
                                                    {4, 28, 4, 4096, 128},
                                                    {4, 40, 8, 4096, 128},
                                                    {4, 64, 8, 2048, 128},
                                                    {4, 8, 4, 4096, 256},
                                                    {4, 32, 32, 4096, 96},
                                                    {4, 16, 16, 4096, 64}})
      cases.push_back({"rotate-half", s[0], s[1], s[2], s[3], s[4], s[4]});
    const Case base{"", 4, 32, 8, 4096, 128, 128};
    Case c = base;
    c.name = "backward", c.bwd = true, cases.push_back(c);
    c = base, c.name = "interleaved", c.interleaved = true, cases.push_back(c);
    c = base, c.name = "(B, T, H, D) storage", c.bthd = true, cases.push_back(c);
    c = base, c.name = "partial rotary, pass-through copied", c.R = 64, cases.push_back(c);
    c = base, c.name = "in place", c.in_place = true, cases.push_back(c);
  }
  int64_t max_q = 0, max_k = 0, max_t = 0;
  for (const Case& c : cases) {
    max_q = std::max(max_q, c.B * c.Hq * c.S * c.D);
    max_k = std::max(max_k, c.B * c.Hk * c.S * c.D);
    max_t = std::max(max_t, c.S * c.D);
  }
  Buffers m{};
  for (auto [p, n] : {std::pair{&m.q, max_q},
                      {&m.qo, max_q},
                      {&m.qr, max_q},
                      {&m.k, max_k},
                      {&m.ko, max_k},
                      {&m.kr, max_k},
                      {&m.cs, max_t},
                      {&m.sn, max_t}})
    CHECK(cudaMalloc(p, n * sizeof(T)));
  fill<<<256, 256>>>(m.cs, max_t, 1.f);
  fill<<<256, 256>>>(m.sn, max_t, 0.5f);
  unsigned long long* diff;
  CHECK(cudaMalloc(&diff, sizeof(*diff)));
  std::printf("rope, bf16, median us; flat's rate counts q and k read and written once\n");
  for (const Case& c : cases) run_case(c, m, diff);
  for (T* p : {m.q, m.k, m.qo, m.ko, m.qr, m.kr, m.cs, m.sn}) CHECK(cudaFree(p));
  CHECK(cudaFree(diff));
  return 0;
}
