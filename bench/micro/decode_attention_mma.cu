// A tensor-core decode attention kernel, standalone, against the library's (tigon_decode_attention) and an fp64 CPU
// loop: the candidate to replace the CUDA-core kernel, whose instruction count per byte bounds it at ~40% of the copy
// rate (docs/performance/decode.md). Diagnostic only, not part of the library.
//
// The design, per warp (4 warps to a block, each an independent piece of work: no block barrier):
//  - one (sequence, key/value head, chunk of the cache) and up to 16 query rows of that head's group (query heads x
//    new tokens), padded to the 16 rows of an mma m16n8k16 tile; the rows' q stays in registers as A fragments;
//  - K and V stream through a 3-stage ring of 16-key tiles in the warp's own shared memory (cp.async, zero-filled
//    past the chunk, 16-byte chunks XOR-swizzled by row so ldmatrix is conflict-free);
//  - S = Q Kᵀ: ldmatrix gives Kᵀ's B fragments directly (a K row is a column of Kᵀ); P V: ldmatrix.trans gives V's;
//    P goes from S's accumulators to A fragments in registers (the flash-attention reuse);
//  - an fp32 online softmax per row (4 lanes share a row: two shuffles per max), masks as the library's;
//  - each warp writes its chunk's normalised output and lse; the library's combine pass merges them in chunk order.
// The split plan fills one wave: warps in flight = 8 per multiprocessor (two blocks of 96 KB of shared memory).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude -Lbuild -ltigon -Xlinker -rpath=build \
//     -o build/decode_attention_mma bench/micro/decode_attention_mma.cu
//   build/decode_attention_mma            (bf16, D 128, Hq 32 / Hkv 8: batch 8 and 1 at 8k, then odd cases)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "decode_attention/decode_attention_kernels.cuh"
#include "micro_util.cuh"
#include "tigon/decode_attention.h"

