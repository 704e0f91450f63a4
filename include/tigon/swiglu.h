/* Gated activations (SwiGLU, GeGLU): c = act(a) * b, elementwise, over [..., I] tensors.
 *
 * act is picked by params.activation: SILU a * sigmoid(a) (SwiGLU: Llama, Mistral, Qwen), GELU_TANH
 * 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) (GeGLU: Gemma), GELU_ERF 0.5 a (1 + erf(a / sqrt(2))); the same
 * formulas as torch's F.silu and F.gelu(approximate="tanh" / "none"). Math is fp32 with one rounding per output
 * (Hugging Face's act_fn(a) * b also rounds act(a) to the dtype first: at most one unit in the last place apart).
 *
 * Backward: da = dc * b * act'(a), db = dc * act(a), recomputed from a and b (the forward saves nothing else).
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
  int32_t activation; /* tigon_glu_activation_t */
} tigon_swiglu_params;

/* c = act(a) * b. stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_swiglu_fwd(const tigon_tensor* a, const tigon_tensor* b, const tigon_tensor* c,
                                          tigon_swiglu_params params, void* stream);

/* da = dc * b * act'(a), db = dc * act(a). da may be a or dc, db may be b or dc. */
TIGON_API tigon_status_t tigon_swiglu_bwd(const tigon_tensor* dc, const tigon_tensor* a, const tigon_tensor* b,
                                          const tigon_tensor* da, const tigon_tensor* db, tigon_swiglu_params params,
                                          void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_SWIGLU_H_ */
