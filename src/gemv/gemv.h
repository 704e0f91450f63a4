// GEMV inside the library: the validated problem the C API hands to either implementation
// (include/tigon/gemv.h states the math, shapes and dtypes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/gemv.h"

namespace tigon::gemv {

struct Problem {
  RowMatrix x;                     // M x K
  RowMatrix w;                     // N x K, x's dtype, or int8 with w_scale (tigon_gemv_int8)
  RowMatrix y;                     // M x N
  const void* bias = nullptr;      // N elements in x's dtype, or nullptr
  const float* w_scale = nullptr;  // int8 w: N fp32 scales, y = (x . w[n]) * w_scale[n] (+ bias)
};

// CPU reference (gemv_ref.cpp): fp64 accumulation, one rounding per output element.
void run_cpu(const Problem& p);

// CUDA path (gemv_cuda.cu). The workspace depends on M, N, K, the dtype and the device only.
size_t cuda_workspace_bytes(int64_t M, int64_t N, int64_t K, DType dtype, int device);
void run_cuda(const Problem& p, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace tigon::gemv
