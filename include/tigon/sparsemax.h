/* Sparsemax over the last dimension (Martins and Astudillo, 2016): the Euclidean projection of a row onto the
 * probability simplex, y = max(x - tau, 0) with tau such that the row sums to 1. Unlike softmax it gives exact zeros.
 *
 * Forward: y from x; tau from the row's support (the elements above it), fp32 math (fp64 in the CPU reference), y
 * rounded once. C must be at least 1.
 * Backward from the output: over the row's support S = {y > 0}, dx = dy - sum_S(dy) / |S|; dx = 0 elsewhere.
 *
 * Shapes: x, y, dy, dx are [..., C] with the same rows and C, each with its own row stride (last stride 1, leading
 * dimensions flattening to one row stride). Dtypes: fp32, fp16 or bf16, one dtype for every tensor. Offsets are 64-bit.
 * Aliasing: y may be exactly x; dx may be exactly dy or y. No workspace.
 */
#ifndef TIGON_SPARSEMAX_H_
#define TIGON_SPARSEMAX_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = sparsemax(x) over the last dimension; y may be x. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_sparsemax_fwd(const tigon_tensor* x, const tigon_tensor* y, void* stream);

/* The causal form over x [..., L, L] (attention scores, query by key): in each L x L matrix, entry (i, j) with j > i
 * is masked out (as -inf) before the sparsemax over j and written as 0 in y; the masked entries of x are not read. Its
 * backward is tigon_sparsemax_bwd's: y is 0 where masked, outside the support, so dx is too. y may be x. */
TIGON_API tigon_status_t tigon_sparsemax_causal_fwd(const tigon_tensor* x, const tigon_tensor* y, void* stream);

/* dx from dy and the forward's output y; dx may be dy or y. */
TIGON_API tigon_status_t tigon_sparsemax_bwd(const tigon_tensor* dy, const tigon_tensor* y, const tigon_tensor* dx,
                                             void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_SPARSEMAX_H_ */
