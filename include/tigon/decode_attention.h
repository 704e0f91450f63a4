/* Decode attention: a few new query tokens per sequence attend to a static KV cache (flash-decoding).
 *
 * Layouts. q is [batch, tq, heads_q, head_dim] (tq new tokens per sequence: 1 when decoding, up to a few for
 * speculative or chunked steps); k_cache and v_cache are [batch, s_max, heads_kv, head_dim] with any batch, position
 * and head strides (last stride 1), so a [batch, heads_kv, s_max, head_dim] cache is passed with its dimensions
 * permuted; out is like q (its own strides); lse is NULL or fp32 [batch, heads_q, tq], contiguous.
 * cache_seqlens is int32 [batch] on the tensors' device: sequence b's cache holds L_b valid positions 0 .. L_b - 1,
 * the tq new tokens' keys and values included (written there before the call). The library never reads it on the
 * host: on the CPU values outside [0, s_max] are an error, on CUDA they are clamped to that range.
 * cache_starts (NULL: all 0) is int32 [batch] like it: sequence b's keys start at position S_b, those before it (a
 * left-padded batch's padding) are never visible; 0 <= S_b <= L_b on the CPU, clamped to that range on CUDA.
 *
 * Math, per sequence b, query head h (key/value head h / (heads_q / heads_kv): grouped-query attention) and new token
 * t < tq, which sits at position i = L_b - tq + t (the causal diagonal aligned bottom-right to the cache length):
 *   s_j = scale * q . k_j;  if softcap > 0: s_j = softcap * tanh(s_j / softcap)   (Gemma 2)
 *   key j < L_b is visible when S_b <= j <= i and, with window_left >= 0, j >= i - window_left (a sliding window of
 *   window_left + 1 keys, the token's own included: Mistral's sliding_window is window_left + 1);
 *   out = sum_j p_j v_j with p_j = exp(s_j - lse) over visible keys, lse = log sum_j exp(s_j); rounded once to out's
 *   dtype. A token with no visible key (L_b < tq puts it before the cache) gets out = 0 and lse = -inf.
 *
 * Dtypes: q, k_cache, v_cache and out share one dtype: bfloat16 or float16 (float32 too on the CPU); fp32 math (fp64
 * on the CPU reference). head_dim: 64, 80, 96, 128 or 256 on CUDA (any on the CPU), with 16-byte aligned head rows
 * (every stride a multiple of 8 elements). heads_q must be a multiple of heads_kv.
 * Workspace: the CUDA path splits the cache into chunks processed in parallel (the count from the shapes and the
 * device, sized by s_max, never by cache_seqlens); each chunk writes its partial out and lse to the workspace and one
 * more pass merges them by their lse in a fixed order (the same bits on every run).
 * tigon_decode_attention_workspace_size reports the bytes (0 on the CPU).
 * Aliasing: out and lse may not overlap an input or each other.
 *
 * Appending to the cache: tigon_decode_attention_append writes the tq new tokens' keys and values where the attention
 * expects them, reading the positions on the device: k_cache[b, L_b - tq + t] = k_new[b, t] (and v likewise) for
 * t < tq, with L_b = cache_seqlens[b] (the same tensor the attention call takes). k_new and v_new are [batch, tq,
 * heads_kv, head_dim] like the caches' rows (any strides, last 1), in the caches' dtype (bf16, fp16 or fp32 on either
 * device). Positions outside [0, s_max) are not written; on the CPU L_b must lie in [0, s_max], as for the attention.
 * One kernel for both caches, launched as a programmatic dependent of the kernel before it (a decode step's RoPE), so
 * a CUDA graph of the step replays it with the positions of the moment. k_new and v_new may not overlap the caches.
 */
#ifndef TIGON_DECODE_ATTENTION_H_
#define TIGON_DECODE_ATTENTION_H_

#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float scale;         /* > 0, finite: multiplies q.k (1/sqrt(head_dim) is the usual value) */
  float softcap;       /* 0: off; > 0: scores pass through softcap * tanh(score / softcap) */
  int32_t window_left; /* -1: unbounded, else >= 0 keys to the left of each token's position */
} tigon_decode_attention_params;

/* Bytes of workspace tigon_decode_attention needs for these tensors and params (may be 0). */
TIGON_API tigon_status_t tigon_decode_attention_workspace_size(const tigon_tensor* q, const tigon_tensor* k_cache,
                                                               const tigon_tensor* v_cache,
                                                               tigon_decode_attention_params params, size_t* bytes);

/* out (and lse when not NULL); cache_starts may be NULL. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_decode_attention(const tigon_tensor* q, const tigon_tensor* k_cache,
                                                const tigon_tensor* v_cache, const tigon_tensor* cache_seqlens,
                                                const tigon_tensor* cache_starts, const tigon_tensor* out,
                                                const tigon_tensor* lse, tigon_decode_attention_params params,
                                                void* workspace, size_t workspace_bytes, void* stream);

/* Writes k_new and v_new into k_cache and v_cache at positions cache_seqlens[b] - tq + t (see above). stream: a
 * cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_decode_attention_append(const tigon_tensor* k_new, const tigon_tensor* v_new,
                                                       const tigon_tensor* k_cache, const tigon_tensor* v_cache,
                                                       const tigon_tensor* cache_seqlens, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_DECODE_ATTENTION_H_ */
