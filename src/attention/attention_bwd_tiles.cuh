// Building blocks of the attention backward kernels: tile shapes and shared-memory layouts per head dim, tile loads
// from global memory (cp.async, rows past the end zero-filled), and a block GEMM over two shared-memory operands with
// CuTe's SM80 tensor-core atoms (mma.sync, fed by ldmatrix).
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/copy_traits_sm75.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm80.hpp>

#include <cstdint>
#include <type_traits>

namespace tigon::attention::bwd {

using namespace cute;

// One CTA keeps kBlockR rows (of keys for dk/dv, of queries for dq) and their partner tensor in shared memory and
// streams blocks of kBlockC rows of the other side past them. Eight warps.
//   GEMM1: scores and dP, kBlockR x kBlockC, reduction over the head dim (both operands K-major).
//   GEMM2: gradients, kBlockR x head_dim, reduction over kBlockC (the streamed operand read transposed).
template <class Element_, int kHeadDim_>
struct Config {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 256, "unsupported head_dim");
  static constexpr int kThreads = 256;
  // 64 resident rows: the two fp32 accumulators of 64 x head_dim spread over 256 threads. Up to head_dim 128 two
  // CTAs share an SM (128 registers a thread, 2 x 113 KiB of shared memory at the most).
  static constexpr int kBlockR = 64;
  static constexpr int kMinBlocks = kHeadDim <= 128 ? 2 : 1;
  static constexpr int kBlockC = 64;

  using Atom = std::conditional_t<std::is_same_v<Element, bfloat16_t>, SM80_16x8x16_F32BF16BF16F32_TN,
                                  SM80_16x8x16_F32F16F16F32_TN>;
  // Warp grid 4 x 2 for both GEMMs: 16 rows by half the columns a warp. The tile's N of 16 per warp lets one
  // ldmatrix.x4 feed two n8 atoms.
  static constexpr int kWarpsM = 4;
  static constexpr int kWarpsN = 2;
  static_assert(kWarpsM * kWarpsN * 32 == kThreads, "one warp per cell of the grid");
  using Mma = TiledMMA<MMA_Atom<Atom>, Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>,
                       Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>>;
  static_assert(kBlockR % (16 * kWarpsM) == 0 && kBlockC % (16 * kWarpsN) == 0 && kHeadDim % (16 * kWarpsN) == 0,
                "tile not divisible by the warp grid");

