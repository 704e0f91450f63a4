/* Attention (scaled dot-product, flash style): o = softmax(mask(cap(scale * q k^T))) v, computed block by block so the
 * score matrix never exists in memory; the forward also writes lse = log(sum_j exp(s_ij)) per query row (fp32), which
 * the backward uses to recompute the probabilities.
 *
 * Layouts. Dense: q [batch, seqlen_q, heads_q, head_dim], k and v [batch, seqlen_k, heads_kv, head_dim], o like q; any
 * strides for batch, sequence and head with the last (head_dim) stride 1, so (B, S, H, D) and (B, H, S, D) tensors are
 * both accepted as they are (a (B, H, S, D) tensor is passed with its dimensions permuted to (B, S, H, D)).
 * lse is fp32 [batch, heads_q, seqlen_q], contiguous.
 * Variable length (packed sequences, padding-free training): cu_seqlens_q and cu_seqlens_k are int32 [batch + 1]
 * on the tensors' device, non-decreasing, starting at 0; q is [total_q, heads_q, head_dim], k and v [total_k, heads_kv,
 * head_dim] (any token and head strides, last stride 1); sequence b holds tokens cu_seqlens[b] .. cu_seqlens[b + 1].
 * lse is fp32 [heads_q, total_q], contiguous. max_seqlen_q / max_seqlen_k bound the lengths (the library never reads
 * cu_seqlens on the host); a sequence longer than the bound is not computed past it.
 *
 * Math, per sequence b, query head h (key/value head h / (heads_q / heads_kv): grouped-query attention without
 * repeating k and v in memory), query row i < Sq and key j < Sk:
 *   s_ij = scale * q_i . k_j;  if softcap > 0: s_ij = softcap * tanh(s_ij / softcap)   (Gemma 2)
 *   key j is visible to row i when, with shift = Sk - Sq (the causal diagonal aligned bottom-right, as a query block
 *   that continues a KV prefix needs), j <= i + shift + right (when right >= 0) and j >= i + shift - window_left (when
 *   window_left >= 0); right = 0 when causal, else window_right.
 *   p_ij = exp(s_ij - lse_i) over visible keys, lse_i = log sum_j exp(s_ij); o_i = sum_j p_ij v_j, rounded once to
 *   o's dtype. A row with no visible key gets o_i = 0 and lse_i = -inf (its gradients are 0).
 * Backward, with D_i = sum_d do_id o_id:  dv_j = sum_i p_ij do_i;  dp_ij = do_i . v_j;  ds_ij = p_ij (dp_ij - D_i),
 *   times (1 - (s_ij / softcap)^2) with a softcap;  dq_i = scale sum_j ds_ij k_j;  dk_j = scale sum_i ds_ij q_i
 *   (summed over the query heads that share a key/value head).
 *
 * Dtypes: q, k, v, o, dout, dq, dk, dv share one dtype: bf16 or fp16 (fp32 too on the CPU); accumulation in fp32
 * (fp64 on the CPU reference). head_dim: any on the CPU; 64, 96, 128 or 256 on CUDA.
 * Aliasing: no output may overlap an input. Determinism: with deterministic = 1 the backward gives the same bits on
 * every run; deterministic = 0 allows a faster order-dependent accumulation where the CUDA path has one.
 */
#ifndef TIGON_ATTENTION_H_
#define TIGON_ATTENTION_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float scale;           /* > 0, finite: multiplies q.k (1/sqrt(head_dim) is the usual value) */
  float softcap;         /* 0: off; > 0: scores pass through softcap * tanh(score / softcap) */
  int32_t causal;        /* 0 or 1 */
  int32_t window_left;   /* -1: unbounded, else >= 0 keys to the left of the diagonal */
  int32_t window_right;  /* -1: unbounded, else >= 0 keys to the right; must be -1 or 0 when causal */
  int32_t max_seqlen_q;  /* variable length only (else ignored): > 0, bounds cu_seqlens_q's lengths */
  int32_t max_seqlen_k;  /* variable length only: > 0, bounds cu_seqlens_k's lengths */
  int32_t deterministic; /* backward: 1 bitwise reproducible, 0 may accumulate in any order */
} tigon_attention_params;

/* Bytes of workspace tigon_attention_fwd needs for these tensors and params (may be 0). cu_seqlens_q and cu_seqlens_k
 * are both NULL (dense) or both given (variable length). */
TIGON_API tigon_status_t tigon_attention_fwd_workspace_size(const tigon_tensor* q, const tigon_tensor* k,
                                                            const tigon_tensor* v, const tigon_tensor* cu_seqlens_q,
                                                            const tigon_tensor* cu_seqlens_k,
                                                            tigon_attention_params params, size_t* bytes);

/* o and lse (lse may be NULL for inference). stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_attention_fwd(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v,
                                             const tigon_tensor* cu_seqlens_q, const tigon_tensor* cu_seqlens_k,
                                             const tigon_tensor* o, const tigon_tensor* lse,
                                             tigon_attention_params params, void* workspace, size_t workspace_bytes,
                                             void* stream);

/* Bytes of workspace tigon_attention_bwd needs (depends on params.deterministic). */
TIGON_API tigon_status_t tigon_attention_bwd_workspace_size(const tigon_tensor* q, const tigon_tensor* k,
                                                            const tigon_tensor* v, const tigon_tensor* cu_seqlens_q,
                                                            const tigon_tensor* cu_seqlens_k,
                                                            tigon_attention_params params, size_t* bytes);

/* dq, dk, dv (shaped like q, k, v, own strides) from dout (shaped like o) and the forward's o and lse. */
TIGON_API tigon_status_t tigon_attention_bwd(const tigon_tensor* dout, const tigon_tensor* q, const tigon_tensor* k,
                                             const tigon_tensor* v, const tigon_tensor* o, const tigon_tensor* lse,
                                             const tigon_tensor* cu_seqlens_q, const tigon_tensor* cu_seqlens_k,
                                             const tigon_tensor* dq, const tigon_tensor* dk, const tigon_tensor* dv,
                                             tigon_attention_params params, void* workspace, size_t workspace_bytes,
                                             void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_ATTENTION_H_ */
