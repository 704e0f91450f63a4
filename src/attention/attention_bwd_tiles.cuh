// Building blocks of the attention backward kernels: tile shapes and shared-memory layouts per head dim, tile loads
// from global memory (cp.async, rows past the end zero-filled), and a block GEMM over two shared-memory operands with
// Hopper's warpgroup MMA (wgmma, sm_90a) through CuTe's GMMA atoms.
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

#include <cstdint>
#include <type_traits>

namespace tigon::attention::bwd {

using namespace cute;

// One CTA keeps kBlockR rows (of keys for dk/dv, of queries for dq) and their partner tensor in shared memory and
// streams blocks of kBlockC rows of the other side past them. Two warpgroups; each takes the same 64 rows and half
// of the columns of both GEMMs:
//   GEMM1: scores and dP, kBlockR x kBlockC, reduction over the head dim (both operands K-major);
//   GEMM2: gradients, kBlockR x head_dim, reduction over kBlockC (the streamed operand read transposed: MN-major).
template <class Element_, int kHeadDim_>
struct Config {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 256, "unsupported head_dim");
  static constexpr int kThreads = 256;
  static constexpr int kBlockR = 64;  // one wgmma M
  static constexpr int kBlockC = 64;
  // Up to head_dim 128 two CTAs share an SM (128 registers a thread, 2 x 113 KiB of shared memory at the most).
  static constexpr int kMinBlocks = kHeadDim <= 128 ? 2 : 1;

