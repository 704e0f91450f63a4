// Decode attention inside the library: the validated problem the C API hands to either implementation
// (include/tigon/decode_attention.h states the math and layouts).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/attention.h"
#include "common/tensor.h"
#include "tigon/decode_attention.h"

namespace tigon::decode_attention {

// q, out [batch, tq, heads, head_dim] or k_cache, v_cache [batch, s_max, heads, head_dim]: attention's strided view
// (element strides of the first three dimensions; head_dim's is 1).
using attention::Tensor4;

struct Shape {
  DType dtype = DType::kBFloat16;
  int64_t batch = 0, tq = 0, s_max = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  float scale = 1.f, softcap = 0.f;
  int64_t window_left = -1;  // -1: unbounded

  int64_t group() const { return heads_q / heads_kv; }
};

struct Problem {
  Shape s;
  Tensor4 q, k, v, out;
  const int32_t* seqlens = nullptr;  // [batch], device memory on CUDA
  const int32_t* starts = nullptr;   // [batch] first visible key, or nullptr (all 0)
  float* lse = nullptr;              // [batch, heads_q, tq] or nullptr
};

// New keys and values [batch, tq, heads_kv, head_dim] into the caches at positions seqlens[b] - tq + t.
struct AppendProblem {
  DType dtype = DType::kBFloat16;
  int64_t batch = 0, tq = 0, s_max = 0, heads = 0, head_dim = 0;
  Tensor4 k_new, v_new, k, v;
  const int32_t* seqlens = nullptr;  // [batch], device memory on CUDA
};

// CPU reference (decode_attention_ref.cpp): plain loops, fp64 accumulation, one rounding per output element.
void run_cpu(const Problem& p);
void append_cpu(const AppendProblem& p);

// CUDA path. The workspace depends on the shape and the device only.
size_t cuda_workspace_bytes(const Shape& s, int device);
void run_cuda(const Problem& p, void* workspace, size_t workspace_bytes, void* stream);
void append_cuda(const AppendProblem& p, void* stream);

}  // namespace tigon::decode_attention
