// Hopper backward kernels (sm_90a): the preprocess (delta = dout . o, lse in base 2, the dq semaphores reset, and
// for unordered accumulation the dq accumulator zeroed), the main kernel (one CTA per key tile,
// attention_bwd_sm90_config.cuh says what it computes) and the dq conversion (fp32 accumulator, or the sum of the
// two segments' in that order, to the output dtype, scaled).
//
// Main kernel roles: warp 0 of the producer warpgroup loads K and V once, then Q, dO, lse and delta of each query
// tile through a TMA pipeline (two stages; one for head dim 256); warps 1 and 2 (every other step each) add each
// step's dq tile to the accumulator in global memory (ordered: a bulk store for the first contribution, a bulk
// reduce-add for the others, in the order attention_bwd_sm90_order.h fixes, into its segment's accumulator;
// unordered: a bulk reduce-add into the zeroed accumulator); two consumer warpgroups do the matrix products and the
// element-wise math.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "attention/attention_bwd_sm90_config.cuh"
#include "attention/attention_bwd_sm90_order.h"
#include "attention/attention_fwd_sm90_kernel.cuh"

namespace tigon::attention::sm90 {

// A sequence's extent (variable length: its first packed token and length, capped as the forward caps them).
struct SeqExtent {
  int q_start, k_start, len_q, len_k;
  int64_t tile_base;  // the sequence's first padded query tile
};

template <class C>
CUTE_DEVICE SeqExtent seq_extent(BwdParams<C> const& p, int batch) {
  if (p.cu_seqlens_q == nullptr) {
    const int m_tiles = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    return {0, 0, p.seqlen_q, p.seqlen_k, int64_t(batch) * m_tiles};
  }
  SeqExtent e;
  e.q_start = p.cu_seqlens_q[batch];
  e.k_start = p.cu_seqlens_k[batch];
  e.len_q = max(0, min(min(p.cu_seqlens_q[batch + 1] - e.q_start, p.seqlen_q), p.total_q - e.q_start));
  e.len_k = max(0, min(p.cu_seqlens_k[batch + 1] - e.k_start, p.seqlen_k));
  e.tile_base = e.q_start / C::kBlockM + batch;  // never overlaps sequence batch + 1's tiles
  return e;
}

// Query tile m's place in the second segment's accumulator and semaphores (dense; m >= m1).
template <class C>
CUTE_DEVICE int64_t segment1_tile(BwdParams<C> const& p, int head, int batch, int m) {
  return (int64_t(head) * p.batch + batch) * p.tiles1 + (m - p.m1);
}

template <class C>
CUTE_DEVICE BandTiles band_tiles(BwdParams<C> const& p, SeqExtent const& e) {
  return BandTiles{e.len_q,        e.len_k,    e.len_k - e.len_q, p.window_left,
                   p.window_right, C::kBlockM, C::kBlockN,        p.items.rotate};
}

// ---- preprocess: one CTA per (query tile, query head, sequence), four threads a row --------------------------------

template <class C>
__global__ void __launch_bounds__(256) bwd_preprocess_kernel(CUTE_GRID_CONSTANT BwdParams<C> const p) {
  using Element = typename C::Element;
  static_assert(C::kBlockM * 4 == 256);
  const int m = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const SeqExtent e = seq_extent(p, batch);
  if (m * C::kBlockM >= e.len_q) return;
  const int64_t tile = int64_t(head) * p.tiles_per_head + e.tile_base + m;
  if (threadIdx.x == 0) {
    p.semaphores[tile] = 0;
    if (p.items.split() < p.n_blocks && m >= p.m1) p.semaphores1[segment1_tile(p, head, batch, m)] = 0;
  }
  if (!p.items.ordered) {  // every contribution adds to the accumulator
    float4* acc = reinterpret_cast<float4*>(p.dq_accum + tile * C::kDQFloats);
    for (int i = threadIdx.x; i < C::kDQFloats / 4; i += 256) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int r = threadIdx.x / 4, part = threadIdx.x % 4, row = m * C::kBlockM + r;
  constexpr int kPer = C::kHeadDim / 4, kVec = 16 / int(sizeof(Element));
  float acc = 0.f;
  if (row < e.len_q) {
    const int64_t tok = e.q_start + row, b = p.cu_seqlens_q != nullptr ? 0 : batch;
    const Element* o = p.o + b * p.o_strides[0] + tok * p.o_strides[1] + head * p.o_strides[2] + part * kPer;
    const Element* g =
        p.dout + b * p.dout_strides[0] + tok * p.dout_strides[1] + head * p.dout_strides[2] + part * kPer;
    CUTE_UNROLL
    for (int d = 0; d < kPer; d += kVec) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + d), gv = *reinterpret_cast<const uint4*>(g + d);
      const Element* oe = reinterpret_cast<const Element*>(&ov);
      const Element* ge = reinterpret_cast<const Element*>(&gv);
      CUTE_UNROLL
      for (int i = 0; i < kVec; ++i) acc += float(oe[i]) * float(ge[i]);
    }
  }
  acc = quad_sum(acc);
  if (part == 0) {
    float lse2 = INFINITY;  // rows past the sequence, and rows that see no key: probabilities exp2(-inf) = 0
    if (row < e.len_q) {
      const int64_t at = p.cu_seqlens_q != nullptr ? int64_t(head) * p.total_q + e.q_start + row
                                                   : (int64_t(batch) * p.heads_q + head) * p.seqlen_q + row;
      const float lse = p.lse[at];
      if (lse != -INFINITY) lse2 = lse * 1.4426950408889634f;
    }
    p.lse_log2[tile * C::kBlockM + r] = lse2;
    p.delta[tile * C::kBlockM + r] = row < e.len_q ? acc : 0.f;
  }
}

