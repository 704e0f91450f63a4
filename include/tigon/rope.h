/* RoPE (rotary position embedding), Hugging Face's apply_rotary_pos_emb, for one tensor (tigon_rope_fwd) or for q
 * and k together (tigon_rope_qk_fwd, below).
 *
 * x is 4-D: (B, H, T, D) for TIGON_ROPE_BHTD or (B, T, H, D) for TIGON_ROPE_BTHD. cos and sin are (Bc, T, R) with
 * Bc = 1 (shared by the batch) or B, as Hugging Face's rotary embedding returns them; R is even, 2 <= R <= D. The first
 * R dims of each head are rotated, the remaining D - R pass through unchanged (partial rotary).
 *
 *   rotate-half (interleaved = 0, Llama):  pairs (i, i + R/2), i < R/2
 *   interleaved (interleaved = 1, GPT-J):  pairs (2i, 2i + 1)
 *   forward  out_a = x_a cos_a - x_b sin_a,   out_b = x_b cos_b + x_a sin_b   (= x * cos + rotate(x) * sin)
 *   backward dx_a = g_a cos_a + g_b sin_b,    dx_b = g_b cos_b - g_a sin_a    (its transpose: rotation by -theta)
 * cos/sin are read at both positions of a pair, so any table works, not only the duplicated one HF builds.
 *
 * Dtypes: x in {fp32, fp16, bf16}; out is x's dtype; cos and sin share one dtype, fp32 or x's; math in fp32 with one
 * rounding at the end. Strides: every tensor's last dimension must be contiguous (stride 1); the other strides are
 * free (a head slice of a fused qkv buffer, a transposed view, a broadcast cos). out may be x itself (same data and
 * strides: in place, the pass-through dims are then not touched); otherwise out must not overlap x.
 * The backward takes dy in place of x and writes dx (which may be dy itself). stream: a cudaStream_t, ignored on CPU.
 */
#ifndef TIGON_ROPE_H_
#define TIGON_ROPE_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TIGON_ROPE_BHTD = 0, TIGON_ROPE_BTHD = 1 } tigon_rope_layout_t;

typedef struct {
  int32_t interleaved; /* 0: rotate-half pairs (i, i + R/2); 1: adjacent pairs (2i, 2i + 1) */
  int32_t layout;      /* tigon_rope_layout_t */
} tigon_rope_params;

TIGON_API tigon_status_t tigon_rope_fwd(const tigon_tensor* x, const tigon_tensor* cos, const tigon_tensor* sin,
                                        const tigon_tensor* out, tigon_rope_params params, void* stream);

TIGON_API tigon_status_t tigon_rope_bwd(const tigon_tensor* dy, const tigon_tensor* cos, const tigon_tensor* sin,
                                        const tigon_tensor* dx, tigon_rope_params params, void* stream);

/* q and k in one call (one kernel launch over every head of both; a position's cos/sin entries come from cache).
 * q is (B, Hq, T, D) or (B, T, Hq, D), k the same with its own head count Hk (GQA) and strides; every rule above
 * applies to each pair (q, q_out) and (k, k_out). The backward takes the output gradients dq_out, dk_out and writes
 * dq, dk (which may be dq_out, dk_out themselves). */
TIGON_API tigon_status_t tigon_rope_qk_fwd(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* cos,
                                           const tigon_tensor* sin, const tigon_tensor* q_out,
                                           const tigon_tensor* k_out, tigon_rope_params params, void* stream);

TIGON_API tigon_status_t tigon_rope_qk_bwd(const tigon_tensor* dq_out, const tigon_tensor* dk_out,
                                           const tigon_tensor* cos, const tigon_tensor* sin, const tigon_tensor* dq,
                                           const tigon_tensor* dk, tigon_rope_params params, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_ROPE_H_ */
