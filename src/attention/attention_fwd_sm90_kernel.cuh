// Hopper forward kernel (sm_90a): one CTA per (128-row query tile, query head, sequence). A producer warpgroup
// loads Q once and K/V blocks through a two-stage TMA pipeline; two consumer warpgroups (64 query rows each) compute
// S = Q K^T and O += P V with wgmma and keep the softmax online in fp32 registers.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "attention/attention_fwd_sm90_config.cuh"
#include "attention/attention_fwd_sm90_softmax.cuh"

namespace tigon::attention::sm90 {

// A query tile's sequence and the key blocks [n_begin, n_end) it sees (blocks outside are skipped, not masked).
struct TileWork {
  int head, batch, m_block;
  int q_start, k_start;  // the sequence's first token (variable length; 0 when dense)
  Visibility vis;
  int n_begin, n_end;
};

template <class C>
CUTE_DEVICE TileWork tile_work(FwdParams<C> const& p, int m_block, int head, int batch) {
  TileWork w{head, batch, m_block, 0, 0, {}, 0, 0};
  int len_q = p.seqlen_q, len_k = p.seqlen_k;
  if (p.cu_seqlens_q != nullptr) {
    // Lengths past the bounds are not computed (the API's contract), nor rows past the packed tensor.
    w.q_start = p.cu_seqlens_q[batch];
    w.k_start = p.cu_seqlens_k[batch];
    len_q = min(min(p.cu_seqlens_q[batch + 1] - w.q_start, p.seqlen_q), p.total_q - w.q_start);
    len_k = min(p.cu_seqlens_k[batch + 1] - w.k_start, p.seqlen_k);
  }
  w.vis = Visibility{len_q, len_k, len_k - len_q, p.window_left, p.window_right};
  const int r0 = m_block * C::kBlockM, r1 = min(r0 + C::kBlockM, len_q) - 1;
  const int k0 = w.vis.first_key(r0), k1 = w.vis.end_key(r1);
  w.n_begin = k0 / C::kBlockN;
  w.n_end = k1 > k0 ? (k1 + C::kBlockN - 1) / C::kBlockN : w.n_begin;
  return w;
}

// The grid is one CTA per tile, dispatched in block order as SMs free up. Blocks run through sections of
// section_pairs (head, sequence) pairs, all the section's highest query tiles first (under a causal mask they see
// the most keys, so the tail of the grid holds the shortest tiles), while the section's keys and values stay in L2
// for the tiles that share them.
template <class C>
CUTE_DEVICE TileWork tile_at(FwdParams<C> const& p, int linear) {
  const int section_tiles = p.section_pairs * p.m_blocks;
  const int section = linear / section_tiles, r = linear - section * section_tiles;
  const int pairs_here = min(p.section_pairs, p.pairs - section * p.section_pairs);
  const int pair = section * p.section_pairs + r % pairs_here;
  return tile_work(p, p.m_blocks - 1 - r / pairs_here, pair % p.heads_q, pair / p.heads_q);
}

// Producer (one thread): Q, then K and V blocks from the last (the diagonal) down, into the stage the consumers
// released last.
template <class C>
CUTE_DEVICE void produce(FwdParams<C> const& p, typename C::SharedStorage& ss, typename C::PipelineKV& pipe_k,
                         typename C::PipelineKV& pipe_v, TileWork const& w) {
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutKV{});

