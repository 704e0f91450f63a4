/* RMSNorm: y = x * rstd * (offset + w), rstd = 1 / sqrt(mean(x^2) + eps), over the last dimension.
 *
 * Casting modes follow Hugging Face's modules (every mode accumulates mean(x^2) in fp32):
 *   LLAMA  rstd in fp32, x * rstd rounded to x's dtype, then multiplied by (offset + w) and rounded to y's dtype
 *          (LlamaRMSNorm: y's dtype is torch.promote_types(x, w), e.g. fp32 for bf16 x and an fp32 weight);
 *   GEMMA  everything in fp32, one rounding at the end (GemmaRMSNorm: offset 1.0, y in x's dtype);
 *   NONE   every step rounded to x's dtype (rstd, x * rstd, the weight and the product).
 *
 * Shapes: x is [..., cols]; the leading dimensions must flatten to rows with one row stride (last stride 1, row stride
 * >= cols, any value); y, dy, dx likewise with their own row strides. weight is [cols] contiguous, or NULL for no
 * scale (then offset must be 0). rstd is fp32 with rows elements, contiguous; the forward writes it when given
 * (training) and the backward reads it. Dtypes: x in {fp32, fp16, bf16}; weight in {x's dtype, fp32}; y and dy in
 * {x's dtype, fp32}; dx is x's dtype; dw in {weight's dtype, fp32}. Rows may number past 2^31 elements in total.
 *
 * Backward: dx = rstd * (g - xhat * mean(g * xhat)), g = dy * (offset + w), xhat = x * rstd; dw = sum_rows dy * xhat.
 * dx may be dy itself (same data and strides) to save memory. dw is reduced deterministically: each block writes
 * fp32 partial sums to the workspace, then one pass adds them in a fixed order.
 *
 * Fused residual add (a pre-norm decoder layer's `h = residual + x; y = norm(h)`): tigon_add_rms_norm_fwd writes
 * h = x + residual, rounded to x's dtype as the add in the activations' dtype is, and normalises h; residual and h
 * are like x (same dtype and shape, own row strides), h may be x or residual itself. Its backward is RMSNorm's on h
 * plus the gradient dh that reaches h from elsewhere (the next residual branch): dx = rmsnorm'(dy) + dh, the
 * gradient of both x and residual, summed in fp32 and rounded once. dh (NULL: none) is like x; dx may be dy or dh.
 */
#ifndef TIGON_RMS_NORM_H_
#define TIGON_RMS_NORM_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TIGON_RMS_NORM_LLAMA = 0, TIGON_RMS_NORM_GEMMA = 1, TIGON_RMS_NORM_NONE = 2 } tigon_rms_norm_casting_t;

typedef struct {
  float eps;            /* > 0 (0 accepted; rows of zeros then give inf) */
  float offset;         /* added to the weight: 0 for Llama, 1 for Gemma */
  int32_t casting_mode; /* tigon_rms_norm_casting_t */
} tigon_rms_norm_params;

/* y = rmsnorm(x) * (offset + weight); writes rstd when rstd is not NULL. stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_rms_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* y,
                                            const tigon_tensor* rstd, tigon_rms_norm_params params, void* stream);

/* Bytes of workspace tigon_rms_norm_bwd needs for these tensors (0 when dw is not computed). */
TIGON_API tigon_status_t tigon_rms_norm_bwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                           size_t* bytes);

/* dx (may alias dy) and, when dw is not NULL, dw. weight NULL means no scale (and dw must be NULL). */
TIGON_API tigon_status_t tigon_rms_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                            const tigon_tensor* rstd, const tigon_tensor* dx, const tigon_tensor* dw,
                                            tigon_rms_norm_params params, void* workspace, size_t workspace_bytes,
                                            void* stream);

/* h = x + residual, y = rmsnorm(h) * (offset + weight); writes rstd when rstd is not NULL. h may be x or residual. */
TIGON_API tigon_status_t tigon_add_rms_norm_fwd(const tigon_tensor* x, const tigon_tensor* residual,
                                                const tigon_tensor* weight, const tigon_tensor* y,
                                                const tigon_tensor* h, const tigon_tensor* rstd,
                                                tigon_rms_norm_params params, void* stream);

/* dx = RMSNorm's input gradient on h + dh (dh NULL: none), the gradient of x and of residual; dw as RMSNorm's.
 * Workspace: tigon_rms_norm_bwd_workspace_size(h, weight). dx may be dy or dh. */
TIGON_API tigon_status_t tigon_add_rms_norm_bwd(const tigon_tensor* dy, const tigon_tensor* dh, const tigon_tensor* h,
                                                const tigon_tensor* weight, const tigon_tensor* rstd,
                                                const tigon_tensor* dx, const tigon_tensor* dw,
                                                tigon_rms_norm_params params, void* workspace, size_t workspace_bytes,
                                                void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_RMS_NORM_H_ */
