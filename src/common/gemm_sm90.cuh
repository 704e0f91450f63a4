// The library's sm_90 GEMM with a fused epilogue: CUTLASS 3's warp-specialized persistent GEMM (TMA into swizzled
// shared memory, wgmma with fp32 accumulation) computing
//   D[m, n] = act(A[m, :] · B[n, :] + bias[n] (+ C[m, n]))
// in fp32 with one rounding to D's dtype and a TMA store. A is [M, K] and B [N, K], both K-major (x and nn.Linear's
// weight; a channels-last activation and a 1 x 1 filter), C and D are [M, N]; all row-major with 64-bit row strides.
// act is one of the library's activations (common/activation_math.cuh). Whether C is read is decided at run time
// (CUTLASS's beta), so one instantiation serves both. Used by the 1 x 1 convolutions (bias, shortcut and ReLU) and by
// the sweep in bench/micro/linear_act_tiles.cu.
#pragma once

#include <cuda_runtime.h>

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

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/cutlass_activation.cuh"
#include "common/device.h"
#include "common/error.h"

namespace tigon::cuda::sm90 {

using namespace cute;

// One GEMM's operands; c nullptr: no C.
struct EpilogueGemm {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  const void* bias = nullptr;  // n values of D's dtype, or nullptr (0)
  const void* c = nullptr;
  int64_t ldc = 0;
  void* d = nullptr;
  int64_t ldd = 0;
};

// Whether TMA takes the operands: 16-byte rows (K and the row strides multiples of 8 elements of 16 bits), 16-byte
// aligned addresses (the bias is read 16 bytes at a time), and sizes CUTLASS counts in 32-bit ints.
inline bool epilogue_gemm_fits(const EpilogueGemm& g) {
  return g.k % 8 == 0 && g.n % 8 == 0 && g.lda % 8 == 0 && g.ldb % 8 == 0 && g.ldd % 8 == 0 &&
         (g.c == nullptr || (g.ldc % 8 == 0 && aligned16(g.c))) && aligned16(g.a) && aligned16(g.b) && aligned16(g.d) &&
         (g.bias == nullptr || aligned16(g.bias)) && g.m > 0 && g.m <= INT32_MAX && g.n <= INT32_MAX &&
         g.k <= INT32_MAX;
}

// T: cutlass::bfloat16_t or cutlass::half_t, for A, B, bias, C and D. ActFn: the activation as a CUTLASS compute
// functor (another formula in a sweep; the library's act_fwd<Act> otherwise).
template <class T, int Act, int TileM = 128, int TileN = 256, int ClusterM = 2, bool Pingpong = false,
          template <class> class ActFn = CutlassActivation<Act>::template Fn>
struct GemmConfig {
  static constexpr int kAlign = 8;                       // 16-byte TMA rows
  using TileShape = Shape<Int<TileM>, Int<TileN>, _64>;  // 64 elements = 128 bytes deep
  using ClusterShape = Shape<Int<ClusterM>, _1, _1>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  // act(alpha · acc + beta · C + bias[n]), alpha = 1, beta = 1 with C and 0 without (C then never read)
  using Fusion =
      cutlass::epilogue::fusion::LinCombPerColBiasEltAct<CutlassActivation<Act>::template Fn, T, float, T, T, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, T, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::RowMajor, kAlign, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// The GEMM's arguments on a device with sms multiprocessors.
template <class Cfg>
typename Cfg::Gemm::Arguments gemm_arguments(const EpilogueGemm& g, int device, int sms) {
  using T = typename Cfg::Epilogue::ElementD;
  typename Cfg::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {int(g.m), int(g.n), int(g.k), 1};
  args.mainloop.ptr_A = static_cast<const T*>(g.a);
  args.mainloop.ptr_B = static_cast<const T*>(g.b);
  typename Cfg::Kernel::StrideA da{};
  typename Cfg::Kernel::StrideB db{};
  typename Cfg::Kernel::StrideC dc{};
  typename Cfg::Kernel::StrideD dd{};
  get<0>(da) = g.lda;  // (M, K, L)
  get<0>(db) = g.ldb;  // (N, K, L)
  get<0>(dd) = g.ldd;  // (M, N, L)
  get<0>(dc) = g.c ? g.ldc : g.ldd;
  args.mainloop.dA = da;
  args.mainloop.dB = db;
  auto& fusion = args.epilogue.thread;
  fusion.alpha = 1.f;
  fusion.beta = g.c ? 1.f : 0.f;
  fusion.bias_ptr = static_cast<const T*>(g.bias);  // nullptr: the broadcast reads 0
  // Without C the source is never read (beta = 0), but its descriptor still wants a real address: D's.
  args.epilogue.ptr_C = static_cast<const T*>(g.c ? g.c : g.d);
  args.epilogue.dC = dc;
  args.epilogue.ptr_D = static_cast<T*>(g.d);
  args.epilogue.dD = dd;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

// Checks, sets up and launches one CUTLASS 3 GEMM (a GemmUniversalAdapter) on stream; what names it in errors.
template <class Gemm>
void launch_gemm(const typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                 const char* what) {
  Gemm op;
  if (op.can_implement(args) != cutlass::Status::kSuccess) fail(TIGON_ERROR_INTERNAL, "CUTLASS refused ", what);
  if (Gemm::get_workspace_size(args) > workspace_bytes)
    fail(TIGON_ERROR_INTERNAL, what, " wants ", Gemm::get_workspace_size(args),
         " bytes of workspace, more than its caller has");
  if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS could not set up ", what);
  if (op.run(stream) != cutlass::Status::kSuccess) fail(TIGON_ERROR_CUDA, "CUTLASS could not launch ", what);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class Cfg>
void run_gemm(const EpilogueGemm& g, void* workspace, size_t workspace_bytes, int device, cudaStream_t stream) {
  launch_gemm<typename Cfg::Gemm>(gemm_arguments<Cfg>(g, device, sm_count(device)), workspace, workspace_bytes, stream,
                                  "the epilogue GEMM");
}

// 128 x 256 tiles in 2 x 1 clusters, or 128 x 128 tiles when the wide ones would not fill the GPU or N is 128 or
// less (a 256-wide tile would be half padding: M 200704, N 64, K 256 took 74.5 us against 57.3 on an H100;
// bench/micro/linear_act_tiles.cu, docs/performance/conv2d.md). g must satisfy epilogue_gemm_fits.
template <class T, int Act>
void epilogue_gemm(const EpilogueGemm& g, void* workspace, size_t workspace_bytes, int device, cudaStream_t stream) {
  const int64_t wide_tiles = (g.m + 127) / 128 * ((g.n + 255) / 256);
  if (g.n <= 128 || wide_tiles < sm_count(device))
    run_gemm<GemmConfig<T, Act, 128, 128, 1>>(g, workspace, workspace_bytes, device, stream);
  else
    run_gemm<GemmConfig<T, Act, 128, 256, 2>>(g, workspace, workspace_bytes, device, stream);
}

}  // namespace tigon::cuda::sm90
