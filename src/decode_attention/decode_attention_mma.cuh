// Decode attention on tensor cores (head_dim 64 and 128); included by decode_attention_cuda.cu only.
//
// The CUDA-core kernel (decode_attention_kernels.cuh) spends ~450 instructions per lane per 128 bytes of K and V, so
// its issue slots, not the memory, bound it (docs/performance/decode.md). Here the scores and the output run on
// mma.sync m16n8k16, and each warp is an independent unit of work (no block barrier):
//  - one (sequence, key/value head, block of 16 query rows of its group, chunk of the cache); the rows are query
//    heads x new tokens, padded to the tile's 16; their q stays in registers as A fragments for the whole chunk;
//  - K and V stream through a 3-stage ring of 16-key tiles in the warp's own shared memory (cp.async, zero-filled
//    past the chunk; 16-byte chunks XOR-swizzled by row so ldmatrix meets no bank conflict);
//  - S = Q Kᵀ takes Kᵀ's B fragments straight from ldmatrix (a K row is a column of Kᵀ), P V takes V's from
//    ldmatrix.trans, and P goes from S's accumulators to A fragments in registers, rounded to the input dtype;
//  - an fp32 online softmax per row (a row's 4 lanes share their max with two shuffles); masks as the CUDA-core
//    kernel's (length, causal order of the new tokens, window, left padding);
//  - each warp writes its chunk's normalised output and lse, which kern::combine merges in chunk order (one chunk:
//    out and lse directly).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"
#include "common/warp_mma.cuh"
#include "decode_attention/decode_attention_kernels.cuh"

namespace tigon::decode_attention::mma {

constexpr int kWarps = 4;      // per block: 4 independent units
constexpr int kStages = 3;     // K/V tiles in flight per warp
constexpr int kTileKeys = 16;  // keys per tile: one mma k-step of P V
constexpr int kRows = 16;      // query rows per unit: the mma tile's M

template <int D>
constexpr int smem_bytes() {
  return kWarps * kStages * 2 * kTileKeys * D * 2;
}

// Byte offset of 16-byte chunk c of row r in a [rows][D / 8 chunks] tile: chunks XOR-swizzled by r mod 8, which
// keeps every chunk inside its row for D / 8 a multiple of 8 (D 64 and 128).
template <int D>
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
  static_assert(D % 64 == 0, "the swizzle needs 8 or more 16-byte chunks per row, in multiples of 8");
  return uint32_t(r * D * 2 + ((c ^ (r & 7)) * 16));
}

