// Int8 inference inside the library: the validated problems the C API hands to either implementation
// (include/tigon/int8.h states the math, shapes and dtypes). tigon_gemv_int8 runs the GEMV family's code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/int8.h"

namespace tigon::int8 {

struct QuantizeProblem {
  RowMatrix x;             // [M, K] float
  RowMatrix q;             // [M, K] int8
  float* scale = nullptr;  // [M]
};

struct LinearProblem {
  RowMatrix qx;                    // [M, K] int8
  RowMatrix qw;                    // [N, K] int8
  const float* scale_x = nullptr;  // [M]
  const float* scale_w = nullptr;  // [N]
  const void* bias = nullptr;      // [N] in out's dtype, or nullptr
  RowMatrix out;                   // [M, N]
  int activation = TIGON_ACT_NONE;
};

// cuBLASLt's scratch, then the int32 products [M, N] (row stride N), each 256-byte aligned.
constexpr size_t kGemmWorkspace = size_t(32) << 20;
size_t linear_workspace_bytes(int64_t M, int64_t N, bool cuda);

// CPU references (int8_ref.cpp): int64 dot products, fp64 elsewhere, the prescribed roundings.
void quantize_cpu(const QuantizeProblem& p);
void linear_cpu(const LinearProblem& p);

// CUDA path (int8_cuda.cu): the linear runs the fused sm_90 GEMM (int8_gemm_sm90.cu) where it applies.
void quantize_cuda(const QuantizeProblem& p, void* stream);
void linear_cuda(const LinearProblem& p, void* workspace, void* stream);
bool linear_fused_applies(const LinearProblem& p, int device);
void linear_fused_cuda(const LinearProblem& p, void* workspace, size_t workspace_bytes, int device, void* stream);

}  // namespace tigon::int8