namespace {

constexpr int kWarps = 4, kStages = 3, kTileKeys = 16;
constexpr float kLog2e = 1.4426950408889634f;

using tigon::decode_attention::kern::Args;  // the library's arguments, so its combine pass merges the chunks

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Byte offset of 16-byte chunk c of row r in a [rows][D / 8 chunks] tile: chunks XOR-swizzled by r mod 8.
template <int D>
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
  return uint32_t(r * D * 2 + ((c ^ (r & 7)) * 16));
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32) decode_mma(const Args a) {
  constexpr int kChunks = D / 8, kTileBytes = kTileKeys * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int64_t unit = int64_t(blockIdx.x) * kWarps + warp;  // (split, row block, kv head, sequence), split fastest
  const int units = a.batch * a.heads_kv * a.row_blocks * a.splits;
  if (unit >= units) return;
  const int split = int(unit % a.splits), rb = int(unit / a.splits % a.row_blocks);
  const int hkv = int(unit / (int64_t(a.splits) * a.row_blocks) % a.heads_kv);
  const int b = int(unit / (int64_t(a.splits) * a.row_blocks * a.heads_kv));
  unsigned char* ring = smem + warp * kStages * 2 * kTileBytes;  // [stage][K tile, V tile]
  const uint32_t ring_s = smem_addr(ring);

  const auto* q = static_cast<const __nv_bfloat16*>(a.q);
  const int len = min(max(a.seqlens[b], 0), a.s_max), first_pos = len - a.tq;
  // This thread's two rows (g, g + 8) of the 16: query head and new token, or invalid (zero q, never written).
  int pos[2];
  bool ok[2];
  const __nv_bfloat16* qrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = rb * 16 + g + 8 * h;
    ok[h] = rr < a.group * a.tq;
    const int head = hkv * a.group + (ok[h] ? rr / a.tq : 0), tok = ok[h] ? rr % a.tq : 0;
    pos[h] = first_pos + tok;
    qrow[h] = q + b * a.q_b + tok * a.q_t + head * a.q_h;
  }
  // Q as A fragments, one per 16 dims: {row g, dims 2tig..+1}, {g + 8, same}, {g, +8}, {g + 8, +8}.
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = i & 1, d = kk * 16 + 2 * tig + (i >> 1) * 8;
      qf[kk][i] = ok[h] ? *reinterpret_cast<const uint32_t*>(qrow[h] + d) : 0u;
    }

  int lo = split * a.chunk, hi = min(lo + a.chunk, len);
  if (a.window_left >= 0) lo = max(lo, first_pos - a.window_left);
  lo = max(lo, 0);
  const int tiles = hi > lo ? (hi - lo + kTileKeys - 1) / kTileKeys : 0;
  const __nv_bfloat16* kb = static_cast<const __nv_bfloat16*>(a.k) + b * a.k_b + hkv * a.k_h;
  const __nv_bfloat16* vb = static_cast<const __nv_bfloat16*>(a.v) + b * a.v_b + hkv * a.v_h;

  // Tile t's K and V into stage t % kStages: 16 rows x kChunks chunks each, kChunks / 2 per lane per matrix.
  auto load_tile = [&](int t) {
    const uint32_t st = ring_s + (t % kStages) * 2 * kTileBytes;
#pragma unroll
    for (int i = 0; i < kTileKeys * kChunks / 32; ++i) {
      const int idx = i * 32 + lane, r = idx / kChunks, c = idx % kChunks, j = lo + t * kTileKeys + r;
      const bool valid = j < hi;
      const int jj = valid ? j : lo;
      cp_async16(st + tile_off<D>(r, c), kb + int64_t(jj) * a.k_s + c * 8, valid);
      cp_async16(st + kTileBytes + tile_off<D>(r, c), vb + int64_t(jj) * a.v_s + c * 8, valid);
    }
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < tiles) load_tile(t);
    asm volatile("cp.async.commit_group;\n" ::);
  }

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int t = 0; t < tiles; ++t) {
    if (t + kStages - 1 < tiles) load_tile(t + kStages - 1);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));
    __syncwarp();
    const uint32_t ks = ring_s + (t % kStages) * 2 * kTileBytes, vs = ks + kTileBytes;

    // S = Q Kᵀ for the tile's 16 keys: two n-blocks of 8 keys; an x4 ldmatrix covers 32 dims of one n-block.
    float s[2][4] = {};
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t r[4];
        const int mat = lane / 8, row = nb * 8 + lane % 8;
        ldsm_x4(ks + tile_off<D>(row, 2 * kk + mat), r);
        mma(s[nb], qf[kk], r[0], r[1]);
        mma(s[nb], qf[kk + 1], r[2], r[3]);
      }

    // Masks and the online softmax. Element e of s[nb]: row g + 8 * (e / 2), key nb * 8 + 2 * tig + e % 2.
    const int key0 = lo + t * kTileKeys;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, j = key0 + nb * 8 + 2 * tig + e % 2;
        const bool vis = ok[h] && j < hi && j <= pos[h] && (a.window_left < 0 || j >= pos[h] - a.window_left);
        float x = s[nb][e] * a.scale;
        if (a.softcap > 0.f) x = a.softcap * tanhf(x / a.softcap);
        s[nb][e] = vis ? x * kLog2e : -INFINITY;
        mx[h] = fmaxf(mx[h], s[nb][e]);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float base = mx[h] == -INFINITY ? 0.f : mx[h];  // nothing visible yet: zeros, no NaN
      alpha[h] = exp2f(m[h] - base);
      m[h] = mx[h];
      l[h] *= alpha[h];
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[nb][e] = exp2f(s[nb][e] - base);
          l[h] += s[nb][e];
        }
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      o[nd][0] *= alpha[0], o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1], o[nd][3] *= alpha[1];
    }

    // O += P V: P's A fragment from the accumulators; an x4 ldmatrix.trans covers 2 n-blocks of 8 dims.
    const uint32_t pf[4] = {pack_bf16(s[0][0], s[0][1]), pack_bf16(s[0][2], s[0][3]), pack_bf16(s[1][0], s[1][1]),
                            pack_bf16(s[1][2], s[1][3])};
