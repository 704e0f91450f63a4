// Decode attention kernels (flash-decoding on CUDA cores: head dims 80, 96 and 256, and the combine pass both plans
// share); included by decode_attention_cuda.cu only.
//
// Decoding reads the whole KV cache once per step and does little arithmetic per byte: a few query rows per key/value
// head. A block of 128 threads takes one (sequence, key/value head, chunk of the cache) and up to 8 query rows of
// that head's group (its query heads x new tokens): every K and V row it loads serves all of them. Lanes split a head
// row into 16-byte vectors (head_dim 128: 16 lanes per key, so a warp works on 2 keys at a time and the block on 8),
// each key slot walks its keys 4 at a time with all their K and V vectors loaded before any is used (8 loads of 16
// bytes in flight per lane), and keeps an online softmax per query row in fp32: the row's max, sum and its share of
// the output. The scores of a key are summed over its lanes by a reduce-scatter and gathered back. At the end the
// block's key slots are merged through shared memory by their maxima, in slot order; with one chunk per sequence the
// block writes out and lse, else the chunk's normalised output and lse go to the workspace and the combine kernel
// merges the chunks in chunk order.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"
#include "common/reduce.cuh"

namespace tigon::decode_attention::kern {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;   // keys per slot loaded before any is used
constexpr int kMaxRows = 8;  // query rows per block
constexpr float kLog2e = 1.4426950408889634f;

struct Args {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* seqlens;
  const int32_t* starts;  // nullptr: every sequence's keys start at 0
  void* out;
  float* lse;       // [batch, heads_q, tq] or nullptr
  float* part_out;  // [batch, heads_q, tq, splits, head_dim] when split, else nullptr
  float* part_lse;  // [batch, heads_q, tq, splits]
  int64_t q_b, q_t, q_h, k_b, k_s, k_h, v_b, v_s, v_h, o_b, o_t, o_h;
  int batch, tq, heads_q, heads_kv, group, s_max;
  int splits, chunk;  // chunk: cache positions per split
  int row_blocks;     // blocks of query rows per key/value head
  float scale, softcap;
  int window_left;
};

__device__ __forceinline__ float exp_fast(float x) { return cuda::exp2_fast(x * kLog2e); }

// Lanes per key: the head row's 16-byte vectors rounded up to a power of two (80 and 96 leave lanes idle).
template <int D>
constexpr int lanes_per_key() {
  return D / 8 <= 8 ? 8 : D / 8 <= 16 ? 16 : 32;
}

// grid: (splits * batch, heads_kv * row_blocks). RB query rows (a power of two up to kMaxRows) per block.
template <class T, int D, int RB>
__global__ void __launch_bounds__(kThreads) decode(const Args a) {
  constexpr int kVecs = D / 8, kLanes = lanes_per_key<D>(), kSlots = kThreads / kLanes;
  __shared__ float sm_m[kSlots][RB], sm_l[kSlots][RB];
  __shared__ __align__(16) float sm_o[kSlots][RB][D];

  const int b = blockIdx.x / a.splits, split = blockIdx.x % a.splits;
  const int hkv = blockIdx.y / a.row_blocks, rb = blockIdx.y % a.row_blocks;
  const int slot = threadIdx.x / kLanes, vec = threadIdx.x % kLanes;
  const bool active = vec < kVecs;  // lanes past the head row (head_dim 80, 96) only join the shuffles
  const int len = min(max(a.seqlens[b], 0), a.s_max);
  const int start = a.starts ? min(max(a.starts[b], 0), len) : 0;  // keys before it (left padding) stay hidden

  // The block's query rows: row rr of the group is query head hkv * group + rr / tq, new token rr % tq.
  int head[RB], tok[RB];
  bool row_ok[RB];
  float q[RB][8];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    const int rr = rb * RB + r;
    row_ok[r] = rr < a.group * a.tq;
    head[r] = hkv * a.group + (row_ok[r] ? rr / a.tq : 0);
    tok[r] = row_ok[r] ? rr % a.tq : 0;
    if (row_ok[r] && active) {
      const T* p = static_cast<const T*>(a.q) + b * a.q_b + tok[r] * a.q_t + head[r] * a.q_h + vec * 8;
      cuda::load_vec<T, 8>(p, q[r]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[r][j] = 0.f;
    }
  }

  // Cache positions this block reads: its chunk, within the sequence and the earliest token's window.
  const int first_pos = len - a.tq;  // position of new token 0
  int lo = max(split * a.chunk, start), hi = min(split * a.chunk + a.chunk, len);
  if (a.window_left >= 0) lo = max(lo, first_pos - a.window_left);

  float m[RB], l[RB], o[RB][8];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[r][j] = 0.f;
  }
  const T* kbase = static_cast<const T*>(a.k) + b * a.k_b + hkv * a.k_h + vec * 8;
  const T* vbase = static_cast<const T*>(a.v) + b * a.v_b + hkv * a.v_h + vec * 8;

