// The MoE experts block inside the library: the validated problem both implementations take.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/moe.h"

namespace tigon::moe {

struct Problem {
  const void* x = nullptr;  // [T, H], row stride x_stride
  int64_t x_stride = 0;
  const void* ids = nullptr;  // [T, k], contiguous
  DType ids_dtype = DType::kInt64;
  const void* weights = nullptr;  // [T, k], contiguous
  DType weights_dtype = DType::kFloat32;
  const void* gate_up = nullptr;   // [E, 2I, H], contiguous
  const void* down = nullptr;      // [E, H, I], contiguous
  DType dtype = DType::kBFloat16;  // x, the expert weights, out and every gradient but dweights
  int64_t tokens = 0, k = 0, experts = 0, hidden = 0, inter = 0;
  int activation = TIGON_GLU_SILU;

  int64_t pairs() const { return tokens * k; }
};

struct Fwd {
  Problem p;
  void* out = nullptr;  // [T, H], row stride out_stride
  int64_t out_stride = 0;
};

struct Bwd {
  Problem p;
  const void* dout = nullptr;  // [T, H]
  int64_t dout_stride = 0;
  void* dx = nullptr;  // [T, H] or null
  int64_t dx_stride = 0;
  void* dweights = nullptr;  // [T, k] in weights_dtype, or null
  void* dgate_up = nullptr;  // [E, 2I, H] or null
  void* ddown = nullptr;     // [E, H, I] or null
};

void fwd_cpu(const Fwd& f);
void bwd_cpu(const Bwd& b);

// CUDA: workspace bytes, and the passes. Only bf16 and fp16, H and I multiples of 8 (the API checks).
size_t cuda_workspace_bytes(const Problem& p, bool backward);
void fwd_cuda(const Fwd& f, void* workspace, void* stream);
void bwd_cuda(const Bwd& b, void* workspace, void* stream);

}  // namespace tigon::moe