  // Shared memory: rows of 64 (or 32) elements swizzled in 16-byte chunks so ldmatrix reads hit distinct banks; an
  // 8-element chunk stays contiguous, which the 16-byte loads and stores rely on.
  static constexpr int kSmemCols = kHeadDim % 64 == 0 ? 64 : 32;
  using AtomD = decltype(composition(Swizzle<kSmemCols == 64 ? 3 : 2, 3, 3>{},
                                     Layout<Shape<_8, Int<kSmemCols>>, Stride<Int<kSmemCols>, _1>>{}));
  using AtomC = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
  static_assert(kBlockC % 64 == 0, "the score tile's swizzle atom is 64 columns wide");
  using LayoutRD = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockR>, Int<kHeadDim>>{}));
  using LayoutCD = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockC>, Int<kHeadDim>>{}));
  // The streamed tile seen as head_dim x kBlockC: element (d, c) is element (c, d) of LayoutCD.
  using LayoutCDt = decltype(composition(LayoutCD{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockC>>{}, GenRowMajor{})));
  using LayoutRC = decltype(tile_to_shape(AtomC{}, Shape<Int<kBlockR>, Int<kBlockC>>{}));

  static constexpr int kStats = kBlockR > kBlockC ? kBlockR : kBlockC;
  struct Smem {
    alignas(128) Element x[cosize_v<LayoutRD>];     // resident: k (dk/dv) or q (dq)
    alignas(128) Element y[cosize_v<LayoutRD>];     // resident: v (dk/dv) or dout (dq)
    alignas(128) Element a[2][cosize_v<LayoutCD>];  // streamed, two stages: q (dk/dv) or k (dq)
    alignas(128) Element b[2][cosize_v<LayoutCD>];  // streamed: dout (dk/dv) or v (dq)
    alignas(128) Element p[cosize_v<LayoutRC>];     // probabilities (dk/dv only)
    alignas(128) Element ds[cosize_v<LayoutRC>];    // score gradients
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
// shared memory laid out by SmemLayout. Rows at or past `rows` become zeros, so that padded rows give finite
// products. aligned16: every row starts on a 16-byte boundary (cp.async); otherwise 2-byte loads.
template <int kRows, int kCols, int kThreads, class SmemLayout, class Element>
__device__ __forceinline__ void load_tile(Element* smem, const Element* g, int64_t stride, int rows, bool aligned16,
                                          int tid) {
  constexpr int kChunks = kCols / 8;
  static_assert(kCols % 8 == 0 && (kRows * kChunks) % kThreads == 0, "tile not divisible into 16-byte chunks");
#pragma unroll
  for (int it = 0; it < kRows * kChunks / kThreads; ++it) {
    const int c = it * kThreads + tid;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    Element* dst = smem + SmemLayout{}(r, col);
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

// acc (M x N, the tiled MMA's C fragment) += sA (M x K) * sB (N x K)^T, both in shared memory, K-major or not:
// CopyA / CopyB are the ldmatrix atoms that read them (LDSM_N for K-major, LDSM_T for a transposed view). The next
// K slice's ldmatrix is issued before the current slice's MMAs.
template <class CopyA, class CopyB, class Mma, class Acc, class TA, class TB>
__device__ __forceinline__ void gemm_smem(const Mma& mma, Acc& acc, const TA& sA, const TB& sB, int tid) {
  auto thr = mma.get_thread_slice(tid);
  Tensor rA = thr.partition_fragment_A(sA);  // (MMA, MMA_M, MMA_K)
  Tensor rB = thr.partition_fragment_B(sB);  // (MMA, MMA_N, MMA_K)
  CUTE_STATIC_ASSERT_V(size<1>(rA) == size<1>(acc));
  CUTE_STATIC_ASSERT_V(size<1>(rB) == size<2>(acc));
  CUTE_STATIC_ASSERT_V(size<2>(rA) == size<2>(rB));

  auto copy_a = make_tiled_copy_A(Copy_Atom<CopyA, typename TA::value_type>{}, mma);
  auto copy_b = make_tiled_copy_B(Copy_Atom<CopyB, typename TB::value_type>{}, mma);
  auto thr_a = copy_a.get_thread_slice(tid);
  auto thr_b = copy_b.get_thread_slice(tid);
  Tensor sA_part = thr_a.partition_S(sA);
  Tensor rA_view = thr_a.retile_D(rA);
  Tensor sB_part = thr_b.partition_S(sB);
  Tensor rB_view = thr_b.retile_D(rB);
  CUTE_STATIC_ASSERT_V(size<1>(sA_part) == size<1>(rA_view));
  CUTE_STATIC_ASSERT_V(size<2>(sA_part) == size<2>(rA_view));
  CUTE_STATIC_ASSERT_V(size<1>(sB_part) == size<1>(rB_view));
  CUTE_STATIC_ASSERT_V(size<2>(sB_part) == size<2>(rB_view));

  constexpr int kK = decltype(size<2>(rA))::value;
  copy(copy_a, sA_part(_, _, 0), rA_view(_, _, 0));
  copy(copy_b, sB_part(_, _, 0), rB_view(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < kK; ++k) {
    if (k + 1 < kK) {
      copy(copy_a, sA_part(_, _, k + 1), rA_view(_, _, k + 1));
      copy(copy_b, sB_part(_, _, k + 1), rB_view(_, _, k + 1));
    }
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

}  // namespace tigon::attention::bwd
