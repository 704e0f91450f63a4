// The W8A8 linear on sm_90 with the dequantization fused into the GEMM's epilogue (int8_gemm_sm90.cuh), for the
// problems whose operands TMA can take; the others run cuBLASLt's int8 GEMM and a separate dequantize pass
// (int8_cuda.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/error.h"
#include "int8/int8.h"
#include "common/gemm_sm90.cuh"
#include "int8/int8_gemm_sm90.cuh"

namespace tigon::int8 {
namespace {

using cuda::aligned16;

template <class Out, int Act, int TileN, int ClusterM>
void run(const LinearProblem& p, void* workspace, size_t workspace_bytes, int device, cudaStream_t stream) {
  using C = sm90::Config<Out, Act, 128, TileN, ClusterM>;
  cuda::sm90::launch_gemm<typename C::Gemm>(sm90::arguments<C>(p, device, sm_count(device)), workspace, workspace_bytes,
                                            stream, "the int8 GEMM");
}

// 128 x 256 tiles in 2 x 1 clusters, or 128 x 128 tiles when the wide ones would not fill the GPU. On an H100 the
// wide tiles in clusters ran 8192^3 at 1552 TOPS with the dequantization (cuBLASLt's int8 GEMM alone: 1403; the same
// tiles without a cluster 1365), and M = 512, N = K = 4096 (64 wide tiles) at 561 against 892 for 128 x 128
// (bench/micro/int8_gemm_tiles.cu; docs/performance/int8.md).
template <class Out, int Act>
void run_tile(const LinearProblem& p, void* workspace, size_t bytes, int device, cudaStream_t stream) {
  const int64_t wide_tiles = (p.qx.rows + 127) / 128 * ((p.qw.rows + 255) / 256);
  if (wide_tiles < sm_count(device))
    run<Out, Act, 128, 1>(p, workspace, bytes, device, stream);
  else
    run<Out, Act, 256, 2>(p, workspace, bytes, device, stream);
}

template <class Out>
void run_act(const LinearProblem& p, void* workspace, size_t bytes, int device, cudaStream_t stream) {
  switch (p.activation) {
    case TIGON_ACT_RELU: return run_tile<Out, TIGON_ACT_RELU>(p, workspace, bytes, device, stream);
    case TIGON_ACT_GELU_ERF: return run_tile<Out, TIGON_ACT_GELU_ERF>(p, workspace, bytes, device, stream);
    case TIGON_ACT_GELU_TANH: return run_tile<Out, TIGON_ACT_GELU_TANH>(p, workspace, bytes, device, stream);
    case TIGON_ACT_SILU: return run_tile<Out, TIGON_ACT_SILU>(p, workspace, bytes, device, stream);
    default: return run_tile<Out, TIGON_ACT_NONE>(p, workspace, bytes, device, stream);
  }
}

}  // namespace

bool linear_fused_applies(const LinearProblem& p, int device) {
  const bool out16 = p.out.dtype == DType::kBFloat16 || p.out.dtype == DType::kFloat16;
  // TMA: 16-byte rows and addresses for both int8 operands and the 16-bit output (8 elements); the weight's scale and
  // the bias are read 16 bytes at a time.
  return out16 && has_sm90a(device) && p.qx.cols % 16 == 0 && p.qx.row_stride % 16 == 0 && p.qw.row_stride % 16 == 0 &&
         p.qw.rows % 8 == 0 && p.out.row_stride % 8 == 0 && aligned16(p.qx.data) && aligned16(p.qw.data) &&
         aligned16(p.out.data) && aligned16(p.scale_w) && (p.bias == nullptr || aligned16(p.bias)) &&
         p.qx.rows <= INT32_MAX && p.qw.rows <= INT32_MAX;
}

void linear_fused_cuda(const LinearProblem& p, void* workspace, size_t workspace_bytes, int device, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.out.dtype == DType::kBFloat16)
    run_act<cutlass::bfloat16_t>(p, workspace, workspace_bytes, device, st);
  else
    run_act<cutlass::half_t>(p, workspace, workspace_bytes, device, st);
}

}  // namespace tigon::int8
