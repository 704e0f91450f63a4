// Linear + activation, CUDA path: cuBLASLt GEMMs with the bias and activation in their epilogues where cuBLASLt has
// one, the pointwise family's kernels where it has not (include/tigon/linear_act.h states which and why).
//  Forward:  [GEMM + BIAS/RELU_BIAS/GELU_BIAS/GELU_AUX_BIAS (+ C = residual for NONE)]  -- the fused path, or
//            [GEMM + BIAS -> z] -> [act(z) (+ residual) -> out]                         -- two passes, training;
//            [GEMM -> out] -> [act(out + bias) (+ residual) -> out]                      -- two passes, inference.
//  Backward: [dZ = dY ∘ act'(z), with fp32 partial column sums when db is wanted] -> [column sums -> db]
//            -> [GEMM dX = dZ · W] -> [GEMM dW = dZᵀ · x].
// Row-major [r, c] with row stride s is column-major c x r with leading dimension s, so out (N x M) = Wᵀ · x.
#include <cuda_runtime.h>

#include "activation/activation.h"
#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/matmul.h"
#include "linear_act/linear_act.h"

namespace tigon::linear_act {
namespace {

// out (column-major N x M) = W (K x N)ᵀ · x (K x M) + bias, into dst.
cuda::Matmul forward_gemm(const FwdProblem& p, const RowMatrix& dst) {
  cuda::Matmul mm;
  mm.ab = mm.d = p.x.dtype;
  mm.trans_a = true;
  mm.m = p.w.rows, mm.n = p.x.rows, mm.k = p.x.cols;
  mm.a = p.w.data, mm.lda = p.w.row_stride;
  mm.b = p.x.data, mm.ldb = p.x.row_stride;
  mm.dst = dst.data, mm.ldd = dst.row_stride;
  mm.bias = p.bias;
  return mm;
}

// Whether cuBLASLt's epilogue can finish the op in the GEMM: the activation has an epilogue, no residual follows it
// (NONE takes the residual as C), and z, when wanted, is GELU's aux output in a layout cuBLASLt takes.
bool try_fused(const FwdProblem& p, void* ws, cudaStream_t s) {
  cuda::Matmul mm = forward_gemm(p, p.out);
  switch (p.activation) {
    case TIGON_ACT_NONE:
      if (p.z.data) return false;
      if (p.residual.data) mm.c = p.residual.data, mm.ldc = p.residual.row_stride;
      break;
    case TIGON_ACT_RELU:
      if (p.z.data || p.residual.data) return false;
      mm.act = cuda::Epilogue::kRelu;
      break;
    case TIGON_ACT_GELU_TANH:
      if (p.residual.data) return false;
      mm.act = cuda::Epilogue::kGelu;
      if (p.z.data) {
        if (p.z.row_stride % 8 != 0 || !cuda::aligned16(p.z.data)) return false;
        mm.aux = p.z.data, mm.ldaux = p.z.row_stride;
      }
      break;
    default: return false;  // GELU_ERF, SILU: no cuBLASLt epilogue
  }
  return cuda::try_matmul(mm, ws, kGemmWorkspace, s);
}

}  // namespace

void fwd_cuda(const FwdProblem& p, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (try_fused(p, workspace, s)) return;
  // Two passes. Training (z wanted): z = x · Wᵀ + b, then out = act(z) (+ residual). Inference: the bare GEMM into
  // out and out = act(out + b) (+ residual) in place: the pass reads and writes out either way, and cuBLASLt's
  // bias-epilogue kernels ran slower than its bare ones (H100: 1404.5 µs against 1207.5 at 8192 x 4096 -> 14336).
  const bool bias_in_pass = !p.z.data && p.bias;
  const RowMatrix& z = p.z.data ? p.z : p.out;
  cuda::Matmul mm = forward_gemm(p, z);
  if (bias_in_pass) mm.bias = nullptr;
  cuda::matmul(mm, workspace, kGemmWorkspace, s);
  activation::FwdProblem a;
  a.x = z;
  a.y = p.out;
  a.bias = bias_in_pass ? p.bias : nullptr;
  a.residual = p.residual;
  a.activation = p.activation;
  activation::fwd_cuda(a, stream);
}

void bwd_cuda(const BwdProblem& p, const Workspace& ws, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t M = p.x.rows, N = p.w.rows, K = p.x.cols;
  const DType dt = p.x.dtype;
  float* partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + ws.partials_at);
  const bool pointwise = p.activation != TIGON_ACT_NONE || p.db;
  if (pointwise && N > 0 && (M > 0 || p.db)) {
    activation::BwdProblem a;
    a.dy = p.dy;
    a.saved = p.saved;
    if (p.activation != TIGON_ACT_NONE) a.dx = p.dz;  // NONE: dZ is dy, only the sums are wanted
    a.activation = p.activation;
    a.partial = p.db ? partials : nullptr;
    activation::bwd_cuda(a, stream);
    if (p.db) cuda::column_sum(partials, activation::partial_rows(M, N, dt), N, p.db, p.db_dtype, s);
  }
  if (p.dx.data) {  // dX (column-major K x M) = W (K x N) · dZ (N x M)
    cuda::Matmul mx;
    mx.ab = mx.d = dt;
    mx.m = K, mx.n = M, mx.k = N;
    mx.a = p.w.data, mx.lda = p.w.row_stride;
    mx.b = p.dz.data, mx.ldb = p.dz.row_stride;
    mx.dst = p.dx.data, mx.ldd = p.dx.row_stride;
    cuda::matmul(mx, workspace, kGemmWorkspace, s);
  }
  if (p.dw) {  // dW (column-major K x N) = x (K x M) · dZ (N x M)ᵀ
    cuda::Matmul mw;
    mw.ab = dt, mw.d = p.dw_dtype;
    mw.trans_b = true;
    mw.m = K, mw.n = N, mw.k = M;
    mw.a = p.x.data, mw.lda = p.x.row_stride;
    mw.b = p.dz.data, mw.ldb = p.dz.row_stride;
    mw.dst = p.dw, mw.ldd = K;
    cuda::matmul(mw, workspace, kGemmWorkspace, s);
  }
}

}  // namespace tigon::linear_act
