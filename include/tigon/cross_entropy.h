/* Cross entropy over logits, with the gradient computed in the forward (the backward is a scale by grad_output).
 *
 * Per row i with target t = target[i] (rows whose target equals ignore_index are ignored: loss 0, gradient 0):
 *   x'_c   = softcap * tanh(x_c / softcap) when softcap > 0, else x_c   (Gemma-2 logit soft-capping)
 *   lse    = log(sum_c exp(x'_c))
 *   ce_i   = (1 - eps) * w[t] * (lse - x'_t) + (eps / V) * sum_c w[c] * (lse - x'_c)   (eps = label_smoothing)
 *   z_i    = lse_square_scale * lse^2                                            (z-loss, never weighted)
 *   acc_i  = argmax_c x_c == t  (first index of the maximum, as torch.argmax)
 *   s_i    = exp(x'_t - lse) with params.token_scaling = 1 (the predicted probability of the target, a constant to
 *            the gradient), else 1: ce_i and z_i above, and their gradients, are multiplied by s_i (so is z_loss)
 * w is the class weight vector (all ones when NULL). This is torch.nn.functional.cross_entropy where options overlap.
 * Reductions (W = sum of w[t_i] over non-ignored rows, C = their count, both computed on the device):
 *   NONE  loss[i] = ce_i + z_i, z_loss[i] = z_i, accuracy[i] = acc_i (ignored rows 0)
 *   SUM   loss = sum ce_i + sum z_i, z_loss = sum z_i, accuracy = sum acc_i / C
 *   MEAN  loss = sum ce_i / W + sum z_i / C, z_loss = sum z_i / C, accuracy = sum acc_i / C
 * MEAN over a batch whose rows are all ignored gives NaN (0 / 0), as torch does. The z-loss and the accuracy are
 * divided by the token count, not the weight sum (as Liger-Kernel does).
 *
 * A target outside [0, V) that is not ignore_index: the CPU path fails with an error naming 'target'; the CUDA path
 * cannot check without synchronising, so that row's loss and gradient row are NaN (and with class weights W is NaN),
 * which makes a reduced loss NaN. To find such a target, validate before the call: the Python ops and modules do it
 * on request (check_targets=True: one reduction and one device-to-host read per call, an error naming 'target').
 *
 * Shapes and dtypes: logits [N, V] in {fp32, fp16, bf16}, last stride 1, any row stride >= V (or [..., V] whose leading
 * dimensions flatten to rows); target N int32 or int64 values, contiguous; weight NULL or V fp32 values, contiguous.
 * loss, z_loss, accuracy: fp32, contiguous, N elements for NONE and 1 element otherwise; z_loss and accuracy may be
 * NULL. predicted: NULL or N contiguous int64 values whatever the reduction: argmax_c x_c per row, -1 for ignored rows
 * (which are never read). grad: NULL (no gradient) or [N, V] in logits' dtype, any row stride; it may be logits itself
 * (same data and strides: the gradient written over the logits). Every math step is fp32.
 *
 * The gradient is d(loss)/d(logits) for a grad_output of 1 (MEAN's 1/W and 1/C included); tigon_cross_entropy_bwd
 * then multiplies it by grad_output in place. No synchronisation, no allocation: capturable in a CUDA graph.
 */
#ifndef TIGON_CROSS_ENTROPY_H_
#define TIGON_CROSS_ENTROPY_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TIGON_REDUCTION_NONE = 0, TIGON_REDUCTION_MEAN = 1, TIGON_REDUCTION_SUM = 2 } tigon_reduction_t;

typedef struct {
  int64_t ignore_index;   /* rows with this target are skipped (torch's default: -100) */
  float label_smoothing;  /* in [0, 1] */
  float lse_square_scale; /* z-loss coefficient, >= 0 */
  float softcap;          /* > 0 enables soft-capping; 0 disables it */
  int32_t reduction;      /* tigon_reduction_t */
  int32_t token_scaling;  /* 1: each row's loss times its detached target probability s_i (above); 0: off */
} tigon_cross_entropy_params;

/* Bytes of workspace tigon_cross_entropy_fwd needs for logits of this shape (per-row partials and the totals). */
TIGON_API tigon_status_t tigon_cross_entropy_fwd_workspace_size(const tigon_tensor* logits, size_t* bytes);

/* Loss (and optionally z_loss, accuracy, predicted, grad). stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_cross_entropy_fwd(const tigon_tensor* logits, const tigon_tensor* target,
                                                 const tigon_tensor* weight, const tigon_tensor* loss,
                                                 const tigon_tensor* z_loss, const tigon_tensor* accuracy,
                                                 const tigon_tensor* predicted, const tigon_tensor* grad,
                                                 tigon_cross_entropy_params params, void* workspace,
                                                 size_t workspace_bytes, void* stream);

/* grad *= grad_output, in place. grad_output is fp32: one element (0-d or [1]) scales everything (MEAN, SUM); N
 * elements with any stride (0 included) scale row by row (NONE). A scalar 1.0 touches no memory. */
TIGON_API tigon_status_t tigon_cross_entropy_bwd(const tigon_tensor* grad, const tigon_tensor* grad_output,
                                                 void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_CROSS_ENTROPY_H_ */
