// The Hopper backward kernel's entry points, one per head dim (64, 128 and 256, each in its own translation unit), and
// its workspace layout. They take a problem that meets bwd_cuda's checks for this kernel (attention_bwd_cuda.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention/attention.h"
#include "attention/attention_bwd_sm90_order.h"

namespace tigon::attention::sm90 {

// Key tiles per CTA (BwdConfig::kBlockN), and a window as the kernel takes it (-1: unbounded).
inline int bwd_block_n(const Shape& s) { return s.head_dim == 256 ? 64 : 128; }
inline int bwd_window(const Shape& s, int64_t w) { return w < 0 || w >= s.seqlen_q + s.seqlen_k ? -1 : int(w); }

// The deterministic mode's segments (BwdSegments) are used for dense masks bounded on the right (causal, sliding
// window); packed sequences and the other masks keep one.
inline BwdSegments bwd_segments(const Shape& s, bool deterministic) {
  const int right = bwd_window(s, s.window_right);
  if (!deterministic || s.varlen() || right < 0) return {};
  return BwdSegments::of(BandTiles{int(s.seqlen_q), int(s.seqlen_k), int(s.seqlen_k - s.seqlen_q),
                                   bwd_window(s, s.window_left), right, 64, bwd_block_n(s), false});
}

// Byte offsets into the workspace. Per query head, padded query tiles of 64 rows: dense sequences b * ceil(seqlen_q
// / 64) + m, packed ones cu_seqlens_q[b] / 64 + b + m (so that no two sequences share a tile). The second segment's
// accumulator and semaphores: (head * batch + b) * tiles1 + m - m1.
struct BwdWorkspace {
  int64_t tiles_per_head = 0;
  BwdSegments segments;
  size_t lse_log2 = 0, delta = 0, dq_accum = 0, dq_accum1 = 0, semaphores = 0, semaphores1 = 0, bytes = 0;
};

inline BwdWorkspace bwd_workspace(const Shape& s, bool deterministic) {
  constexpr int64_t kBlockM = 64;
  auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  BwdWorkspace w;
  w.tiles_per_head = s.varlen() ? s.total_q / kBlockM + s.batch + 2 : s.batch * ((s.seqlen_q + kBlockM - 1) / kBlockM);
  w.segments = bwd_segments(s, deterministic);
  const size_t tiles = size_t(w.tiles_per_head) * size_t(s.heads_q);
  const size_t tiles1 = size_t(w.segments.tiles1) * size_t(s.heads_q) * size_t(s.batch);
  const size_t tile_bytes = kBlockM * size_t(s.head_dim) * sizeof(float);
  w.lse_log2 = 0;
  w.delta = align(w.lse_log2 + tiles * kBlockM * sizeof(float));
  w.dq_accum = align(w.delta + tiles * kBlockM * sizeof(float));
  w.dq_accum1 = align(w.dq_accum + tiles * tile_bytes);
  w.semaphores = align(w.dq_accum1 + tiles1 * tile_bytes);
  w.semaphores1 = align(w.semaphores + tiles * sizeof(int));
  w.bytes = align(w.semaphores1 + tiles1 * sizeof(int));
  return w;
}

void bwd_hdim64(const BwdProblem& p, void* workspace, cudaStream_t stream);
void bwd_hdim128(const BwdProblem& p, void* workspace, cudaStream_t stream);
void bwd_hdim256(const BwdProblem& p, void* workspace, cudaStream_t stream);

}  // namespace tigon::attention::sm90
