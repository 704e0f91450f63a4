// RoPE forward, rotate-half, bf16 q (B, Hq, T, D) and k (B, Hk, T, D) out of place with cos/sin (1, T, D): the
// shipped kernel (one thread per position and unit, walking every head with the tables in registers) against flat
// kernels that give each thread H heads of one position and unit and read the tables per thread (from L1 / L2).
// What closes the distance to torch.compile's elementwise kernel. Diagnostic only.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/rope_variants bench/micro/rope_variants.cu src/common/device.cpp
//   build/rope_variants [B Hq Hk T D]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "common/device.h"
#include "micro_util.cuh"
#include "rope/rope_kernels.cuh"

namespace {

using T = __nv_bfloat16;
constexpr int V = 8;

struct Flat {
  const T *q, *k, *cos, *sin;
  T *qo, *ko;
  int64_t batch, hq, hk, seq, dim;
  int units;  // rotation units per head row: dim / 2 / V
};

// Thread -> (unit, position, head group, batch, tensor); H heads of one group per thread, all loads before any store.
template <int H>
__global__ void __launch_bounds__(256) flat(Flat p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t q_groups = p.hq / H, k_groups = p.hk / H;
  const int64_t per_b = (q_groups + k_groups) * p.seq * p.units;
  if (i >= p.batch * per_b) return;
  const int u = int(i % p.units);
  const int64_t t = (i / p.units) % p.seq, g = (i / (p.units * p.seq)) % (q_groups + k_groups), b = i / per_b;
  const bool is_q = g < q_groups;
  const int64_t heads = is_q ? p.hq : p.hk, h0 = is_q ? g : g - q_groups;
  const T* x = (is_q ? p.q : p.k) + ((b * heads + h0) * p.seq + t) * p.dim + u * V;
  T* o = (is_q ? p.qo : p.ko) + ((b * heads + h0) * p.seq + t) * p.dim + u * V;
  const int64_t hstride = (heads / H) * p.seq * p.dim;  // heads h0, h0 + heads / H, ...
  const int half = int(p.dim / 2);
  uint4 xa[H], xb[H];
#pragma unroll
  for (int j = 0; j < H; ++j) {
    xa[j] = *reinterpret_cast<const uint4*>(x + j * hstride);
    xb[j] = *reinterpret_cast<const uint4*>(x + j * hstride + half);
  }
  float ca[V], cb[V], sa[V], sb[V];
  const T* cs = p.cos + t * p.dim + u * V;
  const T* sn = p.sin + t * p.dim + u * V;
  tigon::cuda::load_vec<T, V>(cs, ca);
  tigon::cuda::load_vec<T, V>(cs + half, cb);
  tigon::cuda::load_vec<T, V>(sn, sa);
  tigon::cuda::load_vec<T, V>(sn + half, sb);
#pragma unroll
  for (int j = 0; j < H; ++j) {
    float a[V], bb[V], na[V], nb[V];
    tigon::cuda::unpack_words<T>(xa[j], a);
    tigon::cuda::unpack_words<T>(xb[j], bb);
#pragma unroll
    for (int e = 0; e < V; ++e) na[e] = a[e] * ca[e] - bb[e] * sa[e], nb[e] = bb[e] * cb[e] + a[e] * sb[e];
    tigon::cuda::store_vec<T, V>(o + j * hstride, na);
    tigon::cuda::store_vec<T, V>(o + j * hstride + half, nb);
  }
}

__global__ void fill(T* p, int64_t n, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(scale * __sinf(float(i % 1000003) * 0.37f));
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t B = argc > 5 ? std::atoll(argv[1]) : 4, Hq = argc > 5 ? std::atoll(argv[2]) : 32,
                Hk = argc > 5 ? std::atoll(argv[3]) : 8, S = argc > 5 ? std::atoll(argv[4]) : 4096,
                D = argc > 5 ? std::atoll(argv[5]) : 128;
  const int64_t nq = B * Hq * S * D, nk = B * Hk * S * D;
  T *q, *k, *qo, *ko, *cs, *sn;
  CHECK(cudaMalloc(&q, nq * sizeof(T)));
  CHECK(cudaMalloc(&qo, nq * sizeof(T)));
  CHECK(cudaMalloc(&k, nk * sizeof(T)));
  CHECK(cudaMalloc(&ko, nk * sizeof(T)));
  CHECK(cudaMalloc(&cs, S * D * sizeof(T)));
  CHECK(cudaMalloc(&sn, S * D * sizeof(T)));
  fill<<<1024, 256>>>(q, nq, 1.f);
  fill<<<1024, 256>>>(k, nk, 2.f);
  fill<<<256, 256>>>(cs, S * D, 1.f);
  fill<<<256, 256>>>(sn, S * D, 0.5f);
  const double bytes = 2.0 * (nq + nk) * sizeof(T);
  std::printf("rope fwd %lld x %lld / %lld x %lld x %lld bf16, out of place: median us, GB/s\n", (long long)B,
              (long long)Hq, (long long)Hk, (long long)S, (long long)D);
  auto report = [&](const char* what, float us) {
    std::printf("  %-40s %8.1f us  %6.0f GB/s\n", what, us, bytes / us * 1e-3);
  };
  report("copy (cudaMemcpy, q and k)", time_us([&] {
           CHECK(cudaMemcpyAsync(qo, q, nq * sizeof(T), cudaMemcpyDeviceToDevice));
           CHECK(cudaMemcpyAsync(ko, k, nk * sizeof(T), cudaMemcpyDeviceToDevice));
         }));

  // The shipped kernel, planned as rope_cuda.cu plans it.
  namespace rk = tigon::rope::kern;
  rk::Args a{};
  a.parts = 2;
  a.part[0] = rk::Part{q, qo, Hq, Hq * S * D, S * D, D, Hq * S * D, S * D, D, true};
  a.part[1] = rk::Part{k, ko, Hk, Hk * S * D, S * D, D, Hk * S * D, S * D, D, true};
  a.cos = cs, a.sin = sn;
  a.c_b = 0, a.c_t = D, a.s_b = 0, a.s_t = D;
  a.batch = B, a.seq = S;
  a.rotary = int(D), a.half = int(D / 2);
  a.rot_units = int(D / 2 / V), a.pass_units = 0;
  const int64_t items = B * S * a.rot_units;
  const int64_t want = int64_t(tigon::sm_count(0)) * 2048;
  a.head_split = std::min<int64_t>(std::max<int64_t>((want + items - 1) / items, 1), Hq);
  const unsigned grid = unsigned((items * a.head_split + 255) / 256);
  std::printf("  (planned head_split %lld)\n", (long long)a.head_split);
  report("shipped (head loop, tables in registers)",
         time_us([&] { rk::rope<T, T, V, V, false, false, 1><<<grid, 256>>>(a); }));
  // The same kernel with more threads sharing a position's heads (head_split): fewer heads per thread.
  for (int64_t split : {Hq / 4, Hq / 2, Hq}) {
    if (split <= a.head_split || split < 1) continue;
    rk::Args b = a;
    b.head_split = split;
    char what[64];
    std::snprintf(what, sizeof what, "shipped kernel, head_split %lld", (long long)split);
    report(what,
           time_us([&] { rk::rope<T, T, V, V, false, false, 1><<<unsigned((items * split + 255) / 256), 256>>>(b); }));
  }

  const Flat f{q, k, cs, sn, qo, ko, B, Hq, Hk, S, D, int(D / 2 / V)};
  auto flat_grid = [&](int h) { return unsigned((B * (Hq / h + Hk / h) * S * f.units + 255) / 256); };
  report("flat, 1 head per thread", time_us([&] { flat<1><<<flat_grid(1), 256>>>(f); }));
  if (Hq % 2 == 0 && Hk % 2 == 0)
    report("flat, 2 heads per thread", time_us([&] { flat<2><<<flat_grid(2), 256>>>(f); }));
  if (Hq % 4 == 0 && Hk % 4 == 0)
    report("flat, 4 heads per thread", time_us([&] { flat<4><<<flat_grid(4), 256>>>(f); }));
  for (T* p : {q, k, qo, ko, cs, sn}) CHECK(cudaFree(p));
  return 0;
}
