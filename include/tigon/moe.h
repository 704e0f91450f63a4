/* Mixture-of-experts experts block: the gated experts of transformers 5's <Family>Experts modules (Mixtral,
 * Qwen2/3-MoE, DeepSeek-V3, OLMoE, ...), forward and backward, with the tokens' routing done on the device.
 *
 * For each token t and each of its k choices j with e = ids[t, j] in [0, E):
 *   gu_tj = x[t] @ gate_up_weight[e]^T          [2I]: gate = gu[:I], up = gu[I:]      (GEMM, fp32 sum, rounded)
 *   h_tj  = act(gate) * up                                                              (fp32, rounded once)
 *   y_tj  = h_tj @ down_weight[e]^T             [H]                                     (GEMM, fp32 sum, rounded)
 *   out[t] = sum_j weights[t, j] * y_tj                                                 (fp32 over j, rounded once)
 * act is params.activation (tigon_glu_activation_t: SiLU for SwiGLU experts, GELU for GeGLU ones). A choice whose id
 * is outside [0, E) (an expert-parallel sentinel for an expert held elsewhere) contributes nothing and gets no
 * gradient; a token without a valid choice gets out = 0.
 *
 * Backward, given dout [T, H], with g_tj = dout[t]:
 *   dh_tj = g_tj @ down_weight[e]                [I]    (the gradient of h before the routing weight)
 *   dweights[t, j] = dh_tj . h_tj                       (fp32 sum)
 *   d(gate, up) from weights[t, j] * dh_tj through act(gate) * up, rounded: dgu_tj [2I]
 *   dx[t] = sum_j round(dgu_tj @ gate_up_weight[e])      (each product a GEMM's, then fp32 over j, rounded once)
 *   ddown_weight[e] = sum over e's (t, j) of g_tj^T round(weights[t, j] * h_tj)    [H, I]
 *   dgate_up_weight[e] = sum over e's (t, j) of dgu_tj^T x[t]                      [2I, H]
 * The weight gradients are whole: an expert no token chose gets zeros. gu and h are recomputed from x (the forward
 * saves nothing). Each of dx, dweights, dgate_up_weight, ddown_weight may be NULL when it is not wanted.
 *
 * Shapes: x, out, dout, dx are row matrices [T, H] (last stride 1, their own row strides); ids [T, k] int32 or int64
 * and weights [T, k] are contiguous, dweights like weights; gate_up_weight [E, 2I, H] and down_weight [E, H, I] are
 * contiguous, and so are their gradients. Dtypes: x, the two expert weights, out and every gradient but dweights share
 * one of fp32, fp16, bf16 (fp16 or bf16 on CUDA); weights and dweights are fp32 or that dtype. Offsets are 64-bit.
 * CUDA: H and I multiples of 8 and the row strides of x, out, dout and dx too, every tensor's data 16-byte aligned
 * (16-byte rows for the tensor-core GEMMs' TMA loads), fewer than 2^31 pairs, at most 4096 experts. k >= 1 and
 * E >= 1 everywhere; T = 0 is accepted (nothing to compute; the weight gradients are zeros). A token may name one
 * expert twice: each choice counts.
 *
 * Routing on CUDA never synchronises with the host: the (token, choice) pairs are sorted by expert on the device
 * (stably, so results do not depend on thread timing) and grouped GEMMs read each expert's row count from device
 * memory. The workspace holds the sorted rows: about (T k)(H + 3I) elements of the dtype, forward and backward alike,
 * plus the routing and GEMM metadata: tigon_moe_workspace_size gives the bytes.
 */
#ifndef TIGON_MOE_H_
#define TIGON_MOE_H_

#include "tigon/swiglu.h"
#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t activation; /* tigon_glu_activation_t */
} tigon_moe_params;

/* Bytes of workspace tigon_moe_fwd (backward = 0) or tigon_moe_bwd (backward = 1) needs for these tensors (0 on the
 * CPU). */
TIGON_API tigon_status_t tigon_moe_workspace_size(const tigon_tensor* x, const tigon_tensor* ids,
                                                  const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight,
                                                  int32_t backward, size_t* bytes);

/* out = the experts block of x. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_moe_fwd(const tigon_tensor* x, const tigon_tensor* ids, const tigon_tensor* weights,
                                       const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight,
                                       const tigon_tensor* out, tigon_moe_params params, void* workspace,
                                       size_t workspace_bytes, void* stream);

/* The gradients of the experts block given dout; dx, dweights, dgate_up_weight, ddown_weight may each be NULL. */
TIGON_API tigon_status_t tigon_moe_bwd(const tigon_tensor* x, const tigon_tensor* ids, const tigon_tensor* weights,
                                       const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight,
                                       const tigon_tensor* dout, const tigon_tensor* dx, const tigon_tensor* dweights,
                                       const tigon_tensor* dgate_up_weight, const tigon_tensor* ddown_weight,
                                       tigon_moe_params params, void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_MOE_H_ */
