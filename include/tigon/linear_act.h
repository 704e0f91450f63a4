/* Linear + activation: out = act(x · weightᵀ + bias) (+ residual), as nn.Linear followed by an activation (and a
 * residual connection), and its backward.
 *
 * Math. Forward: z = x · Wᵀ + b, one GEMM with fp32 accumulation; out = act(z) + residual, the residual added after
 * the activation. act is tigon_activation_t (include/tigon/activation.h, torch's formulas). Backward, with dY the
 * gradient of out: dZ = dY ∘ act'(z) (dZ = dY for NONE), dX = dZ · W, dW = dZᵀ · x, db = the column sums of dZ,
 * each summed in fp32 and rounded once; residual's gradient is dY itself (nothing to compute).
 *
 * CUDA path. The GEMMs are cuBLASLt's, with the bias and the activation in the GEMM's epilogue where cuBLASLt has
 * one: NONE (BIAS; a residual comes in as the GEMM's C matrix, beta = 1), RELU (RELU_BIAS) and GELU_TANH (GELU_BIAS,
 * or GELU_AUX_BIAS, which also stores z for the backward; cuBLASLt's GELU is the tanh form). GELU_ERF and SILU have no
 * cuBLASLt epilogue, and an activation followed by a residual cannot be one (the epilogue would apply the activation
 * to the sum): those write z with the BIAS epilogue (into z, or into out when z is not wanted), then one vectorised
 * pass computes act(z) (+ residual). The backward computes dZ in one elementwise pass that also writes the fp32
 * partial column sums of dZ for db (finished in a fixed order: the same bits every run), then the dX and dW GEMMs.
 * (cuBLASLt's DRELU / DGELU epilogues apply act' to a GEMM's own product, i.e. to the next layer's dX GEMM, which is
 * outside this op: here dY arrives as a tensor.) The CPU path is a plain fp64 reference with the same roundings.
 *
 * Roundings (both paths): z is rounded to the dtype where it is stored; out = act(z) + residual is rounded once
 * (the epilogue path applies act to the fp32 z, within a rounding of the same). dZ is rounded to the dtype, and db
 * sums the rounded dZ.
 *
 * Shapes and dtypes: x [M, K] (or [..., K]), last stride 1, any row stride >= K, K > 0; weight [N, K] (nn.Linear's
 * layout), last stride 1, any row stride >= K; bias NULL or N contiguous values; residual NULL or [M, N]; out, z,
 * dy, dz [M, N]; dx [M, K]. fp32, fp16 or bf16, one dtype for all of these. dw: [N, K] contiguous in weight's dtype
 * or fp32; db: N contiguous values in weight's dtype or fp32 (fp32: the GEMM's / the column sums' fp32 result,
 * unrounded). Matrices of [M, N] and [M, K] may have any row stride >= their row length. Offsets are 64-bit. K and N
 * need not be multiples of 8 (cuBLASLt's unaligned kernels then run).
 *
 * Saved for the backward: z when act'(z) needs it: GELU_ERF, GELU_TANH, SILU, and RELU with a residual. RELU without
 * a residual needs only the sign of z, which is the output's (y = out > 0): pass y instead of z. NONE needs nothing.
 * z is written whenever it is given; a row stride that is a multiple of 8 elements and a 16-byte aligned z let
 * GELU_TANH store it from the GEMM's epilogue (no extra pass).
 *
 * Aliasing: out must not overlap any input. In the backward, dz may be exactly dy or z (dy's or z's memory then holds
 * dZ afterwards); no other overlaps.
 *
 * Workspace: cuBLASLt's scratch (32 MiB) and, for the backward, the partial column sums; the sizes depend on the
 * shapes alone; 256-byte aligned; 0 bytes on the CPU. No allocation, no synchronisation, every launch on the stream:
 * capturable in a CUDA graph.
 */
#ifndef TIGON_LINEAR_ACT_H_
#define TIGON_LINEAR_ACT_H_

#include "tigon/activation.h"
#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t activation; /* tigon_activation_t */
} tigon_linear_act_params;

/* Workspace bytes of tigon_linear_act_fwd / _bwd for x [M, K] and weight [N, K] (0 on the CPU). */
TIGON_API tigon_status_t tigon_linear_act_fwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                             tigon_linear_act_params params, size_t* bytes);
TIGON_API tigon_status_t tigon_linear_act_bwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                             tigon_linear_act_params params, size_t* bytes);

/* out = act(x · weightᵀ + bias) + residual; z (may be NULL) receives x · weightᵀ + bias. bias, residual may be NULL.
 * stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_linear_act_fwd(const tigon_tensor* x, const tigon_tensor* weight,
                                              const tigon_tensor* bias, const tigon_tensor* residual,
                                              const tigon_tensor* out, const tigon_tensor* z,
                                              tigon_linear_act_params params, void* workspace, size_t workspace_bytes,
                                              void* stream);

/* dz = dy ∘ act'(z) (from y for RELU when z is NULL; dz NULL and unused for NONE), then each of dx, dw, db that is
 * not NULL. */
TIGON_API tigon_status_t tigon_linear_act_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                              const tigon_tensor* z, const tigon_tensor* y, const tigon_tensor* dz,
                                              const tigon_tensor* dx, const tigon_tensor* dw, const tigon_tensor* db,
                                              tigon_linear_act_params params, void* workspace, size_t workspace_bytes,
                                              void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_LINEAR_ACT_H_ */