// ---- main kernel
// -----------------------------------------------------------------------------------------------------

struct KeyTileWork {
  int kv_head, batch, n;
  SeqExtent e;
  BandTiles t;
  int m_lo, m_hi, m_begin;
  CUTE_DEVICE int steps() const { return m_hi >= m_lo ? m_hi - m_lo + 1 : 0; }
  CUTE_DEVICE int m_at(int step) const { return BandTiles::walk(step, m_begin, m_lo, m_hi); }
};

// Item `item` of BwdItems' order. Ordered, a CTA waits only for items that come before its own (and, when
// rotating, for its pair's others, all resident at once), and blocks start in order: no wait is ever on a CTA that
// has not started.
template <class C>
CUTE_DEVICE KeyTileWork key_tile_work(BwdParams<C> const& p, int64_t item) {
  KeyTileWork w;
  int pair;
  p.items.at(item, pair, w.n);
  w.kv_head = pair % p.heads_kv;
  w.batch = pair / p.heads_kv;
  w.e = seq_extent(p, w.batch);
  w.t = band_tiles(p, w.e);
  w.m_lo = 0, w.m_hi = -1, w.m_begin = 0;
  if (w.n < w.t.n_tiles()) {
    w.t.m_range(w.n, w.m_lo, w.m_hi);
    w.m_begin = w.t.m_begin(w.n, w.m_lo, w.m_hi);
  }
  return w;
}

// Named barriers (after CUTLASS's reserved ones and the forward's 0 and 1, unused here): dS written, and per dq
// warp w, kBarDQFull + w (its tile is in shared memory) and kBarDQEmpty + w (it has read its tile out).
enum : uint32_t { kBarDS = 2, kBarDQEmpty = 3, kBarDQFull = 5 };
constexpr uint32_t kDQSync = 256 + 32;  // consumers and the step's dq warp

