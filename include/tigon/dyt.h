/* Dynamic Tanh (DyT, "Transformers without Normalization"): y = gamma * tanh(alpha * x) + beta, a normalization
 * layer's replacement with one learned scalar alpha and per-channel gamma and beta, over [..., C] tensors.
 *
 * Forward: y from x, alpha (one fp32 value), gamma [C] and beta [C] (NULL: no beta); fp32 math (fp64 in the CPU
 * reference), rounded once to y's dtype.
 * Backward, with t = tanh(alpha * x): dx = dy * gamma * alpha * (1 - t^2); dgamma = sum over rows of dy * t; dbeta =
 * sum over rows of dy; dalpha = sum over every element of dy * gamma * x * (1 - t^2). Each gradient is optional (NULL:
 * not computed); dx may be exactly dy. The sums are fp32 and deterministic: fixed partial sums added in a fixed order.
 *
 * Shapes: x, y, dy, dx are [..., C] with the same rows and C, each with its own row stride (last stride 1, leading
 * dimensions flattening to one row stride). Dtypes: x, y, dy, dx share one of fp32, fp16, bf16; gamma and beta are
 * that dtype or fp32, contiguous; dgamma and dbeta are contiguous [C] of gamma's dtype or fp32; alpha and dalpha are
 * fp32 with one element, on x's device. Offsets are 64-bit.
 * Workspace (backward on CUDA): tigon_dyt_bwd_workspace_size bytes of fp32 partial sums; 0 on the CPU.
 */
#ifndef TIGON_DYT_H_
#define TIGON_DYT_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = gamma * tanh(alpha * x) + beta; y may be x. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_dyt_fwd(const tigon_tensor* x, const tigon_tensor* alpha, const tigon_tensor* gamma,
                                       const tigon_tensor* beta, const tigon_tensor* y, void* stream);

/* Bytes of workspace tigon_dyt_bwd needs for x's shape and dtype (0 on the CPU). */
TIGON_API tigon_status_t tigon_dyt_bwd_workspace_size(const tigon_tensor* x, size_t* bytes);

/* dx, dalpha, dgamma, dbeta (each may be NULL) from dy, x, alpha and gamma. */
TIGON_API tigon_status_t tigon_dyt_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* alpha,
                                       const tigon_tensor* gamma, const tigon_tensor* dx, const tigon_tensor* dalpha,
                                       const tigon_tensor* dgamma, const tigon_tensor* dbeta, void* workspace,
                                       size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_DYT_H_ */
