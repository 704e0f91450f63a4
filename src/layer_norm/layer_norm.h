// LayerNorm inside the library: the validated problem the C API hands to either implementation.
#pragma once

#include <cstddef>

#include "common/tensor.h"
#include "tigon/layer_norm.h"

namespace tigon::layer_norm {

struct FwdProblem {
  RowMatrix x, y;
  const void* w = nullptr;          // nullptr: scale 1
  const void* b = nullptr;          // nullptr: shift 0
  DType p_dtype = DType::kFloat32;  // dtype of weight and bias (x's when both are absent)
  float* mean = nullptr;            // both nullptr: statistics not saved
  float* rstd = nullptr;
  float eps = 1e-5f;
};

struct BwdProblem {
  RowMatrix dy, x, dx;
  const void* w = nullptr;
  DType w_dtype = DType::kFloat32;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dw = nullptr;  // nullptr: dw not wanted
  DType dw_dtype = DType::kFloat32;
  void* db = nullptr;  // nullptr: db not wanted
  DType db_dtype = DType::kFloat32;
};

// CPU reference: fp64 accumulation, one rounding per output. layer_norm_ref.cpp.
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (layer_norm_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* stream);
// Upper bound on the fp32 dw and db partial sums the backward writes (depends on x's shape and dtype and the device).
size_t bwd_cuda_workspace_bytes(const RowMatrix& x, int device);
void bwd_cuda(const BwdProblem& p, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace tigon::layer_norm