template <class C>
CUTE_DEVICE void bwd_produce(BwdParams<C> const& p, typename C::SharedStorage& ss, typename C::PipelineQ& pipe,
                             KeyTileWork const& w) {
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutKV{});
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQ{});
  const int b = p.cu_seqlens_q != nullptr ? 0 : w.batch;

  Tensor mK = domain_offset(make_coord(w.e.k_start, _0{}), p.tma_k.get_tma_tensor(p.shape_k)(_, _, w.kv_head, b));
  Tensor mV = domain_offset(make_coord(w.e.k_start, _0{}), p.tma_v.get_tma_tensor(p.shape_k)(_, _, w.kv_head, b));
  Tensor gK = local_tile(mK, typename C::TileKV{}, make_coord(w.n, _0{}));
  Tensor gV = local_tile(mV, typename C::TileKV{}, make_coord(w.n, _0{}));
  auto cta_k = p.tma_k.get_slice(_0{});
  auto cta_v = p.tma_v.get_slice(_0{});
  ss.kv_full.arrive_and_expect_tx(2 * C::kBytesKV);
  copy(p.tma_k.with(reinterpret_cast<uint64_t&>(ss.kv_full)), cta_k.partition_S(gK), cta_k.partition_D(sK));
  copy(p.tma_v.with(reinterpret_cast<uint64_t&>(ss.kv_full)), cta_v.partition_S(gV), cta_v.partition_D(sV));

  auto cta_q = p.tma_q.get_slice(_0{});
  auto cta_do = p.tma_dout.get_slice(_0{});
  Tensor tQs = cta_q.partition_D(sQ);
  Tensor tdOs = cta_do.partition_D(sdO);
  auto state = cutlass::make_producer_start_state<typename C::PipelineQ>();
  for (int g = 0; g < p.group; ++g) {
    const int head = w.kv_head * p.group + g;
    Tensor mQ = domain_offset(make_coord(w.e.q_start, _0{}), p.tma_q.get_tma_tensor(p.shape_q)(_, _, head, b));
    Tensor mdO = domain_offset(make_coord(w.e.q_start, _0{}), p.tma_dout.get_tma_tensor(p.shape_q)(_, _, head, b));
    Tensor tQg = cta_q.partition_S(local_tile(mQ, typename C::TileQ{}, make_coord(_, _0{})));
    Tensor tdOg = cta_do.partition_S(local_tile(mdO, typename C::TileQ{}, make_coord(_, _0{})));
    const int64_t head_tiles = int64_t(head) * p.tiles_per_head + w.e.tile_base;
    for (int step = 0; step < w.steps(); ++step) {
      const int m = w.m_at(step), stage = state.index();
      pipe.producer_acquire(state);
      uint64_t* bar = reinterpret_cast<uint64_t*>(pipe.producer_get_barrier(state));
      copy(p.tma_q.with(*bar), tQg(_, _, _, m), tQs(_, _, _, stage));
      copy(p.tma_dout.with(*bar), tdOg(_, _, _, m), tdOs(_, _, _, stage));
      const int64_t stats = (head_tiles + m) * C::kBlockM;
      SM90_BULK_COPY_G2S::copy(p.lse_log2 + stats, bar, ss.lse.data() + stage * C::kBlockM, C::kBytesStats);
      SM90_BULK_COPY_G2S::copy(p.delta + stats, bar, ss.delta.data() + stage * C::kBlockM, C::kBytesStats);
      ++state;
    }
  }
}

