/* Group normalization (torch.nn.GroupNorm): the C channels of each sample split into G groups of C / G channels;
 * each (sample, group) is normalised over its channels and spatial positions, then every channel gets its own scale
 * and shift: y = (x - mean) * rstd * weight[c] + bias[c], rstd = 1 / sqrt(var + eps), var the biased variance.
 *
 * Shapes: x, y, dy, dx are [N, C, *] (any number of spatial dimensions, S positions in all; [N, C] is S = 1),
 * contiguous. weight and bias are contiguous [C] (each optional: NULL is 1 and 0). mean and rstd are contiguous fp32
 * [N, G]: written by the forward, read by the backward. Dtypes: x, y, dy, dx share one of fp32, fp16, bf16; weight
 * and bias are that dtype or fp32; dweight and dbias [C] are weight's dtype or fp32. Offsets are 64-bit.
 *
 * Forward: fp32 statistics (fp64 in the CPU reference) over a group's C / G * S elements, y rounded once.
 * Backward, with xhat = (x - mean) * rstd and g = dy * weight[c]: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 * over the group; dweight[c] = sum over samples and positions of dy * xhat, dbias[c] = sum of dy. Each gradient is
 * optional (NULL: not computed); y may be x and dx may be dy (exactly). The sums are fp32 and deterministic.
 * Workspace (backward on CUDA, when dweight or dbias is wanted): tigon_group_norm_bwd_workspace_size bytes.
 */
#ifndef TIGON_GROUP_NORM_H_
#define TIGON_GROUP_NORM_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tigon_group_norm_params {
  float eps;          /* added to the variance, >= 0 */
  int64_t num_groups; /* G: divides C */
} tigon_group_norm_params;

/* y, mean and rstd from x, weight and bias. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_group_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight,
                                              const tigon_tensor* bias, const tigon_tensor* y, const tigon_tensor* mean,
                                              const tigon_tensor* rstd, tigon_group_norm_params params, void* stream);

/* Bytes of workspace tigon_group_norm_bwd needs for x's shape and dtype (0 on the CPU). */
TIGON_API tigon_status_t tigon_group_norm_bwd_workspace_size(const tigon_tensor* x, tigon_group_norm_params params,
                                                             size_t* bytes);

/* dx, dweight, dbias (each may be NULL) from dy, x, weight (NULL: 1), mean and rstd. */
TIGON_API tigon_status_t tigon_group_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                              const tigon_tensor* mean, const tigon_tensor* rstd,
                                              const tigon_tensor* dx, const tigon_tensor* dweight,
                                              const tigon_tensor* dbias, tigon_group_norm_params params,
                                              void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_GROUP_NORM_H_ */
