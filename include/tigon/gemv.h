/* GEMV (skinny matrix product for decoding): y = x weight^T (+ bias), for a few rows of x against a large weight.
 *
 * Math: y[m, n] = sum_k x[m, k] * weight[n, k] (+ bias[n]), accumulated in fp32 (fp64 on the CPU reference) and
 * rounded once to y's dtype. The weight is stored as torch.nn.Linear stores it: [N, K], one row per output column.
 * The CUDA path is built for M = 1..16 rows (decoding a batch of sequences), where the op is bound by streaming the
 * weight from memory once; any M gives the right answer (larger M reads the weight once per 16 rows).
 *
 * Shapes: x is [..., K] (the leading dimensions flatten to M rows with one row stride >= K, last stride 1); weight is
 * 2-D [N, K] with a row stride >= K and last stride 1; bias is NULL or [N] contiguous; y is [..., N] with M rows (any
 * row stride >= N, last stride 1). Fused projections (QKV, gate and up) are one call on the weights concatenated
 * along N. Dtypes: x, weight, bias and y share one dtype: bfloat16 or float16 (float32 too, mainly for the CPU).
 * K >= 1; M and N may be 0 (nothing is written). Element counts may pass 2^31.
 * Aliasing: y may not overlap x, weight or bias.
 *
 * Workspace: none today (tigon_gemv_workspace_size reports 0). When N is small next to the GPU the CUDA path splits
 * K across the blocks of a thread block cluster, which add their fp32 partial sums in a fixed order (deterministic:
 * the same bits on every run). The query stays so that a plan needing memory can come without an API change.
 */
#ifndef TIGON_GEMV_H_
#define TIGON_GEMV_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of workspace tigon_gemv needs for these x and weight (0 at present). */
TIGON_API tigon_status_t tigon_gemv_workspace_size(const tigon_tensor* x, const tigon_tensor* weight, size_t* bytes);

/* y = x weight^T (+ bias). bias may be NULL. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_gemv(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                    const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream);

/* Several weights read in one pass over x: y = [x w_0^T (+ b_0), x w_1^T (+ b_1), ...] side by side, y [..., N_0 + N_1
 * + ...]: the projections of one input (q, k and v; gate and up) in one launch, with no concatenated copy of their
 * weights. weights: parts tensors [N_i, K] in x's dtype (1 <= parts <= 4); biases: NULL, or parts entries each NULL or
 * [N_i]. The same kernel, plan and numerics as tigon_gemv on the concatenated weight. */
TIGON_API tigon_status_t tigon_gemv_parts_workspace_size(const tigon_tensor* x, const tigon_tensor* const* weights,
                                                         int32_t parts, size_t* bytes);
TIGON_API tigon_status_t tigon_gemv_parts(const tigon_tensor* x, const tigon_tensor* const* weights,
                                          const tigon_tensor* const* biases, int32_t parts, const tigon_tensor* y,
                                          void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_GEMV_H_ */
