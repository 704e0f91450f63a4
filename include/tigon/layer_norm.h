/* LayerNorm: y = (x - mean) * rstd * w + b over the last dimension, rstd = 1 / sqrt(var + eps), var the biased
 * variance (torch.nn.functional.layer_norm). mean and rstd are computed in fp32 from fp32 sums; y is rounded once.
 *
 * Shapes: x is [..., cols]; the leading dimensions must flatten to rows with one row stride (last stride 1, row stride
 * >= cols, any value); y, dy, dx likewise with their own row strides. weight and bias are [cols] contiguous, each
 * optional (NULL: scale 1 / shift 0); when both are given they share a dtype. mean and rstd are fp32 with rows
 * elements, contiguous: the forward writes them when given (both or neither; training) and the backward reads them.
 * Dtypes: x in {fp32, fp16, bf16}; weight/bias in {x's dtype, fp32}; y, dy and dx are x's dtype; dw in {weight's
 * dtype, fp32}; db in {x's dtype, fp32}. Rows may number past 2^31 elements in total.
 *
 * Backward: xhat = (x - mean) * rstd, g = dy * w; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dw = sum_rows
 * dy * xhat; db = sum_rows dy. dx may be dy itself (same data and strides) to save memory. dw and db are reduced
 * deterministically: each block writes fp32 partial sums to the workspace, then one pass adds them in a fixed order.
 */
#ifndef TIGON_LAYER_NORM_H_
#define TIGON_LAYER_NORM_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float eps; /* >= 0 and finite */
} tigon_layer_norm_params;

/* y = layer_norm(x) * weight + bias; writes mean and rstd when they are not NULL. stream: a cudaStream_t (ignored on
 * CPU). */
TIGON_API tigon_status_t tigon_layer_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight,
                                              const tigon_tensor* bias, const tigon_tensor* y, const tigon_tensor* mean,
                                              const tigon_tensor* rstd, tigon_layer_norm_params params, void* stream);

/* Bytes of workspace tigon_layer_norm_bwd needs when it computes dw or db (0 on CPU). */
TIGON_API tigon_status_t tigon_layer_norm_bwd_workspace_size(const tigon_tensor* x, size_t* bytes);

/* dx (may alias dy), and dw / db when they are not NULL. weight NULL means scale 1 (and dw must be NULL). */
TIGON_API tigon_status_t tigon_layer_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                              const tigon_tensor* mean, const tigon_tensor* rstd,
                                              const tigon_tensor* dx, const tigon_tensor* dw, const tigon_tensor* db,
                                              void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_LAYER_NORM_H_ */
