/* Embedding lookup: y[i] = weight[indices[i]], with a deterministic backward that sums each row's gradients in index
 * order (torch.nn.functional.embedding with padding_idx).
 *
 * Forward: y [N, H] from indices [N] (int32 or int64; any shape flattening to N, contiguous) and weight [V, H]. An
 * index outside [0, V) gives a row of NaN (a device cannot raise; the row makes the fault visible).
 * Backward: dweight [V, H] = for each v, the sum of dy[i] over the i with indices[i] = v, in increasing i, in fp32,
 * rounded once; rows never indexed are 0, and so is the row at padding_idx (>= 0; -1: none). Out-of-range indices get
 * no gradient.
 *
 * Shapes: weight, y, dy, dweight are row matrices ([rows, H], last stride 1, their own row strides). Dtypes: weight,
 * y and dy share one of fp32, fp16, bf16; dweight is that dtype or fp32. Offsets are 64-bit.
 * Workspace (backward on CUDA): tigon_embedding_bwd_workspace_size bytes (the indices sorted with their positions).
 */
#ifndef TIGON_EMBEDDING_H_
#define TIGON_EMBEDDING_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tigon_embedding_params {
  int64_t padding_idx; /* a row that gets no gradient, or -1 */
} tigon_embedding_params;

/* y = weight[indices]. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_embedding_fwd(const tigon_tensor* indices, const tigon_tensor* weight,
                                             const tigon_tensor* y, void* stream);

/* Bytes of workspace tigon_embedding_bwd needs for these indices and weight (0 on the CPU). */
TIGON_API tigon_status_t tigon_embedding_bwd_workspace_size(const tigon_tensor* indices, const tigon_tensor* weight,
                                                            size_t* bytes);

/* dweight from indices and dy (written whole: rows without gradient are 0). */
TIGON_API tigon_status_t tigon_embedding_bwd(const tigon_tensor* indices, const tigon_tensor* dy,
                                             const tigon_tensor* dweight, tigon_embedding_params params,
                                             void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_EMBEDDING_H_ */
