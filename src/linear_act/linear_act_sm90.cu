// Linear + activation's inference forward on sm_90 with the bias and the activation in the GEMM's epilogue
// (common/gemm_sm90.cuh), for the activations cuBLASLt has no epilogue for: GELU-erf and SiLU. cuBLASLt's BIAS /
// RELU_BIAS / GELU_BIAS epilogues keep the others; linear_act_cuda.cu chooses.
#include "common/device.h"
#include "common/gemm_sm90.cuh"
#include "linear_act/linear_act.h"

namespace tigon::linear_act {
namespace {

cuda::sm90::EpilogueGemm gemm_of(const FwdProblem& p) {
  cuda::sm90::EpilogueGemm g;
  g.m = p.x.rows, g.n = p.w.rows, g.k = p.x.cols;
  g.a = p.x.data, g.lda = p.x.row_stride;
  g.b = p.w.data, g.ldb = p.w.row_stride;
  g.bias = p.bias;
  g.d = p.out.data, g.ldd = p.out.row_stride;
  return g;
}

template <class T>
void run_act(const cuda::sm90::EpilogueGemm& g, int act, void* workspace, int device, cudaStream_t stream) {
  if (act == TIGON_ACT_SILU)
    cuda::sm90::epilogue_gemm<T, TIGON_ACT_SILU>(g, workspace, kGemmWorkspace, device, stream);
  else
    cuda::sm90::epilogue_gemm<T, TIGON_ACT_GELU_ERF>(g, workspace, kGemmWorkspace, device, stream);
}

}  // namespace

bool fwd_sm90_applies(const FwdProblem& p, int device) {
  const bool act = p.activation == TIGON_ACT_GELU_ERF || p.activation == TIGON_ACT_SILU;
  const bool dtype = p.x.dtype == DType::kBFloat16 || p.x.dtype == DType::kFloat16;
  // the residual comes after the activation here, which the epilogue's C (added before it) is not
  return act && dtype && p.z.data == nullptr && p.residual.data == nullptr && p.x.rows > 0 &&
         cuda::sm90::epilogue_gemm_fits(gemm_of(p)) && has_sm90a(device);
}

void fwd_sm90(const FwdProblem& p, void* workspace, int device, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.x.dtype == DType::kBFloat16)
    run_act<cutlass::bfloat16_t>(gemm_of(p), p.activation, workspace, device, st);
  else
    run_act<cutlass::half_t>(gemm_of(p), p.activation, workspace, device, st);
}

}  // namespace tigon::linear_act
