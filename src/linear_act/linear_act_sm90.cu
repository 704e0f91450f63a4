// Linear + activation's inference forward on sm_90 with the bias and the activation fused into a CUTLASS GEMM's
// epilogue (linear_act_sm90.cuh), for the activations cuBLASLt has no epilogue for: GELU-erf and SiLU (cuBLASLt's
// BIAS / RELU_BIAS / GELU_BIAS epilogues keep the others; linear_act_cuda.cu chooses).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/error.h"
#include "linear_act/linear_act.h"
#include "linear_act/linear_act_sm90.cuh"

namespace tigon::linear_act {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T, int Act, int TileN, int ClusterM>
void run(const FwdProblem& p, void* workspace, int device, cudaStream_t stream) {
  using C = sm90::Config<T, Act, 128, TileN, ClusterM>;
  const typename C::Gemm::Arguments args = sm90::arguments<C>(p, device, sm_count(device));
  typename C::Gemm op;
  if (op.can_implement(args) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS refused the linear's GEMM: M ", p.x.rows, ", N ", p.w.rows, ", K ", p.x.cols);
  if (C::Gemm::get_workspace_size(args) > kGemmWorkspace)
    fail(TIGON_ERROR_INTERNAL, "the linear's CUTLASS GEMM wants more workspace than its cuBLASLt share");
  if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS could not set up the linear's GEMM");
  if (op.run(stream) != cutlass::Status::kSuccess) fail(TIGON_ERROR_CUDA, "CUTLASS could not launch the linear's GEMM");
  TIGON_CUDA_CHECK_LAUNCH();
}

// 128 x 256 tiles in 2 x 1 clusters, or 128 x 128 tiles when the wide ones would not fill the GPU
// (bench/micro/linear_act_tiles.cu; docs/performance/linear-act.md).
template <class T, int Act>
void run_tile(const FwdProblem& p, void* workspace, int device, cudaStream_t stream) {
  const int64_t wide_tiles = (p.x.rows + 127) / 128 * ((p.w.rows + 255) / 256);
  if (wide_tiles < sm_count(device))
    run<T, Act, 128, 1>(p, workspace, device, stream);
  else
    run<T, Act, 256, 2>(p, workspace, device, stream);
}

template <class T>
void run_act(const FwdProblem& p, void* workspace, int device, cudaStream_t stream) {
  if (p.activation == TIGON_ACT_SILU)
    run_tile<T, TIGON_ACT_SILU>(p, workspace, device, stream);
  else
    run_tile<T, TIGON_ACT_GELU_ERF>(p, workspace, device, stream);
}

}  // namespace

bool fwd_sm90_applies(const FwdProblem& p, int device) {
  const bool act = p.activation == TIGON_ACT_GELU_ERF || p.activation == TIGON_ACT_SILU;
  const bool dtype = p.x.dtype == DType::kBFloat16 || p.x.dtype == DType::kFloat16;
  // TMA: 16-byte rows and addresses for x, W and out (8 elements); the bias is read 16 bytes at a time.
  return act && dtype && p.z.data == nullptr && p.residual.data == nullptr && p.x.cols % 8 == 0 &&
         p.x.row_stride % 8 == 0 && p.w.row_stride % 8 == 0 && p.w.rows % 8 == 0 && p.out.row_stride % 8 == 0 &&
         aligned16(p.x.data) && aligned16(p.w.data) && aligned16(p.out.data) &&
         (p.bias == nullptr || aligned16(p.bias)) && p.x.rows <= INT32_MAX && p.w.rows <= INT32_MAX &&
         p.x.cols <= INT32_MAX && has_sm90a(device);
}

void fwd_sm90(const FwdProblem& p, void* workspace, int device, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.x.dtype == DType::kBFloat16)
    run_act<cutlass::bfloat16_t>(p, workspace, device, st);
  else
    run_act<cutlass::half_t>(p, workspace, device, st);
}

}  // namespace tigon::linear_act
