/* Softmax over the last dimension: y = exp(x - max(x)) / sum(exp(x - max(x))) for every row of a [..., C] tensor.
 *
 * Forward: y from x; fp32 math (fp64 in the CPU reference), rounded once to y's dtype. A row of -inf gives NaN as
 * torch's does; C must be at least 1.
 * Backward from the output: dx = y * (dy - sum(dy * y)) over the row, rounded once.
 *
 * Shapes: x, y, dy, dx are [..., C] with the same rows and C, each with its own row stride (last stride 1, leading
 * dimensions flattening to one row stride). Dtypes: fp32, fp16 or bf16, one dtype for every tensor. Offsets are 64-bit.
 * Aliasing: y may be exactly x; dx may be exactly dy or y. No workspace.
 */
#ifndef TIGON_SOFTMAX_H_
#define TIGON_SOFTMAX_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = softmax(x) over the last dimension; y may be x. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_softmax_fwd(const tigon_tensor* x, const tigon_tensor* y, void* stream);

/* The causal form over x [..., L, L] (attention scores, query by key): in each L x L matrix, entry (i, j) with j > i
 * is masked out (as -inf) before the softmax over j and written as 0 in y; the masked entries of x are not read. Its
 * backward is tigon_softmax_bwd's: y is 0 where masked, so dx is too. y may be x. */
TIGON_API tigon_status_t tigon_softmax_causal_fwd(const tigon_tensor* x, const tigon_tensor* y, void* stream);

/* dx = y * (dy - sum(dy * y)) from the forward's output y; dx may be dy or y. */
TIGON_API tigon_status_t tigon_softmax_bwd(const tigon_tensor* dy, const tigon_tensor* y, const tigon_tensor* dx,
                                           void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_SOFTMAX_H_ */
