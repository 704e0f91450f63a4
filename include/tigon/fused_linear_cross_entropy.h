/* Fused linear + cross entropy: the loss of logits = x · weightᵀ (+ bias) and the gradients of x, weight and bias,
 * without ever holding the [N, V] logits. Tokens go through in chunks whose logits fit a memory budget.
 *
 * Math, for every chunk of tokens (docs/design/fused-linear-cross-entropy.md has the arithmetic behind the design):
 *   logits = x_c · Wᵀ + b            one GEMM, written in x's dtype (fp32 accumulation, one rounding)
 *   loss, dL = cross entropy         tigon_cross_entropy on those logits, the gradient written over them, with every
 *                                    option and reduction of include/tigon/cross_entropy.h (MEAN's denominator over
 *                                    all N tokens, found on the device before the first chunk)
 *   dL *= grad_output                only when grad_output is given (per token for NONE)
 *   dx_c = dL · W                    one GEMM, written once
 *   dW (+)= dLᵀ · x_c                one GEMM that adds into dW itself (beta = 1 after the first chunk)
 *   db (+)= column sums of dL
 * Three GEMMs and one cross entropy pass per chunk, nothing else over the logits.
 *
 * Shapes and dtypes: x [N, H] (or [..., H]) in {fp32, fp16, bf16}, last stride 1, any row stride >= H; weight [V, H]
 * in x's dtype, last stride 1, any row stride >= H; bias NULL or V contiguous values of weight's dtype; target N
 * contiguous int32 or int64 values; class_weight NULL or V contiguous fp32 values (cross entropy's `weight`).
 * Any H: rows that are not 16-byte multiples (H not a multiple of 8 in 16-bit) take cuBLASLt's unaligned GEMM kernels.
 * loss, z_loss, accuracy, predicted: as tigon_cross_entropy_fwd (fp32; N values for NONE, else 1; the last two may
 * be NULL; predicted: NULL or N int64 argmax columns, -1 for ignored tokens). params.ce.token_scaling as there.
 * grad_output: NULL (the gradients of the loss itself), or fp32: one value, or N values with any stride (NONE only);
 * the backward of NONE with a per-token upstream gradient calls the forward again with it (recomputing the logits).
 * dx: NULL (not wanted) or [N, H] (or [..., H]) in x's dtype, last stride 1, any row stride >= H.
 * dw: NULL (not wanted) or [V, H] contiguous, fp32 or weight's dtype:
 *   - fp32: the dW GEMM of each chunk adds into it: fp32 accumulation over all tokens. With params.narrow_dw = 1 and a
 *     16-bit weight, the buffer is rewritten in place at the end: its first V·H elements of the weight's dtype hold
 *     dW, contiguous [V, H] (a weight-dtype gradient without a second V × H buffer; the rest of the buffer is junk).
 *   - weight's 16-bit dtype: written by the GEMM. With one chunk that is fp32 accumulation over all tokens and one
 *     rounding; with several chunks each chunk's sum is rounded, which params.dw_accumulation must allow explicitly.
 * db: NULL (not wanted; needs bias otherwise) or V contiguous values in bias's dtype or fp32.
 *
 * Chunks: params.chunk_rows tokens (> 0), or else the most tokens whose logits fit params.memory_budget bytes, evened
 * out over the chunks (N = 16384, V = 128256, bf16, 1.5 GiB: 3 chunks of 5462). Fewer, larger chunks are faster
 * (bigger GEMMs, fewer passes over dW). tigon_fused_linear_cross_entropy_workspace_size reports the chunk size and
 * the workspace: the logits of one chunk (rows padded to 8 elements), per-token partials, an fp32 bias-gradient
 * accumulator and the GEMMs' scratch. The CPU path is the plain fp64 reference, chunk-free, and needs no workspace.
 *
 * No allocation, no synchronisation, every launch on the given stream: capturable in a CUDA graph.
 */
#ifndef TIGON_FUSED_LINEAR_CROSS_ENTROPY_H_
#define TIGON_FUSED_LINEAR_CROSS_ENTROPY_H_

#include "tigon/cross_entropy.h"
#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a 16-bit dw may be accumulated over several chunks. */
typedef enum {
  TIGON_DW_ACCUMULATE_FP32 = 0, /* default: a 16-bit dw is accepted only when all tokens fit one chunk */
  TIGON_DW_ACCUMULATE_DTYPE = 1 /* a 16-bit dw is accumulated chunk by chunk in its own dtype (rounded per chunk) */
} tigon_dw_accumulation_t;

/* memory_budget = 0 means this: 1.5 GiB of logits per chunk. */
#define TIGON_FUSED_LINEAR_CROSS_ENTROPY_DEFAULT_BUDGET ((uint64_t)3 << 29)

typedef struct {
  tigon_cross_entropy_params ce; /* ignore_index, label smoothing, z-loss, softcap, reduction */
  int64_t chunk_rows;            /* > 0: tokens per chunk; 0: from memory_budget */
  uint64_t memory_budget;        /* bytes for one chunk of logits; 0: the default above */
  int32_t dw_accumulation;       /* tigon_dw_accumulation_t */
  int32_t narrow_dw;             /* 1: an fp32 dw ends in the weight's 16-bit dtype, in place (see above) */
} tigon_fused_linear_cross_entropy_params;

/* The workspace (bytes; 0 on the CPU) and the chunk size (tokens) for x [N, H] and weight [V, H]. Either output
 * pointer may be NULL. */
TIGON_API tigon_status_t tigon_fused_linear_cross_entropy_workspace_size(const tigon_tensor* x,
                                                                         const tigon_tensor* weight,
                                                                         tigon_fused_linear_cross_entropy_params params,
                                                                         size_t* bytes, int64_t* chunk_rows);

/* Loss (z_loss, accuracy, predicted) and, for each of dx, dw, db that is not NULL, that gradient. stream: a
 * cudaStream_t. */
TIGON_API tigon_status_t tigon_fused_linear_cross_entropy_fwd(
    const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias, const tigon_tensor* target,
    const tigon_tensor* class_weight, const tigon_tensor* grad_output, const tigon_tensor* loss,
    const tigon_tensor* z_loss, const tigon_tensor* accuracy, const tigon_tensor* predicted, const tigon_tensor* dx,
    const tigon_tensor* dw, const tigon_tensor* db, tigon_fused_linear_cross_entropy_params params, void* workspace,
    size_t workspace_bytes, void* stream);

/* The backward of MEAN and SUM: dx, dw, db (each may be NULL) *= grad_output, one fp32 value on the device, in place;
 * a value of exactly 1 touches no memory. (NONE with per-token values: call the forward with grad_output instead.) */
TIGON_API tigon_status_t tigon_fused_linear_cross_entropy_bwd(const tigon_tensor* dx, const tigon_tensor* dw,
                                                              const tigon_tensor* db, const tigon_tensor* grad_output,
                                                              void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_FUSED_LINEAR_CROSS_ENTROPY_H_ */