CUTE_DEVICE int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
CUTE_DEVICE void store_release(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
CUTE_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
CUTE_DEVICE void bulk_reduce_add(float* gmem, const float* smem, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem),
               "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))), "r"(bytes)
               : "memory");
}
CUTE_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
CUTE_DEVICE void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
CUTE_DEVICE void bulk_wait_done() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// A dq warp: the tiles of every other step (those of parity `writer`), each once the consumers have put it in shared
// memory, join the accumulator (ordered: after the contributions that come before it). Two warps take turns, so that
// one tile's wait for its turn and for its add to land overlaps the next tile's, also with one dq buffer (the warps
// then take turns on it: the buffer is free again once a warp has read its tile out, before its add lands).
template <class C>
CUTE_DEVICE void bwd_write_dq(BwdParams<C> const& p, typename C::SharedStorage& ss, KeyTileWork const& w, int lane,
                              int writer) {
  const bool ordered = p.items.ordered;
  // The buffers start empty: step t waits for the warp that read the buffer at step t - kDQBuffers (parity
  // (t - kDQBuffers) & 1), so the warps with parities below kDQBuffers steps back signal once up front.
  if (writer >= 2 - C::kDQBuffers) cutlass::arch::NamedBarrier::arrive(kDQSync, kBarDQEmpty + writer);
  int iter = 0;
  for (int g = 0; g < p.group; ++g) {
    const int head = w.kv_head * p.group + g;
    for (int step = 0; step < w.steps(); ++step, ++iter) {
      if ((iter & 1) != writer) continue;
      const int m = w.m_at(step);
      const float* src = ss.dq.data() + (iter % C::kDQBuffers) * C::kDQFloats;
      cutlass::arch::NamedBarrier::sync(kDQSync, kBarDQFull + writer);
      const int64_t tile = int64_t(head) * p.tiles_per_head + w.e.tile_base + m;
      int rank = 0;
      int* sem = nullptr;
      float* dst = p.dq_accum + tile * C::kDQFloats;
      if (lane == 0) {
        if (ordered) {
          int lo, hi;
          w.t.n_range(m, lo, hi);
          const int seg = p.items.segment(w.n);  // its own accumulator and order
          p.items.clip(seg, lo, hi);
          rank = w.t.rank(m, w.n, lo, hi);
          sem = seg ? p.semaphores1 + segment1_tile(p, head, w.batch, m) : p.semaphores + tile;
          if (seg) dst = p.dq_accum1 + segment1_tile(p, head, w.batch, m) * C::kDQFloats;
          while (load_acquire(sem) != rank) __nanosleep(32);
          fence_proxy_async_global();  // the accumulator as the earlier contributions left it
        }
        if (ordered && rank == 0) {
          SM90_BULK_COPY_S2G::copy(src, dst, C::kDQFloats * sizeof(float));
        } else {
          bulk_reduce_add(dst, src, C::kDQFloats * sizeof(float));
        }
        bulk_commit();
        bulk_wait_read();
      }
      __syncwarp();
      cutlass::arch::NamedBarrier::arrive(kDQSync, kBarDQEmpty + writer);
      if (lane == 0 && ordered) {
        bulk_wait_done();
        fence_proxy_async_global();
        __threadfence();
        store_release(sem, rank + 1);
      }
      __syncwarp();
    }
  }
}

// Byte offset of dS^T element (key, query) of buffer `buf` from the (1024-byte aligned) dS buffers: the layout's
// swizzle acts on byte addresses (CuTe applies it to the pointer), so it is applied to the unswizzled offset in
// bytes.
template <class C>
CUTE_HOST_DEVICE uint32_t ds_byte_offset(int key, int query, int buf) {
  using L = typename C::SmemLayoutDSt;
  return uint32_t(L{}.layout_a()(L{}.layout_b()(key, query, buf) * int(sizeof(typename C::Element))));
}

// This thread's dS^T elements (pairs of adjacent queries) into dS buffer `buf`, as 32-bit shared-memory stores at
// offsets computed in 32 bits: through CuTe's swizzled pointer the compiler loses the address space and emits
// generic 64-bit stores with 64-bit swizzle arithmetic.
template <class C, class Frag, class Coords>
CUTE_DEVICE void store_ds(Frag const& rdS, Coords const& cSt, uint32_t ds_smem, int buf) {
  static_assert(decltype(size<0, 0>(rdS))::value == 2 && decltype(stride<0, 0>(rdS.layout()))::value == 1);
  CUTE_UNROLL
  for (int i = 0; i < size(rdS); i += 2) {
    const uint32_t bytes = ds_byte_offset<C>(get<0>(cSt(i)), get<1>(cSt(i)), buf);
    const uint32_t pair = uint32_t(rdS(i).raw()) | (uint32_t(rdS(i + 1).raw()) << 16);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(ds_smem + bytes), "r"(pair) : "memory");
  }
}

