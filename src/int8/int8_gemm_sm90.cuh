// The W8A8 linear's sm_90 GEMM: CUTLASS 3's warp-specialized persistent int8 GEMM (TMA into swizzled shared memory,
// wgmma with int32 accumulation), with the dequantization fused into its epilogue as an epilogue visitor tree:
//   out[m, n] = act(scale_x[m] * (scale_w[n] * acc[m, n]) + bias[n])
// in fp32, one rounding to out's dtype, TMA store. Shared by the library's instantiations (int8_cuda.cu) and the tile
// sweep in bench/micro/int8_gemm_tiles.cu.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <cstdint>
#include <type_traits>

#include "common/cutlass_activation.cuh"
#include "int8/int8.h"

namespace tigon::int8::sm90 {

using namespace cute;

// out (row-major [M, N]) = A (row-major [M, K]) · B (row-major [N, K], nn.Linear's weight)ᵀ: CUTLASS's "TN" GEMM,
// the only layout its int8 wgmma takes (both operands K-major). The library runs 128 x 256 tiles in 2 x 1 clusters
// and 128 x 128 tiles for small M (int8_gemm_sm90.cu).
template <class Out, int Act, int TileM = 128, int TileN = 256, int ClusterM = 1, bool Pingpong = false>
struct Config {
  using Element = int8_t;
  static constexpr int kAlignAB = 16;                                     // 16-byte TMA rows
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<Out>::value;  // ditto for the output
  using TileShape = Shape<Int<TileM>, Int<TileN>, _128>;                  // 128 int8 = 128 bytes deep
  using ClusterShape = Shape<Int<ClusterM>, _1, _1>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // scale_w[n] * acc, then scale_x[m] * that + bias[n], then the activation (bias nullptr: 0)
  using ScaleW = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;
  using ScaleX = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, int64_t>>;
  using Bias = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, Out, float, Stride<_0, _1, int64_t>>;
  using Scaled = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, ScaleW,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  using Dequantized = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, float, float, kRound>, ScaleX, Scaled,
      Bias>;
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cuda::CutlassActivation<Act>::template Fn, Out, float, kRound>,
      Dequantized>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, void, cutlass::layout::RowMajor, kAlignD, Out,
      cutlass::layout::RowMajor, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, kAlignAB, Element,
      cutlass::layout::ColumnMajor, kAlignAB, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// The GEMM's arguments for problem p on a device with sms multiprocessors.
template <class C>
typename C::Gemm::Arguments arguments(const LinearProblem& p, int device, int sms) {
  using Out = typename C::Epilogue::ElementD;
  const int M = int(p.qx.rows), N = int(p.qw.rows), K = int(p.qx.cols);
  typename C::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {M, N, K, 1};
  args.mainloop.ptr_A = static_cast<const int8_t*>(p.qx.data);
  args.mainloop.ptr_B = static_cast<const int8_t*>(p.qw.data);
  using StrideA = typename C::Kernel::StrideA;
  using StrideB = typename C::Kernel::StrideB;
  using StrideD = typename C::Kernel::StrideD;
  StrideA da{};
  StrideB db{};
  StrideD dd{};
  get<0>(da) = p.qx.row_stride;  // (M, K, L): rows of x
  get<0>(db) = p.qw.row_stride;  // (N, K, L): rows of the weight
  get<0>(dd) = p.out.row_stride;
  args.mainloop.dA = da;
  args.mainloop.dB = db;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<Out*>(p.out.data);
  args.epilogue.dD = dd;
  // The tree's arguments: {{{scale_x}, {{scale_w}, {}, {}}, {bias}, {}}, {}}
  auto& act = args.epilogue.thread;
  auto& dq = act.op_0;
  dq.op_0 = {p.scale_x, 0.f, {}};                           // scale_x: one per row m
  dq.op_1.op_0 = {p.scale_w, 0.f, {}};                      // scale_w: one per column n
  dq.op_2 = {static_cast<const Out*>(p.bias), Out(0), {}};  // bias (nullptr reads 0)
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

}  // namespace tigon::int8::sm90
