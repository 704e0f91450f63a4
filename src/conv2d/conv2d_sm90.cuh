// The sm_90 implicit-GEMM convolution's CUTLASS 3 configuration and its arguments, shared by the library's
// instantiations (src/conv2d/conv2d_cuda.cu) and the tile sweep in bench/micro/.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/kernel_hardware_info.hpp>  // before the conv headers, which use it without including it

#include <cutlass/conv/collective/collective_builder.hpp>
#include <cutlass/conv/convnd_problem_shape.hpp>
#include <cutlass/conv/device/conv_universal_adapter.hpp>
#include <cutlass/conv/dispatch_policy.hpp>
#include <cutlass/conv/kernel/conv_universal.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/numeric_types.h>

#include "conv2d/conv2d.h"

namespace tigon::conv2d::sm90 {

using namespace cute;

// A producer warp and one consumer warpgroup per output tile (TileM pixels x TileN channels, 64-deep reduction
// stages, as many as shared memory holds); CUTLASS's convolutions take no persistent schedule yet.
template <class Element, template <class> class Act, int TileM = 128, int TileN = 128, int ClusterM = 1>
struct Config {
  using Element_ = Element;
  using Layout = cutlass::layout::TensorNHWC;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;  // 16-byte TMA rows
  using TileShape = Shape<Int<TileM>, Int<TileN>, Shape<_64>>;
  using ClusterShape = Shape<Int<ClusterM>, _1, _1>;
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<Act, Element, float, Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Element, Layout, kAlign, Element, Layout, kAlign,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, Element, Layout, kAlign,
      Element, Layout, kAlign, float, TileShape, ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
  using ProblemShape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, Mainloop::NumSpatialDimensions>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, Mainloop, Epilogue>;
  using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
};

// The kernel's arguments for problem p (dense channels-last tensors) on a device with sms multiprocessors.
template <class C, class Element = typename C::Element_>
typename C::Conv::Arguments arguments(const Problem& p, int device, int sms) {
  using ProblemShape = typename C::ProblemShape;
  using Extent = typename ProblemShape::TensorExtent;
  using Stride = typename ProblemShape::TensorStride;
  const int n = int(p.n), c = int(p.c), h = int(p.h), w = int(p.w), k = int(p.k), r = int(p.r), s = int(p.s);
  const ProblemShape shape(cutlass::conv::Mode::kCrossCorrelation, Extent{n, h, w, c},
                           Stride{int64_t(h) * w * c, int64_t(w) * c, c, 1}, Extent{k, r, s, c},
                           Stride{int64_t(r) * s * c, int64_t(s) * c, c, 1}, {p.pad_h, p.pad_w}, {p.pad_h, p.pad_w},
                           {p.stride_h, p.stride_w}, {p.dil_h, p.dil_w}, 1);

  typename C::Conv::Arguments args{};
  args.problem_shape = shape;
  args.mainloop.ptr_A = static_cast<const Element*>(p.x);
  args.mainloop.ptr_B = static_cast<const Element*>(p.weight);
  auto& fusion = args.epilogue.thread;
  fusion.alpha = 1.f;
  fusion.beta = p.residual ? 1.f : 0.f;
  fusion.bias_ptr = static_cast<const Element*>(p.bias);  // nullptr: the broadcast reads 0
  // Without a residual the source is never read (beta = 0), but its descriptor still wants a real address: y's.
  args.epilogue.ptr_C = static_cast<const Element*>(p.residual ? p.residual : p.y);
  args.epilogue.ptr_D = static_cast<Element*>(p.y);
  // y and the residual are [N, P, Q, K] dense: the GEMM's M mode is (Q, P, N), its N mode the channels
  using StrideC = typename C::Kernel::StrideC;
  using StrideD = typename C::Kernel::StrideD;
  StrideC dc{};
  StrideD dd{};
  cute::for_each(cute::make_seq<cute::rank<0>(StrideC{})>{}, [&](auto i) {
    cute::get<0, i>(dc) = shape.stride_C[ProblemShape::RankT - 2 - i];
    cute::get<0, i>(dd) = shape.stride_C[ProblemShape::RankT - 2 - i];
  });
  args.epilogue.dC = dc;
  args.epilogue.dD = dd;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

}  // namespace tigon::conv2d::sm90
