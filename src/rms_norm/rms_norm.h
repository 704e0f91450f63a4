// RMSNorm inside the library: the validated problem the C API hands to either implementation.
#pragma once

#include <cstddef>

#include "common/tensor.h"
#include "tigon/rms_norm.h"

namespace tigon::rms_norm {

struct FwdProblem {
  RowMatrix x, y;
  bool add = false;  // fused residual add: h = x + res, and the norm of h
  RowMatrix res, h;
  const void* w = nullptr;  // nullptr: no weight
  DType w_dtype = DType::kFloat32;
  float* rstd = nullptr;  // nullptr: not saved
  float eps = 1e-6f, offset = 0.f;
  int mode = TIGON_RMS_NORM_LLAMA;
};

struct BwdProblem {
  RowMatrix dy, x, dx;  // x: the norm's input (h for the fused residual add)
  bool add_dh = false;  // dx += dh
  RowMatrix dh;
  const void* w = nullptr;
  DType w_dtype = DType::kFloat32;
  const float* rstd = nullptr;
  void* dw = nullptr;  // nullptr: dw not wanted
  DType dw_dtype = DType::kFloat32;
  float offset = 0.f;
  int mode = TIGON_RMS_NORM_LLAMA;
};

// CPU reference: fp64 accumulation, the casting mode's roundings reproduced exactly. rms_norm_ref.cpp.
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (rms_norm_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* stream);
// Upper bound on the fp32 dw partial sums the backward writes (depends on x's shape and dtype and the device).
size_t bwd_cuda_workspace_bytes(const RowMatrix& x, int device);
void bwd_cuda(const BwdProblem& p, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace tigon::rms_norm
