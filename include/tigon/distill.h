/* Distillation divergences between a student's logits and a teacher's distribution, with the gradient of the student's
 * logits computed in the forward (the backward is a scale by grad_output: tigon_cross_entropy_bwd).
 *
 * Per row i (T = params.temperature; rows whose label equals ignore_index are ignored: loss 0, gradient 0):
 *   student  x_c = log softmax(z / T)_c,  q_c = exp(x_c)                    (z: the student's logits)
 *   teacher  by params.teacher:  LOGITS     y_c = log softmax(t / T)_c,  p_c = exp(y_c)
 *                                LOG_PROBS  y_c = t_c,                   p_c = exp(t_c)
 *                                PROBS      y_c = log t_c,               p_c = t_c
 *   KL       sum_c p_c (y_c - x_c)                  KL(p || q), torch.nn.functional.kl_div(x, target, log_target)
 *   JSD(b)   b = 0: KL(p || q);  b = 1: KL(q || p) = sum_c q_c (x_c - y_c);
 *            else b KL(p || m) + (1 - b) KL(q || m),  m = b p + (1 - b) q   (generalised Jensen-Shannon, b = beta)
 *   TVD      0.5 sum_c |q_c - p_c|                  (total variation distance)
 * Terms whose weight (p_c in KL(p || .), q_c in KL(q || .)) is 0 contribute 0, whatever the logarithms say.
 * Gradients (for a grad_output of 1, before the reduction's scale), with S = sum_c p_c:
 *   KL       (q_c S - p_c) / T
 *   KL(q||p) q_c (x_c - y_c - L_i) / T               (L_i: the row's loss)
 *   JSD(b)   (1 - b) q_c (x_c - log m_c - K_i) / T   (K_i = KL(q || m) of the row)
 *   TVD      0.5 q_c (sign(q_c - p_c) - sum_k q_k sign(q_k - p_k)) / T
 * The teacher gets no gradient. Reductions (C = the number of rows not ignored, computed on the device; N without
 * labels): NONE loss[i] = L_i; SUM sum_i L_i; MEAN sum_i L_i / (C V) (torch's elementwise mean); BATCHMEAN
 * sum_i L_i / C. MEAN and BATCHMEAN over rows that are all ignored give NaN (0 / 0).
 *
 * Shapes and dtypes: student [N, V] (or [..., V] whose leading dimensions flatten to rows) in {fp32, fp16, bf16}, last
 * stride 1, any row stride >= V; teacher the same shape and dtype, its own row stride; labels NULL or N contiguous
 * int32 or int64 values (only compared with ignore_index). loss: fp32, contiguous, N elements for NONE, 1 otherwise.
 * grad: NULL (no gradient) or [N, V] in the student's dtype, any row stride; it may be the student or the teacher
 * itself (same data and strides: the gradient written over it). Every math step is fp32 (the CPU path: fp64).
 *
 * No synchronisation, no allocation: capturable in a CUDA graph. The CUDA path needs a workspace of
 * tigon_distill_fwd_workspace_size bytes (8-byte aligned).
 */
#ifndef TIGON_DISTILL_H_
#define TIGON_DISTILL_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TIGON_DIVERGENCE_KL = 0, TIGON_DIVERGENCE_JSD = 1, TIGON_DIVERGENCE_TVD = 2 } tigon_divergence_t;

/* What the teacher tensor holds. */
typedef enum {
  TIGON_DISTILL_TEACHER_LOGITS = 0,    /* logits: log softmax(t / T) is taken, as for the student */
  TIGON_DISTILL_TEACHER_LOG_PROBS = 1, /* log-probabilities, used as they are (torch's log_target=True) */
  TIGON_DISTILL_TEACHER_PROBS = 2      /* probabilities, used as they are (torch's log_target=False) */
} tigon_distill_teacher_t;

/* NONE, MEAN and SUM have tigon_reduction_t's values. */
typedef enum {
  TIGON_DISTILL_REDUCTION_NONE = 0,
  TIGON_DISTILL_REDUCTION_MEAN = 1,
  TIGON_DISTILL_REDUCTION_SUM = 2,
  TIGON_DISTILL_REDUCTION_BATCHMEAN = 3
} tigon_distill_reduction_t;

typedef struct {
  int32_t divergence;   /* tigon_divergence_t */
  int32_t teacher;      /* tigon_distill_teacher_t */
  int32_t reduction;    /* tigon_distill_reduction_t */
  float beta;           /* JSD's b, in [0, 1] (checked whatever the divergence) */
  float temperature;    /* > 0 and finite */
  int64_t ignore_index; /* rows whose label is this are skipped (with labels only) */
} tigon_distill_params;

/* Bytes of workspace tigon_distill_fwd needs for a student of this shape (0 on the CPU). */
TIGON_API tigon_status_t tigon_distill_fwd_workspace_size(const tigon_tensor* student, size_t* bytes);

/* Loss and optionally grad. stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_distill_fwd(const tigon_tensor* student, const tigon_tensor* teacher,
                                           const tigon_tensor* labels, const tigon_tensor* loss,
                                           const tigon_tensor* grad, tigon_distill_params params, void* workspace,
                                           size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_DISTILL_H_ */
