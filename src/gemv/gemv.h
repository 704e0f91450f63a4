// GEMV inside the library: the validated problem the C API hands to either implementation
// (include/tigon/gemv.h states the math, shapes and dtypes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/gemv.h"

namespace tigon::gemv {

constexpr int kMaxParts = 4;  // weights of one tigon_gemv_parts call

struct Problem {
  RowMatrix x;                       // M x K
  int parts = 1;                     // weights whose outputs y holds side by side (tigon_gemv_parts)
  RowMatrix w[kMaxParts];            // N_i x K, x's dtype, or int8 with w_scale (tigon_gemv_int8: one part)
  const void* bias[kMaxParts] = {};  // N_i elements in x's dtype, or nullptr
  RowMatrix y;                       // M x N, N = the parts' N_i summed
  const float* w_scale = nullptr;    // int8 w: N fp32 scales, y = (x . w[n]) * w_scale[n] (+ bias)
  int64_t n() const {
    int64_t total = 0;
    for (int i = 0; i < parts; ++i) total += w[i].rows;
    return total;
  }
};

// CPU reference (gemv_ref.cpp): fp64 accumulation, one rounding per output element.
void run_cpu(const Problem& p);

// CUDA path (gemv_cuda.cu). The workspace depends on M, N, K, the dtype and the device only.
size_t cuda_workspace_bytes(int64_t M, int64_t N, int64_t K, DType dtype, int device);
void run_cuda(const Problem& p, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace tigon::gemv