template <class C>
CUTE_DEVICE void bwd_consume(BwdParams<C> const& p, typename C::SharedStorage& ss, typename C::PipelineQ& pipe,
                             KeyTileWork const& w, int tid) {
  using Element = typename C::Element;
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutKV{});
  Tensor sKt = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutKt{});
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQt{});
  Tensor sdS = make_tensor(make_smem_ptr(ss.ds.data()), typename C::SmemLayoutDS{});
  const uint32_t ds_smem = cute::cast_smem_ptr_to_uint(ss.ds.data());

  typename C::TiledMmaSdP mma_sdp;
  typename C::TiledMmaDKV mma_dkv;
  typename C::TiledMmaDQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_dkv = mma_dkv.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);
  Tensor tSrK = thr_sdp.partition_fragment_A(sK);  // this warpgroup's 64 keys
  Tensor tSrV = thr_sdp.partition_fragment_A(sV);
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);  // (MMA, 1, D/16, stages)
  Tensor tSrdO = thr_sdp.partition_fragment_B(sdO);
  Tensor tdVrdO = thr_dkv.partition_fragment_B(sdOt);  // (MMA, 1, M/16, stages)
  Tensor tdKrQ = thr_dkv.partition_fragment_B(sQt);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);                              // (MMA, 1, N/16, buffers)
  Tensor tdQrK = thr_dq.partition_fragment_B(sKt);                               // (MMA, 1, N/16)
  Tensor cSt = thr_sdp.partition_C(make_identity_tensor(typename C::TileSt{}));  // (key, query) of each element

  Tensor acc_dk = partition_fragment_C(mma_dkv, typename C::TileDKV{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, typename C::TileDKV{});
  clear(acc_dk);
  clear(acc_dv);
  using LayoutSt = decltype(partition_fragment_C(mma_sdp, typename C::TileSt{}).layout());
  Tensor rP = make_tensor<Element>(LayoutSt{});
  Tensor rdS = make_tensor<Element>(LayoutSt{});
  static_assert(decltype(size<2>(tdVrdO))::value == C::kBlockM / 16);
  static_assert(decltype(size<2>(tdQrdS))::value == C::kBlockN / 16 &&
                decltype(size<2>(tdQrK))::value == C::kBlockN / 16);

  const Visibility vis{w.e.len_q, w.e.len_k, w.e.len_k - w.e.len_q, p.window_left, p.window_right};
  const int key0 = w.n * C::kBlockN;
  const bool softcap = p.tanh_scale != 0.f;
  ss.kv_full.wait(0);

  cutlass::PipelineState<C::kStages> state;
  int iter = 0;
  for (int g = 0; g < p.group; ++g) {
    for (int step = 0; step < w.steps(); ++step, ++iter) {
      // dS has two buffers: one warpgroup may still read step t's while the other writes step t + 1's.
      const int m = w.m_at(step), stage = state.index(), buf = iter & 1, dq_buf = iter % C::kDQBuffers;
      const int row0 = m * C::kBlockM;
      Tensor acc_s = partition_fragment_C(mma_sdp, typename C::TileSt{});
      Tensor acc_dp = partition_fragment_C(mma_sdp, typename C::TileSt{});
      pipe.consumer_wait(state);
      gemm<true>(mma_sdp, tSrK, tSrQ(_, _, _, stage), acc_s);
      gemm<true>(mma_sdp, tSrV, tSrdO(_, _, _, stage), acc_dp);

      // P^T in place of S^T while dP^T = V dO^T still runs (without a softcap; with one, P^T and dS^T together
      // below, as dS needs the capped score). Rows past the sequence have lse +inf (probability 0); hidden keys are
      // zeroed on the tiles that have any. Each element's lse is read before the wait, so that the shared-memory
      // latency does not follow it.
      const float* lse = ss.lse.data() + stage * C::kBlockM;
      const float* delta = ss.delta.data() + stage * C::kBlockM;
      const bool masked = vis.block_needs_mask(row0, min(row0 + C::kBlockM, w.e.len_q) - 1, key0, C::kBlockN);
      float lse_at[decltype(size(acc_s))::value];
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) lse_at[i] = lse[get<1>(cSt(i))];
      auto probability = [&](auto with_mask, int i, float x) {
        float prob = cuda::exp2_fast(fmaf(x, p.score_log2, -lse_at[i]));
        if constexpr (decltype(with_mask)::value) {
          const int j = key0 + get<0>(cSt(i)), row = row0 + get<1>(cSt(i));
          if (j < vis.first_key(row) || j >= vis.end_key(row)) prob = 0.f;
        }
        return prob;
      };
      warpgroup_wait<1>();
      warpgroup_fence_operand(acc_s);
      // The mask test outside the element loops: straight-line code on the tiles that need none.
      if (!softcap && masked) {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i) acc_s(i) = probability(cute::true_type{}, i, acc_s(i));
      } else if (!softcap) {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i) acc_s(i) = probability(cute::false_type{}, i, acc_s(i));
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_s);
      warpgroup_fence_operand(acc_dp);
      if (softcap) {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i) {
          const float x = tanhf(acc_s(i) * p.tanh_scale);
          acc_s(i) = probability(cute::true_type{}, i, x);
          acc_dp(i) = acc_s(i) * (acc_dp(i) - delta[get<1>(cSt(i))]) * (1.f - x * x);
        }
      } else {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i) acc_dp(i) = acc_s(i) * (acc_dp(i) - delta[get<1>(cSt(i))]);
      }
      convert_into(acc_s, rP);
      convert_into(acc_dp, rdS);

      Tensor acc_dq = partition_fragment_C(mma_dq, typename C::TileDQ{});
      if constexpr (C::kSplitDim) {
        // P^T and dS^T of both warpgroups to shared memory, then dV, dK and dQ for this warpgroup's half of the head
        // dim. The stage (Q and dO) goes back as soon as dV and dK are done, while dQ still runs: with one stage, the
        // next tile's load overlaps dQ and its store.
        Tensor sPt = make_tensor(make_smem_ptr(ss.p.data()), typename C::SmemLayoutDSt{});
        Tensor sdSt = make_tensor(make_smem_ptr(ss.ds.data()), typename C::SmemLayoutDSt{});
        Tensor tdVsP = thr_dkv.partition_fragment_A(sPt);  // (MMA, 1, M/16, buffers): buffer 0 only
        Tensor tdKsdS = thr_dkv.partition_fragment_A(sdSt);
        store_ds<C>(rP, cSt, cute::cast_smem_ptr_to_uint(ss.p.data()), 0);
        store_ds<C>(rdS, cSt, ds_smem, buf);
        cutlass::arch::fence_view_async_shared();  // P and dS as wgmma will read them
        cutlass::arch::NamedBarrier::sync(256, kBarDS);
        gemm<false>(mma_dkv, tdVsP(_, _, _, 0), tdVrdO(_, _, _, stage), acc_dv);
        gemm<false>(mma_dkv, tdKsdS(_, _, _, buf), tdKrQ(_, _, _, stage), acc_dk);
        gemm<true>(mma_dq, tdQrdS(_, _, _, buf), tdQrK, acc_dq);
        warpgroup_wait<1>();
        warpgroup_fence_operand(acc_dv);
        warpgroup_fence_operand(acc_dk);
        pipe.consumer_release(state);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_dq);
      } else {
        // dV += P^T dO, then dQ = dS K once both warpgroups' dS is in shared memory, then dK += dS^T Q, which still
        // runs while this step's dq tile goes to shared memory.
        Tensor tdVrP = make_tensor(rP.data(), acc_as_a_operand(LayoutSt{}));
        Tensor tdKrdS = make_tensor(rdS.data(), acc_as_a_operand(LayoutSt{}));
        static_assert(decltype(size<2>(tdVrP))::value == C::kBlockM / 16);
        warpgroup_fence_operand(rP);
        gemm<false>(mma_dkv, tdVrP, tdVrdO(_, _, _, stage), acc_dv);
        store_ds<C>(rdS, cSt, ds_smem, buf);
        cutlass::arch::fence_view_async_shared();  // dS as wgmma will read it
        cutlass::arch::NamedBarrier::sync(256, kBarDS);
        gemm<true>(mma_dq, tdQrdS(_, _, _, buf), tdQrK, acc_dq);
        warpgroup_fence_operand(rdS);
        gemm<false>(mma_dkv, tdKrdS, tdKrQ(_, _, _, stage), acc_dk);
        warpgroup_wait<1>();
        warpgroup_fence_operand(acc_dv);
        warpgroup_fence_operand(acc_dq);
      }

      // This step's dq tile to dq buffer `dq_buf` in register order (float4 i of thread t at 4 (i * 256 + t)), once
      // the dq warp that used the buffer last has read it out, for this step's dq warp.
      cutlass::arch::NamedBarrier::sync(kDQSync, kBarDQEmpty + ((iter - C::kDQBuffers) & 1));
      float4* dq_smem = reinterpret_cast<float4*>(ss.dq.data() + dq_buf * C::kDQFloats);
      static_assert(decltype(size(acc_dq))::value % 4 == 0);
      CUTE_UNROLL
      for (int v = 0; v < size(acc_dq) / 4; ++v)
        dq_smem[v * 256 + tid] = make_float4(acc_dq(4 * v), acc_dq(4 * v + 1), acc_dq(4 * v + 2), acc_dq(4 * v + 3));
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::arrive(kDQSync, kBarDQFull + (iter & 1));

      if constexpr (!C::kSplitDim) {
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_dk);
        warpgroup_fence_operand(rdS);
        pipe.consumer_release(state);
      }
      ++state;
    }
  }

  // dK (times the softmax scale) and dV of this CTA's keys, once: straight from registers, adjacent column pairs.
  Tensor cKV = thr_dkv.partition_C(make_identity_tensor(typename C::TileDKV{}));
  static_assert(decltype(size<0, 0>(acc_dk))::value == 2 && decltype(stride<0, 0>(acc_dk.layout()))::value == 1);
  const int64_t b = p.cu_seqlens_q != nullptr ? 0 : w.batch;
  Element* dk =
      p.dk + b * p.dk_strides[0] + int64_t(w.e.k_start + key0) * p.dk_strides[1] + w.kv_head * p.dk_strides[2];
  Element* dv =
      p.dv + b * p.dv_strides[0] + int64_t(w.e.k_start + key0) * p.dv_strides[1] + w.kv_head * p.dv_strides[2];
  CUTE_UNROLL
  for (int i = 0; i < size(acc_dk); i += 2) {
    const int key = get<0>(cKV(i)), col = get<1>(cKV(i));
    if (key0 + key < w.e.len_k) {
      auto pair = [](float a, float c) {
        cutlass::Array<Element, 2> out;
        out[0] = Element(a), out[1] = Element(c);
        return *reinterpret_cast<uint32_t*>(&out);
      };
      *reinterpret_cast<uint32_t*>(dk + key * p.dk_strides[1] + col) =
          pair(acc_dk(i) * p.scale, acc_dk(i + 1) * p.scale);
      *reinterpret_cast<uint32_t*>(dv + key * p.dv_strides[1] + col) = pair(acc_dv(i), acc_dv(i + 1));
    }
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) bwd_main_kernel(CUTE_GRID_CONSTANT BwdParams<C> const p) {
#if defined(CUTLASS_ARCH_MMA_SM90A_ENABLED)
  extern __shared__ char smem[];
  auto& ss = *reinterpret_cast<typename C::SharedStorage*>(smem);
  const KeyTileWork w = key_tile_work(p, blockIdx.x);
  if (w.n >= w.t.n_tiles()) return;  // variable length: past this sequence's keys

  const int warp_group = cutlass::canonical_warp_group_idx();
  if (threadIdx.x == 0) {
    ss.kv_full.init(1);
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_dout.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
  }
  typename C::PipelineQ::Params pp;
  pp.transaction_bytes = C::kBytesStage;
  pp.role = warp_group == 0 ? C::PipelineQ::ThreadCategory::Producer : C::PipelineQ::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = 128 * C::kConsumers;
  typename C::PipelineQ pipe(ss.pipe_q, pp, cute::Shape<_1, _1, _1>{});
  __syncthreads();

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (warp == 0 && threadIdx.x == 0) bwd_produce(p, ss, pipe, w);
    if (warp == 1 || warp == 2) bwd_write_dq(p, ss, w, threadIdx.x % 32, warp - 1);
  } else {
    cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegs>();
    bwd_consume(p, ss, pipe, w, int(threadIdx.x) - 128);
  }
