// Hopper forward kernel: tile shapes, shared-memory layouts, wgmma and TMA types, and the kernel's parameters, per
// element type (bf16 or fp16) and head dim.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/config.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include <cstdint>

namespace tigon::attention::sm90 {

using namespace cute;

// Registers per thread a CTA of `threads` gets at launch under __launch_bounds__(threads, 1) (the register file's 64K
// in units of 8 per thread). setmaxnreg only moves registers between warpgroups inside that allocation: a split whose
// total exceeds it leaves the growing warpgroups waiting forever.
constexpr int launch_regs(int threads) { return 65536 / threads / 8 * 8; }

// The widest swizzle whose row (128, 64 or 32 bytes) divides a head_dim row. TMA writes and wgmma reads the same
// pattern; 128-byte swizzling spreads one row's 16-byte chunks over all shared-memory banks.
template <class Element, int kHeadDim>
constexpr auto smem_atom_k_major() {
  constexpr int row_bytes = kHeadDim * int(sizeof(Element));
  if constexpr (row_bytes % 128 == 0) {
    return GMMA::Layout_K_SW128_Atom<Element>{};
  } else if constexpr (row_bytes % 64 == 0) {
    return GMMA::Layout_K_SW64_Atom<Element>{};
  } else {
    return GMMA::Layout_K_SW32_Atom<Element>{};
  }
}

template <class Element_, int kHeadDim_>
struct FwdConfig {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  // One producer warpgroup (TMA) and two consumer warpgroups (wgmma + softmax), each consumer owning 64 of the
  // tile's 128 query rows. The key block is as wide as registers allow: each consumer thread holds its share of the
  // 64 x kBlockN score tile and of the 64 x kHeadDim output, so head dim 256 takes 64 keys at a time.
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;
  static constexpr int kStages = 2;  // K and V tiles in flight while the consumers work on the previous ones
  // Registers per thread after the split (setmaxnreg): the producer only issues TMA; 24*128 + 240*256 is the 168 per
  // thread of 384 threads at launch.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  using TileQ = cute::Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = cute::Shape<Int<kBlockN>, Int<kHeadDim>>;
  using TileS = cute::Shape<Int<kBlockM>, Int<kBlockN>>;
  using TileO = cute::Shape<Int<kBlockM>, Int<kHeadDim>>;

  using SmemAtom = decltype(smem_atom_k_major<Element, kHeadDim>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, TileQ{}));
  using SmemLayoutKVStage = decltype(tile_to_shape(SmemAtom{}, TileKV{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, cute::Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V read as the B operand of O = P V: (head_dim, key, stage) over the same bytes, head_dim contiguous (MN-major).
  using SmemLayoutVt =
      decltype(composition(SmemLayoutKV{}, make_ordered_layout(cute::Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{},
                                                               Step<_2, _1, _3>{})));

  // S = Q K^T: both operands from shared memory, K-major. O += P V: P from registers (the softmax output never goes
  // through shared memory), V from shared memory, MN-major.
  using ConsumerLayout = Layout<cute::Shape<Int<kConsumers>, _1, _1>>;
  using TiledMmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, cute::Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      ConsumerLayout{}));
  using TiledMmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, cute::Shape<_64, Int<kHeadDim>, Int<kBlockN>>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      ConsumerLayout{}));

  // q, k, v in global memory as TMA sees them: (seq, head_dim, heads, batch), head_dim contiguous. Variable length
  // uses seq = all packed tokens and batch = 1.
  using GmemShape = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;
  using GmemTensor =
      decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), Layout<GmemShape, GmemStride>{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutQ{}, TileQ{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutKVStage{}, TileKV{}, _1{}));

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);

  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    // 1024-byte alignment: the 128-byte swizzle pattern repeats every 1024 bytes and TMA and wgmma both assume it
    // starts at a multiple of that.
    array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemLayoutKV>, 1024> v;
    typename PipelineKV::SharedStorage pipe_k;
    typename PipelineKV::SharedStorage pipe_v;
    cutlass::arch::ClusterTransactionBarrier q_full;
  };

  static_assert(size(SmemLayoutQ{}) == kBlockM * kHeadDim);
  static_assert(size(SmemLayoutKV{}) == kBlockN * kHeadDim * kStages);
  static_assert(size(TiledMmaS{}) == 128 * kConsumers && size(TiledMmaO{}) == 128 * kConsumers);
  static_assert(tile_size<0>(TiledMmaS{}) == kBlockM && tile_size<1>(TiledMmaS{}) == kBlockN);
  static_assert(tile_size<0>(TiledMmaO{}) == kBlockM && tile_size<1>(TiledMmaO{}) == kHeadDim);
  static_assert(sizeof(SharedStorage) <= 227 * 1024, "exceeds Hopper's shared memory per block");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= launch_regs(kThreads) * kThreads);
};

// Everything the kernel reads besides shared memory. Lengths are int32 (TMA coordinates are); offsets int64.
template <class Config>
struct FwdParams {
  using Element = typename Config::Element;
  typename Config::TmaQ tma_q;
  typename Config::TmaKV tma_k, tma_v;
  typename Config::GmemShape shape_q, shape_k;  // as the descriptors were built

  Element* o = nullptr;
  int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
  float* lse = nullptr;  // nullptr: not wanted

  const int32_t* cu_seqlens_q = nullptr;  // nullptr: dense
  const int32_t* cu_seqlens_k = nullptr;
  int seqlen_q = 0, seqlen_k = 0;  // dense: the lengths; variable length: the bounds
  int total_q = 0;                 // variable length: lse's row stride per head
  int heads_q = 0, group = 1;      // query heads, query heads per key/value head
  // Tile order (see tile_at): (head, sequence) pairs in sections of section_pairs, whose keys and values fit in L2
  // together; each section's query tiles longest first.
  int m_blocks = 0, pairs = 0, section_pairs = 1;

  // Scores are kept as x = q.k (no softcap) or x = tanh(scale q.k / softcap); the score is x times scale or
  // softcap, and x * score_log2 is the score in base-2 units, so exp2 computes the softmax.
  float tanh_scale = 0.f;  // scale / softcap, 0 without a softcap
  float score_log2 = 0.f;
  int window_left = -1, window_right = -1;  // -1: unbounded (causal: window_right = 0)
};

}  // namespace tigon::attention::sm90
