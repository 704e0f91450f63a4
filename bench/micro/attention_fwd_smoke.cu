// The Hopper attention forward kernel on its own, below the C API: a few odd shapes against a naive GPU kernel
// (each option once: GQA, Sq != Sk, causal, windows, softcap, variable length, every head dim, fp16), then the speed
// of the shapes the kernel is tuned for (bf16, B=2, H=16, S=8192, causal and full; FLOPs 4·B·H·S²·D, halved when
// causal). A first look when the kernel changes, not a test: the tests go through tigon_attention_fwd.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude \
//     -I<cutlass>/include -DTIGON_WITH_CUDA -DTIGON_CUDA_ARCHS_STRING='"90a"' -o build/attention_fwd_smoke \
//     bench/micro/attention_fwd_smoke.cu src/attention/attention_fwd_cuda.cu src/attention/attention_fwd_sm90_hdim*.cu
//     \ src/common/tensor.cpp src/common/tigon.cpp
//   build/attention_fwd_smoke
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "micro_util.cuh"

namespace {

using tigon::attention::FwdProblem;
using tigon::attention::Shape;

struct Case {
  const char* name;
  int batch, sq, sk, hq, hkv, d;
  bool causal = false;
  int left = -1, right = -1;
  float softcap = 0.f;
  bool varlen = false, fp16 = false;
};

template <class T>
__device__ float load(const void* p, int64_t i) {
  return float(static_cast<const T*>(p)[i]);
}

// One thread per (sequence, head, row): two passes over the keys in fp32.
template <class T>
__global__ void naive_fwd(FwdProblem p, const int* cu_q, const int* cu_k, float* o, float* lse) {
  const Shape& s = p.s;
  const int64_t rows = int64_t(s.batch) * s.heads_q * s.seqlen_q;
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= rows) return;
  const int i = int(t % s.seqlen_q), h = int(t / s.seqlen_q % s.heads_q), b = int(t / s.seqlen_q / s.heads_q);
  int q0 = 0, k0 = 0, lq = int(s.seqlen_q), lk = int(s.seqlen_k);
  if (cu_q) q0 = cu_q[b], k0 = cu_k[b], lq = cu_q[b + 1] - q0, lk = cu_k[b + 1] - k0;
  if (i >= lq) return;
  const int hk = h / int(s.heads_q / s.heads_kv), D = int(s.head_dim), shift = lk - lq;
  auto at = [&](const tigon::attention::Tensor4& x, int bb, int row, int hh) {
    return bb * x.batch_stride + int64_t(row) * x.seq_stride + hh * x.head_stride;
  };
  auto score = [&](int j) {
    float acc = 0.f;
    for (int d = 0; d < D; ++d)
      acc += load<T>(p.q.data, at(p.q, b, q0 + i, h) + d) * load<T>(p.k.data, at(p.k, b, k0 + j, hk) + d);
    acc *= s.scale;
    return s.softcap > 0.f ? s.softcap * tanhf(acc / s.softcap) : acc;
  };
  auto visible = [&](int j) {
    const int right = s.causal ? 0 : int(s.window_right);
    return (right < 0 || j <= i + shift + right) && (s.window_left < 0 || j >= i + shift - s.window_left);
  };
  float m = -INFINITY;
  for (int j = 0; j < lk; ++j)
    if (visible(j)) m = fmaxf(m, score(j));
  float l = 0.f;
  const int64_t out = (cu_q ? int64_t(q0 + i) * s.heads_q + h : (int64_t(b) * s.seqlen_q + i) * s.heads_q + h) * D;
  for (int d = 0; d < D; ++d) o[out + d] = 0.f;
  for (int j = 0; j < lk; ++j) {
    if (!visible(j)) continue;
    const float e = expf(score(j) - m);
    l += e;
    for (int d = 0; d < D; ++d) o[out + d] += e * load<T>(p.v.data, at(p.v, b, k0 + j, hk) + d);
  }
  for (int d = 0; d < D; ++d) o[out + d] = l > 0.f ? o[out + d] / l : 0.f;
  const int64_t at_lse = cu_q ? int64_t(h) * s.total_q + q0 + i : (int64_t(b) * s.heads_q + h) * s.seqlen_q + i;
  lse[at_lse] = l > 0.f ? m + logf(l) : -INFINITY;
}

