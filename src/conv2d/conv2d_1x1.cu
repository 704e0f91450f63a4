// 1 x 1 convolutions with unit stride and no padding are GEMMs over channels-last tensors: y[N·H·W, K] =
// act(x[N·H·W, C] · weight[K, C]ᵀ + bias (+ residual)), run by the library's persistent sm_90 GEMM with the bias,
// shortcut and ReLU in its epilogue (common/gemm_sm90.cuh). Most of ResNet-50's convolutions are these; CUTLASS's
// implicit-GEMM convolution runs them one tile per CTA with no persistent schedule, 2-3x slower where the reduction
// is short (docs/performance/conv2d.md).
#include "common/gemm_sm90.cuh"
#include "conv2d/conv2d.h"

namespace tigon::conv2d {
namespace {

cuda::sm90::EpilogueGemm gemm_of(const Problem& p) {
  cuda::sm90::EpilogueGemm g;
  g.m = p.n * p.h * p.w, g.n = p.k, g.k = p.c;
  g.a = p.x, g.lda = p.c;
  g.b = p.weight, g.ldb = p.c;
  g.bias = p.bias;
  g.c = p.residual, g.ldc = p.k;
  g.d = p.y, g.ldd = p.k;
  return g;
}

template <class T>
void run(const Problem& p, int device, cudaStream_t stream) {
  // no workspace: the persistent scheduler's data-parallel mode wants none (run_gemm checks)
  if (p.relu)
    cuda::sm90::epilogue_gemm<T, TIGON_ACT_RELU>(gemm_of(p), nullptr, 0, device, stream);
  else
    cuda::sm90::epilogue_gemm<T, TIGON_ACT_NONE>(gemm_of(p), nullptr, 0, device, stream);
}

}  // namespace

bool is_gemm(const Problem& p) {
  return p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 &&
         (p.dtype == DType::kBFloat16 || p.dtype == DType::kFloat16) && cuda::sm90::epilogue_gemm_fits(gemm_of(p));
}

void fwd_gemm_cuda(const Problem& p, int device, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBFloat16)
    run<cutlass::bfloat16_t>(p, device, st);
  else
    run<cutlass::half_t>(p, device, st);
}

}  // namespace tigon::conv2d
