/* Gated activations (SwiGLU, GeGLU): c = act(a) * b, elementwise, over [..., I] tensors.
 *
 * act is picked by params.activation: SILU a * sigmoid(a) (SwiGLU: Llama, Mistral, Qwen), GELU_TANH
 * 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) (GeGLU: Gemma), GELU_ERF 0.5 a (1 + erf(a / sqrt(2))); the same
 * formulas as torch's F.silu and F.gelu(approximate="tanh" / "none"). Math is fp32, rounded to the dtype where
 * Hugging Face's `act_fn(a) * b` rounds in that dtype: act(a) first, then the product.
 *
 * Options (Falcon-H1's MLP): gate_multiplier g scales a before the activation (the product rounded to the dtype, as
 * `a * g` is), down_multiplier d scales the output: c = act(a g) * b * d, which equals scaling a bias-free down
 * projection's output. A multiplier of 0 reads as 1, so `{activation}` alone keeps the plain op; NaN or inf is refused.
 *
 * Backward, with the roundings autograd takes through Hugging Face's module: u = dc d, da = round(u b) act'(a g) g,
 * db = u round(act(a g)), recomputed from a and b (the forward saves nothing else).
 *
 * Shapes: a, b, c, dc, da, db are [..., I] with the same rows and I; each may have its own row stride (last stride 1,
 * leading dimensions flattening to one row stride), so a and b may be the two halves of one [..., 2I] gate_up tensor.
 * Dtypes: fp32, fp16 or bf16, one dtype for every tensor. Offsets are 64-bit.
 * Aliasing: an output may be exactly an input (same data pointer and row stride): c over a or b; da over a or dc,
 * db over b or dc (how the in-place backward avoids a new activation-sized buffer). da and db must not alias each
 * other, and partial overlaps are not allowed (they are not detected).
 */
#ifndef TIGON_SWIGLU_H_
#define TIGON_SWIGLU_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TIGON_GLU_SILU = 0,      /* SwiGLU */
  TIGON_GLU_GELU_TANH = 1, /* GeGLU, F.gelu(approximate="tanh") */
  TIGON_GLU_GELU_ERF = 2   /* GeGLU, F.gelu(approximate="none") */
} tigon_glu_activation_t;

typedef struct {
  int32_t activation;    /* tigon_glu_activation_t */
  float gate_multiplier; /* a is scaled by it before the activation; 0: 1 */
  float down_multiplier; /* the output is scaled by it; 0: 1 */
} tigon_swiglu_params;

/* c = act(a g) * b * d. stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_swiglu_fwd(const tigon_tensor* a, const tigon_tensor* b, const tigon_tensor* c,
                                          tigon_swiglu_params params, void* stream);

/* da = dc d * b * act'(a g) g, db = dc d * act(a g). da may be a or dc, db may be b or dc. */
TIGON_API tigon_status_t tigon_swiglu_bwd(const tigon_tensor* dc, const tigon_tensor* a, const tigon_tensor* b,
                                          const tigon_tensor* da, const tigon_tensor* db, tigon_swiglu_params params,
                                          void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_SWIGLU_H_ */
