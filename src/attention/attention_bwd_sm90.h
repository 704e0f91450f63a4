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
  size_t lse_log2 = 0, delta = 0, dq_accum = 0, semaphores = 0, bytes = 0;
};

inline BwdWorkspace bwd_workspace(const Shape& s) {
  constexpr int64_t kBlockM = 64;
  auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  BwdWorkspace w;
  w.tiles_per_head = s.varlen() ? s.total_q / kBlockM + s.batch + 2 : s.batch * ((s.seqlen_q + kBlockM - 1) / kBlockM);
  const size_t tiles = size_t(w.tiles_per_head) * size_t(s.heads_q);
  w.lse_log2 = 0;
  w.delta = align(w.lse_log2 + tiles * kBlockM * sizeof(float));
  w.dq_accum = align(w.delta + tiles * kBlockM * sizeof(float));
  w.semaphores = align(w.dq_accum + tiles * kBlockM * size_t(s.head_dim) * sizeof(float));
  w.bytes = align(w.semaphores + tiles * sizeof(int));
  return w;
}

void bwd_hdim64(const BwdProblem& p, void* workspace, cudaStream_t stream);
void bwd_hdim128(const BwdProblem& p, void* workspace, cudaStream_t stream);
void bwd_hdim256(const BwdProblem& p, void* workspace, cudaStream_t stream);

}  // namespace tigon::attention::sm90
