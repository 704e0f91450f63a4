// 2-D convolution, CUDA path (sm_90): CUTLASS 3's implicit-GEMM convolution. The GEMM view: M = N·P·Q output pixels,
// N = K output channels, reduction over C·R·S; the activation tile comes in by TMA in im2col mode (the hardware
// gathers the filter window, zero-filling the padding), the filter tile by plain TMA, warp-specialized wgmma
// accumulates in fp32, and the epilogue applies bias (one value per output channel: a GEMM column), the residual
// (the epilogue's source operand C, beta = 1) and ReLU before the one rounding and the TMA store.
// Tile configurations (conv2d_sm90.cuh), no cluster: 128 x 128 output tiles, 128 x 64 where K <= 64. 1 x 1
// convolutions with unit stride and no padding run as plain GEMMs instead (conv2d_1x1.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/error.h"
#include "conv2d/conv2d.h"
#include "conv2d/conv2d_sm90.cuh"

namespace tigon::conv2d {
namespace {

template <class Element, template <class> class Act, int TileN>
void run(const Problem& p, int device, cudaStream_t stream) {
  using C = sm90::Config<Element, Act, 128, TileN>;
  const typename C::Conv::Arguments args = sm90::arguments<C>(p, device, sm_count(device));
  typename C::Conv op;
  if (op.can_implement(args) != cutlass::Status::kSuccess)
    fail_arg("x", "this convolution is outside what the sm_90 kernel takes (C and K multiples of 8, padding <= 128, ",
             "dilated filter span < 255): N ", p.n, ", C ", p.c, ", H ", p.h, ", W ", p.w, ", K ", p.k, ", R ", p.r,
             ", S ", p.s);
  if (C::Conv::get_workspace_size(args) != 0)
    fail_arg("x", "this convolution would need a CUTLASS workspace, which the library's kernel is not set up for");
  if (op.initialize(args, nullptr, stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS could not set up the convolution kernel");
  if (op.run(stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_CUDA, "CUTLASS could not launch the convolution kernel");
  TIGON_CUDA_CHECK_LAUNCH();
}

// 64 output channels or fewer fill half a 128-wide tile: a 128 x 64 tile does half the MMA work (3x3 64 -> 64 at
// 56 x 56, batch 64: 73.7 against 100.6 us on an H200); wider layers keep 128 x 128, which wins on every other
// ResNet-50 layer (bench/micro/conv2d_tiles.cu).
template <class Element, template <class> class Act>
void run_tile(const Problem& p, int device, cudaStream_t stream) {
  if (p.k <= 64)
    run<Element, Act, 64>(p, device, stream);
  else
    run<Element, Act, 128>(p, device, stream);
}

template <class Element>
void run_act(const Problem& p, int device, cudaStream_t stream) {
  if (p.relu)
    run_tile<Element, cutlass::epilogue::thread::ReLu>(p, device, stream);
  else
    run_tile<Element, cutlass::epilogue::thread::Identity>(p, device, stream);
}

}  // namespace

size_t fwd_cuda_workspace(const Problem& p, int device) {
  return p.c % 8 == 0 && p.k % 8 == 0 && !is_gemm(p) ? cudnn_workspace(p, device) : 0;
}

void fwd_cuda(const Problem& p, int device, void* workspace, size_t workspace_bytes, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.c % 8 != 0) fail_arg("x", "has ", p.c, " channels; the CUDA convolution needs a multiple of 8");
  if (p.k % 8 != 0) fail_arg("weight", "has ", p.k, " output channels; the CUDA convolution needs a multiple of 8");
  // CUTLASS's GEMM view counts pixels (N·H·W in, N·P·Q out) and channels in 32-bit ints; addresses are 64-bit
  if (p.n * p.h * p.w > INT32_MAX || p.n * p.p * p.q > INT32_MAX || p.c * p.r * p.s > INT32_MAX)
    fail_arg("x", "is too large for the CUDA convolution: N·H·W = ", p.n * p.h * p.w, ", N·P·Q = ", p.n * p.p * p.q,
             " and C·R·S = ", p.c * p.r * p.s, " must each be < 2^31 (split the batch)");
  for (const void* ptr : {p.x, p.weight, p.bias, p.residual, static_cast<const void*>(p.y)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      fail_arg("x", "and the other tensors must start at 16-byte aligned addresses for the CUDA convolution");
  if (is_gemm(p)) return fwd_gemm_cuda(p, device, stream);
  if (fwd_cudnn(p, device, workspace, workspace_bytes, stream)) return;
  switch (p.dtype) {
    case DType::kBFloat16: run_act<cutlass::bfloat16_t>(p, device, st); break;
    case DType::kFloat16: run_act<cutlass::half_t>(p, device, st); break;
    default: fail_dtype("x", dtype_name(p.dtype), " is not taken by the CUDA convolution (fp16 or bf16)");
  }
}

}  // namespace tigon::conv2d
