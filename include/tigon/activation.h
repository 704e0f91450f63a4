/* Pointwise activations: y = act(x), elementwise over [..., C] tensors, optionally in place.
 *
 * act is picked by params.activation (tigon_activation_t), with torch's formulas: NONE y = x, RELU max(x, 0),
 * GELU_ERF 0.5 x (1 + erf(x / sqrt(2))) (F.gelu), GELU_TANH 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (F.gelu(approximate="tanh")), SILU x * sigmoid(x) (F.silu), RELU2 max(x, 0)^2 (the squared ReLU of Primer and
 * Nemotron, transformers' "relu2"). Math is fp32 (fp64 in the CPU reference), rounded once to the dtype.
 *
 * Backward: dx = dy * act'(x), from the saved input x; ReLU, RELU2 (and NONE) may instead be given their output y
 * (params.saved_output = 1): act'(x) = [y > 0] and 2 sqrt(y), which is what lets an in-place ReLU or squared ReLU
 * keep only its output (the squared ReLU's then carries the output's rounding: a relative 2^-9 for bf16, and fp16's
 * range: an output that overflowed to inf, or underflowed, passes that on). The derivative at 0 is 0, as torch's.
 *
 * Shapes: x, y, dy, dx, saved are [..., C] with the same rows and C; each may have its own row stride (last stride 1,
 * leading dimensions flattening to one row stride). Dtypes: fp32, fp16 or bf16, one dtype for every tensor. Offsets
 * are 64-bit. Aliasing: y may be exactly x (in place); dx may be exactly dy or saved. Partial overlaps are not
 * allowed (they are not detected).
 */
#ifndef TIGON_ACTIVATION_H_
#define TIGON_ACTIVATION_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TIGON_ACT_NONE = 0,
  TIGON_ACT_RELU = 1,
  TIGON_ACT_GELU_ERF = 2,  /* F.gelu(approximate="none") */
  TIGON_ACT_GELU_TANH = 3, /* F.gelu(approximate="tanh") */
  TIGON_ACT_SILU = 4,
  TIGON_ACT_RELU2 = 5 /* relu(x)^2: pointwise only (linear + activation and int8 take NONE to SILU) */
} tigon_activation_t;

typedef struct {
  int32_t activation;   /* tigon_activation_t */
  int32_t saved_output; /* backward only: 1 when `saved` is the output y (RELU, RELU2, NONE), 0 when it is the input */
} tigon_activation_params;

/* y = act(x); y may be x. stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_activation_fwd(const tigon_tensor* x, const tigon_tensor* y,
                                              tigon_activation_params params, void* stream);

/* dx = dy * act'(x), from saved = x (or y, see saved_output). dx may be dy or saved. */
TIGON_API tigon_status_t tigon_activation_bwd(const tigon_tensor* dy, const tigon_tensor* saved, const tigon_tensor* dx,
                                              tigon_activation_params params, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_ACTIVATION_H_ */
