// What the attention backward's CUDA launchers take: the validated problem flattened into kernel arguments, and one
// launcher per dtype (each in its own translation unit so the two compile in parallel).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tigon::attention::bwd {

// One [batch, seq, heads, head_dim] tensor: its data and element strides (head_dim stride 1; variable length: batch
// stride 0). Outputs too: the kernels cast the pointer back to writable.
struct View {
  const void* data = nullptr;
  int64_t batch = 0, seq = 0, head = 0;
};

struct Params {
  View q, k, v, o, dout, dq, dk, dv;
  const float* lse = nullptr;
  // Workspace, both in lse's layout: lse * log2(e) with -inf (a row that sees no key) turned into +inf so that its
  // probabilities come out 0, and delta_i = sum_d dout_id * o_id.
  float* lse_log2 = nullptr;
  float* delta = nullptr;
  const int32_t* cu_seqlens_q = nullptr;  // both null: dense
  const int32_t* cu_seqlens_k = nullptr;
  int batch = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int max_seqlen_q = 0, max_seqlen_k = 0;  // dense: the lengths
  int64_t rows_q = 0;                      // lse rows per head: variable length total_q, dense batch * seqlen_q
  float scale = 1.f, softcap = 0.f;
  int window_left = -1, window_right = -1;  // right already 0 when causal
  bool aligned16 = false;                   // every q, k, v, dout row starts on a 16-byte boundary
};

void launch_bf16(const Params& p, cudaStream_t stream);
void launch_f16(const Params& p, cudaStream_t stream);

}  // namespace tigon::attention::bwd