#pragma unroll
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t r[4];
      const int mat = lane / 8, row = (mat & 1) * 8 + lane % 8;
      ldsm_x4_t(vs + tile_off<D>(row, nd + (mat >> 1)), r);
      mma(o[nd], pf, r[0], r[1]);
      mma(o[nd + 1], pf, r[2], r[3]);
    }
    __syncwarp();  // every lane done with this stage before a later iteration refills it
  }
  asm volatile("cp.async.wait_group 0;\n" ::);

  // The chunk's normalised output and lse per row (the row sum over the quad first).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!ok[h]) continue;
    const int rr = rb * 16 + g + 8 * h, head = hkv * a.group + rr / a.tq, tok = rr % a.tq;
    const int64_t row = (int64_t(b) * a.heads_q + head) * a.tq + tok;
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
    const float lse = l[h] > 0.f ? (m[h] + log2f(l[h])) / kLog2e : -INFINITY;
    if (a.splits == 1) {
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out) + b * a.o_b + tok * a.o_t + head * a.o_h;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd)
        *reinterpret_cast<uint32_t*>(out + nd * 8 + 2 * tig) = pack_bf16(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
    } else {
      float* po = a.part_out + (row * a.splits + split) * D;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd)
        *reinterpret_cast<float2*>(po + nd * 8 + 2 * tig) = make_float2(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
      if (tig == 0) a.part_lse[row * a.splits + split] = lse;
    }
  }
}