// grid: ceil(units / kWarps) blocks of kWarps * 32 threads, units = batch * heads_kv * row_blocks * splits.
template <class T, int D>
__global__ void __launch_bounds__(kWarps * 32) decode(const kern::Args a) {
  constexpr int kChunks = D / 8, kTileBytes = kTileKeys * D * 2;
  constexpr float kLog2e = kern::kLog2e;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int64_t unit = int64_t(blockIdx.x) * kWarps + warp;  // (split, row block, kv head, sequence), split fastest
  if (unit >= int64_t(a.batch) * a.heads_kv * a.row_blocks * a.splits) return;
  const int split = int(unit % a.splits), rb = int(unit / a.splits % a.row_blocks);
  const int hkv = int(unit / (int64_t(a.splits) * a.row_blocks) % a.heads_kv);
  const int b = int(unit / (int64_t(a.splits) * a.row_blocks * a.heads_kv));
  const uint32_t ring = cuda::smem_addr(smem + warp * kStages * 2 * kTileBytes);  // [stage][K tile, V tile]
  // Launched as a programmatic dependent: the lengths, q and the cache's new rows come from the kernels ahead.
  cuda::grid_dependency_wait();

  const int len = min(max(a.seqlens[b], 0), a.s_max), first_pos = len - a.tq;
  const int start = a.starts ? min(max(a.starts[b], 0), len) : 0;  // keys before it (left padding) stay hidden
  // This lane's two rows (g and g + 8) of the 16: query head and new token, or invalid (zero q, never written).
  int pos[2];
  bool ok[2];
  const T* qrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = rb * kRows + g + 8 * h;
    ok[h] = rr < a.group * a.tq;
    const int head = hkv * a.group + (ok[h] ? rr / a.tq : 0), tok = ok[h] ? rr % a.tq : 0;
    pos[h] = first_pos + tok;
    qrow[h] = static_cast<const T*>(a.q) + b * a.q_b + tok * a.q_t + head * a.q_h;
  }
  // Q as A fragments, one per 16 dims: {row g, dims 2 tig, +1}, {row g + 8, same}, {row g, +8}, {row g + 8, +8}.
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = i & 1, d = kk * 16 + 2 * tig + (i >> 1) * 8;
      qf[kk][i] = ok[h] ? *reinterpret_cast<const uint32_t*>(qrow[h] + d) : 0u;
    }

  int lo = max(split * a.chunk, start);
  const int hi = min(split * a.chunk + a.chunk, len);
  if (a.window_left >= 0) lo = max(lo, first_pos - a.window_left);
  const int tiles = hi > lo ? (hi - lo + kTileKeys - 1) / kTileKeys : 0;
  const T* kb = static_cast<const T*>(a.k) + b * a.k_b + hkv * a.k_h;
  const T* vb = static_cast<const T*>(a.v) + b * a.v_b + hkv * a.v_h;

  // Tile t's K and V into stage t % kStages: 16 rows x kChunks chunks each, kChunks / 2 per lane per matrix.
  auto load_tile = [&](int t) {
    const uint32_t st = ring + (t % kStages) * 2 * kTileBytes;
#pragma unroll
    for (int i = 0; i < kTileKeys * kChunks / 32; ++i) {
      const int idx = i * 32 + lane, r = idx / kChunks, c = idx % kChunks, j = lo + t * kTileKeys + r;
      const bool valid = j < hi;
      const int64_t jj = valid ? j : lo;  // a zero-filled row reads nothing, but its address stays in the cache
      cuda::cp_async16(st + tile_off<D>(r, c), kb + jj * a.k_s + c * 8, valid);
      cuda::cp_async16(st + kTileBytes + tile_off<D>(r, c), vb + jj * a.v_s + c * 8, valid);
    }
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < tiles) load_tile(t);
    cuda::cp_async_commit();
  }

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int t = 0; t < tiles; ++t) {
    if (t + kStages - 1 < tiles) load_tile(t + kStages - 1);
    cuda::cp_async_commit();
    cuda::cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint32_t ks = ring + (t % kStages) * 2 * kTileBytes, vs = ks + kTileBytes;

    // S = Q Kᵀ for the tile's 16 keys: two n-blocks of 8 keys; one x4 ldmatrix covers 32 dims of an n-block.
    float s[2][4] = {};
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t r[4];
        cuda::ldmatrix_x4(ks + tile_off<D>(nb * 8 + lane % 8, 2 * kk + lane / 8), r);
        cuda::mma_16816<T>(s[nb], qf[kk], r[0], r[1]);
        cuda::mma_16816<T>(s[nb], qf[kk + 1], r[2], r[3]);
      }

    // Masks and the online softmax (log2 domain). Element e of s[nb]: row g + 8 (e / 2), key nb 8 + 2 tig + e % 2.
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

    // O += P V: P's A fragment from the accumulators; one x4 ldmatrix.trans covers 2 n-blocks of 8 dims.
    const uint32_t pf[4] = {cuda::pack2<T>(s[0][0], s[0][1]), cuda::pack2<T>(s[0][2], s[0][3]),
                            cuda::pack2<T>(s[1][0], s[1][1]), cuda::pack2<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t r[4];
      const int mat = lane / 8;
      cuda::ldmatrix_x4_trans(vs + tile_off<D>((mat & 1) * 8 + lane % 8, nd + (mat >> 1)), r);
      cuda::mma_16816<T>(o[nd], pf, r[0], r[1]);
      cuda::mma_16816<T>(o[nd + 1], pf, r[2], r[3]);
    }
    __syncwarp();  // every lane done with this stage before a later iteration refills it
  }
  cuda::cp_async_wait<0>();
  cuda::allow_dependents();  // the combine may launch now and wait for this grid's writes

  // The row sums over each row's 4 lanes, then the chunk's normalised output and lse per row.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!ok[h]) continue;
    const int rr = rb * kRows + g + 8 * h, head = hkv * a.group + rr / a.tq, tok = rr % a.tq;
    const int64_t row = (int64_t(b) * a.heads_q + head) * a.tq + tok;  // [batch, heads_q, tq]
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
    const float lse = l[h] > 0.f ? (m[h] + log2f(l[h])) / kLog2e : -INFINITY;
    if (a.part_out) {
      float* po = a.part_out + (row * a.splits + split) * D;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd)
        *reinterpret_cast<float2*>(po + nd * 8 + 2 * tig) = make_float2(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
      if (tig == 0) a.part_lse[row * a.splits + split] = lse;
    } else {
      T* out = static_cast<T*>(a.out) + b * a.o_b + tok * a.o_t + head * a.o_h;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd)
        *reinterpret_cast<uint32_t*>(out + nd * 8 + 2 * tig) =
            cuda::pack2<T>(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
      if (tig == 0 && a.lse) a.lse[row] = lse;
    }
  }
}

}  // namespace tigon::decode_attention::mma