  // Every slot runs the same steps (the shuffles below span the warp's slots): keys past hi are masked, not skipped.
  for (int step = max(lo, 0); step < hi; step += kSlots * kUnroll) {
    const int j0 = step + slot;
    uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * kSlots;
      if (active && j < hi) {
        kr[u] = cuda::load_stream16(kbase + int64_t(j) * a.k_s);
        vr[u] = cuda::load_stream16(vbase + int64_t(j) * a.v_s);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[kUnroll][RB];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      cuda::unpack16<T>(kr[u], kf);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        float acc = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc = fmaf(q[r][e], kf[e], acc);
        s[u][r] = acc;
      }
      cuda::all_gather(cuda::reduce_scatter<RB>(s[u], kLanes), s[u], kLanes);  // full dot products, every lane
    }
    // Scores and masks; then the online softmax over these keys.
    float mx[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      mx[r] = m[r];
      const int pos = first_pos + tok[r];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u * kSlots;
        const bool visible = row_ok[r] && j < hi && j <= pos && (a.window_left < 0 || j >= pos - a.window_left);
        float x = s[u][r] * a.scale;
        if (a.softcap > 0.f) x = a.softcap * tanhf(x / a.softcap);
        s[u][r] = visible ? x : -INFINITY;
        mx[r] = fmaxf(mx[r], s[u][r]);
      }
      const float base = mx[r] == -INFINITY ? 0.f : mx[r];  // nothing visible yet: keep zeros, no NaN
      const float corr = exp_fast(m[r] - base);
      l[r] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[r][e] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) s[u][r] = exp_fast(s[u][r] - base);  // the probabilities (0 if masked)
      m[r] = mx[r];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[8];
      cuda::unpack16<T>(vr[u], vf);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        l[r] += s[u][r];
#pragma unroll
        for (int e = 0; e < 8; ++e) o[r][e] = fmaf(s[u][r], vf[e], o[r][e]);
      }
    }
  }

  // Merge the key slots: each slot's max, sum and output through shared memory, in slot order.
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    if (vec == 0) {
      sm_m[slot][r] = m[r];
      sm_l[slot][r] = l[r];
    }
    if (active)
#pragma unroll
      for (int e = 0; e < 8; ++e) sm_o[slot][r][vec * 8 + e] = o[r][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < RB * D; i += kThreads) {
    const int r = i / D, d = i - r * D, rr = rb * RB + r;  // rows recomputed: no dynamic index into registers
    if (rr >= a.group * a.tq) continue;
    const int hr = hkv * a.group + rr / a.tq, tr = rr % a.tq;
    float mm = -INFINITY;
    for (int sl = 0; sl < kSlots; ++sl) mm = fmaxf(mm, sm_m[sl][r]);
    float sum = 0.f, acc = 0.f;
    if (mm != -INFINITY)
      for (int sl = 0; sl < kSlots; ++sl) {
        const float w = exp_fast(sm_m[sl][r] - mm);
        sum += w * sm_l[sl][r];
        acc += w * sm_o[sl][r][d];
      }
    const float out = sum > 0.f ? acc / sum : 0.f;
    const float lse = sum > 0.f ? mm + logf(sum) : -INFINITY;
    const int64_t row = (int64_t(b) * a.heads_q + hr) * a.tq + tr;  // [batch, heads_q, tq]
    if (a.part_out) {
      a.part_out[(row * a.splits + split) * D + d] = out;
      if (d == 0) a.part_lse[row * a.splits + split] = lse;
    } else {
      static_cast<T*>(a.out)[b * a.o_b + tr * a.o_t + hr * a.o_h + d] = cuda::from_f<T>(out);
      if (d == 0 && a.lse) a.lse[row] = lse;
    }
  }
}

// out and lse from the splits' partial outputs, weighted by exp(lse_split - max), in split order. One block of D
// threads per (sequence, query head, new token). At batch 1 there are few such rows and many splits (32 rows of 64
// at 8k context), so each thread's loads are unrolled to keep many in flight: the loop is a chain of L2 round trips
// otherwise.
template <class T, int D>
__global__ void __launch_bounds__(D) combine(const Args a) {
  cuda::grid_dependency_wait();  // launched as the split kernel's dependent: its partials
  cuda::allow_dependents();
  const int64_t row = blockIdx.x;  // (b * heads_q + h) * tq + t
  const int t = int(row % a.tq), h = int(row / a.tq % a.heads_q);
  const int64_t b = row / (int64_t(a.tq) * a.heads_q);
  const int d = threadIdx.x;
  const float* lse = a.part_lse + row * a.splits;
  const float* part = a.part_out + row * a.splits * D + d;
  constexpr int kBatch = 16;  // loads issued before any is used
  float mm = -INFINITY;
  for (int s0 = 0; s0 < a.splits; s0 += kBatch) {
    float l[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) l[i] = s0 + i < a.splits ? lse[s0 + i] : -INFINITY;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) mm = fmaxf(mm, l[i]);
  }
  float sum = 0.f, acc = 0.f;
  if (mm != -INFINITY)
    for (int s0 = 0; s0 < a.splits; s0 += kBatch) {
      float l[kBatch], p[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const bool in = s0 + i < a.splits;  // past the end: weight 0 and value 0, which leave the sums as they are
        l[i] = in ? lse[s0 + i] : -INFINITY;
        p[i] = in ? part[int64_t(s0 + i) * D] : 0.f;
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const float w = exp_fast(l[i] - mm);
        sum += w;
        acc += w * p[i];
      }
    }
  static_cast<T*>(a.out)[b * a.o_b + t * a.o_t + h * a.o_h + d] = cuda::from_f<T>(sum > 0.f ? acc / sum : 0.f);
  if (d == 0 && a.lse) a.lse[row] = sum > 0.f ? mm + logf(sum) : -INFINITY;
}

}  // namespace tigon::decode_attention::kern
