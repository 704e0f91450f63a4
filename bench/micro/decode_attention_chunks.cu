// How long a chunk of the cache each warp of the tensor-core decode attention should take: the kernel and its
// combine (src/decode_attention/, launched as the library launches them, each a programmatic dependent of the one
// before) at chunks of 64 to 1024 keys, Llama-3-8B's heads (Hq 32 / Hkv 8, D 128, bf16) at 8k context, batch 1 and 8.
// The library takes chunks of at least 128 keys (one wave of warps); batch 1 at 8k misses its 20 us target by about
// 1 us, and 64 -> 128 was 12% faster there (docs/performance/decode.md). Copies of the cache are rotated past the L2
// (batch 1's 33.6 MB would stay in it); each output is compared with the one-chunk result. Diagnostic only, not part
// of the library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA -Isrc -Iinclude \
//     -o build/decode_attention_chunks bench/micro/decode_attention_chunks.cu
//   build/decode_attention_chunks
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/cluster_launch.h"
#include "decode_attention/decode_attention_mma.cuh"
#include "micro_util.cuh"

namespace {

namespace da = tigon::decode_attention;
using T = __nv_bfloat16;
constexpr int kD = 128, kHq = 32, kHkv = 8, kContext = 8192;
constexpr int kCopies = 4;  // caches rotated: 4 x 33.6 MB at batch 1 is past the 50 MB L2

struct Buffers {
  T* q = nullptr;
  T* out = nullptr;
  std::vector<T*> k, v;
  int32_t* lens = nullptr;
  float* part = nullptr;  // part_out, then part_lse
};

da::kern::Args args_for(const Buffers& b, int batch, int copy, int chunk) {
  da::kern::Args a{};
  const int splits = (kContext + chunk - 1) / chunk;
  a.q = b.q, a.k = b.k[copy], a.v = b.v[copy], a.seqlens = b.lens, a.out = b.out;
  a.part_out = splits > 1 ? b.part : nullptr;
  a.part_lse = splits > 1 ? b.part + int64_t(batch) * kHq * splits * kD : nullptr;
  a.q_b = kHq * kD, a.q_t = kHq * kD, a.q_h = kD;                        // q [batch, 1, Hq, D]
  a.k_b = int64_t(kContext) * kHkv * kD, a.k_s = kHkv * kD, a.k_h = kD;  // cache [batch, S, Hkv, D]
  a.v_b = a.k_b, a.v_s = a.k_s, a.v_h = a.k_h;
  a.o_b = kHq * kD, a.o_t = kHq * kD, a.o_h = kD;
  a.batch = batch, a.tq = 1, a.heads_q = kHq, a.heads_kv = kHkv, a.group = kHq / kHkv, a.s_max = kContext;
  a.splits = splits, a.chunk = chunk;
  a.row_blocks = (a.group + da::mma::kRows - 1) / da::mma::kRows;
  a.scale = 1.f / std::sqrt(float(kD)), a.softcap = 0.f, a.window_left = -1;
  return a;
}

void launch(const da::kern::Args& a, cudaStream_t st) {
  const int64_t units = int64_t(a.batch) * a.heads_kv * a.row_blocks * a.splits;
  tigon::cuda::launch_pdl(dim3(unsigned((units + da::mma::kWarps - 1) / da::mma::kWarps)), dim3(da::mma::kWarps * 32),
                          da::mma::smem_bytes<kD>(), st, da::mma::decode<T, kD>, a);
  if (a.part_out)
    tigon::cuda::launch_pdl(dim3(unsigned(int64_t(a.batch) * a.heads_q)), dim3(kD), 0, st, da::kern::combine<T, kD>, a);
}

}  // namespace

int main() {
  CHECK(cudaFuncSetAttribute(da::mma::decode<T, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             da::mma::smem_bytes<kD>()));
  std::printf(
      "decode_attention_chunks: bf16, Hq %d / Hkv %d, D %d, context %d, %d SMs; us per call (4 calls of "
      "rotated caches timed together), TB/s of K and V, '!': differs from one chunk\n",
      kHq, kHkv, kD, kContext, device_sms());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  bool ok = true;
  for (int batch : {1, 8}) {
    Buffers b;
    const size_t cache = size_t(batch) * kContext * kHkv * kD, qn = size_t(batch) * kHq * kD;
    std::vector<T> h(cache);
    for (auto& x : h) x = __float2bfloat16(nd(rng));
    for (int c = 0; c < kCopies; ++c) {
      T *k, *v;
      CHECK(cudaMalloc(&k, cache * sizeof(T)));
      CHECK(cudaMalloc(&v, cache * sizeof(T)));
      CHECK(cudaMemcpy(k, h.data(), cache * sizeof(T), cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(v, h.data(), cache * sizeof(T), cudaMemcpyHostToDevice));
      b.k.push_back(k), b.v.push_back(v);
    }
    std::vector<T> hq(qn);
    for (auto& x : hq) x = __float2bfloat16(nd(rng));
    std::vector<int32_t> lens(batch, kContext);
    CHECK(cudaMalloc(&b.q, qn * sizeof(T)));
    CHECK(cudaMalloc(&b.out, qn * sizeof(T)));
    CHECK(cudaMalloc(&b.lens, batch * sizeof(int32_t)));
    CHECK(cudaMalloc(&b.part, size_t(batch) * kHq * (kContext / 64) * (kD + 1) * sizeof(float)));
    CHECK(cudaMemcpy(b.q, hq.data(), qn * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.lens, lens.data(), batch * sizeof(int32_t), cudaMemcpyHostToDevice));
    launch(args_for(b, batch, 0, kContext), nullptr);  // one chunk: the reference
    const std::vector<float> ref = read_floats(b.out, qn);
    const double mb = 2.0 * cache * sizeof(T) * 1e-6;
    std::printf("batch %d:", batch);
    for (int chunk : {64, 128, 256, 512, 1024, kContext}) {
      const float us = time_us(
                           [&] {
                             for (int c = 0; c < kCopies; ++c) launch(args_for(b, batch, c, chunk), nullptr);
                           },
                           20) /
                       kCopies;
      launch(args_for(b, batch, 0, chunk), nullptr);
      const std::vector<float> got = read_floats(b.out, qn);
      bool bad = false;
      for (size_t i = 0; i < qn; ++i) bad = bad || !(std::fabs(got[i] - ref[i]) <= 1e-2 * (0.05 + std::fabs(ref[i])));
      ok = ok && !bad;
      std::printf("  %d keys: %.1f us %.2f TB/s%s", chunk, us, mb / us, bad ? "!" : "");
    }
    std::printf("\n");
    for (T* p : b.k) CHECK(cudaFree(p));
    for (T* p : b.v) CHECK(cudaFree(p));
    for (void* p :
         {static_cast<void*>(b.q), static_cast<void*>(b.out), static_cast<void*>(b.lens), static_cast<void*>(b.part)})
      CHECK(cudaFree(p));
  }
  std::printf("%s\n", ok ? "all chunk sizes match one chunk" : "SOME CHUNK SIZES DIFFER");
  return ok ? 0 : 1;
}