  // Grouped-query attention: the key/value head of query head h is h / group, read in place.
  const int batch = p.cu_seqlens_q != nullptr ? 0 : w.batch;
  const int head_kv = w.head / p.group;
  Tensor mQ = domain_offset(make_coord(w.q_start, _0{}), p.tma_q.get_tma_tensor(p.shape_q)(_, _, w.head, batch));
  Tensor mK = domain_offset(make_coord(w.k_start, _0{}), p.tma_k.get_tma_tensor(p.shape_k)(_, _, head_kv, batch));
  Tensor mV = domain_offset(make_coord(w.k_start, _0{}), p.tma_v.get_tma_tensor(p.shape_k)(_, _, head_kv, batch));
  Tensor gQ = local_tile(mQ, typename C::TileQ{}, make_coord(w.m_block, _0{}));  // (M, D)
  Tensor gK = local_tile(mK, typename C::TileKV{}, make_coord(_, _0{}));         // (N, D, blocks)
  Tensor gV = local_tile(mV, typename C::TileKV{}, make_coord(_, _0{}));

  auto cta_q = p.tma_q.get_slice(_0{});
  auto cta_k = p.tma_k.get_slice(_0{});
  auto cta_v = p.tma_v.get_slice(_0{});
  Tensor tQg = cta_q.partition_S(gQ);
  Tensor tQs = cta_q.partition_D(sQ);
  Tensor tKg = cta_k.partition_S(gK);  // (TMA, .., .., key blocks)
  Tensor tKs = cta_k.partition_D(sK);  // (TMA, .., .., stages)
  Tensor tVg = cta_v.partition_S(gV);
  Tensor tVs = cta_v.partition_D(sV);

  // Rows past the tensor arrive as zeros; rows of the next sequence (variable length) are masked or not written.
  ss.q_full.arrive_and_expect_tx(C::kBytesQ);
  copy(p.tma_q.with(reinterpret_cast<uint64_t&>(ss.q_full)), tQg, tQs);

  auto state = cutlass::make_producer_start_state<typename C::PipelineKV>();
  for (int n = w.n_end - 1; n >= w.n_begin; --n) {
    pipe_k.producer_acquire(state);
    copy(p.tma_k.with(*pipe_k.producer_get_barrier(state)), tKg(_, _, _, n), tKs(_, _, _, state.index()));
    pipe_v.producer_acquire(state);
    copy(p.tma_v.with(*pipe_v.producer_get_barrier(state)), tVg(_, _, _, n), tVs(_, _, _, state.index()));
    ++state;
  }
}

// Issues acc (+)= a b over all k slices as one wgmma batch. The caller waits for it (warpgroup_wait) and then fences
// acc again: the compiler sees the registers written at issue, so without that fence it could move their later
// reads (the softmax, the rescale) above the wait.
template <bool kZeroInit, class Mma, class A, class B, class Acc>
CUTE_DEVICE void gemm(Mma& mma, A const& a, B const& b, Acc& acc) {
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(acc);
}

// The two consumers take turns issuing their wgmmas (named barriers 0 and 1 after CUTLASS's reserved ones), so one
// warpgroup's softmax runs while the other's matrix products keep the tensor cores busy.
CUTE_DEVICE void wait_turn(int consumer) { cutlass::arch::NamedBarrier::sync(256, consumer); }
CUTE_DEVICE void pass_turn(int consumer) { cutlass::arch::NamedBarrier::arrive(256, 1 - consumer); }

