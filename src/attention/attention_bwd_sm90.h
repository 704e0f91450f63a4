// The Hopper backward kernel's entry points, one per head dim (64, 128 and 256, each in its own translation unit), and
// its workspace layout. They take a problem that meets bwd_cuda's checks for this kernel (attention_bwd_cuda.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention/attention.h"

namespace tigon::attention::sm90 {

// Byte offsets into the workspace. Per query head, padded query tiles of 64 rows: dense sequences b * ceil(seqlen_q
// / 64) + m, packed ones cu_seqlens_q[b] / 64 + b + m (so that no two sequences share a tile).
struct BwdWorkspace {
  int64_t tiles_per_head = 0;
  int accumulators = 1;  // dq accumulators (and semaphore arrays), one per segment of key tiles
  size_t lse_log2 = 0, delta = 0, dq_accum = 0, semaphores = 0, bytes = 0;
};

// The deterministic mode with a mask bounded on the right (causal, sliding window) splits each pair's key tiles into
// two segments, each with its own dq accumulator and order of adds (attention_bwd_sm90_order.h).
inline bool bwd_segmented(const Shape& s, bool deterministic) {
  return deterministic && s.window_right >= 0 && s.window_right < s.seqlen_q + s.seqlen_k;
}

inline BwdWorkspace bwd_workspace(const Shape& s, bool deterministic) {
  constexpr int64_t kBlockM = 64;
  auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  BwdWorkspace w;
  w.tiles_per_head = s.varlen() ? s.total_q / kBlockM + s.batch + 2 : s.batch * ((s.seqlen_q + kBlockM - 1) / kBlockM);
  const size_t tiles = size_t(w.tiles_per_head) * size_t(s.heads_q);
  w.lse_log2 = 0;
  w.delta = align(w.lse_log2 + tiles * kBlockM * sizeof(float));
  w.dq_accum = align(w.delta + tiles * kBlockM * sizeof(float));
  w.accumulators = bwd_segmented(s, deterministic) ? 2 : 1;
  w.semaphores = align(w.dq_accum + w.accumulators * tiles * kBlockM * size_t(s.head_dim) * sizeof(float));
  w.bytes = align(w.semaphores + w.accumulators * tiles * sizeof(int));
  return w;
}

void bwd_hdim64(const BwdProblem& p, void* workspace, cudaStream_t stream);
void bwd_hdim128(const BwdProblem& p, void* workspace, cudaStream_t stream);
void bwd_hdim256(const BwdProblem& p, void* workspace, cudaStream_t stream);

}  // namespace tigon::attention::sm90