// A contiguous CUDA tensor of the C API (shape kept alive beside it).
struct Tensor {
  std::vector<int64_t> shape;
  tigon_tensor t{};
  Tensor(void* data, std::vector<int64_t> dims, tigon_dtype dt) : shape(std::move(dims)) {
    t.data = data;
    t.device = {TIGON_DEVICE_CUDA, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dt;
    t.shape = shape.data();
  }
  operator const tigon_tensor*() const { return &t; }
};
void expect_ok(tigon_status_t st) {
  if (st != TIGON_SUCCESS) {
    std::fprintf(stderr, "tigon: %s\n", tigon_last_error());
    std::exit(1);
  }
}
constexpr tigon_dtype kBf16{TIGON_DTYPE_CODE_BFLOAT, 16, 1}, kInt32{TIGON_DTYPE_CODE_INT, 32, 1};

struct Problem {
  int batch, tq, hq, hkv, d, s_max;
  std::vector<int> lens;
  float softcap = 0.f;
  int window = -1;
};

// Splits so that one wave of warps (8 per multiprocessor) covers every (sequence, head, row block, chunk).
void plan(Args& a, int sms) {
  const int pairs = a.batch * a.heads_kv * a.row_blocks, in_flight = sms * 2 * kWarps;
  int splits = std::max(1, in_flight / pairs);
  int chunk = (a.s_max + splits - 1) / splits;
  chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  a.chunk = std::max(chunk, kTileKeys);
  a.splits = (a.s_max + a.chunk - 1) / a.chunk;
}

void run(const Problem& p, bool check, int sms) {
  const int D = p.d;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t nq = size_t(p.batch) * p.tq * p.hq * D, nk = size_t(p.batch) * p.s_max * p.hkv * D;
  std::vector<__nv_bfloat16> hq(nq), hk(nk), hv(nk);
  for (auto& x : hq) x = __float2bfloat16_rn(nd(rng));
  for (auto& x : hk) x = __float2bfloat16_rn(nd(rng));
  for (auto& x : hv) x = __float2bfloat16_rn(nd(rng));
  // Copies of the cache cycled through, so the timed calls read from memory, not from the 60 MB L2.
  const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / (2 * nk * 2) + 1));
  __nv_bfloat16 *dq, *dk, *dv, *dout, *dref;
  int32_t* dlens;
  CHECK(cudaMalloc(&dq, nq * 2));
  CHECK(cudaMalloc(&dk, nk * 2 * copies));
  CHECK(cudaMalloc(&dv, nk * 2 * copies));
  CHECK(cudaMalloc(&dout, nq * 2));
  CHECK(cudaMalloc(&dref, nq * 2));
  CHECK(cudaMalloc(&dlens, p.batch * 4));
  CHECK(cudaMemcpy(dq, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  for (int c = 0; c < copies; ++c) {
    CHECK(cudaMemcpy(dk + c * nk, hk.data(), nk * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv + c * nk, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMemcpy(dlens, p.lens.data(), p.batch * 4, cudaMemcpyHostToDevice));

  Args a{};
  a.q = dq, a.seqlens = dlens, a.out = dout;
  a.q_h = D, a.q_t = int64_t(p.hq) * D, a.q_b = a.q_t * p.tq;
  a.k_h = a.v_h = D, a.k_s = a.v_s = int64_t(p.hkv) * D, a.k_b = a.v_b = a.k_s * p.s_max;
  a.o_b = a.q_b, a.o_t = a.q_t, a.o_h = a.q_h;
  a.batch = p.batch, a.tq = p.tq, a.heads_q = p.hq, a.heads_kv = p.hkv, a.group = p.hq / p.hkv, a.s_max = p.s_max;
  a.row_blocks = (a.group * p.tq + 15) / 16;
  a.scale = 1.f / std::sqrt(float(D)), a.softcap = p.softcap, a.window_left = p.window;
  plan(a, sms);
  const int64_t rows = int64_t(p.batch) * p.hq * p.tq;
  CHECK(cudaMalloc(&a.part_out, rows * a.splits * D * 4));
  CHECK(cudaMalloc(&a.part_lse, rows * a.splits * 4));
  const int64_t units = int64_t(p.batch) * p.hkv * a.row_blocks * a.splits;
  const int blocks = int((units + kWarps - 1) / kWarps);
  const int smem = kWarps * kStages * 2 * kTileKeys * D * 2;
  auto kernel = D == 128 ? decode_mma<128> : decode_mma<64>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int copy = 0;
  auto launch = [&] {
    a.k = dk + (copy % copies) * nk, a.v = dv + (copy % copies) * nk;
    ++copy;
    kernel<<<blocks, kWarps * 32, smem>>>(a);
    namespace kern = tigon::decode_attention::kern;
    if (a.splits > 1)
      (D == 128 ? kern::combine<__nv_bfloat16, 128> : kern::combine<__nv_bfloat16, 64>)<<<unsigned(rows), D>>>(a);
  };

  // The library's kernel on the same inputs, through its C API.
  const Tensor tq_(dq, {p.batch, p.tq, p.hq, D}, kBf16);
  const Tensor tout(dref, {p.batch, p.tq, p.hq, D}, kBf16);
  const Tensor tlens(dlens, {p.batch}, kInt32);
  const tigon_decode_attention_params prm{a.scale, p.softcap, p.window};
  size_t ws_bytes = 0;
  {
    const Tensor tk(dk, {p.batch, p.s_max, p.hkv, D}, kBf16);
    expect_ok(tigon_decode_attention_workspace_size(tq_, tk, tk, prm, &ws_bytes));
  }
  void* ws = nullptr;
  if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes));
  int lib_copy = 0;
  auto launch_lib = [&] {
    const size_t off = (lib_copy++ % copies) * nk;
    const Tensor tk(dk + off, {p.batch, p.s_max, p.hkv, D}, kBf16);
    const Tensor tv(dv + off, {p.batch, p.s_max, p.hkv, D}, kBf16);
    expect_ok(tigon_decode_attention(tq_, tk, tv, tlens, nullptr, tout, nullptr, prm, ws, ws_bytes, nullptr));
  };

  copy = 0;
  launch();
  launch_lib();
  CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> got(nq), lib(nq);
  CHECK(cudaMemcpy(got.data(), dout, nq * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(lib.data(), dref, nq * 2, cudaMemcpyDeviceToHost));
  double worst = 0, worst_lib = 0;
  if (check) {  // fp64 loop over every row
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.hq; ++h)
        for (int t = 0; t < p.tq; ++t) {
          const int hk_ = h / (p.hq / p.hkv), L = std::min(std::max(p.lens[b], 0), p.s_max), i = L - p.tq + t;
          const __nv_bfloat16* qr = &hq[((size_t(b) * p.tq + t) * p.hq + h) * D];
          std::vector<double> sc;
          std::vector<int> js;
          double mx = -INFINITY;
          for (int j = 0; j < L; ++j) {
            if (j > i || (p.window >= 0 && j < i - p.window)) continue;
            const __nv_bfloat16* kr = &hk[((size_t(b) * p.s_max + j) * p.hkv + hk_) * D];
            double x = 0;
            for (int d = 0; d < D; ++d) x += double(__bfloat162float(qr[d])) * __bfloat162float(kr[d]);
            x *= a.scale;
            if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
            sc.push_back(x), js.push_back(j), mx = std::max(mx, x);
          }
          double sum = 0;
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int d = 0; d < D; ++d) {
            double acc = 0;
            for (size_t n = 0; n < js.size(); ++n)
              acc += sc[n] * __bfloat162float(hv[((size_t(b) * p.s_max + js[n]) * p.hkv + hk_) * D + d]);
            const double ref = sum > 0 ? acc / sum : 0;
            const size_t at = ((size_t(b) * p.tq + t) * p.hq + h) * D + d;
            worst = std::max(worst, std::fabs(__bfloat162float(got[at]) - ref) / (1e-2 + 1e-2 * std::fabs(ref)));
            worst_lib =
                std::max(worst_lib, std::fabs(__bfloat162float(lib[at]) - ref) / (1e-2 + 1e-2 * std::fabs(ref)));
          }
        }
  }
  const float us = time_us(launch, 50), us_lib = time_us(launch_lib, 50);
  double bytes = 0;
  for (int b = 0; b < p.batch; ++b) bytes += 2.0 * std::min(std::max(p.lens[b], 0), p.s_max) * p.hkv * D * 2;
  std::printf(
      "B %d Tq %d Hq %d Hkv %d D %d S %d softcap %g window %d | splits %d chunk %d blocks %d | "
      "mma %.1f us (%.2f TB/s) library %.1f us (%.2f TB/s)%s",
      p.batch, p.tq, p.hq, p.hkv, D, p.s_max, p.softcap, p.window, a.splits, a.chunk, blocks, us, bytes / us * 1e-6,
      us_lib, bytes / us_lib * 1e-6, check ? "" : "\n");
  if (check) std::printf(" | worst err/tol: mma %.3f library %.3f %s\n", worst, worst_lib, worst <= 1 ? "ok" : "FAIL");
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dref), cudaFree(dlens);
  cudaFree(a.part_out), cudaFree(a.part_lse), cudaFree(ws);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  run({8, 1, 32, 8, 128, 8192, std::vector<int>(8, 8192)}, true, sms);
  run({1, 1, 32, 8, 128, 8192, {8192}}, true, sms);
  run({32, 1, 32, 8, 128, 4096, std::vector<int>(32, 4096)}, false, sms);
  run({4, 3, 16, 2, 128, 1000, {1000, 3, 517, 0}}, true, sms);  // tq 3, 24 rows: 2 row blocks
  run({2, 1, 8, 4, 64, 700, {700, 65}, 30.f, 100}, true, sms);  // D 64, softcap, window
  run({3, 2, 32, 32, 128, 300, {300, 1, 2}}, true, sms);        // MHA, L < tq
  return 0;
}
