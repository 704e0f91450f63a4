// Attention inside the library: the validated problem the C API hands to either implementation
// (include/tigon/attention.h states the math, layouts and masks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/attention.h"

namespace tigon::attention {

// One of q, k, v, o, dout, dq, dk, dv seen as [batch, seq, heads, head_dim] with the head_dim stride 1. Strides are
// in elements. Variable length: batch_stride is 0 and seq_stride steps over the packed tokens (sequence b starts at
// token cu_seqlens[b]).
struct Tensor4 {
  void* data = nullptr;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
};

struct Shape {
  DType dtype = DType::kBFloat16;
  int64_t batch = 0;                   // sequences (variable length: cu_seqlens' length - 1)
  int64_t seqlen_q = 0, seqlen_k = 0;  // dense: the lengths; variable length: max_seqlen_q / max_seqlen_k
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  // Variable length when both are set (device pointers on CUDA, host pointers on the CPU); total_* = packed rows.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0, total_k = 0;
  float scale = 1.f, softcap = 0.f;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded; causal has window_right == 0 here

  bool varlen() const { return cu_seqlens_q != nullptr; }
  int64_t group() const { return heads_q / heads_kv; }  // query heads per key/value head
};

// lse: dense [batch, heads_q, seqlen_q], variable length [heads_q, total_q]; fp32, contiguous.
inline int64_t lse_offset(const Shape& s, int64_t b, int64_t h, int64_t row_in_seq, int64_t seq_start) {
  return s.varlen() ? h * s.total_q + seq_start + row_in_seq : (b * s.heads_q + h) * s.seqlen_q + row_in_seq;
}

struct FwdProblem {
  Shape s;
  Tensor4 q, k, v, o;
  float* lse = nullptr;  // nullptr: not wanted (inference)
};

struct BwdProblem {
  Shape s;
  Tensor4 dout, q, k, v, o, dq, dk, dv;
  const float* lse = nullptr;
  bool deterministic = true;
};

// CPU reference (attention_ref.cpp): plain loops, fp64 accumulation, one rounding per output element.
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path for sm_90a. Workspace sizes depend on the shape, params and device only.
size_t fwd_cuda_workspace_bytes(const Shape& s, int device);
void fwd_cuda(const FwdProblem& p, void* workspace, size_t workspace_bytes, void* stream);
size_t bwd_cuda_workspace_bytes(const Shape& s, bool deterministic, int device);
void bwd_cuda(const BwdProblem& p, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace tigon::attention