  using Mma1 = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockC / 2>, _16>,
                                                            GMMA::Major::K, GMMA::Major::K>(),
                                       Layout<Shape<_1, _2, _1>>{}));
  using Mma2 = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim / 2>, _16>,
                                                            GMMA::Major::K, GMMA::Major::MN>(),
                                       Layout<Shape<_1, _2, _1>>{}));

  // Shared memory in wgmma's canonical K-major layouts: rows of 64 elements (32 for head_dim 96) swizzled in 16-byte
  // chunks. A chunk stays contiguous, which the 16-byte loads rely on; the swizzle follows the address bits, so each
  // buffer starts on a 1024-byte boundary.
  using AtomD =
      std::conditional_t<kHeadDim % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>, GMMA::Layout_K_SW64_Atom<Element>>;
  using AtomC = GMMA::Layout_K_SW128_Atom<Element>;
  static_assert(kBlockC % 64 == 0, "the score tile's swizzle atom is 64 columns wide");
  using LayoutRD = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockR>, Int<kHeadDim>>{}));
  using LayoutCD = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockC>, Int<kHeadDim>>{}));
  // The streamed tile seen as head_dim x kBlockC: element (d, c) is element (c, d) of LayoutCD.
  using LayoutCDt = decltype(composition(LayoutCD{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockC>>{}, GenRowMajor{})));
  using LayoutRC = decltype(tile_to_shape(AtomC{}, Shape<Int<kBlockR>, Int<kBlockC>>{}));

  static constexpr int kStats = kBlockR > kBlockC ? kBlockR : kBlockC;
  struct Smem {
    alignas(1024) Element x[cosize_v<LayoutRD>];     // resident: k (dk/dv) or q (dq)
    alignas(1024) Element y[cosize_v<LayoutRD>];     // resident: v (dk/dv) or dout (dq)
    alignas(1024) Element a[2][cosize_v<LayoutCD>];  // streamed, two stages: q (dk/dv) or k (dq)
    alignas(1024) Element b[2][cosize_v<LayoutCD>];  // streamed: dout (dk/dv) or v (dq)
    alignas(1024) Element p[cosize_v<LayoutRC>];     // probabilities (dk/dv only)
    alignas(1024) Element ds[cosize_v<LayoutRC>];    // score gradients
    float lse[2][kStats];  // per query row: lse * log2(e) and delta, per stage (dk/dv) or once (dq, stage 0)
    float delta[2][kStats];
  };
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
      "l"(gmem)
      : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  asm volatile(
      "cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
      "l"(gmem)
      : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Rows [0, kRows) x [0, kCols) of a row-major global tile (row stride `stride` elements, columns contiguous) into
// the shared-memory tensor sT. Rows at or past `rows` become zeros, so that padded rows give finite
// products. aligned16: every row starts on a 16-byte boundary (cp.async); otherwise 2-byte loads.
template <int kRows, int kCols, int kThreads, class SmemTensor, class Element>
__device__ __forceinline__ void load_tile(SmemTensor sT, const Element* g, int64_t stride, int rows, bool aligned16,
                                          int tid) {
  constexpr int kChunks = kCols / 8;
  static_assert(kCols % 8 == 0 && (kRows * kChunks) % kThreads == 0, "tile not divisible into 16-byte chunks");
#pragma unroll
  for (int it = 0; it < kRows * kChunks / kThreads; ++it) {
    const int c = it * kThreads + tid;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    Element* dst = &sT(r, col);
    if (r < rows) {
      const Element* src = g + r * stride + col;
      if (aligned16) {
        cp_async16(dst, src);
      } else {
        const uint16_t* s16 = reinterpret_cast<const uint16_t*>(src);
        uint4 w;
        w.x = uint32_t(s16[0]) | (uint32_t(s16[1]) << 16);
        w.y = uint32_t(s16[2]) | (uint32_t(s16[3]) << 16);
        w.z = uint32_t(s16[4]) | (uint32_t(s16[5]) << 16);
        w.w = uint32_t(s16[6]) | (uint32_t(s16[7]) << 16);
        *reinterpret_cast<uint4*>(dst) = w;
      }
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

// kRows per-row floats (lse and delta) into shared memory; rows at or past `rows` become 0 (they are masked).
template <int kRows, int kThreads>
__device__ __forceinline__ void load_stats(float* s_lse, float* s_delta, const float* g_lse, const float* g_delta,
                                           int rows, int tid) {
  for (int r = tid; r < kRows; r += kThreads) {
    if (r < rows) {
      cp_async4(s_lse + r, g_lse + r);
      cp_async4(s_delta + r, g_delta + r);
    } else {
      s_lse[r] = 0.f;
      s_delta[r] = 0.f;
    }
  }
}

// Makes this thread's shared-memory writes (st.shared, cp.async) visible to wgmma, which reads through the async
// proxy; a block barrier must follow before another warpgroup's wgmma reads them.
__device__ __forceinline__ void fence_smem_for_wgmma() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// acc (M x N, the tiled MMA's C fragment) += sA (M x K) * sB (N x K)^T, both operands read by wgmma straight from
// shared memory (K-major or MN-major as the tiled MMA declares); returns once the products are in acc.
template <class Mma, class Acc, class TA, class TB>
__device__ __forceinline__ void gemm_smem(Mma& mma, Acc& acc, const TA& sA, const TB& sB, int tid) {
  auto thr = mma.get_thread_slice(tid);
  Tensor tA = thr.partition_A(sA);      // (MMA, MMA_M, MMA_K)
  Tensor tB = thr.partition_B(sB);      // (MMA, MMA_N, MMA_K)
  Tensor dA = thr.make_fragment_A(tA);  // shared-memory descriptors
  Tensor dB = thr.make_fragment_B(tB);
  CUTE_STATIC_ASSERT_V(size<1>(dA) == size<1>(acc));
  CUTE_STATIC_ASSERT_V(size<1>(dB) == size<2>(acc));
  CUTE_STATIC_ASSERT_V(size<2>(dA) == size<2>(dB));
  constexpr int kK = decltype(size<2>(dA))::value;
  mma.accumulate_ = GMMA::ScaleOut::One;
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  CUTE_UNROLL
  for (int k = 0; k < kK; ++k) cute::gemm(mma, dA(_, _, k), dB(_, _, k), acc);
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);
}

}  // namespace tigon::attention::bwd