template <class T>
std::vector<T> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(rng));
  return v;
}

template <class T>
float to_float(T x) {
  return float(x);
}

template <class T>
bool check(const Case& c, std::mt19937& rng) {
  Shape s;
  s.dtype = c.fp16 ? tigon::DType::kFloat16 : tigon::DType::kBFloat16;
  s.heads_q = c.hq, s.heads_kv = c.hkv, s.head_dim = c.d, s.scale = 1.f / std::sqrt(float(c.d));
  s.softcap = c.softcap, s.causal = c.causal, s.window_left = c.left, s.window_right = c.causal ? 0 : c.right;
  s.batch = c.batch, s.seqlen_q = c.sq, s.seqlen_k = c.sk;
  std::vector<int> cu_q{0}, cu_k{0};
  if (c.varlen) {  // lengths from 1 to the bound, one empty key side
    for (int b = 0; b < c.batch; ++b) {
      cu_q.push_back(cu_q.back() + 1 + int(rng() % c.sq));
      cu_k.push_back(cu_k.back() + (b == 1 ? 0 : 1 + int(rng() % c.sk)));
    }
    s.total_q = cu_q.back(), s.total_k = cu_k.back();
  }
  const int64_t rq = c.varlen ? s.total_q : int64_t(c.batch) * c.sq,
                rk = c.varlen ? s.total_k : int64_t(c.batch) * c.sk;
  auto hq = random_vector<T>(rq * c.hq * c.d, rng), hk = random_vector<T>(rk * c.hkv * c.d, rng),
       hv = random_vector<T>(rk * c.hkv * c.d, rng);
  T *q, *k, *v, *o;
  float *lse, *ro, *rlse;
  int *dcq = nullptr, *dck = nullptr;
  const int64_t lse_n = rq * c.hq;
  CHECK(cudaMalloc(&q, hq.size() * sizeof(T)));
  CHECK(cudaMalloc(&k, hk.size() * sizeof(T) + 16));
  CHECK(cudaMalloc(&v, hv.size() * sizeof(T) + 16));
  CHECK(cudaMalloc(&o, hq.size() * sizeof(T)));
  CHECK(cudaMalloc(&ro, hq.size() * sizeof(float)));
  CHECK(cudaMalloc(&lse, lse_n * sizeof(float)));
  CHECK(cudaMalloc(&rlse, lse_n * sizeof(float)));
  CHECK(cudaMemcpy(q, hq.data(), hq.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, hk.data(), hk.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, hv.data(), hv.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(o, 0, hq.size() * sizeof(T)));
  if (c.varlen) {
    CHECK(cudaMalloc(&dcq, cu_q.size() * sizeof(int)));
    CHECK(cudaMalloc(&dck, cu_k.size() * sizeof(int)));
    CHECK(cudaMemcpy(dcq, cu_q.data(), cu_q.size() * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dck, cu_k.data(), cu_k.size() * sizeof(int), cudaMemcpyHostToDevice));
    s.cu_seqlens_q = dcq, s.cu_seqlens_k = dck;
  }
  FwdProblem p;
  p.s = s;
  auto dense = [&](void* data, int64_t seq, int h) {
    return tigon::attention::Tensor4{data, c.varlen ? 0 : seq * h * c.d, int64_t(h) * c.d, c.d};
  };
  p.q = dense(q, c.sq, c.hq), p.k = dense(k, c.sk, c.hkv), p.v = dense(v, c.sk, c.hkv), p.o = dense(o, c.sq, c.hq);
  p.lse = lse;
  tigon::attention::fwd_cuda(p, nullptr, 0, nullptr);
  CHECK(cudaGetLastError());
  const int64_t rows = int64_t(c.batch) * c.hq * c.sq;
  naive_fwd<T><<<unsigned((rows + 127) / 128), 128>>>(p, dcq, dck, ro, rlse);
  CHECK(cudaDeviceSynchronize());
  std::vector<T> got(hq.size());
  std::vector<float> want(hq.size()), got_lse(lse_n), want_lse(lse_n);
  CHECK(cudaMemcpy(got.data(), o, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), ro, want.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_lse.data(), lse, lse_n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want_lse.data(), rlse, lse_n * sizeof(float), cudaMemcpyDeviceToHost));
  double err_o = 0, err_lse = 0;
  for (size_t i = 0; i < got.size(); ++i) err_o = std::fmax(err_o, std::fabs(to_float(got[i]) - want[i]));
  for (int64_t i = 0; i < lse_n; ++i) {
    const bool both_inf = std::isinf(got_lse[i]) && std::isinf(want_lse[i]) && got_lse[i] < 0 && want_lse[i] < 0;
    if (!both_inf) err_lse = std::fmax(err_lse, std::fabs(got_lse[i] - want_lse[i]));
  }
  const bool ok = err_o < (c.fp16 ? 4e-3 : 2e-2) && err_lse < 1e-3;
  std::printf("%-28s max |o - ref| %.2e  max |lse - ref| %.2e  %s\n", c.name, err_o, err_lse, ok ? "ok" : "FAIL");
  for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)ro, (void*)lse, (void*)rlse, (void*)dcq, (void*)dck})
    cudaFree(ptr);
  return ok;
}