// Consumer warpgroups: thread tid of 256. Each key block's S = Q K^T is issued together with the previous block's
// O += P V, and the softmax of the new S overlaps the P V product.
template <class C>
CUTE_DEVICE void consume(FwdParams<C> const& p, typename C::SharedStorage& ss, typename C::PipelineKV& pipe_k,
                         typename C::PipelineKV& pipe_v, TileWork const& w, int tid) {
  using Element = typename C::Element;
  static_assert(C::kConsumers == 2, "the turn-taking below is written for two consumer warpgroups");
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutKV{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutVt{});

  typename C::TiledMmaS mma_s;
  typename C::TiledMmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);   // (MMA, 1, D/16) descriptors
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (MMA, 1, D/16, stages)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (MMA, 1, N/16, stages)
  Tensor tOrO = partition_fragment_C(mma_o, typename C::TileO{});
  Tensor tOrO_rc = make_tensor(tOrO.data(), rowcol(tOrO.layout()));
  Tensor cS_rc = [&] {
    Tensor c = thr_s.partition_C(make_identity_tensor(typename C::TileS{}));
    return make_tensor(c.data(), rowcol(c.layout()));
  }();
  using LayoutS = decltype(partition_fragment_C(mma_s, typename C::TileS{}).layout());
  Tensor rP = make_tensor<Element>(LayoutS{});                        // softmax(S) rounded, kept for O += P V
  Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(LayoutS{}));  // the same registers as wgmma's A operand
  static_assert(decltype(size<1>(tOrP))::value == 1 && decltype(size<2>(tOrP))::value == C::kBlockN / 16);
  static_assert(decltype(size(tOrP))::value == decltype(size(partition_shape_A(mma_o, typename C::TileS{})))::value);
  static_assert(decltype(size<0>(tOrP))::value == 8 && decltype(size<2>(tOrV))::value == C::kBlockN / 16);
  static_assert(decltype(size<2>(tSrQ))::value == C::kHeadDim / 16 &&
                decltype(size<2>(tSrK))::value == C::kHeadDim / 16);
  constexpr int kRows = decltype(size<0>(tOrO_rc))::value;
  static_assert(kRows == 2 && decltype(size<0>(rowcol(LayoutS{})))::value == kRows);

  OnlineSoftmax<kRows> softmax(p.score_log2);
  clear(tOrO);
  const int row0 = w.m_block * C::kBlockM;
  const int row_last = min(row0 + C::kBlockM, w.vis.len_q) - 1;
  const int consumer = tid / 128;

  // Scores as the softmax wants them: capped, hidden keys at -inf (element-wise on boundary blocks only).
  auto finish_scores = [&](auto& tSrS, int n) {
    if (p.tanh_scale != 0.f) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) tSrS(i) = tanhf(tSrS(i) * p.tanh_scale);
    }
    if (w.vis.block_needs_mask(row0, row_last, n * C::kBlockN, C::kBlockN)) {
      Tensor s_rc = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
      apply_mask(s_rc, cS_rc, w.vis, row0, n * C::kBlockN);
    }
  };

  if (w.n_end > w.n_begin) {
    if (consumer == 1) pass_turn(consumer);  // consumer 0 goes first
    ss.q_full.wait(0);
    cutlass::PipelineState<C::kStages> k_state, v_state;
    float rescale[kRows];
    int n = w.n_end - 1;
    {
      Tensor tSrS = partition_fragment_C(mma_s, typename C::TileS{});
      pipe_k.consumer_wait(k_state);
      wait_turn(consumer);
      gemm<true>(mma_s, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
      pass_turn(consumer);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(k_state);
      ++k_state;
      finish_scores(tSrS, n);
      Tensor s_rc = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
      softmax.update(s_rc, rescale);  // the output is still 0: nothing to rescale
      convert_into(tSrS, rP);
    }
    for (--n; n >= w.n_begin; --n) {
      Tensor tSrS = partition_fragment_C(mma_s, typename C::TileS{});
      pipe_k.consumer_wait(k_state);
      pipe_v.consumer_wait(v_state);
      wait_turn(consumer);
      gemm<true>(mma_s, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
      warpgroup_fence_operand(rP);
      gemm<false>(mma_o, tOrP, tOrV(_, _, _, v_state.index()), tOrO);
      pass_turn(consumer);
      warpgroup_wait<1>();  // S is ready; P V still runs
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(k_state);
      ++k_state;
      finish_scores(tSrS, n);
      Tensor s_rc = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
      softmax.update(s_rc, rescale);
      warpgroup_wait<0>();  // P V done: its V stage and P's registers are free
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(rP);
      pipe_v.consumer_release(v_state);
      ++v_state;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        CUTE_UNROLL
        for (int k = 0; k < size<1>(tOrO_rc); ++k) tOrO_rc(r, k) *= rescale[r];
      }
      convert_into(tSrS, rP);
    }
    pipe_v.consumer_wait(v_state);
    wait_turn(consumer);
    warpgroup_fence_operand(rP);
    gemm<false>(mma_o, tOrP, tOrV(_, _, _, v_state.index()), tOrO);
    if (consumer == 0) pass_turn(consumer);  // consumer 1 had one turn passed to it before the loop
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    warpgroup_fence_operand(rP);
    pipe_v.consumer_release(v_state);
  }

  // Epilogue: normalise, round once to the output type and store the sequence's rows straight from registers
  // (adjacent column pairs: 4-byte stores); rows past the sequence belong to another sequence or to no one.
  float out_scale[kRows], lse[kRows];
  softmax.finish(out_scale, lse);
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    CUTE_UNROLL
    for (int k = 0; k < size<1>(tOrO_rc); ++k) tOrO_rc(r, k) *= out_scale[r];
  }
  Tensor rO = make_tensor<Element>(tOrO.layout());
  convert_into(tOrO, rO);
  Tensor cO = thr_o.partition_C(make_identity_tensor(typename C::TileO{}));
  static_assert(decltype(size<0, 0>(tOrO))::value == 2 && decltype(stride<0, 0>(tOrO.layout()))::value == 1);
  Element* o = p.o + w.batch * p.o_batch_stride + w.head * p.o_head_stride + int64_t(w.q_start) * p.o_seq_stride;
  CUTE_UNROLL
  for (int i = 0; i < size(rO); i += 2) {
    const int row = row0 + get<0>(cO(i)), col = get<1>(cO(i));
    if (row < w.vis.len_q)
      *reinterpret_cast<uint32_t*>(o + row * p.o_seq_stride + col) = *reinterpret_cast<uint32_t const*>(&rO(i));
  }
  if (p.lse != nullptr && tid % 4 == 0) {
    Tensor cO_rc = make_tensor(cO.data(), rowcol(cO.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + get<0>(cO_rc(r, 0));
      if (row < w.vis.len_q) {
        const int64_t at = p.cu_seqlens_q != nullptr ? int64_t(w.head) * p.total_q + w.q_start + row
                                                     : (int64_t(w.batch) * p.heads_q + w.head) * p.seqlen_q + row;
        p.lse[at] = lse[r];
      }
    }
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) fwd_kernel(CUTE_GRID_CONSTANT FwdParams<C> const p) {
#if defined(CUTLASS_ARCH_MMA_SM90A_ENABLED)
  extern __shared__ char smem[];
  auto& ss = *reinterpret_cast<typename C::SharedStorage*>(smem);

  const TileWork w = tile_at(p, int(blockIdx.x));
  if (w.m_block * C::kBlockM >= w.vis.len_q) return;  // variable length: a sequence shorter than the longest

  const int warp_group = cutlass::canonical_warp_group_idx();
  if (threadIdx.x == 0) {
    ss.q_full.init(1);
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
  }
  typename C::PipelineKV::Params pp;
  pp.transaction_bytes = C::kBytesKV;
  pp.role = warp_group == 0 ? C::PipelineKV::ThreadCategory::Producer : C::PipelineKV::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = 128 * C::kConsumers;
  typename C::PipelineKV pipe_k(ss.pipe_k, pp, cute::Shape<_1, _1, _1>{});
  typename C::PipelineKV pipe_v(ss.pipe_v, pp, cute::Shape<_1, _1, _1>{});
  __syncthreads();  // barriers initialised before anyone waits on them

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegs>();
    if (threadIdx.x == 0 && w.n_end > w.n_begin) produce(p, ss, pipe_k, pipe_v, w);
  } else {
    cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegs>();
    consume(p, ss, pipe_k, pipe_v, w, int(threadIdx.x) - 128);
  }
#endif
}

}  // namespace tigon::attention::sm90
