/* PolyNorm (PolyCom): y = w0 * norm(x^3) + w1 * norm(x^2) + w2 * norm(x) + b over the last dimension of [..., C]
 * tensors, with norm(u) = u / sqrt(mean(u^2) + eps) per row, three learned weights w and one bias b.
 *
 * Forward: y from x, weight (3 fp32 values), bias (1 fp32 value); rstd (optional, fp32 [rows, 3]) receives each row's
 * 1 / sqrt(mean(x^6) + eps), 1 / sqrt(mean(x^4) + eps), 1 / sqrt(mean(x^2) + eps) for the backward. fp32 math (fp64 in
 * the CPU reference), rounded once to y's dtype.
 * Backward, with g = dy and, per power p of weight w, n = x^p * r: dx = sum over the three terms of
 * w * r * (g - n * mean(g * n)) * p * x^(p - 1); dweight = the sums over every element of g * n for each term; dbias =
 * the sum of g. Each gradient is optional (NULL); the sums are fp32 and deterministic (fixed partial sums, fixed
 * order).
 *
 * Shapes: x, y, dy, dx [..., C] with the same rows and C, each with its own row stride (last stride 1, leading
 * dimensions flattening to one row stride); rstd [rows, 3] contiguous fp32. Dtypes: x, y, dy, dx share one of fp32,
 * fp16, bf16; weight, bias, dweight, dbias are fp32 and contiguous, on x's device. Aliasing: y may be exactly x, dx
 * exactly dy. Workspace (backward on CUDA): tigon_poly_norm_bwd_workspace_size bytes; 0 on the CPU.
 */
#ifndef TIGON_POLY_NORM_H_
#define TIGON_POLY_NORM_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float eps; /* > 0 */
} tigon_poly_norm_params;

TIGON_API tigon_status_t tigon_poly_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight,
                                             const tigon_tensor* bias, const tigon_tensor* y, const tigon_tensor* rstd,
                                             tigon_poly_norm_params params, void* stream);

TIGON_API tigon_status_t tigon_poly_norm_bwd_workspace_size(const tigon_tensor* x, size_t* bytes);

TIGON_API tigon_status_t tigon_poly_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                             const tigon_tensor* rstd, const tigon_tensor* dx,
                                             const tigon_tensor* dweight, const tigon_tensor* dbias, void* workspace,
                                             size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_POLY_NORM_H_ */