void bench(int d, bool causal) {
  const int B = 2, H = 16, S = 8192;
  Shape s;
  s.dtype = tigon::DType::kBFloat16;
  s.batch = B, s.seqlen_q = S, s.seqlen_k = S, s.heads_q = H, s.heads_kv = H, s.head_dim = d;
  s.scale = 1.f / std::sqrt(float(d)), s.causal = causal, s.window_right = causal ? 0 : -1;
  const size_t n = size_t(B) * S * H * d;
  std::mt19937 rng(1);
  auto host = random_vector<__nv_bfloat16>(n, rng);
  __nv_bfloat16 *q, *k, *v, *o;
  float* lse;
  for (auto** ptr : {&q, &k, &v, &o}) CHECK(cudaMalloc(ptr, n * 2));
  for (auto* ptr : {q, k, v}) CHECK(cudaMemcpy(ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&lse, size_t(B) * H * S * 4));
  FwdProblem p;
  p.s = s;
  auto t4 = [&](void* data) { return tigon::attention::Tensor4{data, int64_t(S) * H * d, int64_t(H) * d, d}; };
  p.q = t4(q), p.k = t4(k), p.v = t4(v), p.o = t4(o), p.lse = lse;
  const float us = time_us([&] { tigon::attention::fwd_cuda(p, nullptr, 0, nullptr); });
  const double flops = 4.0 * B * H * double(S) * S * d * (causal ? 0.5 : 1.0);
  std::printf("bf16 B=%d H=%d S=%d D=%-3d %-6s %8.1f us  %6.1f TFLOP/s\n", B, H, S, d, causal ? "causal" : "full", us,
              flops / us * 1e-6);
  for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)lse}) cudaFree(ptr);
}

}  // namespace

int main() {
  std::mt19937 rng(0);
  const Case cases[] = {
      {"d64 full Sq<Sk gqa", 2, 200, 333, 4, 2, 64},
      {"d96 causal Sq>Sk", 2, 333, 200, 4, 4, 96, true},
      {"d128 causal Sq<Sk mqa", 3, 131, 517, 6, 1, 128, true},
      {"d128 window(77,9)", 2, 400, 400, 2, 2, 128, false, 77, 9},
      {"d128 causal window 100", 2, 513, 700, 2, 1, 128, true, 100},
      {"d256 full softcap 30", 2, 190, 250, 2, 2, 256, false, -1, -1, 30.f},
      {"d128 varlen causal", 4, 300, 400, 4, 2, 128, true, -1, -1, 0.f, true},
      {"d64 varlen full fp16", 4, 150, 260, 2, 1, 64, false, -1, -1, 0.f, true, true},
      {"d128 full fp16", 1, 1000, 1000, 2, 2, 128, false, -1, -1, 0.f, false, true},
  };
  bool ok = true;
  for (const Case& c : cases) ok &= c.fp16 ? check<__half>(c, rng) : check<__nv_bfloat16>(c, rng);
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) bench(d, causal);
  return ok ? 0 : 1;
}
