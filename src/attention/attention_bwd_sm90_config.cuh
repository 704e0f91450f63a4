// Hopper backward kernel: tile shapes, shared-memory layouts, wgmma and TMA types, and the kernel's parameters, per
// element type and head dim (64 or 128).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include <cstdint>
#include <type_traits>

#include "attention/attention_bwd_sm90_order.h"
#include "attention/attention_fwd_sm90_config.cuh"

namespace tigon::attention::sm90 {

using namespace cute;

// One CTA per key tile of a (key/value head, sequence). It keeps K and V in shared memory and walks the query tiles
// (64 rows) of every query head of its group that meet its keys. Per query tile, with the scores transposed (keys as
// wgmma rows):
//   S^T = K Q^T and dP^T = V dO^T          (from shared memory)
//   P^T = exp2(S^T log2e scale - lse), dS^T = P^T (dP^T - delta)          (registers, fp32)
//   dV += P^T dO and dK += dS^T Q
//   dQ  = dS K                             (dS through shared memory; each warpgroup half of the head dim)
// Two ways to share the work between the two consumer warpgroups:
//   head dims 64 and 128: 128 keys a CTA, each warpgroup owns 64 of them end to end; P and dS stay in its
//     registers as the A operand of dV and dK, 2 stages of Q and dO, 2 dq buffers.
//   head dim 256 (kSplitDim): 64 keys a CTA, shared. Each warpgroup computes S^T and dP^T for half of the queries,
//     and dV, dK (and dQ) for half of the head dim: a 64 x 256 fp32 dK plus dV per warpgroup would need 256
//     registers a thread. P^T and dS^T go through shared memory for all three products; shared memory then holds
//     one stage of Q and dO and one dq buffer (K, V, Q, dO 32 KB each, dq 64 KB).
// dQ goes to an fp32 accumulator in global memory, added in a fixed order per query tile (the order's header) or,
// unordered, as the tiles come.
template <class Element_, int kHeadDim_>
struct BwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "the Hopper backward kernel takes head dims 64, 128 and 256");
  static constexpr bool kSplitDim = kHeadDim == 256;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kBlockM = 64;                                // query rows per step
  static constexpr int kBlockN = kSplitDim ? 64 : 64 * kConsumers;  // keys per CTA
  static constexpr int kStages = kSplitDim ? 1 : 2;
  static constexpr int kDQBuffers = kSplitDim ? 1 : 2;
  // The producer warpgroup: warp 0 issues the loads, warps 1 and 2 write dq; 24 * 128 + 240 * 256 is the 168 per
  // thread of 384 threads at launch (with 32 the consumers' setmaxnreg waits forever for registers nobody frees).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  using TileQ = cute::Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = cute::Shape<Int<kBlockN>, Int<kHeadDim>>;
  using TileSt = cute::Shape<Int<kBlockN>, Int<kBlockM>>;  // scores transposed: keys x queries
  using TileDKV = cute::Shape<Int<kBlockN>, Int<kHeadDim>>;
  using TileDQ = cute::Shape<Int<kBlockM>, Int<kHeadDim>>;

  using SmemAtom = decltype(smem_atom_k_major<Element, kHeadDim>());
  using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, TileKV{}));
  using SmemLayoutQStage = decltype(tile_to_shape(SmemAtom{}, TileQ{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, cute::Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  // Q and dO read as the B operand of dK += dS^T Q and dV += P^T dO: (head dim, query, stage), head dim contiguous.
  using SmemLayoutQt =
      decltype(composition(SmemLayoutQ{}, make_ordered_layout(cute::Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{},
                                                              Step<_2, _1, _3>{})));
  // K read as the B operand of dQ = dS K: (head dim, key), head dim contiguous.
  using SmemLayoutKt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(cute::Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{})));
  // dS as the A operand of dQ = dS K: (query, key, buffer), queries contiguous (MN-major), so that the consumers'
  // transposed tiles store adjacent queries side by side. Two buffers: one warpgroup may still read step t's while
  // the other writes step t + 1's.
  using SmemLayoutDS =
      decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, cute::Shape<Int<kBlockM>, Int<kBlockN>, _2>{}));
  // The same bytes as the consumers write them: (key, query, buffer).
  using SmemLayoutDSt = decltype(composition(
      SmemLayoutDS{}, make_ordered_layout(cute::Shape<Int<kBlockN>, Int<kBlockM>, _2>{}, Step<_2, _1, _3>{})));

  using ConsumerRows = Layout<cute::Shape<Int<kConsumers>, _1, _1>>;  // warpgroups stacked along M
  using ConsumerCols = Layout<cute::Shape<_1, Int<kConsumers>, _1>>;  // warpgroups side by side along N
  using SdPLayout = std::conditional_t<kSplitDim, ConsumerCols, ConsumerRows>;
  static constexpr int kSdPQueries = kSplitDim ? kBlockM / kConsumers : kBlockM;  // a warpgroup's S^T columns
  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, cute::Shape<_64, Int<kSdPQueries>, Int<kHeadDim>>>(), SdPLayout{}));
  // dV += P^T dO, dK += dS^T Q: P^T and dS^T from registers (each warpgroup its own keys, the whole head dim) or,
  // split, from shared memory (all keys, half the head dim each).
  using TiledMmaDKV = std::conditional_t<
      kSplitDim,
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<Element, Element, float, cute::Shape<_64, Int<kHeadDim / kConsumers>, Int<kBlockM>>,
                               GMMA::Major::K, GMMA::Major::MN>(),
          ConsumerCols{})),
      decltype(make_tiled_mma(
          GMMA::rs_op_selector<Element, Element, float, cute::Shape<_64, Int<kHeadDim>, Int<kBlockM>>, GMMA::Major::K,
                               GMMA::Major::MN>(),
          ConsumerRows{}))>;
  using TiledMmaDQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, cute::Shape<_64, Int<kHeadDim / kConsumers>, Int<kBlockN>>,
                           GMMA::Major::MN, GMMA::Major::MN>(),
      ConsumerCols{}));

  using GmemShape = typename FwdConfig<Element, kHeadDim>::GmemShape;
  using GmemStride = typename FwdConfig<Element, kHeadDim>::GmemStride;
  using GmemTensor = typename FwdConfig<Element, kHeadDim>::GmemTensor;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutQStage{}, TileQ{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutKV{}, TileKV{}, _1{}));

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesStats = kBlockM * sizeof(float);
  static constexpr uint32_t kBytesStage = 2 * kBytesQ + 2 * kBytesStats;  // q, dout, lse, delta
  static constexpr int kDQFloats = kBlockM * kHeadDim;                    // one dq tile, fp32

  using PipelineQ = cutlass::PipelineTmaAsync<kStages>;
  // Split, P^T as the A operand of dV: dS's layout, one buffer (a warpgroup writes the next step's P^T only after
  // both have released the stage, so after both products that read this one's).
  struct NoP {};
  using PStorage = std::conditional_t<kSplitDim, array_aligned<Element, cosize_v<SmemLayoutDS> / 2, 1024>, NoP>;

  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> v;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> dout;
    array_aligned<Element, cosize_v<SmemLayoutDS>, 1024> ds;
    PStorage p;
    array_aligned<float, kDQBuffers * kDQFloats, 128> dq;  // in the consumers' register order (dq's layout)
    array_aligned<float, kBlockM * kStages, 16> lse;
    array_aligned<float, kBlockM * kStages, 16> delta;
    typename PipelineQ::SharedStorage pipe_q;
    cutlass::arch::ClusterTransactionBarrier kv_full;
  };

  static_assert(sizeof(SharedStorage) <= 227 * 1024, "exceeds Hopper's shared memory per block");
  static_assert(size(TiledMmaSdP{}) == 128 * kConsumers && size(TiledMmaDKV{}) == 128 * kConsumers &&
                size(TiledMmaDQ{}) == 128 * kConsumers);
  static_assert(tile_size<0>(TiledMmaSdP{}) == kBlockN && tile_size<1>(TiledMmaSdP{}) == kBlockM);
  static_assert(tile_size<0>(TiledMmaDKV{}) == kBlockN && tile_size<1>(TiledMmaDKV{}) == kHeadDim);
  static_assert(tile_size<0>(TiledMmaDQ{}) == kBlockM && tile_size<1>(TiledMmaDQ{}) == kHeadDim);
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= launch_regs(kThreads) * kThreads);
};