#endif
}

// ---- dq: the accumulator, scaled, in the output dtype
// ----------------------------------------------------------------

template <class C>
__global__ void __launch_bounds__(256) bwd_convert_dq_kernel(CUTE_GRID_CONSTANT BwdParams<C> const p) {
  using Element = typename C::Element;
  const int m = blockIdx.x, head = blockIdx.y, batch = blockIdx.z, tid = threadIdx.x;
  const SeqExtent e = seq_extent(p, batch);
  if (m * C::kBlockM >= e.len_q) return;
  const BandTiles t = band_tiles(p, e);
  int lo, hi;
  t.n_range(m, lo, hi);
  // Which accumulators hold contributions (none when no key is visible from the tile: dq = 0, never written)
  const int split = p.items.split();
  const bool any = lo <= hi && lo < split, two = lo <= hi && hi >= split;
  const int64_t tile = int64_t(head) * p.tiles_per_head + e.tile_base + m;
  const float* acc = p.dq_accum + tile * C::kDQFloats;
  const float* acc1 = two ? p.dq_accum1 + segment1_tile(p, head, batch, m) * C::kDQFloats : nullptr;

  typename C::TiledMmaDQ mma_dq;
  Tensor c = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(typename C::TileDQ{}));
  constexpr int kN = decltype(size(c))::value;
  const int64_t b = p.cu_seqlens_q != nullptr ? 0 : batch;
  Element* dq =
      p.dq + b * p.dq_strides[0] + int64_t(e.q_start + m * C::kBlockM) * p.dq_strides[1] + head * p.dq_strides[2];
  CUTE_UNROLL
  for (int v = 0; v < kN / 4; ++v) {
    float4 x = any ? reinterpret_cast<const float4*>(acc)[v * 256 + tid] : make_float4(0.f, 0.f, 0.f, 0.f);
    if (two) {
      const float4 y = reinterpret_cast<const float4*>(acc1)[v * 256 + tid];
      x.x += y.x, x.y += y.y, x.z += y.z, x.w += y.w;
    }
    const float vals[4] = {x.x, x.y, x.z, x.w};
    CUTE_UNROLL
    for (int j = 0; j < 4; j += 2) {
      const int row = get<0>(c(4 * v + j)), col = get<1>(c(4 * v + j));
      if (m * C::kBlockM + row < e.len_q) {
        cutlass::Array<Element, 2> out;
        out[0] = Element(vals[j] * p.scale), out[1] = Element(vals[j + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dq + row * p.dq_strides[1] + col) = *reinterpret_cast<uint32_t*>(&out);
      }
    }
  }
}

}  // namespace tigon::attention::sm90
