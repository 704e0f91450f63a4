// Linear + activation's sm_90 inference GEMM: CUTLASS 3's warp-specialized persistent GEMM (TMA into swizzled shared
// memory, wgmma with fp32 accumulation) with the bias and the activation in its epilogue, as an epilogue visitor tree:
//   out[m, n] = act(acc[m, n] + bias[n])
// in fp32, one rounding to out's dtype, TMA store. It covers the activations cuBLASLt has no epilogue for (GELU-erf,
// SiLU), which otherwise take a second pass over the output. Shared by the library's instantiations
// (linear_act_sm90.cu) and the configuration sweep in bench/micro/linear_act_tiles.cu.
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

#include <type_traits>

#include "common/cutlass_activation.cuh"
#include "linear_act/linear_act.h"

namespace tigon::linear_act::sm90 {

using namespace cute;

// out (row-major [M, N]) = act(x (row-major [M, K]) · W (row-major [N, K], nn.Linear's weight)ᵀ + bias): both
// operands K-major ("TN"). T: cutlass::bfloat16_t or cutlass::half_t, for x, W, bias and out.
template <class T, int Act, int TileM = 128, int TileN = 256, int ClusterM = 2, bool Pingpong = false>
struct Config {
  static constexpr int kAlign = 8;  // 16-byte TMA rows
  using TileShape = Shape<Int<TileM>, Int<TileN>, _64>;  // 64 elements = 128 bytes deep
  using ClusterShape = Shape<Int<ClusterM>, _1, _1>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // acc + bias[n] (bias nullptr: 0), then the activation
  using Bias = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, T, float, Stride<_0, _1, int64_t>>;
  using Z = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, float, float, kRound>, cutlass::epilogue::fusion::Sm90AccFetch,
      Bias>;
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cuda::CutlassActivation<Act>::template Fn, T, float, kRound>, Z>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::RowMajor, kAlign, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// The GEMM's arguments for problem p on a device with sms multiprocessors.
template <class C>
typename C::Gemm::Arguments arguments(const FwdProblem& p, int device, int sms) {
  using T = typename C::Epilogue::ElementD;
  typename C::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {int(p.x.rows), int(p.w.rows), int(p.x.cols), 1};  // M, N, K, batch
  args.mainloop.ptr_A = static_cast<const T*>(p.x.data);
  args.mainloop.ptr_B = static_cast<const T*>(p.w.data);
  typename C::Kernel::StrideA da{};
  typename C::Kernel::StrideB db{};
  typename C::Kernel::StrideD dd{};
  get<0>(da) = p.x.row_stride;  // (M, K, L): rows of x
  get<0>(db) = p.w.row_stride;  // (N, K, L): rows of the weight
  get<0>(dd) = p.out.row_stride;
  args.mainloop.dA = da;
  args.mainloop.dB = db;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<T*>(p.out.data);
  args.epilogue.dD = dd;
  // The tree's arguments: {{{}, {bias}, {}}, {}}
  args.epilogue.thread.op_0.op_1 = {static_cast<const T*>(p.bias), T(0), {}};
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

}  // namespace tigon::linear_act::sm90