// Everything the kernels read besides shared memory. The workspace holds, per query head, in padded query tiles
// (sequence b's tile m is tile tile_base(b) + m; a sequence's tiles never overlap the next one's):
//   lse_log2, delta: kBlockM floats a tile; dq_accum: kBlockM * head_dim floats a tile (in the register order of
//   the consumers' dq accumulator); semaphores: one int a tile, the number of key tiles that have added to it
//   (ordered accumulation only).
template <class Config>
struct BwdParams {
  using Element = typename Config::Element;
  typename Config::TmaQ tma_q, tma_dout;
  typename Config::TmaKV tma_k, tma_v;
  typename Config::GmemShape shape_q, shape_k;

  // Inputs and outputs as [batch, seq, heads, head_dim] with element strides (variable length: batch stride 0).
  const Element* o = nullptr;
  const Element* dout = nullptr;
  int64_t o_strides[3] = {}, dout_strides[3] = {};  // batch, seq, head
  Element* dq = nullptr;
  Element* dk = nullptr;
  Element* dv = nullptr;
  int64_t dq_strides[3] = {}, dk_strides[3] = {}, dv_strides[3] = {};
  const float* lse = nullptr;  // the forward's, natural log

  float* lse_log2 = nullptr;
  float* delta = nullptr;
  float* dq_accum = nullptr;
  int* semaphores = nullptr;
  float* dq_accum1 = nullptr;  // the second segment's (BwdSegments), tiles1 per (query head, sequence) from m1
  int* semaphores1 = nullptr;
  int m1 = 0;
  int64_t tiles1 = 0;
  int64_t tiles_per_head = 0;  // padded query tiles per query head

  const int32_t* cu_seqlens_q = nullptr;  // nullptr: dense
  const int32_t* cu_seqlens_k = nullptr;
  int seqlen_q = 0, seqlen_k = 0;  // dense: the lengths; variable length: the bounds
  int total_q = 0;
  int batch = 0, heads_q = 0, heads_kv = 0, group = 1;
  int n_blocks = 0;  // key tiles of the longest sequence
  BwdItems items{};  // the work items and their order (attention_bwd_sm90_order.h)

  float scale = 1.f;       // softmax scale
  float tanh_scale = 0.f;  // scale / softcap, 0 without a softcap
  float score_log2 = 0.f;  // (softcap or scale) * log2(e): the kept score x times this is the score in base 2
  int window_left = -1, window_right = -1;
};

}  // namespace tigon::attention::sm90
