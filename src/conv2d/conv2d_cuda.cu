// 2-D convolution, CUDA path (sm_90): CUTLASS 3's implicit-GEMM convolution. The GEMM view: M = N·P·Q output pixels,
// N = K output channels, reduction over C·R·S; the activation tile comes in by TMA in im2col mode (the hardware
// gathers the filter window, zero-filling the padding), the filter tile by plain TMA, warp-specialized wgmma
// accumulates in fp32, and the epilogue applies bias (one value per output channel: a GEMM column), the residual
// (the epilogue's source operand C, beta = 1) and ReLU before the one rounding and the TMA store.
// One tile configuration per dtype and activation: 128 x 128 output tile, 64-deep reduction stages, a producer warp
// and one consumer warpgroup per tile (CUTLASS's convolutions take no persistent schedule yet).
#include <cuda_runtime.h>

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

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/error.h"
#include "conv2d/conv2d.h"

namespace tigon::conv2d {
namespace {

using namespace cute;

template <class Element, template <class> class Act>
struct Config {
  using Layout = cutlass::layout::TensorNHWC;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;  // 16-byte TMA rows
  using TileShape = Shape<_128, _128, Shape<_64>>;
  using ClusterShape = Shape<_1, _1, _1>;
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

template <class Element, template <class> class Act>
void run(const Problem& p, int device, cudaStream_t stream) {
  using C = Config<Element, Act>;
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
  args.hw_info.sm_count = sm_count(device);

  typename C::Conv op;
  if (op.can_implement(args) != cutlass::Status::kSuccess)
    fail_arg("x", "this convolution is outside what the sm_90 kernel takes (C and K multiples of 8, padding <= 128, ",
             "dilated filter span < 255): N ", p.n, ", C ", p.c, ", H ", p.h, ", W ", p.w, ", K ", p.k, ", R ", p.r,
             ", S ", p.s);
  if (C::Conv::get_workspace_size(args) != 0)
    fail_arg("x", "this convolution would need a workspace, which tigon_conv2d_fwd does not take");
  if (op.initialize(args, nullptr, stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS could not set up the convolution kernel");
  if (op.run(stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_CUDA, "CUTLASS could not launch the convolution kernel");
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class Element>
void run_act(const Problem& p, int device, cudaStream_t stream) {
  if (p.relu)
    run<Element, cutlass::epilogue::thread::ReLu>(p, device, stream);
  else
    run<Element, cutlass::epilogue::thread::Identity>(p, device, stream);
}

}  // namespace

void fwd_cuda(const Problem& p, int device, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.c % 8 != 0) fail_arg("x", "has ", p.c, " channels; the CUDA convolution needs a multiple of 8");
  if (p.k % 8 != 0) fail_arg("weight", "has ", p.k, " output channels; the CUDA convolution needs a multiple of 8");
  for (const void* ptr : {p.x, p.weight, p.bias, p.residual, static_cast<const void*>(p.y)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      fail_arg("x", "and the other tensors must start at 16-byte aligned addresses for the CUDA convolution");
  switch (p.dtype) {
    case DType::kBFloat16: run_act<cutlass::bfloat16_t>(p, device, st); break;
    case DType::kFloat16: run_act<cutlass::half_t>(p, device, st); break;
    default: fail_dtype("x", dtype_name(p.dtype), " is not taken by the CUDA convolution (fp16 or bf16)");
  }
}

}  // namespace tigon::conv2d
